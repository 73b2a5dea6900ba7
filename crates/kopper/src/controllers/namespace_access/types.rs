//! The NamespaceAccess custom resource. Doc comments here are user documentation: they
//! become the CRD's descriptions and what `kubectl explain namespaceaccess` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which RoleBindings every selected namespace gets, and which namespaces are selected.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "NamespaceAccess",
    plural = "namespaceaccesses",
    doc = "Keeps RoleBindings in every namespace it selects: created when a namespace appears or starts to match, updated when this policy changes, restored when edited or deleted, and removed when the namespace stops matching or this policy is deleted. A RoleBinding of the same name that kopper did not create is never touched; it is reported in status.",
    shortname = "nsa",
    status = "NamespaceAccessStatus",
    printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.matchedNamespaces","description":"Namespaces this policy selects"}"#,
    printcolumn = r#"{"name":"Bindings","type":"integer","jsonPath":".status.bindingsReady","description":"RoleBindings in place and up to date"}"#,
    printcolumn = r#"{"name":"Wanted","type":"integer","jsonPath":".status.bindingsDesired","description":"RoleBindings this policy asks for"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceAccessSpec {
    /// Which namespaces receive the bindings. Omit to select every namespace except the
    /// system ones (kube-system, kube-public, kube-node-lease, default) and the namespaces
    /// kopper protects (its own, and those given with --protected-namespaces).
    #[serde(default)]
    pub namespaces: NamespaceSelection,

    /// The RoleBindings to keep in each selected namespace, keyed by their name template.
    #[schemars(length(min = 1, max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub bindings: Vec<BindingTemplate>,
}

/// Selects namespaces by labels and by name. A namespace is selected when it matches the
/// selector (if given), matches one of `include` (if given) and matches none of `exclude`.
/// System namespaces (kube-system, kube-public, kube-node-lease, default) and the namespaces
/// kopper protects are only selected when `include` names them exactly, without wildcards.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelection {
    /// Only namespaces whose labels match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Namespace name patterns to select. `*` matches any run of characters, `?` exactly one.
    /// Omit to select every namespace (that the selector allows). At most 64 patterns of at
    /// most 63 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$")))]
    pub include: Vec<String>,

    /// Namespace name patterns never to select, even when included or matched by the selector.
    /// At most 64 patterns of at most 63 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$")))]
    pub exclude: Vec<String>,
}

/// One RoleBinding to keep in each selected namespace. Names may use the placeholders
/// `{namespace}` (the namespace's name) and `{labels.<key>}` (the value of one of the
/// namespace's labels; a namespace without that label gets no binding and is reported).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingTemplate {
    /// Name of the RoleBinding, e.g. `ad-kubernetes-{namespace}`.
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^([a-z0-9.:-]|\{ *namespace *\}|\{ *labels\.[A-Za-z0-9._/-]+ *\})+$")
    )]
    pub name: String,

    /// The role the subjects are granted in the namespace.
    pub role_ref: RoleRefTemplate,

    /// Who is granted the role.
    #[schemars(length(min = 1, max = 64))]
    pub subjects: Vec<SubjectTemplate>,
}

/// The role to grant. A ClusterRole grants its rules within the namespace only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleRefTemplate {
    /// ClusterRole, or Role (which must exist in each selected namespace).
    pub kind: RoleKind,

    /// Name of the role; may use `{namespace}` and `{labels.<key>}`.
    #[schemars(length(min = 1, max = 253), pattern(r"^[^/%]+$"))]
    pub name: String,
}

/// Kind of role a binding refers to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RoleKind {
    ClusterRole,
    Role,
}

/// A user, group or service account granted the role.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubjectTemplate {
    /// Group, User or ServiceAccount.
    pub kind: SubjectKind,

    /// Name of the subject; may use `{namespace}` and `{labels.<key>}`, e.g. `ad-kubernetes-{namespace}`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// For ServiceAccount only: the service account's namespace. Defaults to the namespace
    /// the binding is in; may use `{namespace}` and `{labels.<key>}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// Kind of subject a binding grants the role to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SubjectKind {
    Group,
    User,
    ServiceAccount,
}

/// What kopper last observed for this policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceAccessStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Namespaces this policy selects.
    #[serde(default)]
    pub matched_namespaces: i32,

    /// RoleBindings this policy asks for across all selected namespaces.
    #[serde(default)]
    pub bindings_desired: i32,

    /// RoleBindings in place and up to date.
    #[serde(default)]
    pub bindings_ready: i32,

    /// Bindings this policy asks for but does not get, because a RoleBinding of that name
    /// already exists and was not made by kopper, or an older policy claims the name. At most
    /// 20 are listed; `conflictCount` has the total.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<BindingConflict>,

    /// Number of conflicts, including those not listed.
    #[serde(default)]
    pub conflict_count: i32,

    /// `Ready` is True when every binding this policy asks for is in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A binding this policy asks for but does not own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingConflict {
    /// Namespace of the binding.
    pub namespace: String,
    /// Name of the binding.
    pub name: String,
    /// NotManagedByKopper, ClaimedByOtherPolicy or DuplicateName.
    pub reason: String,
    /// Who holds the name.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;

    fn schema() -> Value {
        let crd = serde_json::to_value(NamespaceAccess::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_short_name() {
        let crd = NamespaceAccess::crd();
        assert_eq!(crd.spec.group, "kopper.dev");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["nsa".to_owned()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        assert!(version.additional_printer_columns.as_ref().unwrap().len() >= 4);
    }

    #[test]
    fn schema_requires_bindings_with_role_and_subjects() {
        let spec = &schema()["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["bindings"]));
        let binding = &spec["properties"]["bindings"]["items"];
        let mut required: Vec<&str> =
            binding["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        required.sort_unstable();
        assert_eq!(required, ["name", "roleRef", "subjects"]);
        assert_eq!(spec["properties"]["bindings"]["x-kubernetes-list-type"], "map");
        assert_eq!(spec["properties"]["bindings"]["x-kubernetes-list-map-keys"], serde_json::json!(["name"]));
        assert_eq!(spec["properties"]["bindings"]["minItems"], 1);
    }

    #[test]
    fn schema_limits_kinds_to_what_rbac_accepts() {
        let binding = &schema()["properties"]["spec"]["properties"]["bindings"]["items"]["properties"];
        assert_eq!(
            binding["roleRef"]["properties"]["kind"]["enum"],
            serde_json::json!(["ClusterRole", "Role"])
        );
        let subject_kind = &binding["subjects"]["items"]["properties"]["kind"]["enum"];
        assert_eq!(*subject_kind, serde_json::json!(["Group", "User", "ServiceAccount"]));
    }

    #[test]
    fn schema_pattern_accepts_templates_and_rejects_bad_names() {
        let binding = &schema()["properties"]["spec"]["properties"]["bindings"]["items"]["properties"];
        let pattern = regex::Regex::new(binding["name"]["pattern"].as_str().unwrap()).unwrap();
        assert!(pattern.is_match("ad-kubernetes-{namespace}"));
        assert!(pattern.is_match("team-{labels.example.com/team}-edit"));
        assert!(!pattern.is_match("Team_{namespace}"));
        assert!(!pattern.is_match("a/b"));
    }

    #[test]
    fn name_globs_are_validated_by_the_schema() {
        let include = &schema()["properties"]["spec"]["properties"]["namespaces"]["properties"]["include"];
        assert_eq!(include["items"]["pattern"], "^[a-z0-9*?-]+$");
        assert_eq!(include["items"]["maxLength"], 63);
    }
}
