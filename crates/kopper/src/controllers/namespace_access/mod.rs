//! NamespaceAccess: RoleBindings kept in every namespace a policy selects.
//!
//! Two controllers share three caches (policies, RoleBindings, and the namespaces kopper's
//! controllers share, [`crate::runtime::namespaces`]):
//! - the binding controller reconciles each Namespace against every policy. Namespaces wait
//!   for it in an admission queue ([`crate::runtime::admission`]), by name and each once,
//!   offered by namespace changes, by any change of a RoleBinding kopper did not make in the
//!   namespace and by any change the index of kopper's own bindings shows there (so edits and
//!   deletes are undone, judged from that index when it can tell, else from a fresh read; the
//!   two watches select complementary labels, so each binding's events come once), and by
//!   any policy spec change (which offers every namespace);
//! - the status controller reconciles each NamespaceAccess, computing its status from the
//!   caches and writing it only when it differs, so its own writes never start a loop.

pub mod apply;
mod cache;
pub mod desired;
pub mod diff;
pub mod matching;
pub mod names;
pub mod plan;
pub mod policy;
mod seen;
pub mod status;
pub mod template;
#[cfg(test)]
mod testing;
pub mod types;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};

use crate::runtime::admission::Admission;
use crate::runtime::cache::{Trigger, same_objects};
use crate::runtime::controller::{run_controller, run_offered_controller};
use crate::runtime::namespaces::NamespaceMeta;
use crate::runtime::watch;
use crate::runtime::{Context, ErrorCategory};
use crate::tenancy::ProtectedNamespaces;

use self::cache::Cache;
use self::desired::{CompiledPolicies, Desired, Policies, Problem, desired_bindings};
use self::seen::{BindingIndex, IndexWakes};
use self::status::{Observed, next_status, notices, report_for};
use self::template::NamespaceFacts;
pub use self::types::{NamespaceAccess, NamespaceAccessSpec, NamespaceAccessStatus};

/// Controller names, as they appear in metrics and logs.
pub const BINDING_CONTROLLER: &str = "namespace-access";
pub const STATUS_CONTROLLER: &str = "namespace-access-status";

/// A binding the API server refused is tried again this often, in case kopper was granted
/// the permission meanwhile; anything the user changes retries it at once.
const REFUSED_RETRY: Duration = Duration::from_secs(300);
/// Gathers the burst of cache events a policy change causes into one status computation.
const STATUS_DEBOUNCE: Duration = Duration::from_millis(300);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing RoleBindings in namespace {namespace}: {source}")]
    ListBindings {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Write(#[from] apply::WriteError),
    #[error("writing status of NamespaceAccess {name}: {source}")]
    WriteStatus {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Self::ListBindings { .. } => "kube_api",
            Self::Write(_) => "write",
            Self::WriteStatus { .. } => "status",
        }
    }
}

/// What both controllers read.
/// Policies are read through a guard, so one object that does not deserialize is reported
/// instead of failing every list and watch.
type GuardedPolicy = DeserializeGuard<NamespaceAccess>;

struct Shared {
    policies: Store<GuardedPolicy>,
    /// The policies as the binding controller last compiled them.
    compiled: CompiledPolicies,
    namespaces: Store<NamespaceMeta>,
    bindings: BindingIndex,
    /// Bindings the API server refused and bindings someone else made under a wanted name,
    /// per namespace, from the binding controller's last pass.
    found: Mutex<BTreeMap<String, Vec<Problem>>>,
    /// Conflicts per policy, for the metrics gauge.
    conflicts: Mutex<BTreeMap<String, i64>>,
    wake_status: Trigger,
    /// Namespaces a policy selects only by their exact name.
    protected: ProtectedNamespaces,
    /// The bindings the binding controller wrote whose event on the index's watch has not
    /// come back yet.
    own_writes: Arc<OwnWrites>,
    /// Namespaces to judge again, for the binding controller.
    index_wakes: Arc<IndexWakes>,
    /// Where namespaces wait for the binding controller, and are retried.
    admission: Admission<NamespaceMeta>,
    /// Every policy's outcome as last computed, and from what.
    last_reports: Mutex<Option<(StatusInputs, Reports)>>,
}

/// Every policy's outcome, by name.
type Reports = Arc<BTreeMap<String, status::Outcome>>;

/// What the policies' outcomes are computed from. The `Arc`s are held, so the same pointers
/// mean the same objects.
struct StatusInputs {
    policies: Arc<Policies>,
    namespaces: Vec<Arc<NamespaceMeta>>,
    bindings: u64,
    found: Vec<Problem>,
}

impl StatusInputs {
    fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.policies, &other.policies)
            && self.bindings == other.bindings
            && self.found == other.found
            && same_objects(&self.namespaces, &other.namespaces)
    }
}

/// kopper's own writes whose watch events have not come back, per namespace: such an event
/// tells the binding controller nothing new, so it does not wake the namespace for another
/// pass (a namespace's five creates would otherwise cost it a second pass, and a second
/// list when the index is still behind). The event of a write can come back before the
/// write's answer: events that come while a pass over their namespace is writing are judged
/// when it ends, against what it wrote ([`OwnWrites::end`]). A relist forgets every entry (its
/// events are not judged here), so the map holds only writes in flight.
#[derive(Default)]
struct OwnWrites(Mutex<HashMap<Box<str>, NamespaceWrites>>);

#[derive(Default)]
struct NamespaceWrites {
    /// A pass over the namespace is writing (kube never runs two at once).
    writing: bool,
    /// The name and resource version of each event that came while it was.
    early: Vec<(String, Option<String>)>,
    /// The resource version kopper wrote, by binding name, until the binding's next event.
    written: HashMap<String, String>,
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, NamespaceWrites>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A pass over `namespace` starts writing.
    fn begin(&self, namespace: &str) {
        self.lock().entry(namespace.into()).or_default().writing = true;
    }

    /// The pass over `namespace` wrote `written` (name, resource version) and ends: whether
    /// an event that came meanwhile was not of one of its writes, so the namespace must be
    /// judged again.
    fn end(&self, namespace: &str, written: Vec<(String, String)>) -> bool {
        let mut all = self.lock();
        let Some(writes) = all.get_mut(namespace) else { return false };
        writes.writing = false;
        writes.written.extend(written);
        let mut other = false;
        for (name, version) in std::mem::take(&mut writes.early) {
            let own = writes.written.get(&name).is_some_and(|own| version.as_ref() == Some(own));
            if own {
                writes.written.remove(&name);
            } else {
                other = true;
            }
        }
        if writes.written.is_empty() {
            all.remove(namespace);
        }
        other
    }

    /// Whether `binding`'s event is the echo of kopper's own last write. While a pass over its
    /// namespace writes, the event is held for [`OwnWrites::end`] to judge, and counts as one.
    fn is_echo(&self, binding: &impl ResourceExt) -> bool {
        let Some(namespace) = binding.namespace() else { return false };
        let mut all = self.lock();
        let Some(writes) = all.get_mut(namespace.as_str()) else { return false };
        if writes.writing {
            writes.early.push((binding.name_any(), binding.resource_version()));
            return true;
        }
        let echo = writes
            .written
            .remove(&binding.name_any())
            .is_some_and(|version| binding.resource_version() == Some(version));
        if writes.written.is_empty() {
            all.remove(namespace.as_str());
        }
        echo
    }

    /// The watch lists again: no event of the writes before comes back as such.
    fn forget_written(&self) {
        let mut all = self.lock();
        all.retain(|_, writes| {
            writes.written.clear();
            writes.early.clear();
            writes.writing
        });
    }
}

/// Runs both NamespaceAccess controllers until `shutdown` resolves and in-flight reconciles end.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let shutdown = shutdown.shared();
    let client = ctx.client.clone();
    let (wake_namespaces, policy_changes) = Trigger::new();
    let (wake_status, status_changes) = Trigger::new();

    let policies = Cache::spawn(
        Api::<GuardedPolicy>::all(client.clone()),
        cache::spec_changed(),
        crate::runtime::trim::keep_no_metadata_extras,
        vec![wake_namespaces, wake_status.clone()],
        (ctx.metrics.clone(), BINDING_CONTROLLER),
        shutdown.clone(),
    );
    let status_feed = ctx.namespaces.subscribe();
    let binding_feed = ctx.namespaces.subscribe();
    let index_wakes = Arc::new(IndexWakes::default());
    let own_writes = Arc::new(OwnWrites::default());
    let (bindings, bindings_task) = BindingIndex::spawn(
        client.clone(),
        wake_status.clone(),
        index_wakes.clone(),
        {
            let own_writes = own_writes.clone();
            move |event| match event {
                Event::Init => {
                    own_writes.forget_written();
                    false
                }
                Event::Apply(binding) => own_writes.is_echo(binding),
                Event::InitApply(_) | Event::InitDone | Event::Delete(_) => false,
            }
        },
        (ctx.metrics.clone(), BINDING_CONTROLLER),
        shutdown.clone(),
    );
    // A namespace reconciled against a policy cache that is still empty would lose every
    // binding, so nothing runs before all three caches hold a full list.
    tokio::select! {
        ready = async {
            policies.wait_until_ready().await?;
            status_feed.wait_until_ready().await?;
            bindings.wait_until_ready().await?;
            anyhow::Ok(())
        } => ready?,
        () = shutdown.clone() => return Ok(()),
    }
    let admission = crate::runtime::controller::admission_for(BINDING_CONTROLLER, &ctx);
    let shared = Arc::new(Shared {
        policies: policies.store.clone(),
        compiled: CompiledPolicies::default(),
        last_reports: Mutex::default(),
        namespaces: status_feed.store(),
        bindings,
        found: Mutex::default(),
        conflicts: Mutex::default(),
        wake_status,
        protected: ctx.settings.destinations.protected.clone(),
        own_writes,
        index_wakes: index_wakes.clone(),
        admission: admission.clone(),
    });

    let namespace_reader = binding_feed.store();
    // The change of a RoleBinding kopper did not make wakes its namespace (it may free or
    // take a name a policy wants); names are all that is read. kopper's own reach the
    // controller through the index, once it holds them.
    let binding_events = watch::watcher(
        Api::<PartialObjectMeta<RoleBinding>>::all(client.clone()),
        crate::runtime::trim::tenant_objects_watch().labels(&not_managed_by_kopper()),
    )
    .default_backoff()
    .touched_objects();
    // Namespaces wait in an admission queue, not in kube's: a policy change offers every
    // namespace at once, and kube's queue keeps the room its largest backlog took.
    let offering = cache::offer_namespaces(
        admission.clone(),
        binding_feed,
        binding_events,
        index_wakes.stream(),
        policy_changes,
    );
    let (policy_reader, policy_writer) = kube::runtime::reflector::store();
    let policy_events =
        watch::watcher(Api::<GuardedPolicy>::all(client), crate::runtime::trim::tenant_objects_watch())
            .default_backoff()
            .modify(crate::runtime::trim::keep_no_metadata_extras)
            .reflect(policy_writer)
            .applied_objects();
    let status_controller = Controller::for_stream(policy_events, policy_reader)
        .with_config(
            crate::runtime::controller::cluster_scoped_config(&ctx.settings).debounce(STATUS_DEBOUNCE),
        )
        .reconcile_all_on(status_changes);

    let status_wakes = cache::wake_on_namespace_changes(status_feed, shared.wake_status.clone());
    let for_bindings = shared.clone();
    let for_status = shared;
    tokio::join!(
        async {
            tokio::select! {
                () = status_wakes => {}
                () = shutdown.clone() => {}
            }
        },
        async {
            tokio::select! {
                () = offering => {}
                () = shutdown.clone() => {}
            }
        },
        run_offered_controller(
            BINDING_CONTROLLER,
            admission,
            namespace_reader,
            ctx.clone(),
            shutdown.clone(),
            move |namespace, ctx| { reconcile_namespace(namespace, ctx, for_bindings.clone()) }
        ),
        run_controller(STATUS_CONTROLLER, status_controller, ctx, shutdown.clone(), move |policy, ctx| {
            reconcile_status(policy, ctx, for_status.clone())
        }),
    );
    futures::future::join_all([policies.task, bindings_task]).await;
    Ok(())
}

/// Makes one namespace hold exactly the bindings the policies ask for.
async fn reconcile_namespace(
    namespace: Arc<NamespaceMeta>,
    ctx: Arc<Context>,
    shared: Arc<Shared>,
) -> Result<Action, Error> {
    let name = namespace.name_any();
    if namespace.metadata.deletion_timestamp.is_some() {
        // Its bindings go with it; creating new ones would be refused anyway.
        shared.record_found(&name, Vec::new());
        return Ok(Action::await_change());
    }
    let policies = shared.compiled.of(shared.policies.state());
    let protected = shared.protected.contains(&name);
    let desired =
        desired_bindings(NamespaceFacts { name: &name, labels: namespace.labels(), protected }, &policies);
    let field_manager = ctx.settings.field_manager_for(BINDING_CONTROLLER);
    let mut writes = PassWrites::begin(&shared, &name);
    let (mut applied, conflicts) =
        match create_from_index(&name, &desired, &ctx, &shared, &field_manager, &mut writes).await {
            Some(applied) => (applied, Vec::new()),
            None => read_and_apply(&name, &desired, &ctx, &field_manager).await?,
        };
    writes.record(&ctx, &mut applied);
    drop(writes);
    let refused_any = !applied.refused.is_empty();
    shared.record_found(&name, conflicts.into_iter().chain(applied.refused).collect());
    match applied.retry {
        Some(error) => Err(error.into()),
        None => {
            if refused_any {
                shared.admission.retry_after(&ObjectRef::from_obj(namespace.as_ref()), REFUSED_RETRY);
            }
            Ok(Action::await_change())
        }
    }
}

/// Most passes (a new namespace, a restart, a policy added) only create, or write nothing:
/// kopper's index of its own bindings tells, and the namespace is not read. `None` when the
/// index cannot tell, or a create failed: the namespace must be read.
async fn create_from_index(
    namespace: &str,
    desired: &Desired,
    ctx: &Context,
    shared: &Shared,
    field_manager: &str,
    writes: &mut PassWrites<'_>,
) -> Option<apply::Applied> {
    let creates = diff::creates_from_index(namespace, desired, &shared.bindings.read())?;
    let actions = creates.into_iter().map(diff::Action::Create).collect();
    let mut applied = apply::execute(&ctx.client, field_manager, namespace, actions).await;
    if applied.retry.is_some() || !applied.refused.is_empty() {
        // A create that failed, whatever the reason, may have met a binding someone else
        // made: what the namespace holds decides what is reported, as on every pass before,
        // and its last findings stand until the read tells.
        writes.record(ctx, &mut applied);
        return None;
    }
    Some(applied)
}

/// Reads the namespace's bindings fresh and makes the changes they need; also what the pass
/// leaves alone (bindings others made under a name a policy wants).
async fn read_and_apply(
    namespace: &str,
    desired: &Desired,
    ctx: &Context,
    field_manager: &str,
) -> Result<(apply::Applied, Vec<Problem>), Error> {
    let existing = apply::list_bindings(&ctx.client, namespace)
        .await
        .map_err(|source| Error::ListBindings { namespace: namespace.to_owned(), source })?;
    let plan = diff::plan(namespace, desired, &existing);
    for conflict in &plan.conflicts {
        // Reported in the policy's status and as an Event by the status controller.
        tracing::debug!(namespace, binding = %conflict.name, policy = %conflict.policy, "left alone: not kopper's");
    }
    let applied = apply::execute(&ctx.client, field_manager, namespace, plan.actions).await;
    Ok((applied, plan.conflicts))
}

/// The writes of one pass over a namespace, from its start to its end (when this is
/// dropped, however the pass ends): their watch events wake nothing, and any other event of
/// the namespace's bindings that came meanwhile wakes it again then.
struct PassWrites<'a> {
    shared: &'a Shared,
    namespace: &'a str,
    written: Vec<(String, String)>,
}

impl<'a> PassWrites<'a> {
    fn begin(shared: &'a Shared, namespace: &'a str) -> Self {
        shared.own_writes.begin(namespace);
        Self { shared, namespace, written: Vec::new() }
    }

    /// Counts the writes of `applied` and remembers them.
    fn record(&mut self, ctx: &Context, applied: &mut apply::Applied) {
        self.written.append(&mut applied.written);
        for _ in 0..std::mem::take(&mut applied.writes) {
            ctx.metrics.wrote(BINDING_CONTROLLER);
        }
    }
}

impl Drop for PassWrites<'_> {
    fn drop(&mut self) {
        if self.shared.own_writes.end(self.namespace, std::mem::take(&mut self.written)) {
            self.shared.index_wakes.wake(self.namespace.into());
        }
    }
}

/// The label selector of every RoleBinding but kopper's own ([`seen::managed_by_kopper`]).
fn not_managed_by_kopper() -> String {
    format!("{}!={}", desired::MANAGED_BY_LABEL, desired::MANAGED_BY_VALUE)
}

/// Writes a policy's status when, and only when, it changed.
async fn reconcile_status(
    policy: Arc<GuardedPolicy>,
    ctx: Arc<Context>,
    shared: Arc<Shared>,
) -> Result<Action, Error> {
    let policy = match &policy.0 {
        Ok(policy) => policy,
        Err(unreadable) => {
            // Its status cannot be compared, so writing one could loop; an Event says why.
            let note = format!("cannot be read, its bindings are left as they are: {}", unreadable.error);
            publish(&ctx, &policy.object_ref(&()), EventType::Warning, "InvalidObject", note).await;
            return Ok(Action::await_change());
        }
    };
    let name = policy.name_any();
    let next = shared.status_of(policy);
    shared.count_conflicts(&name, next.conflict_count, &ctx);
    if policy.status.as_ref() == Some(&next) {
        return Ok(Action::await_change());
    }
    let api = Api::<NamespaceAccess>::all(ctx.client.clone());
    let patch = serde_json::json!({
        "apiVersion": NamespaceAccess::api_version(&()),
        "kind": NamespaceAccess::kind(&()),
        "status": next,
    });
    let params = PatchParams::apply(&ctx.settings.field_manager_for(BINDING_CONTROLLER)).force();
    api.patch_status(&name, &params, &Patch::Apply(&patch))
        .await
        .map_err(|source| Error::WriteStatus { name: name.clone(), source })?;
    ctx.metrics.wrote(STATUS_CONTROLLER);
    let reference = policy.object_ref(&());
    for notice in notices(policy.status.as_ref(), &next) {
        let type_ = if notice.warning { EventType::Warning } else { EventType::Normal };
        publish(&ctx, &reference, type_, &notice.reason, notice.note).await;
    }
    Ok(Action::await_change())
}

async fn publish(ctx: &Context, reference: &ObjectReference, type_: EventType, reason: &str, note: String) {
    ctx.recorder.record(reference, type_, "Reconcile", reason, note).await;
}

impl Shared {
    /// Replaces what the binding controller found in a namespace and wakes the status
    /// controller if it changed.
    fn record_found(&self, namespace: &str, found: Vec<Problem>) {
        let changed = {
            let mut all = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let previous = if found.is_empty() {
                all.remove(namespace)
            } else {
                all.insert(namespace.to_owned(), found.clone())
            };
            previous.unwrap_or_default() != found
        };
        if changed {
            self.wake_status.fire();
        }
    }

    fn status_of(&self, policy: &NamespaceAccess) -> NamespaceAccessStatus {
        let name = policy.name_any();
        let cached = self.policies.state();
        let as_cached = cached.iter().any(|other| {
            other.uid() == policy.uid() && other.resource_version() == policy.resource_version()
        });
        let outcome = if as_cached {
            let reports = self.reports(self.compiled.of(cached));
            reports.get(&name).cloned().unwrap_or_else(|| Ok(status::Report::default()))
        } else {
            // The controller's copy of this policy is newer than the cache's.
            let mut policies = cached;
            policies.retain(|other| other.uid() != policy.uid());
            policies.push(Arc::new(DeserializeGuard(Ok(policy.clone()))));
            let policies = Policies::from_store(&policies);
            let (namespaces, found) = (self.namespaces.state(), self.found_problems());
            let bindings = self.bindings.read();
            let observed = Observed {
                policies: &policies,
                namespaces: &namespaces,
                bindings: &bindings,
                found: &found,
                protected: &self.protected,
            };
            report_for(&name, &observed)
        };
        next_status(policy.status.as_ref(), policy.metadata.generation, &outcome, Timestamp::now())
    }

    /// Every policy's outcome, computed again only when what it is computed from changed: a
    /// change wakes every policy's status at once, and each would make the same pass over
    /// every namespace.
    fn reports(&self, policies: Arc<Policies>) -> Reports {
        // Taken before the index, so that no pass over every namespace holds the index while
        // it waits for another.
        let mut last = self.last_reports.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bindings = self.bindings.read();
        let inputs = StatusInputs {
            policies,
            namespaces: self.namespaces.state(),
            bindings: bindings.version(),
            found: self.found_problems(),
        };
        if let Some((computed_from, reports)) = last.as_ref()
            && computed_from.same_as(&inputs)
        {
            return reports.clone();
        }
        let observed = Observed {
            policies: &inputs.policies,
            namespaces: &inputs.namespaces,
            bindings: &bindings,
            found: &inputs.found,
            protected: &self.protected,
        };
        let reports = Arc::new(status::reports(&observed));
        *last = Some((inputs, reports.clone()));
        reports
    }

    /// What the binding controller found, in the namespaces that still exist.
    fn found_problems(&self) -> Vec<Problem> {
        let mut all = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Namespaces deleted since their last pass leave nothing behind.
        all.retain(|namespace, _| self.namespaces.get(&ObjectRef::new(namespace)).is_some());
        all.values().flatten().cloned().collect()
    }

    fn count_conflicts(&self, policy: &str, count: i32, ctx: &Context) {
        let total: i64 = {
            let mut all = self.conflicts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            all.insert(policy.to_owned(), i64::from(count));
            all.retain(|name, _| self.policies.find(|p| p.name_any() == *name).is_some() || name == policy);
            all.values().sum()
        };
        let labels = crate::runtime::metrics::ControllerLabels { controller: BINDING_CONTROLLER.to_owned() };
        ctx.metrics.conflicts.get_or_create(&labels).set(total);
    }
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectMeta;

    use super::*;

    fn event(name: &str, version: &str) -> PartialObjectMeta<RoleBinding> {
        let metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-1".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        };
        PartialObjectMeta { types: None, metadata, _phantom: std::marker::PhantomData }
    }

    #[test]
    fn only_the_echo_of_kopper_s_own_write_is_dropped_and_only_once() {
        let own = OwnWrites::default();
        own.begin("team-1");
        assert!(!own.end("team-1", vec![("a".into(), "7".into()), ("b".into(), "8".into())]));
        assert!(own.is_echo(&event("a", "7")), "the event of kopper's write");
        assert!(!own.is_echo(&event("a", "7")), "a second event of that version is not expected: it wakes");
        assert!(!own.is_echo(&event("b", "9")), "someone changed it after kopper");
        assert!(!own.is_echo(&event("b", "8")), "the entry went with the first event of the binding");
        assert!(!own.is_echo(&event("c", "1")), "not written by kopper");
        assert!(own.0.lock().unwrap().is_empty());
    }

    #[test]
    fn an_echo_that_comes_before_the_write_s_answer_wakes_nothing_and_another_event_wakes() {
        let own = OwnWrites::default();
        own.begin("team-1");
        assert!(own.is_echo(&event("a", "7")), "held until the pass ends");
        assert!(!own.end("team-1", vec![("a".into(), "7".into()), ("b".into(), "8".into())]));
        assert!(own.is_echo(&event("b", "8")));
        assert!(own.0.lock().unwrap().is_empty(), "nothing is left once every echo came back");

        own.begin("team-1");
        assert!(own.is_echo(&event("a", "9")), "held until the pass ends");
        assert!(own.end("team-1", vec![("a".into(), "10".into())]), "someone changed it before kopper wrote");
        assert!(own.is_echo(&event("a", "10")));
        own.begin("team-1");
        assert!(!own.end("team-1", Vec::new()), "a pass that wrote nothing and heard nothing");
        assert!(own.0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_relist_forgets_the_writes_whose_events_it_replaces() {
        let own = OwnWrites::default();
        own.begin("team-1");
        own.end("team-1", vec![("a".into(), "7".into())]);
        own.begin("team-2");
        own.forget_written();
        assert_eq!(own.0.lock().unwrap().len(), 1, "only the pass still writing is left");
        assert!(!own.end("team-2", Vec::new()));
        assert!(own.0.lock().unwrap().is_empty());
    }
}
