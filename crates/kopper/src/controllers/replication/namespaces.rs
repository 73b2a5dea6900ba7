//! New and changed namespaces, served at once.
//!
//! A rule's pass looks at every namespace, so its cost grows with the cluster; run for each
//! new namespace, it made a namespace wait longer the more namespaces existed. Instead, each
//! namespace change is served here on its own: the copies a namespace newly wants are
//! decided for that namespace alone, by the same decision a pass makes ([`RulePass`] over a
//! [`World`] that holds only the changed namespaces), and written straight away. Then the
//! rules the change concerns are woken, so their passes (debounced, and the authority)
//! delete what a namespace no longer wants and bring their status up to date.
//!
//! Changes that arrive while a batch is being served wait and are served together next,
//! so a burst of namespaces costs a few batches, not one write round per namespace, and a
//! lone namespace is served without waiting for anything.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;

use super::copies::CopyIndex;
use super::desired::{Found, NamespaceInfo, ObjectKind, Rule, RulePass, RulePlan, World, source_namespaces};
use super::engine::{Engine, PassTally, SyncError};
use super::scoped::Scope;
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

    /// Whether `rule` sends copies to the namespace, or did: its pass has work to do.
    fn concerns(&self, rule: &Rule) -> bool {
        let targeted =
            |namespace: &Option<NamespaceInfo>| namespace.as_ref().is_some_and(|n| rule.targets(n));
        targeted(&self.before) || targeted(&self.after)
    }

    /// The namespace as it is, if `rule` sends copies to it now and did not before.
    fn newly_targeted_by(&self, rule: &Rule) -> Option<&NamespaceInfo> {
        let before = self.before.as_ref().is_some_and(|namespace| rule.targets(namespace));
        self.after.as_ref().filter(|namespace| !before && rule.targets(namespace))
    }
}

/// Changes not served yet, one per namespace: a namespace changed twice meanwhile keeps
/// how it was first and how it is last.
#[derive(Default)]
struct Pending(BTreeMap<String, NamespaceChange>);

impl Pending {
    fn add(&mut self, change: NamespaceChange) {
        match self.0.entry(change.name().to_owned()) {
            std::collections::btree_map::Entry::Occupied(mut entry) => entry.get_mut().after = change.after,
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(change);
            }
        }
    }
}

/// Serves namespace changes until the namespace cache stops sending them (at shutdown).
/// Nothing is served before every cache is ready; what arrived meanwhile is served then.
pub async fn serve(engine: Arc<Engine>, ctx: Arc<Context>, mut changes: UnboundedReceiver<NamespaceChange>) {
    if engine.ready().await.is_err() {
        return;
    }
    while let Some(first) = changes.next().await {
        let mut pending = Pending::default();
        pending.add(first);
        while let Ok(more) = changes.try_recv() {
            pending.add(more);
        }
        let changes: Vec<NamespaceChange> =
            pending.0.into_values().filter(NamespaceChange::matters).collect();
        if !changes.is_empty() {
            engine.namespaces_changed(&ctx, changes).await;
        }
    }
}

impl Engine {
    /// Writes the copies `changes` call for in their namespaces, then wakes the rules they
    /// concern. A write that fails here is left to those rules' passes, which retry.
    async fn namespaces_changed(&self, ctx: &Context, changes: Vec<NamespaceChange>) {
        let rules = self.router.rules.finalized(&ctx.settings);
        for kind in ObjectKind::ALL {
            if let Err(error) = self.copy_into_new_targets(ctx, &rules, kind, &changes).await {
                tracing::debug!(%error, %kind, "new namespaces left to the rules' passes");
            }
        }
        for rule in self.router.rules.in_force(&ctx.settings) {
            if changes.iter().any(|change| change.concerns(&rule)) {
                self.router.wakers.wake(&rule.id);
            }
        }
    }

    /// The copies of `kind` each rule wants in the namespaces it newly targets.
    async fn copy_into_new_targets(
        &self,
        ctx: &Context,
        rules: &[Rule],
        kind: ObjectKind,
        changes: &[NamespaceChange],
    ) -> Result<(), SyncError> {
        let arrivals: Vec<(&Rule, BTreeMap<String, NamespaceInfo>)> = rules
            .iter()
            .filter(|rule| rule.kind == kind)
            .map(|rule| {
                let namespaces = changes
                    .iter()
                    .filter_map(|change| change.newly_targeted_by(rule))
                    .map(|namespace| (namespace.name.clone(), namespace.clone()))
                    .collect();
                (rule, namespaces)
            })
            .filter(|(_, namespaces): &(_, BTreeMap<_, _>)| !namespaces.is_empty())
            .collect();
        if arrivals.is_empty() {
            return Ok(());
        }
        let source_namespaces = source_namespaces(rules, kind);
        let scopes = Scope::for_sources(source_namespaces.iter().copied());
        self.caches.scoped.ensure_ready(kind, scopes).await?;
        let view = self.caches.scoped.view(kind);
        let candidates = view.objects_in(source_namespaces.iter().copied());
        for (rule, namespaces) in arrivals {
            // Who wins a copy two rules want is decided among all rules, as in a pass.
            let world = World::new(rules, &namespaces, &candidates);
            let _gate = self.gates.shared(&rule.id).await;
            if !self.router.rules.still_finalized(rule) {
                continue;
            }
            let sources = self.fetch_sources(&ctx.client, kind, world.matched_sources(rule)).await?;
            let pass = RulePass::new(rule, &world, &sources);
            let mut plan = RulePlan::default();
            {
                let copies = self.caches.copies(kind).read();
                let found = |namespace: &str, name: &str| {
                    CopyIndex::get(&copies, namespace, name)
                        .map_or_else(|| view.found(namespace, name), Found::Copy)
                };
                pass.plan_copies(pass.targets(), found, &mut plan);
            }
            let mut tally = PassTally::default();
            self.apply_batch(ctx, rule, plan, &mut tally).await;
            if let Some(error) = tally.failed.first() {
                tracing::debug!(%error, rule = %rule.id, "a copy into a new namespace failed; its pass retries");
            }
        }
        Ok(())
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

    #[test]
    fn a_namespace_changed_twice_keeps_how_it_was_first_and_how_it_is_last() {
        let mut pending = Pending::default();
        let first = namespace("team-a", &[]);
        let second = namespace("team-a", &[("tier", "gold")]);
        pending.add(NamespaceChange { before: None, after: Some(first.clone()) });
        pending.add(NamespaceChange { before: Some(first), after: Some(second.clone()) });
        pending.add(NamespaceChange { before: None, after: Some(namespace("team-b", &[])) });
        assert_eq!(pending.0.len(), 2);
        assert_eq!(pending.0["team-a"], NamespaceChange { before: None, after: Some(second) });
    }

    #[test]
    fn a_namespace_created_and_deleted_before_it_is_served_changes_nothing() {
        let mut pending = Pending::default();
        let created = namespace("team-a", &[]);
        pending.add(NamespaceChange { before: None, after: Some(created.clone()) });
        pending.add(NamespaceChange { before: Some(created), after: None });
        assert!(!pending.0["team-a"].matters());
    }

    #[test]
    fn only_changes_to_what_rules_read_matter() {
        let before = namespace("team-a", &[("tier", "gold")]);
        let same = NamespaceChange { before: Some(before.clone()), after: Some(before.clone()) };
        assert!(!same.matters());
        let relabelled = NamespaceChange { before: Some(before), after: Some(namespace("team-a", &[])) };
        assert!(relabelled.matters());
    }
}
