//! The replication engine's own metrics, registered by the engine under the `kopper_`
//! prefix next to the runtime's. The per-controller gauges the engine shares with other
//! controllers (conflicts, rules not ready, objects written, cached objects) stay in
//! [`crate::runtime::metrics`].

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, LazyLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::runtime::metrics::{KindLabels, Registration};

/// Seconds from kopper seeing a source change to the last of its copies written.
/// Process-wide, like the Bucket controller's metrics.
pub static SOURCE_TO_COPY_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.005, 2.0, 14)));

type IntGauge = Gauge<i64, AtomicI64>;

/// A scoped watch's kind and what it covers (`namespace`, `name` or `cluster`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopedWatchLabels {
    pub kind: String,
    pub scope: String,
}

/// The engine's gauges, one set per [`crate::runtime::Metrics`]: they describe one
/// engine's caches.
#[derive(Default)]
pub struct ReplicationMetrics {
    pub scoped_watches: Family<ScopedWatchLabels, IntGauge>,
    pub cached_source_contents: Family<KindLabels, IntGauge>,
}

/// Registers the engine's own metrics and keeps its gauges with `registration`, where the
/// engine finds them ([`crate::runtime::Metrics::kept`]).
pub fn register_metrics(registration: &mut Registration<'_>) {
    let registry = &mut *registration.registry;
    registry.register(
        "replication_source_to_copy_seconds",
        "Time from a source change seen to its last copy written",
        SOURCE_TO_COPY_SECONDS.clone(),
    );
    let gauges = Arc::new(ReplicationMetrics::default());
    registry.register(
        "cached_source_contents",
        "Sources whose content the replication engine holds, by kind; only sources some rule copies",
        gauges.cached_source_contents.clone(),
    );
    registry.register(
        "scoped_watches",
        "Watches open on what rules need, by kind and scope (namespace, name, cluster); each is a connection",
        gauges.scoped_watches.clone(),
    );
    registration.keep(gauges);
}
