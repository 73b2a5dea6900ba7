//! The BucketAccess controller: a grant of another Bucket's bucket (or one of the same
//! namespace) to the namespace that asks, with the Bucket owner's consent
//! ([`grant::verdict`]). It runs with the Bucket controller, on its classes and backends.
//!
//! Each pass reads the Bucket from the API server (not from a cache, so that consent
//! withdrawn is never missed by a stale read), judges consent first and the Bucket's state
//! second, and then either makes sure of the grant's user, policy, one key and Secret, holds
//! what it has, or removes it. Crash safety is the Bucket's: the user is created with its tags
//! in one call and its name is recorded in status first; the Secret is the record of the key
//! in use ([`provider::plan_keys`]), so a key created and never written is deleted.
//!
//! The user is made before its key, and the Bucket is read again right after the user is made
//! ([`grant::after_create`]): a Bucket deleted (or no longer consenting) meanwhile gets the user
//! deleted at once, so that a grant pass racing the Bucket's deletion leaves nothing behind.
//!
//! Removal: the finalizer [`FINALIZER`] holds a BucketAccess until its user is gone. The user
//! recorded in status (with the Bucket uid and class it was made with) is deleted on its
//! backend whether or not the Bucket still exists. Users are made under their Bucket's grants
//! path ([`grant::bucket_grants_path`]), IAM's own record of them that tenants cannot touch.
//! A Bucket's own cleanup deletes its grants' users first ([`revoke_bucket_grants`]: those
//! under that path and those of the grants kopper knows of, proven by tags, no pass over the
//! account). A grant gone while its status still records a user (its finalizer stripped by
//! the tenant) leaves a [`Tombstone`] that [`drain_tombstones`] deletes; the sweep (at start
//! and on an interval) deletes grant users whose grant is gone, so a grant gone while kopper
//! is down loses its user when kopper starts again.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::access_types::{BucketAccess, BucketAccessStatus};
use super::class::Binding;
use super::grant::{self, GrantOwner, Verdict};
use super::names::{self, POLICY_NAME};
use super::provider::{self, FailureKind, Provider};
use super::types::Bucket;
use super::{ClassInUse, Error, Shared, churn, policy, secret};
use crate::runtime::Context;

/// The controller's name in metrics, logs, `/readyz` and its field manager.
pub const NAME: &str = "bucket-access";
/// Holds a BucketAccess until its IAM user, policy and key are deleted.
pub const FINALIZER: &str = "kopper.dev/bucket-access-cleanup";
/// Label on every Secret a BucketAccess owns, holding its name; kopper watches only these.
pub const ACCESS_LABEL: &str = "kopper.dev/bucket-access";
const READY: &str = "Ready";
/// How often a granted BucketAccess is looked at when nothing wakes it.
const RESYNC: Duration = Duration::from_secs(30 * 60);

/// The BucketAccess objects naming each Bucket (`namespace/name`), fed by the grant watch, so
/// that a change to a Bucket wakes exactly its grants and its cleanup knows their users; and
/// the places of the bound [`grant::MAX_GRANTS_PER_NAMESPACE`] this replica gave.
#[derive(Debug, Default)]
pub struct GrantIndex {
    inner: Mutex<IndexState>,
    /// Told when a tombstone is added: [`drain_tombstones`] deletes its user.
    buried: tokio::sync::Notify,
}

/// Most grants gone with a recorded user whose users wait to be deleted: a tenant deletes
/// BucketAccesses it strips the finalizer from faster than IAM answers only up to this many;
/// beyond it the sweep deletes them (at most `--orphan-sweep-interval` later).
const MAX_TOMBSTONES: usize = 4096;
/// How long a tombstone whose user could not be deleted waits to be tried again.
const TOMBSTONE_RETRY: Duration = Duration::from_secs(10);

/// The user of a grant that left the cluster while its status still recorded one: the grant
/// was deleted without kopper's finalizer (a tenant may strip it from its own BucketAccess),
/// so nothing else would revoke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    pub grant_uid: String,
    pub user_name: String,
    /// The class the user was made on (`None`: the built-in one).
    pub class_name: Option<String>,
    /// The backend it was made on, as recorded.
    pub backend: Option<String>,
}

#[derive(Debug, Default)]
struct IndexState {
    by_bucket: HashMap<String, HashSet<ObjectRef<BucketAccess>>>,
    by_grant: HashMap<ObjectRef<BucketAccess>, Entry>,
    /// By [`place_key`]: the uids of grants given a place here, until they give it back. A
    /// grant counts from the moment it is given a place, before the cache shows its user.
    admitted: HashMap<String, HashSet<String>>,
    /// By grant uid: users of grants gone without their finalizer, until deleted.
    tombstones: BTreeMap<String, Tombstone>,
}

/// What the index knows of one grant.
#[derive(Clone, Debug)]
struct Entry {
    bucket: String,
    namespace: String,
    uid: String,
    /// `status.userName`: the grant holds (or may hold) a user.
    user_name: Option<String>,
    /// `status.className` and `status.backend`: where that user is.
    class_name: Option<String>,
    backend: Option<String>,
}

/// The key of one namespace's places on one Bucket (`bucket` is `namespace/name`).
fn place_key(grant_namespace: &str, bucket: &str) -> String {
    format!("{grant_namespace}|{bucket}")
}

fn bucket_key(grant: &BucketAccess) -> String {
    format!("{}/{}", grant.bucket_namespace(), grant.spec.bucket_ref.name)
}

impl GrantIndex {
    fn state(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `grant` as it is now (`gone`: it no longer exists); whether it gave back a user
    /// it held or a place it was given (so that a grant waiting for a place may get it). A
    /// grant gone while its status records a user leaves a [`Tombstone`].
    pub fn note(&self, grant: &BucketAccess, gone: bool) -> bool {
        let grant_ref = ObjectRef::from_obj(grant);
        let bucket = bucket_key(grant);
        let mut state = self.state();
        let previous = state.by_grant.remove(&grant_ref);
        if let Some(previous) = &previous
            && let Some(grants) = state.by_bucket.get_mut(&previous.bucket)
        {
            grants.remove(&grant_ref);
            if grants.is_empty() {
                state.by_bucket.remove(&previous.bucket);
            }
        }
        let status = grant.status.clone().unwrap_or_default();
        let user_name = status.user_name.clone();
        let held = previous.as_ref().is_some_and(|previous| previous.user_name.is_some());
        let entry = Entry {
            bucket: bucket.clone(),
            namespace: grant.namespace().unwrap_or_default(),
            uid: grant.uid().unwrap_or_default(),
            user_name: user_name.clone(),
            class_name: status.class_name,
            backend: status.backend,
        };
        if gone {
            let freed = Self::release_in(&mut state, &entry.uid);
            let buried = self.bury_in(&mut state, &entry);
            drop(state);
            if buried {
                self.buried.notify_one();
            }
            return held || freed || user_name.is_some();
        }
        state.by_bucket.entry(bucket).or_default().insert(grant_ref.clone());
        state.by_grant.insert(grant_ref, entry);
        held && user_name.is_none()
    }

    /// Keeps a [`Tombstone`] for the user `entry` (a grant gone) records, if any; whether it did.
    fn bury_in(&self, state: &mut IndexState, entry: &Entry) -> bool {
        let Some(user_name) = &entry.user_name else { return false };
        if entry.uid.is_empty() {
            return false;
        }
        if state.tombstones.len() >= MAX_TOMBSTONES && !state.tombstones.contains_key(&entry.uid) {
            warn!(
                user = user_name,
                "too many grant users wait to be deleted; this one is left to the next orphan sweep"
            );
            return false;
        }
        let tombstone = Tombstone {
            grant_uid: entry.uid.clone(),
            user_name: user_name.clone(),
            class_name: entry.class_name.clone(),
            backend: entry.backend.clone(),
        };
        state.tombstones.insert(entry.uid.clone(), tombstone);
        true
    }

    /// The users of grants gone without their finalizer that wait to be deleted.
    pub fn tombstones(&self) -> Vec<Tombstone> {
        self.state().tombstones.values().cloned().collect()
    }

    /// Forgets a tombstone whose user is deleted (or proven not the grant's).
    fn forget_tombstone(&self, tombstone: &Tombstone) {
        let mut state = self.state();
        if state.tombstones.get(&tombstone.grant_uid) == Some(tombstone) {
            state.tombstones.remove(&tombstone.grant_uid);
        }
    }

    /// Forgets every grant not in `live` (a relist's objects): a grant deleted while the watch
    /// was down gives back its place, and leaves a [`Tombstone`] if it recorded a user. The
    /// grants that may have waited for a place given back so: to be woken.
    pub fn keep_only(&self, live: &HashSet<ObjectRef<BucketAccess>>) -> Vec<ObjectRef<BucketAccess>> {
        let mut state = self.state();
        let gone: Vec<_> = state.by_grant.keys().filter(|grant| !live.contains(*grant)).cloned().collect();
        let mut buried = false;
        let mut freed_places = HashSet::new();
        for grant_ref in gone {
            if let Some(entry) = state.by_grant.remove(&grant_ref) {
                if let Some(grants) = state.by_bucket.get_mut(&entry.bucket) {
                    grants.remove(&grant_ref);
                    if grants.is_empty() {
                        state.by_bucket.remove(&entry.bucket);
                    }
                }
                if Self::release_in(&mut state, &entry.uid) || entry.user_name.is_some() {
                    freed_places.insert((entry.namespace.clone(), entry.bucket.clone()));
                }
                buried |= self.bury_in(&mut state, &entry);
            }
        }
        let mut peers: Vec<_> = freed_places
            .iter()
            .flat_map(|(namespace, bucket)| {
                let grants = state.by_bucket.get(bucket).into_iter().flatten();
                grants.filter(move |peer| peer.namespace.as_deref() == Some(namespace.as_str())).cloned()
            })
            .collect();
        peers.sort_by_key(ToString::to_string);
        drop(state);
        if buried {
            self.buried.notify_one();
        }
        peers
    }

    /// The grants naming the Bucket `namespace/name`.
    pub fn grants_of(&self, namespace: &str, name: &str) -> Vec<ObjectRef<BucketAccess>> {
        let key = format!("{namespace}/{name}");
        let state = self.state();
        let mut grants: Vec<_> =
            state.by_bucket.get(&key).map(|grants| grants.iter().cloned().collect()).unwrap_or_default();
        grants.sort_by_key(ToString::to_string);
        grants
    }

    /// Whether the grant records a user (or was given a place here).
    pub fn holds_user(&self, grant: &ObjectRef<BucketAccess>) -> bool {
        let state = self.state();
        state.by_grant.get(grant).is_some_and(|entry| {
            entry.user_name.is_some()
                || state
                    .admitted
                    .get(&place_key(&entry.namespace, &entry.bucket))
                    .is_some_and(|uids| uids.contains(&entry.uid))
        })
    }

    /// The uid and recorded user of every grant naming the Bucket `namespace/name` that holds
    /// (or may hold) a user: its status records one, or it was given a place here. Others
    /// never made one (the record comes first), so that BucketAccesses a tenant points at a
    /// Bucket not shared with it cost that Bucket's deletion nothing.
    pub fn recorded_users(&self, namespace: &str, name: &str) -> Vec<(String, Option<String>)> {
        let key = format!("{namespace}/{name}");
        let state = self.state();
        let Some(grants) = state.by_bucket.get(&key) else { return Vec::new() };
        let admitted = |entry: &Entry| {
            state
                .admitted
                .get(&place_key(&entry.namespace, &entry.bucket))
                .is_some_and(|uids| uids.contains(&entry.uid))
        };
        let mut users: Vec<_> = grants
            .iter()
            .filter_map(|grant| state.by_grant.get(grant))
            .filter(|entry| entry.user_name.is_some() || admitted(entry))
            .map(|entry| (entry.uid.clone(), entry.user_name.clone()))
            .collect();
        users.sort();
        users
    }

    /// Gives `grant` a place among its namespace's grants of its Bucket ([`grant::admits`]),
    /// counting those whose status records a user and those given a place here, in one lock:
    /// two passes cannot both take the last place. Whether it has one.
    fn admit(&self, grant: &BucketAccess) -> bool {
        let (namespace, bucket) = (grant.namespace().unwrap_or_default(), bucket_key(grant));
        let uid = grant.uid().unwrap_or_default();
        let key = place_key(&namespace, &bucket);
        let mut state = self.state();
        let mut holders: HashSet<String> = state
            .by_bucket
            .get(&bucket)
            .into_iter()
            .flatten()
            .filter_map(|peer| state.by_grant.get(peer))
            .filter(|entry| entry.namespace == namespace && entry.user_name.is_some())
            .map(|entry| entry.uid.clone())
            .collect();
        holders.extend(state.admitted.get(&key).into_iter().flatten().cloned());
        if !grant::admits(&uid, &holders) {
            return false;
        }
        state.admitted.entry(key).or_default().insert(uid);
        true
    }

    /// Gives back the place of the grant `uid` (its user is gone); whether it had one.
    fn release(&self, uid: &str) -> bool {
        Self::release_in(&mut self.state(), uid)
    }

    fn release_in(state: &mut IndexState, uid: &str) -> bool {
        let mut freed = false;
        state.admitted.retain(|_, uids| {
            freed |= uids.remove(uid);
            !uids.is_empty()
        });
        freed
    }

    /// Wakes the grants of `grant`'s namespace naming its Bucket, but it: one may have waited
    /// for the place `grant` gave back.
    fn wake_peers(
        &self,
        grant: &BucketAccess,
        wake: &futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    ) {
        let bucket = (grant.bucket_namespace(), &grant.spec.bucket_ref.name);
        for peer in self.grants_of(&bucket.0, bucket.1) {
            if peer.namespace == grant.namespace() && peer.name != grant.name_any() {
                let _ = wake.unbounded_send(peer);
            }
        }
    }
}

/// Wakes the grants of a Bucket when what they decide on changes ([`bucket_digest`]): its
/// consent, its state, its deletion. Only grants [`grant::woken_by_bucket`] says: a namespace
/// the Bucket is not shared with learns nothing of it from when its grant is looked at.
pub struct GrantWakes {
    pub index: Arc<GrantIndex>,
    pub wake: futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    /// By Bucket uid: what it last woke its grants with.
    seen: HashMap<String, Seen>,
    /// The uids of a relist under way.
    listing: HashSet<String>,
}

struct Seen {
    digest: u64,
    namespace: String,
    name: String,
    shared: BTreeSet<String>,
}

impl GrantWakes {
    pub fn new(
        index: Arc<GrantIndex>,
        wake: futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    ) -> Self {
        GrantWakes { index, wake, seen: HashMap::new(), listing: HashSet::new() }
    }

    pub fn after(&mut self, event: &kube::runtime::watcher::Event<Bucket>) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(bucket) => {
                self.listing.insert(bucket.uid().unwrap_or_default());
                self.changed(bucket);
            }
            Event::Apply(bucket) => self.changed(bucket),
            Event::Delete(bucket) => {
                if let Some(seen) = self.seen.remove(&bucket.uid().unwrap_or_default()) {
                    self.wake_grants(&seen.namespace, &seen.name, &seen.shared);
                } else {
                    let shared = shared_namespaces(bucket);
                    self.wake_grants(&bucket.namespace().unwrap_or_default(), &bucket.name_any(), &shared);
                }
            }
            Event::InitDone => {
                // Buckets deleted while the watch was down: their grants are told.
                let gone: Vec<String> =
                    self.seen.keys().filter(|uid| !self.listing.contains(*uid)).cloned().collect();
                for uid in gone {
                    if let Some(seen) = self.seen.remove(&uid) {
                        self.wake_grants(&seen.namespace, &seen.name, &seen.shared);
                    }
                }
                self.listing.clear();
            }
        }
    }

    fn changed(&mut self, bucket: &Bucket) {
        let uid = bucket.uid().unwrap_or_default();
        let digest = bucket_digest(bucket);
        let (namespace, name) = (bucket.namespace().unwrap_or_default(), bucket.name_any());
        let mut shared = shared_namespaces(bucket);
        let now = Seen { digest, namespace: namespace.clone(), name: name.clone(), shared: shared.clone() };
        match self.seen.insert(uid, now) {
            Some(before) if before.digest == digest => return,
            // Those it was shared with are told that it no longer is.
            Some(before) => shared.extend(before.shared),
            None => {}
        }
        self.wake_grants(&namespace, &name, &shared);
    }

    fn wake_grants(&self, namespace: &str, name: &str, shared: &BTreeSet<String>) {
        for grant in self.index.grants_of(namespace, name) {
            let grant_namespace = grant.namespace.clone().unwrap_or_default();
            if grant::woken_by_bucket(&grant_namespace, self.index.holds_user(&grant), namespace, shared) {
                let _ = self.wake.unbounded_send(grant);
            }
        }
    }
}

fn shared_namespaces(bucket: &Bucket) -> BTreeSet<String> {
    bucket.spec.shared_with.iter().map(|entry| entry.namespace.clone()).collect()
}

/// What about a Bucket its grants decide on: a change to any of it wakes them.
pub fn bucket_digest(bucket: &Bucket) -> u64 {
    let status = bucket.status.clone().unwrap_or_default();
    let ready =
        status.conditions.iter().find(|c| c.type_ == READY).map(|c| (c.status.clone(), c.reason.clone()));
    super::digest_of(&(
        serde_json::to_string(&bucket.spec.shared_with).unwrap_or_default(),
        bucket.metadata.deletion_timestamp.is_some(),
        status.bucket_name,
        status.class_name,
        ready,
        bucket.uid(),
    ))
}

/// The BucketAccess controller, fed by `wakes` (the grants of a changed Bucket, and those
/// whose peer was deleted, which it sends through `wake`); it keeps `index`, which maps
/// Buckets to grants, up to date.
pub fn controller(
    ctx: &Context,
    wakes: futures::channel::mpsc::UnboundedReceiver<ObjectRef<BucketAccess>>,
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    index: Arc<GrantIndex>,
    listed: &crate::runtime::cache::FirstList,
) -> Controller<BucketAccess> {
    let api = Api::<BucketAccess>::all(ctx.client.clone());
    let (reader, writer) = kube::runtime::reflector::store();
    // A user recorded or cleared wakes the grant too: a pass that ran on a cache without the
    // record (and so deleted nothing) runs again with it.
    let changes = |grant: &BucketAccess| {
        let deleting = grant.meta().deletion_timestamp.is_some();
        let recorded = grant.status.as_ref().is_some_and(|status| status.user_name.is_some());
        Some(super::digest_of(&(grant.meta().generation, deleting, grant.finalizers().to_vec(), recorded)))
    };
    let stream = crate::runtime::watch::watcher(api, crate::runtime::trim::tenant_objects_watch())
        .default_backoff()
        .modify(|grant| crate::runtime::trim::keep_only_what_decisions_read(grant, &[]))
        .reflect(writer)
        .inspect_ok({
            let mut listing = HashSet::new();
            move |event| {
                let (grant, gone) = match event {
                    kube::runtime::watcher::Event::Init => {
                        listing.clear();
                        return;
                    }
                    kube::runtime::watcher::Event::InitDone => {
                        for peer in index.keep_only(&listing) {
                            let _ = wake.unbounded_send(peer);
                        }
                        listing.clear();
                        return;
                    }
                    kube::runtime::watcher::Event::InitApply(grant) => {
                        listing.insert(ObjectRef::from_obj(grant));
                        (grant, false)
                    }
                    kube::runtime::watcher::Event::Apply(grant) => (grant, false),
                    kube::runtime::watcher::Event::Delete(grant) => (grant, true),
                };
                // A grant that gave back its place: one of its namespace's grants of the Bucket
                // may have waited for it.
                if index.note(grant, gone) {
                    index.wake_peers(grant, &wake);
                }
            }
        });
    // Marked after the index has taken in the list's end.
    let stream = listed.track(stream).applied_objects().predicate_filter(changes, Default::default());
    // Metadata only: no credentials are cached. Tenants can label any Secret so: small pages.
    let secrets = Api::<PartialObjectMeta<Secret>>::all(ctx.client.clone());
    let secret_events = crate::runtime::watch::watcher(
        secrets,
        crate::runtime::trim::tenant_objects_watch().labels(ACCESS_LABEL),
    )
    .default_backoff()
    .touched_objects();
    Controller::for_stream(stream, reader)
        .owns_stream(secret_events)
        .reconcile_on(wakes)
        .with_config(crate::runtime::controller::config())
}

/// What every pass of the BucketAccess controller shares: the Bucket controller's classes,
/// backends and key ledger, and its own index of grants.
pub(super) struct Grants {
    pub(super) shared: Arc<Shared>,
    pub(super) index: Arc<GrantIndex>,
    /// Wakes a grant: one that waits for the place a pass gave back.
    pub(super) wake: futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
}

/// One pass over a BucketAccess.
pub(super) async fn reconcile(
    grant: Arc<BucketAccess>,
    ctx: Arc<Context>,
    grants: Arc<Grants>,
) -> Result<Action, Error> {
    let shared = &grants.shared;
    let namespace = grant.namespace().unwrap_or_default();
    let api = Api::<BucketAccess>::namespaced(ctx.client.clone(), &namespace);
    let bucket_namespace = grant.bucket_namespace();
    let bucket = Api::<Bucket>::namespaced(ctx.client.clone(), &bucket_namespace)
        .get_opt(&grant.spec.bucket_ref.name)
        .await
        .map_err(Error::kube("reading the Bucket"));
    let pass = GrantPass {
        ctx: &ctx,
        shared,
        grant: &grant,
        index: &grants.index,
        wake: &grants.wake,
        settled: AtomicBool::new(false),
    };
    let result = match bucket {
        Err(error) => Err(error),
        Ok(bucket) => finalizer::finalizer(&api, FINALIZER, grant.clone(), |event| {
            let (pass, bucket) = (&pass, bucket.as_ref());
            async move {
                match event {
                    FinalizerEvent::Apply(_) => pass.apply(bucket).await,
                    FinalizerEvent::Cleanup(_) => pass.revoke().await.map(|()| Action::await_change()),
                }
            }
        })
        .await
        .or_else(super::gone_with_its_finalizer),
    };
    if let Err(error) = &result {
        report(&ctx, &grant, error).await;
        // Refused, holding nothing: only a change wakes it (the Bucket's, which wakes the
        // namespaces it is shared with, a relist, a peer giving back its place, its own edit).
        if pass.settled.load(Ordering::SeqCst) {
            return Ok(Action::await_change());
        }
    }
    match result.as_ref().err().and_then(Error::retry_after) {
        Some(wait) => Ok(Action::requeue(wait)),
        None => result,
    }
}

/// What a grant's status records of its user: where to delete it.
#[derive(Clone, Debug, Default)]
struct Record {
    user_name: Option<String>,
    class_name: Option<String>,
    backend: Option<String>,
}

/// One reconcile's view of a grant.
struct GrantPass<'a> {
    ctx: &'a Context,
    shared: &'a Shared,
    grant: &'a BucketAccess,
    index: &'a GrantIndex,
    wake: &'a futures::channel::mpsc::UnboundedSender<ObjectRef<BucketAccess>>,
    /// Set when the pass refuses the grant and it holds nothing any more.
    settled: AtomicBool,
}

impl GrantPass<'_> {
    fn bucket_ref(&self) -> (String, String) {
        (self.grant.bucket_namespace(), self.grant.spec.bucket_ref.name.clone())
    }

    async fn apply(&self, bucket: Option<&Bucket>) -> Result<Action, Error> {
        let (namespace, name) = self.bucket_ref();
        // A user made for a former Bucket of this name (deleted, maybe created again) goes
        // first, whatever is decided for the Bucket there is now.
        let status = self.grant.status.clone().unwrap_or_default();
        let former = status.user_name.is_some()
            && status.bucket_uid.is_some()
            && status.bucket_uid != bucket.and_then(|bucket| bucket.uid());
        if former {
            self.revoke().await?;
        }
        let grant_namespace = self.grant.namespace().unwrap_or_default();
        let mut verdict = grant::verdict(&grant_namespace, self.grant.spec.mode, (&namespace, &name), bucket);
        if matches!(verdict, Verdict::Grant { .. }) && !self.index.admit(self.grant) {
            verdict = grant::too_many((&namespace, &name));
        }
        match (verdict, bucket) {
            (Verdict::Grant { bucket: bucket_name, region }, Some(bucket)) => {
                self.grant_access(bucket, &bucket_name, &region).await
            }
            (Verdict::Withdraw { reason, message }, _) => {
                if !former {
                    self.revoke().await?;
                }
                self.settled.store(true, Ordering::SeqCst);
                Err(Error::blocked(reason, message))
            }
            (Verdict::Hold { reason, message }, _) => Err(Error::blocked(reason, message)),
            // A grant is only ever judged for a Bucket that exists.
            (Verdict::Grant { .. }, None) => {
                Err(Error::blocked("BucketNotReady", format!("Bucket {namespace}/{name} is not Ready")))
            }
        }
    }

    /// Gives back the grant's place, and wakes its peers when it had one: a grant given a
    /// place that stops before its user is recorded frees it with no status change to tell.
    fn give_back_place(&self) {
        if self.index.release(&self.grant.uid().unwrap_or_default()) {
            self.index.wake_peers(self.grant, self.wake);
        }
    }

    fn owner(&self, bucket: &Bucket) -> GrantOwner {
        GrantOwner {
            cluster: self.shared.cluster_id.clone(),
            namespace: self.grant.namespace().unwrap_or_default(),
            name: self.grant.name_any(),
            grant_uid: self.grant.uid().unwrap_or_default(),
            bucket_uid: bucket.uid().unwrap_or_default(),
        }
    }

    async fn grant_access(&self, bucket: &Bucket, bucket_name: &str, region: &str) -> Result<Action, Error> {
        self.shared.wait_for_classes().await?;
        let (namespace, name) = self.bucket_ref();
        let class = self
            .shared
            .class_for_cleanup(bucket)
            .map_err(|error| for_consumer(error, (&namespace, &name)))?;
        let Some(class) = class else {
            return Err(Error::blocked("BucketNotReady", format!("Bucket {namespace}/{name} is not Ready")));
        };
        let recorded = self.grant.status.as_ref().and_then(|status| status.backend.as_ref());
        let bucket_backend = bucket.status.as_ref().and_then(|status| status.backend.as_ref());
        if let Some(elsewhere) =
            [recorded, bucket_backend].into_iter().flatten().find(|b| **b != class.identity)
        {
            return Err(Error::blocked("BackendChanged", backend_moved(elsewhere, &class)));
        }
        if let Err(Verdict::Hold { reason, message } | Verdict::Withdraw { reason, message }) =
            grant::class_allows(&class.spec, (&namespace, &name))
        {
            return Err(Error::blocked(reason, message));
        }
        let provider = self
            .shared
            .provider(self.ctx, &class)
            .await
            .map_err(|error| for_consumer(error, (&namespace, &name)))?;
        let provider = provider.as_ref();
        let owner = self.owner(bucket);
        let user = owner.user_name();
        // Where the user is: recorded before it is made, so that wherever a pass stops, a
        // revoke knows where to look.
        let record_user = |status: &mut BucketAccessStatus| {
            status.user_name = Some(user.clone());
            status.bucket_name = Some(bucket_name.to_owned());
            status.bucket_uid = bucket.uid();
            status.class_name = class.binding.name().map(str::to_owned);
            status.backend = Some(class.identity.clone());
        };
        write_status(self.ctx, self.grant, record_user).await?;
        if self.ensure_user(provider, &owner).await? {
            self.check_after_create(provider, &owner).await?;
        }
        self.ensure_policy(provider, &user, bucket_name).await?;
        let key_id = self.ensure_key(provider, &user, bucket_name, region).await?;
        let became_ready = ready_reason(self.grant).is_none_or(|reason| reason != "Granted");
        let mode = self.grant.spec.mode.as_str();
        let message = format!(
            "{mode} access to bucket {bucket_name} of Bucket {namespace}/{name}: user {user}, credentials in Secret {}",
            self.grant.secret_name()
        );
        write_status(self.ctx, self.grant, |status| {
            record_user(status);
            status.access_key_id = Some(key_id.clone());
            set_ready(status, self.grant, "True", "Granted", &message);
        })
        .await?;
        if became_ready {
            publish(self.ctx, self.grant, EventType::Normal, "Granted", message).await;
        }
        Ok(Action::requeue(RESYNC))
    }

    /// The grant's user, made when missing; whether this pass made it. A user under the name
    /// that is not this grant's is left alone.
    async fn ensure_user(&self, provider: &dyn Provider, owner: &GrantOwner) -> Result<bool, Error> {
        let user = owner.user_name();
        match provider.user_tags(&user).await? {
            None => {
                provider.create_user(&user, &owner.user_path(), &owner.tags()).await?;
                Ok(true)
            }
            Some(tags) if owner.owns(&tags) => Ok(false),
            Some(_) => Err(Error::blocked(
                "UserNameTaken",
                format!("the IAM user {user} exists and is not this BucketAccess's; kopper leaves it alone"),
            )),
        }
    }

    /// Reads the Bucket again after the grant's user was made ([`grant::after_create`]): when it
    /// was deleted, replaced or no longer consents meanwhile, the user goes at once, before it
    /// has a key, and so does the record of it. The grant is read again too: one deleted
    /// meanwhile without its finalizer left a [`Tombstone`] that may have been drained before
    /// the user existed, so this pass deletes the user itself.
    async fn check_after_create(&self, provider: &dyn Provider, owner: &GrantOwner) -> Result<(), Error> {
        let grant_api = Api::<BucketAccess>::namespaced(
            self.ctx.client.clone(),
            &self.grant.namespace().unwrap_or_default(),
        );
        let live = grant_api
            .get_opt(&self.grant.name_any())
            .await
            .map_err(Error::kube("reading the BucketAccess"))?;
        if live.and_then(|live| live.uid()) != self.grant.uid() {
            let user = owner.user_name();
            warn!(user, "the BucketAccess was deleted while its user was made: deleting the user");
            delete_grant_user(provider, &user, |tags| owner.owns(tags)).await?;
            self.give_back_place();
            return Err(Error::blocked("BucketAccessDeleted", "the BucketAccess was deleted".to_owned()));
        }
        let (namespace, name) = self.bucket_ref();
        let fresh = Api::<Bucket>::namespaced(self.ctx.client.clone(), &namespace)
            .get_opt(&name)
            .await
            .map_err(Error::kube("reading the Bucket"))?;
        let class_allows = fresh
            .as_ref()
            .and_then(|fresh| self.shared.class_for_cleanup(fresh).ok().flatten())
            .is_some_and(|class| grant::class_allows(&class.spec, (&namespace, &name)).is_ok());
        let grant_namespace = self.grant.namespace().unwrap_or_default();
        let checked = grant::after_create(
            &grant_namespace,
            self.grant.spec.mode,
            (&namespace, &name),
            &owner.bucket_uid,
            fresh.as_ref(),
            class_allows,
        );
        let Err(Verdict::Hold { reason, message } | Verdict::Withdraw { reason, message }) = checked else {
            return Ok(());
        };
        let user = owner.user_name();
        warn!(user, reason, "the Bucket changed while the grant's user was made: deleting the user");
        delete_grant_user(provider, &user, |tags| owner.owns(tags)).await?;
        self.give_back_place();
        clear_record(self.ctx, self.grant).await?;
        Err(Error::blocked(reason, message))
    }

    /// The grant's policy: exactly its mode on exactly its bucket.
    async fn ensure_policy(
        &self,
        provider: &dyn Provider,
        user: &str,
        bucket_name: &str,
    ) -> Result<(), Error> {
        let wanted = grant::policy_document(bucket_name, self.grant.spec.mode);
        let found = provider.user_policy(user, POLICY_NAME).await?;
        if !found.is_some_and(|found| policy::equivalent(&wanted, &found)) {
            provider.put_user_policy(user, POLICY_NAME, &wanted).await?;
        }
        Ok(())
    }

    /// Exactly one access key, the one the Secret holds ([`provider::plan_keys`]); its id.
    async fn ensure_key(
        &self,
        provider: &dyn Provider,
        user: &str,
        bucket_name: &str,
        region: &str,
    ) -> Result<String, Error> {
        let secrets =
            Api::<Secret>::namespaced(self.ctx.client.clone(), &self.grant.namespace().unwrap_or_default());
        let secret_name = self.grant.secret_name();
        let current = secrets
            .get_opt(&secret_name)
            .await
            .map_err(Error::kube(format!("reading Secret {secret_name}")))?;
        if let Some(current) = &current {
            secret_taken(self.keeper(current), &secret_name)?;
        }
        let held = current.as_ref().and_then(secret::held_key_id);
        let listed = provider.access_keys(user).await?;
        let plan =
            provider::plan_keys(&listed, held.as_deref(), false, None, k8s_openapi::jiff::Timestamp::now());
        for key in &plan.delete_first {
            provider.delete_access_key(user, key).await?;
            info!(user, key, "deleted an access key the grant's Secret does not hold");
        }
        let contents = secret::Contents { bucket: bucket_name, region, endpoint: provider.endpoint() };
        let manager = self.ctx.settings.field_manager_for(NAME);
        let Some(_) = plan.create else {
            let held = held.unwrap_or_default();
            if let Some(current) = &current
                && let Some(desired) = self.refreshed(current, &contents)
            {
                secret::write(&secrets, Some(current), desired, &manager).await?;
            }
            return Ok(held);
        };
        let uid = self.grant.uid().unwrap_or_default();
        if let churn::KeyIssue::Churn(wait) | churn::KeyIssue::RotationWaits(wait) =
            self.shared.keys.check(&uid, false)
        {
            return Err(Error::Wait {
                reason: "CredentialsChurn",
                message: format!(
                    "this BucketAccess needs another access key soon after the last one, so something keeps undoing \
                     kopper's work (rewriting Secret {secret_name}, or deleting its key): kopper tries again in {}s",
                    wait.as_secs().max(1)
                ),
                retry_after: wait,
            });
        }
        let created = provider.create_access_key(user).await;
        if created.is_ok() || created.as_ref().is_err_and(|e| e.kind == FailureKind::Unavailable) {
            self.shared.keys.record(&uid);
        }
        let key = created?;
        let desired = self.desired_secret(&contents, &key.id, &key.secret);
        secret::write(&secrets, current.as_ref(), desired, &manager).await?;
        info!(user, key = %key.id, "wrote the grant's access key into its Secret");
        self.delete_former_secrets(&secrets, &secret_name).await?;
        Ok(key.id)
    }

    /// Deletes the Secrets this grant keeps under another name than `current` (its
    /// `spec.secretName` changed): their key was deleted with the plan that made the new one.
    /// Looked for only when a new key is written, so an idle pass lists nothing.
    async fn delete_former_secrets(&self, secrets: &Api<Secret>, current: &str) -> Result<(), Error> {
        let label = format!("{ACCESS_LABEL}={}", super::names::label_value(&self.grant.name_any()));
        let params = kube::api::ListParams::default().labels(&label);
        let listed =
            secrets.list_metadata(&params).await.map_err(Error::kube("listing the grant's Secrets"))?;
        for former in listed.items.iter().filter(|former| former.name_any() != current) {
            if self.keeper(former) == secret::Keeper::ThisBucket {
                super::delete_exactly(secrets, &former.name_any(), former.uid()).await?;
                info!(secret = former.name_any(), "deleted the grant's Secret of a former spec.secretName");
            }
        }
        Ok(())
    }

    fn keeper(&self, current: &impl Resource) -> secret::Keeper {
        secret::keeper_of(current, self.grant, ACCESS_LABEL)
    }

    /// The grant's Secret with a key pair: the Bucket Secret's keys, labelled and owned by the
    /// BucketAccess (so it goes with it).
    fn desired_secret(&self, contents: &secret::Contents, key_id: &str, secret_key: &str) -> Secret {
        let mut data: BTreeMap<String, ByteString> =
            contents.entries().into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect();
        data.insert(secret::ACCESS_KEY_ID.to_owned(), ByteString(key_id.as_bytes().to_vec()));
        data.insert(secret::SECRET_ACCESS_KEY.to_owned(), ByteString(secret_key.as_bytes().to_vec()));
        let owner = self.grant.controller_owner_ref(&()).map(|mut owner| {
            owner.block_owner_deletion = None;
            vec![owner]
        });
        Secret {
            metadata: ObjectMeta {
                name: Some(self.grant.secret_name()),
                namespace: self.grant.namespace(),
                labels: Some(BTreeMap::from([(
                    ACCESS_LABEL.to_owned(),
                    super::names::label_value(&self.grant.name_any()),
                )])),
                owner_references: owner,
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    /// The Secret with its key pair kept and the rest as it should be; `None` when nothing
    /// differs.
    fn refreshed(&self, current: &Secret, contents: &secret::Contents) -> Option<Secret> {
        let data = current.data.clone().unwrap_or_default();
        let key_id = String::from_utf8_lossy(&data.get(secret::ACCESS_KEY_ID)?.0).into_owned();
        let secret_key = String::from_utf8_lossy(&data.get(secret::SECRET_ACCESS_KEY)?.0).into_owned();
        let desired = self.desired_secret(contents, &key_id, &secret_key);
        let same = desired.data == current.data && secret::holds_labels(current, &desired);
        (!same).then_some(desired)
    }

    fn cached_record(&self) -> Record {
        let status = self.grant.status.clone().unwrap_or_default();
        Record { user_name: status.user_name, class_name: status.class_name, backend: status.backend }
    }

    /// Deletes the recorded user on the backend it was made on, proven this grant's by its
    /// cluster and grant uid tags, whether or not its Bucket still exists; whether it did.
    async fn delete_recorded(&self, record: &Record) -> Result<bool, Error> {
        delete_recorded_user(self.ctx, self.shared, record, &self.grant.uid().unwrap_or_default()).await
    }

    /// Removes what the grant has: its user's keys, policy and user (first: the key stops
    /// working), then its Secrets (the current and any of a former `spec.secretName`), then the
    /// record in status, once IAM says the user is gone. IAM is looked at only when status
    /// records a user (recorded before one is made), so a grant never consented to costs no
    /// provider call.
    async fn revoke(&self) -> Result<(), Error> {
        let cached = self.grant.status.clone().unwrap_or_default();
        let record = self.cached_record();
        let revoked = self.delete_recorded(&record).await?;
        self.give_back_place();
        self.delete_kept_secrets().await?;
        if record.user_name.is_some() || cached.access_key_id.is_some() || cached.bucket_name.is_some() {
            clear_record(self.ctx, self.grant).await?;
        }
        if revoked {
            let note = format!(
                "the IAM user and access key of this grant were deleted; Secret {} is gone",
                self.grant.secret_name()
            );
            publish(self.ctx, self.grant, EventType::Normal, "Revoked", note).await;
        }
        Ok(())
    }

    /// Deletes every Secret kopper keeps for this grant, under its secret name or a former one.
    async fn delete_kept_secrets(&self) -> Result<(), Error> {
        let api =
            Api::<Secret>::namespaced(self.ctx.client.clone(), &self.grant.namespace().unwrap_or_default());
        let label = format!("{ACCESS_LABEL}={}", super::names::label_value(&self.grant.name_any()));
        let params = kube::api::ListParams::default().labels(&label);
        let listed = api.list_metadata(&params).await.map_err(Error::kube("listing the grant's Secrets"))?;
        for kept in listed.items.iter().filter(|secret| self.keeper(*secret) == secret::Keeper::ThisBucket) {
            super::delete_exactly(&api, &kept.name_any(), kept.uid()).await?;
        }
        Ok(())
    }
}

/// Clears the record of the grant's user in its status (with `null`s, whatever the cache said).
async fn clear_record(ctx: &Context, grant: &BucketAccess) -> Result<(), Error> {
    let patch = json!({ "status": {
        "userName": null, "accessKeyId": null, "bucketName": null, "bucketUid": null, "className": null,
        "backend": null,
    }});
    patch_status(ctx, grant, patch).await
}

/// Deletes the user `user` (its keys, then its policy, then it) when `proves` says its tags
/// make it kopper's to delete; whether it did.
async fn delete_grant_user(
    provider: &dyn Provider,
    user: &str,
    proves: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Result<bool, Error> {
    let Some(tags) = provider.user_tags(user).await? else { return Ok(false) };
    if !proves(&tags) {
        return Ok(false);
    }
    for key in provider.access_keys(user).await? {
        provider.delete_access_key(user, &key.id).await?;
    }
    provider.delete_user_policy(user, POLICY_NAME).await?;
    provider.delete_user(user).await?;
    info!(user, "deleted a grant's IAM user, its policy and keys");
    Ok(true)
}

/// Deletes the users of grants gone without their finalizer ([`Tombstone`]), each on the
/// backend of the class it was made on and proven by its cluster and grant uid tags, until IAM
/// says it is gone; one that fails is tried again after [`TOMBSTONE_RETRY`]. Runs for as long
/// as kopper does. Tombstones live in memory: those of grants deleted while kopper is down
/// or before it restarts are left to the sweep.
pub(super) async fn drain_tombstones(ctx: Arc<Context>, shared: Arc<Shared>, index: Arc<GrantIndex>) {
    loop {
        let mut failed = false;
        for tombstone in index.tombstones() {
            match delete_tombstone(&ctx, &shared, &tombstone).await {
                Ok(()) => index.forget_tombstone(&tombstone),
                Err(error) => {
                    failed = true;
                    warn!(
                        user = tombstone.user_name,
                        "could not delete the user of a deleted BucketAccess: {error}"
                    );
                }
            }
        }
        if failed {
            let _ = tokio::time::timeout(TOMBSTONE_RETRY, index.buried.notified()).await;
        } else {
            index.buried.notified().await;
        }
    }
}

async fn delete_tombstone(ctx: &Context, shared: &Shared, tombstone: &Tombstone) -> Result<(), Error> {
    let record = Record {
        user_name: Some(tombstone.user_name.clone()),
        class_name: tombstone.class_name.clone(),
        backend: tombstone.backend.clone(),
    };
    if delete_recorded_user(ctx, shared, &record, &tombstone.grant_uid).await? {
        info!(user = tombstone.user_name, "deleted the user of a BucketAccess deleted without its finalizer");
    }
    Ok(())
}

/// Deletes the user `record` names on the backend it was made on ([`recorded_provider`]),
/// proven the grant `grant_uid`'s by its cluster and grant uid tags; whether it did.
async fn delete_recorded_user(
    ctx: &Context,
    shared: &Shared,
    record: &Record,
    grant_uid: &str,
) -> Result<bool, Error> {
    let Some(user) = &record.user_name else { return Ok(false) };
    let provider = recorded_provider(ctx, shared, record, user).await?;
    let cluster = &shared.cluster_id;
    let proves = |tags: &BTreeMap<String, String>| {
        tags.get(names::TAG_CLUSTER) == Some(cluster)
            && tags.get(grant::TAG_GRANT_UID).is_some_and(|uid| !uid.is_empty() && uid == grant_uid)
    };
    delete_grant_user(provider.as_ref(), user, proves).await
}

/// Deletes the IAM user of every grant of the Bucket `bucket_uid`, each proven by its tags:
/// those under the Bucket's grants path ([`grant::bucket_grants_path`], one ListUsers call),
/// which holds the users of grants deleted while kopper was down or without their finalizer,
/// and those kopper knows of (`grants`: each one's uid and recorded user, from
/// [`GrantIndex::recorded_users`]), by name. A grant whose user is made after the listing
/// reads the Bucket after making it ([`grant::after_create`]) and deletes it itself. How many
/// it deleted.
pub async fn revoke_bucket_grants(
    provider: &dyn Provider,
    cluster: &str,
    bucket_uid: &str,
    grants: &[(String, Option<String>)],
) -> Result<usize, Error> {
    let path = grant::bucket_grants_path(cluster, bucket_uid);
    let mut users: BTreeSet<String> =
        provider.users(&path, &grant::bucket_grants_prefix(cluster, bucket_uid)).await?.into_iter().collect();
    for (grant_uid, recorded) in grants {
        let owner = GrantOwner {
            cluster: cluster.to_owned(),
            namespace: String::new(),
            name: String::new(),
            grant_uid: grant_uid.clone(),
            bucket_uid: bucket_uid.to_owned(),
        };
        users.insert(owner.user_name());
        users.extend(recorded.iter().cloned());
    }
    // Every user is tried: one that cannot be deleted now keeps no other's key working.
    let (mut deleted, mut first_error) = (0, None);
    for user in users {
        match delete_grant_user(provider, &user, |tags| grant::is_grant_of_bucket(tags, cluster, bucket_uid))
            .await
        {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(error) => {
                warn!(
                    user,
                    "could not delete a grant's IAM user, retried with the Bucket's cleanup: {error}"
                );
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(deleted), Err)
}

/// The provider of the backend a grant's user was made on: its recorded class's, refused when
/// that class is gone or now names another backend than the one recorded. The user is on the
/// recorded one: looking for it on the class's new backend would find nothing and call it
/// deleted while its key still works.
async fn recorded_provider(
    ctx: &Context,
    shared: &Shared,
    record: &Record,
    user: &str,
) -> Result<Arc<dyn Provider>, Error> {
    shared.wait_for_classes().await?;
    let binding = match &record.class_name {
        Some(name) => Binding::Named(name.clone()),
        None => Binding::BuiltIn,
    };
    let class = shared
        .class_of(binding)
        .map_err(|error| recorded_class_unavailable(error, user, record.class_name.as_deref()))?;
    if let Some(backend) = &record.backend
        && *backend != class.identity
    {
        return Err(Error::blocked(
            "BackendChanged",
            format!("the IAM user {user} of this BucketAccess: {}", backend_moved(backend, &class)),
        ));
    }
    shared.provider(ctx, &class).await
}

/// Why nothing is made or deleted for a grant whose user or Bucket is on `recorded`, a
/// backend its class no longer uses.
fn backend_moved(recorded: &str, class: &ClassInUse) -> String {
    format!(
        "made on backend {recorded}, and {} now uses backend {}: kopper neither makes nor deletes grant \
         credentials meanwhile. A cluster admin sets the class's backend back (spec.backend and its \
         credentials; kopper's --s3-* flags for the built-in class)",
        class.binding.describe(),
        class.identity
    )
}

/// A refusal about the Bucket's class, said for a BucketAccess: the consumer can change
/// neither the Bucket nor its class, so the message names the Bucket and who must act, not a
/// Bucket's fields or finalizer.
fn for_consumer(error: Error, (namespace, name): (&str, &str)) -> Error {
    let message = |reason: &str| {
        format!(
            "the BucketClass of Bucket {namespace}/{name} cannot be used now ({reason}): its owner or a cluster \
             admin must act; this BucketAccess is granted once the class is back"
        )
    };
    match error {
        Error::Blocked { reason: reason @ "ClassNotFound", .. } => Error::blocked(reason, message(reason)),
        Error::Wait { reason: reason @ "ClassNotReady", retry_after, .. } => {
            Error::Wait { reason, message: message(reason), retry_after }
        }
        error => error,
    }
}

/// The error of a revocation whose recorded class is missing, said for a BucketAccess (which
/// names no class itself): which user waits, on which class, and what brings it back.
fn recorded_class_unavailable(error: Error, user: &str, class: Option<&str>) -> Error {
    match (&error, class) {
        (Error::Blocked { reason: "ClassNotFound", .. }, Some(class)) => Error::blocked(
            "ClassNotFound",
            format!(
                "the IAM user {user} of this BucketAccess was made on the backend of BucketClass {class}, which \
                 no longer exists, so kopper cannot delete it: a cluster admin restores BucketClass {class} (the \
                 same backend), or deletes the user and then this BucketAccess's finalizer by hand"
            ),
        ),
        _ => error,
    }
}

/// The refusal of a Secret under the grant's secret name that kopper did not make for it.
fn secret_taken(keeper: secret::Keeper, name: &str) -> Result<(), Error> {
    if keeper == secret::Keeper::ThisBucket {
        return Ok(());
    }
    Err(Error::blocked(
        "SecretNameTaken",
        format!(
            "Secret {name} was not made by kopper for this BucketAccess; kopper never takes or overwrites it and \
             issues no credentials into it: set spec.secretName to a name no other Secret in the namespace has"
        ),
    ))
}

fn ready_reason(grant: &BucketAccess) -> Option<String> {
    let conditions = &grant.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == READY).map(|c| c.reason.clone())
}

/// Puts a failed pass into the Ready condition and, when the reason is new, a Warning Event.
async fn report(ctx: &Context, grant: &BucketAccess, error: &Error) {
    let (reason, message) = error.reason();
    let previous = ready_reason(grant);
    if let Err(write_error) =
        write_status(ctx, grant, |status| set_ready(status, grant, "False", reason, &message)).await
    {
        warn!("could not write the BucketAccess's status: {write_error}");
    }
    if previous.as_deref() != Some(reason) {
        publish(ctx, grant, EventType::Warning, reason, message).await;
    }
}

/// Sets the Ready condition, keeping its transition time while its status stays the same.
fn set_ready(
    status: &mut BucketAccessStatus,
    grant: &BucketAccess,
    value: &str,
    reason: &str,
    message: &str,
) {
    let generation = grant.meta().generation;
    super::set_ready_condition(&mut status.conditions, generation, value, reason, message);
    status.observed_generation = generation;
}

/// Writes the status fields `change` changes, only if it changes any. The status this pass
/// wrote before is the base, so that a second write in one pass sends only its own change.
async fn write_status(
    ctx: &Context,
    grant: &BucketAccess,
    change: impl FnOnce(&mut BucketAccessStatus),
) -> Result<(), Error> {
    let old = grant.status.clone().unwrap_or_default();
    let mut new = old.clone();
    change(&mut new);
    if new == old {
        return Ok(());
    }
    let patch = json!({ "status": super::status_patch(&old, &new) });
    patch_status(ctx, grant, patch).await
}

/// Merge-patches the grant's status with `patch`.
async fn patch_status(ctx: &Context, grant: &BucketAccess, patch: serde_json::Value) -> Result<(), Error> {
    let api = Api::<BucketAccess>::namespaced(ctx.client.clone(), &grant.namespace().unwrap_or_default());
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..Default::default() };
    api.patch_status(&grant.name_any(), &params, &Patch::Merge(patch))
        .await
        .map_err(Error::kube("writing the BucketAccess's status"))?;
    Ok(())
}

async fn publish(ctx: &Context, grant: &BucketAccess, type_: EventType, reason: &str, note: String) {
    ctx.recorder.record(&grant.object_ref(&()), type_, "Reconcile", reason, note).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(namespace: &str, name: &str, bucket_ref: serde_json::Value) -> BucketAccess {
        serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "BucketAccess",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"bucketRef": bucket_ref, "mode": "ReadOnly"},
        }))
        .unwrap()
    }

    #[test]
    fn the_index_maps_a_bucket_to_the_grants_naming_it_in_any_namespace() {
        let index = GrantIndex::default();
        let reader = grant("team-b", "reader", json!({"namespace": "team-a", "name": "data"}));
        let own = grant("team-a", "own", json!({"name": "data"}));
        let other = grant("team-b", "other", json!({"namespace": "team-a", "name": "logs"}));
        for grant in [&reader, &own, &other] {
            index.note(grant, false);
        }
        let names = |refs: Vec<ObjectRef<BucketAccess>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(index.grants_of("team-a", "data")), ["own", "reader"]);
        index.note(&reader, true);
        assert_eq!(names(index.grants_of("team-a", "data")), ["own"]);
        assert!(index.grants_of("team-b", "data").is_empty());
    }

    fn bucket(shared: serde_json::Value, ready: &str) -> Bucket {
        serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "Bucket",
            "metadata": {"name": "data", "namespace": "team-a", "uid": "b-1"},
            "spec": {"sharedWith": shared},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    /// Churn on a Bucket never wakes the grant of a namespace it is not shared with (its
    /// passes would tell that namespace when the Bucket changes); it wakes those it is shared
    /// with, and one it was shared with until the change.
    #[test]
    fn a_bucket_change_wakes_only_the_grants_of_namespaces_it_is_shared_with() {
        use kube::runtime::watcher::Event;
        let index = Arc::new(GrantIndex::default());
        let (wake, mut woken) = futures::channel::mpsc::unbounded();
        let mut wakes = GrantWakes::new(index.clone(), wake);
        for namespace in ["team-b", "team-c"] {
            index.note(&grant(namespace, "g", json!({"namespace": "team-a", "name": "data"})), false);
        }
        let mut drain = || {
            let mut names = Vec::new();
            while let Ok(grant) = woken.try_recv() {
                names.push(grant.namespace.unwrap_or_default());
            }
            names
        };
        let shared_b = json!([{"namespace": "team-b", "mode": "ReadOnly"}]);
        wakes.after(&Event::Apply(bucket(shared_b.clone(), "False")));
        assert_eq!(drain(), ["team-b"]);
        wakes.after(&Event::Apply(bucket(shared_b.clone(), "True")));
        assert_eq!(drain(), ["team-b"]);
        wakes.after(&Event::Apply(bucket(shared_b.clone(), "True")));
        assert!(drain().is_empty(), "nothing the grants decide on changed");
        wakes.after(&Event::Apply(bucket(json!([]), "True")));
        assert_eq!(drain(), ["team-b"], "consent withdrawn: told");
        wakes.after(&Event::Apply(bucket(json!([]), "False")));
        wakes.after(&Event::Delete(bucket(json!([]), "False")));
        assert!(drain().is_empty(), "team-c never, team-b no more");
    }

    /// A revocation whose recorded class is gone says so for the BucketAccess: the user, the
    /// class and what to do, never "set spec.className", a field a BucketAccess lacks.
    /// A consumer told that a Bucket's class is missing or not ready reads the Bucket and who
    /// must act, never a Bucket's fields: whether the refusal holds (not found) or waits (not
    /// ready, retried as before).
    #[test]
    fn class_refusals_are_said_for_the_consumer() {
        let missing = Error::blocked("ClassNotFound", "set spec.className to a class that does");
        let waiting = Error::Wait {
            reason: "ClassNotReady",
            message: "this Bucket proceeds once it is ready".into(),
            retry_after: Duration::from_secs(30),
        };
        for error in [missing, waiting] {
            let said = for_consumer(error, ("team-a", "data"));
            let (reason, message) = said.reason();
            assert!(["ClassNotFound", "ClassNotReady"].contains(&reason));
            assert!(message.contains("Bucket team-a/data") && message.contains("BucketAccess"), "{message}");
            assert!(
                !message.contains("spec.className") && !message.contains("this Bucket proceeds"),
                "{message}"
            );
        }
        assert!(matches!(
            for_consumer(
                Error::Wait { reason: "ClassNotReady", message: String::new(), retry_after: Duration::ZERO },
                ("a", "b")
            ),
            Error::Wait { .. }
        ));
    }

    #[test]
    fn a_revocation_on_a_deleted_class_names_the_user_and_the_class() {
        let missing = || Error::blocked("ClassNotFound", "set spec.className to a class that does");
        let (reason, message) = recorded_class_unavailable(missing(), "kopper-c-ga-1", Some("fast")).reason();
        assert_eq!(reason, "ClassNotFound");
        assert!(message.contains("kopper-c-ga-1") && message.contains("BucketClass fast"), "{message}");
        assert!(!message.contains("spec.className"), "{message}");
        let other = Error::blocked("AccessDenied", "denied");
        assert_eq!(recorded_class_unavailable(other, "u", Some("fast")).reason().0, "AccessDenied");
    }

    /// A grant gone while its status records a user (its finalizer stripped) leaves that user
    /// to be deleted, whether its Delete is seen or it is missing from a relist; one gone with
    /// nothing recorded leaves nothing.
    #[test]
    fn a_grant_gone_with_a_recorded_user_leaves_a_tombstone() {
        let index = GrantIndex::default();
        let granted = |name: &str, user: Option<&str>| {
            let mut grant = grant("team-b", name, json!({"namespace": "team-a", "name": "data"}));
            grant.metadata.uid = Some(format!("uid-{name}"));
            grant.status = Some(BucketAccessStatus {
                user_name: user.map(str::to_owned),
                class_name: Some("fast".into()),
                backend: Some("backend-1".into()),
                ..Default::default()
            });
            index.note(&grant, false);
            grant
        };
        let deleted = granted("deleted", Some("user-1"));
        granted("relisted", Some("user-2"));
        let never = granted("never", None);
        assert!(index.note(&deleted, true), "its peers are woken");
        index.note(&never, true);
        let _ = index.keep_only(&HashSet::new());
        let mut tombstones = index.tombstones();
        tombstones.sort_by(|a, b| a.user_name.cmp(&b.user_name));
        let expected = |name: &str, user: &str| Tombstone {
            grant_uid: format!("uid-{name}"),
            user_name: user.into(),
            class_name: Some("fast".into()),
            backend: Some("backend-1".into()),
        };
        assert_eq!(tombstones, [expected("deleted", "user-1"), expected("relisted", "user-2")]);
        index.forget_tombstone(&tombstones[0]);
        assert_eq!(index.tombstones(), [expected("relisted", "user-2")]);
    }

    /// A grant given a place that stops before its user is recorded (its class forbids keys,
    /// the backend fails) gives the place back when it is revoked or deleted, or missing from
    /// a relist, and says so: a grant refused for want of that place is woken.
    #[test]
    fn a_place_given_back_before_a_user_is_recorded_wakes_the_waiting_peers() {
        let index = GrantIndex::default();
        let placed = |name: &str| {
            let mut grant = grant("team-b", name, json!({"namespace": "team-a", "name": "data"}));
            grant.metadata.uid = Some(format!("uid-{name}"));
            index.note(&grant, false);
            assert!(index.admit(&grant));
            grant
        };
        let (revoked, deleted) = (placed("revoked"), placed("deleted"));
        placed("relisted");
        let waiting = grant("team-b", "waiting", json!({"namespace": "team-a", "name": "data"}));
        index.note(&waiting, false);
        assert!(index.release(&revoked.uid().unwrap()), "revoked: its place is given back");
        assert!(!index.release(&revoked.uid().unwrap()), "once");
        assert!(index.note(&deleted, true), "deleted: its peers are woken");
        let live = HashSet::from([ObjectRef::from_obj(&revoked), ObjectRef::from_obj(&waiting)]);
        let woken: Vec<_> = index.keep_only(&live).into_iter().map(|peer| peer.name).collect();
        assert_eq!(woken, ["revoked", "waiting"], "gone from a relist: its peers are woken");
        assert!(index.keep_only(&live).is_empty(), "nothing more to give back");
    }

    #[test]
    fn the_last_place_goes_once_and_comes_back_when_its_holder_gives_it_back() {
        let index = GrantIndex::default();
        let grants: Vec<_> = (0..=grant::MAX_GRANTS_PER_NAMESPACE)
            .map(|i| {
                let mut grant =
                    grant("team-b", &format!("g{i}"), json!({"namespace": "team-a", "name": "data"}));
                grant.metadata.uid = Some(format!("uid-{i}"));
                index.note(&grant, false);
                grant
            })
            .collect();
        let (last, first) = (grants.last().unwrap(), &grants[0]);
        for grant in &grants[..grant::MAX_GRANTS_PER_NAMESPACE] {
            assert!(index.admit(grant));
        }
        assert!(!index.admit(last), "the bound is full, though no status shows a user yet");
        assert!(index.admit(first), "a grant in place keeps it");
        let mut other = grant("team-c", "g", json!({"namespace": "team-a", "name": "data"}));
        other.metadata.uid = Some("uid-c".into());
        index.note(&other, false);
        assert!(index.admit(&other), "another namespace has its own places");
        let holders = index.recorded_users("team-a", "data");
        assert_eq!(holders.len(), grant::MAX_GRANTS_PER_NAMESPACE + 1, "the ten and team-c's: {holders:?}");
        assert!(!holders.iter().any(|(uid, _)| *uid == format!("uid-{}", grant::MAX_GRANTS_PER_NAMESPACE)));
        index.release("uid-0");
        assert!(index.admit(last));
        assert!(!index.admit(first));
    }
}
