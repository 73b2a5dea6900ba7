//! What every watch-fed cache needs besides its store: a latch that says when its first
//! list is complete (and lets any number of tasks wait for it), and a trigger that wakes a
//! controller without queueing one wake-up per change.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::mpsc;

/// A cache's task ended before its first list completed.
#[derive(Debug, thiserror::Error)]
#[error("the {0} cache stopped before its first list completed")]
pub struct CacheStopped(pub String);

/// Whether a watch has completed its first list, for any number of waiters. Controllers
/// wait on this rather than on kube's `Store::wait_until_ready`: of several tasks waiting
/// on that at once, only the last to poll is woken (its one-shot channel keeps one waker).
#[derive(Clone)]
pub struct FirstList(Arc<tokio::sync::watch::Sender<Option<bool>>>);

impl Default for FirstList {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(None)))
    }
}

impl FirstList {
    pub fn mark_ready(&self) {
        self.0.send_replace(Some(true));
    }

    /// The watch ended: waiters learn it will never be ready.
    pub fn mark_stopped(&self) {
        self.0.send_if_modified(|state| {
            let first_list_pending = state.is_none();
            if first_list_pending {
                *state = Some(false);
            }
            first_list_pending
        });
    }

    pub fn is_ready(&self) -> bool {
        *self.0.borrow() == Some(true)
    }

    /// Waits for the first list; false if the watch ended before.
    pub async fn wait(&self) -> bool {
        matches!(self.0.subscribe().wait_for(Option::is_some).await.as_deref(), Ok(Some(true)))
    }

    /// Waits for the first list of the cache of `what`; an error if its watch ended before.
    pub async fn wait_until_ready(&self, what: &str) -> Result<(), CacheStopped> {
        if self.wait().await { Ok(()) } else { Err(CacheStopped(what.to_owned())) }
    }

    /// Marks readiness on the first list's end as `events` pass by.
    pub fn track<K, S>(&self, events: S) -> impl Stream<Item = S::Item> + use<K, S>
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let first_list = self.clone();
        events.inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                first_list.mark_ready();
            }
        })
    }
}

/// Whether two snapshots of a store hold the very same objects, in the same order: a store
/// replaces an object's `Arc` whenever the object changes, so while both snapshots are held
/// (their pointers cannot be reused) the same pointers mean the same objects.
pub fn same_objects<T>(before: &[Arc<T>], now: &[Arc<T>]) -> bool {
    before.len() == now.len() && before.iter().zip(now).all(|(before, now)| Arc::ptr_eq(before, now))
}

/// Wakes a controller's `reconcile_all_on`. The channel holds one wake-up; while it is
/// pending, further ones are dropped, so a burst of changes costs one pass.
#[derive(Clone)]
pub struct Trigger(mpsc::Sender<()>);

impl Trigger {
    pub fn new() -> (Self, impl Stream<Item = ()> + Send + 'static) {
        let (sender, receiver) = mpsc::channel(1);
        let wake_ups = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|()| ((), receiver))
        });
        (Self(sender), wake_ups)
    }

    pub fn fire(&self) {
        // Full means a wake-up is pending; closed means the controller has stopped.
        let _ = self.0.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn burst_of_triggers_costs_one_pending_wake_up() {
        let (trigger, woken) = Trigger::new();
        let mut woken = std::pin::pin!(woken);
        for _ in 0..10 {
            trigger.fire();
        }
        drop(trigger);
        let mut wake_ups = 0;
        while woken.next().await.is_some() {
            wake_ups += 1;
        }
        assert_eq!(wake_ups, 1);
    }

    #[tokio::test]
    async fn every_waiter_hears_the_first_list_end_or_the_watch_stop() {
        let ready = FirstList::default();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                tokio::spawn({
                    let ready = ready.clone();
                    async move { ready.wait().await }
                })
            })
            .collect();
        ready.mark_ready();
        ready.mark_stopped();
        for waiter in waiters {
            assert!(waiter.await.unwrap(), "a stop after the first list does not undo it");
        }
        let stopped = FirstList::default();
        stopped.mark_stopped();
        let error = stopped.wait_until_ready("Namespace").await.unwrap_err();
        assert_eq!(error.to_string(), "the Namespace cache stopped before its first list completed");
    }
}
