//! NamespaceAccess: RoleBindings kept in every namespace a policy selects.
//!
//! Two controllers share three caches (policies, RoleBindings, and the namespaces kopper's
//! controllers share, [`crate::runtime::namespaces`]):
//! - the binding controller reconciles each Namespace against every policy. It is woken by
//!   namespace changes, by any RoleBinding change in the namespace and by any change the
//!   index of kopper's own bindings shows there (so edits and deletes are undone, judged
//!   from that index when it can tell, else from a fresh read), and by any policy spec
//!   change (which wakes every namespace);
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

use futures::{FutureExt, TryStreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};

use crate::runtime::cache::Trigger;
use crate::runtime::controller::run_controller;
use crate::runtime::namespaces::NamespaceMeta;
use crate::runtime::watch;
use crate::runtime::{Context, ErrorCategory};
use crate::tenancy::ProtectedNamespaces;

use self::cache::Cache;
use self::desired::{Desired, Policies, Problem, desired_bindings};
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
    /// The bindings the binding controller wrote whose watch event has not come back yet,
    /// on the watch of every binding's metadata and on the index's own watch.
    own_writes: OwnWrites,
    index_echoes: Arc<OwnWrites>,
}

/// The resource version of each binding kopper just wrote, by (namespace, name), until its
/// watch event comes back: that event tells the binding controller nothing new, so it does
/// not wake the namespace for another pass (a namespace's five creates would otherwise cost
/// it a second pass and a second list). Any event for the binding takes its entry out, so
/// the map holds only writes in flight.
#[derive(Default)]
struct OwnWrites(Mutex<HashMap<(String, String), String>>);

impl OwnWrites {
    fn record(&self, namespace: &str, written: Vec<(String, String)>) {
        let mut writes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (name, version) in written {
            writes.insert((namespace.to_owned(), name), version);
        }
    }

    /// Whether `binding`'s event is the echo of kopper's own last write.
    fn is_echo(&self, binding: &impl ResourceExt) -> bool {
        let key = (binding.namespace().unwrap_or_default(), binding.name_any());
        let mut writes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        writes.remove(&key).is_some_and(|version| binding.resource_version() == Some(version))
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
    let index_echoes = Arc::new(OwnWrites::default());
    let (bindings, bindings_task) = BindingIndex::spawn(
        client.clone(),
        wake_status.clone(),
        index_wakes.clone(),
        {
            let echoes = index_echoes.clone();
            move |binding| echoes.is_echo(binding)
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
    let shared = Arc::new(Shared {
        policies: policies.store.clone(),
        namespaces: status_feed.store(),
        bindings,
        found: Mutex::default(),
        conflicts: Mutex::default(),
        wake_status,
        protected: ctx.settings.destinations.protected.clone(),
        own_writes: OwnWrites::default(),
        index_echoes,
    });

    let namespace_reader = binding_feed.store();
    let (resync_namespaces, namespace_resyncs) = Trigger::new();
    let namespace_events = cache::namespace_changes(binding_feed, resync_namespaces);
    // Any RoleBinding's change wakes its namespace (one kopper did not make may free or take
    // a name a policy wants); names are all that is read.
    let binding_events = watch::watcher(
        Api::<PartialObjectMeta<RoleBinding>>::all(client.clone()),
        crate::runtime::trim::tenant_objects_watch(),
    )
    .default_backoff()
    .touched_objects()
    .try_filter({
        let shared = shared.clone();
        move |binding| std::future::ready(!shared.own_writes.is_echo(binding))
    });
    let binding_controller = Controller::for_stream(namespace_events, namespace_reader)
        .with_config(crate::runtime::controller::cluster_scoped_config(&ctx.settings))
        .watches_stream(binding_events, |binding| {
            binding.namespace().map(|namespace| ObjectRef::<NamespaceMeta>::new(&namespace))
        })
        .reconcile_on(futures::StreamExt::map(index_wakes.stream(), |namespace| {
            ObjectRef::<NamespaceMeta>::new(&namespace)
        }))
        .reconcile_all_on(policy_changes)
        .reconcile_all_on(namespace_resyncs);
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
        run_controller(
            BINDING_CONTROLLER,
            binding_controller,
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
    let policies = Policies::from_store(&shared.policies.state());
    let protected = shared.protected.contains(&name);
    let desired =
        desired_bindings(NamespaceFacts { name: &name, labels: namespace.labels(), protected }, &policies);
    let field_manager = ctx.settings.field_manager_for(BINDING_CONTROLLER);
    let (mut applied, conflicts) =
        match create_from_index(&name, &desired, &ctx, &shared, &field_manager).await {
            Some(applied) => (applied, Vec::new()),
            None => read_and_apply(&name, &desired, &ctx, &field_manager).await?,
        };
    record_writes(&name, &ctx, &shared, &mut applied);
    let refused_any = !applied.refused.is_empty();
    shared.record_found(&name, conflicts.into_iter().chain(applied.refused).collect());
    match applied.retry {
        Some(error) => Err(error.into()),
        None if refused_any => Ok(Action::requeue(REFUSED_RETRY)),
        None => Ok(Action::await_change()),
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
) -> Option<apply::Applied> {
    let creates = diff::creates_from_index(namespace, desired, &shared.bindings.read())?;
    let actions = creates.into_iter().map(diff::Action::Create).collect();
    let mut applied = apply::execute(&ctx.client, field_manager, namespace, actions).await;
    if applied.retry.is_some() || !applied.refused.is_empty() {
        // A create that failed, whatever the reason, may have met a binding someone else
        // made: what the namespace holds decides what is reported, as on every pass before,
        // and its last findings stand until the read tells.
        record_writes(namespace, ctx, shared, &mut applied);
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

/// Counts the writes of a pass and remembers them, so their watch events wake nothing.
fn record_writes(namespace: &str, ctx: &Context, shared: &Shared, applied: &mut apply::Applied) {
    shared.index_echoes.record(namespace, applied.written.clone());
    shared.own_writes.record(namespace, std::mem::take(&mut applied.written));
    for _ in 0..std::mem::take(&mut applied.writes) {
        ctx.metrics.wrote(BINDING_CONTROLLER);
    }
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
        // The controller's copy of this policy may be newer than the cache's.
        let mut policies = self.policies.state();
        policies.retain(|cached| cached.uid() != policy.uid());
        policies.push(Arc::new(DeserializeGuard(Ok(policy.clone()))));
        let policies = Policies::from_store(&policies);
        let namespaces = self.namespaces.state();
        let bindings = self.bindings.read();
        let found: Vec<Problem> = {
            let mut all = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Namespaces deleted since their last pass leave nothing behind.
            all.retain(|namespace, _| self.namespaces.get(&ObjectRef::new(namespace)).is_some());
            all.values().flatten().cloned().collect()
        };
        let observed = Observed {
            policies: &policies,
            namespaces: &namespaces,
            bindings: &bindings,
            found: &found,
            protected: &self.protected,
        };
        let outcome = report_for(&policy.name_any(), &observed);
        next_status(policy.status.as_ref(), policy.metadata.generation, &outcome, Timestamp::now())
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
        own.record("team-1", vec![("a".into(), "7".into()), ("b".into(), "8".into())]);
        assert!(own.is_echo(&event("a", "7")), "the event of kopper's write");
        assert!(!own.is_echo(&event("a", "7")), "a second event of that version is not expected: it wakes");
        assert!(!own.is_echo(&event("b", "9")), "someone changed it after kopper");
        assert!(!own.is_echo(&event("b", "8")), "the entry went with the first event of the binding");
        assert!(!own.is_echo(&event("c", "1")), "not written by kopper");
        assert!(own.0.lock().unwrap().is_empty());
    }
}
