//! Sources' content kept between passes, bounded in bytes, and when each source change was
//! first seen, for the latency of its copies ([`Memo`]).
//!
//! A pass needs the content of the sources its rule copies; reading each source once per
//! version, not once per pass, is what keeps a fan-out to thousands of namespaces at one
//! read. Tenants decide how many sources their rules name and how large each is (up to
//! 1 MiB), so what is kept between passes is capped at [`MAX_CACHED_SOURCE_BYTES`]. A
//! source that does not fit is not kept, and is read again whenever a pass needs it. The
//! budget is shared fairly between the sources' namespaces (each a tenant's, or an admin's,
//! each one share): a source that does not fit takes room from the namespace holding the
//! most, only as long as that namespace still holds at least as much as the taker's would
//! afterwards, and only if that makes room for all of it (otherwise nothing is dropped). So
//! one tenant filling the budget with large sources never keeps another's sources out, and
//! sources are never dropped and taken back in turn: once the shares are even, what is kept
//! stays until its source changes or no rule copies it. Evicting the least recently used
//! instead would read every source of a rule whose sources outgrow the budget on every pass
//! (each pass reads them in the same order, so each evicts the next one needed). A pass
//! still holds the content of its own rule's sources while it runs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::controllers::replication::metrics::ReplicationMetrics;

use crate::controllers::replication::model::{ObjectInfo, ObjectKind, Payload, Source};

/// Bytes of source content kept between passes: an eighth of the chart's memory limit
/// (256 MiB), room for 32 sources at the API server's 1 MiB limit and thousands of the
/// usual few KiB.
pub const MAX_CACHED_SOURCE_BYTES: usize = 32 * 1024 * 1024;

/// What one cached source is counted as beyond its content: its metadata and the maps.
const ENTRY_OVERHEAD: usize = 512;

type Key = (ObjectKind, String);

/// Sources' content by kind and uid, each valid for the version it records, within a byte
/// budget shared fairly between the sources' namespaces.
pub struct SourceCache {
    budget: usize,
    entries: HashMap<Key, (Source, usize)>,
    bytes: usize,
    /// What each namespace holds: its entries, and their bytes.
    namespaces: HashMap<String, Holding>,
    /// The same bytes, ordered, so the namespace holding the most is found at once.
    by_bytes: BTreeSet<(usize, String)>,
}

#[derive(Default)]
struct Holding {
    /// Its entries by size, so the largest that may go is found at once.
    entries: BTreeSet<(usize, Key)>,
    bytes: usize,
}

impl Default for SourceCache {
    fn default() -> Self {
        Self::with_budget(MAX_CACHED_SOURCE_BYTES)
    }
}

impl SourceCache {
    pub fn with_budget(budget: usize) -> Self {
        Self {
            budget,
            entries: HashMap::new(),
            bytes: 0,
            namespaces: HashMap::new(),
            by_bytes: BTreeSet::new(),
        }
    }

    /// The cached content of `info`, if it is of the version `info` names.
    pub fn get(&self, kind: ObjectKind, info: &ObjectInfo) -> Option<Source> {
        let (source, _) = self.entries.get(&(kind, info.uid.clone()))?;
        (source.info.resource_version == info.resource_version).then(|| source.clone())
    }

    /// Keeps `source` (in place of an earlier version of it), if it fits the budget or its
    /// namespace's fair share of it.
    pub fn insert(&mut self, kind: ObjectKind, source: Source) {
        let key = (kind, source.info.uid.clone());
        self.remove(&key);
        let bytes = size_of_payload(&source.payload) + ENTRY_OVERHEAD;
        let namespace = source.info.namespace.clone();
        let Some(dropped) = self.room_for(&namespace, bytes) else { return };
        for victim in &dropped {
            self.remove(victim);
        }
        self.entries.insert(key.clone(), (source, bytes));
        self.bytes += bytes;
        self.change_holding(&namespace, |holding| {
            holding.entries.insert((bytes, key));
            holding.bytes += bytes;
        });
    }

    /// The sources to drop so that `bytes` more of `namespace` fit, changing nothing; `None`
    /// when they cannot fit without leaving a namespace holding less than `namespace` would.
    /// Each is the largest source of the namespace holding the most (after those before it
    /// are dropped) that leaves it at least what `namespace` would hold.
    fn room_for(&self, namespace: &str, bytes: usize) -> Option<Vec<Key>> {
        let mut free = self.budget.saturating_sub(self.bytes);
        let wanted = self.held_by(namespace) + bytes;
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let mut dropped = Vec::new();
        while free < bytes {
            let (richest, holds) = self.richest_after(&taken)?;
            if richest == namespace {
                return None;
            }
            let already = taken.get(richest).copied().unwrap_or(0);
            let victim = self
                .namespaces
                .get(richest)?
                .entries
                .iter()
                .rev()
                .filter(|(size, _)| holds.checked_sub(*size).is_some_and(|left| left >= wanted))
                .find(|(_, key)| !dropped.contains(key))?;
            dropped.push(victim.1.clone());
            taken.insert(richest, already + victim.0);
            free += victim.0;
        }
        Some(dropped)
    }

    /// The namespace holding the most once `taken` bytes are dropped from each, and what it
    /// would hold. Holdings are walked from the largest down, and the walk stops once none
    /// left can hold more than the best found.
    fn richest_after(&self, taken: &HashMap<&str, usize>) -> Option<(&str, usize)> {
        let mut best: Option<(&str, usize)> = None;
        for (held, namespace) in self.by_bytes.iter().rev() {
            if best.is_some_and(|(_, most)| *held <= most) {
                break;
            }
            let holds = held.saturating_sub(taken.get(namespace.as_str()).copied().unwrap_or(0));
            if best.is_none_or(|(_, most)| holds > most) {
                best = Some((namespace, holds));
            }
        }
        best
    }

    /// Bytes the sources of `namespace` take.
    fn held_by(&self, namespace: &str) -> usize {
        self.namespaces.get(namespace).map_or(0, |holding| holding.bytes)
    }

    pub fn remove(&mut self, key: &Key) {
        if let Some((source, bytes)) = self.entries.remove(key) {
            self.bytes -= bytes;
            self.change_holding(&source.info.namespace, |holding| {
                holding.entries.remove(&(bytes, key.clone()));
                holding.bytes -= bytes;
            });
        }
    }

    /// Applies `change` to what `namespace` holds, keeping the order by bytes; forgets a
    /// namespace that holds nothing.
    fn change_holding(&mut self, namespace: &str, change: impl FnOnce(&mut Holding)) {
        let holding = self.namespaces.entry(namespace.to_owned()).or_default();
        self.by_bytes.remove(&(holding.bytes, namespace.to_owned()));
        change(holding);
        if holding.entries.is_empty() {
            self.namespaces.remove(namespace);
        } else {
            self.by_bytes.insert((holding.bytes, namespace.to_owned()));
        }
    }

    /// Drops every source not in `keep`.
    pub fn retain(&mut self, keep: &HashSet<Key>) {
        let gone: Vec<Key> = self.entries.keys().filter(|key| !keep.contains(*key)).cloned().collect();
        for key in &gone {
            self.remove(key);
        }
    }

    /// Sources of `kind` held.
    pub fn count(&self, kind: ObjectKind) -> usize {
        self.entries.keys().filter(|(of, _)| *of == kind).count()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The bytes a payload's keys and values take.
fn size_of_payload(payload: &Payload) -> usize {
    let data: usize = payload.data.iter().map(|(key, value)| key.len() + value.len()).sum();
    let binary: usize = payload.binary_data.iter().map(|(key, value)| key.len() + value.0.len()).sum();
    let fields: usize = payload.fields.iter().map(|(key, value)| key.len() + value.to_string().len()).sum();
    data + binary + fields
}

/// What the engine remembers between passes, all of it rebuilt from the cluster after a
/// restart: sources' content (copies are known from their watch), when each source change
/// was seen, and conflicts per rule.
#[derive(Default)]
pub struct Memo {
    /// Source content by kind and uid, valid for the version it records, bounded in bytes.
    sources: Mutex<SourceCache>,
    /// When a source version was first seen, by uid, for the latency histogram.
    changed: Mutex<HashMap<String, (String, Instant)>>,
}

/// Every critical section below completes or changes nothing, so a poisoned lock still
/// guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Memo {
    pub fn forget(&self, kind: ObjectKind, object: &ObjectInfo) {
        lock(&self.sources).remove(&(kind, object.uid.clone()));
        lock(&self.changed).remove(&object.uid);
    }

    pub fn source_changed(&self, source: &ObjectInfo) {
        lock(&self.changed).insert(source.uid.clone(), (source.resource_version.clone(), Instant::now()));
    }

    /// Drops the content of every source no rule copies any more (its rule or the source
    /// went, or the source stopped matching), so that memory follows what is replicated now,
    /// not what was once; sets `kopper_cached_source_contents`.
    pub fn keep_sources(&self, gauges: &ReplicationMetrics, copied: &HashSet<(ObjectKind, String)>) {
        let mut sources = lock(&self.sources);
        sources.retain(copied);
        let uids: HashSet<&String> = copied.iter().map(|(_, uid)| uid).collect();
        lock(&self.changed).retain(|uid, _| uids.contains(uid));
        for kind in ObjectKind::ALL {
            let held = sources.count(kind);
            let labels = crate::runtime::metrics::KindLabels { kind: kind.to_string() };
            gauges.cached_source_contents.get_or_create(&labels).set(i64::try_from(held).unwrap_or(i64::MAX));
        }
    }

    pub fn cached_source(&self, kind: ObjectKind, info: &ObjectInfo) -> Option<Source> {
        lock(&self.sources).get(kind, info)
    }

    /// Keeps the content of `source` for the passes after this one.
    pub fn keep_content(&self, kind: ObjectKind, source: Source) {
        lock(&self.sources).insert(kind, source);
    }

    /// When the version `version` of the source with uid `uid` was first seen, if it is the
    /// one last seen; forgets it, so each version is counted once.
    pub fn take_seen(&self, uid: &str, version: &str) -> Option<Instant> {
        let mut changed = lock(&self.changed);
        if changed.get(uid).is_some_and(|(seen_version, _)| seen_version == version) {
            return changed.remove(uid).map(|(_, seen)| seen);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn source(uid: &str, version: &str, bytes: usize) -> Source {
        source_in("team-a", uid, version, bytes)
    }

    fn source_in(namespace: &str, uid: &str, version: &str, bytes: usize) -> Source {
        let info = ObjectInfo {
            namespace: namespace.into(),
            name: format!("settings-{uid}"),
            uid: uid.into(),
            resource_version: version.into(),
            ..ObjectInfo::default()
        };
        let payload =
            Payload { data: BTreeMap::from([("k".into(), "v".repeat(bytes))]), ..Payload::default() };
        Source::new(info, payload)
    }

    const KIB: usize = 1024;
    /// What a source of `KIB` bytes of data is counted as.
    const ENTRY: usize = KIB + 1 + ENTRY_OVERHEAD;

    fn held(cache: &SourceCache, uid: &str) -> bool {
        cache.get(ObjectKind::ConfigMap, &source(uid, "1", 0).info).is_some()
    }

    #[test]
    fn a_source_is_served_for_its_version_only() {
        let mut cache = SourceCache::default();
        let first = source("a", "1", 10);
        cache.insert(ObjectKind::ConfigMap, first.clone());
        assert!(cache.get(ObjectKind::ConfigMap, &first.info).is_some());
        assert!(cache.get(ObjectKind::Secret, &first.info).is_none());
        assert!(cache.get(ObjectKind::ConfigMap, &source("a", "2", 10).info).is_none());
    }

    /// A tenant naming ever more large sources cannot grow what is kept past the budget,
    /// and the sources kept first stay: a rule whose sources outgrow the budget still has
    /// most of them served from memory, pass after pass.
    #[test]
    fn content_past_the_budget_is_read_again_and_what_is_kept_stays() {
        let mut cache = SourceCache::with_budget(4 * ENTRY);
        for pass in 0..3 {
            for uid in ["a", "b", "c", "d", "e", "f"] {
                if !held(&cache, uid) {
                    cache.insert(ObjectKind::ConfigMap, source(uid, "1", KIB));
                }
                assert!(cache.bytes() <= 4 * ENTRY, "pass {pass}");
            }
        }
        assert!(["a", "b", "c", "d"].iter().all(|uid| held(&cache, uid)));
        assert!(!held(&cache, "e") && !held(&cache, "f"));
    }

    #[test]
    fn a_new_version_takes_the_place_of_the_old_and_retain_frees_what_goes() {
        let mut cache = SourceCache::with_budget(2 * ENTRY + KIB);
        cache.insert(ObjectKind::ConfigMap, source("a", "1", KIB));
        cache.insert(ObjectKind::ConfigMap, source("b", "1", KIB));
        cache.insert(ObjectKind::ConfigMap, source("a", "2", 2 * KIB));
        assert!(cache.get(ObjectKind::ConfigMap, &source("a", "2", 0).info).is_some());
        assert_eq!(cache.bytes(), ENTRY + ENTRY + KIB);
        cache.retain(&HashSet::from([(ObjectKind::ConfigMap, "b".to_owned())]));
        assert_eq!((cache.count(ObjectKind::ConfigMap), cache.bytes()), (1, ENTRY));
        cache.insert(ObjectKind::Secret, source("c", "1", KIB));
        assert_eq!((cache.count(ObjectKind::Secret), cache.bytes()), (1, 2 * ENTRY));
    }

    fn holds(cache: &SourceCache, namespace: &str, uid: &str) -> bool {
        cache.get(ObjectKind::ConfigMap, &source_in(namespace, uid, "1", 0).info).is_some()
    }

    /// How many sources `namespace` has kept.
    fn held_by(cache: &SourceCache, namespace: &str) -> usize {
        cache.namespaces.get(namespace).map_or(0, |holding| holding.entries.len())
    }

    /// A tenant who filled the whole budget gives way to another tenant's source, and cannot
    /// take the room back while it holds more than the other.
    #[test]
    fn one_namespace_filling_the_budget_never_keeps_another_s_sources_out() {
        let mut cache = SourceCache::with_budget(4 * ENTRY);
        for uid in ["a1", "a2", "a3", "a4"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", uid, "1", KIB));
        }
        assert_eq!(cache.bytes(), 4 * ENTRY, "tenant-a alone fills the budget");
        for uid in ["b1", "b2"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-b", uid, "1", KIB));
            assert!(holds(&cache, "tenant-b", uid), "{uid} is kept");
        }
        assert_eq!((held_by(&cache, "tenant-a"), held_by(&cache, "tenant-b")), (2, 2));
        // A third source of tenant-b would leave it holding more than tenant-a: not kept.
        cache.insert(ObjectKind::ConfigMap, source_in("tenant-b", "b3", "1", KIB));
        assert!(!holds(&cache, "tenant-b", "b3"));
        // Nor can tenant-a take room back from tenant-b, which holds no more than it.
        for pass in 0..3 {
            for uid in ["a1", "a2", "a3", "a4"] {
                if !holds(&cache, "tenant-a", uid) {
                    cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", uid, "1", KIB));
                }
            }
            assert_eq!((held_by(&cache, "tenant-a"), held_by(&cache, "tenant-b")), (2, 2), "pass {pass}");
            assert!(cache.bytes() <= 4 * ENTRY);
        }
    }

    /// Sources removed, replaced or dropped by `retain` leave the per-namespace accounts
    /// exactly as the entries are.
    #[test]
    fn what_each_namespace_holds_follows_its_entries() {
        let mut cache = SourceCache::with_budget(8 * ENTRY);
        cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", "a1", "1", KIB));
        cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", "a1", "2", 2 * KIB));
        cache.insert(ObjectKind::Secret, source_in("tenant-b", "b1", "1", KIB));
        cache.retain(&HashSet::from([(ObjectKind::ConfigMap, "a1".to_owned())]));
        assert_eq!(cache.namespaces.len(), 1, "tenant-b holds nothing and is forgotten");
        assert_eq!(cache.namespaces["tenant-a"].bytes, ENTRY + KIB);
        assert_eq!(cache.by_bytes.iter().collect::<Vec<_>>(), [&(ENTRY + KIB, "tenant-a".to_owned())]);
        cache.remove(&(ObjectKind::ConfigMap, "a1".to_owned()));
        assert!(cache.namespaces.is_empty() && cache.by_bytes.is_empty() && cache.bytes() == 0);
    }

    /// An insert that cannot fit drops nothing: otherwise what it dropped would fit again
    /// on the next pass, and be dropped again, pass after pass.
    #[test]
    fn a_source_that_cannot_fit_drops_nothing() {
        let mut cache = SourceCache::with_budget(10 * ENTRY);
        for uid in ["a1", "a2", "a3", "a4", "a5"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", uid, "1", KIB));
        }
        for uid in ["b1", "b2"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-b", uid, "1", KIB));
        }
        for uid in ["c1", "c2", "c3"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-c", uid, "1", KIB));
        }
        assert_eq!(cache.bytes(), 10 * ENTRY);
        let mut evicted = 0;
        for _pass in 0..5 {
            cache.insert(
                ObjectKind::ConfigMap,
                source_in("tenant-b", "b3", "1", 2 * ENTRY - ENTRY_OVERHEAD - 1),
            );
            for uid in ["a1", "a2", "a3", "a4", "a5"] {
                if !holds(&cache, "tenant-a", uid) {
                    evicted += 1;
                    cache.insert(ObjectKind::ConfigMap, source_in("tenant-a", uid, "1", KIB));
                }
            }
        }
        assert!(!holds(&cache, "tenant-b", "b3"));
        assert_eq!(evicted, 0, "tenant-a's sources evicted (and read again) for an insert that failed");
    }

    /// A small source never takes room that would leave the namespace it comes from holding
    /// less than the taker: a namespace's one large source is not dropped for it.
    #[test]
    fn a_small_source_never_leaves_the_namespace_it_takes_from_below_the_taker() {
        let mut cache = SourceCache::with_budget(6 * ENTRY);
        cache
            .insert(ObjectKind::ConfigMap, source_in("platform", "big", "1", 4 * ENTRY - ENTRY_OVERHEAD - 1));
        for uid in ["b1", "b2"] {
            cache.insert(ObjectKind::ConfigMap, source_in("tenant-b", uid, "1", KIB));
        }
        assert_eq!(cache.bytes(), 6 * ENTRY);
        cache.insert(ObjectKind::ConfigMap, source_in("tenant-b", "b3", "1", KIB));
        cache
            .insert(ObjectKind::ConfigMap, source_in("platform", "big", "1", 4 * ENTRY - ENTRY_OVERHEAD - 1));
        let platform = cache.namespaces.get("platform").map_or(0, |h| h.bytes);
        let tenant = cache.namespaces.get("tenant-b").map_or(0, |h| h.bytes);
        assert!(
            platform >= tenant,
            "platform holds {platform} B, tenant-b {tenant} B; cache {} of {} B",
            cache.bytes(),
            6 * ENTRY
        );
    }
}
