//! One pass of the engine for one rule: read what the caches cannot tell (source content,
//! copies kopper has not verified), decide with [`plan_rule`], apply, report.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client, ResourceExt};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::METRICS_NAME;
use super::apply::{self, Applied, WriteError};
use super::desired::{
    Change, CopyKey, DesiredCopy, Existing, NamespaceInfo, ObjectInfo, ObjectKind, Payload, Rule, RuleId,
    RulePlan, Source, World, cleanup, copy_template, needs_content, plan_rule,
};
use super::index::{CacheStopped, Caches, Router};
use super::rules::{Findings, Refusal, RuleObject};
use crate::runtime::{Context, ErrorCategory};

/// Reads made at once while preparing one rule's pass.
const CONCURRENT_READS: usize = 16;

/// Seconds from kopper seeing a source change to the last of its copies written.
pub static SOURCE_TO_COPY_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.005, 2.0, 14)));

/// Registers the engine's own metrics; `Metrics` is shared behind an `Arc`, so its owner
/// calls this while building the registry.
pub fn register_metrics(registry: &mut Registry) {
    registry.register(
        "replication_source_to_copy_seconds",
        "Time from a source change seen to its last copy written",
        SOURCE_TO_COPY_SECONDS.clone(),
    );
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    CacheStopped(#[from] CacheStopped),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{count} writes failed, first: {first}")]
    Write { count: usize, first: Box<WriteError> },
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
            Self::CacheStopped(_) => "cache",
            Self::Read { .. } => "kube_api",
            Self::Write { .. } => "write",
            Self::Status { .. } => "status",
        }
    }
}

/// What the engine remembers between passes, all of it rebuilt from the cluster after a
/// restart. Only sources' content is held; copies are remembered by version alone.
#[derive(Default)]
pub struct Memo {
    /// Copies known to match their marks: the resourceVersion kopper wrote or read.
    verified: Mutex<HashMap<CopyKey, String>>,
    /// Source content by kind and uid, valid for the version it records.
    sources: Mutex<HashMap<(ObjectKind, String), Source>>,
    /// When a source version was first seen, by uid, for the latency histogram.
    changed: Mutex<HashMap<String, (String, Instant)>>,
    /// Conflicts per rule, for the gauge.
    conflicts: Mutex<BTreeMap<RuleId, i64>>,
}

/// Every critical section below completes or changes nothing, so a poisoned lock still
/// guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Memo {
    pub fn forget(&self, kind: ObjectKind, object: &ObjectInfo) {
        lock(&self.verified).remove(&object.key(kind));
        lock(&self.sources).remove(&(kind, object.uid.clone()));
        lock(&self.changed).remove(&object.uid);
    }

    pub fn source_changed(&self, source: &ObjectInfo) {
        lock(&self.changed).insert(source.uid.clone(), (source.resource_version.clone(), Instant::now()));
    }

    fn verified_version(&self, key: &CopyKey) -> Option<String> {
        lock(&self.verified).get(key).cloned()
    }

    fn cached_source(&self, kind: ObjectKind, info: &ObjectInfo) -> Option<Source> {
        let sources = lock(&self.sources);
        let cached = sources.get(&(kind, info.uid.clone()))?;
        (cached.info.resource_version == info.resource_version).then(|| cached.clone())
    }

    /// Records the conflicts of `rule` and returns the total over all rules.
    fn set_conflicts(&self, rule: &RuleId, count: usize) -> i64 {
        let mut conflicts = lock(&self.conflicts);
        if count == 0 {
            conflicts.remove(rule);
        } else {
            conflicts.insert(rule.clone(), i64::try_from(count).unwrap_or(i64::MAX));
        }
        conflicts.values().sum()
    }
}

/// The caches and what routes their changes, shared by both controllers.
pub struct Engine {
    pub caches: Caches,
    pub router: Arc<Router>,
}

impl Engine {
    /// Waits for every cache's first list: a pass on a partial cache would miss copies.
    pub async fn ready(&self) -> Result<(), CacheStopped> {
        self.caches.wait_until_ready().await?;
        self.router.rules.wait_until_ready().await
    }

    /// Brings the copies of `object` in line and writes its status.
    pub async fn sync<R: RuleObject>(&self, ctx: &Context, object: &R) -> Result<Action, SyncError> {
        let rule = match object.to_rule(&ctx.settings) {
            Ok(rule) => rule,
            Err(refusal) => {
                self.report(ctx, object, Err(refusal)).await?;
                return Ok(Action::await_change());
            }
        };
        let (plan, existing) = self.plan(ctx, &rule).await?;
        let applied = apply::execute(&ctx.client, &ctx.settings.field_manager, &plan.changes).await;
        self.remember(&plan, &existing, &applied, ctx);
        plan.hand_over.iter().for_each(|owner| self.router.wakers.wake(owner));
        let total = self.router.memo.set_conflicts(&rule.id, plan.conflicts().count());
        ctx.metrics.conflicts.get_or_create(&metric_labels()).set(total);
        self.report(ctx, object, Ok(Findings::from_plan(&plan, &applied))).await?;
        failures(applied)
    }

    /// Removes every copy `object` made; runs when it is deleted.
    pub async fn cleanup(&self, ctx: &Context, id: &RuleId) -> Result<Action, SyncError> {
        let changes = self.removals(id);
        let applied = apply::execute(&ctx.client, &ctx.settings.field_manager, &changes).await;
        for key in &applied.removed {
            ctx.metrics.wrote(METRICS_NAME);
            lock(&self.router.memo.verified).remove(key);
        }
        let total = self.router.memo.set_conflicts(id, 0);
        ctx.metrics.conflicts.get_or_create(&metric_labels()).set(total);
        failures(applied)
    }

    /// Deletions of every copy `rule` made, of either kind.
    fn removals(&self, rule: &RuleId) -> Vec<Change> {
        self.caches
            .copies_of(&rule.label_value())
            .iter()
            .flat_map(|(kind, copy)| cleanup(rule, *kind, std::slice::from_ref(copy)))
            .collect()
    }

    /// Gathers what `rule` depends on and decides its pass. Also returns the objects found
    /// where its copies belong.
    async fn plan(
        &self,
        ctx: &Context,
        rule: &Rule,
    ) -> Result<(RulePlan, BTreeMap<CopyKey, Existing>), SyncError> {
        let mut rules = self.router.rules.in_force(&ctx.settings);
        rules.retain(|other| other.id != rule.id);
        rules.push(rule.clone());
        let namespaces: BTreeMap<String, NamespaceInfo> = self
            .caches
            .namespaces
            .state()
            .iter()
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect();
        let source_namespaces: BTreeSet<&str> = rules
            .iter()
            .filter(|other| other.kind == rule.kind)
            .flat_map(|other| other.sources.namespaces.iter().map(String::as_str))
            .collect();
        let candidates = self.caches.objects(rule.kind, |meta| {
            meta.namespace.as_deref().is_some_and(|namespace| source_namespaces.contains(namespace))
        });
        let world = World::new(&rules, &namespaces, &candidates);
        let sources = self.fetch_sources(&ctx.client, rule.kind, world.matched_sources(rule)).await?;
        let targets = world.target_namespaces(rule);
        let copies: Vec<DesiredCopy> = sources
            .values()
            .flat_map(|source| {
                let template = copy_template(&rule.id, rule.kind, source);
                targets.iter().map(move |namespace| template.into_namespace(namespace))
            })
            .collect();
        let existing = self.find_existing(&ctx.client, copies).await?;
        let (own, other_kind): (Vec<_>, Vec<_>) = self
            .caches
            .copies_of(&rule.id.label_value())
            .into_iter()
            .partition(|(kind, _)| *kind == rule.kind);
        let own: Vec<ObjectInfo> = own.into_iter().map(|(_, info)| info).collect();
        let mut plan = plan_rule(rule, &world, &sources, &existing, &own);
        // Copies of the kind the rule copied before its spec changed.
        plan.changes.extend(
            other_kind.iter().flat_map(|(kind, copy)| cleanup(&rule.id, *kind, std::slice::from_ref(copy))),
        );
        Ok((plan, existing))
    }

    /// The content of each source, read once per version.
    async fn fetch_sources(
        &self,
        client: &Client,
        kind: ObjectKind,
        matched: Vec<&ObjectInfo>,
    ) -> Result<HashMap<String, Source>, SyncError> {
        let memo = &self.router.memo;
        let reads = futures::stream::iter(matched.into_iter().cloned())
            .map(|info| async move {
                if let Some(cached) = memo.cached_source(kind, &info) {
                    return Ok(Some(cached));
                }
                let fetched = read(client, kind, &info.namespace, &info.name).await?;
                if let Some(source) = &fetched {
                    lock(&memo.sources).insert((kind, source.info.uid.clone()), source.clone());
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

    /// The objects where `copies` belong: from the cache when kopper verified that version,
    /// read from the server otherwise (and when kopper wrote one the cache has not seen yet).
    async fn find_existing(
        &self,
        client: &Client,
        copies: Vec<DesiredCopy>,
    ) -> Result<BTreeMap<CopyKey, Existing>, SyncError> {
        let memo = &self.router.memo;
        let lookups = futures::stream::iter(copies)
            .map(|copy| async move {
                let key = &copy.key;
                let cached = self.caches.get(key.kind, &key.namespace, &key.name);
                let verified = memo.verified_version(key);
                let found = match cached {
                    None if verified.is_none() => None,
                    Some(info)
                        if !needs_content(
                            &copy,
                            &info,
                            verified.as_deref() == Some(&info.resource_version),
                        ) =>
                    {
                        Some(Existing { info, content: None })
                    }
                    _ => read(client, key.kind, &key.namespace, &key.name).await?.map(|object| Existing {
                        info: (*object.info).clone(),
                        content: Some((*object.payload).clone()),
                    }),
                };
                Ok::<_, SyncError>(found.map(|existing| (copy.key, existing)))
            })
            .buffer_unordered(CONCURRENT_READS)
            .collect::<Vec<_>>()
            .await;
        let mut existing = BTreeMap::new();
        for lookup in lookups {
            if let Some((key, found)) = lookup? {
                existing.insert(key, found);
            }
        }
        Ok(existing)
    }

    /// Remembers the versions kopper wrote or read and found right, counts writes, and
    /// records how long each source change took to reach its copies.
    fn remember(
        &self,
        plan: &RulePlan,
        existing: &BTreeMap<CopyKey, Existing>,
        applied: &Applied,
        ctx: &Context,
    ) {
        let mut verified = lock(&self.router.memo.verified);
        for key in &plan.in_sync {
            if let Some(found) = existing.get(key).filter(|found| found.content.is_some()) {
                verified.insert(key.clone(), found.info.resource_version.clone());
            }
        }
        for (key, version) in &applied.versions {
            verified.insert(key.clone(), version.clone());
        }
        for key in &applied.removed {
            verified.remove(key);
        }
        drop(verified);
        for _ in applied.written.iter().chain(&applied.removed) {
            ctx.metrics.wrote(METRICS_NAME);
        }
        if applied.failed.is_empty() {
            self.observe_latency(plan, applied);
        }
    }

    fn observe_latency(&self, plan: &RulePlan, applied: &Applied) {
        let mut changed = lock(&self.router.memo.changed);
        for change in plan.writes() {
            let (Change::Create(copy) | Change::Update(copy)) = change else { continue };
            if !applied.written.contains(&copy.key) {
                continue;
            }
            let current = changed
                .get(&copy.source.uid)
                .is_some_and(|(version, _)| *version == copy.source.resource_version);
            if let Some((_, seen)) = current.then(|| changed.remove(&copy.source.uid)).flatten() {
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
            let event = Event {
                type_: EventType::Warning,
                reason,
                note: Some(note),
                action: "Replicate".into(),
                secondary: None,
            };
            if let Err(error) = ctx.recorder.publish(&event, &reference).await {
                tracing::warn!(%error, rule = %object.rule_id(), "could not publish an Event");
            }
        }
        let Some(status) = object.next_status(&outcome, Timestamp::now()) else { return Ok(()) };
        object
            .api(ctx.client.clone())
            .patch_status(&object.name_any(), &PatchParams::default(), &Patch::Merge(status))
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
            findings
                .conflicts
                .iter()
                .filter(|conflict| {
                    !known.iter().any(|k| k.namespace == conflict.namespace && k.name == conflict.name)
                })
                .take(super::rules::MAX_LISTED_CONFLICTS)
                .map(|conflict| (conflict.reason.clone(), conflict.message.clone()))
                .collect()
        }
        Err(refusal) if object.ready_reason().as_deref() != Some(refusal.reason) => {
            vec![(refusal.reason.to_owned(), refusal.message.clone())]
        }
        Err(_) => Vec::new(),
    }
}

/// Writes that failed make the pass fail, so it is retried with backoff; the rest of the
/// pass (status included) has been done.
fn failures(applied: Applied) -> Result<Action, SyncError> {
    let count = applied.failed.len();
    match applied.failed.into_iter().next() {
        Some(first) => Err(SyncError::Write { count, first: Box::new(first) }),
        None => Ok(Action::await_change()),
    }
}

fn metric_labels() -> crate::runtime::metrics::ControllerLabels {
    crate::runtime::metrics::ControllerLabels { controller: METRICS_NAME.to_owned() }
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
    };
    Ok(source)
}
