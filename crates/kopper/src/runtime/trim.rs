//! What kopper keeps of the custom resources it caches whole.
//!
//! Tenants size the metadata of their objects: up to 256 KiB of annotations (a
//! `kubectl apply` alone puts the whole object in one), labels and managed fields. A cache
//! keeps every object for the life of the process, so kopper drops what no decision reads
//! before an object is stored, and its memory follows the number of objects, not their size.
//!
//! Every write kopper makes from a cached object is a merge patch or a server-side apply
//! naming only the fields it sets (status, finalizers), so what is dropped here stays on the
//! server untouched.

use kube::Resource;
use kube::runtime::watcher;

/// Objects per page when listing a kind tenants write. A page is held whole while it is
/// decoded, before anything is dropped from its objects; at up to about 1.5 MiB per object
/// (what etcd stores), kube's default of 500 could take most of kopper's memory limit at
/// every restart. 50 keeps a page within tens of MiB, in ten times the requests.
pub const TENANT_OBJECTS_PAGE_SIZE: u32 = 50;

/// The watch configuration for a kind tenants write: pages of [`TENANT_OBJECTS_PAGE_SIZE`].
pub fn tenant_objects_watch() -> watcher::Config {
    watcher::Config::default().page_size(TENANT_OBJECTS_PAGE_SIZE)
}

/// Drops managed fields, owner references, labels and every annotation but `annotations_read`
/// from `object`, keeping the identity, generation, finalizers and deletion mark that
/// reconciles, Events and patches use.
pub fn keep_only_what_decisions_read<K: Resource>(object: &mut K, annotations_read: &[&str]) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.labels = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| annotations_read.contains(&key.as_str()));
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// [`keep_only_what_decisions_read`] for kinds whose decisions read no annotation.
pub fn keep_no_metadata_extras<K: Resource>(object: &mut K) {
    keep_only_what_decisions_read(object, &[]);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
    };

    use super::*;

    fn tenant_sized() -> ConfigMap {
        let big = "x".repeat(200_000);
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("app".into()),
                namespace: Some("team-a".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("7".into()),
                generation: Some(3),
                finalizers: Some(vec!["kopper.dev/cleanup".into()]),
                deletion_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                annotations: Some(
                    [
                        ("kopper.dev/rotate-credentials".to_owned(), "2".to_owned()),
                        ("kubectl.kubernetes.io/last-applied-configuration".to_owned(), big.clone()),
                    ]
                    .into(),
                ),
                labels: Some([("team".to_owned(), "a".to_owned())].into()),
                managed_fields: Some(vec![ManagedFieldsEntry { manager: Some(big), ..Default::default() }]),
                owner_references: Some(vec![OwnerReference { name: "owner".into(), ..Default::default() }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn keeps_identity_finalizers_and_the_annotations_read() {
        let mut object = tenant_sized();
        let before = object.metadata.clone();
        keep_only_what_decisions_read(&mut object, &["kopper.dev/rotate-credentials"]);
        let after = &object.metadata;
        assert_eq!(
            (&after.name, &after.namespace, &after.uid, &after.resource_version, &after.generation),
            (&before.name, &before.namespace, &before.uid, &before.resource_version, &before.generation)
        );
        assert_eq!(after.finalizers, before.finalizers);
        assert_eq!(after.deletion_timestamp, before.deletion_timestamp);
        assert_eq!(
            after.annotations,
            Some([("kopper.dev/rotate-credentials".to_owned(), "2".to_owned())].into())
        );
        assert_eq!((&after.labels, &after.managed_fields, &after.owner_references), (&None, &None, &None));
    }

    #[test]
    fn drops_every_annotation_when_none_is_read() {
        let mut object = tenant_sized();
        keep_no_metadata_extras(&mut object);
        assert_eq!(object.metadata.annotations, None);
        assert!(serde_json::to_string(&object).unwrap().len() < 1_000, "no tenant-sized field is left");
    }
}
