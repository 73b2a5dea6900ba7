//! New and changed namespaces, served at once.
//!
//! A rule's pass looks at every namespace, so its cost grows with the cluster; run for each
//! new namespace, it made a namespace wait longer the more namespaces existed. Instead, each
//! namespace change is served here on its own: the copies a namespace newly wants are
//! decided for that namespace alone, by the same decision a pass makes ([`RulePass`] over a
//! [`World`] that holds only the changed namespaces), and written straight away. Then the
//! rules the change concerns are woken, so their passes (paced, and the authority)
//! delete what a namespace no longer wants and bring their status up to date. A rule whose
//! only news is namespaces it newly targets, all of whose copies were written here, is
//! woken for its status only ([`super::pacing::Urgency::Status`]): its pass can wait until
//! earlier passes leave it time, so a stream of new namespaces does not keep a core busy
//! with passes whose cost grows with the cluster.
//!
//! Changes that arrive while a batch is being served wait, merged by namespace, and are
//! served together next: a burst of namespaces costs a few batches, not one write round per
//! namespace, and a lone namespace waits for no timer. What waits is one entry per namespace
//! name changed meanwhile, whatever the rate of changes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use super::copies::CopyIndex;
use super::desired::{NamespaceInfo, ObjectKind, Rule, RuleId, RulePass, RulePlan, World, source_namespaces};
use super::engine::{Engine, PassTally, SyncError};
use super::index::ParsedRules;
use crate::runtime::Context;

/// One namespace as it was and as it is (`None`: not there).
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceChange {
    pub before: Option<NamespaceInfo>,
    pub after: Option<NamespaceInfo>,
}

impl NamespaceChange {
    /// Whether anything a rule decides by changed: not so for a new resourceVersion alone,
    /// or an annotation kopper does not read.
    pub fn matters(&self) -> bool {
        self.before != self.after
    }

    fn name(&self) -> &str {
        self.after.as_ref().or(self.before.as_ref()).map_or("", |namespace| namespace.name.as_str())
    }
}

/// States a namespace went through between two batches that are kept to wake the rules
/// they concern; past this many, every rule is woken instead.
const MAX_STATES_PASSED: usize = 8;

/// How one namespace changed since it was last served.
#[derive(Clone, Debug, Default, PartialEq)]
struct Merged {
    /// As it was, or `None` if it is new (or was deleted and created again meanwhile: the
    /// new one holds nothing yet).
    before: Option<NamespaceInfo>,
    after: Option<NamespaceInfo>,
    /// The states in between, and the one before a deletion: the rules they concern may
    /// have acted on them and must look again.
    passed: Vec<NamespaceInfo>,
    /// More states passed than are kept.
    many: bool,
}

impl Merged {
    fn new(change: NamespaceChange) -> Self {
        Self { before: change.before, after: change.after, ..Self::default() }
    }

    fn then(&mut self, change: NamespaceChange) {
        let created_again = change.before.is_none();
        let passed =
            if created_again { [self.after.take(), self.before.take()] } else { [self.after.take(), None] };
        for state in passed.into_iter().flatten() {
            if !self.passed.contains(&state) {
                self.passed.push(state);
            }
        }
        if self.passed.len() > MAX_STATES_PASSED {
            self.passed.clear();
            self.many = true;
        }
        self.after = change.after;
    }

    fn matters(&self) -> bool {
        self.before != self.after || !self.passed.is_empty() || self.many
    }

    /// Whether `rule` sends copies to the namespace, or did at some point: its pass has
    /// work to do.
    fn concerns(&self, rule: &Rule) -> bool {
        let targeted = |namespace: &NamespaceInfo| rule.targets(namespace);
        self.many
            || self.before.as_ref().is_some_and(targeted)
            || self.after.as_ref().is_some_and(targeted)
            || self.passed.iter().any(targeted)
    }

    /// Whether the namespace's only news for `rule` is that `rule` now sends copies to it:
    /// nothing of `rule`'s is to be deleted or repaired there.
    fn only_arrives_for(&self, rule: &Rule) -> bool {
        !self.many
            && self.newly_targeted_by(rule).is_some()
            && !self.passed.iter().any(|namespace| rule.targets(namespace))
    }

    /// The namespace as it is, if `rule` sends copies to it now and did not before.
    fn newly_targeted_by(&self, rule: &Rule) -> Option<&NamespaceInfo> {
        let before = self.before.as_ref().is_some_and(|namespace| rule.targets(namespace));
        self.after.as_ref().filter(|namespace| !before && rule.targets(namespace))
    }
}

/// Namespace changes waiting to be served, merged by namespace.
#[derive(Default)]
pub struct NamespaceChanges {
    pending: Mutex<BTreeMap<String, Merged>>,
    arrived: Notify,
}

impl NamespaceChanges {
    pub fn push(&self, change: NamespaceChange) {
        if !change.matters() {
            return;
        }
        {
            // Every critical section here completes or changes nothing.
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            match pending.entry(change.name().to_owned()) {
                std::collections::btree_map::Entry::Occupied(mut entry) => entry.get_mut().then(change),
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(Merged::new(change));
                }
            }
        }
        self.arrived.notify_one();
    }

    /// Waits for changes and takes all that are waiting.
    async fn next_batch(&self) -> Vec<Merged> {
        loop {
            let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
            let batch: Vec<Merged> = batch.into_values().filter(Merged::matters).collect();
            if !batch.is_empty() {
                return batch;
            }
            self.arrived.notified().await;
        }
    }
}

/// Serves namespace changes until `shutdown`. Nothing is served before every cache is
/// ready; what arrived meanwhile is served then.
pub async fn serve(
    engine: Arc<Engine>,
    ctx: Arc<Context>,
    changes: Arc<NamespaceChanges>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let serving = async {
        if engine.ready().await.is_err() {
            return;
        }
        loop {
            let batch = changes.next_batch().await;
            engine.namespaces_changed(&ctx, &batch).await;
        }
    };
    tokio::select! {
        () = serving => {}
        () = shutdown => {}
    }
}

impl Engine {
    /// Writes the copies `changes` call for in their namespaces and wakes the rules they
    /// concern: at once those with nothing to write here (a namespace that stopped matching
    /// waits for nobody's writes), the others once their copies are written, so that their
    /// pass does not race those writes; for status only those whose news was only new
    /// namespaces, all of whose copies were written. A write that fails here is left to the
    /// passes, which retry.
    async fn namespaces_changed(&self, ctx: &Context, changes: &[Merged]) {
        // Who wins a copy two rules want is decided among all rules in force, as in a pass;
        // copies are written only for those whose cleanup is sure to run.
        let ParsedRules { in_force: rules, finalized, .. } = self.router.rules.parsed();
        let writing: HashSet<&RuleId> = finalized
            .iter()
            .filter(|rule| changes.iter().any(|change| change.newly_targeted_by(rule).is_some()))
            .map(|rule| &rule.id)
            .collect();
        let concerned: Vec<&RuleId> = rules
            .iter()
            .filter(|rule| changes.iter().any(|change| change.concerns(rule)))
            .map(|rule| &rule.id)
            .collect();
        let only_arrivals: HashSet<&RuleId> = rules
            .iter()
            .filter(|rule| {
                changes
                    .iter()
                    .filter(|change| change.concerns(rule))
                    .all(|change| change.only_arrives_for(rule))
            })
            .map(|rule| &rule.id)
            .collect();
        concerned.iter().filter(|id| !writing.contains(*id)).for_each(|id| self.router.wakers.wake(id));
        let mut served = HashSet::new();
        for kind in ObjectKind::ALL {
            match self.copy_into_new_targets(ctx, &rules, &finalized, kind, changes).await {
                Ok(done) => served.extend(done),
                Err(error) => {
                    tracing::warn!(%error, %kind, "could not copy into new namespaces at once; the rules' passes will");
                }
            }
        }
        // A rule that changed meanwhile may not want what was written under its old spec,
        // and the events of those writes wake no pass. (Its status changing is no change.)
        let now_in_force = self.router.rules.in_force();
        let then: HashMap<&RuleId, &Rule> =
            rules.iter().filter(|rule| writing.contains(&rule.id)).map(|rule| (&rule.id, rule)).collect();
        let now: HashMap<&RuleId, &Rule> = now_in_force
            .iter()
            .filter(|rule| writing.contains(&rule.id))
            .map(|rule| (&rule.id, rule))
            .collect();
        let unchanged = |id: &RuleId| then.get(id).is_some_and(|rule| now.get(id) == Some(rule));
        for id in concerned.into_iter().filter(|id| writing.contains(*id)) {
            if served.contains(id) && only_arrivals.contains(id) && unchanged(id) {
                self.router.wakers.wake_for_status(id);
            } else {
                self.router.wakers.wake(id);
            }
        }
    }

    /// The copies of `kind` each of the `finalized` rules wants in the namespaces it newly
    /// targets. Returns the rules all of whose copies there are written or in sync, with no
    /// conflict to report.
    async fn copy_into_new_targets(
        &self,
        ctx: &Context,
        rules: &[Rule],
        finalized: &[Rule],
        kind: ObjectKind,
        changes: &[Merged],
    ) -> Result<Vec<RuleId>, SyncError> {
        let arrivals: Vec<(&Rule, Vec<&str>)> = finalized
            .iter()
            .filter(|rule| rule.kind == kind)
            .map(|rule| {
                let names = changes
                    .iter()
                    .filter_map(|change| change.newly_targeted_by(rule))
                    .map(|namespace| namespace.name.as_str())
                    .collect();
                (rule, names)
            })
            .filter(|(_, names): &(_, Vec<_>)| !names.is_empty())
            .collect();
        if arrivals.is_empty() {
            return Ok(Vec::new());
        }
        let mut served = Vec::new();
        let source_namespaces = source_namespaces(rules, kind);
        let scopes = self.caches.scoped.for_sources(kind, source_namespaces.iter().copied());
        self.caches.scoped.ensure_ready(kind, scopes).await?;
        let view = self.caches.scoped.view(kind);
        let candidates = view.objects_in(source_namespaces.iter().copied());
        for (rule, names) in arrivals {
            // Checked before waiting on its gate (a cleanup may hold it long) and after.
            if !self.router.rules.still_finalized(rule) {
                continue;
            }
            let _gate = self.gates.shared(&rule.id).await;
            if !self.router.rules.still_finalized(rule) {
                continue;
            }
            // The namespaces as they are now, not as the change saw them.
            let namespaces = self.current_namespaces(&names, rule);
            let world = World::new(rules, &namespaces, &candidates);
            let sources = self.fetch_sources(&ctx.client, kind, world.matched_sources(rule)).await?;
            let pass = RulePass::new(rule, &world, &sources);
            let mut plan = RulePlan::default();
            {
                let copies = self.caches.copies(kind).read();
                let found = |namespace: &str, name: &str| {
                    CopyIndex::found(&copies, namespace, name).unwrap_or_else(|| view.found(namespace, name))
                };
                pass.plan_copies(pass.targets(), found, &mut plan);
            }
            let mut tally = PassTally::default();
            self.apply_batch(ctx, rule, plan, &mut tally).await;
            if let Some(error) = tally.failed.first() {
                tracing::debug!(%error, rule = %rule.id, "a copy into a new namespace failed; its pass retries");
            }
            if tally.clean() {
                served.push(rule.id.clone());
            }
        }
        Ok(served)
    }

    /// Those of the namespaces `names` that `rule` targets as the cache holds them now.
    fn current_namespaces(&self, names: &[&str], rule: &Rule) -> BTreeMap<String, NamespaceInfo> {
        names
            .iter()
            .filter_map(|name| self.caches.namespaces.get(&ObjectRef::new(name)))
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .filter(|namespace| rule.targets(namespace))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
        NamespaceInfo {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            active: true,
            ..NamespaceInfo::default()
        }
    }

    fn change(before: Option<&NamespaceInfo>, after: Option<&NamespaceInfo>) -> NamespaceChange {
        NamespaceChange { before: before.cloned(), after: after.cloned() }
    }

    fn merged(changes: &[NamespaceChange]) -> Vec<Merged> {
        let pending = NamespaceChanges::default();
        changes.iter().cloned().for_each(|change| pending.push(change));
        let batch = std::mem::take(&mut *pending.pending.lock().unwrap());
        batch.into_values().filter(Merged::matters).collect()
    }

    #[test]
    fn a_namespace_changed_twice_keeps_how_it_was_first_and_how_it_is_last() {
        let first = namespace("team-a", &[]);
        let second = namespace("team-a", &[("tier", "gold")]);
        let other = namespace("team-b", &[]);
        let batch = merged(&[
            change(None, Some(&first)),
            change(Some(&first), Some(&second)),
            change(None, Some(&other)),
        ]);
        assert_eq!(batch.len(), 2);
        assert_eq!((batch[0].before.as_ref(), batch[0].after.as_ref()), (None, Some(&second)));
        assert_eq!(batch[0].passed, [first]);
    }

    #[test]
    fn a_namespace_created_and_deleted_before_it_is_served_still_wakes_its_rules() {
        let created = namespace("team-a", &[]);
        let batch = merged(&[change(None, Some(&created)), change(Some(&created), None)]);
        assert_eq!(batch.len(), 1);
        assert_eq!((batch[0].before.as_ref(), batch[0].after.as_ref()), (None, None));
        assert_eq!(batch[0].passed, [created], "a pass may have copied into it meanwhile");
    }

    #[test]
    fn a_namespace_deleted_and_created_again_is_new() {
        let old = namespace("team-a", &[("tier", "gold")]);
        let batch = merged(&[change(Some(&old), None), change(None, Some(&old))]);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].before, None, "the new namespace holds none of the old one's copies");
        assert_eq!(batch[0].after.as_ref(), Some(&old));
    }

    #[test]
    fn labels_that_flap_back_still_wake_the_rules_of_the_state_in_between() {
        let gold = namespace("team-a", &[("tier", "gold")]);
        let silver = namespace("team-a", &[("tier", "silver")]);
        let batch = merged(&[change(Some(&gold), Some(&silver)), change(Some(&silver), Some(&gold))]);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].passed, [silver]);
    }

    #[test]
    fn past_a_few_states_every_rule_is_woken_and_nothing_more_is_kept() {
        let states: Vec<NamespaceInfo> =
            (0..20).map(|n| namespace("team-a", &[("n", &n.to_string())])).collect();
        let changes: Vec<NamespaceChange> =
            states.windows(2).map(|pair| change(Some(&pair[0]), Some(&pair[1]))).collect();
        let batch = merged(&changes);
        assert!(batch[0].many);
        assert!(batch[0].passed.len() <= MAX_STATES_PASSED);
    }

    #[test]
    fn only_changes_to_what_rules_read_matter() {
        let before = namespace("team-a", &[("tier", "gold")]);
        assert!(!change(Some(&before), Some(&before)).matters());
        assert!(change(Some(&before), Some(&namespace("team-a", &[]))).matters());
        assert!(merged(&[change(Some(&before), Some(&before))]).is_empty());
    }

    /// A rule copying into namespaces labelled `tier: gold`.
    fn gold_rule() -> Rule {
        use super::super::desired::{SourceMatch, TargetMatch};
        Rule {
            id: RuleId::replication_rule("gold"),
            uid: "uid".to_owned(),
            kind: ObjectKind::ConfigMap,
            sources: SourceMatch { namespaces: vec!["src".to_owned()], ..SourceMatch::default() },
            targets: TargetMatch::Matching {
                selector: Some(kube::core::Selector::from_iter([("tier", "gold")])),
                include: vec![],
                exclude: vec![],
                protected: crate::tenancy::ProtectedNamespaces::default(),
            },
        }
    }

    #[test]
    fn only_a_namespace_a_rule_newly_targets_and_never_did_meanwhile_is_news_for_its_status_alone() {
        let rule = gold_rule();
        let gold = namespace("team-a", &[("tier", "gold")]);
        let plain = namespace("team-a", &[]);
        let only_arrives = |changes: &[NamespaceChange]| merged(changes)[0].only_arrives_for(&rule);
        assert!(only_arrives(&[change(None, Some(&gold))]), "a new namespace");
        assert!(only_arrives(&[change(Some(&plain), Some(&gold))]), "labelled into the rule's targets");
        assert!(!only_arrives(&[change(Some(&gold), Some(&plain))]), "its copies there must go");
        assert!(!only_arrives(&[change(None, Some(&plain))]), "not a target");
        let flapped = [change(Some(&gold), Some(&plain)), change(Some(&plain), Some(&gold))];
        assert!(!only_arrives(&flapped), "a pass may have deleted its copies meanwhile");
        let states: Vec<NamespaceInfo> =
            (0..20).map(|n| namespace("team-a", &[("n", &n.to_string())])).chain([gold.clone()]).collect();
        let many: Vec<NamespaceChange> =
            states.windows(2).map(|pair| change(Some(&pair[0]), Some(&pair[1]))).collect();
        assert!(!only_arrives(&many), "too many states passed to tell");
    }
}
