//! The ConfigMap a Bucket in mode `ServiceAccount` writes for its workloads: the role's ARN,
//! the bucket and where it is. A ConfigMap, not a Secret: it holds nothing secret (the role
//! can be assumed only with the ServiceAccount's token), so workloads and people may read it
//! without the right to read Secrets, and it can be mounted or put into the environment
//! (`envFrom`) as it is. Written as the Secret of a key is ([`super::secret::write`]:
//! create, or replace conditioned on its resourceVersion), and only when something differs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::secret::{BUCKET_LABEL, Contents, holds_labels, owner_reference};
use super::types::Bucket;

/// Key of the role's ARN: the AWS SDKs' variable for web identity, with
/// `AWS_WEB_IDENTITY_TOKEN_FILE` (which the pod identity webhook sets).
pub const ROLE_ARN: &str = "AWS_ROLE_ARN";

/// The ConfigMap as it should be.
pub fn desired(bucket: &Bucket, contents: &Contents, role_arn: &str) -> ConfigMap {
    let mut data = contents.entries();
    data.insert(ROLE_ARN.to_owned(), role_arn.to_owned());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(bucket.config_map_name()),
            namespace: bucket.namespace(),
            labels: Some(BTreeMap::from([(
                BUCKET_LABEL.to_owned(),
                super::names::label_value(&bucket.name_any()),
            )])),
            owner_references: owner_reference(bucket).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Whether `current` already holds what `desired` does.
pub fn up_to_date(current: &ConfigMap, desired: &ConfigMap) -> bool {
    desired.data == current.data && holds_labels(current, desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::bucket::secret::{Keeper, keeper};
    use crate::controllers::bucket::types::BucketSpec;

    fn bucket() -> Bucket {
        let mut bucket =
            Bucket::new("data", serde_json::from_value::<BucketSpec>(serde_json::json!({})).unwrap());
        bucket.metadata.namespace = Some("team".into());
        bucket.metadata.uid = Some("uid-1".into());
        bucket
    }

    #[test]
    fn the_config_map_holds_the_role_and_the_bucket_and_is_owned_by_its_bucket() {
        let contents = Contents { bucket: "b", region: "eu-west-1", endpoint: None };
        let map = desired(&bucket(), &contents, "arn:aws:iam::1:role/kopper/c/r");
        assert_eq!(map.metadata.name.as_deref(), Some("data-s3"));
        let data = map.data.clone().unwrap();
        assert_eq!(data[ROLE_ARN], "arn:aws:iam::1:role/kopper/c/r");
        assert_eq!(data["BUCKET_NAME"], "b");
        assert!(!data.keys().any(|key| key.contains("SECRET") || key.contains("ACCESS_KEY")));
        assert_eq!(keeper(&map, &bucket()), Keeper::ThisBucket);
        assert!(up_to_date(&map, &map));
        let moved =
            desired(&bucket(), &Contents { region: "eu-north-1", ..contents }, "arn:aws:iam::1:role/r");
        assert!(!up_to_date(&map, &moved));
    }
}
