//! The committed manifests (config/rbac/, config/samples/), read and created as an
//! administrator would with `kubectl apply -f`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kopper::controllers::bucket::types::BucketClass;
use kopper::controllers::namespace_access::types::NamespaceAccess;
use kopper::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;

/// Every document of every file in config/rbac/, in file order (the Namespace first).
pub fn rbac_documents() -> Vec<serde_json::Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files.iter().flat_map(|file| yaml_documents(&std::fs::read_to_string(file).unwrap())).collect()
}

pub fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    kopper::samples::documents(text).unwrap()
}

pub fn kind_of(document: &serde_json::Value) -> &str {
    document["kind"].as_str().unwrap_or_default()
}

/// Creates one manifest of config/rbac/ or config/samples/ as `client`.
pub async fn create_document(client: &Client, document: serde_json::Value) {
    match kind_of(&document) {
        "ClusterRole" => create_cluster_scoped::<ClusterRole>(client, document).await,
        "ClusterRoleBinding" => create_cluster_scoped::<ClusterRoleBinding>(client, document).await,
        "Role" => create::<Role>(client, document).await,
        "RoleBinding" => create::<RoleBinding>(client, document).await,
        "ServiceAccount" => create::<ServiceAccount>(client, document).await,
        "Namespace" => create_cluster_scoped::<Namespace>(client, document).await,
        "ConfigMap" => create::<ConfigMap>(client, document).await,
        "NamespaceAccess" => create_cluster_scoped::<NamespaceAccess>(client, document).await,
        "ReplicationRule" => create_cluster_scoped::<ReplicationRule>(client, document).await,
        "ConfigMapSync" => create::<ConfigMapSync>(client, document).await,
        "Secret" => create::<Secret>(client, document).await,
        "SecretSync" => create::<SecretSync>(client, document).await,
        "BucketClass" => create_cluster_scoped::<BucketClass>(client, document).await,
        other => panic!("a manifest holds a {other}, which the tests do not know how to create"),
    }
}

async fn create<K>(client: &Client, document: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(document).unwrap();
    let namespace = object.namespace().unwrap();
    Api::<K>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &object).await.unwrap();
}

async fn create_cluster_scoped<K>(client: &Client, document: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(document).unwrap();
    Api::<K>::all(client.clone()).create(&PostParams::default(), &object).await.unwrap();
}
