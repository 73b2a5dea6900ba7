//! Watch-fed caches of namespaces, ConfigMaps and Secrets, holding metadata only: what
//! matches a rule and what is kopper's are decided from labels, so the content of the
//! cluster's objects is never held. Each change wakes exactly the rules it concerns; a
//! relist after a missed event (a closed watch, `410 Gone`) wakes every rule.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{Future, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::core::{DeserializeGuard, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::RULE_CONTROLLER;
use super::desired::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectInfo, ObjectKind, REPLICATED_BY_LABEL, Rule, RuleId, RuleKind,
    rules_affected_by,
};
use super::engine::Memo;
use super::rules::RuleObject;
use crate::controllers::config_map_sync::types::ConfigMapSync;
use crate::controllers::replication_rule::types::ReplicationRule;
use crate::runtime::metrics::CacheLabels;
use crate::runtime::{Metrics, Settings};

pub type Meta<K> = PartialObjectMeta<K>;

/// Sends rules to their controllers' queues; the controllers merge repeated wake-ups.
#[derive(Clone)]
pub struct Wakers {
    rules: UnboundedSender<ObjectRef<Guarded<ReplicationRule>>>,
    syncs: UnboundedSender<ObjectRef<Guarded<ConfigMapSync>>>,
}

/// Rules are read through a guard, so one object that does not deserialize is reported
/// instead of failing every list and watch of its kind.
pub type Guarded<R> = DeserializeGuard<R>;

/// The wake-ups one controller receives.
pub type Wakes<R> = UnboundedReceiver<ObjectRef<Guarded<R>>>;

impl Wakers {
    pub fn new() -> (Self, Wakes<ReplicationRule>, Wakes<ConfigMapSync>) {
        let (rules, rule_wakes) = unbounded();
        let (syncs, sync_wakes) = unbounded();
        (Self { rules, syncs }, rule_wakes, sync_wakes)
    }

    pub fn wake(&self, rule: &RuleId) {
        // A closed channel means the controller has stopped; nothing is left to wake.
        match (&rule.kind, &rule.namespace) {
            (RuleKind::ReplicationRule, _) => {
                let _ = self.rules.unbounded_send(ObjectRef::new(&rule.name));
            }
            (RuleKind::ConfigMapSync, Some(namespace)) => {
                let _ = self.syncs.unbounded_send(ObjectRef::new(&rule.name).within(namespace));
            }
            (RuleKind::ConfigMapSync, None) => {}
        }
    }
}

/// The rules of both kinds, as the two controllers' caches hold them.
#[derive(Clone)]
pub struct RuleStores {
    pub rules: Store<Guarded<ReplicationRule>>,
    pub syncs: Store<Guarded<ConfigMapSync>>,
}

impl RuleStores {
    /// Every rule in force: valid, and not being deleted.
    pub fn in_force(&self, settings: &Settings) -> Vec<Rule> {
        fn valid<R: RuleObject>(
            store: &Store<Guarded<R>>,
            settings: &Settings,
        ) -> impl Iterator<Item = Rule> {
            store
                .state()
                .iter()
                .filter_map(|guarded| guarded.0.as_ref().ok())
                .filter(|object| object.meta().deletion_timestamp.is_none())
                .filter_map(|object| object.to_rule(settings).ok())
                .collect::<Vec<_>>()
                .into_iter()
        }
        valid(&self.rules, settings).chain(valid(&self.syncs, settings)).collect()
    }

    pub fn all_ids(&self) -> Vec<RuleId> {
        let rules = self.rules.state().into_iter().map(|rule| ReplicationRule::id_of(rule.meta()));
        rules.chain(self.syncs.state().into_iter().map(|sync| ConfigMapSync::id_of(sync.meta()))).collect()
    }

    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.rules.wait_until_ready().await.map_err(|_| CacheStopped("ReplicationRule"))?;
        self.syncs.wait_until_ready().await.map_err(|_| CacheStopped("ConfigMapSync"))
    }
}

/// What the cache tasks need to route a change.
pub struct Router {
    pub rules: RuleStores,
    pub wakers: Wakers,
    pub settings: Arc<Settings>,
    pub memo: Arc<Memo>,
}

impl Router {
    fn wake_all(&self) {
        self.rules.all_ids().iter().for_each(|rule| self.wakers.wake(rule));
    }
}

/// A cache's task ended before its first list completed.
#[derive(Debug, thiserror::Error)]
#[error("the {0} cache stopped before its first list completed")]
pub struct CacheStopped(pub &'static str);

/// The three metadata caches and the tasks that keep them.
pub struct Caches {
    pub namespaces: Store<Meta<Namespace>>,
    pub config_maps: Store<Meta<ConfigMap>>,
    pub secrets: Store<Meta<Secret>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Caches {
    pub fn spawn(
        client: &Client,
        router: Arc<Router>,
        metrics: Arc<Metrics>,
        shutdown: impl Future<Output = ()> + Clone + Send + 'static,
    ) -> Self {
        let (namespaces, namespace_task) = spawn_cache(
            Api::<Meta<Namespace>>::all(client.clone()),
            NamespaceRouting(router.clone()),
            metrics.clone(),
            shutdown.clone(),
        );
        let (config_maps, config_map_task) = spawn_cache(
            Api::<Meta<ConfigMap>>::all(client.clone()),
            ObjectRouting::new(ObjectKind::ConfigMap, router.clone()),
            metrics.clone(),
            shutdown.clone(),
        );
        let (secrets, secret_task) = spawn_cache(
            Api::<Meta<Secret>>::all(client.clone()),
            ObjectRouting::new(ObjectKind::Secret, router),
            metrics,
            shutdown,
        );
        Self { namespaces, config_maps, secrets, tasks: vec![namespace_task, config_map_task, secret_task] }
    }

    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.namespaces.wait_until_ready().await.map_err(|_| CacheStopped("Namespace"))?;
        self.config_maps.wait_until_ready().await.map_err(|_| CacheStopped("ConfigMap"))?;
        self.secrets.wait_until_ready().await.map_err(|_| CacheStopped("Secret"))
    }

    /// Waits for the cache tasks, which end on shutdown.
    pub async fn join(self) {
        futures::future::join_all(self.tasks).await;
    }

    /// The metadata of the cached objects of `kind` that `keep` accepts; the others are
    /// not copied.
    pub fn objects(&self, kind: ObjectKind, keep: impl Fn(&ObjectMeta) -> bool) -> Vec<ObjectInfo> {
        match kind {
            ObjectKind::ConfigMap => infos(&self.config_maps, keep),
            ObjectKind::Secret => infos(&self.secrets, keep),
        }
    }

    /// The copies of either kind that carry `label` as their rule.
    pub fn copies_of(&self, label: &str) -> Vec<(ObjectKind, ObjectInfo)> {
        let ours = |meta: &ObjectMeta| {
            let labels = meta.labels.as_ref();
            labels.and_then(|l| l.get(REPLICATED_BY_LABEL)).is_some_and(|value| value == label)
                && labels.and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|value| value == MANAGED_BY_VALUE)
        };
        [ObjectKind::ConfigMap, ObjectKind::Secret]
            .into_iter()
            .flat_map(|kind| self.objects(kind, ours).into_iter().map(move |info| (kind, info)))
            .collect()
    }

    /// The cached metadata of one object.
    pub fn get(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<ObjectInfo> {
        let meta = match kind {
            ObjectKind::ConfigMap => {
                self.config_maps.get(&ObjectRef::new(name).within(namespace)).map(|m| m.metadata.clone())
            }
            ObjectKind::Secret => {
                self.secrets.get(&ObjectRef::new(name).within(namespace)).map(|m| m.metadata.clone())
            }
        };
        meta.as_ref().map(ObjectInfo::from_meta)
    }
}

fn infos<K>(store: &Store<Meta<K>>, keep: impl Fn(&ObjectMeta) -> bool) -> Vec<ObjectInfo>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store
        .state()
        .iter()
        .filter(|object| keep(&object.metadata))
        .map(|object| ObjectInfo::from_meta(&object.metadata))
        .collect()
}

/// Decides whom a cache event wakes.
trait Routing<K: Resource<DynamicType = ()>>: Send + 'static {
    /// Called after the cache applied `event`, with the cache itself.
    fn route(&mut self, event: &watcher::Event<Meta<K>>, store: &Store<Meta<K>>);
}

/// Any namespace change can make it start or stop matching any rule.
struct NamespaceRouting(Arc<Router>);

impl Routing<Namespace> for NamespaceRouting {
    fn route(&mut self, event: &watcher::Event<Meta<Namespace>>, _store: &Store<Meta<Namespace>>) {
        match event {
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                self.0.wake_all()
            }
        }
    }
}

/// A ConfigMap or Secret change wakes the rules it concerns now and those it concerned
/// before, so a source that stops matching still wakes the rule that copied it.
struct ObjectRouting {
    kind: ObjectKind,
    router: Arc<Router>,
    concerned: HashMap<String, BTreeSet<RuleId>>,
}

impl ObjectRouting {
    fn new(kind: ObjectKind, router: Arc<Router>) -> Self {
        Self { kind, router, concerned: HashMap::new() }
    }
}

impl<K> Routing<K> for ObjectRouting
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn route(&mut self, event: &watcher::Event<Meta<K>>, store: &Store<Meta<K>>) {
        let (object, deleted) = match event {
            watcher::Event::Init | watcher::Event::InitApply(_) => return,
            watcher::Event::InitDone => {
                self.router.wake_all();
                return;
            }
            watcher::Event::Apply(object) => (object, false),
            watcher::Event::Delete(object) => (object, true),
        };
        let info = ObjectInfo::from_meta(&object.metadata);
        let rules = self.router.rules.in_force(&self.router.settings);
        let is_source_of = |rule: &Rule, name: &str| {
            rule.sources.namespaces.iter().any(|namespace| {
                store
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some_and(|source| rule.sources.matches(&ObjectInfo::from_meta(&source.metadata)))
            })
        };
        let now: BTreeSet<RuleId> =
            rules_affected_by(&rules, self.kind, &info, is_source_of).cloned().collect();
        let memo = &self.router.memo;
        if deleted {
            memo.forget(self.kind, &info);
        } else if rules.iter().any(|rule| rule.kind == self.kind && rule.sources.matches(&info)) {
            memo.source_changed(&info);
        }
        let before = if deleted || now.is_empty() {
            self.concerned.remove(&info.uid)
        } else {
            self.concerned.insert(info.uid.clone(), now.clone())
        };
        now.iter().chain(before.iter().flatten()).for_each(|rule| self.router.wakers.wake(rule));
    }
}

/// kubectl's copy of the whole object it applied: never read, and as large as the content
/// the cache is meant not to hold.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Keeps a metadata-only cache of `api`'s objects until shutdown, routing each event after
/// the cache has applied it. Managed fields and kubectl's last-applied annotation are
/// dropped: they are never read and can be most of an object's metadata.
fn spawn_cache<K>(
    api: Api<Meta<K>>,
    mut routing: impl Routing<K>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (Store<Meta<K>>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff().modify(|object: &mut Meta<K>| {
            object.managed_fields_mut().clear();
            object.annotations_mut().remove(LAST_APPLIED_ANNOTATION);
        }),
    )
    .take_until(shutdown);
    let reader = store.clone();
    let labels = CacheLabels { controller: RULE_CONTROLLER.to_owned(), kind: K::kind(&()).into_owned() };
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let size = i64::try_from(reader.len()).unwrap_or(i64::MAX);
                    metrics.cached_objects.get_or_create(&labels).set(size);
                    routing.route(&event, &reader);
                }
                Err(error) => {
                    tracing::warn!(kind = %labels.kind, %error, "watch failed; retrying with backoff")
                }
            }
        }
    });
    (store, task)
}
