//! The SecretSync custom resource: a tenant's Secret shared with namespaces that accept it.
//! Doc comments here are user documentation: they become the CRD's descriptions and what
//! `kubectl explain secretsync` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shaping::CopyShaping;
use super::sync_status::TenantSyncStatus;

/// What kopper last observed for a SecretSync.
pub type SecretSyncStatus = TenantSyncStatus;

/// Keeps one Secret copied into other namespaces: the copy is created when missing, updated
/// when the source changes, restored when edited or deleted, and removed when the source is
/// deleted, a namespace stops being a destination (its owner withdraws consent, say), or
/// this object is deleted. A Secret of the same name that kopper did not create is never
/// touched. The source must be in this object's namespace, whatever kopper's flags
/// (`--allow-cross-namespace-sources` is for ConfigMapSyncs only). Copies go only into namespaces whose owner accepts them
/// with the annotation `kopper.dev/accept-replication-from` (a comma-separated list of
/// namespaces, or `*`) on the Namespace; never into kube-system, kube-public,
/// kube-node-lease or kopper's own namespace. Credentials of the cluster
/// (`kubernetes.io/service-account-token`, `bootstrap.kubernetes.io/token`,
/// `helm.sh/release.v1` Secrets, and any Secret labelled `owner: helm`, by which Helm finds
/// its release records) and Secrets kopper made (copies shared with this namespace,
/// a Bucket's credentials) are never shared.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "SecretSync",
    doc = "Keeps a copy of one Secret of this namespace in other namespaces: the destinations named or selected, each only if it accepts copies from this namespace (annotation kopper.dev/accept-replication-from on the Namespace). Copies follow the source, are restored when edited or deleted, and are removed when this object goes or a destination withdraws its consent. Credentials of the cluster (service-account and bootstrap tokens, Helm releases and any Secret labelled owner=helm) and Secrets kopper made are never shared. An object of the same name that kopper did not create is never touched; it is reported in status.",
    plural = "secretsyncs",
    namespaced,
    shortname = "scs",
    status = "SecretSyncStatus",
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secretName"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.syncedCount","description":"Namespaces holding an up-to-date copy"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Last sync","type":"date","jsonPath":".status.lastSyncTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SecretSyncSpec {
    /// Namespace of the Secret to copy. Must be this object's own namespace: a SecretSync
    /// never reads another namespace's Secrets (Ready=False, `CrossNamespaceSourceDenied`).
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub source_namespace: String,

    /// A namespace to copy the Secret into. It must accept copies from this object's
    /// namespace (annotation `kopper.dev/accept-replication-from` on the Namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub destination_namespace: Option<String>,

    /// More namespaces to copy the Secret into: at most 256.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))
    )]
    pub destination_namespaces: Vec<String>,

    /// Every namespace whose labels match this selector also receives a copy, if it accepts
    /// copies from this object's namespace (the source namespace excepted). Status counts
    /// these namespaces and never names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_selector: Option<LabelSelector>,

    /// Name of the Secret to copy; the copies have the same name.
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub secret_name: String,

    /// The `type` of the copies; omitted: the source's. A `kubernetes.io/tls` Secret shared
    /// with `keys: [ca.crt]` must be written as `Opaque`: the API server refuses a TLS Secret
    /// without `tls.crt` and `tls.key`. When the keys kept lack what the copy's type
    /// requires, nothing is copied and the Ready condition says so (reason
    /// `SecretTypeNeedsKeys`). The cluster's credential types cannot be named here.
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

    /// How the copies are shaped, and what becomes of them when this object goes.
    #[serde(flatten)]
    pub shaping: CopyShaping,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;

    #[test]
    fn crd_is_namespaced_with_status_and_a_short_name() {
        let crd = SecretSync::crd();
        assert_eq!(crd.spec.group, "kopper.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["scs".to_owned()][..]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn schema_requires_the_source_and_refuses_a_credential_type_for_the_copies() {
        let crd = serde_json::to_value(SecretSync::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let required: Vec<&str> =
            spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(required.contains(&"sourceNamespace") && required.contains(&"secretName"));
        assert_eq!(spec["properties"]["sourceNamespace"]["maxLength"], Value::from(63));
        assert_eq!(spec["properties"]["keys"]["maxItems"], 256, "the shaping fields are the spec's own");
        let credential = spec["properties"]["secretType"]["x-kubernetes-validations"].to_string();
        for kind in crate::tenancy::CREDENTIAL_SECRET_TYPES {
            assert!(credential.contains(&format!("'{kind}'")), "{credential}");
        }
    }

    #[test]
    fn sample_shares_only_the_ca_certificate_as_an_opaque_secret() {
        let sample = include_str!("../../../../../../config/samples/secretsync-ca-certificate.yaml");
        let sync: SecretSync = crate::samples::of_kind(sample, "SecretSync").unwrap();
        assert_eq!(sync.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(sync.spec.source_namespace, "shop");
        assert_eq!(sync.spec.secret_name, "shop-ca");
        assert_eq!(sync.spec.destination_namespaces, ["payments"]);
        assert_eq!(sync.spec.shaping.keys, ["ca.crt"]);
        assert_eq!(sync.spec.secret_type.as_deref(), Some("Opaque"));
        let source: k8s_openapi::api::core::v1::Secret = crate::samples::of_kind(sample, "Secret").unwrap();
        assert_eq!(source.type_.as_deref(), Some("kubernetes.io/tls"));
    }
}
