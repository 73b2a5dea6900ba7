//! Watch streams: the initial state or the history since a resource version, then every
//! committed change that matches, with bookmarks, timeouts and `410 Gone` past the history.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::api::{ListOptions, Target};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::server::Sim;
use crate::store::{Change, ChangeType, State, StoredObject};

pub struct WatchOptions {
    pub list: ListOptions,
    /// Set for a watch on one named object.
    pub name: Option<String>,
    /// `None` starts with the current state as ADDED events.
    pub resource_version: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub metadata_only: bool,
    /// Send each object as a one-row Table (`kubectl get --watch`).
    pub table: Option<crate::table::TableRequest>,
}

/// What one watch needs to decide and encode its events.
struct Watcher {
    target: Target,
    opts: WatchOptions,
    /// Whether stored JSON can be sent as it is (no conversion, no metadata-only view).
    verbatim: bool,
}

impl Watcher {
    fn selects(&self, key: &(String, String), object: &StoredObject) -> bool {
        if self.target.namespace.as_ref().is_some_and(|ns| ns != &key.0) {
            return false;
        }
        if self.opts.name.as_ref().is_some_and(|n| n != &key.1) {
            return false;
        }
        self.opts.list.matches(&self.target.rt, key, object)
    }

    /// The event a change becomes for this watch, if any: an object that starts matching
    /// a selector is ADDED, one that stops matching is DELETED.
    fn event_for(&self, change: &Change) -> Option<&'static str> {
        if change.storage != self.target.rt.storage || change.resource_version() <= self.after() {
            return None;
        }
        let now = self.selects(&change.key, &change.object);
        let before = change.previous.as_ref().is_some_and(|p| self.selects(&change.key, p));
        match change.change {
            ChangeType::Added => now.then_some("ADDED"),
            ChangeType::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
            ChangeType::Deleted => before.then_some("DELETED"),
        }
    }

    /// The resourceVersion this watch starts after: changes up to it are not sent, even
    /// those the store makes after the watch began (one started from a version the store
    /// has not reached yet), as kube-apiserver's watch cache sends none.
    fn after(&self) -> u64 {
        match self.opts.resource_version {
            Some(rv) if !self.opts.send_initial_events => rv,
            _ => 0,
        }
    }

    fn encode(&self, kind: &str, object: &StoredObject) -> Bytes {
        if self.verbatim {
            let mut frame = Vec::with_capacity(object.json.len() + 32);
            frame.extend_from_slice(b"{\"type\":\"");
            frame.extend_from_slice(kind.as_bytes());
            frame.extend_from_slice(b"\",\"object\":");
            frame.extend_from_slice(&object.json);
            frame.extend_from_slice(b"}\n");
            return Bytes::from(frame);
        }
        let mut value = convert::from_storage(&self.target.rt, object.value());
        if self.opts.metadata_only {
            value = convert::partial_metadata(&value);
        }
        if let Some(table) = self.opts.table {
            value = crate::table::render(&self.target.rt, &value, table);
        }
        frame(kind, &value)
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let (kind, api_version) = if self.opts.metadata_only {
            ("PartialObjectMetadata".to_owned(), "meta.k8s.io/v1".to_owned())
        } else {
            (self.target.rt.kind.clone(), self.target.rt.api_version())
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        frame("BOOKMARK", &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}))
    }
}

fn frame(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// How long kube-apiserver's watch cache waits to reach a resourceVersion a list asked for
/// before it refuses it as too large.
pub const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// Waits until the store has reached `rv`, as kube-apiserver's watch cache does for a list,
/// and then refuses it: a client that lists at a version the server never reached (an API
/// server restored from an older backup, or one that lost its state) sees an error.
pub async fn wait_until_fresh(sim: &Sim, rv: u64) -> ApiResult<()> {
    let mut changes = {
        let state = sim.lock();
        if state.resource_version() >= rv {
            return Ok(());
        }
        state.subscribe()
    };
    let deadline = tokio::time::sleep(FRESHNESS_WAIT);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            change = changes.recv() => {
                if matches!(change, Err(broadcast::error::RecvError::Closed)) {
                    break;
                }
                if sim.lock().resource_version() >= rv {
                    return Ok(());
                }
            }
        }
    }
    let current = sim.lock().resource_version();
    if current >= rv { Ok(()) } else { Err(ApiError::too_large_resource_version(rv, current)) }
}

/// Starts a watch: decides its first events under the store lock (so no change falls
/// between them and the live feed), then streams from a background task.
pub async fn serve(
    sim: Arc<Sim>,
    shutdown: CancellationToken,
    target: Target,
    opts: WatchOptions,
) -> ApiResult<Response> {
    // A watch from a version the store has not reached yet is neither waited on nor refused
    // (kube-apiserver 1.32's watch cache does neither; only lists wait, then refuse it): it
    // stays quiet until changes pass that version.
    let (first, changes) = {
        let mut state = sim.lock();
        let changes = state.subscribe_to(&target.rt.storage);
        let verbatim = !opts.metadata_only
            && opts.table.is_none()
            && target.rt.view == crate::registry::View::Native
            && state.registry.by_storage(&target.rt.storage).len() == 1;
        let watcher = Watcher { target, opts, verbatim };
        let first = initial_frames(&state, &watcher);
        (first.map(|frames| (frames, watcher)), changes)
    };
    let (tx, rx) = mpsc::channel(256);
    match first {
        Err(refused) => {
            let status = refused.to_status();
            tokio::spawn(async move {
                let _ = tx.send(frame("ERROR", &status)).await;
            });
        }
        Ok((frames, watcher)) => {
            tokio::spawn(pump(sim, shutdown, watcher, frames, changes, tx));
        }
    }
    Ok(crate::http::streaming_response(rx))
}

fn initial_frames(state: &State, watcher: &Watcher) -> Result<Vec<Bytes>, ApiError> {
    let mut frames = Vec::new();
    match watcher.opts.resource_version {
        Some(rv) if !watcher.opts.send_initial_events => {
            let changes = state.changes_since(&watcher.target.rt.storage, rv).ok_or_else(|| {
                ApiError::gone(format!("too old resource version: {rv} ({})", state.resource_version()))
            })?;
            for change in changes {
                if let Some(kind) = watcher.event_for(&change) {
                    frames.push(watcher.encode(kind, &change.object));
                }
            }
        }
        _ => {
            let ns = watcher.target.namespace.as_deref();
            for (key, object) in state.list(&watcher.target.rt.storage, ns) {
                if watcher.selects(&key, &object) {
                    frames.push(watcher.encode("ADDED", &object));
                }
            }
            if watcher.opts.send_initial_events {
                frames.push(watcher.bookmark(state.resource_version(), true));
            }
        }
    }
    Ok(frames)
}

async fn pump(
    sim: Arc<Sim>,
    shutdown: CancellationToken,
    watcher: Watcher,
    first: Vec<Bytes>,
    mut changes: broadcast::Receiver<Arc<Change>>,
    tx: mpsc::Sender<Bytes>,
) {
    let _open = sim.counters.watch_opened();
    let deadline = tokio::time::sleep(watcher.opts.timeout);
    tokio::pin!(deadline);
    let mut closed = sim.faults.close_signal();
    closed.borrow_and_update();
    for chunk in first {
        if tx.send(chunk).await.is_err() {
            return;
        }
    }
    let mut bookmarks = tokio::time::interval(sim.config.bookmark_interval);
    bookmarks.tick().await;
    loop {
        let chunk = tokio::select! {
            _ = shutdown.cancelled() => return,
            // The client hung up: stop at once, not at the next event for it.
            _ = tx.closed() => return,
            _ = &mut deadline => return,
            _ = closed.changed() => return,
            _ = bookmarks.tick(), if watcher.opts.bookmarks => {
                match quiet_resource_version(&sim, &changes) {
                    Some(rv) if rv > watcher.after() => watcher.bookmark(rv, false),
                    _ => continue,
                }
            }
            change = changes.recv() => match change {
                Ok(change) => match watcher.event_for(&change) {
                    Some(kind) => watcher.encode(kind, &change.object),
                    None => continue,
                },
                // A watcher too slow for its resource's feed is closed
                // (store::WATCH_FEED_CAPACITY); the client resumes from its last resource
                // version, as after any dropped watch.
                Err(_) => return,
            },
        };
        let delay = sim.faults.watch_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if tx.send(chunk).await.is_err() {
            return;
        }
    }
}

/// The current resource version, if this watch has seen every change of its resource up to
/// it. Checked under the store lock: changes are sent while it is held, so none can slip in
/// between.
fn quiet_resource_version(sim: &Sim, changes: &broadcast::Receiver<Arc<Change>>) -> Option<u64> {
    let state = sim.lock();
    changes.is_empty().then(|| state.resource_version())
}
