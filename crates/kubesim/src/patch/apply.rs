//! Server-side apply (`application/apply-patch+yaml`), after structured-merge-diff.
//!
//! An apply merges the applied configuration into the live object, removes what the
//! manager applied last time but no longer sends (unless someone else owns it), and refuses
//! to change fields other managers own unless forced. The manager then owns exactly the
//! fields of its configuration.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fields::{
    Comparison, FieldSet, Names, PathElement, applied_field_set, compare, item_element, item_elements,
};
use super::managed::{
    ManagerEntry, Operation, attribute_update, decode_managed_fields, encode_managed_fields,
    without_managed_fields, without_untracked,
};
use super::{ListType, ListTypes, PatchError};

/// Applies `applied` for `manager` to `live` (`None` creates the object) and returns the
/// result with `metadata.managedFields` updated.
///
/// Fields `manager` applied before and omits now are removed unless another manager owns
/// them too. Changing a field another manager owns is a [`PatchError::Conflict`] unless
/// `force`, which moves the field to `manager`. Managers applying equal values share the
/// field. An apply that changes nothing keeps the manager's previous timestamp, so the
/// caller can recognise a no-op by comparing the result with `live`.
///
/// Left to the caller, as they depend on the endpoint: checking `apiVersion`/`kind`, and
/// the strategy's reset fields. kube-apiserver neither merges nor attributes fields an
/// endpoint may not write; removing them from `applied` before the call has that effect
/// (`status` for the main resource of a kind with a status subresource; everything but
/// `status` and `metadata.name` for `/status`).
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    lists: &dyn ListTypes,
    now: &str,
) -> Result<Value, PatchError> {
    validate_applied(applied)?;
    let api_version = applied
        .get("apiVersion")
        .or_else(|| live.and_then(|l| l.get("apiVersion")))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let live_object = live.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let mut others = live.map(stored_entries).unwrap_or_default();
    if live.is_some() && others.is_empty() {
        others = owners_before_first_apply(&live_object, &api_version, subresource, lists, now);
    }
    let previous = others
        .iter()
        .position(|e| e.is(manager, Operation::Apply, &api_version, subresource))
        .map(|i| others.remove(i));

    let applied_set = applied_field_set(applied, lists).map_err(|err| {
        PatchError::BadRequest(format!(
            "failed to create typed patch object ({}): {err}",
            group_version_kind(applied)
        ))
    })?;
    let applied_set = without_untracked(&applied_set);
    let mut merged = merge_value(Some(&live_object), applied, &mut Names::default(), lists)?;
    if let Some(previous) = &previous {
        prune_dropped_fields(&mut merged, &previous.fields, &others, &applied_set, lists);
    }
    let comparison = compare(&live_object, &merged, lists);
    take_ownership(&mut others, &comparison, force)?;

    let time = match &previous {
        Some(previous) if merged == live_object => previous.time.clone(),
        _ => Some(now.to_owned()),
    };
    others.push(ManagerEntry {
        manager: manager.to_owned(),
        operation: Operation::Apply,
        api_version,
        subresource: subresource.map(str::to_owned),
        time,
        fields: applied_set,
    });
    encode_managed_fields(&mut merged, others);
    Ok(merged)
}

/// Rejects an applied configuration whose `apiVersion`/`kind` differ from the endpoint's,
/// with kube-apiserver's message (`invalid object type: /v1, Kind=Secret`).
pub fn check_applied_type(applied: &Value, api_version: &str, kind: &str) -> Result<(), PatchError> {
    let text = |key: &str| applied.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") == api_version && text("kind") == kind {
        return Ok(());
    }
    Err(PatchError::BadRequest(format!("invalid object type: {}", group_version_kind(applied))))
}

/// An object's type as Go's `schema.GroupVersionKind` prints it: `apps/v1, Kind=Deployment`.
fn group_version_kind(object: &Value) -> String {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let (group, version) = text("apiVersion").rsplit_once('/').unwrap_or(("", text("apiVersion")));
    format!("{group}/{version}, Kind={}", text("kind"))
}

/// kube-apiserver gives the fields of an existing object nobody is tracked on to
/// `before-first-apply`, so that a first apply changing them conflicts.
fn owners_before_first_apply(
    live_object: &Value,
    api_version: &str,
    subresource: Option<&str>,
    lists: &dyn ListTypes,
    now: &str,
) -> Vec<ManagerEntry> {
    let placeholder = ManagerEntry {
        manager: "before-first-apply".to_owned(),
        operation: Operation::Update,
        api_version: api_version.to_owned(),
        subresource: subresource.map(str::to_owned),
        time: Some(now.to_owned()),
        fields: FieldSet::new(),
    };
    let mut entries = Vec::new();
    attribute_update(&mut entries, &compare(&json!({}), live_object, lists), placeholder);
    entries
}

fn validate_applied(applied: &Value) -> Result<(), PatchError> {
    if !applied.is_object() {
        return Err(PatchError::BadRequest(format!(
            "error decoding YAML: expected an object, got {applied}"
        )));
    }
    if applied.pointer("/metadata/managedFields").is_some_and(|v| !v.is_null()) {
        return Err(PatchError::BadRequest("metadata.managedFields must be nil".into()));
    }
    Ok(())
}

/// Removes what the applier owned last time and no longer sends, unless another manager
/// owns it or the new configuration sets something below it.
fn prune_dropped_fields(
    merged: &mut Value,
    previous: &FieldSet,
    others: &[ManagerEntry],
    applied_set: &FieldSet,
    lists: &dyn ListTypes,
) {
    let keep = others.iter().fold(applied_set.clone(), |acc, e| acc.union(&e.fields));
    for path in previous.difference(&keep).iter().filter(|p| !keep.has_descendant_of(p)) {
        remove_path(merged, path, &keep, lists);
    }
}

/// Fails with the conflicts if the apply changes fields other managers own, unless forced;
/// then takes changed fields away from them and forgets removed ones.
fn take_ownership(
    others: &mut [ManagerEntry],
    comparison: &Comparison,
    force: bool,
) -> Result<(), PatchError> {
    let changed = comparison.changed();
    if !force {
        let mut conflicts: Vec<_> = others
            .iter()
            .flat_map(|e| {
                e.fields.intersection(&changed).iter().map(|path| e.conflict(path)).collect::<Vec<_>>()
            })
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(PatchError::Conflict(conflicts));
        }
    }
    for entry in others {
        entry.fields = entry.fields.difference(&changed).difference(&comparison.removed);
    }
    Ok(())
}

/// The live object's managers; undecodable entries (only a client could have written them)
/// are treated as absent rather than failing every later apply.
fn stored_entries(live: &Value) -> Vec<ManagerEntry> {
    decode_managed_fields(live).unwrap_or_else(|err| {
        tracing::debug!(%err, "ignoring undecodable managedFields");
        Vec::new()
    })
}

/// Merges an applied value into a live one: objects field by field, non-atomic lists item
/// by item, everything else replaced. `null` in the configuration removes the field.
fn merge_value(
    live: Option<&Value>,
    applied: &Value,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<Value, PatchError> {
    match applied {
        Value::Object(fields) if !names.map_is_atomic(lists) => {
            let mut out = match live {
                Some(Value::Object(live_fields)) => live_fields.clone(),
                _ => Map::new(),
            };
            for (name, value) in fields {
                if value.is_null() {
                    out.remove(name);
                    continue;
                }
                names.push(name);
                let merged = merge_value(out.get(name), value, names, lists)?;
                names.pop();
                out.insert(name.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => match names.list_type(lists) {
            ListType::Atomic => Ok(applied.clone()),
            list_type => merge_list(live, items, &list_type, names, lists),
        },
        _ => Ok(applied.clone()),
    }
}

/// Merges list items by identity. Applied items come in applied order; items only the live
/// list has keep their place relative to the items both lists share.
fn merge_list(
    live: Option<&Value>,
    applied: &[Value],
    list_type: &ListType,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<Value, PatchError> {
    let applied_elements = item_elements(applied, list_type).map_err(PatchError::BadRequest)?;
    let live_items = match live {
        Some(Value::Array(items)) => identify_live_items(items, list_type),
        _ => Vec::new(),
    };
    let live_by_element: BTreeMap<&PathElement, &Value> =
        live_items.iter().filter_map(|(e, v)| e.as_ref().map(|e| (e, *v))).collect();
    let applied_set: BTreeSet<&PathElement> = applied_elements.iter().collect();
    let mut shared = applied_elements.iter().filter(|e| live_by_element.contains_key(e)).peekable();

    let mut out = Vec::with_capacity(live_items.len() + applied.len());
    let mut emitted = BTreeSet::new();
    let (mut l, mut r) = (0, 0);
    while l < live_items.len() || r < applied.len() {
        if let Some((element, value)) = live_items.get(l) {
            let Some(element) = element.as_ref().filter(|e| applied_set.contains(e)) else {
                out.push((*value).clone());
                l += 1;
                continue;
            };
            if emitted.contains(element) {
                l += 1;
                continue;
            }
            let is_next_shared = shared.peek().is_some_and(|s| *s == element);
            if !is_next_shared && r < applied.len() && applied_elements[r] != *element {
                l += 1;
                continue;
            }
        }
        let Some(element) = applied_elements.get(r) else {
            l += 1;
            continue;
        };
        let merged = merge_value(live_by_element.get(element).copied(), &applied[r], names, lists)?;
        out.push(merged);
        emitted.insert(element.clone());
        if shared.peek().is_some_and(|s| *s == element) {
            shared.next();
        }
        r += 1;
    }
    Ok(Value::Array(out))
}

/// Identifies the items of a stored list. Items that lack their keys or repeat an earlier
/// item's key (possible after merge patches) get no identity: apply leaves them in place.
fn identify_live_items<'v>(
    items: &'v [Value],
    list_type: &ListType,
) -> Vec<(Option<PathElement>, &'v Value)> {
    let mut seen = BTreeSet::new();
    items
        .iter()
        .map(|item| {
            let element = item_element(item, list_type).ok().filter(|e| seen.insert(e.clone()));
            (element, item)
        })
        .collect()
}

/// Removes the field or list item at `path`, then any container left empty by it that no
/// manager in `keep` owns or owns something under.
fn remove_path(object: &mut Value, path: &[PathElement], keep: &FieldSet, lists: &dyn ListTypes) {
    if !remove_one(object, path, &mut Names::default(), lists) {
        return;
    }
    for depth in (1..path.len()).rev() {
        let ancestor = &path[..depth];
        if keep.contains(ancestor) || keep.has_descendant_of(ancestor) {
            return;
        }
        let is_empty = match lookup(object, ancestor, &mut Names::default(), lists) {
            Some(Value::Object(fields)) => fields.is_empty(),
            Some(Value::Array(items)) => items.is_empty(),
            _ => false,
        };
        if !is_empty || !remove_one(object, ancestor, &mut Names::default(), lists) {
            return;
        }
    }
}

/// The position of the child `element` within `value`, whose field names are `names`.
fn child_slot(value: &Value, element: &PathElement, names: &Names, lists: &dyn ListTypes) -> Option<Slot> {
    match (value, element) {
        (Value::Object(fields), PathElement::Field(name)) => {
            fields.contains_key(name).then(|| Slot::Field(name.clone()))
        }
        (Value::Array(items), PathElement::Index(index)) => {
            (*index < items.len()).then_some(Slot::Index(*index))
        }
        (Value::Array(items), PathElement::Key(_) | PathElement::Value(_)) => {
            let list_type = names.list_type(lists);
            items
                .iter()
                .position(|item| item_element(item, &list_type).is_ok_and(|e| e == *element))
                .map(Slot::Index)
        }
        _ => None,
    }
}

enum Slot {
    Field(String),
    Index(usize),
}

fn step<'v>(value: &'v Value, slot: &Slot) -> Option<&'v Value> {
    match slot {
        Slot::Field(name) => value.get(name),
        Slot::Index(index) => value.get(index),
    }
}

fn step_mut<'v>(value: &'v mut Value, slot: &Slot) -> Option<&'v mut Value> {
    match slot {
        Slot::Field(name) => value.get_mut(name),
        Slot::Index(index) => value.get_mut(index),
    }
}

fn push_name(names: &mut Names, element: &PathElement) {
    if let PathElement::Field(name) = element {
        names.push(name);
    }
}

fn lookup<'v>(
    value: &'v Value,
    path: &[PathElement],
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Option<&'v Value> {
    let Some((element, rest)) = path.split_first() else { return Some(value) };
    let slot = child_slot(value, element, names, lists)?;
    push_name(names, element);
    lookup(step(value, &slot)?, rest, names, lists)
}

fn remove_one(value: &mut Value, path: &[PathElement], names: &mut Names, lists: &dyn ListTypes) -> bool {
    let Some((element, rest)) = path.split_first() else { return false };
    let Some(slot) = child_slot(value, element, names, lists) else { return false };
    if rest.is_empty() {
        match (value, slot) {
            (Value::Object(fields), Slot::Field(name)) => fields.remove(&name).is_some(),
            (Value::Array(items), Slot::Index(index)) => {
                items.remove(index);
                true
            }
            _ => false,
        }
    } else {
        push_name(names, element);
        step_mut(value, &slot).is_some_and(|child| remove_one(child, rest, names, lists))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{BuiltinListTypes, SchemaListTypes};

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";
    const T3: &str = "2026-01-01T00:02:00Z";

    fn core(kind: &str) -> BuiltinListTypes {
        BuiltinListTypes::new("", kind)
    }

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": data})
    }

    fn apply(live: Option<&Value>, applied: &Value, manager: &str, force: bool) -> Result<Value, PatchError> {
        server_side_apply(live, applied, manager, force, None, &core("ConfigMap"), T2)
    }

    fn entry<'v>(object: &'v Value, manager: &str) -> &'v Value {
        object["metadata"]["managedFields"]
            .as_array()
            .and_then(|entries| entries.iter().find(|e| e["manager"] == manager))
            .unwrap_or(&Value::Null)
    }

    #[test]
    fn apply_to_missing_object_creates_it_with_the_manager_owning_its_fields() {
        let applied = configmap(json!({"key": "v"}));
        let created =
            server_side_apply(None, &applied, "kopper", false, None, &core("ConfigMap"), T1).unwrap();
        assert_eq!(created["data"], json!({"key": "v"}));
        assert_eq!(created["metadata"]["name"], "c");
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{
                "manager": "kopper", "operation": "Apply", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:key": {}}},
            }])
        );
    }

    #[test]
    fn apply_merges_into_fields_it_does_not_mention() {
        let mut live = configmap(json!({"other": "x"}));
        live["metadata"]["labels"] = json!({"team": "a"});
        let mut applied = configmap(json!({"key": "v"}));
        applied["metadata"]["labels"] = json!({"app": "kopper"});
        let result = apply(Some(&live), &applied, "kopper", false).unwrap();
        assert_eq!(result["data"], json!({"other": "x", "key": "v"}));
        assert_eq!(result["metadata"]["labels"], json!({"team": "a", "app": "kopper"}));
    }

    #[test]
    fn apply_drops_fields_the_manager_stopped_sending() {
        let first = apply(None, &configmap(json!({"a": "1", "b": "2"})), "kopper", false).unwrap();
        let second = apply(Some(&first), &configmap(json!({"a": "1"})), "kopper", false).unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));
        assert_eq!(entry(&second, "kopper")["fieldsV1"], json!({"f:data": {"f:a": {}}}));

        let mut without_data = configmap(json!({}));
        without_data.as_object_mut().unwrap().remove("data");
        let third = apply(Some(&second), &without_data, "kopper", false).unwrap();
        assert_eq!(third.get("data"), None, "an emptied, unowned container is removed: {third}");
        assert_eq!(third["metadata"].get("managedFields"), None);
    }

    #[test]
    fn apply_keeps_dropped_fields_another_manager_owns() {
        let first = apply(None, &configmap(json!({"a": "1", "b": "2"})), "one", false).unwrap();
        let shared = apply(Some(&first), &configmap(json!({"b": "2"})), "two", false).unwrap();
        let result = apply(Some(&shared), &configmap(json!({"a": "1"})), "one", false).unwrap();
        assert_eq!(result["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(entry(&result, "one")["fieldsV1"], json!({"f:data": {"f:a": {}}}));
        assert_eq!(entry(&result, "two")["fieldsV1"], json!({"f:data": {"f:b": {}}}));
    }

    #[test]
    fn an_empty_apply_releases_what_the_manager_shared_and_prunes_what_it_alone_held() {
        let rbac = BuiltinListTypes::new("rbac.authorization.k8s.io", "RoleBinding");
        let binding = |labels: Value| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "b", "namespace": "n", "labels": labels,
                                "ownerReferences": [{"apiVersion": "kopper.dev/v1alpha1", "kind": "NamespaceAccess",
                                                     "name": "p", "uid": "u1", "controller": true}]},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}]})
        };
        let ssa = |live: Option<&Value>, applied: &Value, manager: &str| {
            server_side_apply(live, applied, manager, true, None, &rbac, T2)
        };
        let old = ssa(None, &binding(json!({"a": "1", "retired": "yes"})), "old").unwrap();
        let both = ssa(Some(&old), &binding(json!({"a": "1"})), "new").unwrap();
        let empty = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                           "metadata": {"name": "b", "namespace": "n"}});
        let released = server_side_apply(Some(&both), &empty, "old", false, None, &rbac, T3).unwrap();
        assert_eq!(released["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(released["roleRef"], both["roleRef"]);
        assert_eq!(entry(&released, "old"), &Value::Null, "{released}");
    }

    #[test]
    fn apply_keeps_dropped_fields_an_updater_changed() {
        let first = apply(None, &configmap(json!({"a": "1"})), "one", false).unwrap();
        let mut edited = first.clone();
        edited["data"]["a"] = json!("edited");
        crate::patch::record_update(Some(&first), &mut edited, "kubectl-edit", None, T2);
        let mut empty = configmap(json!({}));
        empty.as_object_mut().unwrap().remove("data");
        let result = apply(Some(&edited), &empty, "one", false).unwrap();
        assert_eq!(result["data"], json!({"a": "edited"}));
    }

    #[test]
    fn first_apply_to_an_untracked_object_conflicts_with_before_first_apply() {
        let untracked = configmap(json!({"key": "v", "other": "x"}));
        let err = apply(Some(&untracked), &configmap(json!({"key": "w"})), "kopper", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.key"#
        );
        let same = apply(Some(&untracked), &configmap(json!({"key": "v"})), "kopper", false).unwrap();
        assert_eq!(
            entry(&same, "before-first-apply")["fieldsV1"],
            json!({"f:data": {".": {}, "f:key": {}, "f:other": {}}})
        );
        assert_eq!(entry(&same, "kopper")["fieldsV1"], json!({"f:data": {"f:key": {}}}));
    }

    #[test]
    fn an_edit_takes_a_label_from_the_applier_who_then_conflicts() {
        let mut labelled = configmap(json!({"k": "v"}));
        labelled["metadata"]["labels"] = json!({"app": "kopper", "tier": "a"});
        let applied = apply(None, &labelled, "kopper", false).unwrap();
        let mut edited = applied.clone();
        edited["metadata"]["labels"]["tier"] = json!("b");
        crate::patch::record_update(Some(&applied), &mut edited, "kubectl-label", None, T2);
        assert_eq!(
            entry(&edited, "kopper")["fieldsV1"],
            json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
        );
        assert_eq!(
            entry(&edited, "kubectl-label")["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:tier": {}}}})
        );

        let err = apply(Some(&edited), &labelled, "kopper", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "kubectl-label" using v1: .metadata.labels.tier"#
        );
        let forced = apply(Some(&edited), &labelled, "kopper", true).unwrap();
        assert_eq!(forced["metadata"]["labels"]["tier"], "a");
        assert_eq!(entry(&forced, "kubectl-label"), &Value::Null);
    }

    #[test]
    fn secret_data_keys_are_owned_one_by_one() {
        let lists = core("Secret");
        let secret = |data: Value| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"}, "type": "Opaque", "data": data});
        let first =
            server_side_apply(None, &secret(json!({"a": "YQ=="})), "one", false, None, &lists, T1).unwrap();
        let second =
            server_side_apply(Some(&first), &secret(json!({"b": "Yg=="})), "two", false, None, &lists, T2)
                .unwrap();
        assert_eq!(second["data"], json!({"a": "YQ==", "b": "Yg=="}));
        let err =
            server_side_apply(Some(&second), &secret(json!({"b": "eA=="})), "one", false, None, &lists, T2)
                .unwrap_err();
        assert_eq!(err.to_string(), r#"Apply failed with 1 conflict: conflict with "two": .data.b"#);
    }

    #[test]
    fn two_managers_applying_the_same_value_share_ownership() {
        let first = apply(None, &configmap(json!({"key": "v"})), "one", false).unwrap();
        let second = apply(Some(&first), &configmap(json!({"key": "v"})), "two", false).unwrap();
        assert_eq!(entry(&second, "one")["fieldsV1"], json!({"f:data": {"f:key": {}}}));
        assert_eq!(entry(&second, "two")["fieldsV1"], json!({"f:data": {"f:key": {}}}));
    }

    #[test]
    fn apply_conflicts_with_other_manager_unless_forced() {
        let first = apply(None, &configmap(json!({"key": "v"})), "one", false).unwrap();
        let err = apply(Some(&first), &configmap(json!({"key": "w"})), "two", false).unwrap_err();
        assert_eq!(err.to_string(), r#"Apply failed with 1 conflict: conflict with "one": .data.key"#);
        assert_eq!(err.status_code(), 409);

        let forced = apply(Some(&first), &configmap(json!({"key": "w"})), "two", true).unwrap();
        assert_eq!(forced["data"]["key"], "w");
        assert_eq!(entry(&forced, "one"), &Value::Null, "the loser owned nothing else");
        assert_eq!(entry(&forced, "two")["fieldsV1"], json!({"f:data": {"f:key": {}}}));
    }

    #[test]
    fn apply_conflicts_with_an_updater_name_its_api_version() {
        let mut live = configmap(json!({"key": "v"}));
        crate::patch::record_update(None, &mut live, "mgr", None, T1);
        let err = apply(Some(&live), &configmap(json!({"key": "w"})), "kopper", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "mgr" using v1: .data.key"#
        );
        assert_eq!(
            err.causes(),
            vec![
                json!({"reason": "FieldManagerConflict", "message": "conflict with \"mgr\" using v1", "field": ".data.key"})
            ]
        );
    }

    #[test]
    fn reapplying_the_same_configuration_is_a_no_op() {
        let first = apply(None, &configmap(json!({"key": "v"})), "kopper", false).unwrap();
        let again = server_side_apply(
            Some(&first),
            &configmap(json!({"key": "v"})),
            "kopper",
            false,
            None,
            &core("ConfigMap"),
            T3,
        )
        .unwrap();
        assert_eq!(again, first);
    }

    #[test]
    fn changing_apply_updates_the_managers_time() {
        let first =
            server_side_apply(None, &configmap(json!({"k": "1"})), "m", false, None, &core("ConfigMap"), T1)
                .unwrap();
        let second = server_side_apply(
            Some(&first),
            &configmap(json!({"k": "2"})),
            "m",
            false,
            None,
            &core("ConfigMap"),
            T3,
        )
        .unwrap();
        assert_eq!(entry(&second, "m")["time"], T3);
    }

    #[test]
    fn apply_with_managed_fields_is_a_bad_request() {
        let mut applied = configmap(json!({}));
        applied["metadata"]["managedFields"] = json!([]);
        assert_eq!(
            apply(None, &applied, "m", false).unwrap_err(),
            PatchError::BadRequest("metadata.managedFields must be nil".into())
        );
    }

    #[test]
    fn applied_type_must_match_the_endpoint() {
        let applied = configmap(json!({}));
        assert_eq!(check_applied_type(&applied, "v1", "ConfigMap"), Ok(()));
        assert_eq!(
            check_applied_type(&applied, "v1", "Secret"),
            Err(PatchError::BadRequest("invalid object type: /v1, Kind=ConfigMap".into()))
        );
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding"});
        assert_eq!(
            check_applied_type(&binding, "rbac.authorization.k8s.io/v1beta1", "RoleBinding"),
            Err(PatchError::BadRequest(
                "invalid object type: rbac.authorization.k8s.io/v1, Kind=RoleBinding".into()
            ))
        );
    }

    #[test]
    fn apply_with_duplicate_list_keys_is_a_bad_request() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}, {"name": "c"}]},
        });
        let err = server_side_apply(None, &pod, "m", false, None, &core("Pod"), T1).unwrap_err();
        assert_eq!(
            err,
            PatchError::BadRequest(
                r#"failed to create typed patch object (/v1, Kind=Pod): .spec.containers: duplicate entries for key [name="c"]"#
                    .into()
            )
        );
    }

    #[test]
    fn apply_of_a_non_object_is_a_bad_request() {
        assert!(matches!(apply(None, &json!([1]), "m", false), Err(PatchError::BadRequest(_))));
    }

    #[test]
    fn role_binding_subjects_are_replaced_and_owned_as_a_whole() {
        let lists = BuiltinListTypes::new("rbac.authorization.k8s.io", "RoleBinding");
        let binding = |subjects: Value| {
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "n"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                "subjects": subjects,
            })
        };
        let first = server_side_apply(
            None,
            &binding(json!([{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"}])),
            "kopper",
            false,
            None,
            &lists,
            T1,
        )
        .unwrap();
        let second = server_side_apply(
            Some(&first),
            &binding(json!([{"kind": "User", "name": "carol"}])),
            "kopper",
            false,
            None,
            &lists,
            T2,
        )
        .unwrap();
        assert_eq!(second["subjects"], json!([{"kind": "User", "name": "carol"}]));
        assert_eq!(
            entry(&second, "kopper")["fieldsV1"],
            json!({"f:roleRef": {"f:apiGroup": {}, "f:kind": {}, "f:name": {}}, "f:subjects": {}})
        );
        let err = server_side_apply(Some(&second), &binding(json!([])), "other", false, None, &lists, T2)
            .unwrap_err();
        assert_eq!(err.to_string(), r#"Apply failed with 1 conflict: conflict with "kopper": .subjects"#);
    }

    #[test]
    fn apply_merges_containers_by_name_and_keeps_live_order() {
        let lists = core("Pod");
        let pod = |containers: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
        let live = server_side_apply(
            None,
            &pod(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
            "one",
            false,
            None,
            &lists,
            T1,
        )
        .unwrap();
        let result = server_side_apply(
            Some(&live),
            &pod(json!([{"name": "new", "image": "n:1"}, {"name": "b", "image": "b:1", "args": ["x"]}])),
            "two",
            false,
            None,
            &lists,
            T2,
        )
        .unwrap();
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}, {"name": "new", "image": "n:1"}, {"name": "b", "image": "b:1", "args": ["x"]}])
        );
        assert_eq!(
            entry(&result, "two")["fieldsV1"],
            json!({"f:spec": {"f:containers": {
                "k:{\"name\":\"b\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {}},
                "k:{\"name\":\"new\"}": {".": {}, "f:image": {}, "f:name": {}},
            }}})
        );
    }

    #[test]
    fn apply_drops_list_items_the_manager_stopped_sending() {
        let lists = core("ConfigMap");
        let with_finalizers = |finalizers: Value| {
            let mut cm = configmap(json!({}));
            cm["metadata"]["finalizers"] = finalizers;
            cm
        };
        let live =
            server_side_apply(None, &with_finalizers(json!(["a", "b"])), "one", false, None, &lists, T1)
                .unwrap();
        let shared =
            server_side_apply(Some(&live), &with_finalizers(json!(["c"])), "two", false, None, &lists, T1)
                .unwrap();
        assert_eq!(shared["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let result =
            server_side_apply(Some(&shared), &with_finalizers(json!(["b"])), "one", false, None, &lists, T2)
                .unwrap();
        assert_eq!(result["metadata"]["finalizers"], json!(["b", "c"]));
    }

    fn crd_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "mode": {"type": "string"}}},
                "status": {"type": "object", "properties": {"conditions": {
                    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object"}
                }}}
            }
        })
    }

    fn widget(body: Value) -> Value {
        let mut object = json!({"apiVersion": "kopper.dev/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}});
        for (k, v) in body.as_object().unwrap() {
            object[k] = v.clone();
        }
        object
    }

    #[test]
    fn custom_resource_status_conditions_merge_by_type_per_manager() {
        let schema = crd_schema();
        let lists = SchemaListTypes::new(&schema);
        let live = server_side_apply(
            None,
            &widget(json!({"spec": {"replicas": 1}})),
            "user",
            false,
            None,
            &lists,
            T1,
        )
        .unwrap();
        let ready = widget(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
        let with_ready =
            server_side_apply(Some(&live), &ready, "ctl", false, Some("status"), &lists, T2).unwrap();
        let synced = widget(json!({"status": {"conditions": [{"type": "Synced", "status": "False"}]}}));
        let both = server_side_apply(Some(&with_ready), &synced, "other", false, Some("status"), &lists, T2)
            .unwrap();
        assert_eq!(
            both["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}])
        );
        assert_eq!(both["spec"], json!({"replicas": 1}));
        let ctl = entry(&both, "ctl");
        assert_eq!(ctl["subresource"], "status");
        assert_eq!(
            ctl["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );

        let flip = widget(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        let err =
            server_side_apply(Some(&both), &flip, "other", false, Some("status"), &lists, T3).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "ctl" with subresource "status": .status.conditions[type="Ready"].status"#
        );
    }

    #[test]
    fn custom_resource_spec_fields_are_owned_per_manager() {
        let schema = crd_schema();
        let lists = SchemaListTypes::new(&schema);
        let live = server_side_apply(
            None,
            &widget(json!({"spec": {"replicas": 1}})),
            "user",
            false,
            None,
            &lists,
            T1,
        )
        .unwrap();
        let result = server_side_apply(
            Some(&live),
            &widget(json!({"spec": {"mode": "fast"}})),
            "tool",
            false,
            None,
            &lists,
            T2,
        )
        .unwrap();
        assert_eq!(result["spec"], json!({"replicas": 1, "mode": "fast"}));
        let dropped =
            server_side_apply(Some(&result), &widget(json!({})), "user", false, None, &lists, T3).unwrap();
        assert_eq!(dropped["spec"], json!({"mode": "fast"}));
    }

    #[test]
    fn null_in_an_applied_configuration_removes_the_field() {
        let first = apply(None, &configmap(json!({"a": "1", "b": "2"})), "one", false).unwrap();
        let result = apply(Some(&first), &configmap(json!({"a": "1", "b": null})), "one", false).unwrap();
        assert_eq!(result["data"], json!({"a": "1"}));
    }

    #[test]
    fn apply_keeps_a_container_it_now_fills_after_applying_it_empty() {
        let lists = core("ConfigMap");
        let empty = server_side_apply(None, &configmap(json!({})), "m", false, None, &lists, T1).unwrap();
        assert_eq!(entry(&empty, "m")["fieldsV1"], json!({"f:data": {}}));
        let filled =
            server_side_apply(Some(&empty), &configmap(json!({"a": "1"})), "m", false, None, &lists, T2)
                .unwrap();
        assert_eq!(filled["data"], json!({"a": "1"}));
    }

    #[test]
    fn apply_leaves_unidentifiable_live_items_in_place() {
        let lists = core("ConfigMap");
        let mut live = configmap(json!({}));
        live["metadata"]["finalizers"] = json!(["a", "a", "b"]);
        let mut applied = configmap(json!({}));
        applied["metadata"]["finalizers"] = json!(["c"]);
        // A list with duplicates is owned as a whole by whoever wrote it, hence the force.
        let result = server_side_apply(Some(&live), &applied, "m", true, None, &lists, T1).unwrap();
        assert_eq!(result["metadata"]["finalizers"], json!(["a", "a", "b", "c"]));
    }

    #[test]
    fn list_merge_puts_new_items_before_the_next_shared_item() {
        let lists = core("ConfigMap");
        let mut names = Names::default();
        names.push("metadata");
        names.push("finalizers");
        let merged = merge_list(
            Some(&json!(["a", "b", "c"])),
            &[json!("x"), json!("c"), json!("a")],
            &ListType::Set,
            &mut names,
            &lists,
        )
        .unwrap();
        assert_eq!(merged, json!(["b", "x", "c", "a"]));
    }
}
