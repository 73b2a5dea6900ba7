//! `--data-dir`: the store kept in one JSON file, so kubesim comes back after a restart with
//! its objects and resource versions, as kube-apiserver does with etcd behind it. An operator
//! can then be tested against an API server that restarts with its state.
//!
//! The whole store is written at once, to a temporary file renamed over the last snapshot, so
//! a crash leaves the previous snapshot whole. It is written every [`SAVE_INTERVAL`] while
//! something changed and on graceful shutdown; a killed kubesim loses at most the changes of
//! the last interval. Watch history is not kept: a watch from before the restart gets
//! `410 Gone` and lists again, as after a kube-apiserver restart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::registry::StorageKey;
use crate::server::Sim;
use crate::store::{State, StoredObject};

pub const SAVE_INTERVAL: Duration = Duration::from_secs(1);

const SNAPSHOT_FILE: &str = "kubesim-state.json";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Snapshot {
    /// The cluster's resource version: a restored kubesim continues from it.
    resource_version: u64,
    objects: Vec<SavedObject>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SavedObject {
    group: String,
    resource: String,
    resource_version: u64,
    /// The object as stored (its storage version).
    object: Value,
}

pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join(SNAPSHOT_FILE)
}

/// Writes the whole store to `dir`, replacing the previous snapshot atomically; returns the
/// resource version written.
pub fn save(sim: &Sim, dir: &Path) -> std::io::Result<u64> {
    let (resource_version, stored) = {
        let state = sim.lock();
        (state.resource_version(), stored_objects(&state))
    };
    let objects = stored
        .into_iter()
        .map(|(storage, stored)| SavedObject {
            group: storage.group,
            resource: storage.resource,
            resource_version: stored.resource_version,
            object: stored.value(),
        })
        .collect();
    let snapshot = Snapshot { resource_version, objects };
    std::fs::create_dir_all(dir)?;
    write_atomically(&snapshot_path(dir), &serde_json::to_vec(&snapshot)?)?;
    Ok(resource_version)
}

/// Every object, taken under the lock only as far as a reference to each.
fn stored_objects(state: &State) -> Vec<(StorageKey, Arc<StoredObject>)> {
    let mut stored = Vec::new();
    for storage in state.storages_with_objects() {
        stored.extend(state.scan(&storage, None, None).map(|(_, object)| (storage.clone(), object.clone())));
    }
    stored
}

/// A temporary file renamed over `path`: a reader, or a crash, sees the old file or the new
/// one, never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

/// Puts the snapshot in `dir` back into `state`; `false` when there is none yet (a new data
/// directory), so the caller seeds the default objects instead.
pub fn load(state: &mut State, dir: &Path) -> std::io::Result<bool> {
    let bytes = match std::fs::read(snapshot_path(dir)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let snapshot: Snapshot = serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    for saved in snapshot.objects {
        let storage = StorageKey { group: saved.group, resource: saved.resource };
        let meta = &saved.object["metadata"];
        let key = (
            meta["namespace"].as_str().unwrap_or_default().to_owned(),
            meta["name"].as_str().unwrap_or_default().to_owned(),
        );
        if crate::api::is_crd_storage(&storage) {
            crate::api::serve_crd(state, &saved.object);
        }
        state.restore(&storage, key, &saved.object, saved.resource_version);
    }
    state.restore_resource_version(snapshot.resource_version);
    Ok(true)
}

/// Saves the store every [`SAVE_INTERVAL`] while it changes, until `shutdown`; the last
/// save on shutdown is [`crate::Server::shutdown`]'s, once no request is in flight.
pub async fn run(sim: Arc<Sim>, dir: PathBuf, shutdown: CancellationToken) {
    let mut saved = None;
    let mut ticks = tokio::time::interval(SAVE_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let current = sim.lock().resource_version();
        if saved == Some(current) {
            continue;
        }
        match save(&sim, &dir) {
            Ok(written) => saved = Some(written),
            Err(e) => tracing::error!(error = %e, dir = %dir.display(), "could not save the store"),
        }
    }
}
