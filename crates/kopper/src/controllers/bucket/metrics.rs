//! The Bucket controller's own metrics: provider calls by service, operation and outcome
//! (all from fixed sets, so the series are bounded), the time a Bucket takes to become
//! Ready, and per Bucket the age of its access key against its schedule. The last are the
//! only series labelled with object names: an alert on a key about to outlive its maximum age
//! must say which Bucket's; there is one series of each per Bucket, removed with the Bucket.
//! Process-wide like the replication engine's latency histogram, registered by
//! [`register_metrics`].

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::rotation::Schedule;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub service: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

pub static PROVIDER_CALLS: LazyLock<Family<ProviderCallLabels, Counter>> = LazyLock::new(Family::default);

/// Which Bucket a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BucketLabels {
    pub namespace: String,
    pub name: String,
}

/// When the access key in each Bucket's Secret was created, in Unix seconds.
pub static KEY_CREATED: LazyLock<Family<BucketLabels, Gauge>> = LazyLock::new(Family::default);
/// Each scheduled Bucket's `spec.keyRotation.maxKeyAge`, in seconds.
pub static KEY_MAX_AGE: LazyLock<Family<BucketLabels, Gauge>> = LazyLock::new(Family::default);
/// Each scheduled Bucket's `spec.keyRotation.gracePeriod`, in seconds.
pub static KEY_GRACE_PERIOD: LazyLock<Family<BucketLabels, Gauge>> = LazyLock::new(Family::default);

/// Publishes the key in use of the Bucket `labels` names: its creation time (when the provider
/// told it) and its schedule (when it has one); what is `None` is removed.
pub fn set_key_gauges(labels: &BucketLabels, created_unix: Option<i64>, schedule: Option<&Schedule>) {
    let set = |family: &Family<BucketLabels, Gauge>, value: Option<i64>| {
        if let Some(value) = value {
            family.get_or_create(labels).set(value);
        } else {
            family.remove(labels);
        }
    };
    let seconds = |duration: Duration| i64::try_from(duration.as_secs()).unwrap_or(i64::MAX);
    set(&KEY_CREATED, created_unix);
    set(&KEY_MAX_AGE, schedule.map(|schedule| seconds(schedule.max_age)));
    set(&KEY_GRACE_PERIOD, schedule.map(|schedule| seconds(schedule.grace)));
}

/// Removes the series of a Bucket that is gone.
pub fn forget_key_gauges(labels: &BucketLabels) {
    set_key_gauges(labels, None, None);
}

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
    registry.register(
        "bucket_access_key_created_timestamp_seconds",
        "When the access key in each Bucket's Secret was created, in Unix seconds",
        KEY_CREATED.clone(),
    );
    registry.register(
        "bucket_access_key_max_age_seconds",
        "The longest an access key of each Bucket with spec.keyRotation may live",
        KEY_MAX_AGE.clone(),
    );
    registry.register(
        "bucket_access_key_grace_period_seconds",
        "How long the old key of each Bucket with spec.keyRotation works after its successor is in the Secret",
        KEY_GRACE_PERIOD.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_s_key_series_go_with_its_schedule_and_with_the_bucket() {
        let mut registry = Registry::with_prefix("kopper");
        register_metrics(&mut registry);
        let labels = BucketLabels { namespace: "metrics-test".into(), name: "b".into() };
        let schedule = Schedule { max_age: Duration::from_secs(7200), grace: Duration::from_secs(600) };
        let text = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text.lines().filter(|line| line.contains("metrics-test")).map(str::to_owned).collect::<Vec<_>>()
        };
        set_key_gauges(&labels, Some(1_800_000_000), Some(&schedule));
        let series = text(&registry);
        for expected in [
            "kopper_bucket_access_key_created_timestamp_seconds{namespace=\"metrics-test\",name=\"b\"} 1800000000",
            "kopper_bucket_access_key_max_age_seconds{namespace=\"metrics-test\",name=\"b\"} 7200",
            "kopper_bucket_access_key_grace_period_seconds{namespace=\"metrics-test\",name=\"b\"} 600",
        ] {
            assert!(series.iter().any(|line| line == expected), "{expected} in {series:?}");
        }
        set_key_gauges(&labels, Some(1_800_000_000), None);
        assert_eq!(text(&registry).len(), 1, "only the creation time without a schedule");
        forget_key_gauges(&labels);
        assert!(text(&registry).is_empty());
    }
}
