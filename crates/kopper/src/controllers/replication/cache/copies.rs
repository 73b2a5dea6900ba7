//! kopper's copies, as one watch per kind selected by kopper's managed-by label sees them:
//! content included, so a copy is checked against its source without ever reading it, and
//! kept as a [`CopyState`] of digests, so memory follows the number of copies, not their
//! size.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::core::{ApiResource, NamespaceResourceScope, ObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::task::JoinHandle;

use super::events::{CacheEvents, CopyChange};
use super::scoped::Scoped;
use crate::controllers::replication::desired::{DesiredCopy, Found};
use crate::controllers::replication::model::RULE_CONTROLLER;
use crate::controllers::replication::model::{
    CopyKey, CopyState, GenericWire, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Marks, ObjectKind, Payload,
    Rendering, Renderings, canonical_number,
};
use crate::runtime::Metrics;
use crate::runtime::cache::FirstList;
use crate::runtime::metrics::CacheLabels;

/// Objects per page of a list of copies. Copies come with their content (to see one edited
/// by hand), and a ConfigMap or Secret may hold up to 1 MiB: pages of 100 made a restart
/// among 300 large copies peak at 325 MiB, against 90 MiB in steady state. Five per page
/// bound a page near 8 MiB of text whatever tenants store (1 MiB of data is about 1.4 MiB
/// of JSON with base64 and annotations; kube's client holds a page's text twice
/// while decoding it), for one more request per five copies: with ten, a restart among
/// 300 copies of 900 KiB peaked at 1.55× the steady state.
const LIST_PAGE_SIZE: u32 = 5;

/// A kind kopper copies, as its copy watch decodes it.
pub trait Replicable:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Sized + Send + Sync + 'static
{
    const KIND: ObjectKind;
    /// The fields of one object the watch reads: see [`WatchedCopy`].
    type Wire: serde::de::DeserializeOwned + Into<WatchedCopy<Self>>;
}

impl Replicable for ConfigMap {
    const KIND: ObjectKind = ObjectKind::ConfigMap;
    type Wire = ConfigMapWire;
}

impl Replicable for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;
    type Wire = SecretWire;
}

/// One copy as its watch delivers it: its metadata without `managedFields`, and its
/// content moved into a [`Payload`]. kopper never reads a copy's managedFields, and decoding
/// them (a JSON tree per field manager) cost as much as a small copy's content on every event
/// of a fan-out; fields kopper does not name are skipped unread.
pub struct WatchedCopy<K> {
    metadata: ObjectMeta,
    payload: Payload,
    marker: PhantomData<fn() -> K>,
}

// By hand: derived, they would ask the same of `K`, which is never held.
impl<K> Clone for WatchedCopy<K> {
    fn clone(&self) -> Self {
        Self { metadata: self.metadata.clone(), payload: self.payload.clone(), marker: PhantomData }
    }
}

/// Names the content's keys, never a value ([`Payload`]'s own form).
impl<K> std::fmt::Debug for WatchedCopy<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedCopy")
            .field("metadata", &self.metadata)
            .field("payload", &self.payload)
            .finish()
    }
}

impl<K: Replicable> WatchedCopy<K> {
    fn new(metadata: CopyMeta, payload: Payload) -> Self {
        Self { metadata: metadata.into(), payload, marker: PhantomData }
    }

    /// Its metadata holds only the fields of [`CopyMeta`]; the others are `None`.
    fn into_parts(self) -> (ObjectMeta, Payload) {
        (self.metadata, self.payload)
    }
}

impl<'de, K: Replicable> serde::Deserialize<'de> for WatchedCopy<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::Wire::deserialize(deserializer).map(Into::into)
    }
}

impl<K: Replicable> Resource for WatchedCopy<K> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dynamic: &()) -> Cow<'_, str> {
        K::kind(dynamic)
    }
    fn group(dynamic: &()) -> Cow<'_, str> {
        K::group(dynamic)
    }
    fn version(dynamic: &()) -> Cow<'_, str> {
        K::version(dynamic)
    }
    fn api_version(dynamic: &()) -> Cow<'_, str> {
        K::api_version(dynamic)
    }
    fn plural(dynamic: &()) -> Cow<'_, str> {
        K::plural(dynamic)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The metadata of a copy that kopper reads: every field [`CopyState::new`], the catch-up
/// wait and the router (`wake::Router::route_copy`) look at. A field read there must be added here, or it
/// reads as `None` (the decoding test lists the fields left out).
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CopyMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

impl From<CopyMeta> for ObjectMeta {
    fn from(meta: CopyMeta) -> Self {
        ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: meta.owner_references,
            deletion_timestamp: meta.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

/// The fields of a ConfigMap its copy watch reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapWire {
    metadata: CopyMeta,
    data: Option<BTreeMap<String, String>>,
    binary_data: Option<BTreeMap<String, ByteString>>,
    immutable: Option<bool>,
}

impl From<ConfigMapWire> for WatchedCopy<ConfigMap> {
    fn from(wire: ConfigMapWire) -> Self {
        Self::new(wire.metadata, Payload::config_map(wire.data, wire.binary_data, wire.immutable))
    }
}

/// The fields of a Secret its copy watch reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretWire {
    metadata: CopyMeta,
    data: Option<BTreeMap<String, ByteString>>,
    #[serde(rename = "type")]
    type_: Option<String>,
    immutable: Option<bool>,
}

impl From<SecretWire> for WatchedCopy<Secret> {
    fn from(wire: SecretWire) -> Self {
        Self::new(wire.metadata, Payload::secret(wire.data, wire.type_, wire.immutable))
    }
}

/// Copies by namespace, then name.
pub type CopyMap = HashMap<Arc<str>, HashMap<Arc<str>, CopyState>>;

/// The copies of one kind.
pub struct CopyIndex {
    pub kind: ObjectKind,
    copies: RwLock<CopyMap>,
    /// How many copies `copies` holds, kept as they come and go.
    count: AtomicUsize,
    /// One allocation per distinct namespace and name, shared by every copy.
    strings: std::sync::Mutex<HashSet<Arc<str>>>,
    ready: FirstList,
    /// The highest resourceVersion kopper's writes of this kind were given, and the highest
    /// the watch has delivered: a pass that starts while the watch is behind kopper's own
    /// writes would take a copy it just wrote for an old one and write it again.
    written: AtomicU64,
    delivered: tokio::sync::watch::Sender<u64>,
    /// What kopper is writing or wrote to each copy, by namespace and name, until the watch
    /// shows the copy holding it: that event tells the rule that wrote the copy nothing it
    /// does not know, and waking it would run a whole pass (whose cost grows with the
    /// cluster) for nothing. Set before the write is sent, since its event may come before
    /// its answer; one entry per copy being written, dropped when an event shows the copy
    /// holding it, when the write is not made, when the copy is deleted, and at a relist.
    being_written: std::sync::Mutex<HashMap<(String, String), Written>>,
    /// How the server rendered kopper's writes of copies of a generic kind.
    pub renderings: RenderingMemory,
    /// Whether the watch that feeds this index was started (a kind the admin allows is
    /// watched once discovery found it).
    watched: std::sync::atomic::AtomicBool,
}

/// Where a copy is, as [`CopyIndex::being_written`] keys it.
fn place(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

/// Where the copy `meta` describes is.
fn place_of(meta: &ObjectMeta) -> (String, String) {
    place(meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

/// What a copy holds once kopper's write of it lands; the content of a generic kind is the
/// server's rendering of it, not known before the write's answer, and not compared.
struct Written {
    content: Option<u64>,
    shape: u64,
    marks: Arc<Marks>,
}

impl CopyIndex {
    pub fn new(kind: ObjectKind) -> Self {
        Self {
            kind,
            copies: RwLock::default(),
            count: AtomicUsize::new(0),
            strings: std::sync::Mutex::default(),
            ready: FirstList::default(),
            written: AtomicU64::new(0),
            delivered: tokio::sync::watch::Sender::new(0),
            being_written: std::sync::Mutex::default(),
            renderings: RenderingMemory::default(),
            watched: std::sync::atomic::AtomicBool::new(!kind.is_generic()),
        }
    }

    /// Marks the watch of this index started; whether it was not before (the caller starts it).
    pub fn start_watch(&self) -> bool {
        !self.watched.swap(true, Ordering::AcqRel)
    }

    /// Whether a watch feeds this index.
    pub fn watched(&self) -> bool {
        self.watched.load(Ordering::Acquire)
    }

    /// kopper wrote a copy and the API server gave it `version`. Versions are opaque to
    /// clients, but kube-apiserver's (etcd's revision) and kubesim's are numbers; for any
    /// other, kopper does not wait on its watch.
    pub fn wrote(&self, version: &str) {
        if let Some(version) = canonical_number(version) {
            self.written.fetch_max(version.get(), Ordering::AcqRel);
        }
    }

    /// kopper is about to write `copy`.
    pub fn writing(&self, copy: &DesiredCopy) {
        let content = (!copy.key.kind.is_generic()).then_some(copy.content);
        let written = Written { content, shape: copy.shape, marks: copy.marks.clone() };
        self.being_written().insert(place(&copy.key.namespace, &copy.key.name), written);
    }

    /// kopper's write of the copy at `key` was not made.
    pub fn not_written(&self, key: &CopyKey) {
        self.being_written().remove(&place(&key.namespace, &key.name));
    }

    /// Whether the copy `meta` names now holds what kopper is writing or wrote to it (its
    /// `state` as the watch delivered it): kopper's own write, most likely.
    fn holds_what_kopper_wrote(&self, meta: &ObjectMeta, state: &CopyState) -> bool {
        let mut being_written = self.being_written();
        if being_written.is_empty() {
            return false;
        }
        let key = place_of(meta);
        let holds = being_written.get(&key).is_some_and(|written| {
            state.holds(written.content.unwrap_or(state.content), written.shape, &written.marks)
        });
        if holds {
            being_written.remove(&key);
        }
        holds
    }

    /// The copy `meta` names was deleted: whatever kopper wrote to it is gone too.
    fn forget_write(&self, meta: &ObjectMeta) {
        let mut being_written = self.being_written();
        if !being_written.is_empty() {
            being_written.remove(&place_of(meta));
        }
    }

    fn being_written(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Written>> {
        self.being_written.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The watch delivered a copy at `meta`'s version (created, changed or deleted).
    fn delivered(&self, meta: &ObjectMeta) {
        if let Some(version) =
            meta.resource_version.as_deref().and_then(canonical_number).map(NonZeroU64::get)
        {
            self.delivered.send_if_modified(|delivered| {
                let newer = version > *delivered;
                *delivered = (*delivered).max(version);
                newer
            });
        }
    }

    /// Waits until the watch has delivered every write kopper made so far, or `limit` has
    /// passed; false then, and those writes are not waited for again. Each write's own
    /// event, or a later one, carries a version at least as high as the write's, since the
    /// API server orders events by version.
    pub async fn caught_up(&self, limit: std::time::Duration) -> bool {
        let written = self.written.load(Ordering::Acquire);
        let mut delivered = self.delivered.subscribe();
        let caught_up = tokio::time::timeout(limit, delivered.wait_for(|delivered| *delivered >= written))
            .await
            .is_ok_and(|result| result.is_ok());
        if !caught_up {
            self.written.fetch_min(*self.delivered.borrow(), Ordering::AcqRel);
        }
        caught_up
    }

    /// After a fresh list, the cache holds the server's state, writes before it included,
    /// and versions may have started over (an API server that lost its state): nothing
    /// earlier is waited for.
    fn relisted(&self) {
        self.being_written().clear();
        self.written.store(0, Ordering::Release);
        self.delivered.send_replace(0);
    }

    /// The copies, for a decision made while holding the guard (never across an await).
    pub fn read(&self) -> RwLockReadGuard<'_, CopyMap> {
        self.copies.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get<'m>(map: &'m CopyMap, namespace: &str, name: &str) -> Option<&'m CopyState> {
        map.get(namespace).and_then(|copies| copies.get(name))
    }

    /// What the copy watch shows at this place, `None` where it holds nothing. An object
    /// with kopper's managed-by label but no rule's label (a Bucket's Secret, or a label a
    /// tenant added) is not the engine's to rewrite: it reads as [`Found::Unmanaged`], unless
    /// it is a copy orphaned from its rule ([`Found::Orphan`]).
    pub fn found<'m>(map: &'m CopyMap, namespace: &str, name: &str) -> Option<Found<'m>> {
        Self::get(map, namespace, name).map(|copy| {
            if copy.rule.is_some() {
                Found::Copy(copy)
            } else if copy.orphan_source.is_some() {
                Found::Orphan(copy)
            } else {
                Found::Unmanaged
            }
        })
    }

    /// The copies in `map` in `namespace`, with where they are.
    pub fn in_namespace<'m>(
        map: &'m CopyMap,
        namespace: &str,
    ) -> impl Iterator<Item = (&'m str, &'m str, &'m CopyState)> {
        map.get_key_value(namespace).into_iter().flat_map(|(namespace, copies)| {
            copies.iter().map(move |(name, copy)| (namespace.as_ref(), name.as_ref(), copy))
        })
    }

    /// Every copy in `map`, with where it is.
    pub fn all(map: &CopyMap) -> impl Iterator<Item = (&str, &str, &CopyState)> {
        map.iter().flat_map(|(namespace, copies)| {
            copies.iter().map(move |(name, copy)| (namespace.as_ref(), name.as_ref(), copy))
        })
    }

    fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits for the first list; false if the watch ended first.
    pub fn first_list(&self) -> &FirstList {
        &self.ready
    }

    fn intern(&self, value: &str) -> Arc<str> {
        let mut strings = self.strings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(interned) = strings.get(value) {
            return interned.clone();
        }
        let interned: Arc<str> = Arc::from(value);
        strings.insert(interned.clone());
        interned
    }

    /// Forgets strings no copy uses any more (namespaces deleted, sources renamed).
    fn prune_strings(&self) {
        let mut strings = self.strings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        strings.retain(|value| Arc::strong_count(value) > 1);
    }

    /// Prunes the strings once they outnumber what the copies can use (a name and a
    /// namespace each) by [`STRINGS_SLACK`]: names come and go with copies (a namespace a
    /// CI run made, a tenant's own objects carrying kopper's label under fresh names) and
    /// the watch resumes for days without a list, so waiting for one would keep every name
    /// ever seen. Pruning costs one look at each string, paid once per that many removals.
    fn prune_strings_if_outgrown(&self) {
        let outgrown = {
            let strings = self.strings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            strings.len() > 2 * self.len() + STRINGS_SLACK
        };
        if outgrown {
            self.prune_strings();
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CopyMap> {
        self.copies.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn place(&self, meta: &ObjectMeta) -> (Arc<str>, Arc<str>) {
        (
            self.intern(meta.namespace.as_deref().unwrap_or_default()),
            self.intern(meta.name.as_deref().unwrap_or_default()),
        )
    }

    fn insert_into(&self, map: &mut CopyMap, meta: &ObjectMeta, state: CopyState) -> Option<CopyState> {
        let (namespace, name) = self.place(meta);
        map.entry(namespace).or_default().insert(name, state)
    }

    /// Adds or replaces one copy as a watch event reports it.
    fn insert(&self, meta: &ObjectMeta, state: CopyState) -> Option<CopyState> {
        let before = self.insert_into(&mut self.write(), meta, state);
        if before.is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        before
    }

    /// Replaces every copy with those a fresh list found.
    fn replace_all(&self, copies: CopyMap) {
        let count = copies.values().map(HashMap::len).sum();
        *self.write() = copies;
        self.count.store(count, Ordering::Relaxed);
    }

    fn remove(&self, meta: &ObjectMeta) -> Option<CopyState> {
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let name = meta.name.as_deref().unwrap_or_default();
        let mut map = self.write();
        let copies = map.get_mut(namespace)?;
        let removed = copies.remove(name);
        if copies.is_empty() {
            map.remove(namespace);
        }
        if removed.is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        drop(map);
        self.prune_strings_if_outgrown();
        removed
    }
}

/// Renderings learnt per content digest, at most: enough for every source of a large
/// cluster's rules, bounded whatever tenants do.
const LEARNT_RENDERINGS: usize = 4096;

/// How the API server rendered kopper's writes (and dry-runs) of copies of a generic kind:
/// per copy, the digest of the content written and of its rendering; and per content
/// digest, the last rendering seen (at most `LEARNT_RENDERINGS`, the oldest forgotten
/// first), so that after a restart one dry-run per source, not per copy, tells that the
/// copies of that source are in sync. Lives in this process only: a restart starts empty.
#[derive(Default)]
pub struct RenderingMemory {
    places: std::sync::Mutex<HashMap<(String, String), (u64, u64)>>,
    learnt: std::sync::Mutex<(HashMap<u64, u64>, std::collections::VecDeque<u64>)>,
}

impl RenderingMemory {
    /// kopper wrote (or verified) content of digest `desired` at `namespace/name`, which the
    /// server renders as `rendered`.
    pub fn record(&self, namespace: &str, name: &str, desired: u64, rendered: u64) {
        lock(&self.places).insert(place(namespace, name), (desired, rendered));
        let mut learnt = lock(&self.learnt);
        let (map, order) = &mut *learnt;
        if map.insert(desired, rendered).is_none() {
            order.push_back(desired);
            if order.len() > LEARNT_RENDERINGS
                && let Some(oldest) = order.pop_front()
            {
                map.remove(&oldest);
            }
        }
    }

    /// The copy `meta` names is gone.
    fn forget(&self, meta: &ObjectMeta) {
        lock(&self.places).remove(&place_of(meta));
    }

    /// A relist found exactly `listed`: copies deleted while the watch was down, whose
    /// deletion no event told, are forgotten, so places stay bounded by the copies that exist.
    /// (A copy written since the list began and forgotten here is judged by what its
    /// content's other copies taught, or by one dry-run.)
    fn keep_only(&self, listed: &CopyMap) {
        lock(&self.places).retain(|(namespace, name), _| {
            listed.get(namespace.as_str()).is_some_and(|names| names.contains_key(name.as_str()))
        });
    }
}

impl Renderings for RenderingMemory {
    fn judge(&self, namespace: &str, name: &str, desired: u64, in_place: u64) -> Rendering {
        let at_place = lock(&self.places).get(&place(namespace, name)).copied();
        match at_place {
            Some((written, rendered)) if rendered == in_place && written == desired => {
                return Rendering::InSync;
            }
            Some((_, rendered)) if rendered == in_place => return Rendering::Outdated,
            _ => {}
        }
        match lock(&self.learnt).0.get(&desired) {
            Some(rendered) if *rendered == in_place => Rendering::InSync,
            _ => Rendering::Unknown,
        }
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Strings beyond two per copy kept before they are pruned (see
/// [`CopyIndex::prune_strings_if_outgrown`]).
const STRINGS_SLACK: usize = 1024;

/// The label selector of kopper's copies; every other object is left to the scoped
/// watches of [`super::scoped`].
pub fn copy_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// How every watch of kopper's copies lists and selects them, whatever their kind.
fn copy_watch_config() -> watcher::Config {
    watcher::Config::default().labels(&copy_selector()).page_size(LIST_PAGE_SIZE)
}

/// Keeps `index` from a watch of kopper's copies of `K` until `shutdown`, waking the rules
/// each change concerns.
pub fn spawn<K: Replicable>(
    client: &Client,
    index: Arc<CopyIndex>,
    scoped: Arc<Scoped>,
    observer: Arc<dyn CacheEvents>,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let config = copy_watch_config();
    let events = crate::runtime::watch::watcher(Api::<WatchedCopy<K>>::all(client.clone()), config)
        .map(|event| event.map(|event| reduced(event, WatchedCopy::into_parts)))
        .default_backoff()
        .take_until(shutdown);
    follow(events, index, scoped, observer, metrics)
}

/// Keeps `index` from a watch of kopper's copies of a kind the admin allows (of the resource
/// `resource`), as [`spawn`] does for ConfigMaps and Secrets. The objects are decoded whole
/// and reduced at once to their digests: nothing of their content is kept.
pub fn spawn_generic(
    client: &Client,
    resource: &ApiResource,
    index: Arc<CopyIndex>,
    scoped: Arc<Scoped>,
    observer: Arc<dyn CacheEvents>,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let config = copy_watch_config();
    let api = Api::<GenericCopy>::all_with(client.clone(), resource);
    let not_served = format!("the API server no longer serves {} ({})", resource.kind, resource.api_version);
    let events = crate::runtime::watch::watcher_of(api, config, not_served)
        .map(|event| event.map(|event| reduced(event, generic_parts)))
        .default_backoff()
        .take_until(shutdown);
    follow(events, index, scoped, observer, metrics)
}

/// A copy of a generic kind as its watch decodes it: the metadata kopper reads and its
/// content (see [`GenericWire`]); `managedFields`, `status` and the rest are skipped unread.
#[derive(Clone)]
pub struct GenericCopy {
    metadata: ObjectMeta,
    payload: Payload,
}

/// Names the content's fields, never a value ([`Payload`]'s own form).
impl std::fmt::Debug for GenericCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenericCopy")
            .field("metadata", &self.metadata)
            .field("payload", &self.payload)
            .finish()
    }
}

impl<'de> serde::Deserialize<'de> for GenericCopy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = GenericWire::<CopyMeta>::deserialize(deserializer)?;
        Ok(Self { metadata: wire.metadata.into(), payload: wire.content })
    }
}

impl Resource for GenericCopy {
    type DynamicType = ApiResource;
    type Scope = NamespaceResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.kind)
    }
    fn group(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.group)
    }
    fn version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.version)
    }
    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.api_version)
    }
    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.plural)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A copy of a generic kind as its metadata and content.
fn generic_parts(object: GenericCopy) -> (ObjectMeta, Payload) {
    (object.metadata, object.payload)
}

/// Applies the copy watch's `events` to `index` until they end.
fn follow(
    events: impl futures::Stream<Item = watcher::Result<CopyEvent>> + Send + 'static,
    index: Arc<CopyIndex>,
    scoped: Arc<Scoped>,
    observer: Arc<dyn CacheEvents>,
    metrics: Arc<Metrics>,
) -> JoinHandle<()> {
    let labels = CacheLabels { controller: RULE_CONTROLLER.to_owned(), kind: index.kind.to_string() };
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        let mut listing: Option<CopyMap> = None;
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    // Counted once the list is done: a list that fails starts again with
                    // another `Init`.
                    if matches!(event, watcher::Event::InitDone) {
                        metrics.relisted(&labels.controller, &labels.kind);
                    }
                    apply_event(&index, &scoped, &*observer, event, &mut listing)
                }
                Err(error) => {
                    tracing::warn!(kind = %labels.kind, %error, "watch failed; retrying with backoff");
                    metrics.watch_failed(&labels.controller, &labels.kind);
                    continue;
                }
            }
            let size = i64::try_from(index.len()).unwrap_or(i64::MAX);
            metrics.cached_objects.get_or_create(&labels).set(size);
        }
        // Whoever waits for the first list learns the watch ended.
        index.ready.mark_stopped();
    })
}

/// One watch event of a copy, reduced to its metadata and content.
type CopyEvent = watcher::Event<(ObjectMeta, Payload)>;

/// `event` with each object reduced by `parts`.
fn reduced<T>(event: watcher::Event<T>, parts: impl Fn(T) -> (ObjectMeta, Payload)) -> CopyEvent {
    match event {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(parts(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::Apply(object) => watcher::Event::Apply(parts(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(parts(object)),
    }
}

fn apply_event(
    index: &CopyIndex,
    scoped: &Scoped,
    observer: &dyn CacheEvents,
    event: CopyEvent,
    listing: &mut Option<CopyMap>,
) {
    let kind = index.kind;
    match event {
        watcher::Event::Init => *listing = Some(CopyMap::new()),
        watcher::Event::InitApply((meta, payload)) => {
            index.delivered(&meta);
            index.insert_into(listing.get_or_insert_default(), &meta, CopyState::new(&meta, &payload));
        }
        watcher::Event::InitDone => {
            let listed = listing.take().unwrap_or_default();
            index.renderings.keep_only(&listed);
            index.replace_all(listed);
            index.relisted();
            index.prune_strings();
            index.ready.mark_ready();
            // Whatever happened while the watch was down is only known now.
            observer.relisted();
        }
        watcher::Event::Apply((meta, payload)) => {
            index.delivered(&meta);
            let state = CopyState::new(&meta, &payload);
            let as_written = index.holds_what_kopper_wrote(&meta, &state);
            let after = state.rule.clone();
            let before = index.insert(&meta, state);
            let made_by = [before.and_then(|copy| copy.rule), after];
            let change = CopyChange { kind, meta: &meta, made_by, as_written };
            observer.copy_changed(&scoped.view(kind), change);
        }
        watcher::Event::Delete((meta, _)) => {
            index.delivered(&meta);
            index.forget_write(&meta);
            index.renderings.forget(&meta);
            let made_by = [index.remove(&meta).and_then(|copy| copy.rule), None];
            let change = CopyChange { kind, meta: &meta, made_by, as_written: false };
            observer.copy_changed(&scoped.view(kind), change);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The copy `team-a/settings` at `version`.
    fn at_version(version: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("team-a".to_owned()),
            name: Some("settings".to_owned()),
            resource_version: Some(version.to_owned()),
            ..ObjectMeta::default()
        }
    }

    fn settings() -> CopyKey {
        CopyKey { kind: ObjectKind::ConfigMap, namespace: "team-a".to_owned(), name: "settings".to_owned() }
    }

    const LIMIT: Duration = Duration::from_millis(50);

    /// A copy being deleted, with the metadata an API server sets and the managed fields.
    fn config_map_json() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "team-a",
                "uid": "8d4f",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-11-26T10:00:00Z",
                "deletionTimestamp": "2026-11-26T11:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "labels": {"app.kubernetes.io/managed-by": "kopper"},
                "annotations": {"kopper.dev/source": "platform/settings"},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "1"}],
                "managedFields": [{
                    "manager": "kopper/replication-rule",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:mode": {}}, "f:metadata": {"f:labels": {".": {}}}}
                }]
            },
            "data": {"mode": "strict"},
            "binaryData": {"logo": "AAE="},
            "immutable": true
        })
    }

    /// Copies made and deleted under fresh names, with no list in between (the watch
    /// resumes for days): the names kept stay bounded by the copies that exist.
    #[test]
    fn names_of_deleted_copies_are_forgotten_without_a_list() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        let kept =
            ObjectMeta { namespace: Some("team-a".into()), name: Some("settings".into()), ..at_version("1") };
        index.insert(&kept, CopyState::new(&kept, &Payload::default()));
        for round in 0..20 * STRINGS_SLACK {
            let meta = ObjectMeta {
                namespace: Some(format!("ci-{round}")),
                name: Some(format!("build-{round}")),
                ..at_version("2")
            };
            index.insert(&meta, CopyState::new(&meta, &Payload::default()));
            assert!(index.remove(&meta).is_some());
        }
        let strings = index.strings.lock().unwrap().len();
        assert!(strings <= 2 + 2 * STRINGS_SLACK, "{strings} names kept for 1 copy");
        assert!(CopyIndex::get(&index.read(), "team-a", "settings").is_some());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_watched_config_map_keeps_what_kopper_reads_and_drops_managed_fields() {
        let json = config_map_json();
        let full: ConfigMap = serde_json::from_value(json.clone()).unwrap();
        let watched: WatchedCopy<ConfigMap> = serde_json::from_value(json).unwrap();
        let (meta, payload) = watched.into_parts();

        assert_eq!(payload, Payload::from_config_map(&full));
        assert!(payload.immutable && payload.binary_data["logo"].0 == [0, 1]);
        // The fields left out, none of which kopper reads: everything else is kept.
        let expected = ObjectMeta {
            managed_fields: None,
            generation: None,
            creation_timestamp: None,
            deletion_grace_period_seconds: None,
            ..full.metadata
        };
        assert_eq!(meta, expected);
    }

    fn secret_payloads(json: serde_json::Value) -> (Payload, Payload) {
        let full: Secret = serde_json::from_value(json.clone()).unwrap();
        let (_, watched) = serde_json::from_value::<WatchedCopy<Secret>>(json).unwrap().into_parts();
        (watched, Payload::from_secret(&full))
    }

    #[test]
    fn a_watched_secret_has_the_content_a_decoded_secret_has() {
        let (watched, full) = secret_payloads(serde_json::json!({
            "metadata": {"name": "tls", "namespace": "team-a", "managedFields": []},
            "type": "kubernetes.io/tls",
            "immutable": true,
            "data": {"tls.crt": "c2VjcmV0"}
        }));
        assert_eq!(watched, full);
        assert_eq!(watched.binary_data["tls.crt"].0, b"secret");
        assert_eq!(watched.secret_type.as_deref(), Some("kubernetes.io/tls"));
        assert!(watched.immutable);

        let (watched, full) = secret_payloads(serde_json::json!({
            "metadata": {"name": "untyped"},
            "type": null,
            "data": {"token": "c2VjcmV0"}
        }));
        assert_eq!(watched, full);
        assert_eq!(watched.secret_type.as_deref(), Some("Opaque"), "as the API server defaults it");
    }

    #[test]
    fn a_watched_copy_takes_null_content_as_empty() {
        let json = serde_json::json!({
            "metadata": {"name": "empty", "namespace": "team-a"},
            "data": null,
            "binaryData": null
        });
        let watched: WatchedCopy<ConfigMap> = serde_json::from_value(json).unwrap();
        assert_eq!(watched.payload, Payload::default());
    }

    #[test]
    fn a_watched_secret_s_debug_form_names_its_keys_and_shows_no_value() {
        let secret: WatchedCopy<Secret> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds"},
            "data": {"password": "aHVudGVyMg=="}
        }))
        .unwrap();
        let shown = format!("{secret:?}");
        assert!(shown.contains(r#"binary_data: ["password"]"#), "{shown}");
        let value_bytes = format!("{:?}", b"hunter2".to_vec());
        let value_bytes = value_bytes.trim_matches(['[', ']']);
        for value in ["hunter2", "aHVudGVyMg==", value_bytes] {
            assert!(!shown.contains(value), "{value} shown in {shown}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_for_the_watch_to_deliver_kopper_s_own_writes() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        assert!(index.caught_up(LIMIT).await, "nothing written yet");
        index.wrote("120");
        index.delivered(&at_version("119"));
        let waiting = index.caught_up(LIMIT);
        index.delivered(&at_version("121"));
        assert!(waiting.await, "a later event carries every earlier write");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_never_delivered_is_waited_for_once() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        index.delivered(&at_version("5"));
        index.wrote("120");
        assert!(!index.caught_up(LIMIT).await);
        assert!(index.caught_up(LIMIT).await, "given up on, not waited for at every pass");
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_forgets_earlier_writes_and_versions_that_are_not_numbers_are_not_waited_for() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        index.wrote("9000");
        index.relisted();
        assert!(index.caught_up(LIMIT).await, "an API server that started over gives lower versions");
        index.wrote("abc");
        index.wrote("0120");
        assert!(index.caught_up(LIMIT).await);
    }

    /// The copy of `settings` holding `value`, as kopper writes it.
    fn desired(value: &str) -> DesiredCopy {
        use crate::controllers::replication::desired::desired_copy;
        use crate::controllers::replication::model::{ObjectInfo, RuleId, Source};
        let info = ObjectInfo { namespace: "src".into(), name: "settings".into(), ..ObjectInfo::default() };
        let payload = Payload { data: [("k".to_owned(), value.to_owned())].into(), ..Payload::default() };
        desired_copy(
            &RuleId::replication_rule("r"),
            "uid",
            ObjectKind::ConfigMap,
            &Source::new(info, payload),
            "team-a",
        )
    }

    /// The state the copy watch keeps of `copy`, as written.
    fn state_of(copy: &DesiredCopy) -> CopyState {
        let meta = ObjectMeta {
            labels: Some((*copy.labels).clone()),
            annotations: Some((*copy.annotations).clone()),
            ..at_version("7")
        };
        CopyState::new(&meta, &copy.payload)
    }

    /// What a copy of another kind holds: every top-level field but its identity and what the
    /// server owns, digested the same whatever order the server sent keys in; its `Debug`
    /// form names the fields, no value.
    #[test]
    fn a_generic_copy_holds_its_fields_but_identity_metadata_and_status() {
        let object: GenericCopy = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny", "namespace": "team-a", "labels": {"a": "b"}, "managedFields": [{}]},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
            "status": {"conditions": []},
        }))
        .unwrap();
        let (meta, payload) = generic_parts(object);
        assert_eq!(payload.fields.keys().collect::<Vec<_>>(), ["spec"]);
        assert!(meta.managed_fields.is_none() && meta.labels.is_some());
        let reordered = Payload::generic(
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(
                r#"{"status": {"x": 1}, "spec": {"policyTypes": ["Ingress"], "podSelector": {}}}"#,
            )
            .unwrap(),
        );
        assert_eq!(reordered.digest(), payload.digest(), "key order and status play no part");
        let other = Payload::generic([("spec".to_owned(), serde_json::json!({"podSelector": {"a": 1}}))]);
        assert_ne!(other.digest(), payload.digest());
        let shown = format!("{payload:?}");
        assert!(shown.contains(r#"fields: ["spec"]"#) && !shown.contains("Ingress"), "{shown}");
    }

    /// In sync is what kopper's write was rendered as; as kopper left it but of other
    /// content, outdated; anything else (a restart, an edit) unknown until a dry-run. What one
    /// copy's write taught serves the other copies of the same content, within a bound.
    #[test]
    fn renderings_judge_a_copy_by_what_kopper_wrote() {
        let memory = RenderingMemory::default();
        assert_eq!(memory.judge("a", "deny", 1, 10), Rendering::Unknown, "nothing known after a restart");
        memory.record("a", "deny", 1, 10);
        assert_eq!(memory.judge("a", "deny", 1, 10), Rendering::InSync);
        assert_eq!(memory.judge("a", "deny", 2, 10), Rendering::Outdated, "the source changed");
        assert_eq!(memory.judge("a", "deny", 1, 11), Rendering::Unknown, "edited by someone");
        assert_eq!(memory.judge("b", "deny", 1, 10), Rendering::InSync, "learnt from a's write");
        assert_eq!(memory.judge("b", "deny", 1, 12), Rendering::Unknown);
        memory.forget(&ObjectMeta {
            namespace: Some("a".into()),
            name: Some("deny".into()),
            ..ObjectMeta::default()
        });
        assert_eq!(memory.judge("a", "deny", 2, 10), Rendering::Unknown, "gone with its copy");
        memory.record("gone", "deny", 3, 30);
        memory.record("kept", "deny", 3, 30);
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        let mut listed = CopyMap::new();
        let kept =
            ObjectMeta { namespace: Some("kept".into()), name: Some("deny".into()), ..ObjectMeta::default() };
        index.insert_into(&mut listed, &kept, CopyState::new(&kept, &Payload::default()));
        memory.keep_only(&listed);
        let places = lock(&memory.places);
        assert!(places.contains_key(&place("kept", "deny")), "a listed copy is remembered");
        assert!(!places.contains_key(&place("gone", "deny")), "a copy the relist did not find is forgotten");
        drop(places);
        for desired in 100..100 + LEARNT_RENDERINGS as u64 + 10 {
            memory.record("c", "x", desired, desired);
        }
        let learnt = lock(&memory.learnt);
        assert_eq!((learnt.0.len(), learnt.1.len()), (LEARNT_RENDERINGS, LEARNT_RENDERINGS), "bounded");
        assert!(!learnt.0.contains_key(&100), "the oldest forgotten first");
    }

    #[test]
    fn a_copy_holding_what_kopper_is_writing_is_known_as_kopper_s_write_once() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        let copy = desired("1");
        index.writing(&copy);
        assert!(!index.holds_what_kopper_wrote(&at_version("6"), &state_of(&desired("0"))), "an older state");
        assert!(index.holds_what_kopper_wrote(&at_version("7"), &state_of(&copy)));
        assert!(!index.holds_what_kopper_wrote(&at_version("8"), &state_of(&copy)), "told once");
        assert!(index.being_written().is_empty());
    }

    #[test]
    fn a_copy_changed_by_someone_else_is_not_kopper_s_write() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        let copy = desired("1");
        index.writing(&copy);
        let mut edited = state_of(&copy);
        edited.content = state_of(&desired("by hand")).content;
        assert!(!index.holds_what_kopper_wrote(&at_version("8"), &edited), "content");
        let mut unmarked = state_of(&copy);
        unmarked.marks = Marks::default();
        assert!(!index.holds_what_kopper_wrote(&at_version("8"), &unmarked), "kopper's marks");
    }

    #[test]
    fn writes_not_made_deletions_and_a_relist_leave_nothing_behind() {
        let index = CopyIndex::new(ObjectKind::ConfigMap);
        index.writing(&desired("1"));
        index.not_written(&settings());
        assert!(index.being_written().is_empty());
        index.writing(&desired("1"));
        index.forget_write(&at_version("8"));
        assert!(index.being_written().is_empty(), "the copy was deleted");
        index.writing(&desired("2"));
        index.relisted();
        assert!(index.being_written().is_empty());
    }
}
