//! The BucketAccess custom resource, and the consent a Bucket gives to it (`spec.sharedWith`).
//! Doc comments here are user documentation: they become the CRD's descriptions and what
//! `kubectl explain bucketaccess` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most namespaces one Bucket may be shared with.
pub const MAX_SHARED_WITH: usize = 64;

/// Access to another Bucket's bucket, asked for from the namespace that wants it. kopper
/// grants it only when the Bucket's owner consents: the Bucket lists this namespace in its
/// `spec.sharedWith` with at least this mode (a Bucket of this same namespace needs no entry).
/// A grant gets its own IAM user, with a policy allowing exactly its mode on exactly that
/// bucket, and one access key, written into a Secret of this namespace. Withdrawing the
/// consent, deleting the Bucket or deleting this object removes the user and its key.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kopper.dev",
    version = "v1alpha1",
    kind = "BucketAccess",
    doc = "Access to a Bucket's bucket from this namespace, granted only while the Bucket's spec.sharedWith lists this namespace with at least this mode (or the Bucket is in this namespace): its own IAM user, a policy for exactly this mode and bucket, and one access key in a Secret of this namespace. Withdrawing the consent, or deleting the Bucket or this object, removes them.",
    plural = "bucketaccesses",
    namespaced,
    status = "BucketAccessStatus",
    printcolumn = r#"{"name":"Bucket","type":"string","jsonPath":".spec.bucketRef.name"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.bucketRef == oldSelf.bucketRef", "message": "spec.bucketRef cannot be changed: create another BucketAccess for another Bucket"}
]))]
pub struct BucketAccessSpec {
    /// The Bucket to get access to.
    pub bucket_ref: BucketRef,

    /// `ReadOnly`: list the bucket and read its objects. `ReadWrite`: also write and delete
    /// objects and use multipart uploads. The Bucket's owner must have shared at least this
    /// mode with this namespace.
    pub mode: GrantMode,

    /// Name of the Secret, in this namespace, that receives the credentials
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `BUCKET_NAME` and, with a
    /// custom endpoint, `AWS_ENDPOINT_URL` and `S3_ENDPOINT`). Default: this object's name. A
    /// Secret of that name kopper did not make for this object is never overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub secret_name: Option<String>,
}

/// Which Bucket a BucketAccess asks for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketRef {
    /// The Bucket's namespace. Default: this BucketAccess's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,

    /// The Bucket's name.
    #[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
}

/// What a grant allows. `ReadOnly` is less than `ReadWrite`: consent to `ReadWrite` covers a
/// `ReadOnly` grant, not the other way round.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum GrantMode {
    /// List the bucket and read its objects (all versions).
    ReadOnly,
    /// Read, write and delete objects, and use multipart uploads.
    ReadWrite,
}

impl GrantMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantMode::ReadOnly => "ReadOnly",
            GrantMode::ReadWrite => "ReadWrite",
        }
    }
}

/// A namespace a Bucket is shared with, and the most it may get.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedWith {
    /// The namespace whose BucketAccess objects may get access.
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,

    /// The most that namespace may get: a BucketAccess asking for more is refused.
    pub mode: GrantMode,
}

/// What kopper last observed for this object. Never holds the secret access key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketAccessStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The S3 bucket the credentials are for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,

    /// The IAM user of this grant. Recorded before the user is created, so that a crash right
    /// after creating it cannot lose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,

    /// The uid of the Bucket the user was made for: a Bucket deleted and created again under
    /// the same name is another Bucket, and the user of the former goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_uid: Option<String>,

    /// The BucketClass whose backend the user is on (none: kopper's built-in class), so that
    /// kopper deletes the user there whether or not its Bucket still exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,

    /// The backend the user is on, as a Bucket's `status.backend` names one: a class pointed
    /// at another backend since leaves the user where it is, and kopper deletes it only there
    /// (`BackendChanged` until the class is set back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,

    /// Id of the access key in the Secret (never the secret key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,

    /// `Ready` is True when the user, its policy, one access key and the Secret are in place.
    /// Reasons when it is not: `NotShared` (the Bucket does not exist, or is not shared with
    /// this namespace: the two are not told apart), `ModeNotShared`, `BucketNotReady`,
    /// `BucketDeleted`, `ForbiddenByClass`, `TooManyGrants` (10 other BucketAccesses of this
    /// namespace already hold access to the Bucket: this one holds nothing until one goes), `SecretNameTaken`,
    /// `UserNameTaken`, `BackendChanged`, `ClassNotFound`, `ClassNotReady`, `AccessDenied`,
    /// `ProviderUnavailable`, `ProviderError`, `CredentialsChurn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl BucketAccess {
    /// The Secret that receives the credentials.
    pub fn secret_name(&self) -> String {
        self.spec.secret_name.clone().unwrap_or_else(|| kube::ResourceExt::name_any(self))
    }

    /// The namespace of the Bucket asked for.
    pub fn bucket_namespace(&self) -> String {
        match &self.spec.bucket_ref.namespace {
            Some(namespace) => namespace.clone(),
            None => kube::ResourceExt::namespace(self).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn crd_is_namespaced_with_status_and_bucket_ref_cannot_change() {
        let crd = BucketAccess::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, "bucketaccesses");
        assert!(crd.spec.versions[0].subresources.as_ref().unwrap().status.is_some());
        let schema = serde_json::to_string(&crd.spec.versions[0].schema).unwrap();
        assert!(schema.contains("self.bucketRef == oldSelf.bucketRef"), "{schema}");
    }

    #[test]
    fn the_read_only_sample_asks_for_the_sample_bucket_of_its_own_namespace() {
        let (_, text) = crate::samples::BUILT_IN
            .iter()
            .find(|(name, _)| *name == "bucketaccess-read-only.yaml")
            .expect("the sample is built in");
        let grant: BucketAccess = crate::samples::of_kind(text, "BucketAccess").expect("a BucketAccess");
        assert_eq!(grant.spec.mode, GrantMode::ReadOnly);
        assert_eq!(grant.bucket_namespace(), "default", "no namespace: its own");
        assert_eq!(grant.secret_name(), "s3-sample-reader");
        let (_, buckets) = crate::samples::BUILT_IN
            .iter()
            .find(|(name, _)| *name == "bucket-with-credentials.yaml")
            .expect("the Bucket sample");
        let bucket: serde_json::Value = crate::samples::of_kind(buckets, "Bucket").expect("a Bucket");
        assert_eq!(bucket["metadata"]["name"], grant.spec.bucket_ref.name.as_str());
    }

    #[test]
    fn read_write_covers_read_only_and_not_the_other_way_round() {
        assert!(GrantMode::ReadWrite > GrantMode::ReadOnly);
        let spec: BucketAccessSpec =
            serde_json::from_value(serde_json::json!({"bucketRef": {"name": "data"}, "mode": "ReadOnly"}))
                .unwrap();
        assert_eq!(spec.mode, GrantMode::ReadOnly);
        assert!(
            serde_json::from_value::<BucketAccessSpec>(serde_json::json!({"bucketRef": {"name": "d"}}))
                .is_err()
        );
    }
}
