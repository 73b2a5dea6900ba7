//! The NamespaceAccess custom resource. Doc comments here are user documentation: they
//! become the CRD's descriptions and what `kubectl explain namespaceaccess` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Keeps RoleBindings in every namespace it selects: created when a namespace appears or
/// starts to match, updated when this policy changes, restored when edited or deleted, and
/// removed when the namespace stops matching or this policy is deleted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "NamespaceAccess",
    plural = "namespaceaccesses",
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
    /// system ones (kube-system, kube-public, kube-node-lease, default).
    #[serde(default)]
    pub namespaces: NamespaceSelection,

    /// The RoleBindings to keep in each selected namespace, keyed by their name template.
    #[schemars(length(min = 1, max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub bindings: Vec<BindingTemplate>,
}

/// Selects namespaces by labels and by name. A namespace is selected when it matches the
/// selector (if given), matches one of `include` (if given) and matches none of `exclude`.
/// System namespaces (kube-system, kube-public, kube-node-lease, default) are only selected
/// when `include` names them exactly, without wildcards.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelection {
    /// Only namespaces whose labels match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Namespace name patterns to select. `*` matches any run of characters, `?` exactly one.
    /// Omit to select every namespace (that the selector allows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$")))]
    pub include: Vec<String>,

    /// Namespace name patterns never to select, even when included or matched by the selector.
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
