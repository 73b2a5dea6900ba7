//! The guard on access key creation: whatever makes a Bucket want one key after another (a
//! Secret another controller keeps rewriting, a key deleted by hand again and again, rotation
//! requests in a loop), kopper issues at most one key per Bucket per interval. IAM throttles
//! per account, so a loop on one Bucket would slow every tenant's; and each key it makes is a
//! credential that could leak.
//!
//! The record of when each Bucket last got a key is held in memory: it is lost on a restart,
//! which then allows one key at once, so a crash loop is bounded by the restart backoff. It
//! holds only keys issued within the interval, so its size is bounded by how many keys kopper
//! can issue in one interval, not by how many Buckets exist.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Whether a new access key may be issued for a Bucket now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyIssue {
    Allowed,
    /// A rotation was asked for within the interval: it waits this long.
    RotationWaits(Duration),
    /// A key is needed again, unasked, within the interval: something keeps undoing kopper's
    /// work; nothing is issued for this long.
    Churn(Duration),
}

/// The pure decision: `last` is when this Bucket last got a key, `rotation` whether the new
/// key is one the tenant asked for.
pub fn key_issue(last: Option<Instant>, now: Instant, interval: Duration, rotation: bool) -> KeyIssue {
    let Some(last) = last else { return KeyIssue::Allowed };
    let elapsed = now.saturating_duration_since(last);
    if elapsed >= interval {
        return KeyIssue::Allowed;
    }
    let wait = interval - elapsed;
    if rotation { KeyIssue::RotationWaits(wait) } else { KeyIssue::Churn(wait) }
}

/// When each Bucket (by uid) last got a key, within the last interval.
#[derive(Debug, Default)]
pub struct KeyLedger {
    interval: Duration,
    issued: Mutex<HashMap<String, Instant>>,
}

impl KeyLedger {
    pub fn new(interval: Duration) -> Self {
        Self { interval, issued: Mutex::default() }
    }

    /// The decision for the Bucket `uid` now.
    pub fn check(&self, uid: &str, rotation: bool) -> KeyIssue {
        let last = self.issued.lock().map(|issued| issued.get(uid).copied()).unwrap_or_default();
        key_issue(last, Instant::now(), self.interval, rotation)
    }

    /// Records a key issued for the Bucket `uid`, forgetting what is older than the interval.
    /// A CreateAccessKey whose answer was lost counts too; one the provider refused does not.
    pub fn record(&self, uid: &str) {
        let now = Instant::now();
        if let Ok(mut issued) = self.issued.lock() {
            issued.retain(|_, at| now.saturating_duration_since(*at) < self.interval);
            issued.insert(uid.to_owned(), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(300);

    #[test]
    fn the_first_key_and_one_after_the_interval_are_issued() {
        let now = Instant::now();
        assert_eq!(key_issue(None, now, INTERVAL, false), KeyIssue::Allowed);
        assert_eq!(key_issue(None, now, INTERVAL, true), KeyIssue::Allowed);
        let later = now + INTERVAL;
        assert_eq!(key_issue(Some(now), later, INTERVAL, false), KeyIssue::Allowed);
        assert_eq!(key_issue(Some(now), later, INTERVAL, true), KeyIssue::Allowed);
    }

    #[test]
    fn a_second_key_within_the_interval_waits_for_its_end() {
        let now = Instant::now();
        let soon = now + Duration::from_secs(60);
        assert_eq!(key_issue(Some(now), soon, INTERVAL, false), KeyIssue::Churn(Duration::from_secs(240)));
        assert_eq!(
            key_issue(Some(now), soon, INTERVAL, true),
            KeyIssue::RotationWaits(Duration::from_secs(240))
        );
    }

    #[test]
    fn the_ledger_refuses_a_second_key_for_the_same_bucket_only() {
        let ledger = KeyLedger::new(INTERVAL);
        assert_eq!(ledger.check("u1", false), KeyIssue::Allowed);
        ledger.record("u1");
        assert!(matches!(ledger.check("u1", false), KeyIssue::Churn(_)));
        assert!(matches!(ledger.check("u1", true), KeyIssue::RotationWaits(_)));
        assert_eq!(ledger.check("u2", false), KeyIssue::Allowed);
    }

    #[test]
    fn the_ledger_forgets_what_is_older_than_the_interval() {
        let ledger = KeyLedger::new(Duration::ZERO);
        ledger.record("u1");
        ledger.record("u2");
        assert_eq!(ledger.issued.lock().unwrap().len(), 1, "u1 is forgotten when u2 is recorded");
        assert_eq!(ledger.check("u2", false), KeyIssue::Allowed);
    }
}
