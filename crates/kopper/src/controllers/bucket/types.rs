//! The Bucket custom resource. Doc comments here are user documentation: they
//! become the CRD's descriptions and what `kubectl explain bucket` prints.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An S3 bucket for an application, with credentials for exactly that bucket: kopper creates
/// (or adopts, after a crash) the bucket, an IAM user, an inline policy allowing this bucket
/// and its objects, and one access key, and writes the credentials into a Secret in this
/// namespace owned by this object. Deleting this object removes the IAM user, its policy and
/// keys; the bucket and its data are kept unless `deletionPolicy` is `Delete`. Set
/// `keyRotation` to replace the access key on a schedule, with an overlap; set the annotation
/// `kopper.dev/rotate-credentials` to a new value to replace it at once (for a leaked key: the
/// old key is deleted as soon as the Secret holds the new one).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "Bucket",
    doc = "An S3 bucket with its own IAM user, a policy that allows exactly that bucket, and one access key, whose credentials kopper writes into a Secret in this namespace. With access.mode ServiceAccount, an IAM role only a ServiceAccount of this namespace can assume replaces the user and key, its ARN in a ConfigMap. Deleting the Bucket removes the user, policy and key (or role), and the bucket too with deletionPolicy Delete; with Retain (the default) the bucket and its data stay.",
    plural = "buckets",
    namespaced,
    status = "BucketStatus",
    printcolumn = r#"{"name":"Bucket","type":"string","jsonPath":".status.bucketName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BucketSpec {
    /// Name of the S3 bucket: 3 to 63 lowercase letters, digits, dots and hyphens, starting
    /// and ending with a letter or digit. By default kopper derives a name unique in the
    /// cluster from the cluster id, this object's namespace and name. It cannot be changed
    /// once the bucket exists: create a new Bucket instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 63), pattern(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$"))]
    pub bucket_name: Option<String>,

    /// Region of the bucket; by default the region kopper is configured with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(r"^[a-z0-9-]+$"))]
    pub region: Option<String>,

    /// What happens to the bucket when this object is deleted: `Retain` (the default) keeps
    /// the bucket and its data and removes only the credentials; `Delete` deletes the bucket.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// With `deletionPolicy: Delete`, delete every object (all versions) before the bucket.
    /// Without it, a bucket that still holds objects is not deleted: the Bucket reports
    /// `BucketNotEmpty` and waits.
    #[serde(default)]
    pub empty_on_delete: bool,

    /// Name of the Secret that receives the credentials (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `BUCKET_NAME` and, with a custom endpoint,
    /// `AWS_ENDPOINT_URL` and `S3_ENDPOINT`). Default: `<name>-s3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub secret_name: Option<String>,

    /// Turn on object versioning for the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<bool>,

    /// Tags for the bucket, besides the `kopper.dev/*` tags kopper sets to recognise it: at
    /// most 40, keys of 1 to 128 characters and values of at most 256, made of letters,
    /// digits, spaces and `_ . : / = + - @` (what both S3 and IAM accept). Keys may not start
    /// with `aws:` or `kopper.dev/`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 40,
        "additionalProperties" = {"type": "string", "maxLength": 256, "pattern": r"^[\p{L}\p{N} _.:/=+@-]*$"},
        "x-kubernetes-validations" = [
            {"rule": "self.all(key, size(key) >= 1 && size(key) <= 128)", "message": "tag keys must have 1 to 128 characters"},
            {"rule": "self.all(key, !key.startsWith('aws:') && !key.startsWith('kopper.dev/'))", "message": "tag keys may not start with aws: or kopper.dev/"}
        ]
    ))]
    pub tags: BTreeMap<String, String>,

    /// Replace the access key on a schedule. Without it, the key is replaced only when asked
    /// for by the annotation `kopper.dev/rotate-credentials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rotation: Option<KeyRotation>,

    /// How workloads reach the bucket: with an access key in a Secret (`mode: Key`, the
    /// default), or with no key at all, as a ServiceAccount of this namespace (`mode:
    /// ServiceAccount`, IRSA on EKS): kopper creates an IAM role that only that ServiceAccount
    /// can assume, writes its ARN into a ConfigMap and annotates the ServiceAccount with it.
    /// Switching modes removes the other mode's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
}

/// How workloads reach the bucket.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.mode) || self.mode != 'ServiceAccount' || has(self.serviceAccountName)", "message": "mode ServiceAccount needs serviceAccountName"},
    {"rule": "(has(self.mode) && self.mode == 'ServiceAccount') || !has(self.serviceAccountName)", "message": "serviceAccountName is only for mode ServiceAccount"}
]))]
pub struct Access {
    /// `Key` (the default): an IAM user and one access key, in the Secret `secretName`.
    /// `ServiceAccount`: an IAM role for the ServiceAccount `serviceAccountName`, no user and no
    /// key; the role's ARN goes into the ConfigMap `<name>-s3` (`AWS_ROLE_ARN`, `AWS_REGION`,
    /// `BUCKET_NAME`) and into the ServiceAccount's annotation `eks.amazonaws.com/role-arn`.
    /// Needs the cluster's OIDC provider set in kopper (`--oidc-provider-arn`).
    #[serde(default)]
    pub mode: AccessMode,

    /// The ServiceAccount, in this Bucket's namespace, whose pods get the bucket (mode
    /// `ServiceAccount` only). One Bucket per ServiceAccount: a second Bucket naming it is
    /// refused. kopper never overwrites an `eks.amazonaws.com/role-arn` it did not write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub service_account_name: Option<String>,
}

/// How workloads reach the bucket.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AccessMode {
    /// An IAM user with one access key, in a Secret.
    #[default]
    Key,
    /// An IAM role assumed by a ServiceAccount through the cluster's OIDC provider; no key.
    ServiceAccount,
}

/// A schedule for the access key: a key is in the Secret until it is `maxKeyAge -
/// gracePeriod` old; then kopper creates a new key, writes it into the Secret, and deletes the
/// old key `gracePeriod` later, so applications that read the Secret only now and then have
/// `gracePeriod` to switch, and no key lives longer than `maxKeyAge`. There are never more than
/// two keys.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRotation {
    /// The longest any access key lives, in hours, minutes and seconds (`720h`, `1h30m`): at
    /// least the cluster's minimum (kopper's `--bucket-min-key-age`, by default `1h`), at most
    /// `87600h`.
    #[schemars(length(min = 2, max = 32), pattern(r"^([0-9]+[hms])+$"))]
    pub max_key_age: String,

    /// How long the old key keeps working after the new one is in the Secret (`24h`): at most
    /// half of `maxKeyAge`; `0s` deletes it at once.
    #[schemars(length(min = 2, max = 32), pattern(r"^([0-9]+[hms])+$"))]
    pub grace_period: String,
}

/// What happens to the bucket when its Bucket is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep the bucket and its data; remove only the IAM user, policy and keys.
    #[default]
    Retain,
    /// Delete the bucket too (emptied first when `emptyOnDelete` is set).
    Delete,
}

/// What kopper last observed for this object. Never holds the secret access key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The bucket this object owns. Recorded before the bucket is created, so that a crash
    /// right after creating it cannot lose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,

    /// ARN of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_arn: Option<String>,

    /// Region of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,

    /// Name of the IAM user whose access key is in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,

    /// Id of the access key in the Secret (never the secret key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,

    /// When the access key in the Secret was created, as the provider reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_created: Option<Time>,

    /// The value of `kopper.dev/rotate-credentials` the current key was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_for: Option<String>,

    /// ARN of the IAM role a ServiceAccount assumes (mode `ServiceAccount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,

    /// The ServiceAccount kopper annotates with the role's ARN. Recorded before the
    /// annotation is written, so that the annotation is removed again wherever a pass stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// `Ready` is True when the bucket, user, policy, one access key and the Secret are in
    /// place (mode `ServiceAccount`: the bucket, role, policy, ConfigMap and the
    /// ServiceAccount's annotation). Reasons when it is not: `Provisioning`,
    /// `ProviderNotConfigured`, `BucketNameTaken`, `BucketTagsMissing`, `UserNameTaken`,
    /// `SecretNameTaken`, `BucketNameImmutable`, `InvalidKeyRotation`, `AccessDenied`,
    /// `ProviderUnavailable`, `BucketNotEmpty`, `Deleting`, `KeylessNotConfigured`,
    /// `RoleNameTaken`, `ConfigMapNameTaken`, `ServiceAccountTaken`,
    /// `ServiceAccountAnnotated`, `ServiceAccountNotFound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl Bucket {
    /// How workloads reach the bucket.
    pub fn access_mode(&self) -> AccessMode {
        self.spec.access.as_ref().map(|access| access.mode).unwrap_or_default()
    }

    /// The ServiceAccount the Bucket names, in mode `ServiceAccount`.
    pub fn service_account(&self) -> Option<&str> {
        let access = self.spec.access.as_ref().filter(|access| access.mode == AccessMode::ServiceAccount)?;
        access.service_account_name.as_deref()
    }

    /// The ConfigMap that receives the role's ARN in mode `ServiceAccount`.
    pub fn config_map_name(&self) -> String {
        format!("{}-s3", kube::ResourceExt::name_any(self))
    }

    /// The Secret that receives the credentials.
    pub fn secret_name(&self) -> String {
        match &self.spec.secret_name {
            Some(name) => name.clone(),
            None => format!("{}-s3", kube::ResourceExt::name_any(self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn crd_is_namespaced_with_status_and_retains_by_default() {
        let crd = Bucket::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert!(crd.spec.versions[0].subresources.as_ref().unwrap().status.is_some());
        let spec: BucketSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(spec.deletion_policy, DeletionPolicy::Retain);
        assert!(!spec.empty_on_delete);
    }
}
