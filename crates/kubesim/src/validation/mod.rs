//! Validation of API objects, written as pure functions over `serde_json::Value`.
//!
//! kubesim must reject exactly what kube-apiserver rejects, with the same words, because
//! clients (kubectl, kube-rs, operators under test) branch on the status code, the cause
//! `reason` and sometimes on the message text. Every message here is copied from
//! `k8s.io/apimachinery` (`util/validation`, `api/validation`, `util/validation/field`),
//! `k8s.io/kubernetes/pkg/apis/*/validation`, `k8s.io/apiextensions-apiserver` and
//! `k8s.io/kube-openapi`, and rendered the way Go renders it (`%q`, `%v`, `json.Marshal`).
//!
//! The module is split by subject:
//! - [`names`]: the string rules (DNS labels and subdomains, label keys and values, config keys);
//! - [`objects`]: `metadata` and the built-in kinds kubesim serves (with the private `data`,
//!   `network`, `quota` and `rbac` modules for ConfigMap/Secret, NetworkPolicy,
//!   LimitRange/ResourceQuota and RBAC, and `decode` for 400 errors);
//! - [`schema`]: pruning, defaulting and validation of custom resources against a structural schema;
//! - [`crd`]: validation of CustomResourceDefinitions themselves.

pub mod crd;
pub mod defaults;
pub mod names;
pub mod objects;
pub mod schema;

mod data;
mod decode;
mod network;
mod quota;
mod rbac;
mod render;

use serde_json::Value;

pub use crd::{default_crd, validate_crd, validate_crd_update};
pub use objects::{
    MAX_OBJECT_BYTES, NameRule, apply_builtin_defaults, builtin_decode_error, fold_string_data,
    is_namespaced, kind_for, name_rule, secret_data_decode_error, validate_builtin, validate_builtin_update,
    validate_metadata, validate_metadata_update,
};
pub use schema::prune_default_validate;

/// One entry of `Status.details.causes` in a 422 Invalid response.
///
/// `reason` is the Go `field.ErrorType` (`FieldValueInvalid`, ...), `field` the Go
/// `field.Path` rendering (`spec.template.spec.containers[0].image`, `data[bad key]`) and
/// `message` the Go `ErrorBody()` (everything after `field: ` in the aggregated message).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    /// `field.Required`: "Required value" plus an optional detail.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Self::without_value("FieldValueRequired", "Required value", field, detail)
    }

    /// `field.Forbidden`: "Forbidden" plus a detail.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self::without_value("FieldValueForbidden", "Forbidden", field, detail)
    }

    /// `field.TooLong`: the value itself is never echoed, only the limit in bytes.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        let unit = if max_bytes == 1 { "byte" } else { "bytes" };
        let detail = format!("may not be more than {max_bytes} {unit}");
        Self::without_value("FieldValueTooLong", "Too long", field, &detail)
    }

    /// `field.TooMany`: how many items there are and how many are allowed.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        let detail = format!("must have at most {max} {unit}");
        Self::with_rendered("FieldValueTooMany", "Too many", field, &actual.to_string(), &detail)
    }

    /// `field.Invalid`: the bad value rendered as Go does, then the detail.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self::with_rendered("FieldValueInvalid", "Invalid value", field, &render::bad_value(value), detail)
    }

    /// `field.Invalid` for a string value, the most common case.
    pub fn invalid_str(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self::with_rendered("FieldValueInvalid", "Invalid value", field, &render::go_quote(value), detail)
    }

    /// `field.TypeInvalid`: reads "Invalid value" like `field.Invalid` but has its own reason.
    pub fn type_invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self::with_rendered(
            "FieldValueTypeInvalid",
            "Invalid value",
            field,
            &render::bad_value(value),
            detail,
        )
    }

    /// `field.NotSupported`: lists the supported values, each Go-quoted.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| render::go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::with_rendered(
            "FieldValueNotSupported",
            "Unsupported value",
            field,
            &render::bad_value(value),
            &detail,
        )
    }

    /// `field.Duplicate`: the repeated value, no detail.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self::with_rendered("FieldValueDuplicate", "Duplicate value", field, &render::bad_value(value), "")
    }

    fn without_value(reason: &'static str, title: &str, field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() { title.to_string() } else { format!("{title}: {detail}") };
        Self { reason, field: field.into(), message }
    }

    fn with_rendered(
        reason: &'static str,
        title: &str,
        field: impl Into<String>,
        rendered: &str,
        detail: &str,
    ) -> Self {
        let message = if detail.is_empty() {
            format!("{title}: {rendered}")
        } else {
            format!("{title}: {rendered}: {detail}")
        };
        Self { reason, field: field.into(), message }
    }
}

impl std::fmt::Display for Cause {
    /// Go's `field.Error.Error()`: `<field>: <body>`, even when the field is empty.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// kube-apiserver's Status message for a 422 Invalid, from `errors.NewInvalid`:
/// `ConfigMap "x" is invalid: <cause>` for one cause, `[<cause>, <cause>]` for several.
///
/// `kind` is the qualified kind as Go prints a `GroupKind` (see [`qualified_kind`]).
/// Causes whose rendering repeats an earlier one are dropped, as `ErrorList.ToAggregate` does.
pub fn invalid_message(kind: &str, name: &str, causes: &[Cause]) -> String {
    let head = format!("{kind} {} is invalid", render::go_quote(name));
    let mut seen: Vec<String> = Vec::with_capacity(causes.len());
    for cause in causes {
        let text = cause.to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    match seen.len() {
        0 => head,
        1 => format!("{head}: {}", seen[0]),
        _ => format!("{head}: [{}]", seen.join(", ")),
    }
}

/// Go's `schema.GroupKind.String()`: `Kind` for the core group, `Kind.group` otherwise.
pub fn qualified_kind(group: &str, kind: &str) -> String {
    if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") }
}

/// A field path built the way Go's `field.Path` is, so causes name fields identically:
/// children joined by `.`, map keys and list indexes in brackets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldPath(String);

impl FieldPath {
    /// The empty path, which refers to the whole object.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// A path starting at a top-level field, e.g. `FieldPath::new("metadata")`.
    pub fn new(name: &str) -> Self {
        Self(name.to_string())
    }

    /// `Child`: a named struct field.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() { Self(name.to_string()) } else { Self(format!("{}.{name}", self.0)) }
    }

    /// `Key`: an entry of a map, rendered verbatim in brackets.
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// `Index`: an element of a list.
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<FieldPath> for String {
    fn from(path: FieldPath) -> Self {
        path.0
    }
}

impl From<&FieldPath> for String {
    fn from(path: &FieldPath) -> Self {
        path.0.clone()
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn single_cause_message_has_no_brackets() {
        let causes = [Cause::required("metadata.name", "name or generateName is required")];
        assert_eq!(
            invalid_message("ConfigMap", "x", &causes),
            r#"ConfigMap "x" is invalid: metadata.name: Required value: name or generateName is required"#
        );
    }

    #[test]
    fn several_causes_are_bracketed_and_comma_separated() {
        let causes = [Cause::required("spec.a", ""), Cause::invalid("spec.b", &json!(3), "must be even")];
        assert_eq!(
            invalid_message("Widget.example.com", "w", &causes),
            r#"Widget.example.com "w" is invalid: [spec.a: Required value, spec.b: Invalid value: 3: must be even]"#
        );
    }

    #[test]
    fn repeated_causes_are_reported_once() {
        let cause = Cause::required("spec.a", "");
        let message = invalid_message("Thing", "t", &[cause.clone(), cause]);
        assert_eq!(message, r#"Thing "t" is invalid: spec.a: Required value"#);
    }

    #[test]
    fn whole_object_cause_keeps_the_leading_colon() {
        let message = invalid_message("ConfigMap", "big", &[Cause::too_long("", MAX_OBJECT_BYTES)]);
        assert_eq!(message, r#"ConfigMap "big" is invalid: : Too long: may not be more than 1048576 bytes"#);
    }

    #[test]
    fn qualified_kind_omits_the_core_group() {
        assert_eq!(qualified_kind("", "Secret"), "Secret");
        assert_eq!(qualified_kind("rbac.authorization.k8s.io", "Role"), "Role.rbac.authorization.k8s.io");
    }

    #[test]
    fn field_path_renders_keys_and_indexes_in_brackets() {
        let path = FieldPath::new("spec").child("containers").index(0).child("env").key("a b");
        assert_eq!(path.as_str(), "spec.containers[0].env[a b]");
        assert_eq!(FieldPath::root().child("data").as_str(), "data");
    }

    #[test]
    fn not_supported_lists_quoted_values() {
        let cause = Cause::not_supported("spec.kind", &json!("Foo"), &["ConfigMap", "Secret"]);
        assert_eq!(cause.reason, "FieldValueNotSupported");
        assert_eq!(cause.message, r#"Unsupported value: "Foo": supported values: "ConfigMap", "Secret""#);
    }

    #[test]
    fn too_many_shows_count_and_limit() {
        let cause = Cause::too_many("spec.items", 4, 3);
        assert_eq!(cause.message, "Too many: 4: must have at most 3 items");
    }

    #[test]
    fn cause_serializes_with_kubernetes_field_names() {
        let cause = Cause::required("spec.a", "");
        let value = serde_json::to_value(&cause).unwrap();
        assert_eq!(
            value,
            json!({"reason": "FieldValueRequired", "field": "spec.a", "message": "Required value"})
        );
    }

    #[test]
    fn configmap_status_message_lists_every_bad_key() {
        let cm = json!({"metadata": {"name": "x", "namespace": "d"}, "data": {"a b": "1", "..": "2"}});
        let causes = validate_builtin("", "configmaps", &cm);
        let message = invalid_message(&qualified_kind("", "ConfigMap"), "x", &causes);
        assert!(message.starts_with(
            r#"ConfigMap "x" is invalid: [data[..]: Invalid value: "..": must not be '..', data[a b]: Invalid value: "a b": a valid config key"#
        ));
        assert!(message.ends_with("regex used for validation is '[-._a-zA-Z0-9]+')]"));
    }

    #[test]
    fn custom_resource_gets_metadata_and_schema_causes_in_one_message() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object", "required": ["configMapName"],
            "properties": {"configMapName": {"type": "string"}, "sourceNamespace": {"type": "string"}}
        }}});
        let mut obj = json!({"apiVersion": "kopper.io/v1", "kind": "ConfigMapSync",
            "metadata": {"name": "Sync", "namespace": "d"}, "spec": {"sourceNamespace": 3}});
        let mut causes = validate_metadata(&obj, name_rule("kopper.io", "configmapsyncs"), true);
        causes.extend(prune_default_validate(&schema, &mut obj));
        let message = invalid_message(&qualified_kind("kopper.io", "ConfigMapSync"), "Sync", &causes);
        assert!(message.starts_with(r#"ConfigMapSync.kopper.io "Sync" is invalid: [metadata.name: Invalid value: "Sync": a lowercase RFC 1123 subdomain"#));
        assert!(message.ends_with(
            r#", spec.sourceNamespace: Invalid value: "integer": spec.sourceNamespace in body must be of type string: "integer", spec.configMapName: Required value]"#
        ));
    }
}
