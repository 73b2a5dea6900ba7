//! RFC 7386 JSON merge patch (`application/merge-patch+json`).

use serde_json::Value;

use super::PatchError;

/// Applies an RFC 7386 merge patch: objects merge key by key, `null` deletes a key, and
/// anything else (including arrays) replaces the target value.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Rejects merge patches kube-apiserver refuses before applying them.
///
/// A patch that is not a JSON object would replace the whole object, which the apiserver
/// turns into a 400 (`Invalid JSON Patch` from evanphx/json-patch for `null`, a decode error
/// for other shapes).
pub fn check_merge_patch(patch: &Value) -> Result<(), PatchError> {
    if patch.is_object() { Ok(()) } else { Err(PatchError::BadRequest("Invalid JSON Patch".into())) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_merges_objects_and_deletes_nulls() {
        let mut target = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}});
        merge_patch(&mut target, &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "data": {"k": "w"}}));
        assert_eq!(target, json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "data": {"k": "w"}}));
    }

    #[test]
    fn merge_patch_replaces_lists_wholesale() {
        let mut target = json!({"metadata": {"finalizers": ["a", "b"]}});
        merge_patch(&mut target, &json!({"metadata": {"finalizers": ["c"]}}));
        assert_eq!(target, json!({"metadata": {"finalizers": ["c"]}}));
    }

    #[test]
    fn merge_patch_drops_nulls_inside_new_objects() {
        let mut target = json!({});
        merge_patch(&mut target, &json!({"spec": {"a": 1, "b": null}}));
        assert_eq!(target, json!({"spec": {"a": 1}}));
    }

    #[test]
    fn non_object_merge_patch_is_a_bad_request() {
        assert!(check_merge_patch(&json!({"a": 1})).is_ok());
        assert_eq!(check_merge_patch(&Value::Null), Err(PatchError::BadRequest("Invalid JSON Patch".into())));
        assert!(matches!(check_merge_patch(&json!([1])), Err(PatchError::BadRequest(_))));
    }
}
