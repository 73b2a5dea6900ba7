//! The Bucket controller's own metrics: provider calls by service, operation and outcome
//! (all from fixed sets, so the series are bounded), the time a Bucket takes to become
//! Ready, and two aggregates over the access keys of Buckets with `spec.keyRotation`: how
//! many are overdue for replacement, and when the oldest key in use was created. No series
//! names a Bucket, so a tenant creating Buckets adds no series; which Buckets are overdue is
//! in their status (docs/operations.md, KopperBucketKeyRotationOverdue).
//!
//! The call counters and the histogram are process-wide, like the replication engine's
//! latency histogram; the key aggregates are computed at each scrape from [`KeyAges`], kept
//! per [`crate::runtime::Metrics`] so that operators sharing a process (the tests') count
//! apart. Both are registered by [`register_metrics`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::rotation::Schedule;
use crate::runtime::metrics::Registration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub service: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

pub static PROVIDER_CALLS: LazyLock<Family<ProviderCallLabels, Counter>> = LazyLock::new(Family::default);

/// The key in use of a Bucket with a valid `spec.keyRotation`, in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAge {
    /// When the key was created, as the provider said.
    pub created: i64,
    /// When it is due for replacement: `maxKeyAge - gracePeriod` after `created`
    /// ([`Schedule::in_use_for`]).
    pub replace_at: i64,
}

impl KeyAge {
    /// The key created at `created` under `schedule`; `None` without either (no schedule, or
    /// no key yet, or a provider that does not say when a key was made).
    pub fn of(created: Option<Timestamp>, schedule: Option<&Schedule>) -> Option<Self> {
        let (created, schedule) = (created?.as_second(), schedule?);
        let in_use_for = i64::try_from(schedule.in_use_for().as_secs()).unwrap_or(i64::MAX);
        Some(Self { created, replace_at: created.saturating_add(in_use_for) })
    }
}

/// What the key aggregates say at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyTally {
    /// Keys in use past their replacement time: kopper should have replaced them.
    pub overdue: i64,
    /// When the oldest key in use was created; `None` when no Bucket has a schedule and a key.
    pub oldest_created: Option<i64>,
}

/// The aggregates of `keys` at `now` (Unix seconds). A key is overdue once `now` is past its
/// replacement time: the pass kopper schedules for that moment replaces it at once, so one
/// that stays overdue means rotation is held up.
pub fn tally(keys: impl IntoIterator<Item = KeyAge>, now: i64) -> KeyTally {
    keys.into_iter().fold(KeyTally::default(), |tally, key| KeyTally {
        overdue: tally.overdue + i64::from(now > key.replace_at),
        oldest_created: Some(tally.oldest_created.map_or(key.created, |oldest| oldest.min(key.created))),
    })
}

/// The key in use of every Bucket with a schedule and a key, by Bucket uid, as the Bucket's
/// last pass saw it (its `status.keyCreated`, then the key the pass left in the Secret). In
/// memory only: one small entry per scheduled Bucket, removed when the Bucket goes, its
/// schedule goes or its deletion starts. After a restart every Bucket's first pass fills it
/// again from status, before any call to the provider that could fail.
#[derive(Debug, Default)]
pub struct KeyAges {
    by_uid: Mutex<HashMap<String, KeyAge>>,
}

impl KeyAges {
    /// Records the key in use of the Bucket `uid` if `exists()` still says the Bucket is
    /// there; `None` forgets the Bucket. `exists` is asked under the same lock as
    /// [`KeyAges::forget`] takes: a pass that ends as its Bucket is deleted either sees the
    /// Bucket gone or records before the deletion forgets it, so no entry outlives its Bucket.
    pub fn set(&self, uid: &str, key: Option<KeyAge>, exists: impl FnOnce() -> bool) {
        let Ok(mut by_uid) = self.by_uid.lock() else { return };
        match key {
            Some(key) if exists() => {
                by_uid.insert(uid.to_owned(), key);
            }
            _ => {
                by_uid.remove(uid);
            }
        }
    }

    /// Forgets the Bucket `uid`: it is gone, or being deleted.
    pub fn forget(&self, uid: &str) {
        self.set(uid, None, || false);
    }

    pub fn tally(&self, now: i64) -> KeyTally {
        self.by_uid.lock().map(|by_uid| tally(by_uid.values().copied(), now)).unwrap_or_default()
    }
}

/// Encodes [`KeyAges`]' aggregates at each scrape: whether a key is overdue changes with the
/// clock alone, with no pass to set a gauge.
#[derive(Debug)]
struct KeyAgesCollector(Arc<KeyAges>);

impl Collector for KeyAgesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let tally = self.0.tally(Timestamp::now().as_second());
        let overdue = ConstGauge::new(tally.overdue);
        let metric = encoder.encode_descriptor(
            "bucket_access_keys_rotation_overdue",
            "Buckets with spec.keyRotation whose access key in use is past maxKeyAge - gracePeriod, \
             so kopper should have replaced it",
            None,
            overdue.metric_type(),
        )?;
        overdue.encode(metric)?;
        if let Some(oldest) = tally.oldest_created {
            let oldest = ConstGauge::new(oldest);
            let metric = encoder.encode_descriptor(
                "bucket_oldest_access_key_created_timestamp_seconds",
                "When the oldest access key in use among Buckets with spec.keyRotation was created, \
                 in Unix seconds; absent when there is none",
                None,
                oldest.metric_type(),
            )?;
            oldest.encode(metric)?;
        }
        Ok(())
    }
}

/// Seconds from a Bucket's creation to its first Ready.
pub static READY_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.05, 2.0, 14)));

pub fn count_provider_call(service: &'static str, operation: &'static str, outcome: &'static str) {
    PROVIDER_CALLS.get_or_create(&ProviderCallLabels { service, operation, outcome }).inc();
}

/// Registers the controller's metrics and keeps its [`KeyAges`] with `registration`, where
/// the controller finds them ([`crate::runtime::Metrics::kept`]).
pub fn register_metrics(registration: &mut Registration<'_>) {
    let registry = &mut *registration.registry;
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
    let key_ages = Arc::new(KeyAges::default());
    registry.register_collector(Box::new(KeyAgesCollector(key_ages.clone())));
    registration.keep(key_ages);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::Metrics;

    const START: i64 = 1_800_000_000;
    const SCHEDULE: Schedule =
        Schedule { max_age: Duration::from_secs(7200), grace: Duration::from_secs(600) };

    fn key(created: i64) -> KeyAge {
        KeyAge::of(Timestamp::from_second(created).ok(), Some(&SCHEDULE)).unwrap()
    }

    #[test]
    fn a_key_is_due_for_replacement_max_age_less_grace_after_its_creation() {
        assert_eq!(key(START), KeyAge { created: START, replace_at: START + 6600 });
        let created = Timestamp::from_second(START).ok();
        assert_eq!(KeyAge::of(created, None), None, "no schedule, nothing to be overdue for");
        assert_eq!(KeyAge::of(None, Some(&SCHEDULE)), None, "no key (or no creation time) yet");
    }

    #[test]
    fn only_keys_past_their_replacement_time_are_overdue() {
        let keys = [key(START), key(START + 100), key(START + 5000)];
        assert_eq!(tally([], START), KeyTally { overdue: 0, oldest_created: None });
        let at = |now| tally(keys, now);
        assert_eq!(at(START + 6600), KeyTally { overdue: 0, oldest_created: Some(START) }, "due, not past");
        assert_eq!(at(START + 6601).overdue, 1);
        assert_eq!(at(START + 6701).overdue, 2);
        assert_eq!(at(START + 11_601).overdue, 3);
        assert_eq!(tally([key(START + 100), key(START)], START).oldest_created, Some(START), "in any order");
    }

    #[test]
    fn a_bucket_counts_once_and_not_after_it_is_forgotten() {
        let ages = KeyAges::default();
        let there = || true;
        ages.set("uid-a", Some(key(START)), there);
        ages.set("uid-a", Some(key(START)), there);
        ages.set("uid-b", Some(key(START + 7000)), there);
        assert_eq!(ages.tally(START + 7000), KeyTally { overdue: 1, oldest_created: Some(START) });
        // Rotated: the new key replaces the old one's entry.
        ages.set("uid-a", Some(key(START + 6601)), there);
        assert_eq!(ages.tally(START + 7000), KeyTally { overdue: 0, oldest_created: Some(START + 6601) });
        ages.set("uid-a", None, there);
        ages.forget("uid-b");
        assert_eq!(ages.tally(START + 100_000), KeyTally::default());
        // A pass that ends after its Bucket left the cache records nothing.
        ages.set("uid-c", Some(key(START)), || false);
        assert_eq!(ages.tally(START + 100_000), KeyTally::default());
    }

    #[test]
    fn the_aggregates_are_exported_without_object_names_and_the_oldest_only_when_there_is_one() {
        let metrics = Metrics::new(register_metrics);
        let ages = metrics.kept::<KeyAges>().expect("kept at registration");
        let series = |metrics: &Metrics| {
            let text = metrics.encode();
            text.lines()
                .filter(|line| line.starts_with("kopper_bucket_") && line.contains("access_key"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(series(&metrics), ["kopper_bucket_access_keys_rotation_overdue 0"]);
        let now = Timestamp::now().as_second();
        ages.set("uid-a", Some(KeyAge { created: now - 100, replace_at: now - 10 }), || true);
        ages.set("uid-b", Some(KeyAge { created: now, replace_at: now + 3600 }), || true);
        assert_eq!(
            series(&metrics),
            [
                "kopper_bucket_access_keys_rotation_overdue 1".to_owned(),
                format!("kopper_bucket_oldest_access_key_created_timestamp_seconds {}", now - 100),
            ]
        );
    }
}
