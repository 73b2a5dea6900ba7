//! The rules of every kind as their watches hold them, parsed once per change: what every
//! copy and source event, every pass and the new-namespace path ask for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::Resource;
use kube::core::{DeserializeGuard, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::controllers::replication::model::{FINALIZER, KeptRules, Rule, RuleId, RuleKind, RuleLabels};
use crate::controllers::replication::rules::RuleObject;
use crate::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use crate::runtime::Settings;
use crate::runtime::cache::{CacheStopped, FirstList};

/// Rules are read through a guard, so one object that does not deserialize is reported
/// instead of failing every list and watch of its kind.
pub type Guarded<R> = DeserializeGuard<R>;

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

/// The rules of every kind, as their controllers' caches hold them.
pub struct RuleStores {
    pub rules: Store<Guarded<ReplicationRule>>,
    pub syncs: Store<Guarded<ConfigMapSync>>,
    pub secret_syncs: Store<Guarded<SecretSync>>,
    pub rules_synced: FirstList,
    pub syncs_synced: FirstList,
    pub secret_syncs_synced: FirstList,
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
    /// The rules that are not in force but keep their copies (refused for their shape, or
    /// unreadable).
    pub kept: Arc<KeptRules>,
}

impl RuleStores {
    pub fn new(
        (rules, rules_synced): (Store<Guarded<ReplicationRule>>, FirstList),
        (syncs, syncs_synced): (Store<Guarded<ConfigMapSync>>, FirstList),
        (secret_syncs, secret_syncs_synced): (Store<Guarded<SecretSync>>, FirstList),
        revision: StoreRevision,
        settings: Arc<Settings>,
    ) -> Self {
        Self {
            rules,
            syncs,
            secret_syncs,
            rules_synced,
            syncs_synced,
            secret_syncs_synced,
            revision,
            settings,
            parsed: Mutex::new(None),
        }
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
        /// The rules of `store` in force, each with whether it holds kopper's finalizer; the
        /// ids of those that keep their copies without being in force go to `kept`.
        fn read<R: RuleObject>(
            store: &Store<Guarded<R>>,
            settings: &Settings,
            kept: &mut Vec<RuleId>,
        ) -> Vec<(Rule, bool)> {
            let mut in_force = Vec::new();
            for guarded in store.state() {
                match &guarded.0 {
                    Err(invalid) if invalid.metadata.deletion_timestamp.is_none() => {
                        kept.push(R::id_of(&invalid.metadata));
                    }
                    Ok(object) if object.meta().deletion_timestamp.is_none() => {
                        match object.to_rule(settings) {
                            Ok(rule) => in_force.push((rule, holds_finalizer(object.meta()))),
                            Err(refusal) if !refusal.revokes_copies() => kept.push(object.rule_id()),
                            Err(_) => {}
                        }
                    }
                    _ => {}
                }
            }
            in_force
        }
        let settings = &*self.settings;
        let (mut in_force, mut finalized, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        let mut all = read(&self.rules, settings, &mut kept);
        all.extend(read(&self.syncs, settings, &mut kept));
        all.extend(read(&self.secret_syncs, settings, &mut kept));
        for (rule, holds_finalizer) in all {
            if holds_finalizer {
                finalized.push(rule.clone());
            }
            in_force.push(rule);
        }
        let labels: Vec<RuleLabels> = in_force.iter().map(|rule| RuleLabels::of(&rule.id)).collect();
        ParsedRules {
            in_force: in_force.into(),
            finalized: finalized.into(),
            labels: labels.into(),
            kept: Arc::new(KeptRules::new(kept)),
        }
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
            (RuleKind::SecretSync, Some(namespace)) => current(
                &self.secret_syncs,
                ObjectRef::new(&rule.id.name).within(namespace),
                &rule.uid,
                settings,
            ),
            (RuleKind::ConfigMapSync | RuleKind::SecretSync, None) => false,
        }
    }

    pub fn all_ids(&self) -> Vec<RuleId> {
        let rules = self.rules.state().into_iter().map(|rule| ReplicationRule::id_of(rule.meta()));
        let syncs = self.syncs.state().into_iter().map(|sync| ConfigMapSync::id_of(sync.meta()));
        let secret_syncs = self.secret_syncs.state().into_iter().map(|sync| SecretSync::id_of(sync.meta()));
        rules.chain(syncs).chain(secret_syncs).collect()
    }

    pub async fn wait_until_ready(&self) -> Result<(), CacheStopped> {
        self.rules_synced.wait_until_ready("ReplicationRule").await?;
        self.syncs_synced.wait_until_ready("ConfigMapSync").await?;
        self.secret_syncs_synced.wait_until_ready("SecretSync").await
    }

    pub fn is_ready(&self) -> bool {
        self.rules_synced.is_ready() && self.syncs_synced.is_ready() && self.secret_syncs_synced.is_ready()
    }
}

fn holds_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|finalizer| finalizer == FINALIZER)
}

#[cfg(test)]
pub(crate) mod tests {
    use futures::channel::mpsc;
    use kube::runtime::reflector;

    use super::*;
    use crate::controllers::replication::model::ObjectKind;

    pub(crate) fn rule(name: &str, kind: &str) -> Guarded<ReplicationRule> {
        let yaml = format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: {name}, uid: uid-{name}}}\n\
             spec: {{kind: {kind}, namespaces: [src], selector: {{matchLabels: {{a: b}}}}}}"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    /// The rule `rule` makes, holding kopper's finalizer.
    pub(crate) fn finalized(mut rule: Guarded<ReplicationRule>) -> Guarded<ReplicationRule> {
        if let Ok(object) = rule.0.as_mut() {
            object.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        }
        rule
    }

    pub(crate) type RuleEvents =
        mpsc::UnboundedSender<watcher::Result<watcher::Event<Guarded<ReplicationRule>>>>;

    /// Rule stores, the sender of the watch events that fill them, and the stream that
    /// applies those events (polled once per event sent).
    pub(crate) fn fed_rule_stores() -> (RuleStores, RuleEvents, impl futures::Stream) {
        let (rule_store, rule_writer) = reflector::store();
        let (sync_store, _sync_writer) = reflector::store();
        let (secret_sync_store, _secret_sync_writer) = reflector::store();
        let revision = StoreRevision::default();
        let stores = RuleStores::new(
            (rule_store, FirstList::default()),
            (sync_store, FirstList::default()),
            (secret_sync_store, FirstList::default()),
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
}
