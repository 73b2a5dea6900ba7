//! Admission of Buckets to a class with a quota (`maxBucketsPerNamespace`), race-free within a
//! replica (only the lease holder writes): the check of a Bucket not yet bound to its class and
//! the status write that binds it (`status.className`) happen under one lock per (namespace,
//! class), and a Bucket admitted here counts as bound until the cache shows its status, so that
//! a pass reading a cache that lags behind cannot give the last place twice. The ranking itself
//! is [`super::class::ranked_ahead`].

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use super::name_locks::{NameGuard, NameLocks};

/// The per-(namespace, class) admission locks and the Buckets admitted by this replica.
#[derive(Debug, Default)]
pub struct Admissions {
    locks: NameLocks,
    /// By `namespace/class`: the uids of Buckets admitted here, until they are gone.
    admitted: Mutex<HashMap<String, HashSet<String>>>,
}

/// The key of one class's places in one namespace.
pub fn key(namespace: &str, class: &str) -> String {
    format!("{namespace}/{class}")
}

impl Admissions {
    /// Held from the quota check of an unbound Bucket until its binding is written.
    pub async fn lock(&self, key: &str) -> NameGuard {
        self.locks.lock(key).await
    }

    /// Whether this replica admitted the Bucket `uid` to the places of `key`.
    pub fn admitted(&self, key: &str, uid: &str) -> bool {
        let admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
        admitted.get(key).is_some_and(|uids| uids.contains(uid))
    }

    /// Records that the Bucket `uid` took one of the places of `key`.
    pub fn admit(&self, key: &str, uid: &str) {
        let mut admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
        admitted.entry(key.to_owned()).or_default().insert(uid.to_owned());
    }

    /// Keeps, of the Buckets admitted to `key`, only those in `live` (the uids the cache still
    /// holds): a Bucket gone, whether its deletion was seen or lost in a relist, frees its entry.
    pub fn keep_only(&self, key: &str, live: &HashSet<String>) {
        let mut admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(uids) = admitted.get_mut(key) {
            uids.retain(|uid| live.contains(uid));
            if uids.is_empty() {
                admitted.remove(key);
            }
        }
    }

    /// Forgets a Bucket that is gone, wherever it was admitted.
    pub fn forget(&self, uid: &str) {
        let mut admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
        admitted.retain(|_, uids| {
            uids.remove(uid);
            !uids.is_empty()
        });
    }

    /// How many (namespace, class) entries are held (for tests of the bound).
    pub fn len(&self) -> usize {
        self.admitted.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admitted_bucket_counts_until_it_is_gone_and_its_entry_goes_with_it() {
        let admissions = Admissions::default();
        let small = key("team", "small");
        admissions.admit(&small, "u1");
        assert!(admissions.admitted(&small, "u1"));
        assert!(!admissions.admitted(&key("other", "small"), "u1"), "per namespace");
        admissions.admit(&small, "u2");
        admissions.keep_only(&small, &HashSet::from(["u2".to_owned()]));
        assert!(!admissions.admitted(&small, "u1") && admissions.admitted(&small, "u2"));
        admissions.forget("u2");
        assert!(admissions.is_empty());
    }

    /// Two passes of Buckets of one class and namespace take turns; other classes do not wait.
    #[tokio::test]
    async fn admission_is_serialised_per_namespace_and_class() {
        let admissions = Admissions::default();
        let (small, big) = (key("team", "small"), key("team", "big"));
        let wait = std::time::Duration::from_millis(50);
        let held = admissions.lock(&small).await;
        assert!(
            tokio::time::timeout(wait, admissions.lock(&big)).await.is_ok(),
            "another class is not held up"
        );
        assert!(tokio::time::timeout(wait, admissions.lock(&small)).await.is_err(), "the same class waits");
        drop(held);
        let _again = admissions.lock(&small).await;
    }
}
