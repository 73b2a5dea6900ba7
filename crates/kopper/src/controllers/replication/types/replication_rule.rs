//! The ReplicationRule custom resource. Doc comments here are user documentation:
//! they become the CRD's descriptions and what `kubectl explain replicationrule` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shaping::CopyShaping;

/// Copies every object of its kind that matches into every target namespace: copies are
/// created when a source or a namespace appears, updated when the source changes, restored
/// when edited or deleted, and removed when the source goes away, stops matching, or this
/// rule is deleted. An object of the same name that kopper did not create is never touched;
/// it is reported in status and as an Event.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "ReplicationRule",
    doc = "Copies every object of its kind (a ConfigMap, a Secret, or another namespaced kind the cluster admin allows with --replicate-kinds) of the source namespaces whose labels match the selector into every namespace the rule selects, including namespaces created later. Copies follow their source, are restored when edited or deleted, and are removed when the source stops matching or this rule is deleted. An object of the same name that kopper did not create is never touched; it is reported in status.",
    plural = "replicationrules",
    shortname = "rr",
    status = "ReplicationRuleStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"API version","type":"string","jsonPath":".spec.apiVersion","priority":1}"#,
    printcolumn = r#"{"name":"Sources","type":"integer","jsonPath":".status.sourcesMatched","description":"Sources this rule copies"}"#,
    printcolumn = r#"{"name":"In sync","type":"integer","jsonPath":".status.copiesInSync","description":"Copies in place and up to date"}"#,
    printcolumn = r#"{"name":"Conflicts","type":"integer","jsonPath":".status.conflictCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.secretType) || (self.kind == 'Secret' && (!has(self.apiVersion) || self.apiVersion == 'v1'))",
        "message": "secretType applies to kind Secret (apiVersion v1) only; remove it"
    },
    {
        "rule": "!has(self.keys) || (self.kind in ['ConfigMap', 'Secret'] && (!has(self.apiVersion) || self.apiVersion == 'v1'))",
        "message": "keys applies to kind ConfigMap or Secret (apiVersion v1) only; remove it: other kinds are copied whole"
    },
    {
        "rule": "!has(self.credentialTypes) || (self.kind in ['ConfigMap', 'Secret'] && (!has(self.apiVersion) || self.apiVersion == 'v1'))",
        "message": "credentialTypes applies to kind ConfigMap or Secret (apiVersion v1) only; remove it"
    }
]))]
pub struct ReplicationRuleSpec {
    /// The API version of the kind to copy, e.g. `v1` (the default) or
    /// `networking.k8s.io/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 317),
        pattern(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9][a-z0-9]*$")
    )]
    pub api_version: Option<String>,

    /// What to copy: `ConfigMap` or `Secret`, always, or another namespaced kind the
    /// cluster admin allows with `--replicate-kinds` (chart value `replication.extraKinds`),
    /// e.g. `NetworkPolicy` (apiVersion `networking.k8s.io/v1`), `LimitRange`,
    /// `ResourceQuota`, `Role`, `RoleBinding` or a custom resource. A kind not allowed is
    /// refused (Ready=False, reason `KindNotAllowed`); one the API server does not serve
    /// waits for its CRD (reason `KindNotServed`). A copy of another kind holds every field of
    /// its source but `apiVersion`, `kind`, `metadata` (labels and annotations are shaped
    /// by `copyLabels` and `copyAnnotations`) and `status`.
    #[schemars(length(min = 1, max = 63), pattern(r"^[A-Z][A-Za-z0-9]{0,62}$"))]
    pub kind: String,

    /// Kinds other than ConfigMap and Secret are copied only from protected namespaces, which
    /// tenants cannot write to (kube-system, kopper's own, those the admin protects): whoever
    /// writes a source decides what every target namespace allows or runs (a ResourceQuota of
    /// `pods: "0"` shuts them down, a NetworkPolicy opens them, a Role grants rights), so no
    /// kind counts as harmless. Otherwise the rule is Ready=False with reason
    /// `SourceNotProtected`, and its copies are left as they are. `true` copies from any
    /// source namespace listed: whoever may write there decides for every target namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unprotected_sources: bool,

    /// Namespaces the sources are read from: 1 to 32 namespace names.
    #[schemars(
        length(min = 1, max = 32),
        inner(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))
    )]
    pub namespaces: Vec<String>,

    /// Only sources whose labels match this selector are copied, e.g.
    /// `matchLabels: {copyrator: "true"}`.
    pub selector: LabelSelector,

    /// Only namespaces whose labels match this selector receive copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Namespace name patterns that receive copies. `*` matches any run of characters, `?`
    /// exactly one. Omit to target every namespace except the source namespaces and the
    /// protected ones (kube-system, kube-public, kube-node-lease, kopper's own namespace and
    /// any the admin protects); a protected namespace receives copies only when listed here
    /// by its exact name, never through a pattern. At most 64 patterns of at most 63
    /// characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$")))]
    pub include_namespaces: Vec<String>,

    /// Namespace name patterns that never receive copies. At most 64 patterns of at most 63
    /// characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$")))]
    pub exclude_namespaces: Vec<String>,

    /// Secret types that are credentials of the cluster itself, which this rule may copy
    /// (kinds ConfigMap and Secret only). They are never copied otherwise, however broad the selector:
    /// `kubernetes.io/service-account-token` (a copy is a live token of that ServiceAccount
    /// in every namespace it lands in), `bootstrap.kubernetes.io/token` and
    /// `helm.sh/release.v1` (Helm's release records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub credential_types: Vec<CredentialSecretType>,

    /// The `type` of the copies (kind Secret only); omitted: the source's. A
    /// `kubernetes.io/tls` Secret copied with `keys: [ca.crt]` must be written as `Opaque`:
    /// the API server refuses a TLS Secret without `tls.crt` and `tls.key`. When the keys
    /// kept lack what the copy's type requires, the source is not copied and the rule is
    /// Ready=False with reason `SecretTypeNeedsKeys`. Credential types (see
    /// `credentialTypes`) can be neither copied nor written by naming them here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[-._a-zA-Z0-9/]+$"),
        extend("x-kubernetes-validations" = [{
            "rule": "!(self in ['kubernetes.io/service-account-token', 'bootstrap.kubernetes.io/token', 'helm.sh/release.v1'])",
            "message": "a credential type of the cluster, which kopper never writes from another type; remove it"
        }])
    )]
    pub secret_type: Option<String>,

    /// How the copies are shaped, and what becomes of them when this rule goes.
    #[serde(flatten)]
    pub shaping: CopyShaping,
}

/// A Secret type that is a credential of the cluster itself.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CredentialSecretType {
    #[serde(rename = "kubernetes.io/service-account-token")]
    ServiceAccountToken,
    #[serde(rename = "bootstrap.kubernetes.io/token")]
    BootstrapToken,
    #[serde(rename = "helm.sh/release.v1")]
    HelmRelease,
}

impl CredentialSecretType {
    /// The `type` of such Secrets.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServiceAccountToken => "kubernetes.io/service-account-token",
            Self::BootstrapToken => "bootstrap.kubernetes.io/token",
            Self::HelmRelease => "helm.sh/release.v1",
        }
    }
}

impl ReplicationRuleSpec {
    /// The API version of the kind copied: `v1` unless set.
    pub fn api_version(&self) -> &str {
        self.api_version.as_deref().unwrap_or("v1")
    }

    /// Whether the rule copies Secrets.
    pub fn copies_secrets(&self) -> bool {
        self.kind == "Secret" && self.api_version() == "v1"
    }
}

/// What kopper last observed for this rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationRuleStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Source objects this rule copies.
    #[serde(default)]
    pub sources_matched: i32,

    /// Copies in place holding their source's content, labels and annotations and kopper's
    /// marks (labels and annotations others add to a copy are allowed; see the README).
    #[serde(default)]
    pub copies_in_sync: i32,

    /// Copies this rule wants but does not get, because an object of that name exists and
    /// was not made by kopper, or a rule that takes precedence claims it. At most 20 are
    /// listed; `conflictCount` has the total.
    #[serde(default)]
    pub conflicts: Vec<CopyConflict>,

    /// Number of conflicts, including those not listed.
    #[serde(default)]
    pub conflict_count: i32,

    /// When kopper last wrote or removed a copy for this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,

    /// `Ready` is True when every copy this rule wants is in place and up to date. Reason
    /// `Conflict`: an object kopper did not make (or a rule that takes precedence) holds a
    /// place; `WriteFailed`: writes fail and are retried; `Progressing`: copies are still
    /// being written (after a write met another writer, say); `KindNotAllowed`: kopper does not
    /// replicate this kind (the admin allows it with `--replicate-kinds`); `KindNotServed`:
    /// the API server does not serve it (install its CRD); `SourceNotProtected`: a kind other
    /// than ConfigMap and Secret from a source namespace tenants can write to (copies kept);
    /// `EscalationRefused`: the API server refused a copy as a privilege escalation (kopper
    /// lacks what a Role grants, or `bind` on a RoleBinding's role); `CopyBeingDeleted`: copies are
    /// being deleted but held by another controller's finalizer, and are made again once
    /// gone; `SourceKeysMissing`: a source lacks keys `keys` lists (its copies hold the
    /// others; one lacking them all is not copied); `SecretTypeNeedsKeys`: the keys kept lack what the copies' type requires, so
    /// that source is not copied (set `secretType`); `InvalidShape`: a shaping field asks for
    /// what kopper never writes (the message names it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A copy a rule wants but does not own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyConflict {
    /// Namespace of the copy.
    pub namespace: String,
    /// Name of the copy.
    pub name: String,
    /// NotManagedByKopper, ClaimedByOtherRule, or OrphanedCopy (a copy of another source
    /// left by a rule deleted with `deletionPolicy: Orphan`).
    pub reason: String,
    /// Who holds the name.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;
    use crate::controllers::replication::types::DeletionPolicy;

    fn schema() -> Value {
        let crd = serde_json::to_value(ReplicationRule::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_columns() {
        let crd = ReplicationRule::crd();
        assert_eq!(crd.spec.group, "kopper.dev");
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        assert!(version.additional_printer_columns.as_ref().unwrap().len() >= 5);
    }

    #[test]
    fn schema_requires_kind_namespaces_and_selector_and_limits_kind() {
        let spec = &schema()["properties"]["spec"];
        let required: Vec<&str> =
            spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(
            required.contains(&"kind") && required.contains(&"namespaces") && required.contains(&"selector")
        );
        assert_eq!(spec["properties"]["kind"]["pattern"], "^[A-Z][A-Za-z0-9]{0,62}$");
        assert!(spec["properties"]["kind"].get("enum").is_none(), "any kind the admin allows");
        assert_eq!(spec["properties"]["namespaces"]["minItems"], 1);
        assert!(spec["properties"]["namespaces"]["items"]["pattern"].is_string());
    }

    #[test]
    fn seed_sample_parses() {
        let sample = include_str!("../../../../../../config/samples/replicationrule-shared-settings.yaml");
        let rule: ReplicationRule = crate::samples::of_kind(sample, "ReplicationRule").unwrap();
        assert_eq!(rule.spec.kind, "ConfigMap");
        assert_eq!(rule.spec.api_version(), "v1");
        assert_eq!(rule.spec.namespaces, vec!["default".to_owned()]);
    }

    #[test]
    fn ca_bundle_sample_copies_only_the_ca_certificate_as_an_opaque_secret() {
        let sample = include_str!("../../../../../../config/samples/replicationrule-ca-bundle.yaml");
        let rule: ReplicationRule = crate::samples::of_kind(sample, "ReplicationRule").unwrap();
        assert!(rule.spec.copies_secrets());
        assert_eq!(rule.spec.shaping.keys, ["ca.crt"]);
        assert_eq!(rule.spec.secret_type.as_deref(), Some("Opaque"));
        assert_eq!(rule.spec.shaping.deletion_policy, DeletionPolicy::Orphan);
        let source: k8s_openapi::api::core::v1::Secret = crate::samples::of_kind(sample, "Secret").unwrap();
        assert_eq!(source.type_.as_deref(), Some("kubernetes.io/tls"));
        let keys: Vec<&String> = source.string_data.iter().flatten().map(|(key, _)| key).collect();
        assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    }

    #[test]
    fn default_deny_sample_copies_a_network_policy_from_a_protected_namespace() {
        let sample = include_str!("../../../../../../config/samples/replicationrule-default-deny.yaml");
        let rule: ReplicationRule = crate::samples::of_kind(sample, "ReplicationRule").unwrap();
        assert_eq!(
            (rule.spec.api_version(), rule.spec.kind.as_str()),
            ("networking.k8s.io/v1", "NetworkPolicy")
        );
        assert!(!rule.spec.allow_unprotected_sources, "the source lives where tenants cannot write");
        let source: k8s_openapi::api::networking::v1::NetworkPolicy =
            crate::samples::of_kind(sample, "NetworkPolicy").unwrap();
        let home = &rule.spec.namespaces[0];
        assert_eq!(source.metadata.namespace.as_ref(), Some(home));
        // The policy closes its own namespace too: kopper's would lose the API server.
        assert_ne!(home, "kopper-system", "the source needs a namespace of its own");
        let declared: k8s_openapi::api::core::v1::Namespace =
            crate::samples::of_kind(sample, "Namespace").unwrap();
        assert_eq!(declared.metadata.name.as_ref(), Some(home));
        assert!(sample.contains(&format!("--protected-namespaces {home}")), "says how to protect it");
        let spec = source.spec.unwrap();
        assert_eq!(spec.pod_selector, Some(Default::default()), "every pod");
        assert!(spec.ingress.is_none() && spec.egress.is_none(), "no traffic allowed");
        let labels = source.metadata.labels.unwrap();
        let selected = rule.spec.selector.match_labels.unwrap();
        assert!(
            selected.iter().all(|(key, value)| labels.get(key) == Some(value)),
            "the selector matches it"
        );
    }

    #[test]
    fn shaping_of_data_applies_to_config_maps_and_secrets_only() {
        let rules = schema()["properties"]["spec"]["x-kubernetes-validations"].to_string();
        for field in ["keys", "secretType", "credentialTypes"] {
            assert!(rules.contains(&format!("!has(self.{field})")), "{field}: {rules}");
        }
        assert!(rules.contains("self.apiVersion == 'v1'"), "{rules}");
    }

    #[test]
    fn every_new_list_and_map_is_bounded_so_thousands_of_prefixes_are_refused() {
        let spec = &schema()["properties"]["spec"]["properties"];
        assert_eq!(spec["keys"]["maxItems"], 256);
        assert_eq!(spec["keepToolMarks"]["maxItems"], 4);
        for field in ["copyLabels", "copyAnnotations"] {
            for list in ["include", "exclude"] {
                assert_eq!(spec[field]["properties"][list]["maxItems"], 32, "{field}.{list}");
                assert_eq!(spec[field]["properties"][list]["items"]["maxLength"], 317, "{field}.{list}");
            }
        }
        let add = &spec["copyLabels"]["properties"]["add"];
        assert_eq!(add["maxProperties"], 32);
        let rules = add["x-kubernetes-validations"].to_string();
        assert!(rules.contains("kopper.dev/") && rules.contains("app.kubernetes.io/managed-by"), "{rules}");
    }
}
