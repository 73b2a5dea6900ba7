//! One pass of the engine for one rule: read what the caches cannot tell (source content),
//! decide with a [`RulePass`] a few namespaces at a time, apply each batch, report.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::{DynamicObject, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};

use super::apply::{self, WriteError};
use super::cache::Caches;
use super::cache::copies::CopyIndex;
use super::cache::scoped::{METADATA_PAGE_SIZE, ScopeNotReady};
use super::desired::{
    Change, ConflictReason, RulePass, RulePlan, ShapeProblem, World, cleanup, copies_without_consent,
    on_rule_deleted, refused_named_source, source_namespaces,
};
use super::metrics::SOURCE_TO_COPY_SECONDS;
use super::model::{
    CopyKey, CopyState, FIELD_MANAGER_NAME, KeptRules, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NamespaceInfo,
    ObjectInfo, ObjectKind, Payload, REPLICATED_BY_LABEL, RULE_CONTROLLER, Rendering, Renderings, Rule,
    RuleId, RuleKind, RuleLabels, SYNC_CONTROLLER, Scope, Source, controller_of,
};
use super::rules::{Findings, Refusal, RuleObject};
use super::types::{ConfigMapSync, DeletionPolicy, ReplicationRule, SecretSync};
use super::wake::Router;
use crate::runtime::cache::CacheStopped;
use crate::runtime::metrics::RuleGauges;
use crate::runtime::{Context, ErrorCategory};

/// Reads made at once while preparing one rule's pass.
const CONCURRENT_READS: usize = 16;
/// Copies decided and written per batch of a pass: a pass over thousands of namespaces
/// holds this many at most.
const COPIES_PER_BATCH: usize = 2_000;
/// How long a pass waits for the copy watch to deliver kopper's earlier writes before it
/// decides anyway (the watch may be relisting): it then may write a copy twice, never wrongly.
const CATCH_UP_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    CacheStopped(#[from] CacheStopped),
    #[error(transparent)]
    ScopeNotReady(#[from] ScopeNotReady),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{count} writes failed, first: {first}")]
    Write { count: usize, first: Box<WriteError> },
    /// Copies the API server refused as a privilege escalation: permanent until kopper's
    /// rights or the sources change, so tried again only after the longest backoff.
    #[error("the API server refused {count} copies as privilege escalations, first {}", first.key)]
    Escalation { count: usize, first: Box<super::apply::EscalationRefused> },
    #[error("writing status of {rule}: {source}")]
    Status {
        rule: RuleId,
        #[source]
        source: kube::Error,
    },
}

impl ErrorCategory for SyncError {
    fn category(&self) -> &'static str {
        match self {
            Self::CacheStopped(_) | Self::ScopeNotReady(_) => "cache",
            Self::Read { .. } => "kube_api",
            Self::Write { .. } => "write",
            Self::Escalation { .. } => "escalation",
            Self::Status { .. } => "status",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, Self::Escalation { .. })
    }
}

/// Every critical section below completes or changes nothing, so a poisoned lock still
/// guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The caches and what routes their changes, shared by both controllers.
pub struct Engine {
    pub caches: Caches,
    pub router: Arc<Router>,
    /// Keeps a rule's cleanup apart from copies written for it outside its passes.
    pub(super) gates: RuleGates,
    /// Uids of rule objects the API server confirmed as the current one of their name
    /// (see [`Engine::is_current`]), while they are in force.
    confirmed_current: Mutex<HashSet<String>>,
    /// When discovery was last asked for each allowed kind not served yet.
    rediscovery: super::cache::kinds::Rediscovery,
}

/// One gate per rule. A rule's passes are run one at a time by its controller, but
/// [`super::new_namespaces`] writes copies for it outside them: it holds the gate shared while
/// it checks the rule still stands and writes, and a cleanup holds it alone, so no copy is
/// written for a rule after its cleanup looked for its copies.
#[derive(Default)]
pub(super) struct RuleGates(Mutex<HashMap<RuleId, Arc<tokio::sync::RwLock<()>>>>);

impl RuleGates {
    fn gate(&self, rule: &RuleId) -> Arc<tokio::sync::RwLock<()>> {
        lock(&self.0).entry(rule.clone()).or_default().clone()
    }

    pub(super) async fn shared(&self, rule: &RuleId) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.gate(rule).read_owned().await
    }

    async fn exclusive(&self, rule: &RuleId) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.gate(rule).write_owned().await
    }

    /// Forgets the gates of rules that are gone and that nobody holds.
    fn retain(&self, rules: &HashSet<RuleId>) {
        lock(&self.0).retain(|rule, gate| rules.contains(rule) || Arc::strong_count(gate) > 1);
    }
}

/// What one pass did, summed over its batches.
#[derive(Default)]
pub(super) struct PassTally {
    findings: Findings,
    pub(super) failed: Vec<WriteError>,
    /// Sources whose copies were written, with the version written.
    written_sources: HashMap<String, String>,
}

impl PassTally {
    /// Whether every copy was written or found in sync, with no conflict to report.
    pub(super) fn clean(&self) -> bool {
        self.failed.is_empty() && self.findings.conflicts.is_empty()
    }
}

impl Engine {
    pub fn new(caches: Caches, router: Arc<Router>) -> Self {
        Self {
            caches,
            router,
            gates: RuleGates::default(),
            confirmed_current: Mutex::default(),
            rediscovery: Default::default(),
        }
    }

    /// Waits for every cache's first list, the rules' included.
    pub async fn ready(&self) -> Result<(), CacheStopped> {
        self.caches.wait_until_ready().await?;
        self.router.rules.wait_until_ready().await
    }

    /// Brings the copies of `object` in line and writes its status.
    pub async fn sync<R: RuleObject>(&self, ctx: &Context, object: &R) -> Result<Action, SyncError> {
        // A kind allowed but not served at start may be now (its CRD installed since).
        if let Some(kind) = object.allowed_kind(&ctx.settings)
            && self.rediscovery.resolve(&ctx.client, kind).await
        {
            self.caches.watch_kind(ObjectKind::Other(kind));
        }
        let rule = match object.to_rule(&ctx.settings) {
            Ok(rule) => rule,
            Err(refusal) => {
                // A refused rule holds no copies: whatever it was allowed before (a source
                // kopper no longer lets it read, say) is revoked; a shape it cannot write
                // leaves its copies as they are (see `Refusal::revokes_copies`), but for
                // those its tenant may no longer write.
                let id = object.rule_id();
                let uid = object.meta().uid.clone().unwrap_or_default();
                // The server is asked for copies the cache may have missed once, when the
                // refusal is new; a rule that stays refused is woken often, and its copies
                // are long gone.
                let removed = if refusal.revokes_copies() {
                    let listing = refusal_listing(object.ready_reason().as_deref(), &refusal);
                    self.cleanup_with(ctx, &id, &uid, listing, DeletionPolicy::Delete).await
                } else {
                    let withdrawn = self.without_consent(ctx, &KeptRules::new([id.clone()]), None);
                    failures(self.delete_copies(ctx, controller_of(id.kind), &withdrawn).await)
                };
                let refused = RuleGauges { not_ready: true, ..RuleGauges::default() };
                ctx.metrics.set_rule_gauges(controller_of(id.kind), &id.to_string(), Some(refused));
                let not_served = refusal.reason == "KindNotServed";
                self.report(ctx, object, Err(refusal)).await?;
                return match removed {
                    // Looked for again: its CRD may be installed any time.
                    Ok(_) if not_served => Ok(Action::requeue(crate::kinds::REDISCOVERY_INTERVAL)),
                    other => other,
                };
            }
        };
        let started = Instant::now();
        let tally = self.pass(ctx, &rule).await;
        // How long a wake-up for status only waits follows what a pass costs.
        self.router.wakers.pass_took(&rule.id, started.elapsed());
        let tally = tally?;
        if tally.failed.is_empty() {
            self.observe_latency(&tally.written_sources);
        }
        let gauges = rule_gauges(rule.kind, &tally);
        ctx.metrics.set_rule_gauges(controller_of(rule.id.kind), &rule.id.to_string(), Some(gauges));
        self.caches.scoped.still_blocked(&rule.id, rule.kind, &blocked_names(&tally.findings));
        self.retire_scoped_watches();
        let escalations = tally.findings.escalations.clone();
        self.report(ctx, object, Ok(object.redact(tally.findings))).await?;
        failures(tally.failed)?;
        match escalations.first() {
            Some(first) => {
                Err(SyncError::Escalation { count: escalations.len(), first: Box::new(first.clone()) })
            }
            None => Ok(Action::await_change()),
        }
    }

    /// Removes every copy the rule `id` (whose object has uid `uid`) made, or leaves them in
    /// place as orphans, as `policy` says; runs when it is deleted (a rule refused or no
    /// longer allowed loses its copies whatever its policy: see [`Self::sync`]).
    pub async fn cleanup(
        &self,
        ctx: &Context,
        id: &RuleId,
        uid: &str,
        policy: DeletionPolicy,
    ) -> Result<Action, SyncError> {
        self.cleanup_with(ctx, id, uid, Listing::FromServer, policy).await
    }

    /// [`Self::cleanup`]; with [`Listing::CacheOnly`], only the copies the cache knows of.
    async fn cleanup_with(
        &self,
        ctx: &Context,
        id: &RuleId,
        uid: &str,
        listing: Listing,
        policy: DeletionPolicy,
    ) -> Result<Action, SyncError> {
        let _alone = self.gates.exclusive(id).await;
        let labels = RuleLabels::of(id);
        let field_manager = ctx.settings.field_manager_for(FIELD_MANAGER_NAME);
        let cached: Vec<Change> = self
            .caches
            .kinds()
            .into_iter()
            .flat_map(|kind| {
                let copies = self.caches.copies(kind).read();
                let own = CopyIndex::all(&copies)
                    .filter(|(_, _, copy)| labels.marks(copy) && copy.deletable_by(uid));
                on_rule_deleted(kind, &labels.current, policy, own)
            })
            .collect();
        let mut applied = apply::execute(&ctx.client, &field_manager, &cached).await;
        let listed = match listing {
            Listing::FromServer => self.listed_copies(&ctx.client, &labels, uid, policy).await,
            Listing::CacheOnly => Ok(Vec::new()),
        };
        let listed_error = match listed {
            Ok(listed) => {
                let missed = not_yet_deleted(&cached, &applied.removed, listed);
                let more = apply::execute(&ctx.client, &field_manager, &missed).await;
                applied.removed.extend(more.removed);
                applied.versions.extend(more.versions);
                applied.failed.extend(more.failed);
                None
            }
            Err(error) => Some(error),
        };
        applied.removed.iter().for_each(|_| ctx.metrics.wrote(controller_of(id.kind)));
        // The pass of a rule taking over the orphans waits for their watch events.
        applied.versions.iter().for_each(|(key, version)| self.caches.copies(key.kind).wrote(version));
        ctx.metrics.set_rule_gauges(controller_of(id.kind), &id.to_string(), None);
        self.retire_scoped_watches();
        match listed_error {
            Some(error) => Err(error),
            None => failures(applied.failed),
        }
    }

    /// Deletions of kopper's copies of the rule labelled `labels` (whose object has uid
    /// `uid`) as the API server lists them now, metadata only, a page at a time: the copies
    /// cache may not have seen the last ones written yet (by the pass just before, or for a
    /// new namespace), and a copy it missed would stay until the orphan sweep.
    async fn listed_copies(
        &self,
        client: &Client,
        labels: &RuleLabels,
        uid: &str,
        policy: DeletionPolicy,
    ) -> Result<Vec<Change>, SyncError> {
        let selector =
            format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{REPLICATED_BY_LABEL}={}", labels.current);
        let mut changes = Vec::new();
        for kind in self.caches.kinds() {
            let mut page = ListParams::default().labels(&selector).limit(METADATA_PAGE_SIZE);
            loop {
                let (listed, next) = match kind {
                    ObjectKind::ConfigMap => list_page::<ConfigMap>(client, &page, &()).await,
                    ObjectKind::Secret => list_page::<Secret>(client, &page, &()).await,
                    ObjectKind::Other(_) => match kind.api_resource() {
                        Some(resource) => list_page::<DynamicObject>(client, &page, &resource).await,
                        None => break,
                    },
                }
                .map_err(|source| SyncError::Read {
                    what: format!("the {kind} copies of {}", labels.current),
                    source,
                })?;
                let states: Vec<(String, String, CopyState)> = listed
                    .iter()
                    .map(|meta| {
                        let (namespace, name) = (
                            meta.namespace.clone().unwrap_or_default(),
                            meta.name.clone().unwrap_or_default(),
                        );
                        (namespace, name, CopyState::new(meta, &Payload::default()))
                    })
                    .filter(|(_, _, copy)| labels.marks(copy) && copy.deletable_by(uid))
                    .collect();
                changes.extend(on_rule_deleted(
                    kind,
                    &labels.current,
                    policy,
                    states.iter().map(|(namespace, name, copy)| (namespace.as_str(), name.as_str(), copy)),
                ));
                match next {
                    Some(token) => page = page.continue_token(&token),
                    None => break,
                }
            }
        }
        Ok(changes)
    }

    /// Deletes copies whose rule no longer exists: left behind when a rule's finalizer
    /// was removed by hand, or kopper was uninstalled and reinstalled in between. Such a
    /// rule's share of the rule gauges goes too, as its cleanup never ran. Deletes too the
    /// copies tenants' syncs (ConfigMapSync, SecretSync) no longer in force (orphans, and
    /// those of rules kept while refused) left where their tenant may no longer write.
    pub async fn collect_orphans(&self, ctx: &Context) {
        let ids = self.router.rules.all_ids();
        let live: HashSet<(&str, String)> =
            ids.iter().map(|id| (controller_of(id.kind), id.to_string())).collect();
        ctx.metrics.retain_rule_gauges(|controller, rule| live.contains(&(controller, rule.to_owned())));
        let rules: HashSet<String> = ids.iter().map(RuleId::label_value).collect();
        let mut changes = self.copies_where(|copy| is_orphan(copy, &rules));
        let withdrawn = self.without_consent(ctx, &self.router.rules.parsed().kept, None);
        if changes.is_empty() && withdrawn.is_empty() {
            return;
        }
        tracing::info!(
            copies = changes.len(),
            without_consent = withdrawn.len(),
            "deleting copies whose rule no longer exists, and copies of tenants' syncs not in force whose \
             destination no longer consents"
        );
        changes.extend(withdrawn);
        let failed = self.delete_copies(ctx, RULE_CONTROLLER, &changes).await;
        if let Some(error) = failed.first() {
            tracing::warn!(%error, failed = failed.len(), "could not delete every orphaned copy");
        }
    }

    /// Deletes the copies tenants' syncs not in force left in `namespaces` where their tenant
    /// may no longer write (see [`copies_without_consent`]): run as namespace changes are
    /// served, so withdrawing consent removes them at once, not at the next sweep.
    pub(super) async fn remove_copies_without_consent(&self, ctx: &Context, namespaces: &[&str]) {
        let withdrawn = self.without_consent(ctx, &self.router.rules.parsed().kept, Some(namespaces));
        if withdrawn.is_empty() {
            return;
        }
        tracing::info!(copies = withdrawn.len(), "deleting copies whose destination no longer consents");
        let failed = self.delete_copies(ctx, SYNC_CONTROLLER, &withdrawn).await;
        if let Some(error) = failed.first() {
            tracing::warn!(%error, failed = failed.len(), "could not delete every copy; the sweep tries again");
        }
    }

    /// Deletions of the copies that orphans and the `kept` rules' copies are (see
    /// [`copies_without_consent`]) where their tenant may no longer write, in `only` those
    /// namespaces, or in every one.
    fn without_consent(&self, ctx: &Context, kept: &KeptRules, only: Option<&[&str]>) -> Vec<Change> {
        let policy = &ctx.settings.destinations;
        let namespaces = match only {
            None => self.namespaces(),
            Some(names) => self.namespaces_named(names),
        };
        self.caches
            .kinds()
            .into_iter()
            .flat_map(|kind| {
                let copies = self.caches.copies(kind).read();
                match only {
                    None => copies_without_consent(kind, CopyIndex::all(&copies), &namespaces, policy, kept),
                    Some(names) => {
                        let there = names.iter().flat_map(|name| CopyIndex::in_namespace(&copies, name));
                        copies_without_consent(kind, there, &namespaces, policy, kept)
                    }
                }
            })
            .collect()
    }

    /// Makes the deletions `changes`, counted as writes of `controller`; returns those that
    /// failed.
    async fn delete_copies(
        &self,
        ctx: &Context,
        controller: &'static str,
        changes: &[Change],
    ) -> Vec<WriteError> {
        if changes.is_empty() {
            return Vec::new();
        }
        let applied =
            apply::execute(&ctx.client, &ctx.settings.field_manager_for(FIELD_MANAGER_NAME), changes).await;
        applied.removed.iter().for_each(|_| ctx.metrics.wrote(controller));
        applied.failed
    }

    /// Whether any copy of either kind is one `select` picks.
    fn any_copy(&self, select: impl Fn(&CopyState) -> bool) -> bool {
        self.caches
            .kinds()
            .into_iter()
            .any(|kind| CopyIndex::all(&self.caches.copies(kind).read()).any(|(_, _, copy)| select(copy)))
    }

    /// Deletions of the copies of either kind that `select` picks (not those already going).
    fn copies_where(&self, select: impl Fn(&CopyState) -> bool) -> Vec<Change> {
        self.caches.kinds().into_iter().flat_map(|kind| self.deletions(kind, &select)).collect()
    }

    /// Deletions of the copies of `kind` that `select` picks (not those already going).
    fn deletions(&self, kind: ObjectKind, select: impl Fn(&CopyState) -> bool) -> Vec<Change> {
        let copies = self.caches.copies(kind).read();
        cleanup(kind, CopyIndex::all(&copies).filter(|(_, _, copy)| select(copy)))
    }

    /// One pass of `rule`: gathers what it depends on, then decides and writes its copies a
    /// few namespaces at a time, then removes the copies it no longer wants.
    async fn pass(&self, ctx: &Context, rule: &Rule) -> Result<PassTally, SyncError> {
        self.caches.watch_kind(rule.kind);
        self.caches.wait_for_kind(rule.kind).await?;
        let copies = self.caches.copies(rule.kind);
        if !copies.caught_up(CATCH_UP_LIMIT).await {
            tracing::debug!(rule = %rule.id, "the copy watch is behind kopper's own writes; deciding anyway");
        }
        let parsed = self.router.rules.parsed();
        let mut rules = parsed.in_force.to_vec();
        rules.retain(|other| other.id != rule.id);
        rules.push(rule.clone());
        // The source namespaces of every rule of the kind: who wins a contested copy
        // depends on the other rules' sources too.
        let source_namespaces = source_namespaces(&rules, rule.kind);
        let scopes = self.caches.scoped.for_sources(rule.kind, source_namespaces.iter().copied());
        self.caches.scoped.ensure_ready(rule.kind, scopes).await?;
        let view = self.caches.scoped.view(rule.kind);
        let namespaces = self.namespaces();
        let candidates = view.objects_in(source_namespaces.iter().copied());
        let world = World::new(&rules, &namespaces, &candidates).keeping(&parsed.kept);
        let sources = self.fetch_sources(&ctx.client, rule.kind, world.matched_sources(rule)).await?;
        let pass = RulePass::new(rule, &world, &sources);
        let mut tally = PassTally::default();
        tally.findings.sources_matched = pass.sources_matched;
        tally.findings.missing_source = rule.missing_named_source(pass.sources_matched);
        tally.findings.refused_destinations = rule.refused_destinations(&namespaces);
        tally.findings.own_namespace = rule.id.namespace.clone();
        tally.findings.shape_problems = pass.shape_problems.clone();
        if pass.sources_matched == 0 && !pass.shape_problems.iter().any(ShapeProblem::refuses_source) {
            // The source watches leave out what kopper made; its copies watch holds it.
            let made_by_kopper =
                rule.sources.name.as_deref().zip(rule.sources.namespaces.first()).is_some_and(
                    |(name, namespace)| CopyIndex::found(&copies.read(), namespace, name).is_some(),
                );
            tally.findings.shape_problems.extend(refused_named_source(rule, None, None, made_by_kopper));
        }
        let batch = namespaces_per_batch(pass.copies_per_namespace());
        for targets in pass.targets().chunks(batch) {
            let mut plan = RulePlan::default();
            {
                let map = copies.read();
                let found = |namespace: &str, name: &str| {
                    CopyIndex::found(&map, namespace, name).unwrap_or_else(|| view.found(namespace, name))
                };
                pass.plan_copies(targets, found, &copies.renderings, &mut plan);
            }
            self.apply_batch(ctx, rule, plan, &mut tally).await;
        }
        let mut plan = RulePlan::default();
        let labels = RuleLabels::of(&rule.id);
        // Copies an earlier object of the rule's name made count as the rule's own too: a
        // rule whose finalizer was removed by hand, deleted and made again (by GitOps, say).
        // Those this rule wants it has just taken over; the rest would otherwise stay, stale,
        // for as long as the name exists. Only once the API server confirms this object is
        // the current one: a cache still holding the earlier object must not delete its
        // successor's copies.
        let predecessor = |copy: &CopyState| labels.marks(copy) && !copy.deletable_by(&rule.uid);
        let with_predecessors = self.any_copy(predecessor) && self.is_current(ctx, rule).await;
        let own = |copy: &CopyState| is_own_copy(&labels, &rule.uid, with_predecessors, copy);
        {
            let map = copies.read();
            pass.stale_copies(CopyIndex::all(&map).filter(|(_, _, copy)| own(copy)), &mut plan);
        }
        // Copies of the kinds the rule copied before its spec changed.
        for kind in self.caches.kinds().into_iter().filter(|kind| *kind != rule.kind) {
            plan.changes.extend(self.deletions(kind, own));
        }
        self.apply_batch(ctx, rule, plan, &mut tally).await;
        tally.findings.conflicts.sort();
        Ok(tally)
    }

    /// Whether the API server holds `rule`'s object under its name now (not a successor).
    /// Asked once per rule object: a predecessor's copy that stays (in a namespace being
    /// deleted, held by another's finalizer) must not cost a request every pass.
    async fn is_current(&self, ctx: &Context, rule: &Rule) -> bool {
        if lock(&self.confirmed_current).contains(&rule.uid) {
            return true;
        }
        match current_uid(&ctx.client, &rule.id).await {
            Ok(uid) if uid.as_deref() == Some(rule.uid.as_str()) => {
                lock(&self.confirmed_current).insert(rule.uid.clone());
                true
            }
            Ok(_) => false,
            Err(error) => {
                tracing::debug!(%error, rule = %rule.id, "could not list the rule; its predecessor's copies wait");
                false
            }
        }
    }

    /// Makes one batch of a pass's changes and adds what happened to `tally`.
    pub(super) async fn apply_batch(
        &self,
        ctx: &Context,
        rule: &Rule,
        plan: RulePlan,
        tally: &mut PassTally,
    ) {
        let kind = rule.kind;
        let copies = self.caches.copies(kind);
        plan.writes().filter_map(Change::copy).for_each(|copy| copies.writing(copy));
        let field_manager = ctx.settings.field_manager_for(FIELD_MANAGER_NAME);
        // Of the copies only a dry-run can judge, one per content first: its answer judges the
        // others of that content (see `RenderingMemory`), so a restart costs a dry-run per
        // source, not per copy.
        let (first, later) = one_check_per_content(&plan.changes);
        let mut applied = apply::execute(&ctx.client, &field_manager, &first).await;
        for (key, desired, rendered) in &applied.renderings {
            copies.renderings.record(&key.namespace, &key.name, *desired, *rendered);
        }
        if !later.is_empty() {
            let (known, unknown): (Vec<Change>, Vec<Change>) =
                later.into_iter().partition(|change| rendering_known(&copies.renderings, change));
            for copy in known.iter().filter_map(Change::copy) {
                if let Some(rendered) = copy.rendering_check {
                    copies.renderings.record(&copy.key.namespace, &copy.key.name, copy.content, rendered);
                }
                applied.verified.insert(copy.key.clone());
            }
            let more = apply::execute(&ctx.client, &field_manager, &unknown).await;
            for (key, desired, rendered) in &more.renderings {
                copies.renderings.record(&key.namespace, &key.name, *desired, *rendered);
            }
            applied.merge(more);
        }
        applied.versions.values().for_each(|version| copies.wrote(version));
        let not_written =
            plan.writes().filter_map(Change::copy).filter(|copy| !applied.written.contains(&copy.key));
        not_written.for_each(|copy| copies.not_written(&copy.key));
        if !applied.raced.is_empty() {
            // What got there first may be kopper's own write, whose event wakes no pass, and
            // this pass's status does not count it; any other change there has an event of
            // its own that wakes the rule. For status only, so that a copy cache that lags
            // the API server (a relist of many copies) cannot keep the rule's passes running
            // back to back.
            self.router.wakers.wake_for_status(&rule.id);
        }
        for key in &applied.unmanaged {
            // Watch that name, so kopper sees the object that holds the place go.
            self.caches.scoped.watch_name(kind, &key.name, &rule.id);
        }
        let controller = controller_of(rule.id.kind);
        applied.written.iter().chain(&applied.removed).for_each(|_| ctx.metrics.wrote(controller));
        for copy in plan.writes().filter_map(Change::copy).filter(|copy| applied.written.contains(&copy.key))
        {
            tally.written_sources.insert(copy.source.uid.clone(), copy.source.resource_version.clone());
        }
        plan.hand_over.iter().for_each(|owner| self.router.wakers.wake(owner));
        tally.findings.add(&plan, &applied);
        tally.failed.extend(applied.failed);
    }

    /// Stops the scoped watches no rule needs any more (source namespaces no rule reads
    /// from, and names no rule copies), and forgets the content of sources no rule copies.
    fn retire_scoped_watches(&self) {
        let rules = self.router.rules.in_force();
        let mut needed: HashSet<(ObjectKind, Scope)> = HashSet::new();
        let mut source_names: HashSet<(ObjectKind, String)> = HashSet::new();
        let mut source_uids: HashSet<(ObjectKind, String)> = HashSet::new();
        for kind in self.caches.kinds() {
            let scopes = self.caches.scoped.for_sources(kind, source_namespaces(&rules, kind).into_iter());
            needed.extend(scopes.into_iter().map(|scope| (kind, scope)));
            // One look at each watched object, asking only the rules that read its namespace:
            // asking every rule to look at every object cost rules × objects for each pass.
            let mut readers: HashMap<&str, Vec<&Rule>> = HashMap::new();
            for rule in rules.iter().filter(|rule| rule.kind == kind) {
                for namespace in &rule.sources.namespaces {
                    readers.entry(namespace.as_str()).or_default().push(rule);
                }
            }
            let view = self.caches.scoped.view(kind);
            for object in view.objects_in(readers.keys().copied()) {
                let readers = readers.get(object.namespace.as_str()).map_or(&[][..], Vec::as_slice);
                if readers.iter().any(|rule| rule.sources.matches(&object)) {
                    source_uids.insert((kind, object.uid));
                    source_names.insert((kind, object.name));
                }
            }
        }
        let in_force: HashSet<&RuleId> = rules.iter().map(|rule| &rule.id).collect();
        self.caches.scoped.retire(
            &needed,
            |rule| in_force.contains(rule),
            |kind, name| source_names.contains(&(kind, name.to_owned())),
        );
        self.gates.retain(&self.router.rules.all_ids().into_iter().collect());
        let uids: HashSet<&str> = rules.iter().map(|rule| rule.uid.as_str()).collect();
        lock(&self.confirmed_current).retain(|uid| uids.contains(uid.as_str()));
        self.caches.memo.keep_sources(&self.caches.gauges, &source_uids);
    }

    /// Those of the namespaces `names` that exist, as the cache holds them now.
    fn namespaces_named(&self, names: &[&str]) -> BTreeMap<String, NamespaceInfo> {
        names
            .iter()
            .filter_map(|name| self.caches.namespaces.get(&ObjectRef::new(name)))
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect()
    }

    fn namespaces(&self) -> BTreeMap<String, NamespaceInfo> {
        self.caches
            .namespaces
            .state()
            .iter()
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect()
    }

    /// The content of each source, read once per version.
    pub(super) async fn fetch_sources(
        &self,
        client: &Client,
        kind: ObjectKind,
        matched: Vec<&ObjectInfo>,
    ) -> Result<HashMap<String, Source>, SyncError> {
        let memo = &self.caches.memo;
        let reads = futures::stream::iter(matched.into_iter().cloned())
            .map(|info| async move {
                if let Some(cached) = memo.cached_source(kind, &info) {
                    return Ok(Some(cached));
                }
                let fetched = read(client, kind, &info.namespace, &info.name).await?;
                if let Some(source) = &fetched {
                    memo.keep_content(kind, source.clone());
                }
                Ok(fetched)
            })
            .buffer_unordered(CONCURRENT_READS)
            .collect::<Vec<Result<Option<Source>, SyncError>>>()
            .await;
        let mut sources = HashMap::new();
        for read in reads {
            if let Some(source) = read? {
                sources.insert(source.info.uid.clone(), source);
            }
        }
        Ok(sources)
    }

    /// Records, for each source whose copies a pass wrote, how long its change took to
    /// reach its last copy.
    fn observe_latency(&self, written_sources: &HashMap<String, String>) {
        for (uid, version) in written_sources {
            if let Some(seen) = self.caches.memo.take_seen(uid, version) {
                SOURCE_TO_COPY_SECONDS.observe(seen.elapsed().as_secs_f64());
            }
        }
    }

    /// Writes the status if it changed, and an Event for each new conflict or refusal.
    async fn report<R: RuleObject>(
        &self,
        ctx: &Context,
        object: &R,
        outcome: Result<Findings, Refusal>,
    ) -> Result<(), SyncError> {
        let reference = object.object_ref(&());
        for (reason, note) in new_warnings(object, &outcome) {
            ctx.recorder.record(&reference, EventType::Warning, "Replicate", &reason, note).await;
        }
        let Some(status) = object.next_status(&outcome, Timestamp::now()) else { return Ok(()) };
        let params = PatchParams {
            field_manager: Some(ctx.settings.field_manager_for(FIELD_MANAGER_NAME)),
            ..PatchParams::default()
        };
        object
            .api(ctx.client.clone())
            .patch_status(&object.name_any(), &params, &Patch::Merge(status))
            .await
            .map(drop)
            .map_err(|source| SyncError::Status { rule: object.rule_id(), source })
    }
}

/// Warnings worth an Event: conflicts the status does not report yet, and a refusal the
/// status does not show yet. A pass that finds the same problems again sends nothing.
fn new_warnings<R: RuleObject>(object: &R, outcome: &Result<Findings, Refusal>) -> Vec<(String, String)> {
    match outcome {
        Ok(findings) => {
            let known = object.reported_conflicts();
            let mut warnings: Vec<(String, String)> = findings
                .conflicts
                .iter()
                .filter(|conflict| {
                    !known.iter().any(|k| k.namespace == conflict.namespace && k.name == conflict.name)
                })
                .take(super::rules::MAX_LISTED_CONFLICTS)
                .map(|conflict| (conflict.reason.clone(), conflict.message.clone()))
                .collect();
            // A source copied otherwise than asked, or a copy refused as an escalation, once,
            // as its Ready condition starts saying so.
            let (_, reason, message) = findings.readiness();
            if EVENT_REASONS.contains(&reason) && object.ready_reason().as_deref() != Some(reason) {
                warnings.push((reason.to_owned(), message));
            }
            warnings
        }
        Err(refusal) if object.ready_reason().as_deref() != Some(refusal.reason) => {
            vec![(refusal.reason.to_owned(), refusal.message.clone())]
        }
        Err(_) => Vec::new(),
    }
}

/// The Ready reasons of a pass that ran, worth an Event when new: a source copied otherwise
/// than its rule asks, a copy the API server refused as an escalation.
const EVENT_REASONS: [&str; 3] = ["SourceKeysMissing", "SecretTypeNeedsKeys", "EscalationRefused"];

/// `changes` split in two: all but the copies of a generic kind waiting on a dry-run whose
/// content another change before them holds too; and those.
fn one_check_per_content(changes: &[Change]) -> (Vec<Change>, Vec<Change>) {
    let mut checked = HashSet::new();
    changes.iter().cloned().partition(|change| match change.copy() {
        Some(copy) if copy.rendering_check.is_some() => checked.insert(copy.content),
        _ => true,
    })
}

/// Whether the copy `change` writes, waiting on a dry-run, is known in sync by now: its
/// rendering is what the server rendered that content as elsewhere.
fn rendering_known(renderings: &dyn Renderings, change: &Change) -> bool {
    change.copy().is_some_and(|copy| {
        copy.rendering_check.is_some_and(|in_place| {
            renderings.judge(&copy.key.namespace, &copy.key.name, copy.content, in_place) == Rendering::InSync
        })
    })
}

/// Where a cleanup looks for the copies it deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listing {
    /// The copies cache, then the API server for those the cache has not seen yet.
    FromServer,
    /// The copies cache alone.
    CacheOnly,
}

/// Where the cleanup of a refused rule looks for its copies: the API server too when the
/// refusal is new (the status shows another reason, `shown`), as the cache may have missed
/// a copy; the cache alone for a rule that stays refused, which is woken often and whose
/// copies are long gone.
fn refusal_listing(shown: Option<&str>, refusal: &Refusal) -> Listing {
    if shown == Some(refusal.reason) { Listing::CacheOnly } else { Listing::FromServer }
}

/// The names under which a pass found its copies blocked by objects kopper did not make:
/// the names whose watches it still needs, to see the blocker go.
fn blocked_names(findings: &Findings) -> BTreeSet<&str> {
    findings
        .conflicts
        .iter()
        .filter(|conflict| conflict.reason == ConflictReason::NotManagedByKopper.reason())
        .map(|conflict| conflict.name.as_str())
        .collect()
}

/// Of the deletions `listed` from the API server, those the deletions `cached` (from the
/// cache, of which those at `removed` succeeded) did not do. A cached deletion refused
/// because the copy changed since the cache saw it (a pass's last write) is listed afresh,
/// with its new version, and is done now.
fn not_yet_deleted(cached: &[Change], removed: &BTreeSet<CopyKey>, listed: Vec<Change>) -> Vec<Change> {
    let done: HashSet<(&CopyKey, Option<&str>)> =
        cached.iter().filter(|change| removed.contains(change.key())).map(deleted_copy).collect();
    listed.into_iter().filter(|change| !done.contains(&deleted_copy(change))).collect()
}

/// Namespaces decided and written per batch of a pass, for a rule that wants
/// `copies_per_namespace` copies in each: [`COPIES_PER_BATCH`] copies, one namespace at least.
fn namespaces_per_batch(copies_per_namespace: usize) -> usize {
    (COPIES_PER_BATCH / copies_per_namespace.max(1)).max(1)
}

/// Whether `copy` is one the rule labelled `labels` (whose object has uid `uid`) may delete:
/// its own, or, `with_predecessors`, one an earlier object of the rule's name made.
fn is_own_copy(labels: &RuleLabels, uid: &str, with_predecessors: bool, copy: &CopyState) -> bool {
    labels.marks(copy) && (with_predecessors || copy.deletable_by(uid))
}

/// Whether `copy` belongs to no rule that exists (`rules`, by label value): its rule
/// vanished without its finalizer running.
fn is_orphan(copy: &CopyState, rules: &HashSet<String>) -> bool {
    copy.rule.as_deref().is_some_and(|rule| !rules.contains(rule))
}

/// The copy a deletion names: its place and its uid (two objects at one place, one after
/// the other, are two copies).
fn deleted_copy(change: &Change) -> (&CopyKey, Option<&str>) {
    match change {
        Change::Delete { key, uid, .. } | Change::Orphan { key, uid, .. } => (key, Some(uid.as_str())),
        other => (other.key(), None),
    }
}

/// The uid of the rule object `rule` names, as the API server has it now; `None` if none.
/// Listed by name rather than read: kopper may list and watch rules, not get them.
async fn current_uid(client: &Client, rule: &RuleId) -> Result<Option<String>, kube::Error> {
    let by_name = ListParams::default().fields(&format!("metadata.name={}", rule.name));
    let uids: Vec<Option<String>> = match (&rule.kind, &rule.namespace) {
        (RuleKind::ReplicationRule, _) => {
            let listed = Api::<ReplicationRule>::all(client.clone()).list_metadata(&by_name).await?;
            listed.items.into_iter().map(|object| object.metadata.uid).collect()
        }
        (RuleKind::ConfigMapSync, Some(namespace)) => {
            let api = Api::<ConfigMapSync>::namespaced(client.clone(), namespace);
            api.list_metadata(&by_name).await?.items.into_iter().map(|object| object.metadata.uid).collect()
        }
        (RuleKind::SecretSync, Some(namespace)) => {
            let api = Api::<SecretSync>::namespaced(client.clone(), namespace);
            api.list_metadata(&by_name).await?.items.into_iter().map(|object| object.metadata.uid).collect()
        }
        (RuleKind::ConfigMapSync | RuleKind::SecretSync, None) => Vec::new(),
    };
    Ok(uids.into_iter().flatten().next())
}

/// One page of metadata of objects of kind `K` (described by `dynamic`), and the token of the
/// next page if any.
async fn list_page<K>(
    client: &Client,
    params: &ListParams,
    dynamic: &K::DynamicType,
) -> Result<(Vec<ObjectMeta>, Option<String>), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = Api::<K>::all_with(client.clone(), dynamic).list_metadata(params).await?;
    let next = list.metadata.continue_.filter(|token| !token.is_empty());
    Ok((list.items.into_iter().map(|object| object.metadata).collect(), next))
}

/// Writes that failed make the pass fail, so it is retried with backoff; the rest of the
/// pass (status included) has been done.
fn failures(failed: Vec<WriteError>) -> Result<Action, SyncError> {
    let count = failed.len();
    match failed.into_iter().next() {
        Some(first) => Err(SyncError::Write { count, first: Box::new(first) }),
        None => Ok(Action::await_change()),
    }
}

/// What one pass of a rule adds to the conflict, out-of-sync and not-ready gauges.
fn rule_gauges(kind: ObjectKind, tally: &PassTally) -> RuleGauges {
    let findings = &tally.findings;
    let conflicts = findings.conflicts.len();
    RuleGauges {
        kind: kind.to_string(),
        conflicts: i64::try_from(conflicts).unwrap_or(i64::MAX),
        out_of_sync: i64::try_from(findings.wanted.saturating_sub(findings.copies_in_sync))
            .unwrap_or(i64::MAX),
        // As the rule's Ready condition says.
        not_ready: findings.readiness().0 == "False",
    }
}

/// Reads one ConfigMap or Secret with its content; `None` if it is gone.
pub async fn read(
    client: &Client,
    kind: ObjectKind,
    namespace: &str,
    name: &str,
) -> Result<Option<Source>, SyncError> {
    let what = || format!("{kind} {namespace}/{name}");
    let source = match kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| SyncError::Read { what: what(), source })?
            .map(|object| {
                Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_config_map(&object))
            }),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| SyncError::Read { what: what(), source })?
            .map(|object| {
                Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_secret(&object))
            }),
        ObjectKind::Other(_) => {
            let Some(resource) = kind.api_resource() else { return Ok(None) };
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
                .get_opt(name)
                .await
                .map_err(|source| SyncError::Read { what: what(), source })?
                .map(|object| {
                    let fields = match object.data {
                        serde_json::Value::Object(fields) => fields.into_iter().collect::<Vec<_>>(),
                        _ => Vec::new(),
                    };
                    Source::new(ObjectInfo::from_meta(&object.metadata), Payload::generic(fields))
                })
        }
    };
    Ok(source)
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectMeta;

    use super::*;
    use crate::controllers::replication::types::CopyConflict;

    fn rule_with_status(status: &str) -> ReplicationRule {
        let yaml = format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: r, uid: u1}}\n\
             spec: {{kind: ConfigMap, namespaces: [src], selector: {{matchLabels: {{a: b}}}}}}\nstatus: {status}"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    fn conflict(namespace: &str, name: &str, reason: ConflictReason) -> CopyConflict {
        CopyConflict {
            namespace: namespace.into(),
            name: name.into(),
            reason: reason.reason().into(),
            message: format!("{namespace}/{name} is taken"),
        }
    }

    fn delete(namespace: &str, uid: &str) -> Change {
        let key =
            CopyKey { kind: ObjectKind::ConfigMap, namespace: namespace.into(), name: "settings".into() };
        Change::Delete { key, uid: uid.into(), seen_version: None }
    }

    /// A copy marked as made by the rule `labels` names, by the rule object of uid `rule_uid`.
    fn copy_of(labels: &RuleLabels, rule_uid: Option<&str>) -> CopyState {
        let mut annotations = std::collections::BTreeMap::new();
        if let Some(uid) = rule_uid {
            annotations.insert(
                crate::controllers::replication::model::RULE_UID_ANNOTATION.to_owned(),
                uid.to_owned(),
            );
        }
        let meta = ObjectMeta {
            uid: Some("copy".into()),
            labels: Some(
                [
                    (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                    (REPLICATED_BY_LABEL.to_owned(), labels.current.clone()),
                ]
                .into(),
            ),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        };
        CopyState::new(&meta, &Payload::default())
    }

    #[test]
    fn only_conflicts_and_a_refusal_the_status_does_not_show_yet_send_an_event() {
        let known = "{conflicts: [{namespace: a, name: settings, reason: NotManagedByKopper, message: m}]}";
        let object = rule_with_status(known);
        let findings = Findings {
            conflicts: vec![
                conflict("a", "settings", ConflictReason::NotManagedByKopper),
                conflict("b", "settings", ConflictReason::NotManagedByKopper),
            ],
            ..Findings::default()
        };
        let warnings = new_warnings(&object, &Ok(findings));
        assert_eq!(warnings, [("NotManagedByKopper".to_owned(), "b/settings is taken".to_owned())]);

        let refusal = Refusal { reason: "SourceNotAllowed", message: "no".into() };
        let refused_before = rule_with_status(
            "{conditions: [{type: Ready, status: 'False', reason: SourceNotAllowed, message: no, \
             lastTransitionTime: '2026-01-01T00:00:00Z'}]}",
        );
        assert!(new_warnings(&refused_before, &Err(refusal.clone())).is_empty(), "shown already");
        assert_eq!(new_warnings(&object, &Err(refusal)), [("SourceNotAllowed".to_owned(), "no".to_owned())]);
    }

    #[test]
    fn the_cleanup_of_a_refusal_asks_the_api_server_only_when_the_refusal_is_new() {
        let refusal = Refusal { reason: "SourceNotAllowed", message: String::new() };
        assert_eq!(refusal_listing(None, &refusal), Listing::FromServer);
        assert_eq!(refusal_listing(Some("Synced"), &refusal), Listing::FromServer);
        assert_eq!(refusal_listing(Some("SourceNotAllowed"), &refusal), Listing::CacheOnly);
    }

    #[test]
    fn only_names_blocked_by_objects_kopper_did_not_make_keep_their_watch() {
        let findings = Findings {
            conflicts: vec![
                conflict("a", "blocked", ConflictReason::NotManagedByKopper),
                conflict("b", "claimed", ConflictReason::ClaimedByOtherRule("other".into())),
            ],
            ..Findings::default()
        };
        assert_eq!(blocked_names(&findings), BTreeSet::from(["blocked"]));
    }

    #[test]
    fn a_cleanup_deletes_what_the_server_lists_and_the_cache_did_not_delete() {
        let cached = vec![delete("a", "u-a"), delete("b", "u-b")];
        let removed = BTreeSet::from([cached[0].key().clone()]);
        let listed = vec![delete("a", "u-a"), delete("b", "u-b"), delete("a", "u-a2"), delete("c", "u-c")];
        let missed = not_yet_deleted(&cached, &removed, listed);
        let missed: Vec<(&str, Option<&str>)> =
            missed.iter().map(|change| (change.key().namespace.as_str(), deleted_copy(change).1)).collect();
        assert_eq!(
            missed,
            [("b", Some("u-b")), ("a", Some("u-a2")), ("c", Some("u-c"))],
            "a failed cached deletion is tried again, a new object at a deleted place is deleted too"
        );
    }

    #[test]
    fn a_batch_holds_about_the_same_number_of_copies_whatever_a_namespace_wants() {
        assert_eq!(namespaces_per_batch(0), COPIES_PER_BATCH);
        assert_eq!(namespaces_per_batch(1), COPIES_PER_BATCH);
        assert_eq!(namespaces_per_batch(4), COPIES_PER_BATCH / 4);
        assert_eq!(namespaces_per_batch(COPIES_PER_BATCH * 3), 1, "one namespace at least");
    }

    #[test]
    fn a_predecessor_s_copies_are_the_rule_s_own_only_once_it_is_confirmed_current() {
        let labels = RuleLabels::of(&RuleId::replication_rule("r"));
        let other = RuleLabels::of(&RuleId::replication_rule("other"));
        let mine = copy_of(&labels, Some("u1"));
        let predecessor = copy_of(&labels, Some("u0"));
        let unmarked_uid = copy_of(&labels, None);
        assert!(is_own_copy(&labels, "u1", false, &mine));
        assert!(is_own_copy(&labels, "u1", false, &unmarked_uid));
        assert!(!is_own_copy(&labels, "u1", false, &predecessor));
        assert!(is_own_copy(&labels, "u1", true, &predecessor));
        assert!(!is_own_copy(&other, "u1", true, &mine), "another rule's copy is never its own");
    }

    #[test]
    fn a_copy_is_an_orphan_only_when_no_rule_of_its_label_exists() {
        let labels = RuleLabels::of(&RuleId::replication_rule("r"));
        let copy = copy_of(&labels, Some("u1"));
        assert!(is_orphan(&copy, &HashSet::new()));
        assert!(!is_orphan(&copy, &HashSet::from([labels.current.clone()])));
        let unlabelled = CopyState { rule: None, ..copy };
        assert!(!is_orphan(&unlabelled, &HashSet::new()), "no rule label: not a rule's copy to collect");
    }

    #[test]
    fn gauges_count_conflicts_copies_out_of_sync_and_readiness() {
        let tally = PassTally {
            findings: Findings {
                wanted: 5,
                copies_in_sync: 3,
                conflicts: vec![conflict("a", "settings", ConflictReason::NotManagedByKopper)],
                ..Findings::default()
            },
            ..PassTally::default()
        };
        let gauges = rule_gauges(ObjectKind::Secret, &tally);
        assert_eq!(
            gauges,
            RuleGauges { kind: "Secret".into(), conflicts: 1, out_of_sync: 2, not_ready: true }
        );
        let synced = PassTally {
            findings: Findings { wanted: 2, copies_in_sync: 2, ..Findings::default() },
            ..PassTally::default()
        };
        assert!(!rule_gauges(ObjectKind::ConfigMap, &synced).not_ready);
        assert!(failures(Vec::new()).is_ok());
    }
}
