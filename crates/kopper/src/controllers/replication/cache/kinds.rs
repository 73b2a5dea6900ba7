//! Discovery of the kinds the admin allows (`--replicate-kinds`): each entry is resolved to
//! the resource the API server serves it as, once at start, and again (at most once per
//! [`REDISCOVERY_INTERVAL`]) while a rule names it and it is not served yet, so installing
//! a CRD after kopper started is picked up without a restart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::Scope;

use crate::kinds::{AllowedKind, AllowedKinds, KindEntry, REDISCOVERY_INTERVAL};

/// Resolves `kind` with the API server's discovery; whether it is served and namespaced now.
/// A kind not served, or cluster-scoped, is logged, never fatal: the rules naming it say so.
pub async fn resolve(client: &Client, kind: &'static AllowedKind) -> bool {
    if kind.resource().is_some() {
        return true;
    }
    let entry = &kind.entry;
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((resource, capabilities)) if capabilities.scope == Scope::Namespaced => {
            tracing::info!(kind = %entry, plural = %resource.plural, "kind allowed by --replicate-kinds is served");
            kind.resolved(resource);
            true
        }
        Ok(_) => {
            tracing::warn!(
                kind = %entry,
                "--replicate-kinds names a cluster-scoped kind, which kopper never replicates (only namespaced \
                 kinds are copied into namespaces); rules naming it are Ready=False (KindNotServed)"
            );
            false
        }
        Err(error) => {
            tracing::warn!(
                kind = %entry,
                %error,
                "--replicate-kinds names a kind the API server does not serve (is its CRD installed?); rules \
                 naming it are Ready=False (KindNotServed) until it is"
            );
            false
        }
    }
}

/// Resolves every allowed kind at start; nothing is asked when none is allowed.
pub async fn resolve_all(client: &Client, kinds: &AllowedKinds) {
    for kind in kinds.iter() {
        resolve(client, kind).await;
    }
}

/// When discovery was last asked for each kind not served, so rules naming it, woken often,
/// cost one request per [`REDISCOVERY_INTERVAL`].
#[derive(Default)]
pub struct Rediscovery(Mutex<HashMap<KindEntry, Instant>>);

impl Rediscovery {
    /// Resolves `kind` again if it is not served and was not asked for lately; whether it is
    /// served now.
    pub async fn resolve(&self, client: &Client, kind: &'static AllowedKind) -> bool {
        if kind.resource().is_some() {
            return true;
        }
        if !self.due(&kind.entry, Instant::now()) {
            return false;
        }
        resolve(client, kind).await
    }

    /// Whether a discovery of `entry` is due at `now` (and, if so, marks it asked).
    fn due(&self, entry: &KindEntry, now: Instant) -> bool {
        let mut asked = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match asked.get(entry) {
            Some(last) if now.duration_since(*last) < REDISCOVERY_INTERVAL => false,
            _ => {
                asked.insert(entry.clone(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_kind_not_served_is_asked_for_at_most_once_per_interval() {
        let rediscovery = Rediscovery::default();
        let entry = crate::kinds::parse_entry("example.com/v1/Widget").unwrap();
        let start = Instant::now();
        assert!(rediscovery.due(&entry, start));
        assert!(!rediscovery.due(&entry, start + Duration::from_secs(1)));
        let other = crate::kinds::parse_entry("v1/LimitRange").unwrap();
        assert!(rediscovery.due(&other, start), "each kind on its own");
        assert!(rediscovery.due(&entry, start + REDISCOVERY_INTERVAL));
    }
}
