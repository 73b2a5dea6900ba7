//! The watch-fed caches the binding and status controllers share, and what wakes them.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

use futures::{Future, Stream, StreamExt};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::runtime::Metrics;
use crate::runtime::admission::Admission;
use crate::runtime::cache::{CacheStopped, FirstList, Trigger};
use crate::runtime::metrics::CacheLabels;
use crate::runtime::namespaces::{NamespaceEvent, NamespaceFeed, NamespaceMeta};

/// A reflector store kept up to date by its own task until shutdown.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    pub task: JoinHandle<()>,
    first_list: FirstList,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Watches `api` into a store, each object cut down by `trim` first; every event
    /// `relevant` accepts fires `triggers`. Its size and failures are counted in `metrics`
    /// under `controller`.
    pub fn spawn(
        api: Api<K>,
        mut relevant: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
        trim: impl FnMut(&mut K) + Send + 'static,
        triggers: Vec<Trigger>,
        (metrics, controller): (Arc<Metrics>, &'static str),
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        let (store, writer) = reflector::store();
        let first_list = FirstList::default();
        let events = first_list
            .track(reflector::reflector(
                writer,
                crate::runtime::watch::watcher(api, crate::runtime::trim::tenant_objects_watch())
                    .default_backoff()
                    .modify(trim),
            ))
            .take_until(shutdown);
        let reader = store.clone();
        let stopped = first_list.clone();
        let labels = CacheLabels { controller: controller.to_owned(), kind: K::kind(&()).into_owned() };
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
            stopped.mark_stopped();
        });
        Self { store, task, first_list }
    }
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

/// Offers the binding controller each namespace to judge (again), until its owner stops
/// awaiting this:
/// - from `feed`, each namespace whose name, labels or deletion changed (what its bindings
///   depend on), and every namespace when the feed resyncs (a sweep, behind the changes);
///   a deleted namespace is withdrawn;
/// - every namespace on each of `policy_changes` (a sweep);
/// - the namespace of each RoleBinding kopper did not make that changed (`foreign`: it may
///   free or take a name a policy wants), and each namespace the index of kopper's own
///   bindings shows a change in (`index`).
///
/// A namespace is offered by name alone: it waits in the admission queue as a name, and is
/// read from the store when its turn comes.
pub async fn offer_namespaces(
    admission: Admission<NamespaceMeta>,
    mut feed: NamespaceFeed,
    foreign: impl Stream<Item = Result<PartialObjectMeta<RoleBinding>, watcher::Error>>,
    index: impl Stream<Item = Box<str>>,
    policy_changes: impl Stream<Item = ()>,
) {
    let store = feed.store();
    let sweep = || admission.sweep(store.state().iter().map(|namespace| by_name(&namespace.name_any())));
    // Fused: a stream that ended (the policies' trigger goes with its cache at shutdown) is
    // never polled again.
    let (mut foreign, mut index, mut policy_changes) =
        (std::pin::pin!(foreign.fuse()), std::pin::pin!(index.fuse()), std::pin::pin!(policy_changes.fuse()));
    loop {
        tokio::select! {
            event = feed.next() => match event {
                NamespaceEvent::Resync => sweep(),
                NamespaceEvent::Changed { before, after: Some(after) } => {
                    let same = before
                        .is_some_and(|before| bindings_depend_on(&before) == bindings_depend_on(&after));
                    if !same {
                        admission.offer(by_name(&after.name_any()));
                    }
                }
                NamespaceEvent::Changed { before: Some(before), after: None } => {
                    admission.withdraw(&by_name(&before.name_any()));
                }
                NamespaceEvent::Changed { before: None, after: None } => {}
            },
            Some(binding) = foreign.next() => match binding {
                Ok(binding) => {
                    if let Some(namespace) = binding.namespace() {
                        admission.offer(by_name(&namespace));
                    }
                }
                Err(error) => tracing::warn!(kind = "RoleBinding", %error, "watch failed; retrying with backoff"),
            },
            Some(namespace) = index.next() => admission.offer(by_name(&namespace)),
            Some(()) = policy_changes.next() => sweep(),
        }
    }
}

fn by_name(namespace: &str) -> ObjectRef<NamespaceMeta> {
    ObjectRef::new(namespace)
}

/// What a namespace's bindings depend on: its labels and whether it is being deleted.
fn bindings_depend_on(namespace: &NamespaceMeta) -> (Option<&BTreeMap<String, String>>, bool) {
    (namespace.metadata.labels.as_ref(), namespace.metadata.deletion_timestamp.is_some())
}

/// Fires `trigger` on every namespace change (a policy's status counts namespaces), until
/// the feed's owner stops awaiting it.
pub async fn wake_on_namespace_changes(mut feed: NamespaceFeed, trigger: Trigger) {
    loop {
        feed.next().await;
        trigger.fire();
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.first_list.wait_until_ready(&K::kind(&())).await
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::controllers::namespace_access::NamespaceAccess;
    use crate::controllers::namespace_access::testing::policy;

    fn generation(generation: i64) -> NamespaceAccess {
        let mut policy = policy("seed", 1);
        policy.metadata.generation = Some(generation);
        policy
    }

    #[tokio::test]
    async fn a_trigger_that_ended_at_shutdown_is_not_polled_again_and_changes_still_come() {
        use std::time::Duration;
        let (feed, _events) = NamespaceFeed::detached(4, true);
        let admission = Admission::<NamespaceMeta>::new("test", 4);
        let (foreign, bindings) = futures::channel::mpsc::unbounded();
        // Like the policies' trigger, an unfold: polled again once it has ended, it panics.
        let policy_changes =
            futures::stream::unfold(1, |left| async move { (left > 0).then_some(((), left - 1)) });
        let offering = tokio::spawn(offer_namespaces(
            admission.clone(),
            feed,
            bindings,
            futures::stream::pending(),
            policy_changes,
        ));
        let mut binding = PartialObjectMeta::<RoleBinding>::default();
        binding.metadata.namespace = Some("team-1".into());
        for _ in 0..3 {
            tokio::task::yield_now().await;
            foreign.unbounded_send(Ok(binding.clone())).unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while admission.waiting() == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(admission.waiting(), 1, "the namespace of a foreign binding's change is offered once");
        assert!(!offering.is_finished(), "the offering goes on after its trigger ended");
        offering.abort();
    }

    #[test]
    fn status_writes_do_not_wake_the_namespaces() {
        let mut relevant = spec_changed::<NamespaceAccess>();
        assert!(!relevant(&Event::Init));
        assert!(!relevant(&Event::InitApply(generation(1))));
        assert!(relevant(&Event::InitDone));
        assert!(!relevant(&Event::Apply(generation(1))), "same generation: only status or metadata changed");
        assert!(relevant(&Event::Apply(generation(2))), "spec changed");
        assert!(relevant(&Event::Delete(generation(2))));
        assert!(relevant(&Event::Apply(generation(2))), "recreated after delete");
    }
}
