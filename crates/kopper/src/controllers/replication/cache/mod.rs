//! The engine's watch-fed caches: kopper's copies ([`copies`]), the scoped watches of
//! everything else ([`scoped`]), sources' content ([`sources`]), the rules ([`rules`]) and
//! the namespace changes waiting to be served ([`namespaces`]). They know nothing of passes:
//! each change is told to the [`events::CacheEvents`] they are given, which routes it.

pub mod copies;
pub mod events;
pub mod namespaces;
pub mod rules;
pub mod scoped;
pub mod sources;

use std::sync::Arc;

use futures::Future;
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
    tasks: Vec<JoinHandle<()>>,
}

impl Caches {
    /// Starts the caches; the namespace changes they see are gathered in the
    /// [`NamespaceChanges`] returned, for the engine to serve at once.
    pub fn spawn(
        client: &Client,
        namespace_feed: NamespaceFeed,
        events: Arc<dyn CacheEvents>,
        memo: Arc<Memo>,
        metrics: Arc<Metrics>,
        gauges: Arc<ReplicationMetrics>,
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
            copies::spawn::<Secret>(client, secrets.clone(), scoped.clone(), events, metrics, shutdown),
        ];
        (Self { namespaces, namespaces_synced, config_maps, secrets, scoped, memo, gauges, tasks }, changes)
    }

    /// Waits for every cache's first list: a pass on a partial cache would miss copies.
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.namespaces_synced.wait_until_ready("Namespace").await?;
        self.config_maps.first_list().wait_until_ready("ConfigMap copy").await?;
        self.secrets.first_list().wait_until_ready("Secret copy").await
    }

    /// Waits for the cache tasks, which end on shutdown, and stops the scoped watches.
    pub async fn join(self) {
        futures::future::join_all(self.tasks).await;
        self.scoped.stop_all();
    }

    pub fn copies(&self, kind: ObjectKind) -> &CopyIndex {
        match kind {
            ObjectKind::ConfigMap => &self.config_maps,
            ObjectKind::Secret => &self.secrets,
        }
    }
}
