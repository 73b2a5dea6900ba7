//! What kopper reports on a tenant's sync (ConfigMapSync, SecretSync): the same fields for
//! both. Doc comments here are user documentation: they become the CRDs' descriptions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::replication_rule::CopyConflict;

/// What kopper last observed for this object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantSyncStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// When kopper last wrote or removed a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,

    /// Namespaces named in this spec (or this object's own) that hold an up-to-date copy,
    /// in name order; at most 100 are listed. Namespaces reached through the selector are
    /// only counted.
    #[serde(default)]
    pub synced_namespaces: Vec<String>,

    /// Number of namespaces holding an up-to-date copy, including those not listed.
    #[serde(default)]
    pub synced_count: i32,

    /// Copies wanted but not written in namespaces named in this spec (or this object's
    /// own), because the place is taken: by an object kopper did not make, or by a rule
    /// that takes precedence. At most 20 are listed; copies not written elsewhere are only
    /// counted in the Ready condition.
    #[serde(default)]
    pub conflicts: Vec<CopyConflict>,

    /// Namespaces named in this spec that receive no copy, because they are protected or
    /// have not accepted copies from this object's namespace. The owner of such a namespace
    /// can accept them with the annotation `kopper.dev/accept-replication-from`.
    #[serde(default)]
    pub refused_destinations: Vec<String>,

    /// `Ready` is True when every destination holds an up-to-date copy. Reason
    /// `CrossNamespaceSourceDenied` means the source namespace is not this object's own (or
    /// is protected);
    /// `DestinationRefused` that a named destination does not accept copies from here;
    /// `Progressing` that copies are still being written; `CopyBeingDeleted` that copies are
    /// held in deletion by another controller's finalizer; `SourceKeysMissing` that the
    /// source lacks keys `keys` lists (the copies hold the others; lacking them all, it is
    /// not copied); `SecretTypeNeedsKeys` that the keys kept lack what the copies' Secret
    /// type requires (set `secretType`); `CredentialTypeRefused` that the source is a
    /// credential of the cluster (a Secret labelled `owner: helm` among them), never shared
    /// (its copies are removed); `HelmReleaseRefused` that the source ConfigMap is labelled
    /// `owner: helm`, a Helm release record to Helm's configmap driver, never shared (its
    /// copies are removed);
    /// `SourceMadeByKopper` that the source is a copy kopper made (or a Bucket's
    /// credentials), never passed on; `InvalidShape` that a shaping field asks for what
    /// kopper never writes (the message names it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
