//! The Bucket controller's own metrics: provider calls by service, operation and outcome
//! (all from fixed sets, so the series are bounded), and the time a Bucket takes to become
//! Ready. Process-wide like the replication engine's latency histogram, registered by
//! [`register_metrics`].

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub service: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

pub static PROVIDER_CALLS: LazyLock<Family<ProviderCallLabels, Counter>> = LazyLock::new(Family::default);

/// Seconds from a Bucket's creation to its first Ready.
pub static READY_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.05, 2.0, 14)));

pub fn count_provider_call(service: &'static str, operation: &'static str, outcome: &'static str) {
    PROVIDER_CALLS.get_or_create(&ProviderCallLabels { service, operation, outcome }).inc();
}

pub fn register_metrics(registry: &mut Registry) {
    registry.register(
        "bucket_provider_calls",
        "S3 and IAM calls made by the Bucket controller, by service, operation and outcome",
        PROVIDER_CALLS.clone(),
    );
    registry.register(
        "bucket_ready_seconds",
        "Time from a Bucket's creation to its first Ready",
        READY_SECONDS.clone(),
    );
}
