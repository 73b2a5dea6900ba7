//! RFC 6902 JSON patch (`application/json-patch+json`).

use serde_json::Value;

use super::PatchError;
use super::error::UNPROCESSABLE_MESSAGE;

/// Applies an RFC 6902 JSON patch atomically: on error `target` is left unchanged.
///
/// A document that is not a list of operations is a 400 carrying the decode error; an
/// operation that cannot be applied (failed `test`, missing path) is a 422 whose message is
/// the apiserver's generic one, because kube-apiserver drops the underlying text.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|err| PatchError::BadRequest(format!("error decoding patch: {err}")))?;
    let mut patched = target.clone();
    for operation in operations.0 {
        if is_null_test_of_absent_field(&patched, &operation) {
            continue;
        }
        json_patch::patch(&mut patched, std::slice::from_ref(&operation)).map_err(|err| {
            tracing::debug!(operation = err.operation, path = %err.path, kind = %err.kind, "json patch rejected");
            PatchError::Invalid(UNPROCESSABLE_MESSAGE.into())
        })?;
    }
    *target = patched;
    Ok(())
}

/// kube-apiserver's JSON patch (evanphx/json-patch) passes a `test` for `null` on a field
/// that is absent from an existing parent; the RFC-strict crate fails it. kube-runtime's
/// finalizer helper relies on this to add the first finalizer.
fn is_null_test_of_absent_field(doc: &Value, operation: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(test) = operation else { return false };
    if !test.value.is_null() {
        return false;
    }
    let path = test.path.to_string();
    let Some((parent, _)) = path.rsplit_once('/') else { return false };
    doc.pointer(&path).is_none() && doc.pointer(parent).is_some_and(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_applies_operations_in_order() {
        let mut target = json!({"metadata": {"labels": {"a": "1"}}, "data": {}});
        let patch = json!([
            {"op": "add", "path": "/data/k", "value": "v"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            {"op": "copy", "from": "/data/k", "path": "/data/k2"},
            {"op": "remove", "path": "/data/k"},
        ]);
        json_patch(&mut target, &patch).unwrap();
        assert_eq!(target, json!({"metadata": {"labels": {"a": "2"}}, "data": {"k2": "v"}}));
    }

    #[test]
    fn json_patch_test_failure_is_invalid_and_leaves_target_unchanged() {
        let original = json!({"data": {"k": "v"}});
        let mut target = original.clone();
        let patch = json!([
            {"op": "add", "path": "/data/x", "value": "y"},
            {"op": "test", "path": "/data/k", "value": "other"},
        ]);
        let err = json_patch(&mut target, &patch).unwrap_err();
        assert_eq!(err, PatchError::Invalid(UNPROCESSABLE_MESSAGE.into()));
        assert_eq!(err.status_code(), 422);
        assert_eq!(target, original);
    }

    #[test]
    fn testing_an_absent_field_for_null_passes_as_in_kube_apiserver() {
        let mut target = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        json_patch(&mut target, &patch).unwrap();
        assert_eq!(target["metadata"]["finalizers"], json!(["f"]));
        let under_missing_parent = json!([{"op": "test", "path": "/spec/x", "value": null}]);
        assert!(json_patch(&mut target, &under_missing_parent).is_err());
    }

    #[test]
    fn json_patch_on_missing_path_is_invalid() {
        let mut target = json!({"data": {}});
        let err = json_patch(&mut target, &json!([{"op": "remove", "path": "/data/missing"}])).unwrap_err();
        assert_eq!(err.status_code(), 422);
    }

    #[test]
    fn malformed_json_patch_is_a_bad_request() {
        let mut target = json!({});
        for patch in
            [json!({"op": "add"}), json!([{"op": "frobnicate", "path": "/a"}]), json!([{"path": "/a"}])]
        {
            let err = json_patch(&mut target, &patch).unwrap_err();
            assert!(matches!(err, PatchError::BadRequest(_)), "{patch}: {err:?}");
        }
    }
}
