//! The Secret a Bucket's application reads its credentials from: what it should hold (pure)
//! and how it is written (create with POST, replace with a resourceVersion precondition, so
//! a Secret someone else wrote in between is never overwritten).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Error;
use super::aws::StaticCredentials;
use super::types::Bucket;

/// Label on every Secret a Bucket owns, holding the Bucket's name; kopper watches only
/// Secrets that carry it.
pub const BUCKET_LABEL: &str = "kopper.dev/bucket";

pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";

/// What the Secret says besides the key pair.
pub struct Contents<'a> {
    pub bucket: &'a str,
    pub region: &'a str,
    pub endpoint: Option<&'a str>,
}

impl Contents<'_> {
    pub fn entries(&self) -> BTreeMap<String, String> {
        let mut entries = BTreeMap::from([
            ("AWS_REGION".to_owned(), self.region.to_owned()),
            ("BUCKET_NAME".to_owned(), self.bucket.to_owned()),
        ]);
        if let Some(endpoint) = self.endpoint {
            entries.insert("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned());
            entries.insert("S3_ENDPOINT".to_owned(), endpoint.to_owned());
        }
        entries
    }
}

/// Label and annotation the replication engine puts on the copies it keeps.
pub const REPLICATED_BY_LABEL: &str = "kopper.dev/replicated-by";
pub const RULE_UID_ANNOTATION: &str = "kopper.dev/rule-uid";

/// Who keeps a Secret found under a Bucket's `spec.secretName`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeper {
    /// This Bucket: it may write the Secret.
    ThisBucket,
    /// The replication engine (its marks are on the Secret), whatever else the Secret says.
    Replication,
    /// Anyone else: another controller, another Bucket, a person.
    Other,
}

/// Who keeps `secret`. A Secret is this Bucket's when kopper made it for this Bucket: its
/// controller is this Bucket (by uid, so a recreated Bucket of the same name does not inherit
/// it) and it carries no mark of another keeper. A tenant who edits Secrets in its namespace
/// can forge the owner reference on any Secret there, so the reference alone proves nothing;
/// what it cannot do is make kopper fight another controller: a Secret with the replication
/// engine's marks is never this Bucket's, and a forged claim on a Secret nobody else keeps
/// only hands the tenant's own Bucket a Secret the tenant could have written anyway. Whatever
/// slips through, [`super::churn`] bounds the access keys a fight could cost.
pub fn keeper<K: Resource>(secret: &K, bucket: &Bucket) -> Keeper {
    keeper_of(secret, bucket, BUCKET_LABEL)
}

/// Who keeps `secret`, for the kopper object `owner` that labels its Secrets with `label` (a
/// Bucket, or a BucketAccess): [`Keeper::ThisBucket`] only when that object is the Secret's
/// controller (by API group, kind, name and uid: a reference that names another kind with the
/// same uid is not it) and the label is there, as [`keeper`] says for Buckets. The version in
/// `apiVersion` is not compared, so that Secrets stay kopper's across a version of the CRD.
pub fn keeper_of<K: Resource, O: Resource<DynamicType = ()>>(secret: &K, owner: &O, label: &str) -> Keeper {
    let replicated = secret.labels().contains_key(REPLICATED_BY_LABEL)
        || secret.annotations().contains_key(RULE_UID_ANNOTATION);
    if replicated {
        return Keeper::Replication;
    }
    let group = |api_version: &str| api_version.rsplit_once('/').map(|(group, _)| group.to_owned());
    let controlled = secret.owner_references().iter().any(|reference| {
        reference.controller == Some(true)
            && owner.meta().uid.as_deref() == Some(reference.uid.as_str())
            && owner.meta().name.as_deref() == Some(reference.name.as_str())
            && reference.kind == O::kind(&())
            && group(&reference.api_version).as_deref() == Some(O::group(&()).as_ref())
    });
    if controlled && secret.labels().contains_key(label) { Keeper::ThisBucket } else { Keeper::Other }
}

/// The access key id the Secret holds, if it holds a complete key pair.
pub fn held_key_id(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    let id = data.get(ACCESS_KEY_ID)?;
    let secret_key = data.get(SECRET_ACCESS_KEY)?;
    if secret_key.0.is_empty() {
        return None;
    }
    String::from_utf8(id.0.clone()).ok().filter(|id| !id.is_empty())
}

/// The Bucket as the Secret's controller, so Kubernetes deletes the Secret with it. Without
/// `blockOwnerDeletion`: setting it needs `update` on `buckets/finalizers` where the
/// OwnerReferencesPermissionEnforcement admission plugin runs, and nothing here needs the
/// Bucket's deletion to wait for the Secret's.
pub fn owner_reference(
    bucket: &Bucket,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    let mut owner = bucket.controller_owner_ref(&())?;
    owner.block_owner_deletion = None;
    Some(owner)
}

/// The Secret with a new key pair.
pub fn desired(bucket: &Bucket, contents: &Contents, key_id: &str, secret_key: &str) -> Secret {
    let mut data: BTreeMap<String, ByteString> =
        contents.entries().into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect();
    data.insert(ACCESS_KEY_ID.to_owned(), ByteString(key_id.as_bytes().to_vec()));
    data.insert(SECRET_ACCESS_KEY.to_owned(), ByteString(secret_key.as_bytes().to_vec()));
    Secret {
        metadata: ObjectMeta {
            name: Some(bucket.secret_name()),
            namespace: bucket.namespace(),
            labels: Some(BTreeMap::from([(
                BUCKET_LABEL.to_owned(),
                super::names::label_value(&bucket.name_any()),
            )])),
            owner_references: owner_reference(bucket).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The Secret with its key pair kept and everything else as it should be, or `None` when
/// nothing differs.
pub fn refreshed(bucket: &Bucket, current: &Secret, contents: &Contents) -> Option<Secret> {
    let data = current.data.clone().unwrap_or_default();
    let key_id = String::from_utf8_lossy(&data.get(ACCESS_KEY_ID)?.0).into_owned();
    let secret_key = String::from_utf8_lossy(&data.get(SECRET_ACCESS_KEY)?.0).into_owned();
    let desired = desired(bucket, contents, &key_id, &secret_key);
    let same = desired.data == current.data && holds_labels(current, &desired);
    (!same).then_some(desired)
}

/// Creates the Bucket's Secret (or ConfigMap), or replaces `current` conditioned on its
/// resourceVersion; keeps the labels, annotations and finalizers others put on it.
pub async fn write<K>(
    api: &Api<K>,
    current: Option<&K>,
    mut desired: K,
    field_manager: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = desired.name_any();
    let params = PostParams { field_manager: Some(field_manager.to_owned()), ..PostParams::default() };
    let result = match current {
        None => api.create(&params, &desired).await,
        Some(current) => {
            let mut labels = current.labels().clone();
            labels.extend(desired.meta_mut().labels.take().unwrap_or_default());
            let meta = desired.meta_mut();
            meta.labels = Some(labels);
            meta.annotations = current.meta().annotations.clone();
            meta.finalizers = current.meta().finalizers.clone();
            meta.resource_version = current.resource_version();
            api.replace(&name, &params, &desired).await
        }
    };
    result.map(drop).map_err(Error::kube(format!("writing {} {name}", K::kind(&()))))
}

/// Whether `current` carries every label `desired` sets (others may add their own).
pub fn holds_labels(current: &impl Resource, desired: &impl Resource) -> bool {
    desired.meta().labels.iter().flatten().all(|(key, value)| current.labels().get(key) == Some(value))
}

/// Reads kopper's own provider credentials from `namespace/name` (keys `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`). The error names the Secret and
/// the missing key, never a value.
pub async fn read_credentials(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<StaticCredentials> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace).get(name).await.map_err(|error| {
        anyhow::anyhow!("--s3-credentials-secret {namespace}/{name} cannot be read: {error}")
    })?;
    let data = secret.data.unwrap_or_default();
    let value = |key: &str| data.get(key).map(|value| String::from_utf8_lossy(&value.0).trim().to_owned());
    let required = |key: &str| {
        value(key).filter(|v| !v.is_empty()).ok_or_else(|| {
            anyhow::anyhow!("--s3-credentials-secret {namespace}/{name} has no {key}: add it to the Secret")
        })
    };
    Ok(StaticCredentials {
        access_key_id: required(ACCESS_KEY_ID)?,
        secret_access_key: required(SECRET_ACCESS_KEY)?,
        session_token: value("AWS_SESSION_TOKEN").filter(|v| !v.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::bucket::types::BucketSpec;

    fn bucket() -> Bucket {
        let mut bucket =
            Bucket::new("data", serde_json::from_value::<BucketSpec>(serde_json::json!({})).unwrap());
        bucket.metadata.namespace = Some("team".into());
        bucket.metadata.uid = Some("uid-1".into());
        bucket
    }

    fn contents() -> Contents<'static> {
        Contents { bucket: "b", region: "eu-west-1", endpoint: Some("http://s3.local") }
    }

    #[test]
    fn the_secret_holds_the_credentials_and_is_owned_by_its_bucket() {
        let secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        assert_eq!(secret.metadata.name.as_deref(), Some("data-s3"));
        let data = secret.data.as_ref().unwrap();
        for key in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
            "BUCKET_NAME",
            "AWS_ENDPOINT_URL",
            "S3_ENDPOINT",
        ] {
            assert!(data.contains_key(key), "{key}");
        }
        assert_eq!(keeper(&secret, &bucket()), Keeper::ThisBucket);
        assert_eq!(held_key_id(&secret).as_deref(), Some("AKIA1"));
        let mut other = bucket();
        other.metadata.uid = Some("uid-2".into());
        assert_eq!(
            keeper(&secret, &other),
            Keeper::Other,
            "a recreated Bucket of the same name does not own it"
        );
    }

    /// A tenant may put a controller reference to its Bucket on a Secret the replication
    /// engine keeps in its namespace; kopper must not fight the engine over it.
    #[test]
    fn a_secret_the_replication_engine_keeps_is_never_the_bucket_s() {
        let forged = |label: bool, annotation: bool| {
            let mut secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
            if label {
                secret.labels_mut().insert(REPLICATED_BY_LABEL.into(), "rule".into());
            }
            if annotation {
                secret.annotations_mut().insert(RULE_UID_ANNOTATION.into(), "uid-r".into());
            }
            secret
        };
        assert_eq!(keeper(&forged(true, false), &bucket()), Keeper::Replication);
        assert_eq!(keeper(&forged(false, true), &bucket()), Keeper::Replication);
        assert_eq!(keeper(&forged(false, false), &bucket()), Keeper::ThisBucket);
    }

    /// A controller reference with the owner's uid but another kind or name (a tenant's forgery
    /// to make kopper delete a planted Secret) does not make the Secret the owner's.
    #[test]
    fn a_reference_with_the_uid_but_another_kind_or_name_is_someone_else_s() {
        for (kind, name, api_version) in [
            ("ConfigMap", "data", "v1"),
            ("Bucket", "other", "kopper.dev/v1"),
            ("Bucket", "data", "x.dev/v1"),
        ] {
            let mut secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
            let reference = &mut secret.metadata.owner_references.as_mut().unwrap()[0];
            reference.kind = kind.into();
            reference.name = name.into();
            reference.api_version = api_version.into();
            assert_eq!(keeper(&secret, &bucket()), Keeper::Other, "{kind} {name} {api_version}");
        }
        let mut secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        secret.metadata.owner_references.as_mut().unwrap()[0].api_version = "kopper.dev/v2".into();
        assert_eq!(keeper(&secret, &bucket()), Keeper::ThisBucket, "another version of the CRD is still it");
    }

    #[test]
    fn a_secret_without_the_bucket_s_controller_reference_is_someone_else_s() {
        let mut secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        secret.metadata.owner_references = None;
        assert_eq!(keeper(&secret, &bucket()), Keeper::Other);
        let mut unlabelled = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        unlabelled.metadata.labels = None;
        assert_eq!(keeper(&unlabelled, &bucket()), Keeper::Other);
    }

    #[test]
    fn a_refresh_keeps_the_key_pair_and_writes_only_when_something_differs() {
        let secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        assert!(refreshed(&bucket(), &secret, &contents()).is_none());
        let moved = Contents { region: "eu-north-1", ..contents() };
        let refreshed = refreshed(&bucket(), &secret, &moved).unwrap();
        assert_eq!(held_key_id(&refreshed).as_deref(), Some("AKIA1"));
        assert_eq!(refreshed.data.unwrap()["AWS_REGION"].0, b"eu-north-1");
    }

    #[test]
    fn a_secret_without_its_secret_key_holds_no_usable_key() {
        let mut secret = desired(&bucket(), &contents(), "AKIA1", "s3cr3t");
        secret.data.as_mut().unwrap().remove(SECRET_ACCESS_KEY);
        assert_eq!(held_key_id(&secret), None);
    }
}
