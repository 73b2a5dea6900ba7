//! New and changed namespaces, served at once.
//!
//! A rule's pass looks at every namespace, so its cost grows with the cluster; were it the
//! only path, a new namespace would wait longer the more namespaces exist. Instead, each
//! batch of namespace changes ([`NamespaceChanges`]) is served here on its own: the copies
//! a namespace newly wants are decided for that namespace alone, by the same decision a
//! pass makes ([`RulePass`] over a [`World`] that holds only the changed namespaces), and
//! written straight away. Then the rules the change concerns are woken, so their passes
//! (paced, and the authority) delete what a namespace no longer wants and bring their
//! status up to date. A rule whose only news is namespaces it newly targets, all of whose
//! copies were written here, is woken for its status only
//! ([`Urgency::Status`](super::wake::pacing::Urgency::Status)): its pass can wait until
//! earlier passes leave it time, so a stream of new namespaces does not keep a core busy
//! with passes whose cost grows with the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::runtime::reflector::ObjectRef;

use super::cache::copies::CopyIndex;
use super::cache::namespaces::{Merged, NamespaceChanges};
use super::cache::rules::ParsedRules;
use super::desired::{RulePass, RulePlan, World, source_namespaces};
use super::engine::{Engine, PassTally, SyncError};
use super::model::{KeptRules, NamespaceInfo, ObjectKind, Rule, RuleId};
use crate::runtime::Context;

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
            serve_batch(&engine, &ctx, &batch).await;
        }
    };
    tokio::select! {
        () = serving => {}
        () = shutdown => {}
    }
}

/// Writes the copies `changes` call for in their namespaces and wakes the rules they
/// concern: at once those with nothing to write here (a namespace that stopped matching
/// waits for nobody's writes), the others once their copies are written, so that their
/// pass does not race those writes; for status only those whose news was only new
/// namespaces, all of whose copies were written. A write that fails here is left to the
/// passes, which retry. First it deletes the copies there that tenants' syncs not in force
/// (deleted with `deletionPolicy: Orphan`, or kept while refused) made under a consent that
/// is gone: no pass would, as no rule in force owns them.
async fn serve_batch(engine: &Engine, ctx: &Context, changes: &[Merged]) {
    // Who wins a copy two rules want is decided among all rules in force, as in a pass;
    // copies are written only for those whose cleanup is sure to run.
    let ParsedRules { in_force: rules, finalized, kept, .. } = engine.router.rules.parsed();
    let present: Vec<&str> = changes.iter().filter_map(Merged::current_name).collect();
    engine.remove_copies_without_consent(ctx, &present).await;
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
            changes.iter().filter(|change| change.concerns(rule)).all(|change| change.only_arrives_for(rule))
        })
        .map(|rule| &rule.id)
        .collect();
    concerned.iter().filter(|id| !writing.contains(*id)).for_each(|id| engine.router.wakers.wake(id));
    let mut served = HashSet::new();
    for kind in engine.caches.kinds() {
        match copy_into_new_targets(engine, ctx, &rules, &kept, &finalized, kind, changes).await {
            Ok(done) => served.extend(done),
            Err(error) => {
                tracing::warn!(%error, %kind, "could not copy into new namespaces at once; the rules' passes will");
            }
        }
    }
    // A rule that changed meanwhile may not want what was written under its old spec,
    // and the events of those writes wake no pass. (Its status changing is no change.)
    let now_in_force = engine.router.rules.in_force();
    let then: HashMap<&RuleId, &Rule> =
        rules.iter().filter(|rule| writing.contains(&rule.id)).map(|rule| (&rule.id, rule)).collect();
    let now: HashMap<&RuleId, &Rule> =
        now_in_force.iter().filter(|rule| writing.contains(&rule.id)).map(|rule| (&rule.id, rule)).collect();
    let unchanged = |id: &RuleId| then.get(id).is_some_and(|rule| now.get(id) == Some(rule));
    for id in concerned.into_iter().filter(|id| writing.contains(*id)) {
        if served.contains(id) && only_arrivals.contains(id) && unchanged(id) {
            engine.router.wakers.wake_for_status(id);
        } else {
            engine.router.wakers.wake(id);
        }
    }
}

/// The copies of `kind` each of the `finalized` rules wants in the namespaces it newly
/// targets, decided among all `rules` in force and the copies the `kept` rules hold. Returns
/// the rules all of whose copies there are written or in sync, with no conflict to report.
async fn copy_into_new_targets(
    engine: &Engine,
    ctx: &Context,
    rules: &[Rule],
    kept: &KeptRules,
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
    let scopes = engine.caches.scoped.for_sources(kind, source_namespaces.iter().copied());
    engine.caches.scoped.ensure_ready(kind, scopes).await?;
    let view = engine.caches.scoped.view(kind);
    let candidates = view.objects_in(source_namespaces.iter().copied());
    for (rule, names) in arrivals {
        // Checked before waiting on its gate (a cleanup may hold it long) and after.
        if !engine.router.rules.still_finalized(rule) {
            continue;
        }
        let _gate = engine.gates.shared(&rule.id).await;
        if !engine.router.rules.still_finalized(rule) {
            continue;
        }
        // The namespaces as they are now, not as the change saw them.
        let namespaces = current_namespaces(engine, &names, rule);
        let world = World::new(rules, &namespaces, &candidates).keeping(kept);
        let sources = engine.fetch_sources(&ctx.client, kind, world.matched_sources(rule)).await?;
        let pass = RulePass::new(rule, &world, &sources);
        let mut plan = RulePlan::default();
        {
            let index = engine.caches.copies(kind);
            let copies = index.read();
            let found = |namespace: &str, name: &str| {
                CopyIndex::found(&copies, namespace, name).unwrap_or_else(|| view.found(namespace, name))
            };
            pass.plan_copies(pass.targets(), found, &index.renderings, &mut plan);
        }
        let mut tally = PassTally::default();
        engine.apply_batch(ctx, rule, plan, &mut tally).await;
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
fn current_namespaces(engine: &Engine, names: &[&str], rule: &Rule) -> BTreeMap<String, NamespaceInfo> {
    names
        .iter()
        .filter_map(|name| engine.caches.namespaces.get(&ObjectRef::new(name)))
        .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
        .filter(|namespace| rule.targets(namespace))
        .map(|namespace| (namespace.name.clone(), namespace))
        .collect()
}
