//! `metadata.managedFields`: decoding, encoding and the bookkeeping of non-apply writes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fields::{Comparison, FieldPath, FieldSet, PathElement, compare};
use super::{BuiltinListTypes, FieldConflict, ListTypes};

/// How a manager last wrote its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry with its field set decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ManagerEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: Option<String>,
    pub time: Option<String>,
    pub fields: FieldSet,
}

impl ManagerEntry {
    /// structured-merge-diff keys managers by name, operation and subresource, and for
    /// updates also by apiVersion; an applier keeps one entry whatever version it uses.
    pub(crate) fn is(
        &self,
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    pub(crate) fn conflict(&self, path: &[PathElement]) -> FieldConflict {
        FieldConflict {
            manager: self.manager.clone(),
            field: super::fields::path_to_string(path),
            update_api_version: (self.operation == Operation::Update).then(|| self.api_version.clone()),
            subresource: self.subresource.clone(),
        }
    }

    fn decode(entry: &Value) -> Result<ManagerEntry, String> {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::to_owned);
        let operation = match text("operation").as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version =
            text("apiVersion").filter(|v| !v.is_empty()).ok_or("apiVersion must not be empty")?;
        match text("fieldsType").as_deref() {
            Some("FieldsV1") => {}
            Some(other) => return Err(format!("invalid fieldsType {other:?} in managed fields entry")),
            None => return Err("missing fieldsType in managed fields entry".into()),
        }
        let fields = match entry.get("fieldsV1") {
            Some(fields) => FieldSet::from_fields_v1(fields)?,
            None => FieldSet::new(),
        };
        Ok(ManagerEntry {
            manager: text("manager").unwrap_or_default(),
            operation,
            api_version,
            subresource: text("subresource").filter(|s| !s.is_empty()),
            time: text("time"),
            fields,
        })
    }

    fn encode(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        });
        if let Some(time) = &self.time {
            entry["time"] = json!(time);
        }
        if let Some(subresource) = &self.subresource {
            entry["subresource"] = json!(subresource);
        }
        entry
    }
}

/// Decodes the `managedFields` of an object; an object without them has no managers.
pub(crate) fn decode_managed_fields(object: &Value) -> Result<Vec<ManagerEntry>, String> {
    match object.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(entries)) => entries.iter().map(ManagerEntry::decode).collect(),
        Some(other) => Err(format!("managedFields must be a list, got {other}")),
    }
}

/// Stores `entries` as the object's `managedFields`, dropping managers that own nothing and
/// ordering them as kube-apiserver does (appliers first, then by time, name, version).
pub(crate) fn encode_managed_fields(object: &mut Value, mut entries: Vec<ManagerEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(
            b.operation,
            &b.time,
            &b.manager,
            &b.api_version,
            &b.subresource,
        ))
    });
    let Some(metadata) = metadata_mut(object) else { return };
    if entries.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata
            .insert("managedFields".into(), Value::Array(entries.iter().map(ManagerEntry::encode).collect()));
    }
}

fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let root = object.as_object_mut()?;
    root.entry("metadata").or_insert_with(|| Value::Object(Map::new())).as_object_mut()
}

/// A copy of `object` without `metadata.managedFields`, for comparisons.
pub(crate) fn without_managed_fields(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    copy
}

/// Fields the apiserver sets itself and never attributes to a manager
/// (structured-merge-diff's strip set; these paths are removed exactly, not their children).
const UNTRACKED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
    &["metadata", "deletionTimestamp"],
    &["metadata", "deletionGracePeriodSeconds"],
];

/// `set` without the fields no manager may own.
pub(crate) fn without_untracked(set: &FieldSet) -> FieldSet {
    let untracked: FieldSet = UNTRACKED
        .iter()
        .map(|names| names.iter().map(|n| PathElement::Field((*n).to_owned())).collect::<FieldPath>())
        .collect();
    set.difference(&untracked)
}

/// List types for an object's own kind, from its `apiVersion` and `kind`.
pub(crate) fn builtin_lists_for(object: &Value) -> BuiltinListTypes {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let group = api_version.rsplit_once('/').map(|(group, _)| group).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    BuiltinListTypes::new(group, kind)
}

/// A request is clearing `managedFields` when it sends an empty list or a list of one
/// empty entry (`[]`, `[{}]`).
fn is_reset_request(object: &Value) -> bool {
    match object.pointer("/metadata/managedFields") {
        Some(Value::Array(entries)) => match entries.as_slice() {
            [] => true,
            [only] => only.as_object().is_some_and(Map::is_empty),
            _ => false,
        },
        _ => false,
    }
}

/// Records a create, update or non-apply patch by `manager` in `new.metadata.managedFields`,
/// using the built-in list types of the object's kind (see [`record_update_with`]).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let lists = builtin_lists_for(new);
    record_update_with(old, new, manager, subresource, now, &lists);
}

/// Records a non-apply write: `manager` (operation `Update`, the new object's apiVersion)
/// takes every field whose value it set or changed, those fields leave other managers'
/// sets, removed fields leave every set, and managers left with nothing are dropped. A
/// write that changes nothing leaves the entries and their times untouched.
///
/// As in kube-apiserver, `new` may carry its own `managedFields` (a client editing them
/// directly); without them, or on a subresource, `old`'s are used. `[]` or `[{}]` clears
/// them, and an existing object without managed fields stays untracked until its next
/// apply (so call this on every create, including objects the server makes itself).
pub fn record_update_with(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    lists: &dyn ListTypes,
) {
    let mut entries = entries_before_update(old, new, subresource);
    if entries.is_empty() && old.is_some() {
        if let Some(metadata) = metadata_mut(new) {
            metadata.remove("managedFields");
        }
        return;
    }
    let old_object = old.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let comparison = compare(&old_object, &without_managed_fields(new), lists);
    let writer = ManagerEntry {
        manager: manager.to_owned(),
        operation: Operation::Update,
        api_version: new.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned(),
        subresource: subresource.map(str::to_owned),
        time: Some(now.to_owned()),
        fields: FieldSet::new(),
    };
    attribute_update(&mut entries, &comparison, writer);
    cap_update_managers(&mut entries);
    encode_managed_fields(new, entries);
}

/// kube-apiserver keeps at most this many update managers per object.
const MAX_UPDATE_MANAGERS: usize = 10;

/// Where kube-apiserver merges the oldest update managers beyond the cap, per apiVersion.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Merges the oldest update managers into `ancient-changes` until at most
/// [`MAX_UPDATE_MANAGERS`] remain, as kube-apiserver does after every update: the oldest
/// manager of each apiVersion becomes the bucket once a second one of that version has to go.
fn cap_update_managers(entries: &mut Vec<ManagerEntry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == Operation::Update && !entries[i].fields.is_empty())
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|&a, &b| {
        (&entries[a].time, &entries[a].manager).cmp(&(&entries[b].time, &entries[b].manager))
    });
    let mut remaining = updaters.len();
    let mut first_of_version: BTreeMap<String, usize> = BTreeMap::new();
    let mut merged_away = BTreeSet::new();
    for index in updaters {
        if remaining <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[index].api_version.clone();
        let Some(&first) = first_of_version.get(&version) else {
            first_of_version.insert(version, index);
            continue;
        };
        let bucket = entries
            .iter()
            .position(|e| e.is(ANCIENT_CHANGES, Operation::Update, &version, None))
            .unwrap_or(first);
        if bucket == index {
            continue;
        }
        entries[bucket].manager = ANCIENT_CHANGES.to_owned();
        entries[bucket].subresource = None;
        let fields = std::mem::take(&mut entries[index].fields);
        entries[bucket].fields = entries[bucket].fields.union(&fields);
        entries[bucket].time = entries[index].time.clone();
        merged_away.insert(index);
        remaining -= 1;
    }
    let mut index = 0;
    entries.retain(|_| {
        index += 1;
        !merged_away.contains(&(index - 1))
    });
}

/// Gives `writer` the fields an update changed, taking them from everyone else, and
/// forgets removed fields. Entries left empty are dropped when encoded.
pub(crate) fn attribute_update(
    entries: &mut Vec<ManagerEntry>,
    comparison: &Comparison,
    mut writer: ManagerEntry,
) {
    let changed = without_untracked(&comparison.changed());
    for entry in entries.iter_mut() {
        entry.fields = entry.fields.difference(&changed).difference(&comparison.removed);
    }
    if changed.is_empty() {
        return;
    }
    let existing = entries.iter_mut().find(|e| {
        e.is(&writer.manager, Operation::Update, &writer.api_version, writer.subresource.as_deref())
    });
    match existing {
        Some(entry) => {
            entry.fields = entry.fields.union(&changed);
            entry.time = writer.time;
        }
        None => {
            writer.fields = changed;
            entries.push(writer);
        }
    }
}

/// The entries a non-apply write starts from; undecodable ones count as none.
fn entries_before_update(old: Option<&Value>, new: &Value, subresource: Option<&str>) -> Vec<ManagerEntry> {
    let stored = || old.and_then(|old| decode_managed_fields(old).ok()).unwrap_or_default();
    if subresource.is_some() {
        return stored();
    }
    if is_reset_request(new) {
        return Vec::new();
    }
    match decode_managed_fields(new) {
        Ok(entries) if !entries.is_empty() => entries,
        _ => stored(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";

    fn managed(object: &Value) -> Value {
        object.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null)
    }

    #[test]
    fn create_gives_the_creator_every_field_it_set() {
        let mut cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "uid": "u", "resourceVersion": "1", "labels": {"app": "x"}},
            "data": {"key": "v"},
        });
        record_update(None, &mut cm, "kubectl-create", None, T1);
        assert_eq!(
            managed(&cm),
            json!([{
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:key": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
            }])
        );
    }

    #[test]
    fn update_moves_changed_fields_to_the_writer_and_drops_empty_managers() {
        let mut old =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        record_update(None, &mut old, "first", None, T1);
        let mut new = old.clone();
        new["data"]["a"] = json!("2");
        record_update(Some(&old), &mut new, "second", None, T2);
        let entries = managed(&new);
        assert_eq!(entries.as_array().unwrap().len(), 2, "{entries}");
        assert_eq!(entries[0]["manager"], "first");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {}}));
        assert_eq!(entries[1]["manager"], "second");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:data": {"f:a": {}}}));

        let mut newer = new.clone();
        newer["data"] = json!({"b": "3"});
        record_update(Some(&new), &mut newer, "second", None, T2);
        let entries = managed(&newer);
        assert_eq!(entries.as_array().unwrap().len(), 2, "{entries}");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:data": {"f:b": {}}}));
    }

    #[test]
    fn removed_fields_leave_every_manager() {
        let mut old =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        record_update(None, &mut old, "first", None, T1);
        let mut new = old.clone();
        new.as_object_mut().unwrap().remove("data");
        record_update(Some(&old), &mut new, "second", None, T2);
        assert_eq!(managed(&new), Value::Null);
    }

    #[test]
    fn update_that_changes_nothing_keeps_entries_and_times() {
        let mut old =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        record_update(None, &mut old, "first", None, T1);
        let mut new = old.clone();
        record_update(Some(&old), &mut new, "second", None, T2);
        assert_eq!(managed(&new), managed(&old));
    }

    #[test]
    fn requests_without_managed_fields_keep_the_stored_ones() {
        let mut old =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        record_update(None, &mut old, "first", None, T1);
        let mut new = old.clone();
        new["metadata"].as_object_mut().unwrap().remove("managedFields");
        new["data"]["b"] = json!("2");
        record_update(Some(&old), &mut new, "second", None, T2);
        let entries = managed(&new);
        assert_eq!(entries.as_array().unwrap().len(), 2, "{entries}");
        assert_eq!(entries[0]["manager"], "first");
    }

    #[test]
    fn empty_managed_fields_clear_them_and_later_updates_stay_untracked() {
        for reset in [json!([]), json!([{}])] {
            let mut old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
            record_update(None, &mut old, "first", None, T1);
            let mut cleared = old.clone();
            cleared["metadata"]["managedFields"] = reset;
            cleared["data"]["a"] = json!("2");
            record_update(Some(&old), &mut cleared, "second", None, T2);
            assert_eq!(managed(&cleared), Value::Null);

            let mut later = cleared.clone();
            later["data"]["a"] = json!("3");
            record_update(Some(&cleared), &mut later, "third", None, T2);
            assert_eq!(managed(&later), Value::Null);
        }
    }

    #[test]
    fn system_metadata_is_never_tracked() {
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "1"}});
        let mut new = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "resourceVersion": "2", "generation": 2, "uid": "u",
                         "creationTimestamp": T1, "deletionTimestamp": T2},
        });
        record_update(Some(&old), &mut new, "writer", None, T2);
        assert_eq!(managed(&new), Value::Null);
    }

    #[test]
    fn subresource_writes_get_their_own_entry() {
        let mut old = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}});
        record_update(None, &mut old, "ctl", None, T1);
        let mut new = old.clone();
        new["status"] = json!({"phase": "Running"});
        record_update(Some(&old), &mut new, "ctl", Some("status"), T2);
        let entries = managed(&new);
        assert_eq!(entries.as_array().unwrap().len(), 2);
        assert_eq!(entries[1]["subresource"], "status");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:status": {".": {}, "f:phase": {}}}));
    }

    #[test]
    fn updates_own_list_items_by_key() {
        let mut old = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["a"]},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        });
        record_update(None, &mut old, "creator", None, T1);
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("app:2");
        new["metadata"]["finalizers"] = json!(["a", "b"]);
        record_update(Some(&old), &mut new, "editor", None, T2);
        let entries = managed(&new);
        assert_eq!(entries[1]["manager"], "editor");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({
                "f:metadata": {"f:finalizers": {"v:\"b\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}},
            })
        );
        let creator = &entries[0]["fieldsV1"];
        assert_eq!(creator["f:metadata"], json!({"f:finalizers": {".": {}, "v:\"a\"": {}}}));
        assert_eq!(creator["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"], json!({".": {}, "f:name": {}}));
    }

    #[test]
    fn only_ten_update_managers_are_kept_the_oldest_merge_into_ancient_changes() {
        let mut object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
        record_update(None, &mut object, "creator", None, "2026-01-01T00:00:00Z");
        for i in 0..11 {
            let mut next = object.clone();
            next["data"][format!("k{i}")] = json!("v");
            record_update(
                Some(&object),
                &mut next,
                &format!("m{i:02}"),
                None,
                &format!("2026-01-01T00:00:{i:02}Z"),
            );
            object = next;
        }
        let entries = managed(&object);
        let names: Vec<&str> =
            entries.as_array().unwrap().iter().map(|e| e["manager"].as_str().unwrap()).collect();
        assert_eq!(names.len(), 10, "{names:?}");
        assert_eq!(names[0], "ancient-changes");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {".": {}, "f:k0": {}, "f:k1": {}}}));
        assert_eq!(entries[0]["time"], "2026-01-01T00:00:01Z");
        assert_eq!(names[1..], ["m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10"]);
    }

    #[test]
    fn custom_resource_updates_use_the_schema_list_types() {
        let schema = json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
            "tags": {"type": "array"},
        }}}});
        let lists = crate::patch::SchemaListTypes::new(&schema);
        let mut old =
            json!({"apiVersion": "kopper.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}});
        record_update_with(None, &mut old, "user", None, T1, &lists);
        let mut new = old.clone();
        new["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}], "tags": ["a"]});
        record_update_with(Some(&old), &mut new, "ctl", Some("status"), T2, &lists);
        assert_eq!(
            managed(&new)[1]["fieldsV1"],
            json!({"f:status": {".": {}, "f:tags": {}, "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {
                ".": {}, "f:type": {}, "f:status": {}
            }}}})
        );
    }

    #[test]
    fn undecodable_stored_managed_fields_are_dropped() {
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": [{"manager": "x"}]}});
        let mut new = old.clone();
        new["data"] = json!({"a": "1"});
        record_update(Some(&old), &mut new, "writer", Some("status"), T1);
        assert_eq!(managed(&new), Value::Null);
    }

    #[test]
    fn managed_fields_are_ordered_appliers_first_then_by_time() {
        let set = |name: &str| FieldSet::from_fields_v1(&json!({ format!("f:{name}"): {} })).unwrap();
        let entry = |manager: &str, operation, time: &str| ManagerEntry {
            manager: manager.into(),
            operation,
            api_version: "v1".into(),
            subresource: None,
            time: Some(time.into()),
            fields: set(manager),
        };
        let mut object = json!({"metadata": {}});
        encode_managed_fields(
            &mut object,
            vec![
                entry("u2", Operation::Update, T1),
                entry("a", Operation::Apply, T2),
                entry("u1", Operation::Update, T1),
            ],
        );
        let names: Vec<&str> = object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["a", "u1", "u2"]);
    }
}
