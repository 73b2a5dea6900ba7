//! The parts of kube-controller-manager an operator depends on: the garbage collector
//! (owner references, foreground and orphan deletion), the namespace lifecycle controller,
//! the CRD cleanup that deletes a CRD's objects before the CRD itself, and the status of
//! ResourceQuotas ([`crate::quota`]).
//!
//! They react to committed changes, like their originals react to watch events, and act
//! through the same API functions a client's request goes through.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{self, DeleteOptions, Propagation, Target, WriteOptions};
use crate::registry::{ResourceType, StorageKey, View};
use crate::server::Sim;
use crate::store::{Change, ChangeType, ObjKey, State};

const MANAGER: &str = "kube-controller-manager";

pub async fn run(sim: Arc<Sim>, shutdown: CancellationToken) {
    let mut changes = sim.lock().subscribe();
    let mut lifecycle = NamespaceLifecycle::new(sim.config.namespace_deletion_delay);
    resync(&sim, &mut lifecycle);
    loop {
        let next_due = lifecycle.next_due();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            () = sleep_until(next_due) => {
                let mut state = sim.lock();
                for name in lifecycle.release_due() {
                    finish_deletion(&mut state, &mut lifecycle, &namespaces(), &(String::new(), name));
                }
            }
            change = changes.recv() => match change {
                Ok(change) => react(&mut sim.lock(), &mut lifecycle, &change),
                Err(RecvError::Lagged(_)) => resync(&sim, &mut lifecycle),
                Err(RecvError::Closed) => return,
            },
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When a terminating namespace may be emptied. A real cluster's namespace controller takes
/// seconds to get to it; `Config::namespace_deletion_delay` lets a test see that.
struct NamespaceLifecycle {
    delay: Duration,
    /// Terminating namespaces that wait for their delay to pass.
    waiting: HashMap<String, Instant>,
    /// Terminating namespaces whose contents may go.
    released: HashSet<String>,
}

impl NamespaceLifecycle {
    fn new(delay: Duration) -> Self {
        Self { delay, waiting: HashMap::new(), released: HashSet::new() }
    }

    /// Whether the contents of terminating namespace `name` may be deleted now; starts its
    /// delay the first time it is asked.
    fn may_empty(&mut self, name: &str) -> bool {
        if self.delay.is_zero() || self.released.contains(name) {
            return true;
        }
        let due = *self.waiting.entry(name.to_owned()).or_insert_with(|| Instant::now() + self.delay);
        if Instant::now() < due {
            return false;
        }
        self.waiting.remove(name);
        self.released.insert(name.to_owned());
        true
    }

    fn next_due(&self) -> Option<Instant> {
        self.waiting.values().min().copied()
    }

    /// The namespaces whose delay has passed, now released.
    fn release_due(&mut self) -> Vec<String> {
        let now = Instant::now();
        let due: Vec<String> =
            self.waiting.iter().filter(|(_, at)| **at <= now).map(|(name, _)| name.clone()).collect();
        for name in &due {
            self.waiting.remove(name);
            self.released.insert(name.clone());
        }
        due
    }

    fn forget(&mut self, name: &str) {
        self.waiting.remove(name);
        self.released.remove(name);
    }
}

/// Looks at every object again, for when changes were missed.
fn resync(sim: &Sim, lifecycle: &mut NamespaceLifecycle) {
    let mut state = sim.lock();
    for storage in state.storages_with_objects() {
        for (key, stored) in state.list(&storage, None) {
            if storage == crate::quota::resource_quotas() {
                crate::quota::refresh(&mut state, &key.0, MANAGER);
            }
            if !stored.owners.is_empty() {
                collect_if_orphaned(&mut state, &storage, &key);
            }
            if stored.deleting {
                finish_deletion(&mut state, lifecycle, &storage, &key);
            }
        }
    }
}

fn react(state: &mut State, lifecycle: &mut NamespaceLifecycle, change: &Change) {
    let object = &change.object;
    // A quota's own change, or an object coming or going that it may count.
    if change.change != ChangeType::Modified || change.storage == crate::quota::resource_quotas() {
        crate::quota::refresh(state, &change.key.0, MANAGER);
    }
    match change.change {
        ChangeType::Deleted => {
            if change.storage == namespaces() {
                lifecycle.forget(&change.key.1);
            }
            for (storage, key) in state.dependents_of(&object.uid) {
                collect_if_orphaned(state, &storage, &key);
            }
            for owner in &object.owners {
                if let Some((storage, key)) = state.locate_uid(&owner.uid).cloned() {
                    finish_deletion(state, lifecycle, &storage, &key);
                }
            }
            if !change.key.0.is_empty() {
                finish_deletion(state, lifecycle, &namespaces(), &(String::new(), change.key.0.clone()));
            }
            if let Some(crd) = crd_of(state, &change.storage) {
                finish_deletion(state, lifecycle, &crds(), &(String::new(), crd));
            }
        }
        ChangeType::Added | ChangeType::Modified => {
            if !object.owners.is_empty() {
                collect_if_orphaned(state, &change.storage, &change.key);
            }
            if object.deleting {
                finish_deletion(state, lifecycle, &change.storage, &change.key);
            }
        }
    }
}

fn namespaces() -> StorageKey {
    StorageKey { group: String::new(), resource: "namespaces".into() }
}

fn crds() -> StorageKey {
    StorageKey { group: "apiextensions.k8s.io".into(), resource: "customresourcedefinitions".into() }
}

fn crd_of(state: &State, storage: &StorageKey) -> Option<String> {
    state
        .registry
        .by_storage(storage)
        .into_iter()
        .find_map(|rt| rt.custom.as_ref().map(|c| c.crd_name.clone()))
}

/// The served type that shows a storage as stored.
fn native_type(state: &State, storage: &StorageKey) -> Option<Arc<ResourceType>> {
    state.registry.by_storage(storage).into_iter().find(|rt| rt.view == View::Native)
}

fn target(state: &State, storage: &StorageKey, key: &ObjKey) -> Option<Target> {
    let rt = native_type(state, storage)?;
    Some(Target {
        namespace: if key.0.is_empty() { None } else { Some(key.0.clone()) },
        name: Some(key.1.clone()),
        subresource: None,
        rt,
    })
}

fn write_options() -> WriteOptions {
    WriteOptions { field_manager: MANAGER.into(), ..WriteOptions::default() }
}

/// Deletes a dependent whose owners are all gone (or all waiting for their dependents to
/// go), and drops references to vanished owners from one that still has a live owner.
fn collect_if_orphaned(state: &mut State, storage: &StorageKey, key: &ObjKey) {
    let Some(stored) = state.get(storage, key) else { return };
    if stored.owners.is_empty() || stored.deleting {
        return;
    }
    let mut dangling = Vec::new();
    let mut waiting = false;
    let mut solid = false;
    for owner in &stored.owners {
        match state.locate_uid(&owner.uid).cloned().and_then(|(s, k)| state.get(&s, &k)) {
            None => dangling.push(owner.uid.clone()),
            Some(o) if o.deleting && o.finalizers.iter().any(|f| f == api::FOREGROUND_FINALIZER) => {
                waiting = true
            }
            Some(_) => solid = true,
        }
    }
    let Some(t) = target(state, storage, key) else { return };
    if !solid {
        let propagation = if waiting { Propagation::Foreground } else { Propagation::Background };
        let opts = DeleteOptions { propagation: Some(propagation), ..DeleteOptions::default() };
        log_failure(api::delete(state, &t, &opts), "delete orphaned dependent", key);
    } else if !dangling.is_empty() {
        remove_owner_references(state, &t, &dangling);
    }
}

fn remove_owner_references(state: &mut State, t: &Target, uids: &[String]) {
    let Ok(mut object) = api::get(state, t) else { return };
    let Some(refs) = object["metadata"]["ownerReferences"].as_array_mut() else { return };
    refs.retain(|r| !uids.iter().any(|u| r["uid"] == u.as_str()));
    if refs.is_empty() {
        // kube-apiserver drops the field rather than keeping an empty list.
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
    }
    log_failure(api::update(state, t, object, &write_options()), "remove owner references", &t_key(t));
}

fn t_key(t: &Target) -> ObjKey {
    (t.namespace.clone().unwrap_or_default(), t.name.clone().unwrap_or_default())
}

/// Moves a deleting object along: orphans or deletes its dependents, empties its namespace
/// or its CRD's objects, and removes the finalizer that held it once that is done.
fn finish_deletion(
    state: &mut State,
    lifecycle: &mut NamespaceLifecycle,
    storage: &StorageKey,
    key: &ObjKey,
) {
    let Some(stored) = state.get(storage, key) else { return };
    if !stored.deleting {
        return;
    }
    let Some(t) = target(state, storage, key) else { return };
    let uid = stored.uid.clone();
    if stored.finalizers.iter().any(|f| f == api::ORPHAN_FINALIZER) {
        for (dep_storage, dep_key) in state.dependents_of(&uid) {
            if let Some(dep) = target(state, &dep_storage, &dep_key) {
                remove_owner_references(state, &dep, std::slice::from_ref(&uid));
            }
        }
        remove_finalizer(state, &t, api::ORPHAN_FINALIZER);
    }
    if stored.finalizers.iter().any(|f| f == api::FOREGROUND_FINALIZER) && foreground_done(state, &uid) {
        remove_finalizer(state, &t, api::FOREGROUND_FINALIZER);
    }
    if *storage == namespaces() && lifecycle.may_empty(&key.1) {
        empty_namespace(state, &t, &key.1);
    }
    if *storage == crds() && stored.finalizers.iter().any(|f| f == api::CRD_CLEANUP_FINALIZER) {
        delete_custom_resources(state, &t);
    }
}

/// Deletes the dependents of a foreground deletion; true once none blocks the owner.
fn foreground_done(state: &mut State, uid: &str) -> bool {
    let mut blocking = false;
    for (storage, key) in state.dependents_of(uid) {
        let Some(dep) = state.get(&storage, &key) else { continue };
        if dep.owners.iter().any(|o| o.uid == uid && o.block_owner_deletion) {
            blocking = true;
        }
        if !dep.deleting {
            collect_if_orphaned(state, &storage, &key);
        }
    }
    !blocking || state.dependents_of(uid).is_empty()
}

fn remove_finalizer(state: &mut State, t: &Target, finalizer: &str) {
    let Ok(mut object) = api::get(state, t) else { return };
    if let Some(list) = object["metadata"]["finalizers"].as_array_mut() {
        list.retain(|f| f != finalizer);
    }
    log_failure(api::update(state, t, object, &write_options()), "remove finalizer", &t_key(t));
}

fn empty_namespace(state: &mut State, ns_target: &Target, ns: &str) {
    for storage in state.storages_with_objects() {
        let Some(rt) = native_type(state, &storage) else { continue };
        if !rt.namespaced {
            continue;
        }
        for (key, stored) in state.list(&storage, Some(ns)) {
            if !stored.deleting
                && let Some(t) = target(state, &storage, &key)
            {
                log_failure(
                    api::delete(state, &t, &DeleteOptions::default()),
                    "delete namespace content",
                    &key,
                );
            }
        }
    }
    // Objects held by finalizers are still there; the namespace waits for them.
    if state.storages_with_objects().iter().any(|s| state.count(s, Some(ns)) > 0) {
        return;
    }
    let Ok(mut object) = api::get(state, ns_target) else { return };
    if let Some(list) = object["spec"]["finalizers"].as_array_mut() {
        list.retain(|f| f != api::NAMESPACE_FINALIZER);
    }
    let finalize = Target { subresource: Some("finalize".into()), ..ns_target.clone() };
    log_failure(
        api::update(state, &finalize, object, &write_options()),
        "finalize namespace",
        &t_key(ns_target),
    );
}

fn delete_custom_resources(state: &mut State, crd_target: &Target) {
    let Ok(crd) = api::get(state, crd_target) else { return };
    let Some(storage) = api::crd_storage(&crd) else { return };
    for (key, stored) in state.list(&storage, None) {
        if !stored.deleting
            && let Some(t) = target(state, &storage, &key)
        {
            log_failure(api::delete(state, &t, &DeleteOptions::default()), "delete custom resource", &key);
        }
    }
    if state.count(&storage, None) == 0 {
        remove_finalizer(state, crd_target, api::CRD_CLEANUP_FINALIZER);
    }
}

fn log_failure<T>(result: Result<T, crate::error::ApiError>, what: &str, key: &ObjKey) {
    if let Err(e) = result
        && e.code != 404
    {
        tracing::warn!(namespace = %key.0, name = %key.1, error = %e.message, "{what} failed");
    }
}
