//! The engine's watch-fed caches: kopper's copies ([`copies`]), the scoped watches of
//! everything else ([`scoped`]), sources' content ([`sources`]), the rules ([`rules`]), the
//! namespace changes waiting to be served ([`namespaces`]), and the discovery of the kinds
//! the admin allows besides ConfigMap and Secret ([`kinds`]). They know nothing of passes:
//! each change is told to the [`events::CacheEvents`] they are given, which routes it.

pub mod copies;
pub mod events;
pub mod kinds;
pub mod namespaces;
pub mod rules;
pub mod scoped;
pub mod sources;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::{Future, FutureExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::task::JoinHandle;

use self::copies::CopyIndex;
use self::events::CacheEvents;
use self::namespaces::NamespaceChanges;
use self::scoped::Scoped;
use self::sources::Memo;
use crate::controllers::replication::metrics::ReplicationMetrics;
use crate::controllers::replication::model::ObjectKind;
use crate::kinds::AllowedKinds;
use crate::runtime::Metrics;
use crate::runtime::cache::{CacheStopped, FirstList};
use crate::runtime::namespaces::{NamespaceFeed, NamespaceMeta};

/// The engine's caches and the tasks that keep them: namespaces (metadata), kopper's
/// copies ([`copies`]), the scoped watches of everything else ([`scoped`]), and
/// sources' content ([`sources`]).
pub struct Caches {
    pub namespaces: Store<NamespaceMeta>,
    namespaces_synced: FirstList,
    pub config_maps: Arc<CopyIndex>,
    pub secrets: Arc<CopyIndex>,
    pub scoped: Arc<Scoped>,
    /// Sources' content and when their changes were seen, kept between passes.
    pub memo: Arc<Memo>,
    /// The engine's own gauges.
    pub gauges: Arc<ReplicationMetrics>,
    /// kopper's copies of each kind the admin allows besides ConfigMap and Secret (see
    /// [`crate::kinds`]): one index per kind, made at start; its watch starts once discovery
    /// found the kind served ([`Caches::watch_kind`]).
    others: Vec<Arc<CopyIndex>>,
    /// Stands for a kind no index was made for (none: every rule's kind is one allowed).
    unknown: CopyIndex,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// What a watch of an allowed kind started later needs.
    spawner: Spawner,
}

/// What starting a copy watch takes.
struct Spawner {
    client: Client,
    events: Arc<dyn CacheEvents>,
    metrics: Arc<Metrics>,
    shutdown: Shared<BoxFuture<'static, ()>>,
}

/// How long a pass waits for the first list of a newly watched kind's copies before it fails
/// and is retried.
const KIND_FIRST_LIST_TIMEOUT: Duration = Duration::from_secs(30);

impl Caches {
    /// Starts the caches; the namespace changes they see are gathered in the
    /// [`NamespaceChanges`] returned, for the engine to serve at once.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn(
        client: &Client,
        namespace_feed: NamespaceFeed,
        events: Arc<dyn CacheEvents>,
        memo: Arc<Memo>,
        metrics: Arc<Metrics>,
        gauges: Arc<ReplicationMetrics>,
        allowed: &AllowedKinds,
        shutdown: impl Future<Output = ()> + Clone + Send + 'static,
    ) -> (Self, Arc<NamespaceChanges>) {
        let namespaces_synced = FirstList::default();
        let changes = Arc::new(NamespaceChanges::default());
        let namespaces = namespace_feed.store();
        let namespace_task = namespaces::follow(
            namespace_feed,
            namespaces_synced.clone(),
            events.clone(),
            changes.clone(),
            shutdown.clone(),
        );
        let config_maps = Arc::new(CopyIndex::new(ObjectKind::ConfigMap));
        let secrets = Arc::new(CopyIndex::new(ObjectKind::Secret));
        let scoped = Arc::new(Scoped::new(
            client.clone(),
            events.clone(),
            memo.clone(),
            metrics.clone(),
            gauges.clone(),
            shutdown.clone(),
        ));
        let tasks = vec![
            namespace_task,
            copies::spawn::<ConfigMap>(
                client,
                config_maps.clone(),
                scoped.clone(),
                events.clone(),
                metrics.clone(),
                shutdown.clone(),
            ),
            copies::spawn::<Secret>(
                client,
                secrets.clone(),
                scoped.clone(),
                events.clone(),
                metrics.clone(),
                shutdown.clone(),
            ),
        ];
        let others = allowed.iter().map(|kind| Arc::new(CopyIndex::new(ObjectKind::Other(kind)))).collect();
        let spawner =
            Spawner { client: client.clone(), events, metrics, shutdown: shutdown.boxed().shared() };
        let caches = Self {
            namespaces,
            namespaces_synced,
            config_maps,
            secrets,
            scoped,
            memo,
            gauges,
            others,
            unknown: CopyIndex::new(ObjectKind::ConfigMap),
            tasks: Mutex::new(tasks),
            spawner,
        };
        for kind in allowed.iter() {
            caches.watch_kind(ObjectKind::Other(kind));
        }
        (caches, changes)
    }

    /// Starts the watch of kopper's copies of `kind`, an allowed kind, once discovery found
    /// it served and unless it runs; whether it runs.
    pub fn watch_kind(&self, kind: ObjectKind) -> bool {
        let Some(index) = self.others.iter().find(|index| index.kind == kind) else { return false };
        let Some(resource) = kind.api_resource() else { return false };
        if index.start_watch() {
            let spawner = &self.spawner;
            let task = copies::spawn_generic(
                &spawner.client,
                &resource,
                index.clone(),
                self.scoped.clone(),
                spawner.events.clone(),
                spawner.metrics.clone(),
                spawner.shutdown.clone(),
            );
            self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(task);
        }
        true
    }

    /// Every kind whose copies are watched: ConfigMap, Secret, and the allowed kinds found
    /// served.
    pub fn kinds(&self) -> Vec<ObjectKind> {
        let others = self.others.iter().filter(|index| index.watched()).map(|index| index.kind);
        ObjectKind::ALL.into_iter().chain(others).collect()
    }

    /// Waits for the first list of the copies of `kind` (at once for ConfigMaps and Secrets,
    /// whose lists every pass waits for).
    pub async fn wait_for_kind(&self, kind: ObjectKind) -> Result<(), CacheStopped> {
        if !kind.is_generic() {
            return Ok(());
        }
        let first_list = self.copies(kind).first_list();
        match tokio::time::timeout(KIND_FIRST_LIST_TIMEOUT, first_list.wait_until_ready("copy")).await {
            Ok(result) => result,
            Err(_) => {
                Err(CacheStopped(format!("{kind} copy (no first list within {KIND_FIRST_LIST_TIMEOUT:?})")))
            }
        }
    }

    /// Waits for every cache's first list: a pass on a partial cache would miss copies.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.namespaces_synced.wait_until_ready("Namespace").await?;
        self.config_maps.first_list().wait_until_ready("ConfigMap copy").await?;
        self.secrets.first_list().wait_until_ready("Secret copy").await
    }

    /// Waits for the cache tasks, which end on shutdown, and stops the scoped watches.
    pub async fn join(self) {
        let tasks =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        futures::future::join_all(tasks).await;
        self.scoped.stop_all();
    }

    pub fn copies(&self, kind: ObjectKind) -> &CopyIndex {
        match kind {
            ObjectKind::ConfigMap => &self.config_maps,
            ObjectKind::Secret => &self.secrets,
            ObjectKind::Other(_) => {
                self.others.iter().find(|index| index.kind == kind).map_or(&self.unknown, |index| index)
            }
        }
    }
}
