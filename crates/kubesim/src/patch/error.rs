//! Patch errors and their rendering as kube-apiserver `Status` objects.

use serde_json::{Value, json};

/// Message kube-apiserver gives for a JSON patch whose operations cannot be applied
/// (`errors.NewGenericServerResponse(422, ...)` discards the underlying text).
pub(crate) const UNPROCESSABLE_MESSAGE: &str =
    "the server rejected our request due to an error in our request";

/// Why a patch could not be applied; each variant maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document is malformed (HTTP 400, reason `BadRequest`).
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well formed but cannot be applied to this object (HTTP 422, reason `Invalid`).
    #[error("{0}")]
    Invalid(String),
    /// The patch type is not served for this resource (HTTP 415, reason `UnsupportedMediaType`).
    #[error("{0}")]
    Unsupported(String),
    /// Server-side apply would change fields other managers own (HTTP 409, reason `Conflict`).
    #[error("{}", conflict_message(.0))]
    Conflict(Vec<FieldConflict>),
}

/// One field another manager owns with a different value than the one being applied.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldConflict {
    /// The other manager's name, e.g. `kubectl-edit`.
    pub manager: String,
    /// The contested field in structured-merge-diff notation, e.g. `.data.key` or
    /// `.spec.containers[name="app"].image`.
    pub field: String,
    /// For managers that wrote with an update (not an apply): the apiVersion they used.
    /// kube-apiserver names such managers `"mgr" using v1`.
    pub update_api_version: Option<String>,
    /// The subresource the other manager wrote through, if any.
    pub subresource: Option<String>,
}

impl FieldConflict {
    /// The manager as kube-apiserver prints it in conflict messages:
    /// `"mgr"`, `"mgr" using v1` or `"mgr" with subresource "status" using v1`.
    pub fn describe_manager(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if let Some(subresource) = &self.subresource {
            out.push_str(&format!(" with subresource {subresource:?}"));
        }
        if let Some(api_version) = &self.update_api_version {
            out.push_str(&format!(" using {api_version}"));
        }
        out
    }
}

/// Renders conflicts the way structured-merge-diff's field manager does.
fn conflict_message(conflicts: &[FieldConflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.describe_manager(),
            only.field
        );
    }
    let mut sorted: Vec<&FieldConflict> = conflicts.iter().collect();
    sorted.sort_by_key(|c| (c.describe_manager(), c.field.clone()));
    let mut lines = Vec::new();
    let mut current_manager: Option<String> = None;
    for conflict in sorted {
        let manager = conflict.describe_manager();
        if current_manager.as_deref() != Some(manager.as_str()) {
            lines.push(format!("conflicts with {manager}"));
            current_manager = Some(manager);
        }
        lines.push(format!("- {}", conflict.field));
    }
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

impl PatchError {
    /// The HTTP status code kube-apiserver answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
            PatchError::Unsupported(_) => 415,
            PatchError::Conflict(_) => 409,
        }
    }

    /// The `reason` of the `Status` object.
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Invalid(_) => "Invalid",
            PatchError::Unsupported(_) => "UnsupportedMediaType",
            PatchError::Conflict(_) => "Conflict",
        }
    }

    /// The `details.causes` of the `Status` object: one `FieldManagerConflict` per conflict.
    pub fn causes(&self) -> Vec<Value> {
        match self {
            PatchError::Conflict(conflicts) => conflicts
                .iter()
                .map(|c| {
                    json!({
                        "reason": "FieldManagerConflict",
                        "message": format!("conflict with {}", c.describe_manager()),
                        "field": c.field,
                    })
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The complete `metav1.Status` body kube-apiserver sends for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.status_code(),
        });
        match self {
            PatchError::Conflict(_) => status["details"] = json!({ "causes": self.causes() }),
            PatchError::Invalid(_) => status["details"] = json!({}),
            PatchError::BadRequest(_) | PatchError::Unsupported(_) => {}
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict(manager: &str, field: &str, update_api_version: Option<&str>) -> FieldConflict {
        FieldConflict {
            manager: manager.into(),
            field: field.into(),
            update_api_version: update_api_version.map(Into::into),
            subresource: None,
        }
    }

    #[test]
    fn single_conflict_renders_like_kube_apiserver() {
        let err = PatchError::Conflict(vec![conflict("mgr", ".data.key", Some("v1"))]);
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "mgr" using v1: .data.key"#
        );
        let status = err.to_status();
        assert_eq!(status["code"], 409);
        assert_eq!(status["reason"], "Conflict");
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "FieldManagerConflict", "message": "conflict with \"mgr\" using v1", "field": ".data.key"}])
        );
    }

    #[test]
    fn applier_conflicts_name_the_manager_without_version() {
        let err = PatchError::Conflict(vec![conflict("other", ".spec.x", None)]);
        assert_eq!(err.to_string(), r#"Apply failed with 1 conflict: conflict with "other": .spec.x"#);
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let err = PatchError::Conflict(vec![
            conflict("b", ".data.y", None),
            conflict("a", ".data.x", Some("v1")),
            conflict("b", ".data.z", None),
        ]);
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"a\" using v1\n- .data.x\nconflicts with \"b\"\n- .data.y\n- .data.z"
        );
        assert_eq!(err.causes().len(), 3);
    }

    #[test]
    fn subresource_managers_are_named_with_their_subresource() {
        let mut c = conflict("ctl", ".status.phase", Some("v1"));
        c.subresource = Some("status".into());
        assert_eq!(c.describe_manager(), r#""ctl" with subresource "status" using v1"#);
    }

    #[test]
    fn status_codes_and_reasons_match_the_variant() {
        let cases = [
            (PatchError::BadRequest("x".into()), 400, "BadRequest"),
            (PatchError::Invalid("x".into()), 422, "Invalid"),
            (PatchError::Unsupported("x".into()), 415, "UnsupportedMediaType"),
        ];
        for (err, code, reason) in cases {
            let status = err.to_status();
            assert_eq!(status["code"], code);
            assert_eq!(status["reason"], reason);
            assert_eq!(status["message"], "x");
        }
    }
}
