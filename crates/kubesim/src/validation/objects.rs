//! `metadata` and the built-in kinds kubesim serves, as `pkg/apis/*/validation` checks them.
//!
//! The HTTP layer is expected to: fold Secret `stringData` ([`fold_string_data`]), apply
//! [`apply_builtin_defaults`], fill `metadata.namespace` from the URL (and clear it for
//! cluster-scoped kinds) and generate a name from `generateName`, then call
//! [`validate_builtin`] on create and update, plus [`validate_builtin_update`] on update.

use serde_json::{Map, Value, json};

use super::names;
use super::{Cause, FieldPath};

pub use super::decode::{builtin_decode_error, fold_string_data, secret_data_decode_error};

/// The total size limit of ConfigMap and Secret data (`core.MaxSecretSize`).
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;

/// The total size limit of `metadata.annotations`, keys plus values.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

pub(super) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
pub(super) const FIELD_IMMUTABLE: &str = "field is immutable";

/// Which rule a resource's object names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: most kinds, and every custom resource.
    Subdomain,
    /// `NameIsDNSLabel`: namespaces.
    Label,
    /// `ValidatePathSegmentName`: RBAC roles and bindings, whose names hold `:`.
    PathSegment,
}

impl NameRule {
    /// The problems with `name`; `prefix` is true for a `generateName`, which may end in `-`.
    pub fn problems(self, name: &str, prefix: bool) -> Vec<String> {
        match self {
            NameRule::PathSegment if prefix => names::path_segment_prefix(name),
            NameRule::PathSegment => names::path_segment_name(name),
            NameRule::Subdomain | NameRule::Label => {
                let name = if prefix { names::mask_trailing_dash(name) } else { name.to_string() };
                if self == NameRule::Label {
                    names::dns1123_label(&name)
                } else {
                    names::dns1123_subdomain(&name)
                }
            }
        }
    }
}

/// The name rule of a resource, by API group and plural resource name.
pub fn name_rule(group: &str, resource: &str) -> NameRule {
    match (group, resource) {
        ("", "namespaces") => NameRule::Label,
        (RBAC_GROUP, "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings") => {
            NameRule::PathSegment
        }
        _ => NameRule::Subdomain,
    }
}

/// The kind of a built-in resource kubesim serves, `None` for anything else.
pub fn kind_for(group: &str, resource: &str) -> Option<&'static str> {
    let kind = match (group, resource) {
        ("", "namespaces") => "Namespace",
        ("", "configmaps") => "ConfigMap",
        ("", "secrets") => "Secret",
        ("", "pods") => "Pod",
        ("", "serviceaccounts") => "ServiceAccount",
        ("", "events") | ("events.k8s.io", "events") => "Event",
        (RBAC_GROUP, "roles") => "Role",
        (RBAC_GROUP, "clusterroles") => "ClusterRole",
        (RBAC_GROUP, "rolebindings") => "RoleBinding",
        (RBAC_GROUP, "clusterrolebindings") => "ClusterRoleBinding",
        ("coordination.k8s.io", "leases") => "Lease",
        ("apiextensions.k8s.io", "customresourcedefinitions") => "CustomResourceDefinition",
        ("", "limitranges") => "LimitRange",
        ("", "resourcequotas") => "ResourceQuota",
        ("networking.k8s.io", "networkpolicies") => "NetworkPolicy",
        _ => return None,
    };
    Some(kind)
}

/// Whether a built-in resource is namespaced; custom resources follow their CRD's scope.
pub fn is_namespaced(group: &str, resource: &str) -> bool {
    !matches!(
        (group, resource),
        ("", "namespaces")
            | (RBAC_GROUP, "clusterroles" | "clusterrolebindings")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
    )
}

pub(super) fn str_at<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(value, |v, key| v.get(*key)).and_then(Value::as_str).unwrap_or_default()
}

pub(super) fn map_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    path.iter().try_fold(value, |v, key| v.get(*key)).and_then(Value::as_object)
}

pub(super) fn list_at<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

pub(super) fn sorted_keys(map: &Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys
}

/// `ValidateObjectMeta` on create: name (or generateName), namespace, generation, labels,
/// annotations, ownerReferences and finalizers.
///
/// A missing name is accepted when `generateName` is set, because the apiserver generates the
/// name before validating. The namespace of a cluster-scoped object is not checked: the
/// apiserver clears it before validation.
pub fn validate_metadata(obj: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let meta = FieldPath::new("metadata");
    let mut causes = name_causes(obj, rule, &meta);
    if namespaced {
        let namespace = str_at(obj, &["metadata", "namespace"]);
        if namespace.is_empty() {
            causes.push(Cause::required(meta.child("namespace"), ""));
        } else {
            let problems = NameRule::Label.problems(namespace, false);
            causes.extend(problems.iter().map(|m| Cause::invalid_str(meta.child("namespace"), namespace, m)));
        }
    }
    if let Some(generation) = obj.get("metadata").and_then(|m| m.get("generation")).and_then(Value::as_i64)
        && generation < 0
    {
        causes.push(Cause::invalid(
            meta.child("generation"),
            &json!(generation),
            "must be greater than or equal to 0",
        ));
    }
    causes.extend(label_causes(obj, &meta.child("labels")));
    causes.extend(annotation_causes(obj, &meta.child("annotations")));
    causes.extend(owner_reference_causes(obj, &meta.child("ownerReferences")));
    causes.extend(finalizer_causes(obj, &meta.child("finalizers")));
    causes
}

fn name_causes(obj: &Value, rule: NameRule, meta: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let generate_name = str_at(obj, &["metadata", "generateName"]);
    if !generate_name.is_empty() {
        let problems = rule.problems(generate_name, true);
        causes.extend(
            problems.iter().map(|m| Cause::invalid_str(meta.child("generateName"), generate_name, m)),
        );
    }
    let name = str_at(obj, &["metadata", "name"]);
    if name.is_empty() {
        if generate_name.is_empty() {
            causes.push(Cause::required(meta.child("name"), "name or generateName is required"));
        }
    } else {
        causes.extend(
            rule.problems(name, false).iter().map(|m| Cause::invalid_str(meta.child("name"), name, m)),
        );
    }
    causes
}

/// `ValidateLabels`: every problem is reported at `metadata.labels`, not at the key.
fn label_causes(obj: &Value, path: &FieldPath) -> Vec<Cause> {
    let Some(labels) = map_at(obj, &["metadata", "labels"]) else { return Vec::new() };
    let mut causes = Vec::new();
    for key in sorted_keys(labels) {
        causes.extend(names::qualified_name(key).iter().map(|m| Cause::invalid_str(path, key, m)));
        let value = labels[key].as_str().unwrap_or_default();
        causes.extend(names::label_value(value).iter().map(|m| Cause::invalid_str(path, value, m)));
    }
    causes
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitive), total size ≤ 256 KiB.
fn annotation_causes(obj: &Value, path: &FieldPath) -> Vec<Cause> {
    let Some(annotations) = map_at(obj, &["metadata", "annotations"]) else { return Vec::new() };
    let mut causes = Vec::new();
    let mut total = 0;
    for key in sorted_keys(annotations) {
        let problems = names::qualified_name(&key.to_lowercase());
        causes.extend(problems.iter().map(|m| Cause::invalid_str(path, key, m)));
        total += key.len() + annotations[key].as_str().map_or(0, str::len);
    }
    if total > MAX_ANNOTATIONS_BYTES {
        causes.push(Cause::too_long(path, MAX_ANNOTATIONS_BYTES));
    }
    causes
}

/// `ValidateOwnerReferences`: each reference complete, at most one controller, no Event owners.
fn owner_reference_causes(obj: &Value, path: &FieldPath) -> Vec<Cause> {
    let refs = list_at(obj, &["metadata", "ownerReferences"]);
    let mut causes = Vec::new();
    let mut first_controller: Option<String> = None;
    for owner in refs {
        causes.extend(owner_reference_fields(owner, path));
        if owner.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", str_at(owner, &["kind"]), str_at(owner, &["name"]));
            match &first_controller {
                Some(first) => causes.push(Cause::invalid(
                    path,
                    &Value::Array(refs.to_vec()),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    causes
}

fn owner_reference_fields(owner: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let api_version = str_at(owner, &["apiVersion"]);
    let kind = str_at(owner, &["kind"]);
    let (group, version) = match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => ("", *version),
        [group, version] => (*group, *version),
        _ => ("", ""),
    };
    if version.is_empty() {
        causes.push(Cause::invalid_str(path.child("apiVersion"), api_version, "version must not be empty"));
    }
    for field in ["kind", "name", "uid"] {
        let value = str_at(owner, &[field]);
        if value.is_empty() {
            causes.push(Cause::invalid_str(path.child(field), value, "must not be empty"));
        }
    }
    if group.is_empty() && version == "v1" && kind == "Event" {
        causes.push(Cause::invalid(path, owner, "/v1, Kind=Event is disallowed from being an owner"));
    }
    causes
}

/// `ValidateFinalizers`: qualified names, and not both orphan and foreground deletion.
fn finalizer_causes(obj: &Value, path: &FieldPath) -> Vec<Cause> {
    let finalizers = list_at(obj, &["metadata", "finalizers"]);
    let mut causes = Vec::new();
    for finalizer in finalizers.iter().filter_map(Value::as_str) {
        causes
            .extend(names::qualified_name(finalizer).iter().map(|m| Cause::invalid_str(path, finalizer, m)));
    }
    let has = |name: &str| finalizers.iter().any(|f| f.as_str() == Some(name));
    if has("orphan") && has("foregroundDeletion") {
        causes.push(Cause::invalid(
            path,
            &Value::Array(finalizers.to_vec()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    causes
}

/// `ValidateObjectMetaUpdate`: identity fields are immutable, and no finalizer may be added
/// once deletion has started.
pub fn validate_metadata_update(old: &Value, new: &Value) -> Vec<Cause> {
    let meta = FieldPath::new("metadata");
    let mut causes = Vec::new();
    if !str_at(old, &["metadata", "deletionTimestamp"]).is_empty() {
        let old_finalizers = list_at(old, &["metadata", "finalizers"]);
        let mut added: Vec<&str> = list_at(new, &["metadata", "finalizers"])
            .iter()
            .filter(|f| !old_finalizers.contains(*f))
            .filter_map(Value::as_str)
            .collect();
        added.sort_unstable();
        added.dedup();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| super::render::go_quote(f)).collect();
            causes.push(Cause::forbidden(
                meta.child("finalizers"),
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    listed.join(", ")
                ),
            ));
        }
    }
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        let (before, after) = (str_at(old, &["metadata", field]), str_at(new, &["metadata", field]));
        if before != after {
            causes.push(Cause::invalid_str(meta.child(field), after, FIELD_IMMUTABLE));
        }
    }
    causes
}

/// Defaults kube-apiserver applies to built-ins before validation: Secret `type: Opaque`,
/// the RBAC subject `apiGroup`, NetworkPolicy and LimitRange defaults ([`super::defaults`]),
/// and the CRD defaults of [`super::default_crd`].
pub fn apply_builtin_defaults(group: &str, resource: &str, obj: &mut Value) {
    match (group, resource) {
        ("", "secrets") => {
            if let Some(root) = obj.as_object_mut()
                && root.get("type").and_then(Value::as_str).unwrap_or_default().is_empty()
            {
                root.insert("type".to_string(), json!("Opaque"));
            }
        }
        (RBAC_GROUP, "rolebindings" | "clusterrolebindings") => super::rbac::default_subject_api_groups(obj),
        ("networking.k8s.io", "networkpolicies") => super::defaults::network_policy(obj),
        ("", "limitranges") => super::defaults::limit_range(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => super::default_crd(obj),
        _ => {}
    }
}

/// Validation of a built-in object on create and on update (`ValidateX`), metadata included.
/// Resources kubesim does not model get metadata validation only.
pub fn validate_builtin(group: &str, resource: &str, obj: &Value) -> Vec<Cause> {
    if (group, resource) == ("apiextensions.k8s.io", "customresourcedefinitions") {
        return super::validate_crd(obj);
    }
    let mut causes = validate_metadata(obj, name_rule(group, resource), is_namespaced(group, resource));
    causes.extend(match (group, resource) {
        ("", "configmaps") => super::data::config_map_causes(obj),
        ("", "secrets") => super::data::secret_causes(obj),
        ("", "pods") => pod_causes(obj),
        ("events.k8s.io", "events") => event_causes(obj),
        (RBAC_GROUP, "roles") => super::rbac::policy_rule_causes(obj, true),
        (RBAC_GROUP, "clusterroles") => super::rbac::policy_rule_causes(obj, false),
        (RBAC_GROUP, "rolebindings") => super::rbac::role_binding_causes(obj, true),
        (RBAC_GROUP, "clusterrolebindings") => super::rbac::role_binding_causes(obj, false),
        ("coordination.k8s.io", "leases") => lease_causes(obj),
        ("networking.k8s.io", "networkpolicies") => super::network::network_policy_causes(obj),
        ("", "limitranges") => super::quota::limit_range_causes(obj),
        ("", "resourcequotas") => super::quota::resource_quota_causes(obj),
        _ => Vec::new(),
    });
    causes
}

/// The transition rules of an update (`ValidateXUpdate` minus the `ValidateX` part, which
/// [`validate_builtin`] covers): immutable identity, immutable ConfigMaps and Secrets,
/// Secret `type`, binding `roleRef`, CRD group and names.
pub fn validate_builtin_update(group: &str, resource: &str, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = validate_metadata_update(old, new);
    causes.extend(match (group, resource) {
        ("", "configmaps") => super::data::immutable_data_causes(old, new, &["data", "binaryData"]),
        ("", "secrets") => super::data::secret_update_causes(old, new),
        (RBAC_GROUP, "rolebindings" | "clusterrolebindings") => super::rbac::role_ref_update_causes(old, new),
        ("apiextensions.k8s.io", "customresourcedefinitions") => super::validate_crd_update(old, new),
        _ => Vec::new(),
    });
    causes
}

/// `ValidatePodSpec`, lightly: at least one container, each named (DNS label, unique) with an image.
fn pod_causes(obj: &Value) -> Vec<Cause> {
    let path = FieldPath::new("spec").child("containers");
    let containers = list_at(obj, &["spec", "containers"]);
    if containers.is_empty() {
        return vec![Cause::required(path, "")];
    }
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        let item = path.index(i);
        let name = str_at(container, &["name"]);
        if name.is_empty() {
            causes.push(Cause::required(item.child("name"), ""));
        } else {
            causes.extend(
                names::dns1123_label(name).iter().map(|m| Cause::invalid_str(item.child("name"), name, m)),
            );
            if seen.contains(&name) {
                causes.push(Cause::duplicate(item.child("name"), &json!(name)));
            }
            seen.push(name);
        }
        if str_at(container, &["image"]).is_empty() {
            causes.push(Cause::required(item.child("image"), ""));
        }
    }
    causes
}

/// `ValidateEventCreate` for events.k8s.io/v1: the fields kube-rs' recorder fills.
fn event_causes(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if str_at(obj, &["eventTime"]).is_empty() {
        causes.push(Cause::required("eventTime", ""));
    }
    let event_type = str_at(obj, &["type"]);
    if event_type != "Normal" && event_type != "Warning" {
        causes.push(Cause::invalid_str("type", "", &format!("has invalid value: {event_type}")));
    }
    for field in ["reportingController", "reportingInstance", "action", "reason"] {
        if str_at(obj, &[field]).is_empty() {
            causes.push(Cause::required(field, ""));
        }
    }
    causes
}

/// `ValidateLeaseSpec`: a positive duration and non-negative transitions.
fn lease_causes(obj: &Value) -> Vec<Cause> {
    let spec = FieldPath::new("spec");
    let mut causes = Vec::new();
    if let Some(duration) =
        obj.get("spec").and_then(|s| s.get("leaseDurationSeconds")).and_then(Value::as_i64)
        && duration <= 0
    {
        causes.push(Cause::invalid(
            spec.child("leaseDurationSeconds"),
            &json!(duration),
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = obj.get("spec").and_then(|s| s.get("leaseTransitions")).and_then(Value::as_i64)
        && transitions < 0
    {
        causes.push(Cause::invalid(
            spec.child("leaseTransitions"),
            &json!(transitions),
            "must be greater than or equal to 0",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn missing_name_and_generate_name_is_required() {
        let causes = validate_metadata(&json!({"metadata": {}}), NameRule::Subdomain, false);
        assert_eq!(
            messages(&causes),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
    }

    #[test]
    fn generate_name_alone_is_enough_and_may_end_in_dash() {
        let obj = json!({"metadata": {"generateName": "web-", "namespace": "ns"}});
        assert!(validate_metadata(&obj, NameRule::Subdomain, true).is_empty());
    }

    #[test]
    fn uppercase_name_is_not_a_subdomain() {
        let causes = validate_metadata(&json!({"metadata": {"name": "Foo"}}), NameRule::Subdomain, false);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].to_string().starts_with(
            "metadata.name: Invalid value: \"Foo\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
        ));
    }

    #[test]
    fn namespaced_object_without_namespace_is_rejected() {
        let causes = validate_metadata(&json!({"metadata": {"name": "a"}}), NameRule::Subdomain, true);
        assert_eq!(messages(&causes), vec!["metadata.namespace: Required value"]);
    }

    #[test]
    fn namespace_name_must_be_a_label() {
        let causes = validate_builtin("", "namespaces", &json!({"metadata": {"name": "a.b"}}));
        assert_eq!(messages(&causes), vec!["metadata.name: Invalid value: \"a.b\": must not contain dots"]);
    }

    #[test]
    fn rbac_names_may_contain_colons_but_not_slashes() {
        let ok = json!({"metadata": {"name": "system:reader"}, "rules": []});
        assert!(validate_builtin(RBAC_GROUP, "clusterroles", &ok).is_empty());
        let bad = json!({"metadata": {"name": "a/b"}, "rules": []});
        let causes = validate_builtin(RBAC_GROUP, "clusterroles", &bad);
        assert_eq!(messages(&causes), vec!["metadata.name: Invalid value: \"a/b\": may not contain '/'"]);
    }

    #[test]
    fn bad_label_key_and_value_are_reported_at_labels() {
        let obj = json!({"metadata": {"name": "a", "labels": {"ok": "-bad", "a/b/c": "v"}}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(causes.len(), 2);
        assert!(causes.iter().all(|c| c.field == "metadata.labels"));
        assert!(causes[0].message.starts_with("Invalid value: \"a/b/c\": a valid label key"));
        assert!(
            causes[1].message.starts_with("Invalid value: \"-bad\": a valid label must be an empty string")
        );
    }

    #[test]
    fn oversized_annotations_are_too_long() {
        let obj = json!({"metadata": {"name": "a", "annotations": {"k": "x".repeat(MAX_ANNOTATIONS_BYTES)}}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(
            messages(&causes),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn annotation_keys_are_case_insensitive_qualified_names() {
        let obj = json!({"metadata": {"name": "a", "annotations": {"Example.COM/Key": "v", "bad key": ""}}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0].to_string().starts_with("metadata.annotations: Invalid value: \"bad key\": name part")
        );
    }

    #[test]
    fn incomplete_owner_reference_names_each_missing_field() {
        let obj = json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "", "kind": "", "name": "", "uid": ""}]}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(
            messages(&causes),
            vec![
                "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty",
                "metadata.ownerReferences.kind: Invalid value: \"\": must not be empty",
                "metadata.ownerReferences.name: Invalid value: \"\": must not be empty",
                "metadata.ownerReferences.uid: Invalid value: \"\": must not be empty",
            ]
        );
    }

    #[test]
    fn two_controller_owner_references_are_rejected() {
        let owner = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": "u", "controller": true});
        let obj = json!({"metadata": {"name": "a", "ownerReferences": [owner("x"), owner("y")]}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ConfigMap/x and ConfigMap/y"
        ));
    }

    #[test]
    fn invalid_finalizer_name_is_rejected() {
        let obj = json!({"metadata": {"name": "a", "finalizers": ["example.com/ok", "not ok"]}});
        let causes = validate_metadata(&obj, NameRule::Subdomain, false);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.finalizers");
    }

    #[test]
    fn finalizers_cannot_be_added_while_deleting() {
        let old = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a/x"]}});
        let new = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a/x", "b/y"]}});
        assert_eq!(
            messages(&validate_metadata_update(&old, &new)),
            vec![
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b/y\"}"
            ]
        );
        let removed = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z"}});
        assert!(validate_metadata_update(&old, &removed).is_empty());
    }

    #[test]
    fn renaming_on_update_is_rejected() {
        let causes = validate_metadata_update(
            &json!({"metadata": {"name": "a"}}),
            &json!({"metadata": {"name": "b"}}),
        );
        assert_eq!(messages(&causes), vec!["metadata.name: Invalid value: \"b\": field is immutable"]);
    }

    #[test]
    fn lease_duration_must_be_positive() {
        let lease = json!({"metadata": {"name": "l", "namespace": "n"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
        assert_eq!(
            messages(&validate_builtin("coordination.k8s.io", "leases", &lease)),
            vec![
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
    }

    #[test]
    fn pod_needs_named_containers_with_images() {
        let empty = json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {"containers": []}});
        assert_eq!(messages(&validate_builtin("", "pods", &empty)), vec!["spec.containers: Required value"]);
        let pod = json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a"}]}});
        assert_eq!(
            messages(&validate_builtin("", "pods", &pod)),
            vec![
                "spec.containers[1].name: Duplicate value: \"a\"",
                "spec.containers[1].image: Required value"
            ]
        );
    }

    #[test]
    fn events_need_reporting_fields() {
        let event = json!({"metadata": {"name": "e", "namespace": "n"}, "eventTime": "2024-01-01T00:00:00.000000Z", "type": "Normal",
            "reportingController": "kopper", "reportingInstance": "kopper-0", "action": "Reconcile", "reason": "Synced"});
        assert!(validate_builtin("events.k8s.io", "events", &event).is_empty());
        let mut bad = event.clone();
        bad["type"] = json!("Info");
        assert_eq!(
            messages(&validate_builtin("events.k8s.io", "events", &bad)),
            vec!["type: Invalid value: \"\": has invalid value: Info"]
        );
    }

    #[test]
    fn name_rules_follow_the_resource() {
        assert_eq!(name_rule("", "namespaces"), NameRule::Label);
        assert_eq!(name_rule(RBAC_GROUP, "rolebindings"), NameRule::PathSegment);
        assert_eq!(name_rule("", "configmaps"), NameRule::Subdomain);
        assert_eq!(name_rule("example.com", "widgets"), NameRule::Subdomain);
    }
}
