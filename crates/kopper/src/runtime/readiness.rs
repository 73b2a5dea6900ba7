//! Which controllers have seen their first list, for `/readyz`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A replica that is waiting for the leader lease runs no controllers; it is marked as a
/// standby and reported ready, so a rolling update is not held up by the replicas that are
/// correctly doing nothing.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    inner: Arc<Mutex<ReadinessState>>,
}

#[derive(Debug, Default)]
struct ReadinessState {
    synced: BTreeMap<&'static str, bool>,
    standby: bool,
}

impl Readiness {
    /// Declares a controller that must sync before the replica is ready. Called at start-up
    /// for every enabled controller, so `/readyz` is false until all of them have started.
    pub fn register(&self, controller: &'static str) {
        self.lock().synced.entry(controller).or_insert(false);
    }

    pub fn mark_synced(&self, controller: &'static str) {
        self.lock().synced.insert(controller, true);
    }

    /// Whether this replica is waiting for the leader lease (and so runs no controllers).
    pub fn set_standby(&self, standby: bool) {
        self.lock().standby = standby;
    }

    pub fn is_ready(&self) -> bool {
        let state = self.lock();
        state.standby || state.synced.values().all(|synced| *synced)
    }

    /// Controllers whose first list has not arrived yet, for the `/readyz` body.
    pub fn pending(&self) -> Vec<&'static str> {
        self.lock().synced.iter().filter(|(_, synced)| !**synced).map(|(name, _)| *name).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReadinessState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_registered_controller_has_synced() {
        let readiness = Readiness::default();
        readiness.register("pod-labeler");
        readiness.register("namespace-access");
        readiness.mark_synced("pod-labeler");
        assert!(!readiness.is_ready());
        assert_eq!(readiness.pending(), vec!["namespace-access"]);
        readiness.mark_synced("namespace-access");
        assert!(readiness.is_ready());
    }

    #[test]
    fn standby_replica_is_ready_without_controllers() {
        let readiness = Readiness::default();
        readiness.register("pod-labeler");
        readiness.set_standby(true);
        assert!(readiness.is_ready());
    }
}
