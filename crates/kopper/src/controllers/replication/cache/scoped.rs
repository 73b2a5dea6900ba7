//! Metadata-only watches of objects that are not kopper's copies, scoped to what the rules
//! need: the rules' source namespaces (to find sources), and the names of sources whose
//! copy was found blocked by an object kopper did not make (to see that object go). They
//! start and stop as rules change, so memory follows what is replicated, not what the
//! cluster holds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};

type Meta<K> = PartialObjectMeta<K>;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::task::JoinHandle;

use super::events::{CacheEvents, ListedChange, ScopeList, SourceLookup};
use super::sources::Memo;
use crate::controllers::replication::desired::Found;
use crate::controllers::replication::metrics::{ReplicationMetrics, ScopedWatchLabels};
use crate::controllers::replication::model::RULE_CONTROLLER;
use crate::controllers::replication::model::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectInfo, ObjectKind, RuleId, SERVICE_ACCOUNT_NAME_ANNOTATION,
    Scope,
};
use crate::runtime::cache::FirstList;

/// How long a pass waits for a new scoped watch's first list before it fails and is retried.
const FIRST_LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Objects per page when the engine lists metadata of objects tenants write (the scoped
/// watches here, a rule's copies at cleanup). Metadata alone can be large, and tenants
/// decide it: annotations may hold 256 KiB (kubectl's last-applied copy of the object
/// among them) and managedFields as much again in keys. kube's default page of 500 could
/// then be over 100 MiB of text, held twice while decoded; ten bound a page near 12 MiB
/// whatever tenants store, for one request per ten objects, paid at a watch's first list
/// and after each relist.
pub const METADATA_PAGE_SIZE: u32 = 10;

/// Objects per page of the cluster-wide watch, which lists every object of its kind kopper
/// did not make: at ten a page, 200,000 Secrets would take 20,000 requests, longer than a
/// pass waits for a first list ([`FIRST_LIST_TIMEOUT`]) and near the time a continue token
/// lasts. Fifty bound a page near 60 MiB in the worst case (every object at the metadata
/// limit), and near 100 KiB for the usual few KiB each.
pub const CLUSTER_PAGE_SIZE: u32 = 50;

/// Source namespaces of one kind watched one by one; beyond this, one cluster-wide watch
/// replaces them. Each watch holds a connection to the API server, so a ConfigMapSync in
/// every tenant's namespace must not mean a watch per tenant; past this many, holding the
/// metadata of every object of the kind costs less than the connections.
pub const MAX_NAMESPACE_WATCHES: usize = 32;

/// Once one cluster-wide watch stands in for the source namespaces' watches, it stays until
/// they fall to this many: a rule made and deleted in a loop at the limit must not make
/// kopper list every object of the kind each time (hysteresis).
pub const NAMESPACE_WATCHES_AGAIN: usize = MAX_NAMESPACE_WATCHES * 3 / 4;

/// Names of one kind watched one by one to see an object that blocks a copy go; beyond
/// this, one cluster-wide watch replaces them. Tenants choose how many names are blocked
/// (a ConfigMapSync per name squatted somewhere), so the connections they cost are capped
/// here, not by them.
pub const MAX_NAME_WATCHES: usize = 32;

impl Scope {
    /// The watches that cover the source namespaces `namespaces`, given whether a
    /// cluster-wide watch of the kind runs now (`cluster_now`).
    pub fn for_sources<'n>(
        namespaces: impl ExactSizeIterator<Item = &'n str>,
        cluster_now: bool,
    ) -> Vec<Scope> {
        let limit = if cluster_now { NAMESPACE_WATCHES_AGAIN } else { MAX_NAMESPACE_WATCHES };
        if namespaces.len() > limit {
            return vec![Scope::Cluster];
        }
        namespaces.map(|namespace| Scope::Namespace(namespace.to_owned())).collect()
    }
}

/// The objects one scoped watch sees, by namespace and name.
pub struct ScopeStore {
    objects: RwLock<HashMap<(String, String), ObjectInfo>>,
    ready: FirstList,
}

impl ScopeStore {
    fn new() -> Self {
        Self { objects: RwLock::default(), ready: FirstList::default() }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.is_ready()
    }

    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        let objects = self.objects.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        objects.contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<ObjectInfo> {
        let objects = self.objects.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        objects.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    pub fn objects(&self) -> Vec<ObjectInfo> {
        self.objects_where(|_| true)
    }

    pub fn objects_where(&self, keep: impl Fn(&ObjectInfo) -> bool) -> Vec<ObjectInfo> {
        let objects = self.objects.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        objects.values().filter(|info| keep(info)).cloned().collect()
    }

    async fn wait_until_ready(&self) -> bool {
        self.ready.wait().await
    }
}

/// A scoped watch did not complete its first list in time.
#[derive(Debug, thiserror::Error)]
#[error("the watch of {kind}s in {scope:?} did not complete its first list within {FIRST_LIST_TIMEOUT:?}")]
pub struct ScopeNotReady {
    pub kind: ObjectKind,
    pub scope: Scope,
}

struct Running {
    store: Arc<ScopeStore>,
    task: JoinHandle<()>,
}

type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Every scoped watch, started on demand. Each watch's task holds the `Scoped` it belongs
/// to, to report its changes with it ([`CacheEvents`]); the tasks end on shutdown or when
/// their watch is stopped, so none outlives [`Scoped::stop_all`].
pub struct Scoped {
    client: Client,
    events: Arc<dyn CacheEvents>,
    /// Told when a source goes, to forget its content.
    memo: Arc<Memo>,
    metrics: Arc<crate::runtime::Metrics>,
    gauges: Arc<ReplicationMetrics>,
    shutdown: Shutdown,
    watches: Mutex<HashMap<(ObjectKind, Scope), Running>>,
    /// Names found blocking a copy, per kind, with the rules whose copies they block: what
    /// the name watches (or the cluster-wide watch standing in for them) are for. A name
    /// goes once no rule's last pass found it blocked (its blocker went), or no rule copies
    /// under it any more. Locked after `watches`.
    blocked: Mutex<Blocked>,
}

type Blocked = HashMap<ObjectKind, BTreeMap<String, BTreeSet<RuleId>>>;

/// A view of the scoped watches of one kind, taken once per pass.
#[derive(Default)]
pub struct ScopedView {
    namespaces: HashMap<String, Arc<ScopeStore>>,
    names: HashMap<String, Arc<ScopeStore>>,
    cluster: Option<Arc<ScopeStore>>,
}

impl ScopedView {
    /// What is at a place where kopper has no copy: known when a ready watch covers it.
    pub fn found(&self, namespace: &str, name: &str) -> Found<'static> {
        let covering = [self.namespaces.get(namespace), self.names.get(name), self.cluster.as_ref()];
        match covering.into_iter().flatten().find(|store| store.is_ready()) {
            Some(store) if store.contains(namespace, name) => Found::Unmanaged,
            Some(_) => Found::Nothing,
            None => Found::Unknown,
        }
    }

    /// The objects in the watched namespaces `namespaces`.
    pub fn objects_in<'n>(&self, namespaces: impl IntoIterator<Item = &'n str>) -> Vec<ObjectInfo> {
        let namespaces: BTreeSet<&str> = namespaces.into_iter().collect();
        let mut objects: Vec<ObjectInfo> = namespaces
            .iter()
            .filter_map(|namespace| self.namespaces.get(*namespace))
            .flat_map(|store| store.objects())
            .collect();
        if let Some(cluster) = &self.cluster {
            let watched_apart = |namespace: &str| self.namespaces.contains_key(namespace);
            objects.extend(cluster.objects_where(|info| {
                namespaces.contains(info.namespace.as_str()) && !watched_apart(&info.namespace)
            }));
        }
        objects
    }
}

impl SourceLookup for ScopedView {
    fn source(&self, namespace: &str, name: &str) -> Option<ObjectInfo> {
        match self.namespaces.get(namespace) {
            Some(store) => store.get(namespace, name),
            None => self.cluster.as_ref()?.get(namespace, name),
        }
    }
}

impl Scoped {
    pub fn new(
        client: Client,
        events: Arc<dyn CacheEvents>,
        memo: Arc<Memo>,
        metrics: Arc<crate::runtime::Metrics>,
        gauges: Arc<ReplicationMetrics>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        Self {
            client,
            events,
            memo,
            metrics,
            gauges,
            shutdown: shutdown.boxed().shared(),
            watches: Mutex::default(),
            blocked: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(ObjectKind, Scope), Running>> {
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the watch of `scope` unless it runs, and returns its store.
    pub fn ensure(self: &Arc<Self>, kind: ObjectKind, scope: Scope) -> Arc<ScopeStore> {
        let mut watches = self.lock();
        let store = self.start(&mut watches, kind, scope);
        self.count_watches(&watches);
        store
    }

    /// Starts the watch of `scope` in `watches` unless it runs; its store.
    fn start(
        self: &Arc<Self>,
        watches: &mut HashMap<(ObjectKind, Scope), Running>,
        kind: ObjectKind,
        scope: Scope,
    ) -> Arc<ScopeStore> {
        if let Some(running) = watches.get(&(kind, scope.clone())) {
            return running.store.clone();
        }
        let store = Arc::new(ScopeStore::new());
        let task = match kind {
            ObjectKind::ConfigMap => self.spawn(kind, &scope, store.clone(), self.api::<ConfigMap>(&scope)),
            ObjectKind::Secret => self.spawn(kind, &scope, store.clone(), self.api::<Secret>(&scope)),
            ObjectKind::Other(_) => match kind.api_resource() {
                Some(resource) => {
                    self.spawn(kind, &scope, store.clone(), self.dynamic_api(&scope, &resource))
                }
                // Not served: a store never ready, whose waiters give up.
                None => {
                    store.ready.mark_stopped();
                    tokio::spawn(async {})
                }
            },
        };
        tracing::debug!(%kind, ?scope, "started a scoped watch");
        watches.insert((kind, scope), Running { store: store.clone(), task });
        store
    }

    fn stop_where(
        watches: &mut HashMap<(ObjectKind, Scope), Running>,
        stop: impl Fn(ObjectKind, &Scope) -> bool,
    ) {
        watches.retain(|(kind, scope), running| {
            let stopped = stop(*kind, scope);
            if stopped {
                tracing::debug!(%kind, ?scope, "stopped a scoped watch");
                running.task.abort();
            }
            !stopped
        });
    }

    /// Sets `kopper_scoped_watches` from the watches running.
    fn count_watches(&self, watches: &HashMap<(ObjectKind, Scope), Running>) {
        let kinds: BTreeSet<ObjectKind> =
            ObjectKind::ALL.into_iter().chain(watches.keys().map(|(kind, _)| *kind)).collect();
        for kind in kinds {
            for (label, is) in [
                ("namespace", (|s: &Scope| matches!(s, Scope::Namespace(_))) as fn(&Scope) -> bool),
                ("name", |s: &Scope| matches!(s, Scope::Name(_))),
                ("cluster", |s: &Scope| matches!(s, Scope::Cluster)),
            ] {
                let count = watches.keys().filter(|(of, scope)| *of == kind && is(scope)).count();
                let labels = ScopedWatchLabels { kind: kind.to_string(), scope: label.to_owned() };
                self.gauges
                    .scoped_watches
                    .get_or_create(&labels)
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
    }

    fn lock_blocked(&self) -> MutexGuard<'_, Blocked> {
        self.blocked.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Watches objects named `name` in every namespace, so that kopper sees an object that
    /// blocks a copy of rule `by` go. Past [`MAX_NAME_WATCHES`] blocked names of a kind, one
    /// cluster-wide watch covers them all and the name watches stop.
    pub fn watch_name(self: &Arc<Self>, kind: ObjectKind, name: &str, by: &RuleId) {
        // One lock from counting to starting, so concurrent passes cannot exceed the cap.
        let mut watches = self.lock();
        let mut blocked = self.lock_blocked();
        let names = blocked.entry(kind).or_default();
        names.entry(name.to_owned()).or_default().insert(by.clone());
        let blocked_names = names.len();
        drop(blocked);
        let covered = watches.contains_key(&(kind, Scope::Cluster))
            || watches.contains_key(&(kind, Scope::Name(name.to_owned())));
        if covered {
            return;
        }
        if blocked_names <= MAX_NAME_WATCHES {
            self.start(&mut watches, kind, Scope::Name(name.to_owned()));
        } else {
            tracing::info!(%kind, blocked_names, "more blocked names than name watches may be open; one cluster-wide watch covers them");
            self.start(&mut watches, kind, Scope::Cluster);
            Self::stop_where(&mut watches, |of, scope| of == kind && matches!(scope, Scope::Name(_)));
        }
        self.count_watches(&watches);
    }

    /// [`Scope::for_sources`] for `kind`, knowing whether its cluster-wide watch runs now.
    pub fn for_sources<'n>(
        &self,
        kind: ObjectKind,
        namespaces: impl ExactSizeIterator<Item = &'n str>,
    ) -> Vec<Scope> {
        let cluster_now = {
            let watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            watches.contains_key(&(kind, Scope::Cluster))
        };
        Scope::for_sources(namespaces, cluster_now)
    }

    /// The rules whose copies an object named `name` of `kind` was last found blocking.
    pub fn blocked_by(&self, kind: ObjectKind, name: &str) -> BTreeSet<RuleId> {
        let blocked = self.blocked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        blocked.get(&kind).and_then(|names| names.get(name)).cloned().unwrap_or_default()
    }

    /// A full pass of rule `by` found its copies of `kind` blocked under `names` (by objects
    /// kopper did not make), and under no other: names it found blocked before and not now
    /// no longer need watching for it. (A name the namespace path found blocked while the
    /// pass ran is dropped with the rest; the pass that path wakes finds it again, through
    /// its create meeting the blocker, and watches it anew.)
    pub fn still_blocked(&self, by: &RuleId, kind: ObjectKind, names: &BTreeSet<&str>) {
        let mut blocked = self.lock_blocked();
        // Names of the other kind are no longer the rule's either (its kind changed).
        for (of, blocked) in blocked.iter_mut() {
            blocked.retain(|name, rules| {
                if *of != kind || !names.contains(name.as_str()) {
                    rules.remove(by);
                }
                !rules.is_empty()
            });
        }
    }

    /// Stops the watches no rule needs: namespace and cluster-wide watches `needed` does not
    /// name, and the watches of blocked names no rule in force (`in_force`) found blocked,
    /// or no rule copies under any more (`copied` says which names still are). The
    /// cluster-wide watch that stood in for name watches stays while more names are blocked
    /// than name watches may be open; once fewer are, the names still blocked get their own
    /// watches again. The `needed` watches not running yet are started.
    pub fn retire(
        self: &Arc<Self>,
        needed: &HashSet<(ObjectKind, Scope)>,
        in_force: impl Fn(&RuleId) -> bool,
        copied: impl Fn(ObjectKind, &str) -> bool,
    ) {
        let mut watches = self.lock();
        let mut blocked = self.lock_blocked();
        for (kind, names) in blocked.iter_mut() {
            names.retain(|name, rules| {
                rules.retain(&in_force);
                !rules.is_empty() && copied(*kind, name)
            });
        }
        let count = |kind: ObjectKind| blocked.get(&kind).map_or(0, BTreeMap::len);
        let is_blocked =
            |kind: ObjectKind, name: &str| blocked.get(&kind).is_some_and(|names| names.contains_key(name));
        Self::stop_where(&mut watches, |kind, scope| match scope {
            Scope::Namespace(_) => !needed.contains(&(kind, scope.clone())),
            Scope::Cluster => !needed.contains(&(kind, Scope::Cluster)) && count(kind) <= MAX_NAME_WATCHES,
            Scope::Name(name) => !is_blocked(kind, name),
        });
        // What the rules need runs now, not once some pass asks for it: a change in a
        // source namespace whose watch was just swapped (for one cluster-wide, or back)
        // would otherwise go unseen.
        for (kind, scope) in needed {
            self.start(&mut watches, *kind, scope.clone());
        }
        let kinds: Vec<ObjectKind> = blocked.keys().copied().collect();
        for kind in kinds {
            if watches.contains_key(&(kind, Scope::Cluster)) {
                continue;
            }
            for name in blocked.get(&kind).into_iter().flat_map(BTreeMap::keys) {
                self.start(&mut watches, kind, Scope::Name(name.clone()));
            }
        }
        drop(blocked);
        self.count_watches(&watches);
    }

    /// Starts the watches of `scopes` and waits for their first lists.
    pub async fn ensure_ready(
        self: &Arc<Self>,
        kind: ObjectKind,
        scopes: Vec<Scope>,
    ) -> Result<(), ScopeNotReady> {
        for scope in scopes {
            let store = self.ensure(kind, scope.clone());
            let ready = tokio::time::timeout(FIRST_LIST_TIMEOUT, store.wait_until_ready()).await;
            if !matches!(ready, Ok(true)) {
                return Err(ScopeNotReady { kind, scope });
            }
        }
        Ok(())
    }

    /// Stops the watches `keep` rejects.
    pub fn retain(&self, keep: impl Fn(ObjectKind, &Scope) -> bool) {
        let mut watches = self.lock();
        Self::stop_where(&mut watches, |kind, scope| !keep(kind, scope));
        self.count_watches(&watches);
    }

    pub fn view(&self, kind: ObjectKind) -> ScopedView {
        let mut view = ScopedView::default();
        for ((of, scope), running) in self.lock().iter() {
            match scope {
                _ if *of != kind => {}
                Scope::Namespace(namespace) => {
                    view.namespaces.insert(namespace.clone(), running.store.clone());
                }
                Scope::Name(name) => {
                    view.names.insert(name.clone(), running.store.clone());
                }
                Scope::Cluster => view.cluster = Some(running.store.clone()),
            }
        }
        view
    }

    /// Stops every watch (on shutdown).
    pub fn stop_all(&self) {
        self.retain(|_, _| false);
    }

    /// The metadata API of objects of `K`, a ConfigMap or Secret, that `scope` covers.
    fn api<K>(&self, scope: &Scope) -> Api<Meta<K>>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        match scope {
            Scope::Namespace(namespace) => Api::namespaced(self.client.clone(), namespace),
            Scope::Name(_) | Scope::Cluster => Api::all(self.client.clone()),
        }
    }

    /// The metadata API of objects of the resource `resource` that `scope` covers.
    fn dynamic_api(&self, scope: &Scope, resource: &ApiResource) -> Api<Meta<DynamicObject>> {
        match scope {
            Scope::Namespace(namespace) => Api::namespaced_with(self.client.clone(), namespace, resource),
            Scope::Name(_) | Scope::Cluster => Api::all_with(self.client.clone(), resource),
        }
    }

    fn spawn<K>(
        self: &Arc<Self>,
        kind: ObjectKind,
        scope: &Scope,
        store: Arc<ScopeStore>,
        api: Api<Meta<K>>,
    ) -> JoinHandle<()>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let config = watch_config(scope);
        let not_served = format!("the API server does not serve {kind}");
        let events = crate::runtime::watch::watcher_of(api, config, not_served)
            .default_backoff()
            .take_until(self.shutdown.clone());
        let scoped = self.clone();
        let metrics = self.metrics.clone();
        let scope = scope.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut listing: Option<HashMap<(String, String), ObjectInfo>> = None;
            let kind_label = kind.to_string();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        // Counted once the list is done (see `copies`).
                        if matches!(event, watcher::Event::InitDone) {
                            metrics.relisted(RULE_CONTROLLER, &kind_label);
                        }
                        apply_event(kind, &scope, &store, &scoped, event, &mut listing)
                    }
                    Err(error) => {
                        tracing::warn!(%kind, ?scope, %error, "watch failed; retrying with backoff");
                        metrics.watch_failed(RULE_CONTROLLER, &kind_label);
                    }
                }
            }
            store.ready.mark_stopped();
        })
    }
}

/// What a scoped watch asks for: objects kopper did not make, in pages of
/// [`METADATA_PAGE_SIZE`] ([`CLUSTER_PAGE_SIZE`] for every namespace), and for a name, only
/// that name.
fn watch_config(scope: &Scope) -> watcher::Config {
    let config = match scope {
        Scope::Name(name) => watcher::Config::default().fields(&format!("metadata.name={name}")),
        Scope::Namespace(_) | Scope::Cluster => watcher::Config::default(),
    };
    let page = if *scope == Scope::Cluster { CLUSTER_PAGE_SIZE } else { METADATA_PAGE_SIZE };
    config.labels(&format!("{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}")).page_size(page)
}

/// What is kept of an object that is not a copy: enough to match it as a source, and of its
/// annotations (kubectl's last-applied copy of the whole object among them) only the one
/// that tells a service-account token, a credential, from other Secrets.
fn info_of<K>(object: &PartialObjectMeta<K>) -> ObjectInfo {
    let mut info = ObjectInfo::from_meta(&object.metadata);
    info.annotations.retain(|key, _| key == SERVICE_ACCOUNT_NAME_ANNOTATION);
    info
}

fn changes_between(
    before: &HashMap<(String, String), ObjectInfo>,
    after: &HashMap<(String, String), ObjectInfo>,
) -> Vec<ListedChange> {
    let added_or_changed = after.iter().filter_map(|(place, now)| match before.get(place) {
        Some(then) if then.resource_version == now.resource_version => None,
        then => Some((then.cloned(), Some(now.clone()))),
    });
    let gone = before
        .iter()
        .filter(|(place, _)| !after.contains_key(*place))
        .map(|(_, then)| (Some(then.clone()), None));
    added_or_changed.chain(gone).collect()
}

fn place(info: &ObjectInfo) -> (String, String) {
    (info.namespace.clone(), info.name.clone())
}

fn apply_event<K>(
    kind: ObjectKind,
    scope: &Scope,
    store: &ScopeStore,
    scoped: &Scoped,
    event: watcher::Event<PartialObjectMeta<K>>,
    listing: &mut Option<HashMap<(String, String), ObjectInfo>>,
) {
    let objects = || store.objects.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    match event {
        watcher::Event::Init => *listing = Some(HashMap::new()),
        watcher::Event::InitApply(object) => {
            let info = info_of(&object);
            listing.get_or_insert_default().insert(place(&info), info);
        }
        watcher::Event::InitDone => {
            // A first list tells nothing new: before the watch, its places were either
            // covered by another watch or looked at before each write. A list again after
            // the watch failed tells what changed meanwhile.
            let first = !store.is_ready();
            let listed = listing.take().unwrap_or_default();
            let changes = if first {
                *objects() = listed;
                Vec::new()
            } else {
                let mut objects = objects();
                let before = std::mem::replace(&mut *objects, listed);
                changes_between(&before, &objects)
            };
            store.ready.mark_ready();
            let blocked_by = match scope {
                Scope::Name(name) => scoped.blocked_by(kind, name),
                Scope::Namespace(_) | Scope::Cluster => BTreeSet::new(),
            };
            let list = ScopeList { kind, scope, blocked_by: &blocked_by, changes: &changes };
            scoped.events.scope_listed(&scoped.view(kind), list);
        }
        watcher::Event::Apply(object) => {
            let info = info_of(&object);
            let before = objects().insert(place(&info), info.clone());
            scoped.events.object_changed(&scoped.view(kind), kind, [before.as_ref(), Some(&info)]);
        }
        watcher::Event::Delete(object) => {
            let info = info_of(&object);
            let before = objects().remove(&place(&info));
            scoped.events.object_changed(&scoped.view(kind), kind, [before.as_ref(), None]);
            scoped.memo.forget(kind, &info);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service-account token is a credential a rule copies only when allowed to: the
    /// annotation that tells it is kept, the rest (last-applied among them) is not.
    #[test]
    fn a_watched_secret_keeps_only_what_tells_a_credential() {
        let token = PartialObjectMeta::<k8s_openapi::api::core::v1::Secret> {
            metadata: kube::api::ObjectMeta {
                name: Some("builder-token".into()),
                namespace: Some("ci".into()),
                annotations: Some(BTreeMap::from([
                    (SERVICE_ACCOUNT_NAME_ANNOTATION.into(), "builder".into()),
                    ("kubectl.kubernetes.io/last-applied-configuration".into(), "{}".into()),
                ])),
                ..kube::api::ObjectMeta::default()
            },
            ..PartialObjectMeta::default()
        };
        let info = info_of(&token);
        assert_eq!(info.credential_type(), Some(crate::tenancy::CREDENTIAL_SECRET_TYPES[0]));
        assert_eq!(info.annotations.keys().collect::<Vec<_>>(), [SERVICE_ACCOUNT_NAME_ANNOTATION]);
    }

    /// A relist after an outage tells what changed meanwhile: added, changed and gone
    /// objects, not those still at the version the watch held.
    #[test]
    fn a_list_finds_what_changed_since_the_watch_last_saw() {
        let at = |name: &str, version: &str| {
            let info = ObjectInfo {
                namespace: "src".into(),
                name: name.into(),
                resource_version: version.into(),
                ..ObjectInfo::default()
            };
            (place(&info), info)
        };
        let before = HashMap::from([at("kept", "1"), at("changed", "1"), at("gone", "1")]);
        let after = HashMap::from([at("kept", "1"), at("changed", "2"), at("added", "3")]);
        let mut found: Vec<(Option<String>, Option<String>)> = changes_between(&before, &after)
            .into_iter()
            .map(|(then, now)| {
                let tag = |info: Option<ObjectInfo>| {
                    info.map(|info| format!("{}@{}", info.name, info.resource_version))
                };
                (tag(then), tag(now))
            })
            .collect();
        found.sort();
        let tag = |text: &str| Some(text.to_owned());
        assert_eq!(
            found,
            [(None, tag("added@3")), (tag("changed@1"), tag("changed@2")), (tag("gone@1"), None)]
        );
    }

    /// A tenant's objects can carry hundreds of KiB of metadata each: every scoped watch
    /// lists them a few at a time, never in kube's default pages of 500, and never sees
    /// kopper's own copies (the copy watch has those).
    #[test]
    fn every_scoped_watch_lists_small_pages_of_objects_kopper_did_not_make() {
        let scopes = [
            (Scope::Namespace("team-a".into()), METADATA_PAGE_SIZE),
            (Scope::Name("settings".into()), METADATA_PAGE_SIZE),
            (Scope::Cluster, CLUSTER_PAGE_SIZE),
        ];
        for (scope, page) in scopes {
            let config = watch_config(&scope);
            assert_eq!(config.page_size, Some(page), "{scope:?}");
            assert_eq!(
                config.label_selector.as_deref(),
                Some(format!("{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}").as_str()),
                "{scope:?}"
            );
        }
        assert_eq!(
            watch_config(&Scope::Name("settings".into())).field_selector.as_deref(),
            Some("metadata.name=settings")
        );
    }

    fn store(ready: bool, objects: &[(&str, &str)]) -> Arc<ScopeStore> {
        let store = ScopeStore::new();
        let mut held = store.objects.write().unwrap();
        for (namespace, name) in objects {
            let info =
                ObjectInfo { namespace: (*namespace).into(), name: (*name).into(), ..ObjectInfo::default() };
            held.insert(place(&info), info);
        }
        drop(held);
        if ready {
            store.ready.mark_ready();
        }
        Arc::new(store)
    }

    #[test]
    fn a_place_is_known_only_where_a_ready_watch_covers_it() {
        let view = ScopedView {
            namespaces: [("src".to_owned(), store(true, &[("src", "cfg")]))].into(),
            names: [
                ("blocked".to_owned(), store(true, &[("team-a", "blocked")])),
                ("listing".to_owned(), store(false, &[("team-a", "listing")])),
            ]
            .into(),
            cluster: None,
        };
        assert_eq!(view.found("src", "cfg"), Found::Unmanaged);
        assert_eq!(view.found("src", "other"), Found::Nothing, "the namespace watch sees all of src");
        assert_eq!(view.found("team-a", "blocked"), Found::Unmanaged);
        assert_eq!(view.found("team-b", "blocked"), Found::Nothing, "the name watch sees every namespace");
        assert_eq!(view.found("team-a", "listing"), Found::Unknown, "a watch still listing tells nothing");
        assert_eq!(view.found("team-a", "unwatched"), Found::Unknown);
    }

    #[test]
    fn a_cluster_wide_watch_covers_every_place_and_every_source_namespace() {
        let cluster = store(true, &[("tenant-1", "cfg"), ("tenant-2", "cfg"), ("other", "x")]);
        let view = ScopedView { cluster: Some(cluster), ..ScopedView::default() };
        assert_eq!(view.found("other", "x"), Found::Unmanaged);
        assert_eq!(view.found("tenant-3", "cfg"), Found::Nothing);
        let mut sources: Vec<String> =
            view.objects_in(["tenant-1", "tenant-2"]).into_iter().map(|info| info.namespace).collect();
        sources.sort();
        assert_eq!(sources, ["tenant-1", "tenant-2"]);
        assert!(view.source("tenant-1", "cfg").is_some());
    }

    #[test]
    fn many_source_namespaces_share_one_cluster_wide_watch_until_they_are_far_fewer() {
        let namespaces = |count: usize| -> Vec<String> { (0..count).map(|i| format!("ns-{i}")).collect() };
        let scopes = |count: usize, cluster_now| {
            let names = namespaces(count);
            Scope::for_sources(names.iter().map(String::as_str), cluster_now)
        };
        assert_eq!(scopes(MAX_NAMESPACE_WATCHES, false).len(), MAX_NAMESPACE_WATCHES);
        assert_eq!(scopes(MAX_NAMESPACE_WATCHES + 1, false), [Scope::Cluster]);
        // Back under the limit, the cluster-wide watch stays, until far fewer remain.
        assert_eq!(scopes(MAX_NAMESPACE_WATCHES, true), [Scope::Cluster]);
        assert_eq!(scopes(NAMESPACE_WATCHES_AGAIN + 1, true), [Scope::Cluster]);
        assert_eq!(scopes(NAMESPACE_WATCHES_AGAIN, true).len(), NAMESPACE_WATCHES_AGAIN);
    }
}
