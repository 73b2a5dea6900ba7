//! One lock per bucket name, held from looking at a name to tagging the bucket when creating
//! or adopting it: two Buckets naming the same bucket cannot both find it missing (or
//! untagged) and both take it, while Buckets with different names never wait for each other.
//! A name's entry lives only while someone holds or waits for its lock, so the map follows
//! the creations under way, not every name ever seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Entries = Arc<Mutex<HashMap<String, Arc<AsyncMutex<()>>>>>;

/// The per-name locks of one replica. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct NameLocks {
    entries: Entries,
}

/// Holds the lock of one name; dropping it lets the next waiter for that name in.
#[derive(Debug)]
pub struct NameGuard {
    // Fields drop in order: the lock is released before the entry is looked at.
    _held: OwnedMutexGuard<()>,
    _entry: Entry,
}

/// A claim on a name's entry: the entry is removed when the last claim goes, whether its
/// holder got the lock or gave up waiting.
#[derive(Debug)]
struct Entry {
    entries: Entries,
    name: String,
    lock: Option<Arc<AsyncMutex<()>>>,
}

impl NameLocks {
    /// Waits for the lock of `name`.
    pub async fn lock(&self, name: &str) -> NameGuard {
        let lock = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            entries.entry(name.to_owned()).or_default().clone()
        };
        let entry = Entry { entries: self.entries.clone(), name: name.to_owned(), lock: Some(lock.clone()) };
        let held = lock.lock_owned().await;
        NameGuard { _held: held, _entry: entry }
    }

    /// Names with an entry: those locked or waited for.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        self.lock = None;
        // Only the map's own reference left: nobody holds or waits for this name. New
        // claims are taken under the map's lock, which is held here.
        if entries.get(&self.name).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            entries.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_same_name_waits_and_other_names_do_not() {
        let locks = NameLocks::default();
        let held = locks.lock("a").await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), locks.lock("b")).await.is_ok(),
            "another name is not held up"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(50), locks.lock("a")).await.is_err(),
            "the same name waits"
        );
        drop(held);
        assert!(tokio::time::timeout(Duration::from_millis(50), locks.lock("a")).await.is_ok());
    }

    #[tokio::test]
    async fn a_name_nobody_holds_or_waits_for_leaves_no_entry() {
        let locks = NameLocks::default();
        for n in 0..100 {
            drop(locks.lock(&format!("bucket-{n}")).await);
        }
        assert!(locks.is_empty());

        let held = locks.lock("a").await;
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { drop(locks.lock("a").await) }
        });
        tokio::task::yield_now().await;
        assert_eq!(locks.len(), 1);
        drop(held);
        waiter.await.unwrap();
        assert!(locks.is_empty(), "the last holder removed the entry");
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_no_entry() {
        let locks = NameLocks::default();
        let held = locks.lock("a").await;
        let gave_up = tokio::time::timeout(Duration::from_millis(10), locks.lock("a")).await;
        assert!(gave_up.is_err());
        drop(held);
        assert!(locks.is_empty());
    }
}
