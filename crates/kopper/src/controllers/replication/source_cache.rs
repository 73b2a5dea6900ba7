//! Sources' content kept between passes, bounded in bytes.
//!
//! A pass needs the content of the sources its rule copies; reading each source once per
//! version, not once per pass, is what keeps a fan-out to thousands of namespaces at one
//! read. Tenants decide how many sources their rules name and how large each is (up to
//! 1 MiB), so what is kept between passes is capped at [`MAX_CACHED_SOURCE_BYTES`]: past
//! it, the sources least recently used are dropped and read again when a pass next needs
//! them. A pass still holds the content of its own rule's sources while it runs.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::desired::{ObjectInfo, ObjectKind, Payload, Source};

/// Bytes of source content kept between passes: a tenth of the chart's memory limit
/// (256 MiB), room for 32 sources at the API server's 1 MiB limit and thousands of the
/// usual few KiB.
pub const MAX_CACHED_SOURCE_BYTES: usize = 32 * 1024 * 1024;

/// What one cached source is counted as beyond its content: its metadata and the maps.
const ENTRY_OVERHEAD: usize = 512;

type Key = (ObjectKind, String);

/// Sources' content by kind and uid, each valid for the version it records, least recently
/// used dropped first once over its byte budget.
pub struct SourceCache {
    budget: usize,
    entries: HashMap<Key, Entry>,
    /// Keys by when they were last used, oldest first.
    by_use: BTreeMap<u64, Key>,
    bytes: usize,
    clock: u64,
}

struct Entry {
    source: Source,
    bytes: usize,
    used: u64,
}

impl Default for SourceCache {
    fn default() -> Self {
        Self::with_budget(MAX_CACHED_SOURCE_BYTES)
    }
}

impl SourceCache {
    pub fn with_budget(budget: usize) -> Self {
        Self { budget, entries: HashMap::new(), by_use: BTreeMap::new(), bytes: 0, clock: 0 }
    }

    /// The cached content of `info`, if it is of the version `info` names.
    pub fn get(&mut self, kind: ObjectKind, info: &ObjectInfo) -> Option<Source> {
        let key = (kind, info.uid.clone());
        let entry = self.entries.get(&key)?;
        if entry.source.info.resource_version != info.resource_version {
            return None;
        }
        let source = entry.source.clone();
        self.touch(&key);
        Some(source)
    }

    /// Keeps `source`, dropping the least recently used sources while over the budget (a
    /// source larger than the budget is not kept at all).
    pub fn insert(&mut self, kind: ObjectKind, source: Source) {
        let key = (kind, source.info.uid.clone());
        self.remove(&key);
        let bytes = size_of_payload(&source.payload) + ENTRY_OVERHEAD;
        if bytes > self.budget {
            return;
        }
        self.clock += 1;
        self.by_use.insert(self.clock, key.clone());
        self.entries.insert(key, Entry { source, bytes, used: self.clock });
        self.bytes += bytes;
        while self.bytes > self.budget {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.bytes -= entry.bytes;
            }
        }
    }

    pub fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.by_use.remove(&entry.used);
            self.bytes -= entry.bytes;
        }
    }

    /// Drops every source not in `keep`.
    pub fn retain(&mut self, keep: &HashSet<Key>) {
        let gone: Vec<Key> = self.entries.keys().filter(|key| !keep.contains(*key)).cloned().collect();
        gone.iter().for_each(|key| self.remove(key));
    }

    /// Sources of `kind` held.
    pub fn count(&self, kind: ObjectKind) -> usize {
        self.entries.keys().filter(|(of, _)| *of == kind).count()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn touch(&mut self, key: &Key) {
        if let Some(entry) = self.entries.get_mut(key) {
            self.by_use.remove(&entry.used);
            self.clock += 1;
            entry.used = self.clock;
            self.by_use.insert(self.clock, key.clone());
        }
    }
}

/// The bytes a payload's keys and values take.
fn size_of_payload(payload: &Payload) -> usize {
    let data: usize = payload.data.iter().map(|(key, value)| key.len() + value.len()).sum();
    let binary: usize = payload.binary_data.iter().map(|(key, value)| key.len() + value.0.len()).sum();
    data + binary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(uid: &str, version: &str, bytes: usize) -> Source {
        let info = ObjectInfo {
            namespace: "team-a".into(),
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

    #[test]
    fn a_source_is_served_for_its_version_only() {
        let mut cache = SourceCache::default();
        let first = source("a", "1", 10);
        cache.insert(ObjectKind::ConfigMap, first.clone());
        assert!(cache.get(ObjectKind::ConfigMap, &first.info).is_some());
        assert!(cache.get(ObjectKind::Secret, &first.info).is_none());
        assert!(cache.get(ObjectKind::ConfigMap, &source("a", "2", 10).info).is_none());
    }

    /// A tenant naming ever more large sources cannot grow what is kept past the budget;
    /// the sources used last stay.
    #[test]
    fn content_past_the_budget_drops_the_least_recently_used() {
        let mut cache = SourceCache::with_budget(4 * (KIB + ENTRY_OVERHEAD + 1));
        for uid in ["a", "b", "c", "d"] {
            cache.insert(ObjectKind::ConfigMap, source(uid, "1", KIB));
        }
        assert!(cache.get(ObjectKind::ConfigMap, &source("a", "1", 0).info).is_some());
        for round in 0..100 {
            cache.insert(ObjectKind::ConfigMap, source(&format!("x{round}"), "1", KIB));
            assert!(cache.bytes() <= 4 * (KIB + ENTRY_OVERHEAD + 1));
        }
        assert_eq!(cache.count(ObjectKind::ConfigMap), 4);
        assert!(cache.get(ObjectKind::ConfigMap, &source("x99", "1", 0).info).is_some());
        assert!(cache.get(ObjectKind::ConfigMap, &source("a", "1", 0).info).is_none());
    }

    #[test]
    fn a_source_larger_than_the_budget_is_not_kept() {
        let mut cache = SourceCache::with_budget(KIB);
        cache.insert(ObjectKind::ConfigMap, source("small", "1", 10));
        cache.insert(ObjectKind::ConfigMap, source("huge", "1", 2 * KIB));
        assert_eq!(cache.count(ObjectKind::ConfigMap), 1);
        assert!(cache.get(ObjectKind::ConfigMap, &source("small", "1", 0).info).is_some());
    }

    #[test]
    fn replacing_and_retaining_keep_the_byte_count_exact() {
        let mut cache = SourceCache::default();
        cache.insert(ObjectKind::ConfigMap, source("a", "1", KIB));
        cache.insert(ObjectKind::ConfigMap, source("a", "2", 2 * KIB));
        cache.insert(ObjectKind::Secret, source("b", "1", KIB));
        assert_eq!(cache.bytes(), 3 * KIB + 2 * (ENTRY_OVERHEAD + 1));
        cache.retain(&HashSet::from([(ObjectKind::Secret, "b".to_owned())]));
        assert_eq!((cache.count(ObjectKind::ConfigMap), cache.count(ObjectKind::Secret)), (0, 1));
        assert_eq!(cache.bytes(), KIB + ENTRY_OVERHEAD + 1);
    }
}
