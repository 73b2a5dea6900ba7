//! The rules' stores, the wake-ups of their controllers, and the engine's watch-fed caches.
//! Each change wakes exactly the rules it concerns; a relist after a missed event (a
//! closed watch, `410 Gone`) wakes every rule.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{Future, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::core::{DeserializeGuard, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::task::JoinHandle;

use super::copies::{self, CopyIndex};
use super::desired::{
    NamespaceInfo, ObjectInfo, ObjectKind, Rule, RuleId, RuleKind, RuleLabels, rules_affected_by,
    wants_copy_at,
};
use super::engine::Memo;
use super::namespaces::{NamespaceChange, NamespaceChanges};
use super::pacing::{Signal, Urgency};
use super::rules::RuleObject;
use super::scoped::{ListedChange, Scope, Scoped, ScopedView};
use crate::controllers::config_map_sync::types::ConfigMapSync;
use crate::controllers::replication_rule::types::ReplicationRule;
use crate::runtime::namespaces::{NamespaceEvent, NamespaceFeed};
use crate::runtime::{Metrics, Settings};

pub type Meta<K> = PartialObjectMeta<K>;

/// Sends rules to their controllers' queues, paced there ([`super::pacing`]); the controllers
/// merge repeated wake-ups.
#[derive(Clone)]
pub struct Wakers {
    rules: UnboundedSender<Signal<ObjectRef<Guarded<ReplicationRule>>>>,
    syncs: UnboundedSender<Signal<ObjectRef<Guarded<ConfigMapSync>>>>,
}

/// Rules are read through a guard, so one object that does not deserialize is reported
/// instead of failing every list and watch of its kind.
pub type Guarded<R> = DeserializeGuard<R>;

/// The wake-ups one controller receives.
pub type Wakes<R> = UnboundedReceiver<Signal<ObjectRef<Guarded<R>>>>;

impl Wakers {
    pub fn new() -> (Self, Wakes<ReplicationRule>, Wakes<ConfigMapSync>) {
        let (rules, rule_wakes) = unbounded();
        let (syncs, sync_wakes) = unbounded();
        (Self { rules, syncs }, rule_wakes, sync_wakes)
    }

    /// Wakes `rule`: something its copies depend on changed.
    pub fn wake(&self, rule: &RuleId) {
        self.send(rule, Signal::Wake((), Urgency::Now));
    }

    /// Wakes `rule` to bring its status up to date, once its passes leave it time.
    pub fn wake_for_status(&self, rule: &RuleId) {
        self.send(rule, Signal::Wake((), Urgency::Status));
    }

    /// Wakes `rule` to repair a copy someone else changed, once its passes leave it time.
    pub fn wake_to_repair(&self, rule: &RuleId) {
        self.send(rule, Signal::Wake((), Urgency::Repair));
    }

    /// `rule`'s pass took `took`.
    pub fn pass_took(&self, rule: &RuleId, took: Duration) {
        self.send(rule, Signal::PassTook((), took));
    }

    fn send(&self, rule: &RuleId, signal: Signal<()>) {
        // A closed channel means the controller has stopped; nothing is left to wake.
        match (&rule.kind, &rule.namespace) {
            (RuleKind::ReplicationRule, _) => {
                let _ = self.rules.unbounded_send(signal.about(ObjectRef::new(&rule.name)));
            }
            (RuleKind::ConfigMapSync, Some(namespace)) => {
                let _ = self.syncs.unbounded_send(signal.about(ObjectRef::new(&rule.name).within(namespace)));
            }
            (RuleKind::ConfigMapSync, None) => {}
        }
    }
}

/// Whether a watch has completed its first list, for any number of waiters. The engine
/// never waits on kube's `Store::wait_until_ready`: of several tasks waiting on it at once,
/// only the last to poll is woken (its one-shot channel keeps one waker), so its own tasks
/// hear the end of the first list from the event stream instead.
#[derive(Clone)]
pub struct Synced(Arc<tokio::sync::watch::Sender<Option<bool>>>);

impl Default for Synced {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(None)))
    }
}

impl Synced {
    pub fn mark_ready(&self) {
        self.0.send_replace(Some(true));
    }

    /// The watch ended: waiters learn it will never be ready.
    pub fn mark_stopped(&self) {
        self.0.send_if_modified(|state| {
            let first_list_pending = state.is_none();
            if first_list_pending {
                *state = Some(false);
            }
            first_list_pending
        });
    }

    pub fn is_ready(&self) -> bool {
        *self.0.borrow() == Some(true)
    }

    /// Waits for the first list; false if the watch ended before.
    pub async fn wait(&self) -> bool {
        matches!(self.0.subscribe().wait_for(Option::is_some).await.as_deref(), Ok(Some(true)))
    }

    /// Marks readiness on the first list's end as `events` pass by.
    pub fn track<K, S>(&self, events: S) -> impl futures::Stream<Item = S::Item> + use<K, S>
    where
        S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let synced = self.clone();
        events.inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                synced.mark_ready();
            }
        })
    }
}

/// Counts the changes the rule watches have made to their stores. Bumped after a change is
/// in its store, so whoever reads the count and then the stores never keeps an older view
/// under a newer count.
#[derive(Clone, Default)]
pub struct StoreRevision(Arc<AtomicU64>);

impl StoreRevision {
    fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Bumps the count as each of `events` (coming out of a reflector) passes by.
    pub fn track<K, S>(&self, events: S) -> impl futures::Stream<Item = S::Item> + use<K, S>
    where
        S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let revision = self.0.clone();
        events.inspect(move |event| {
            // A relist's objects reach the store together, at its end.
            if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) = event
            {
                revision.fetch_add(1, Ordering::AcqRel);
            }
        })
    }
}

/// The rules of both kinds, as the two controllers' caches hold them.
pub struct RuleStores {
    pub rules: Store<Guarded<ReplicationRule>>,
    pub syncs: Store<Guarded<ConfigMapSync>>,
    pub rules_synced: Synced,
    pub syncs_synced: Synced,
    /// Changes to either store, bumped by their watches.
    pub revision: StoreRevision,
    /// The process's settings, fixed at start, that a rule object is read with.
    settings: Arc<Settings>,
    /// The rules in force as last parsed, with the revision they were parsed at.
    parsed: Mutex<Option<(u64, ParsedRules)>>,
}

/// The rules in force, parsed from both stores at one revision.
#[derive(Clone)]
pub struct ParsedRules {
    /// Every rule in force: valid, and not being deleted.
    pub in_force: Arc<[Rule]>,
    /// Those of them that hold kopper's finalizer: only those may get copies outside their
    /// own pass, since only their cleanup is sure to run.
    pub finalized: Arc<[Rule]>,
    /// The labels that mark the copies of each rule in `in_force`, in the same order: two
    /// SHA-256 digests and a few strings per rule, made once per change to the rules rather
    /// than for every rule at every copy event.
    pub labels: Arc<[RuleLabels]>,
}

impl RuleStores {
    pub fn new(
        (rules, rules_synced): (Store<Guarded<ReplicationRule>>, Synced),
        (syncs, syncs_synced): (Store<Guarded<ConfigMapSync>>, Synced),
        revision: StoreRevision,
        settings: Arc<Settings>,
    ) -> Self {
        Self { rules, syncs, rules_synced, syncs_synced, revision, settings, parsed: Mutex::new(None) }
    }

    /// Every rule in force: valid, and not being deleted. Every copy and source event asks
    /// for them, so they are parsed once per change to the rules, not once per event: with
    /// a thousand rules, a fan-out to thousands of namespaces would otherwise parse every
    /// rule again for each copy written.
    pub fn in_force(&self) -> Arc<[Rule]> {
        self.parsed().in_force
    }

    /// The rules in force, and those of them that hold kopper's finalizer, as one reading:
    /// parsed once per change to the rules, like [`Self::in_force`] (a namespace batch asks
    /// for both).
    pub fn parsed(&self) -> ParsedRules {
        let revision = self.revision.current();
        // Parsing under the lock: of several callers after one change, one parses.
        let mut parsed = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, rules)) = parsed.as_ref()
            && *at == revision
        {
            return rules.clone();
        }
        let rules = self.parse();
        *parsed = Some((revision, rules.clone()));
        rules
    }

    fn parse(&self) -> ParsedRules {
        fn valid<R: RuleObject>(store: &Store<Guarded<R>>, settings: &Settings) -> Vec<(Rule, bool)> {
            store
                .state()
                .iter()
                .filter_map(|guarded| guarded.0.as_ref().ok())
                .filter(|object| object.meta().deletion_timestamp.is_none())
                .filter_map(|object| Some((object.to_rule(settings).ok()?, holds_finalizer(object.meta()))))
                .collect()
        }
        let settings = &*self.settings;
        let (mut in_force, mut finalized) = (Vec::new(), Vec::new());
        for (rule, holds_finalizer) in
            valid(&self.rules, settings).into_iter().chain(valid(&self.syncs, settings))
        {
            if holds_finalizer {
                finalized.push(rule.clone());
            }
            in_force.push(rule);
        }
        let labels: Vec<RuleLabels> = in_force.iter().map(|rule| RuleLabels::of(&rule.id)).collect();
        ParsedRules { in_force: in_force.into(), finalized: finalized.into(), labels: labels.into() }
    }

    /// Whether the object `rule` was read from is still there, unchanged in identity, not
    /// being deleted, not refused, and holding kopper's finalizer: neither its cleanup nor
    /// the one a refusal runs has happened since.
    pub fn still_finalized(&self, rule: &Rule) -> bool {
        fn current<R: RuleObject>(
            store: &Store<Guarded<R>>,
            reference: ObjectRef<Guarded<R>>,
            uid: &str,
            settings: &Settings,
        ) -> bool {
            store.get(&reference).is_some_and(|guarded| {
                guarded.0.as_ref().is_ok_and(|object| {
                    let meta = object.meta();
                    meta.uid.as_deref() == Some(uid)
                        && meta.deletion_timestamp.is_none()
                        && holds_finalizer(meta)
                        && object.to_rule(settings).is_ok()
                })
            })
        }
        let settings = &*self.settings;
        match (&rule.id.kind, &rule.id.namespace) {
            (RuleKind::ReplicationRule, _) => {
                current(&self.rules, ObjectRef::new(&rule.id.name), &rule.uid, settings)
            }
            (RuleKind::ConfigMapSync, Some(namespace)) => {
                current(&self.syncs, ObjectRef::new(&rule.id.name).within(namespace), &rule.uid, settings)
            }
            (RuleKind::ConfigMapSync, None) => false,
        }
    }

    pub fn all_ids(&self) -> Vec<RuleId> {
        let rules = self.rules.state().into_iter().map(|rule| ReplicationRule::id_of(rule.meta()));
        rules.chain(self.syncs.state().into_iter().map(|sync| ConfigMapSync::id_of(sync.meta()))).collect()
    }

    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        if !self.rules_synced.wait().await {
            return Err(CacheStopped("ReplicationRule"));
        }
        if !self.syncs_synced.wait().await {
            return Err(CacheStopped("ConfigMapSync"));
        }
        Ok(())
    }

    pub fn is_ready(&self) -> bool {
        self.rules_synced.is_ready() && self.syncs_synced.is_ready()
    }
}

/// Objects a scoped watch's list may find changed and still have routed one by one (see
/// [`Router::scope_listed`]); past this, every rule is woken instead, which bounds the
/// routing one list can cost.
const MAX_ROUTED_CHANGES: usize = 1_000;

/// What the cache tasks need to route a change.
pub struct Router {
    pub rules: RuleStores,
    pub wakers: Wakers,
    pub memo: Arc<Memo>,
    /// Set once the scoped watches exist (they route through this router).
    pub scoped: OnceLock<Weak<Scoped>>,
}

impl Router {
    pub fn wake_all(&self) {
        self.rules.all_ids().iter().for_each(|rule| self.wakers.wake(rule));
    }

    /// A scoped watch of `kind` over `scope` listed (first, or again after an outage):
    /// wakes the rules that asked for the scope (those reading the namespace, or whose
    /// copies the name was blocking) and routes each of `changes` (what a list again found
    /// changed; none at a first list) as its event would have been. Tenants decide when name and namespace watches start (a name squatted, a
    /// ConfigMapSync in a new namespace), so their lists must not wake every rule for a
    /// pass over every namespace. A cluster-wide list, or one that changed more than
    /// [`MAX_ROUTED_CHANGES`] objects, wakes every rule instead.
    pub fn scope_listed(&self, kind: ObjectKind, scope: &Scope, changes: &[ListedChange]) {
        let asked: BTreeSet<RuleId> = match scope {
            Scope::Cluster => return self.wake_all(),
            _ if changes.len() > MAX_ROUTED_CHANGES => return self.wake_all(),
            Scope::Namespace(namespace) => self
                .rules
                .in_force()
                .iter()
                .filter(|rule| rule.kind == kind && rule.sources.namespaces.contains(namespace))
                .map(|rule| rule.id.clone())
                .collect(),
            Scope::Name(name) => {
                let scoped = self.scoped.get().and_then(Weak::upgrade);
                scoped.map(|scoped| scoped.blocked_by(kind, name)).unwrap_or_default()
            }
        };
        asked.iter().for_each(|rule| self.wakers.wake(rule));
        for (before, after) in changes {
            self.object_changed(kind, before.as_ref(), after.as_ref());
        }
    }

    /// Whether `rule` has a source named `name` (in one of its source namespaces).
    fn has_source_named(&self, view: Option<&ScopedView>, rule: &Rule, name: &str) -> bool {
        let Some(view) = view else { return false };
        rule.sources
            .namespaces
            .iter()
            .any(|namespace| view.source(namespace, name).is_some_and(|source| rule.sources.matches(&source)))
    }

    fn view(&self, kind: ObjectKind) -> Option<ScopedView> {
        self.scoped.get().and_then(Weak::upgrade).map(|scoped| scoped.view(kind))
    }

    /// A copy changed: wakes the rules it was and is a copy of, and those that want a copy
    /// where it is (one may take it over, or see a conflict clear), to repair it
    /// ([`Urgency::Repair`]: paced by what their passes cost, as anyone may edit copies in
    /// a loop); a rule that wants the place a copy of another rule left is woken at once. A copy that now holds what kopper wrote to it (`as_written`) does not wake
    /// the rule that wrote it, whose pass (or [`super::namespaces`]) knows what it wrote: a
    /// pass for each event of its own writes would keep a core busy for as long as new
    /// namespaces keep coming.
    pub fn copy_changed(
        &self,
        kind: ObjectKind,
        meta: &ObjectMeta,
        made_by: [Option<Arc<str>>; 2],
        as_written: bool,
    ) {
        let [before, after] = &made_by;
        let writer = after
            .as_ref()
            .filter(|after| as_written && before.as_ref().is_none_or(|before| before == *after));
        let ParsedRules { in_force: rules, labels, .. } = self.rules.parsed();
        let view = self.view(kind);
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let name = meta.name.as_deref().unwrap_or_default();
        let source_named = |rule: &Rule, name: &str| self.has_source_named(view.as_ref(), rule, name);
        for (rule, labels) in rules.iter().zip(labels.iter()).filter(|(rule, _)| rule.kind == kind) {
            if writer.is_some_and(|writer| labels.is(writer)) {
                continue;
            }
            let made = made_by.iter().flatten().any(|made_by| labels.is(made_by));
            if made {
                self.wakers.wake_to_repair(&rule.id);
            } else if wants_copy_at(rule, namespace, name, source_named) {
                // A place another rule's copy left (its rule's cleanup, the orphan sweep) is
                // this rule's to fill now; anything else there is a conflict to report.
                match after {
                    None => self.wakers.wake(&rule.id),
                    Some(_) => self.wakers.wake_to_repair(&rule.id),
                }
            }
        }
    }

    /// An object that is not a copy changed (`before` and `after` the change): wakes the
    /// rules it concerns now and those it concerned before, so a source that stops
    /// matching still wakes the rule that copied it.
    pub fn object_changed(&self, kind: ObjectKind, before: Option<&ObjectInfo>, after: Option<&ObjectInfo>) {
        let rules = self.rules.in_force();
        let view = self.view(kind);
        let source_named = |rule: &Rule, name: &str| self.has_source_named(view.as_ref(), rule, name);
        let mut woken = BTreeSet::new();
        for info in [before, after].into_iter().flatten() {
            woken.extend(rules_affected_by(&rules, kind, info, source_named).cloned());
        }
        if let Some(after) = after
            && rules.iter().any(|rule| rule.kind == kind && rule.sources.matches(after))
        {
            self.memo.source_changed(after);
        }
        woken.iter().for_each(|rule| self.wakers.wake(rule));
    }
}

fn holds_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|finalizer| finalizer == super::FINALIZER)
}

/// A cache's task ended before its first list completed.
#[derive(Debug, thiserror::Error)]
#[error("the {0} cache stopped before its first list completed")]
pub struct CacheStopped(pub &'static str);

/// The engine's caches and the tasks that keep them: namespaces (metadata), kopper's
/// copies ([`super::copies`]), and the scoped watches of everything else
/// ([`super::scoped`]).
pub struct Caches {
    pub namespaces: Store<Meta<Namespace>>,
    namespaces_synced: Synced,
    pub config_maps: Arc<CopyIndex>,
    pub secrets: Arc<CopyIndex>,
    pub scoped: Arc<Scoped>,
    tasks: Vec<JoinHandle<()>>,
}

impl Caches {
    /// Starts the caches; the namespace changes they see are gathered in the
    /// [`NamespaceChanges`] returned, for [`super::namespaces::serve`].
    pub fn spawn(
        client: &Client,
        namespace_feed: NamespaceFeed,
        router: Arc<Router>,
        metrics: Arc<Metrics>,
        shutdown: impl Future<Output = ()> + Clone + Send + 'static,
    ) -> (Self, Arc<NamespaceChanges>) {
        let namespaces_synced = Synced::default();
        let changes = Arc::new(NamespaceChanges::default());
        let namespaces = namespace_feed.store();
        let namespace_task = follow_namespaces(
            namespace_feed,
            namespaces_synced.clone(),
            router.clone(),
            changes.clone(),
            shutdown.clone(),
        );
        let config_maps = Arc::new(CopyIndex::new(ObjectKind::ConfigMap));
        let secrets = Arc::new(CopyIndex::new(ObjectKind::Secret));
        let scoped = Arc::new(Scoped::new(client.clone(), router.clone(), metrics.clone(), shutdown.clone()));
        let _ = router.scoped.set(Arc::downgrade(&scoped));
        let tasks = vec![
            namespace_task,
            copies::spawn::<ConfigMap>(
                client,
                config_maps.clone(),
                router.clone(),
                metrics.clone(),
                shutdown.clone(),
            ),
            copies::spawn::<Secret>(client, secrets.clone(), router, metrics, shutdown),
        ];
        (Self { namespaces, namespaces_synced, config_maps, secrets, scoped, tasks }, changes)
    }

    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        if !self.namespaces_synced.wait().await {
            return Err(CacheStopped("Namespace"));
        }
        if !self.config_maps.wait_until_ready().await {
            return Err(CacheStopped("ConfigMap copy"));
        }
        if !self.secrets.wait_until_ready().await {
            return Err(CacheStopped("Secret copy"));
        }
        Ok(())
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

/// Follows the shared namespace cache until shutdown, adding each change that can matter to
/// a rule (name, labels, consent, deletion), with the namespace as it was and as it is, to
/// `changes` for [`super::namespaces`] to serve at once. A resync wakes every rule instead:
/// what changed meanwhile is unknown.
fn follow_namespaces(
    mut feed: NamespaceFeed,
    synced: Synced,
    router: Arc<Router>,
    changes: Arc<NamespaceChanges>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let follow = async {
            loop {
                match feed.next().await {
                    NamespaceEvent::Resync => {
                        synced.mark_ready();
                        router.wake_all();
                    }
                    NamespaceEvent::Changed { before, after } => {
                        let info = |namespace: Option<Arc<Meta<Namespace>>>| {
                            namespace.map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
                        };
                        changes.push(NamespaceChange { before: info(before), after: info(after) });
                    }
                }
            }
        };
        tokio::select! {
            () = follow => {}
            () = shutdown => {}
        }
        synced.mark_stopped();
    })
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;
    use kube::runtime::reflector;

    use super::*;

    fn rule(name: &str, kind: &str) -> Guarded<ReplicationRule> {
        let yaml = format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: {name}, uid: uid-{name}}}\n\
             spec: {{kind: {kind}, namespaces: [src], selector: {{matchLabels: {{a: b}}}}}}"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    /// The rule `rule` makes, holding kopper's finalizer.
    fn finalized(mut rule: Guarded<ReplicationRule>) -> Guarded<ReplicationRule> {
        if let Ok(object) = rule.0.as_mut() {
            object.metadata.finalizers = Some(vec![super::super::FINALIZER.to_owned()]);
        }
        rule
    }

    type RuleEvents = mpsc::UnboundedSender<watcher::Result<watcher::Event<Guarded<ReplicationRule>>>>;

    /// Rule stores, the sender of the watch events that fill them, and the stream that
    /// applies those events (polled once per event sent).
    fn fed_rule_stores() -> (RuleStores, RuleEvents, impl futures::Stream) {
        let (rule_store, rule_writer) = reflector::store();
        let (sync_store, _sync_writer) = reflector::store();
        let revision = StoreRevision::default();
        let stores = RuleStores::new(
            (rule_store, Synced::default()),
            (sync_store, Synced::default()),
            revision.clone(),
            Arc::new(Settings::default()),
        );
        let (changes, events) = mpsc::unbounded();
        (stores, changes, revision.track(reflector::reflector(rule_writer, events)))
    }

    fn kinds(rules: &[Rule]) -> Vec<(String, ObjectKind)> {
        rules.iter().map(|rule| (rule.id.name.clone(), rule.kind)).collect()
    }

    #[tokio::test]
    async fn rules_in_force_are_parsed_once_per_change_and_follow_every_change() {
        let (stores, changes, events) = fed_rule_stores();
        let mut events = std::pin::pin!(events);

        changes.unbounded_send(Ok(watcher::Event::Apply(rule("a", "ConfigMap")))).unwrap();
        events.next().await;
        let first = stores.in_force();
        assert_eq!(kinds(&first), [("a".to_owned(), ObjectKind::ConfigMap)]);
        assert!(Arc::ptr_eq(&first, &stores.in_force()), "no change, no new parse");
        assert!(stores.parsed().finalized.is_empty(), "a rule without kopper's finalizer is not finalized");

        changes.unbounded_send(Ok(watcher::Event::Apply(finalized(rule("a", "ConfigMap"))))).unwrap();
        events.next().await;
        let parsed = stores.parsed();
        assert_eq!(kinds(&parsed.finalized), [("a".to_owned(), ObjectKind::ConfigMap)]);
        assert!(Arc::ptr_eq(&parsed.finalized, &stores.parsed().finalized), "no change, no new parse");

        changes.unbounded_send(Ok(watcher::Event::Apply(rule("a", "Secret")))).unwrap();
        events.next().await;
        assert_eq!(kinds(&stores.in_force()), [("a".to_owned(), ObjectKind::Secret)]);

        changes.unbounded_send(Ok(watcher::Event::Delete(rule("a", "Secret")))).unwrap();
        events.next().await;
        assert!(stores.in_force().is_empty());
    }

    /// The names of the rules woken since last asked, once per wake-up, in name order.
    fn woken_now(woken: &mut Wakes<ReplicationRule>) -> Vec<String> {
        let mut names: Vec<String> = std::iter::from_fn(|| woken.try_recv().ok())
            .map(|signal| match signal {
                Signal::Wake(rule, _) => rule.name,
                Signal::PassTook(rule, _) => panic!("{rule} woken with a pass's time"),
            })
            .collect();
        names.sort();
        names
    }

    /// A router over fed rule stores, the sender and stream that feed them, and what it wakes.
    fn fed_router() -> (Router, RuleEvents, impl futures::Stream, Wakes<ReplicationRule>) {
        let (stores, changes, events) = fed_rule_stores();
        let (wakers, woken, _syncs) = Wakers::new();
        let router = Router { rules: stores, wakers, memo: Arc::default(), scoped: OnceLock::new() };
        (router, changes, events, woken)
    }

    /// A tenant starts a name or namespace watch when it likes (a name squatted, a
    /// ConfigMapSync in a new namespace): its list wakes the rules it concerns, not every
    /// rule for a pass over every namespace.
    #[tokio::test]
    async fn a_scoped_list_wakes_only_the_rules_it_concerns() {
        let (router, changes, events, mut woken) = fed_router();
        let mut events = std::pin::pin!(events);
        let elsewhere: Guarded<ReplicationRule> = serde_yaml::from_str(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: b, uid: uid-b}\n\
             spec: {kind: ConfigMap, namespaces: [elsewhere], selector: {matchLabels: {a: b}}}",
        )
        .unwrap();
        for rule in [finalized(rule("a", "ConfigMap")), finalized(elsewhere)] {
            changes.unbounded_send(Ok(watcher::Event::Apply(rule))).unwrap();
            events.next().await;
        }
        let kind = ObjectKind::ConfigMap;

        router.scope_listed(kind, &Scope::Namespace("src".into()), &[]);
        assert_eq!(woken_now(&mut woken), ["a"], "the rule reading the namespace listed");
        router.scope_listed(kind, &Scope::Name("settings".into()), &[]);
        assert!(woken_now(&mut woken).is_empty(), "no rule was blocked under the name");

        let source = ObjectInfo {
            namespace: "elsewhere".into(),
            name: "settings".into(),
            uid: "u".into(),
            resource_version: "7".into(),
            labels: [("a".to_owned(), "b".to_owned())].into(),
            ..ObjectInfo::default()
        };
        router.scope_listed(kind, &Scope::Name("settings".into()), &[(None, Some(source.clone()))]);
        assert_eq!(woken_now(&mut woken), ["b"], "what the list found routed as its event");

        router.scope_listed(kind, &Scope::Cluster, &[]);
        assert_eq!(woken_now(&mut woken), ["a", "b"]);
        let many = vec![(None, Some(source)); MAX_ROUTED_CHANGES + 1];
        router.scope_listed(kind, &Scope::Name("settings".into()), &many);
        assert_eq!(woken_now(&mut woken), ["a", "b"], "too many changes to route one by one");
    }

    #[tokio::test]
    async fn a_copy_holding_what_its_rule_wrote_does_not_wake_it() {
        let (router, changes, events, mut woken) = fed_router();
        let mut events = std::pin::pin!(events);
        let a_copy = ObjectMeta {
            namespace: Some("team-a".to_owned()),
            name: Some("settings".to_owned()),
            ..ObjectMeta::default()
        };
        let made_by_a = || {
            let label: Arc<str> = router.rules.in_force()[0].id.label_value().into();
            [Some(label.clone()), Some(label)]
        };
        changes.unbounded_send(Ok(watcher::Event::Apply(finalized(rule("a", "ConfigMap"))))).unwrap();
        events.next().await;

        router.copy_changed(ObjectKind::ConfigMap, &a_copy, made_by_a(), true);
        assert!(woken_now(&mut woken).is_empty(), "the rule wrote it");
        router.copy_changed(ObjectKind::ConfigMap, &a_copy, made_by_a(), false);
        assert_eq!(woken_now(&mut woken), ["a"], "someone else changed it");
        router.copy_changed(ObjectKind::ConfigMap, &a_copy, [None, made_by_a()[1].clone()], true);
        assert!(woken_now(&mut woken).is_empty(), "the rule created it");

        changes.unbounded_send(Ok(watcher::Event::Apply(finalized(rule("b", "ConfigMap"))))).unwrap();
        events.next().await;
        let label_of = |name: &str| -> Option<Arc<str>> {
            let rules = router.rules.in_force();
            rules.iter().find(|rule| rule.id.name == name).map(|rule| rule.id.label_value().into())
        };
        router.copy_changed(ObjectKind::ConfigMap, &a_copy, [label_of("b"), label_of("a")], true);
        assert_eq!(
            woken_now(&mut woken),
            ["a", "b"],
            "a copy that changed hands wakes the rule it left, and its new one"
        );
    }
}
