//! The ConfigMapSync custom resource. Doc comments here are user documentation:
//! they become the CRD's descriptions and what `kubectl explain configmapsync` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shaping::CopyShaping;
use super::sync_status::TenantSyncStatus;

/// What kopper last observed for a ConfigMapSync.
pub type ConfigMapSyncStatus = TenantSyncStatus;

/// Keeps one ConfigMap copied into other namespaces: the copy is created when missing,
/// updated when the source changes, restored when edited or deleted, and removed when the
/// source is deleted, a namespace stops being a destination, or this object is deleted.
/// A ConfigMap of the same name that kopper did not create is never touched. The source must
/// be in this object's namespace unless kopper runs with `--allow-cross-namespace-sources`,
/// and is never in a protected namespace (kube-system, kopper's own, those the admin lists).
/// A ConfigMap labelled `owner: helm` (a Helm release record, to Helm's configmap driver) is
/// never shared. Copies go only into this object's own namespace and into namespaces whose owner accepts
/// them with the annotation `kopper.dev/accept-replication-from` (a comma-separated list of
/// namespaces, or `*`) on the Namespace; never into kube-system, kube-public,
/// kube-node-lease or kopper's own namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "ConfigMapSync",
    doc = "Keeps a copy of one ConfigMap of this namespace in other namespaces: the destinations named or selected, each only if it accepts copies from this namespace (annotation kopper.dev/accept-replication-from on the Namespace). Copies follow the source, are restored when edited or deleted, and are removed when this object goes. An object of the same name that kopper did not create is never touched; it is reported in status.",
    plural = "configmapsyncs",
    namespaced,
    shortname = "cms",
    status = "ConfigMapSyncStatus",
    printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".spec.configMapName"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.syncedCount","description":"Namespaces holding an up-to-date copy"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Last sync","type":"date","jsonPath":".status.lastSyncTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSyncSpec {
    /// Namespace of the ConfigMap to copy. Must be this object's own namespace unless kopper
    /// runs with `--allow-cross-namespace-sources`; never a protected namespace.
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub source_namespace: String,

    /// A namespace to copy the ConfigMap into. It must accept copies from this object's
    /// namespace (annotation `kopper.dev/accept-replication-from` on the Namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub destination_namespace: Option<String>,

    /// More namespaces to copy the ConfigMap into: at most 256.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))
    )]
    pub destination_namespaces: Vec<String>,

    /// Every namespace whose labels match this selector also receives a copy, if it accepts
    /// copies from this object's namespace (the source namespace excepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_selector: Option<LabelSelector>,

    /// Name of the ConfigMap to copy; the copies have the same name.
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub config_map_name: String,

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
    fn crd_is_namespaced_with_status() {
        let crd = ConfigMapSync::crd();
        assert_eq!(crd.spec.group, "kopper.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn schema_requires_the_seed_fields_and_validates_names() {
        let crd = serde_json::to_value(ConfigMapSync::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let required: Vec<&str> =
            spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(required.contains(&"sourceNamespace") && required.contains(&"configMapName"));
        assert_eq!(spec["properties"]["sourceNamespace"]["maxLength"], Value::from(63));
        assert!(spec["properties"]["configMapName"]["pattern"].is_string());
    }

    #[test]
    fn seed_sample_parses() {
        let sample = include_str!("../../../../../../config/samples/configmapsync-across-namespaces.yaml");
        let sync: ConfigMapSync = crate::samples::of_kind(sample, "ConfigMapSync").unwrap();
        assert_eq!(sync.spec.source_namespace, "source-namespace");
        assert_eq!(sync.spec.destination_namespace.as_deref(), Some("destination-namespace"));
        assert_eq!(sync.spec.config_map_name, "configmap-name");
    }
}
