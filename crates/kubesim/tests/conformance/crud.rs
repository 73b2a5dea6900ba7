use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error, unique_name};

fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test]
async fn created_object_gets_server_metadata_and_reads_back() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &config_map("a", json!({"k": "v"}))).await.unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36), "uid is a UUID: {:?}", meta.uid);
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.namespace.as_deref(), Some(ns.as_str()));
    assert!(meta.resource_version.as_deref().is_some_and(|rv| rv.parse::<u64>().is_ok()));
    let read = api.get("a").await.unwrap();
    assert_eq!(read.data.unwrap()["k"], "v");
    assert_eq!(read.metadata.uid, meta.uid);
}

#[tokio::test]
async fn resource_versions_increase_across_the_cluster() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let first = api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let second = api.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    let rv = |c: &ConfigMap| c.metadata.resource_version.clone().unwrap().parse::<u64>().unwrap();
    assert!(rv(&second) > rv(&first));
}

#[tokio::test]
async fn creating_an_existing_name_is_already_exists() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let status = api_error(api.create(&PostParams::default(), &config_map("a", json!({}))).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(status.message, "configmaps \"a\" already exists");
    let details = status.details.unwrap();
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("a", "configmaps"));
}

#[tokio::test]
async fn update_with_stale_resource_version_is_conflict() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &config_map("a", json!({"k": "1"}))).await.unwrap();
    let mut newer = created.clone();
    newer.data = Some([("k".to_owned(), "2".to_owned())].into());
    api.replace("a", &PostParams::default(), &newer).await.unwrap();
    let mut stale = created;
    stale.data = Some([("k".to_owned(), "3".to_owned())].into());
    let status = api_error(api.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(status.message.contains("the object has been modified"), "{}", status.message);
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "2", "the stale write changed nothing");
}

#[tokio::test]
async fn update_without_resource_version_is_unconditional() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("a", json!({"k": "1"}))).await.unwrap();
    let replaced =
        api.replace("a", &PostParams::default(), &config_map("a", json!({"k": "2"}))).await.unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "2");
}

#[tokio::test]
async fn update_that_changes_nothing_keeps_the_resource_version() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &config_map("a", json!({"k": "1"}))).await.unwrap();
    let same = api.replace("a", &PostParams::default(), &created).await.unwrap();
    assert_eq!(same.metadata.resource_version, created.metadata.resource_version);
}

#[tokio::test]
async fn generate_name_gives_unique_names_with_the_prefix() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let template: ConfigMap = serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let a = api.create(&PostParams::default(), &template).await.unwrap().metadata.name.unwrap();
    let b = api.create(&PostParams::default(), &template).await.unwrap().metadata.name.unwrap();
    assert!(a.starts_with("gen-") && a.len() == "gen-".len() + 5, "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn create_in_missing_namespace_is_not_found() {
    let cluster = TestCluster::new().await;
    let missing = unique_name("missing");
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &missing);
    let status = api_error(api.create(&PostParams::default(), &config_map("a", json!({}))).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, format!("namespaces \"{missing}\" not found"));
}

#[tokio::test]
async fn get_of_missing_object_is_not_found_with_details() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let status = api_error(api.get("missing").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "configmaps \"missing\" not found");
    assert!(api.get_opt("missing").await.unwrap().is_none());
}

#[tokio::test]
async fn dry_run_create_stores_nothing() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let pp = PostParams { dry_run: true, ..PostParams::default() };
    let answered = api.create(&pp, &config_map("a", json!({"k": "v"}))).await.unwrap();
    assert_eq!(answered.data.unwrap()["k"], "v");
    assert!(api.get_opt("a").await.unwrap().is_none());
}

/// Deployments are stored and served like every built-in kind (no controller acts on them in
/// kubesim), with the spec generation tracked and bodies checked against their type.
#[tokio::test]
async fn deployments_are_stored_with_their_generation_and_typed_validation() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};

    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crud").await;
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), &ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &deployment).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let scaled = api
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2), "a spec change bumps the generation");
    let relabelled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await
        .unwrap();
    assert_eq!(relabelled.metadata.generation, Some(2), "a metadata change does not");

    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let untyped: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), &ns, &resource);
    let mut wrong: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
        "spec": {"replicas": "three", "selector": {}, "template": {}},
    }))
    .unwrap();
    wrong.metadata.namespace = Some(ns.clone());
    let status = api_error(untyped.create(&PostParams::default(), &wrong).await);
    assert_eq!(status.code, 400, "{}", status.message);
}
