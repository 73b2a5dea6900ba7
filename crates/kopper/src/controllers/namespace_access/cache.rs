//! Watch-fed caches shared by both controllers, and the wake-ups they send.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{Future, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::BINDING_CONTROLLER;
use crate::runtime::Metrics;
use crate::runtime::metrics::CacheLabels;

/// Wakes a controller's `reconcile_all_on`. A full channel already holds a pending wake-up,
/// so extra ones are dropped: a burst of changes costs one pass.
#[derive(Clone)]
pub struct Trigger(mpsc::Sender<()>);

impl Trigger {
    pub fn new() -> (Self, mpsc::Receiver<()>) {
        let (sender, receiver) = mpsc::channel(1);
        (Self(sender), receiver)
    }

    pub fn fire(&self) {
        // Full means a wake-up is pending; closed means the controller has stopped.
        let _ = self.0.clone().try_send(());
    }
}

/// A reflector store kept up to date by its own task until shutdown.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    pub task: JoinHandle<()>,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Watches `api` into a store; every event `relevant` accepts fires `triggers`.
    pub fn spawn(
        api: Api<K>,
        mut relevant: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
        triggers: Vec<Trigger>,
        metrics: Arc<Metrics>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        let (store, writer) = reflector::store();
        // Managed fields are never read and can be most of an object's size.
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff().modify(|object: &mut K| {
                object.managed_fields_mut().clear();
            }),
        )
        .take_until(shutdown);
        let reader = store.clone();
        let labels =
            CacheLabels { controller: BINDING_CONTROLLER.to_owned(), kind: K::kind(&()).into_owned() };
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        metrics
                            .cached_objects
                            .get_or_create(&labels)
                            .set(i64::try_from(reader.len()).unwrap_or(i64::MAX));
                        if relevant(&event) {
                            triggers.iter().for_each(Trigger::fire);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(kind = %labels.kind, %error, "watch failed; retrying with backoff")
                    }
                }
            }
        });
        Self { store, task }
    }
}

/// Every change counts, once the initial list is complete.
pub fn any_change<K>(event: &watcher::Event<K>) -> bool {
    !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_))
}

/// Only creations, deletions and spec changes: a policy's own status writes bump neither
/// its uid nor its generation, so they wake nothing.
pub fn spec_changed<K: Resource>() -> impl FnMut(&watcher::Event<K>) -> bool + Send + 'static {
    let mut generations: HashMap<String, Option<i64>> = HashMap::new();
    move |event| match event {
        watcher::Event::Init => {
            generations.clear();
            false
        }
        watcher::Event::InitApply(object) => {
            generations.insert(object.uid().unwrap_or_default(), object.meta().generation);
            false
        }
        watcher::Event::InitDone => true,
        watcher::Event::Apply(object) => {
            let generation = object.meta().generation;
            generations.insert(object.uid().unwrap_or_default(), generation) != Some(generation)
        }
        watcher::Event::Delete(object) => {
            generations.remove(&object.uid().unwrap_or_default());
            true
        }
    }
}

/// A cache's task ended before its first list completed.
#[derive(Debug, thiserror::Error)]
#[error("the {0} cache stopped before its first list completed")]
pub struct CacheStopped(String);

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.store.wait_until_ready().await.map_err(|_| CacheStopped(K::kind(&()).into_owned()))
    }
}
