//! When a rule's pass runs: each change the caches report wakes exactly the rules it
//! concerns ([`Router`]), and the wake-ups of a rule are paced ([`pacing`]): a lone change
//! is served at once, a burst by one pass per [`pacing::MIN_WAKE_GAP`]. A relist after a
//! missed event (a closed watch, `410 Gone`) wakes every rule.

pub mod pacing;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::runtime::reflector::ObjectRef;

use self::pacing::{Signal, Urgency};
use super::cache::events::{CacheEvents, CopyChange, ScopeList, SourceLookup};
use super::cache::rules::{Guarded, ParsedRules, RuleStores};
use super::cache::sources::Memo;
use super::desired::{rules_affected_by, wants_copy_at};
use super::model::{ObjectInfo, ObjectKind, Rule, RuleId, RuleKind, Scope};
use super::types::{ConfigMapSync, ReplicationRule, SecretSync};

/// Sends rules to their controllers' queues, paced there ([`pacing`]); the controllers
/// merge repeated wake-ups.
#[derive(Clone)]
pub struct Wakers {
    rules: UnboundedSender<Signal<ObjectRef<Guarded<ReplicationRule>>>>,
    syncs: UnboundedSender<Signal<ObjectRef<Guarded<ConfigMapSync>>>>,
    secret_syncs: UnboundedSender<Signal<ObjectRef<Guarded<SecretSync>>>>,
}

/// The wake-ups one controller receives.
pub type Wakes<R> = UnboundedReceiver<Signal<ObjectRef<Guarded<R>>>>;

impl Wakers {
    pub fn new() -> (Self, Wakes<ReplicationRule>, Wakes<ConfigMapSync>, Wakes<SecretSync>) {
        let (rules, rule_wakes) = unbounded();
        let (syncs, sync_wakes) = unbounded();
        let (secret_syncs, secret_sync_wakes) = unbounded();
        (Self { rules, syncs, secret_syncs }, rule_wakes, sync_wakes, secret_sync_wakes)
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
            (RuleKind::SecretSync, Some(namespace)) => {
                let reference = ObjectRef::new(&rule.name).within(namespace);
                let _ = self.secret_syncs.unbounded_send(signal.about(reference));
            }
            (RuleKind::ConfigMapSync | RuleKind::SecretSync, None) => {}
        }
    }
}

/// Objects a scoped watch's list may find changed and still have routed one by one (see
/// [`CacheEvents::scope_listed`]); past this, every rule is woken instead, which bounds the
/// routing one list can cost.
const MAX_ROUTED_CHANGES: usize = 1_000;

/// Routes each change the caches report to the rules it concerns.
pub struct Router {
    pub rules: RuleStores,
    pub wakers: Wakers,
    /// Told when a source changes, for the latency of its copies.
    pub memo: Arc<Memo>,
}

impl CacheEvents for Router {
    fn relisted(&self) {
        self.wake_all();
    }

    /// Wakes the rules that asked for the scope (those reading the namespace, or whose
    /// copies the name was blocking) and routes each of `changes` (what a list again found
    /// changed; none at a first list) as its event would have been. Tenants decide when name
    /// and namespace watches start (a name squatted, a
    /// ConfigMapSync in a new namespace), so their lists must not wake every rule for a
    /// pass over every namespace. A cluster-wide list, or one that changed more than
    /// [`MAX_ROUTED_CHANGES`] objects, wakes every rule instead.
    fn scope_listed(&self, sources: &dyn SourceLookup, list: ScopeList<'_>) {
        let ScopeList { kind, scope, blocked_by, changes } = list;
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
            Scope::Name(_) => blocked_by.clone(),
        };
        asked.iter().for_each(|rule| self.wakers.wake(rule));
        for (before, after) in changes {
            self.object_changed(sources, kind, [before.as_ref(), after.as_ref()]);
        }
    }

    /// A copy changed: wakes the rules it was and is a copy of, and those that want a copy
    /// where it is (one may take it over, or see a conflict clear), to repair it
    /// ([`Urgency::Repair`]: paced by what their passes cost, as anyone may edit copies in
    /// a loop); a rule that wants the place a copy of another rule left is woken at once. A copy
    /// that now holds what kopper wrote to it (`as_written`) does not wake
    /// the rule that wrote it, whose pass (or [`super::new_namespaces`]) knows what it wrote: a
    /// pass for each event of its own writes would keep a core busy for as long as new
    /// namespaces keep coming.
    fn copy_changed(&self, sources: &dyn SourceLookup, change: CopyChange<'_>) {
        let CopyChange { kind, meta, made_by, as_written } = change;
        let [before, after] = &made_by;
        let writer = after
            .as_ref()
            .filter(|after| as_written && before.as_ref().is_none_or(|before| before == *after));
        let ParsedRules { in_force: rules, labels, .. } = self.rules.parsed();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let name = meta.name.as_deref().unwrap_or_default();
        let source_named = |rule: &Rule, name: &str| has_source_named(sources, rule, name);
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
    fn object_changed(&self, sources: &dyn SourceLookup, kind: ObjectKind, change: [Option<&ObjectInfo>; 2]) {
        let [before, after] = change;
        let rules = self.rules.in_force();
        let source_named = |rule: &Rule, name: &str| has_source_named(sources, rule, name);
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

impl Router {
    pub fn wake_all(&self) {
        self.rules.all_ids().iter().for_each(|rule| self.wakers.wake(rule));
    }
}

/// Whether `rule` has a source named `name` (in one of its source namespaces).
fn has_source_named(sources: &dyn SourceLookup, rule: &Rule, name: &str) -> bool {
    rule.sources
        .namespaces
        .iter()
        .any(|namespace| sources.source(namespace, name).is_some_and(|source| rule.sources.matches(&source)))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::core::ObjectMeta;
    use kube::runtime::watcher;

    use super::*;
    use crate::controllers::replication::cache::events::ListedChange;
    use crate::controllers::replication::cache::rules::tests::{
        RuleEvents, fed_rule_stores, finalized, rule,
    };

    /// Sources where no scoped watch holds any.
    struct NoSources;

    impl SourceLookup for NoSources {
        fn source(&self, _: &str, _: &str) -> Option<ObjectInfo> {
            None
        }
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
        let (wakers, woken, _syncs, _secret_syncs) = Wakers::new();
        let router = Router { rules: stores, wakers, memo: Arc::default() };
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
        let nobody_blocked = BTreeSet::new();
        let list = |scope: &Scope, changes: &[ListedChange]| {
            router.scope_listed(&NoSources, ScopeList { kind, scope, blocked_by: &nobody_blocked, changes })
        };

        list(&Scope::Namespace("src".into()), &[]);
        assert_eq!(woken_now(&mut woken), ["a"], "the rule reading the namespace listed");
        list(&Scope::Name("settings".into()), &[]);
        assert!(woken_now(&mut woken).is_empty(), "no rule was blocked under the name");

        let source = ObjectInfo {
            namespace: "elsewhere".into(),
            name: "settings".into(),
            uid: "u".into(),
            resource_version: "7".into(),
            labels: [("a".to_owned(), "b".to_owned())].into(),
            ..ObjectInfo::default()
        };
        list(&Scope::Name("settings".into()), &[(None, Some(source.clone()))]);
        assert_eq!(woken_now(&mut woken), ["b"], "what the list found routed as its event");

        list(&Scope::Cluster, &[]);
        assert_eq!(woken_now(&mut woken), ["a", "b"]);
        let many = vec![(None, Some(source)); MAX_ROUTED_CHANGES + 1];
        list(&Scope::Name("settings".into()), &many);
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
        let copy_changed = |made_by, as_written| {
            let change = CopyChange { kind: ObjectKind::ConfigMap, meta: &a_copy, made_by, as_written };
            router.copy_changed(&NoSources, change)
        };

        copy_changed(made_by_a(), true);
        assert!(woken_now(&mut woken).is_empty(), "the rule wrote it");
        copy_changed(made_by_a(), false);
        assert_eq!(woken_now(&mut woken), ["a"], "someone else changed it");
        copy_changed([None, made_by_a()[1].clone()], true);
        assert!(woken_now(&mut woken).is_empty(), "the rule created it");

        changes.unbounded_send(Ok(watcher::Event::Apply(finalized(rule("b", "ConfigMap"))))).unwrap();
        events.next().await;
        let label_of = |name: &str| -> Option<Arc<str>> {
            let rules = router.rules.in_force();
            rules.iter().find(|rule| rule.id.name == name).map(|rule| rule.id.label_value().into())
        };
        copy_changed([label_of("b"), label_of("a")], true);
        assert_eq!(
            woken_now(&mut woken),
            ["a", "b"],
            "a copy that changed hands wakes the rule it left, and its new one"
        );
    }
}
