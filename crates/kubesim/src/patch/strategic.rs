//! Strategic merge patch (`application/strategic-merge-patch+json`), as kube-apiserver
//! applies it (`StrategicMergeMapPatch` with parallel-list directives merged).
//!
//! Objects merge key by key and `null` deletes. Lists merge by their strategy: map lists by
//! their merge key, set lists as a de-duplicated union, all others are replaced. Directives:
//! `$patch: replace|delete` in objects and list items, `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>`.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::fields::Names;
use super::{BuiltinListTypes, ListType, ListTypes, PatchError, PatchType, is_builtin_group};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies a strategic merge patch to an object of a built-in kind.
///
/// Custom resources have no patch strategies, so kube-apiserver answers 415 for them; that
/// is [`PatchError::Unsupported`] here for any group it does not serve itself.
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<(), PatchError> {
    if !is_builtin_group(group) {
        let accepted = [PatchType::Json, PatchType::Merge, PatchType::Apply].map(PatchType::content_type);
        return Err(PatchError::Unsupported(format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        )));
    }
    strategic_merge_patch_with(target, patch, &BuiltinListTypes::new(group, kind))
}

/// Applies a strategic merge patch with the given list strategies; `target` is unchanged
/// on error.
pub fn strategic_merge_patch_with(
    target: &mut Value,
    patch: &Value,
    lists: &dyn ListTypes,
) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_type_name(patch)
        )));
    };
    let original = match target {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    let merged = merge_map(original, patch.clone(), &mut Names::default(), lists)?;
    *target = Value::Object(merged);
    Ok(())
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn bad_request(message: impl Into<String>) -> PatchError {
    PatchError::BadRequest(message.into())
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => Ok(cleaned_map(patch)),
            Some("delete") => Ok(Map::new()),
            _ => {
                Err(bad_request(format!("unknown patch type: {directive} in map: {}", Value::Object(patch))))
            }
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_ordered_lists(&mut original, &mut patch, names, lists)?;

    for (key, patch_value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            delete_from_primitive_list(&mut original, field, &patch_value)?;
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let merged = match original.remove(&key) {
            Some(Value::Object(orig)) if patch_value.is_object() => {
                names.push(&key);
                let result = merge_map(orig, into_object(patch_value), names, lists);
                names.pop();
                Value::Object(result?)
            }
            Some(Value::Array(orig)) if patch_value.is_array() => {
                names.push(&key);
                let result = merge_list(orig, into_array(patch_value), names, lists);
                names.pop();
                Value::Array(result?)
            }
            _ => cleaned(patch_value),
        };
        original.insert(key, merged);
    }
    Ok(original)
}

fn into_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

fn into_array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// A patch value taken as is (nothing to merge with): nulls and directives are dropped, as
/// kube-apiserver's typed decoding would.
fn cleaned(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(cleaned_map(fields)),
        Value::Array(items) => {
            Value::Array(items.into_iter().filter(|item| !is_directive_item(item)).map(cleaned).collect())
        }
        other => other,
    }
}

fn cleaned_map(fields: Map<String, Value>) -> Map<String, Value> {
    fields
        .into_iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k, cleaned(v)))
        .collect()
}

/// A list item that only carries a directive (`{"$patch": "delete", "name": "x"}`).
fn is_directive_item(item: &Value) -> bool {
    item.get(DIRECTIVE).is_some()
}

/// `$retainKeys`: the object keeps only the listed keys (before the patch adds its own),
/// and the patch may only set keys from that list.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(retain) = retain else {
        return Err(bad_request("invalid patch format of retainKeys"));
    };
    let keep: BTreeSet<&str> = retain.iter().filter_map(Value::as_str).collect();
    let violates = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !keep.contains(k.as_str())
    });
    if violates {
        return Err(bad_request("invalid patch format of retainKeys"));
    }
    original.retain(|k, _| keep.contains(k.as_str()));
    Ok(())
}

/// `$deleteFromPrimitiveList/<field>`: removes the listed values from a primitive list.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    field: &str,
    values: &Value,
) -> Result<(), PatchError> {
    let Value::Array(values) = values else {
        return Err(bad_request("invalid patch format of primitive list"));
    };
    if let Some(Value::Array(items)) = original.get_mut(field) {
        items.retain(|item| !values.contains(item));
    }
    Ok(())
}

/// `$setElementOrder/<field>`: merges `<field>` from the patch, then orders the result by
/// the directive's list, keeping items only the server has near their old neighbours.
fn merge_ordered_lists(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<(), PatchError> {
    let directives: Vec<String> =
        patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for directive in directives {
        let field = directive.trim_start_matches(SET_ELEMENT_ORDER).to_owned();
        let Some(Value::Array(order)) = patch.remove(&directive) else {
            return Err(bad_request("invalid patch format of setElementOrder list"));
        };
        names.push(&field);
        let result = merge_with_order(original, patch, &field, &order, names, lists);
        names.pop();
        result?;
    }
    Ok(())
}

fn merge_with_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    field: &str,
    order: &[Value],
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<(), PatchError> {
    let key = merge_key(&names.list_type(lists));
    let patch_list = match patch.remove(field) {
        Some(Value::Array(items)) => Some(items),
        Some(_) => return Err(bad_request("invalid patch format of setElementOrder list")),
        None => None,
    };
    let original_list = match original.get(field) {
        Some(Value::Array(items)) => Some(items.clone()),
        _ => None,
    };
    if let Some(patch_list) = &patch_list {
        validate_order(patch_list, order, key.as_deref())?;
    }
    let merged = match (original_list.clone(), patch_list) {
        (Some(orig), None) => orig,
        (None, Some(patch_list)) => into_array(cleaned(Value::Array(patch_list))),
        (Some(orig), Some(patch_list)) => merge_list(orig, patch_list, names, lists)?,
        (None, None) => return Ok(()),
    };
    let ordered = normalize_order(merged, order, &original_list.unwrap_or_default(), key.as_deref())?;
    original.insert(field.to_owned(), Value::Array(ordered));
    Ok(())
}

/// Items of the patch list must appear in `$setElementOrder` in the same relative order.
fn validate_order(patch_list: &[Value], order: &[Value], key: Option<&str>) -> Result<(), PatchError> {
    let mut order_iter = order.iter();
    for item in patch_list.iter().filter(|item| !is_directive_item(item)) {
        let wanted = identity(item, key)?;
        let mut found = false;
        for candidate in order_iter.by_ref() {
            if identity(candidate, key)? == wanted {
                found = true;
                break;
            }
        }
        if !found {
            return Err(bad_request(format!(
                "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
                Value::Array(patch_list.to_vec()),
                Value::Array(order.to_vec())
            )));
        }
    }
    Ok(())
}

/// The patch merge key of a list strategy; `None` for primitive (set) lists.
fn merge_key(list_type: &ListType) -> Option<String> {
    match list_type {
        ListType::Map(keys) => keys.first().cloned(),
        _ => None,
    }
}

/// What identifies a list item: its merge key's value, or the item itself for primitives.
fn identity<'v>(item: &'v Value, key: Option<&str>) -> Result<&'v Value, PatchError> {
    match key {
        None => Ok(item),
        Some(key) => item
            .get(key)
            .ok_or_else(|| bad_request(format!("map: {item} does not contain declared merge key: {key}"))),
    }
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<Vec<Value>, PatchError> {
    match names.list_type(lists) {
        ListType::Atomic => Ok(into_array(cleaned(Value::Array(patch)))),
        ListType::Set => merge_primitive_list(original, patch),
        ListType::Map(keys) => match keys.first() {
            Some(key) => merge_map_list(original, patch, key, names, lists),
            None => Ok(into_array(cleaned(Value::Array(patch)))),
        },
    }
}

/// Set lists: the union of both lists without duplicates, patch items in patch order.
fn merge_primitive_list(original: Vec<Value>, patch: Vec<Value>) -> Result<Vec<Value>, PatchError> {
    if patch.iter().any(|item| item.is_object() || item.is_array()) {
        return Err(bad_request("cannot merge lists without merge key"));
    }
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for item in original.iter().chain(patch.iter()) {
        if !merged.contains(item) {
            merged.push(item.clone());
        }
    }
    normalize_order(merged, &patch, &original, None)
}

/// Map lists: items with the same merge key merge, new ones are added, `$patch: delete`
/// items remove theirs and a `$patch: replace` item replaces the whole list.
fn merge_map_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    names: &mut Names,
    lists: &dyn ListTypes,
) -> Result<Vec<Value>, PatchError> {
    let mut merged = original.clone();
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in &patch {
        let Some(fields) = item.as_object() else {
            return Err(bad_request(format!("map: {item} does not contain declared merge key: {key}")));
        };
        let Some(directive) = fields.get(DIRECTIVE) else {
            plain.push(item.clone());
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let doomed = identity(item, Some(key))?;
                merged.retain(|existing| existing.get(key) != Some(doomed));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(bad_request("merging lists cannot yet be specified in the patch")),
            _ => return Err(bad_request(format!("unknown patch type: {directive} in map: {item}"))),
        }
    }
    if replace {
        return Ok(into_array(cleaned(Value::Array(plain))));
    }
    for item in plain {
        let wanted = identity(&item, Some(key))?.clone();
        match merged.iter_mut().find(|existing| existing.get(key) == Some(&wanted)) {
            Some(existing) => {
                let base = std::mem::take(existing);
                *existing = Value::Object(merge_map(into_object(base), into_object(item), names, lists)?);
            }
            None => merged.push(cleaned(item)),
        }
    }
    normalize_order(merged, &patch, &original, Some(key))
}

/// Orders a merged list: items named in `patch_order` in that order, the others in their
/// original order, interleaved where the original order relates them. As in
/// kube-apiserver, an item new to the list goes before the server-only item it meets, so a
/// patch without `$setElementOrder` prepends its new items.
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    original: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, PatchError> {
    let position = |list: &[Value], item: &Value| -> Result<Option<usize>, PatchError> {
        let wanted = identity(item, key)?;
        for (index, candidate) in list.iter().enumerate() {
            if !is_directive_item(candidate) && identity(candidate, key)? == wanted {
                return Ok(Some(index));
            }
        }
        Ok(None)
    };
    let mut from_patch = Vec::new();
    let mut server_only = Vec::new();
    for item in merged {
        match position(patch_order, &item)? {
            Some(index) => from_patch.push((index, item)),
            None => server_only.push(item),
        }
    }
    from_patch.sort_by_key(|(index, _)| *index);
    let mut server_ranked = Vec::with_capacity(server_only.len());
    for item in server_only {
        server_ranked.push((position(original, &item)?, item));
    }
    server_ranked.sort_by_key(|(index, _)| *index);

    let mut out = Vec::with_capacity(from_patch.len() + server_ranked.len());
    let mut right = from_patch.into_iter().map(|(_, item)| item).peekable();
    let mut left = server_ranked.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((left_index, _)), Some(right_item)) => {
                match (left_index, position(original, right_item)?) {
                    (Some(l), Some(r)) => *l < r,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next().map(|(_, item)| item) } else { right.next() };
        out.extend(next);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch_pod(target: &Value, patch: Value) -> Result<Value, PatchError> {
        let mut out = target.clone();
        strategic_merge_patch(&mut out, &patch, "", "Pod")?;
        Ok(out)
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["f1"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}], "args": ["x", "y"]},
                    {"name": "sidecar", "image": "side:1"},
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "tolerations": [{"key": "k1"}],
            },
        })
    }

    #[test]
    fn strategic_merge_containers_by_name() {
        let out = patch_pod(&pod(), json!({"spec": {"containers": [{"name": "sidecar", "image": "side:2"}, {"name": "new", "image": "n:1"}]}})).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}], "args": ["x", "y"]},
                {"name": "sidecar", "image": "side:2"},
                {"name": "new", "image": "n:1"},
            ])
        );
    }

    #[test]
    fn strategic_merge_nested_env_merges_by_name_and_atomic_args_are_replaced() {
        let out = patch_pod(&pod(), json!({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}], "args": ["z"]}]}}))
            .unwrap();
        // Without $setElementOrder, kube-apiserver puts new items before the server's own.
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["z"]));
    }

    #[test]
    fn strategic_merge_replaces_lists_without_a_strategy() {
        let out = patch_pod(&pod(), json!({"spec": {"tolerations": [{"key": "k2"}]}})).unwrap();
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "k2"}]));
    }

    #[test]
    fn strategic_merge_null_deletes_keys() {
        let out = patch_pod(&pod(), json!({"metadata": {"labels": {"a": null, "c": "3"}}})).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    }

    #[test]
    fn strategic_merge_finalizers_are_a_primitive_set() {
        let out = patch_pod(&pod(), json!({"metadata": {"finalizers": ["f2", "f1"]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f2", "f1"]));
        let out = patch_pod(&pod(), json!({"metadata": {"finalizers": ["f2"]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f2", "f1"]));
        let ordered =
            json!({"metadata": {"$setElementOrder/finalizers": ["f1", "f2"], "finalizers": ["f2"]}});
        let out = patch_pod(&pod(), ordered).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f1", "f2"]));
    }

    #[test]
    fn strategic_merge_delete_from_primitive_list() {
        let mut target = pod();
        target["metadata"]["finalizers"] = json!(["f1", "f2", "f3"]);
        let out =
            patch_pod(&target, json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f2"]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f1", "f3"]));
    }

    #[test]
    fn strategic_merge_patch_delete_removes_a_list_item() {
        let out =
            patch_pod(&pod(), json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}))
                .unwrap();
        let names: Vec<&Value> =
            out["spec"]["containers"].as_array().unwrap().iter().map(|c| &c["name"]).collect();
        assert_eq!(names, vec!["app"]);
    }

    #[test]
    fn strategic_merge_patch_replace_replaces_a_list() {
        let out = patch_pod(
            &pod(),
            json!({"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "only", "image": "o"}]));
    }

    #[test]
    fn strategic_merge_patch_replace_and_delete_in_maps() {
        let out =
            patch_pod(&pod(), json!({"metadata": {"labels": {"z": "9", "$patch": "replace"}}})).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"z": "9"}));
        let out = patch_pod(&pod(), json!({"metadata": {"labels": {"$patch": "delete"}}})).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({}));
        let err = patch_pod(&pod(), json!({"metadata": {"labels": {"$patch": "bogus"}}})).unwrap_err();
        assert!(matches!(err, PatchError::BadRequest(_)));
    }

    #[test]
    fn strategic_merge_retain_keys_clears_unlisted_fields() {
        let mut target = pod();
        target["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        let patch = json!({"spec": {"volumes": [{"name": "data", "hostPath": {"path": "/x"}, "$retainKeys": ["name", "hostPath"]}]}});
        let out = patch_pod(&target, patch).unwrap();
        assert_eq!(out["spec"]["volumes"], json!([{"name": "data", "hostPath": {"path": "/x"}}]));

        let bad = json!({"spec": {"volumes": [{"name": "data", "hostPath": {}, "$retainKeys": ["name"]}]}});
        assert_eq!(
            patch_pod(&target, bad).unwrap_err(),
            PatchError::BadRequest("invalid patch format of retainKeys".into())
        );
    }

    #[test]
    fn strategic_merge_set_element_order_reorders_lists() {
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
            "containers": [{"name": "app", "image": "app:2"}],
        }});
        let out = patch_pod(&pod(), patch).unwrap();
        let images: Vec<&Value> =
            out["spec"]["containers"].as_array().unwrap().iter().map(|c| &c["image"]).collect();
        assert_eq!(images, vec!["side:1", "app:2"]);
        assert!(out["spec"].get("$setElementOrder/containers").is_none());
    }

    #[test]
    fn strategic_merge_set_element_order_must_match_patch_list() {
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}],
            "containers": [{"name": "app", "image": "app:2"}],
        }});
        assert!(matches!(patch_pod(&pod(), patch), Err(PatchError::BadRequest(_))));
    }

    #[test]
    fn strategic_merge_owner_references_merge_by_uid() {
        let mut target = pod();
        target["metadata"]["ownerReferences"] = json!([{"uid": "1", "name": "a"}]);
        let out = patch_pod(&target, json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}))
            .unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "b"}, {"uid": "1", "name": "a"}])
        );
    }

    #[test]
    fn strategic_merge_pod_conditions_merge_by_type() {
        let mut target = pod();
        target["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]});
        let out =
            patch_pod(&target, json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                .unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
    }

    #[test]
    fn strategic_merge_role_binding_subjects_are_replaced() {
        let mut target = json!({"subjects": [{"kind": "User", "name": "a"}], "rules": []});
        let patch = json!({"subjects": [{"kind": "User", "name": "b"}]});
        strategic_merge_patch(&mut target, &patch, "rbac.authorization.k8s.io", "RoleBinding").unwrap();
        assert_eq!(target["subjects"], json!([{"kind": "User", "name": "b"}]));
    }

    #[test]
    fn strategic_merge_on_custom_resource_is_unsupported() {
        let mut target = json!({});
        let err = strategic_merge_patch(&mut target, &json!({}), "kopper.dev", "Widget").unwrap_err();
        assert_eq!(err.status_code(), 415);
        assert_eq!(
            err.to_string(),
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        );
    }

    #[test]
    fn strategic_merge_item_without_merge_key_is_a_bad_request_and_leaves_target_unchanged() {
        let original = pod();
        let mut target = original.clone();
        let err =
            strategic_merge_patch(&mut target, &json!({"spec": {"containers": [{"image": "x"}]}}), "", "Pod")
                .unwrap_err();
        assert!(matches!(err, PatchError::BadRequest(_)), "{err:?}");
        assert_eq!(target, original);
    }

    #[test]
    fn strategic_merge_non_object_patch_is_a_bad_request() {
        let mut target = pod();
        assert!(matches!(
            strategic_merge_patch(&mut target, &json!([]), "", "Pod"),
            Err(PatchError::BadRequest(_))
        ));
    }

    #[test]
    fn strategic_merge_new_values_drop_nulls_and_directives() {
        let out = patch_pod(&pod(), json!({"spec": {"securityContext": {"runAsUser": 1, "fsGroup": null}}}))
            .unwrap();
        assert_eq!(out["spec"]["securityContext"], json!({"runAsUser": 1}));
        let mut target = pod();
        target["spec"].as_object_mut().unwrap().remove("containers");
        let out = patch_pod(
            &target,
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "a"}]));
    }

    #[test]
    fn strategic_merge_service_account_image_pull_secrets_are_replaced_but_secrets_merge() {
        let mut target = json!({"secrets": [{"name": "s1"}], "imagePullSecrets": [{"name": "p1"}]});
        let patch = json!({"secrets": [{"name": "s2"}], "imagePullSecrets": [{"name": "p2"}]});
        strategic_merge_patch(&mut target, &patch, "", "ServiceAccount").unwrap();
        assert_eq!(target["secrets"], json!([{"name": "s2"}, {"name": "s1"}]));
        assert_eq!(target["imagePullSecrets"], json!([{"name": "p2"}]));
    }
}
