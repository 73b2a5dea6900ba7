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

    /// One of kopper's copies changed.
    fn copy_changed(&self, sources: &dyn SourceLookup, change: CopyChange<'_>);

    /// An object that is not a copy changed: `change` holds it before and after.
    fn object_changed(&self, sources: &dyn SourceLookup, kind: ObjectKind, change: [Option<&ObjectInfo>; 2]);

    /// A scoped watch listed, first or again after an outage.
    fn scope_listed(&self, sources: &dyn SourceLookup, list: ScopeList<'_>);
}

/// One change of one of kopper's copies, as its watch saw it.
pub struct CopyChange<'a> {
    pub kind: ObjectKind,
    pub meta: &'a ObjectMeta,
    /// The rule label the copy carried before and after the change.
    pub made_by: [Option<Arc<str>>; 2],
    /// Whether the copy now holds what kopper last wrote to it.
    pub as_written: bool,
}

/// What one list of a scoped watch of `kind` over `scope` found.
pub struct ScopeList<'a> {
    pub kind: ObjectKind,
    pub scope: &'a Scope,
    /// The rules whose copies an object of the watched name was last found blocking (none
    /// for other scopes).
    pub blocked_by: &'a BTreeSet<RuleId>,
    /// What a list again found changed (none at a first list).
    pub changes: &'a [ListedChange],
}
