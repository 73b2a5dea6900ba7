//! In-memory object storage: one table per storage resource, a cluster-wide resource
//! version, a bounded history of changes per storage resource for watches to resume from,
//! and the indexes the garbage collector needs.
//!
//! Objects are kept as serialized JSON: it is what every read and watch sends, so a change
//! is serialized once however many watchers see it, and it is smaller than a parsed tree.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::registry::{Registry, StorageKey};

/// Changes a watch may fall behind its resource type's feed before it is closed (the client
/// resumes from its last resource version, as after any dropped watch). Counted per type,
/// as kube-apiserver's watch cache judges a watcher by its own resource's events: a flood
/// of pods does not close a slow namespace watch.
pub const WATCH_FEED_CAPACITY: usize = 65_536;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// An owner reference, as far as the garbage collector cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub uid: String,
    pub block_owner_deletion: bool,
}

/// One stored object: its JSON and the metadata that is looked at without parsing it.
#[derive(Debug)]
pub struct StoredObject {
    pub json: Bytes,
    pub resource_version: u64,
    pub uid: String,
    pub labels: Option<Map<String, Value>>,
    pub owners: Vec<Owner>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

impl StoredObject {
    /// Parses the stored JSON. Stored JSON was produced by serializing a `Value`, so this
    /// cannot fail short of memory corruption; an empty object is returned rather than panic.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or_else(|_| Value::Object(Map::new()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change, as watches see it.
#[derive(Debug)]
pub struct Change {
    pub storage: StorageKey,
    pub key: ObjKey,
    pub change: ChangeType,
    pub object: Arc<StoredObject>,
    /// The object before a modification, so a filtered watch can tell when it stopped or
    /// started matching.
    pub previous: Option<Arc<StoredObject>>,
}

impl Change {
    pub fn resource_version(&self) -> u64 {
        self.object.resource_version
    }
}

/// Everything kubesim stores. Guarded by one mutex in [`crate::Sim`]; every operation on it
/// is synchronous and short.
pub struct State {
    resource_version: u64,
    tables: HashMap<StorageKey, BTreeMap<ObjKey, Arc<StoredObject>>>,
    uids: HashMap<String, (StorageKey, ObjKey)>,
    dependents: HashMap<String, HashSet<(StorageKey, ObjKey)>>,
    /// Each storage resource's own history, as kube-apiserver keeps a watch cache per
    /// resource type: a flood of Events or RoleBindings does not push pods out of theirs.
    histories: HashMap<StorageKey, History>,
    history_limit: usize,
    /// The resource version no history reaches back past (a restart or a compaction).
    compacted: u64,
    pub registry: Registry,
    /// Every change, for the controllers that react to any kind (kube-controller-manager's).
    changes: broadcast::Sender<Arc<Change>>,
    /// Each watched storage resource's changes, for its watches; made by the first watch of
    /// a resource and dropped with its last.
    feeds: HashMap<StorageKey, broadcast::Sender<Arc<Change>>>,
    feed_capacity: usize,
}

impl State {
    pub fn new(history_limit: usize, changes: broadcast::Sender<Arc<Change>>) -> Self {
        Self {
            resource_version: 1,
            tables: HashMap::new(),
            uids: HashMap::new(),
            dependents: HashMap::new(),
            histories: HashMap::new(),
            history_limit: history_limit.max(1),
            compacted: 1,
            registry: Registry::with_builtins(),
            changes,
            feeds: HashMap::new(),
            feed_capacity: WATCH_FEED_CAPACITY,
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn get(&self, storage: &StorageKey, key: &ObjKey) -> Option<Arc<StoredObject>> {
        self.tables.get(storage)?.get(key).cloned()
    }

    /// Objects of a storage, in name order, optionally in one namespace.
    pub fn list(&self, storage: &StorageKey, namespace: Option<&str>) -> Vec<(ObjKey, Arc<StoredObject>)> {
        let Some(table) = self.tables.get(storage) else { return Vec::new() };
        match namespace {
            Some(ns) => table
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => table.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }

    /// The objects of a storage in key order, optionally in one namespace, starting after
    /// `after`, without copying them.
    pub fn scan<'s>(
        &'s self,
        storage: &StorageKey,
        namespace: Option<&'s str>,
        after: Option<&ObjKey>,
    ) -> impl Iterator<Item = (&'s ObjKey, &'s Arc<StoredObject>)> + 's {
        use std::ops::Bound;
        let start = match (after, namespace) {
            (Some(after), None) => Bound::Excluded(after.clone()),
            (Some(after), Some(ns)) if after.0 == ns => Bound::Excluded(after.clone()),
            (_, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.tables
            .get(storage)
            .into_iter()
            .flat_map(move |table| table.range((start.clone(), Bound::Unbounded)))
            .take_while(move |((ns, _), _)| namespace.is_none_or(|wanted| ns == wanted))
    }

    /// Number of objects in a storage, optionally in one namespace.
    pub fn count(&self, storage: &StorageKey, namespace: Option<&str>) -> usize {
        match namespace {
            Some(_) => self.list(storage, namespace).len(),
            None => self.tables.get(storage).map_or(0, BTreeMap::len),
        }
    }

    pub fn storages_with_objects(&self) -> Vec<StorageKey> {
        self.tables.iter().filter(|(_, t)| !t.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    pub fn locate_uid(&self, uid: &str) -> Option<&(StorageKey, ObjKey)> {
        self.uids.get(uid)
    }

    pub fn dependents_of(&self, uid: &str) -> Vec<(StorageKey, ObjKey)> {
        self.dependents.get(uid).map(|d| d.iter().cloned().collect()).unwrap_or_default()
    }

    /// The next resource version a write would get.
    pub fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// Stores `object` (already carrying `resourceVersion` = `rv`) and tells watchers.
    pub fn put(&mut self, storage: &StorageKey, key: ObjKey, object: &Value, rv: u64) -> Arc<StoredObject> {
        let stored = Arc::new(summarize(object, rv));
        let previous = self.tables.entry(storage.clone()).or_default().insert(key.clone(), stored.clone());
        let change = match &previous {
            Some(old) => {
                self.unindex(storage, &key, old);
                ChangeType::Modified
            }
            None => ChangeType::Added,
        };
        self.index(storage, &key, &stored);
        self.record(Change { storage: storage.clone(), key, change, object: stored.clone(), previous });
        stored
    }

    /// Removes an object; `last` is its final state, stamped with the deletion's version.
    pub fn remove(&mut self, storage: &StorageKey, key: &ObjKey, last: &Value, rv: u64) {
        let Some(old) = self.tables.get_mut(storage).and_then(|t| t.remove(key)) else { return };
        self.unindex(storage, key, &old);
        let object = Arc::new(summarize(last, rv));
        self.record(Change {
            storage: storage.clone(),
            key: key.clone(),
            change: ChangeType::Deleted,
            object,
            previous: Some(old),
        });
    }

    /// Puts back an object saved before a restart, without a change event: nobody watches
    /// yet, and the history starts after the restored state (see `restore_resource_version`).
    pub fn restore(&mut self, storage: &StorageKey, key: ObjKey, object: &Value, rv: u64) {
        let stored = Arc::new(summarize(object, rv));
        if let Some(old) = self.tables.entry(storage.clone()).or_default().insert(key.clone(), stored.clone())
        {
            self.unindex(storage, &key, &old);
        }
        self.index(storage, &key, &stored);
    }

    /// Continues from a saved resource version. Watch history starts there, so a watch from
    /// before the restart gets `410 Gone` and lists again, as after a kube-apiserver restart.
    pub fn restore_resource_version(&mut self, rv: u64) {
        self.resource_version = rv;
        self.compact();
    }

    /// Drops a whole table without events (used when a CRD's last object is gone).
    pub fn drop_table(&mut self, storage: &StorageKey) {
        self.tables.remove(storage);
    }

    fn index(&mut self, storage: &StorageKey, key: &ObjKey, stored: &StoredObject) {
        self.uids.insert(stored.uid.clone(), (storage.clone(), key.clone()));
        for owner in &stored.owners {
            self.dependents.entry(owner.uid.clone()).or_default().insert((storage.clone(), key.clone()));
        }
    }

    fn unindex(&mut self, storage: &StorageKey, key: &ObjKey, stored: &StoredObject) {
        self.uids.remove(&stored.uid);
        for owner in &stored.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(&(storage.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        let history = self.histories.entry(change.storage.clone()).or_default();
        history.push(change.clone(), self.history_limit);
        if let Some(feed) = self.feeds.get(&change.storage)
            && feed.send(change.clone()).is_err()
        {
            // Its last watch has ended.
            self.feeds.remove(&change.storage);
        }
        // No receivers is fine: nobody is watching.
        let _ = self.changes.send(change);
    }

    /// Changes to `storage` after `since`, or `None` when its history no longer reaches back
    /// that far.
    pub fn changes_since(&self, storage: &StorageKey, since: u64) -> Option<Vec<Arc<Change>>> {
        let history = self.histories.get(storage);
        let floor = history.map_or(0, |h| h.floor).max(self.compacted);
        if since < floor {
            return None;
        }
        Some(history.map(|h| h.since(since)).unwrap_or_default())
    }

    /// Every change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    /// The changes of `storage` from now on, as a watch of it sees them.
    pub fn subscribe_to(&mut self, storage: &StorageKey) -> broadcast::Receiver<Arc<Change>> {
        let capacity = self.feed_capacity;
        self.feeds.entry(storage.clone()).or_insert_with(|| broadcast::channel(capacity).0).subscribe()
    }

    /// Shrinks each storage resource's history at run time (tests use it to force `410 Gone`).
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit.max(1);
        for history in self.histories.values_mut() {
            history.trim(self.history_limit);
        }
    }

    /// Forgets all history, as an etcd compaction at the current revision would.
    pub fn compact(&mut self) {
        self.histories.clear();
        self.compacted = self.resource_version;
    }
}

/// The latest changes of one storage resource, oldest first.
#[derive(Default)]
struct History {
    changes: VecDeque<Arc<Change>>,
    /// The resource version of the last change dropped: a watch from it or later misses
    /// nothing of this resource.
    floor: u64,
}

impl History {
    fn push(&mut self, change: Arc<Change>, limit: usize) {
        self.changes.push_back(change);
        self.trim(limit);
    }

    fn trim(&mut self, limit: usize) {
        while self.changes.len() > limit {
            if let Some(dropped) = self.changes.pop_front() {
                self.floor = dropped.resource_version();
            }
        }
    }

    fn since(&self, since: u64) -> Vec<Arc<Change>> {
        let start = self.changes.partition_point(|c| c.resource_version() <= since);
        self.changes.iter().skip(start).cloned().collect()
    }
}

fn summarize(object: &Value, rv: u64) -> StoredObject {
    let meta = &object["metadata"];
    let owners = meta["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some(Owner {
                        uid: r["uid"].as_str()?.to_owned(),
                        block_owner_deletion: r["blockOwnerDeletion"].as_bool().unwrap_or(false),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let finalizers = meta["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    StoredObject {
        // Serializing a `Value` cannot fail (its keys are strings).
        json: Bytes::from(serde_json::to_vec(object).unwrap_or_default()),
        resource_version: rv,
        uid: meta["uid"].as_str().unwrap_or_default().to_owned(),
        labels: meta["labels"].as_object().filter(|l| !l.is_empty()).cloned(),
        owners,
        finalizers,
        deleting: meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(limit: usize) -> State {
        State::new(limit, broadcast::channel(16).0)
    }

    fn cm() -> StorageKey {
        StorageKey { group: String::new(), resource: "configmaps".into() }
    }

    fn put(state: &mut State, ns: &str, name: &str) -> u64 {
        let rv = state.next_resource_version();
        let obj = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"), "resourceVersion": rv.to_string()}});
        state.put(&cm(), (ns.into(), name.into()), &obj, rv);
        rv
    }

    #[test]
    fn list_in_namespace_sees_only_that_namespace() {
        let mut s = state(10);
        put(&mut s, "a", "x");
        put(&mut s, "b", "x");
        put(&mut s, "ab", "y");
        let names: Vec<_> = s.list(&cm(), Some("a")).into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, vec![("a".to_owned(), "x".to_owned())]);
    }

    #[test]
    fn history_beyond_its_limit_is_gone() {
        let mut s = state(2);
        let first = put(&mut s, "a", "1");
        let second = put(&mut s, "a", "2");
        put(&mut s, "a", "3");
        assert!(s.changes_since(&cm(), first - 1).is_none(), "the first change fell out of history");
        let resumed = s.changes_since(&cm(), second - 1).unwrap();
        assert_eq!(resumed.len(), 2);
        assert_eq!(s.changes_since(&cm(), s.resource_version()).unwrap().len(), 0);
    }

    #[test]
    fn changes_of_another_resource_leave_a_history_alone() {
        let mut s = state(2);
        let first = put(&mut s, "a", "1");
        let secrets = StorageKey { group: String::new(), resource: "secrets".into() };
        for name in ["s1", "s2", "s3"] {
            let rv = s.next_resource_version();
            s.put(&secrets, ("a".into(), name.into()), &json!({"metadata": {"name": name}}), rv);
        }
        let resumed = s.changes_since(&cm(), first - 1).unwrap();
        assert_eq!(resumed.len(), 1, "the config map's change is still in its history");
        assert!(s.changes_since(&secrets, first).is_none(), "the first secret fell out of its own");
        s.compact();
        assert!(s.changes_since(&cm(), first).is_none(), "a compaction reaches every history");
        assert!(s.changes_since(&secrets, s.resource_version()).is_some());
    }

    #[test]
    fn a_watch_falls_behind_only_its_own_resource_s_changes() {
        let mut s = state(10);
        s.feed_capacity = 4;
        let secrets = StorageKey { group: String::new(), resource: "secrets".into() };
        let mut config_maps = s.subscribe_to(&cm());
        let mut secret_watch = s.subscribe_to(&secrets);
        for n in 0..10 {
            let rv = s.next_resource_version();
            s.put(&secrets, ("a".into(), format!("s{n}")), &json!({"metadata": {"name": "s"}}), rv);
        }
        put(&mut s, "a", "x");
        assert_eq!(config_maps.try_recv().unwrap().key, ("a".to_owned(), "x".to_owned()));
        assert!(matches!(secret_watch.try_recv(), Err(broadcast::error::TryRecvError::Lagged(_))));
        drop((config_maps, secret_watch));
        put(&mut s, "a", "y");
        assert!(!s.feeds.contains_key(&cm()), "a feed goes with its last watch");
    }

    #[test]
    fn dependents_are_indexed_by_owner_uid() {
        let mut s = state(10);
        let rv = s.next_resource_version();
        let obj = json!({"metadata": {"name": "d", "namespace": "a", "uid": "d1", "ownerReferences": [{"uid": "o1"}]}});
        s.put(&cm(), ("a".into(), "d".into()), &obj, rv);
        assert_eq!(s.dependents_of("o1").len(), 1);
        let rv = s.next_resource_version();
        s.remove(&cm(), &("a".into(), "d".into()), &obj, rv);
        assert!(s.dependents_of("o1").is_empty());
        assert!(s.locate_uid("d1").is_none());
    }
}
