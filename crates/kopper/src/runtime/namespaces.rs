//! One cache of the cluster's namespaces for every controller that follows them.
//!
//! NamespaceAccess and the replication engine both follow every namespace; a watch and a
//! copy of every Namespace each would hold them twice over on a cluster of 10,000. Here one
//! watch keeps one store of namespaces' metadata alone (spec and status are never stored),
//! trimmed of what no controller reads (managed fields, kubectl's last-applied annotation),
//! and each controller subscribes to its changes ([`NamespaceFeed`]).
//!
//! The watch starts with the first subscriber and stops with the last. A subscriber that
//! falls more than [`BACKLOG`] changes behind is told to look at every namespace again
//! ([`NamespaceEvent::Resync`]), as after a relist, so a slow controller costs a bounded
//! buffer, never a growing one.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;

use super::Metrics;
use super::cache::{CacheStopped, FirstList};
use super::metrics::CacheLabels;

/// What kopper keeps of a namespace: its metadata.
pub type NamespaceMeta = PartialObjectMeta<Namespace>;

/// The `controller` label of this cache's metrics: it belongs to no controller alone.
pub const CACHE_OWNER: &str = "shared";

/// Changes a subscriber may fall behind by before it is told to look at everything again.
pub const BACKLOG: usize = 4096;

/// kubectl's copy of the whole object it applied: never read, and often most of a
/// namespace's metadata.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a subscriber hears.
#[derive(Clone, Debug)]
pub enum NamespaceEvent {
    /// Which namespaces changed is not known: the first list completed, the watch listed
    /// again, or this subscriber fell behind. Every namespace in the store is to be looked at.
    Resync,
    /// One namespace changed: as it was (`None`: it is new) and as it is (`None`: deleted).
    Changed { before: Option<Arc<NamespaceMeta>>, after: Option<Arc<NamespaceMeta>> },
}

/// The shared cache, started by its first subscriber.
pub struct SharedNamespaces {
    client: kube::Client,
    metrics: Arc<Metrics>,
    running: Mutex<Weak<Running>>,
}

/// The watch and its store, alive while a subscriber holds them.
struct Running {
    store: Store<NamespaceMeta>,
    first_list: FirstList,
    events: broadcast::Sender<NamespaceEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SharedNamespaces {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        Self { client, metrics, running: Mutex::new(Weak::new()) }
    }

    /// A feed of namespace changes, starting the watch if nobody holds one. Must be called
    /// within a Tokio runtime.
    pub fn subscribe(&self) -> NamespaceFeed {
        let mut slot = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let running = slot.upgrade().unwrap_or_else(|| {
            let started = Arc::new(Running::start(&self.client, self.metrics.clone()));
            *slot = Arc::downgrade(&started);
            started
        });
        let receiver = running.events.subscribe();
        // Subscribed after the first list: the Resync it sent was missed, so it comes first.
        let resync_first = running.first_list.is_ready();
        NamespaceFeed { running, receiver, resync_first }
    }
}

impl Running {
    fn start(client: &kube::Client, metrics: Arc<Metrics>) -> Self {
        let (store, writer) = reflector::store();
        let first_list = FirstList::default();
        let (events, _) = broadcast::channel(BACKLOG);
        let api = Api::<NamespaceMeta>::all(client.clone());
        let task =
            tokio::spawn(keep(api, writer, store.clone(), first_list.clone(), events.clone(), metrics));
        Self { store, first_list, events, task }
    }
}

/// Keeps the store and tells subscribers what changed, until aborted.
async fn keep(
    api: Api<NamespaceMeta>,
    mut writer: reflector::store::Writer<NamespaceMeta>,
    store: Store<NamespaceMeta>,
    first_list: FirstList,
    subscribers: broadcast::Sender<NamespaceEvent>,
    metrics: Arc<Metrics>,
) {
    let labels = CacheLabels { controller: CACHE_OWNER.to_owned(), kind: "Namespace".to_owned() };
    let events = super::watch::watcher(api, watcher::Config::default()).default_backoff().modify(trim);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(kind = "Namespace", %error, "watch failed; retrying with backoff");
                metrics.watch_failed(&labels.controller, &labels.kind);
                continue;
            }
        };
        let before = match &event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                store.get(&ObjectRef::from_obj(object))
            }
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => None,
        };
        writer.apply_watcher_event(&event);
        metrics.cached_objects.get_or_create(&labels).set(i64::try_from(store.len()).unwrap_or(i64::MAX));
        // A send fails only when nobody listens, and then there is nobody to tell.
        match event {
            // Counted once the list is done: a list that fails starts again with another `Init`.
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                metrics.relisted(&labels.controller, &labels.kind);
                first_list.mark_ready();
                let _ = subscribers.send(NamespaceEvent::Resync);
            }
            watcher::Event::Apply(object) => {
                let after = store.get(&ObjectRef::from_obj(&object));
                let _ = subscribers.send(NamespaceEvent::Changed { before, after });
            }
            watcher::Event::Delete(object) => {
                let before = before.or_else(|| Some(Arc::new(object)));
                let _ = subscribers.send(NamespaceEvent::Changed { before, after: None });
            }
        }
    }
}

/// Drops what no controller reads from a namespace before it is stored.
fn trim(namespace: &mut NamespaceMeta) {
    // Emptied vectors and maps keep their allocations: each goes whole (the managed fields'
    // buffer alone weighed more than the namespace's name, uid and version together).
    namespace.metadata.managed_fields = None;
    if let Some(annotations) = namespace.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
        if annotations.is_empty() {
            namespace.metadata.annotations = None;
        }
    }
    // "meta.k8s.io/v1 PartialObjectMetadata" on every namespace: the kind is the type's.
    namespace.types = None;
}

/// One subscriber's view: the shared store, and the changes since it subscribed.
pub struct NamespaceFeed {
    running: Arc<Running>,
    receiver: broadcast::Receiver<NamespaceEvent>,
    resync_first: bool,
}

impl NamespaceFeed {
    /// The namespaces as the watch last saw them (shared by every subscriber).
    pub fn store(&self) -> Store<NamespaceMeta> {
        self.running.store.clone()
    }

    pub fn is_ready(&self) -> bool {
        self.running.first_list.is_ready()
    }

    /// Waits for the first complete list. The watch task runs while any feed holds it, and
    /// a panic stops the process, so only the first list ends the wait.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.running.first_list.wait_until_ready("Namespace").await
    }

    /// The next change; a [`NamespaceEvent::Resync`] when this feed fell behind.
    pub async fn next(&mut self) -> NamespaceEvent {
        if std::mem::take(&mut self.resync_first) {
            return NamespaceEvent::Resync;
        }
        match self.receiver.recv().await {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "fell behind the namespace cache; looking at every namespace again");
                NamespaceEvent::Resync
            }
            // The sender lives as long as this feed holds the watch.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
impl NamespaceFeed {
    /// A feed on an empty cache with no watch behind it, whose broadcast keeps `backlog`
    /// changes, and the sender of those changes. Must be called within a Tokio runtime.
    pub(crate) fn detached(backlog: usize, synced: bool) -> (Self, broadcast::Sender<NamespaceEvent>) {
        let (store, _writer) = reflector::store();
        let first_list = FirstList::default();
        if synced {
            first_list.mark_ready();
        }
        let (events, receiver) = broadcast::channel(backlog);
        let running =
            Arc::new(Running { store, first_list, events: events.clone(), task: tokio::spawn(async {}) });
        let resync_first = running.first_list.is_ready();
        (Self { running, receiver, resync_first }, events)
    }
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;

    use super::*;

    fn changed(name: &str) -> NamespaceEvent {
        let mut namespace = NamespaceMeta::default();
        namespace.metadata.name = Some(name.to_owned());
        NamespaceEvent::Changed { before: None, after: Some(Arc::new(namespace)) }
    }

    fn name_of(event: &NamespaceEvent) -> Option<&str> {
        match event {
            NamespaceEvent::Changed { after: Some(after), .. } => after.metadata.name.as_deref(),
            _ => None,
        }
    }

    #[test]
    fn a_cached_namespace_keeps_what_controllers_read_and_no_empty_allocation() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut namespace = NamespaceMeta {
            types: Some(kube::core::TypeMeta::resource::<NamespaceMeta>()),
            ..NamespaceMeta::default()
        };
        namespace.metadata.name = Some("team-1".into());
        namespace.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        namespace.metadata.annotations = Some([(LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned())].into());
        namespace.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        trim(&mut namespace);
        assert_eq!(namespace.metadata.managed_fields, None, "no emptied vector keeps its buffer");
        assert_eq!(namespace.metadata.annotations, None, "no emptied map is kept");
        assert_eq!(namespace.types, None);
        assert_eq!(namespace.name_any(), "team-1");
        assert_eq!(namespace.labels().get("team").map(String::as_str), Some("a"));

        let consent = "kopper.dev/accept-replication-from";
        namespace.metadata.annotations = Some([(consent.to_owned(), "team-2".to_owned())].into());
        trim(&mut namespace);
        assert_eq!(namespace.annotations().get(consent).map(String::as_str), Some("team-2"));
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_is_told_to_look_at_everything_again() {
        let (mut feed, events) = NamespaceFeed::detached(2, false);
        for name in ["a", "b", "c"] {
            events.send(changed(name)).unwrap();
        }
        assert!(matches!(feed.next().await, NamespaceEvent::Resync), "one change was lost");
        assert_eq!(name_of(&feed.next().await), Some("b"));
        assert_eq!(name_of(&feed.next().await), Some("c"));
    }

    #[tokio::test]
    async fn a_subscriber_that_came_after_the_first_list_starts_with_a_resync() {
        let (mut late, events) = NamespaceFeed::detached(4, true);
        events.send(changed("a")).unwrap();
        assert!(matches!(late.next().await, NamespaceEvent::Resync));
        assert_eq!(name_of(&late.next().await), Some("a"));
        let (mut early, events) = NamespaceFeed::detached(4, false);
        events.send(changed("a")).unwrap();
        assert_eq!(name_of(&early.next().await), Some("a"), "the first list's own resync comes in order");
    }
}
