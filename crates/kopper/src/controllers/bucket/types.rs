//! The Bucket and BucketClass custom resources. Doc comments here are user documentation:
//! they become the CRDs' descriptions and what `kubectl explain bucket` prints.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::access_types::SharedWith;

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
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".status.className","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.className) || (has(self.className) && self.className == oldSelf.className)", "message": "spec.className cannot be changed or removed once set: kopper does not move a bucket to another class or backend; create a new Bucket with the new class (and copy the data)"}
]))]
pub struct BucketSpec {
    /// The BucketClass this Bucket is made with: its backend and the settings it enforces
    /// (encryption, public-access block, versioning, lifecycle rules, tags, access modes, a
    /// quota per namespace). Omitted: the class annotated `kopper.dev/is-default-class:
    /// "true"`; when no BucketClass exists at all, kopper's built-in class (its flags'
    /// provider, enforcing nothing); with classes but no default, the Bucket waits
    /// (`NoDefaultClass`). The
    /// class a bucket was made with is kept in `status.className`; it cannot be changed
    /// afterwards: create a new Bucket instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub class_name: Option<String>,

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

    /// The other namespaces whose BucketAccess objects may get this bucket, each with the
    /// most it may get (`ReadOnly` or `ReadWrite`); at most 64. Only this list counts as
    /// consent: nothing another namespace writes does. Removing a namespace, or lowering its
    /// mode below what its BucketAccess asks for, deletes that grant's IAM user and key. A
    /// BucketAccess of this Bucket's own namespace needs no entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 64,
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["namespace"]
    ))]
    pub shared_with: Vec<SharedWith>,
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
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
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

    /// The BucketClass the bucket was made with, recorded before the bucket is created; not
    /// set for kopper's built-in class. The Bucket stays with it (and its backend) even if the
    /// default class changes, so that deleting the Bucket cleans up where the bucket is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,

    /// The backend the bucket was made on: its S3 endpoint (or `aws`), region and whose
    /// credentials kopper uses there (a digest of the class's credentials Secret name,
    /// `ambient`, or `kopper` for kopper's flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,

    /// `Ready` is True when the bucket, user, policy, one access key and the Secret are in
    /// place (mode `ServiceAccount`: the bucket, role, policy, ConfigMap and the
    /// ServiceAccount's annotation). Reasons when it is not: `Provisioning`,
    /// `ProviderNotConfigured`, `BucketNameTaken`, `BucketTagsMissing`, `UserNameTaken`,
    /// `SecretNameTaken`, `BucketNameImmutable`, `InvalidKeyRotation`, `AccessDenied`,
    /// `ProviderUnavailable`, `BucketNotEmpty`, `Deleting`, `KeylessNotConfigured`,
    /// `RoleNameTaken`, `ConfigMapNameTaken`, `ServiceAccountTaken`,
    /// `ServiceAccountAnnotated`, `ServiceAccountNotFound`, `ClassNotFound`, `ClassNotReady`,
    /// `ClassNameImmutable`, `ForbiddenByClass`, `QuotaExceeded`, `BackendChanged`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Most lifecycle rules a BucketClass may set.
pub const MAX_LIFECYCLE_RULES: usize = 20;
/// Most tags a BucketClass adds to every bucket. S3 allows 50 tags on a bucket: kopper's own 4,
/// at most 40 of the Bucket's, and the class's share the rest.
pub const MAX_CLASS_TAGS: usize = 10;

/// A kind of bucket a cluster admin offers, cluster-wide: where buckets are made (an S3
/// endpoint, region and kopper's own credentials for it) and what every bucket of the class
/// gets whatever its Bucket asks for (encryption, public-access block, versioning, lifecycle
/// rules, tags), which access modes its Buckets may use and how many Buckets of the class one
/// namespace may have. A Bucket names its class in `spec.className`, or gets the class
/// annotated `kopper.dev/is-default-class: "true"`; with neither, kopper's own flags are the
/// class and nothing is enforced. Changing a class changes every bucket of it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "BucketClass",
    doc = "A kind of bucket a cluster admin offers: the backend buckets of the class are made on, and the settings every bucket of it gets (encryption, public-access block, versioning, lifecycle rules, tags), the access modes its Buckets may use and the most Buckets of the class per namespace. Annotate one class kopper.dev/is-default-class: \"true\" to make it the default for Buckets that name none.",
    plural = "bucketclasses",
    shortname = "bc",
    status = "BucketClassStatus",
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".metadata.annotations.kopper\\.dev/is-default-class"}"#,
    printcolumn = r#"{"name":"Buckets","type":"integer","jsonPath":".status.bucketsUsing"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BucketClassSpec {
    /// Where buckets of this class are made. Omitted: the provider of kopper's own flags
    /// (`--s3-region`, `--s3-endpoint`, …). Changing it does not move buckets: Buckets made on
    /// the old backend report `BackendChanged` until it is set back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,

    /// Server-side encryption every bucket of the class gets by default. Omitted: kopper leaves
    /// a bucket's encryption as the backend sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,

    /// Block public access to every bucket of the class: all four S3 settings (block and
    /// ignore public ACLs, block public policies, restrict public buckets). `false` leaves
    /// them as they are. Default: `true`.
    #[serde(default = "enabled")]
    pub block_public_access: bool,

    /// Versioning of every bucket of the class: `Enabled` or `Suspended`. Omitted: each Bucket
    /// chooses with its `spec.versioning`. A Bucket asking for the other state is refused
    /// (`ForbiddenByClass`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<ClassVersioning>,

    /// The lifecycle rules of every bucket of the class, replacing any others (at most 20,
    /// ids unique). Omitted: kopper leaves a bucket's lifecycle as it is; an empty list
    /// removes every lifecycle rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxItems" = 20,
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["id"]
    ))]
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,

    /// Tags added to every bucket of the class: at most 10, with the same rules as a
    /// Bucket's `spec.tags`. A Bucket that sets one of these keys itself is refused
    /// (`ForbiddenByClass`), not silently overridden.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 10,
        "additionalProperties" = {"type": "string", "maxLength": 256, "pattern": r"^[\p{L}\p{N} _.:/=+@-]*$"},
        "x-kubernetes-validations" = [
            {"rule": "self.all(key, size(key) >= 1 && size(key) <= 128)", "message": "spec.tags: tag keys must have 1 to 128 characters"},
            {"rule": "self.all(key, !key.startsWith('aws:') && !key.startsWith('kopper.dev/'))", "message": "spec.tags: tag keys may not start with aws: or kopper.dev/"}
        ]
    ))]
    pub tags: BTreeMap<String, String>,

    /// The access modes Buckets of this class may use (`Key`, `ServiceAccount`). Default:
    /// both. A Bucket asking for another is refused (`ForbiddenByClass`).
    #[serde(default = "every_access_mode")]
    #[schemars(extend("minItems" = 1, "maxItems" = 2, "x-kubernetes-list-type" = "set"))]
    pub allowed_access_modes: Vec<AccessMode>,

    /// The most Buckets of this class one namespace may have (1 to 10000). The oldest ones
    /// (by creation time, then name) get buckets; the rest report `QuotaExceeded` and get
    /// nothing until one of those is deleted. Omitted: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_buckets_per_namespace: Option<u32>,
}

fn enabled() -> bool {
    true
}

fn every_access_mode() -> Vec<AccessMode> {
    vec![AccessMode::Key, AccessMode::ServiceAccount]
}

/// Where the buckets of a class are made.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    /// Region buckets are created in unless a Bucket names one.
    #[schemars(length(min = 1, max = 32), pattern(r"^[a-z0-9-]+$"))]
    pub region: String,

    /// S3 endpoint URL of an S3-compatible service (`https://…`). Omitted: AWS. Also written
    /// into each Bucket's Secret as AWS_ENDPOINT_URL and S3_ENDPOINT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 512), pattern(r"^https?://[^\s]+$"))]
    pub endpoint: Option<String>,

    /// IAM endpoint URL. Omitted: AWS, or the S3 endpoint when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 512), pattern(r"^https?://[^\s]+$"))]
    pub iam_endpoint: Option<String>,

    /// Address buckets by path (`endpoint/bucket`), as most S3-compatible services need.
    #[serde(default)]
    pub force_path_style: bool,

    /// Name of a Secret in kopper's own namespace (never a tenant's) holding kopper's
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, optionally) for
    /// this backend; read again when it changes. Omitted: the standard AWS chain (kopper's
    /// environment, IRSA, instance metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub credentials_secret: Option<String>,
}

/// Default server-side encryption of a bucket.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.kmsKeyId) || self.algorithm == 'aws:kms'", "message": "spec.encryption.kmsKeyId is only for algorithm aws:kms: remove it, or set algorithm to aws:kms"}
]))]
pub struct Encryption {
    /// `AES256` (keys managed by S3) or `aws:kms`.
    pub algorithm: EncryptionAlgorithm,

    /// With `aws:kms`: the KMS key (id, alias or ARN). Omitted: the account's `aws/s3` key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), pattern(r"^[A-Za-z0-9:/_+=,.@-]+$"))]
    pub kms_key_id: Option<String>,
}

/// Server-side encryption algorithms.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EncryptionAlgorithm {
    /// Keys managed by S3 (SSE-S3).
    #[serde(rename = "AES256")]
    Aes256,
    /// Keys in AWS KMS (SSE-KMS).
    #[serde(rename = "aws:kms")]
    AwsKms,
}

impl EncryptionAlgorithm {
    /// The name S3 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptionAlgorithm::Aes256 => "AES256",
            EncryptionAlgorithm::AwsKms => "aws:kms",
        }
    }
}

/// Versioning a class enforces.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClassVersioning {
    Enabled,
    Suspended,
}

/// One lifecycle rule: what expires, for objects under `prefix`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.expirationDays) || has(self.noncurrentVersionExpirationDays) || has(self.abortIncompleteMultipartUploadDays)", "message": "a lifecycle rule needs at least one of expirationDays, noncurrentVersionExpirationDays and abortIncompleteMultipartUploadDays"}
]))]
pub struct LifecycleRule {
    /// The rule's name, unique in the class.
    #[schemars(length(min = 1, max = 255), pattern(r"^[A-Za-z0-9 _.:/=+@-]+$"))]
    pub id: String,

    /// Only objects whose key starts with this (omitted: every object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,

    /// Delete objects this many days after they were created (1 to 36500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub expiration_days: Option<u32>,

    /// Delete a version this many days after it stopped being current (1 to 36500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub noncurrent_version_expiration_days: Option<u32>,

    /// Abort multipart uploads not finished after this many days (1 to 36500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub abort_incomplete_multipart_upload_days: Option<u32>,
}

/// What kopper last observed for a BucketClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketClassStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// How many Buckets use this class (name it, were made with it, or take it as the
    /// default).
    #[serde(default)]
    pub buckets_using: u32,

    /// `Ready` is True when kopper can use the backend: its credentials Secret is in kopper's
    /// namespace with both keys (reasons when not: `CredentialsSecretNotFound`,
    /// `InvalidCredentialsSecret`, `NamespaceUnknown`). `Default` is set on classes annotated
    /// as the default: True for the one in force, False (`OlderDefaultExists`) for any other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl BucketClassSpec {
    /// The class kopper's flags make when no BucketClass applies: their provider, nothing
    /// enforced, every access mode, no quota.
    pub fn built_in() -> Self {
        Self {
            backend: None,
            encryption: None,
            block_public_access: false,
            versioning: None,
            lifecycle_rules: None,
            tags: BTreeMap::new(),
            allowed_access_modes: every_access_mode(),
            max_buckets_per_namespace: None,
        }
    }
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

    #[test]
    fn crd_of_classes_is_cluster_scoped_with_a_short_name_and_status() {
        let crd = BucketClass::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["bc".to_owned()][..]));
        assert!(crd.spec.versions[0].subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn the_encrypted_class_sample_parses_and_enforces_what_it_says() {
        let (_, text) = crate::samples::BUILT_IN
            .iter()
            .find(|(name, _)| *name == "bucketclass-encrypted.yaml")
            .expect("the sample is built in");
        let class: BucketClass = crate::samples::of_kind(text, "BucketClass").expect("a BucketClass");
        let spec = &class.spec;
        assert_eq!(spec.encryption.as_ref().map(|e| e.algorithm), Some(EncryptionAlgorithm::Aes256));
        assert!(spec.block_public_access);
        assert_eq!(spec.versioning, Some(ClassVersioning::Enabled));
        assert_eq!(spec.lifecycle_rules.as_ref().map(Vec::len), Some(2));
        assert_eq!(spec.allowed_access_modes, [AccessMode::Key, AccessMode::ServiceAccount]);
        let annotations = class.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get("kopper.dev/is-default-class").map(String::as_str), Some("true"));
        assert_eq!(spec.max_buckets_per_namespace, Some(10));
        assert_eq!(spec.tags["cost-centre"], "platform");
        assert!(crate::controllers::bucket::names::tags_problem(&spec.tags).is_none());
    }
}
