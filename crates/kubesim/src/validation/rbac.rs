//! RBAC: policy rules of Roles and ClusterRoles, roleRef and subjects of bindings.

use serde_json::{Value, json};

use super::objects::{RBAC_GROUP, list_at, str_at};
use super::{Cause, FieldPath, names};

/// `SetDefaults_Subject`: User and Group subjects without an `apiGroup` get the RBAC group.
pub(super) fn default_subject_api_groups(obj: &mut Value) {
    let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) else { return };
    for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
        let kind = subject.get("kind").and_then(Value::as_str).unwrap_or_default();
        let has_group = subject.get("apiGroup").and_then(Value::as_str).is_some_and(|g| !g.is_empty());
        if !has_group && matches!(kind, "User" | "Group") {
            subject.insert("apiGroup".to_string(), json!(RBAC_GROUP));
        }
    }
}

/// `ValidatePolicyRule` for every rule of a Role or ClusterRole.
pub(super) fn policy_rule_causes(obj: &Value, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, rule) in list_at(obj, &["rules"]).iter().enumerate() {
        let path = FieldPath::new("rules").index(i);
        if list_at(rule, &["verbs"]).is_empty() {
            causes.push(Cause::required(path.child("verbs"), "verbs must contain at least one value"));
        }
        let urls = list_at(rule, &["nonResourceURLs"]);
        if !urls.is_empty() {
            let urls_value = Value::Array(urls.to_vec());
            if namespaced {
                causes.push(Cause::invalid(
                    path.child("nonResourceURLs"),
                    &urls_value,
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            let has_resources =
                ["apiGroups", "resources", "resourceNames"].iter().any(|f| !list_at(rule, &[*f]).is_empty());
            if has_resources {
                causes.push(Cause::invalid(
                    path.child("nonResourceURLs"),
                    &urls_value,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if list_at(rule, &["apiGroups"]).is_empty() {
            causes.push(Cause::required(
                path.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if list_at(rule, &["resources"]).is_empty() {
            causes.push(Cause::required(
                path.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    causes
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding`: roleRef and subjects.
pub(super) fn role_binding_causes(obj: &Value, namespaced: bool) -> Vec<Cause> {
    let role_ref = FieldPath::new("roleRef");
    let mut causes = Vec::new();
    let api_group = str_at(obj, &["roleRef", "apiGroup"]);
    if api_group != RBAC_GROUP {
        causes.push(Cause::not_supported(role_ref.child("apiGroup"), &json!(api_group), &[RBAC_GROUP]));
    }
    let kind = str_at(obj, &["roleRef", "kind"]);
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !kinds.contains(&kind) {
        causes.push(Cause::not_supported(role_ref.child("kind"), &json!(kind), kinds));
    }
    let name = str_at(obj, &["roleRef", "name"]);
    if name.is_empty() {
        causes.push(Cause::required(role_ref.child("name"), ""));
    } else {
        let problems = names::path_segment_name(name);
        causes.extend(problems.iter().map(|m| Cause::invalid_str(role_ref.child("name"), name, m)));
    }
    for (i, subject) in list_at(obj, &["subjects"]).iter().enumerate() {
        causes.extend(subject_causes(subject, namespaced, &FieldPath::new("subjects").index(i)));
    }
    causes
}

/// `ValidateRoleBindingSubject`.
fn subject_causes(subject: &Value, namespaced: bool, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = str_at(subject, &["name"]);
    if name.is_empty() {
        causes.push(Cause::required(path.child("name"), ""));
    }
    let api_group = str_at(subject, &["apiGroup"]);
    match str_at(subject, &["kind"]) {
        "ServiceAccount" => {
            if !name.is_empty() {
                let problems = names::dns1123_subdomain(name);
                causes.extend(problems.iter().map(|m| Cause::invalid_str(path.child("name"), name, m)));
            }
            if !api_group.is_empty() {
                causes.push(Cause::not_supported(path.child("apiGroup"), &json!(api_group), &[""]));
            }
            if !namespaced && str_at(subject, &["namespace"]).is_empty() {
                causes.push(Cause::required(path.child("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != RBAC_GROUP {
                causes.push(Cause::not_supported(path.child("apiGroup"), &json!(api_group), &[RBAC_GROUP]));
            }
        }
        other => causes.push(Cause::not_supported(
            path.child("kind"),
            &json!(other),
            &["ServiceAccount", "User", "Group"],
        )),
    }
    causes
}

/// A binding's roleRef never changes; Go prints the internal `RoleRef` struct as JSON.
pub(super) fn role_ref_update_causes(old: &Value, new: &Value) -> Vec<Cause> {
    let role_ref = |obj: &Value| {
        json!({
            "APIGroup": str_at(obj, &["roleRef", "apiGroup"]),
            "Kind": str_at(obj, &["roleRef", "kind"]),
            "Name": str_at(obj, &["roleRef", "name"]),
        })
    };
    let (before, after) = (role_ref(old), role_ref(new));
    if before == after {
        Vec::new()
    } else {
        vec![Cause::invalid("roleRef", &after, "cannot change roleRef")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::objects::{apply_builtin_defaults, validate_builtin, validate_builtin_update};
    use serde_json::json;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    fn binding(role_ref: Value, subjects: Value) -> Value {
        json!({"metadata": {"name": "b", "namespace": "n"}, "roleRef": role_ref, "subjects": subjects})
    }

    #[test]
    fn role_binding_without_role_ref_reports_each_field() {
        let causes = validate_builtin(RBAC_GROUP, "rolebindings", &binding(json!({}), json!([])));
        assert_eq!(
            messages(&causes),
            vec![
                "roleRef.apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
                "roleRef.kind: Unsupported value: \"\": supported values: \"Role\", \"ClusterRole\"",
                "roleRef.name: Required value",
            ]
        );
    }

    #[test]
    fn cluster_role_binding_may_only_reference_cluster_roles() {
        let mut obj = binding(json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"}), json!([]));
        obj["metadata"] = json!({"name": "b"});
        let causes = validate_builtin(RBAC_GROUP, "clusterrolebindings", &obj);
        assert_eq!(
            messages(&causes),
            vec!["roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""]
        );
    }

    #[test]
    fn service_account_subject_of_cluster_binding_needs_a_namespace() {
        let role_ref = json!({"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "r"});
        let mut obj = binding(role_ref, json!([{"kind": "ServiceAccount", "name": "sa"}]));
        obj["metadata"] = json!({"name": "b"});
        let causes = validate_builtin(RBAC_GROUP, "clusterrolebindings", &obj);
        assert_eq!(messages(&causes), vec!["subjects[0].namespace: Required value"]);
    }

    #[test]
    fn unknown_subject_kind_is_not_supported() {
        let role_ref = json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"});
        let causes = validate_builtin(
            RBAC_GROUP,
            "rolebindings",
            &binding(role_ref, json!([{"kind": "Robot", "name": "x"}])),
        );
        assert_eq!(
            messages(&causes),
            vec![
                "subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""
            ]
        );
    }

    #[test]
    fn user_subject_gets_rbac_api_group_by_default() {
        let role_ref = json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"});
        let mut obj = binding(role_ref, json!([{"kind": "User", "name": "alice"}]));
        apply_builtin_defaults(RBAC_GROUP, "rolebindings", &mut obj);
        assert_eq!(obj["subjects"][0]["apiGroup"], RBAC_GROUP);
        assert!(validate_builtin(RBAC_GROUP, "rolebindings", &obj).is_empty());
    }

    #[test]
    fn role_ref_cannot_change() {
        let old = binding(json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "a"}), json!([]));
        let new = binding(json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "b"}), json!([]));
        assert_eq!(
            messages(&validate_builtin_update(RBAC_GROUP, "rolebindings", &old, &new)),
            vec![
                "roleRef: Invalid value: {\"APIGroup\":\"rbac.authorization.k8s.io\",\"Kind\":\"Role\",\"Name\":\"b\"}: cannot change roleRef"
            ]
        );
    }

    #[test]
    fn role_rule_needs_verbs_groups_and_resources() {
        let role = json!({"metadata": {"name": "r", "namespace": "n"}, "rules": [{}]});
        assert_eq!(
            messages(&validate_builtin(RBAC_GROUP, "roles", &role)),
            vec![
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[0].resources: Required value: resource rules must supply at least one resource",
            ]
        );
    }

    #[test]
    fn namespaced_role_cannot_grant_non_resource_urls() {
        let role = json!({"metadata": {"name": "r", "namespace": "n"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]});
        assert_eq!(
            messages(&validate_builtin(RBAC_GROUP, "roles", &role)),
            vec![
                "rules[0].nonResourceURLs: Invalid value: [\"/healthz\"]: namespaced rules cannot apply to non-resource URLs"
            ]
        );
    }
}
