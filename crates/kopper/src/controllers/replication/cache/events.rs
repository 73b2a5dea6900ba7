//! What the caches report as they change, and what they let the receiver look up. The
//! caches are given a [`CacheEvents`] when they start, so they depend on nothing of the
//! engine that routes their reports.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::core::ObjectMeta;

use crate::controllers::replication::model::{ObjectInfo, ObjectKind, RuleId, Scope};

/// What a list found changed against what the watch held before it (nothing, at a first
/// list): each object added, changed (another resourceVersion) or gone, before and after.
pub type ListedChange = (Option<ObjectInfo>, Option<ObjectInfo>);

/// The sources the scoped watches hold, as they stand when a change is reported.
pub trait SourceLookup {
    /// The object named `name` in `namespace`, if a watch of that namespace (or of every
    /// namespace) holds it.
    fn source(&self, namespace: &str, name: &str) -> Option<ObjectInfo>;
}

/// What the caches report as they change, for the engine to wake the rules concerned.
/// Passed in when the caches start, so they depend on no part of the engine: the engine's
/// router implements it (`wake::Router`). Each report carries the sources the scoped watches
/// hold as they stand, which tell which rules a change concerns.
pub trait CacheEvents: Send + Sync + 'static {
    /// A watch listed again after missing events (or the namespace feed fell behind): what
    /// changed meanwhile is unknown, so every rule may be concerned.
    fn relisted(&self);

    /// One of kopper's copies changed: `made_by` holds the rule label it carried before and
    /// after the change; `as_written` says it now holds what kopper last wrote to it.
    fn copy_changed(
        &self,
        sources: &dyn SourceLookup,
        kind: ObjectKind,
        meta: &ObjectMeta,
        made_by: [Option<Arc<str>>; 2],
        as_written: bool,
    );

    /// An object that is not a copy changed (`before` and `after` the change).
    fn object_changed(
        &self,
        sources: &dyn SourceLookup,
        kind: ObjectKind,
        before: Option<&ObjectInfo>,
        after: Option<&ObjectInfo>,
    );

    /// A scoped watch of `kind` over `scope` listed; `blocked_by` holds the rules whose
    /// copies an object of the watched name was last found blocking (none for other
    /// scopes), and `changes` what a list again found changed (none at a first list).
    fn scope_listed(
        &self,
        sources: &dyn SourceLookup,
        kind: ObjectKind,
        scope: &Scope,
        blocked_by: &BTreeSet<RuleId>,
        changes: &[ListedChange],
    );
}
