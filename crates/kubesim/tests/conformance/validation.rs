use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error};

#[tokio::test]
async fn invalid_object_names_are_rejected_with_the_field() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "Not_Valid"}})).unwrap();
    let status = api_error(api.create(&PostParams::default(), &cm).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(status.details.unwrap().causes[0].field, "metadata.name");
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let dotted: Namespace = serde_json::from_value(json!({"metadata": {"name": "a.b"}})).unwrap();
    assert_eq!(
        api_error(namespaces.create(&PostParams::default(), &dotted).await).code,
        422,
        "namespaces are DNS labels"
    );
}

#[tokio::test]
async fn configmap_keys_must_be_valid() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"bad key": "v"}})).unwrap();
    let status = api_error(api.create(&PostParams::default(), &cm).await);
    assert_eq!(status.code, 422);
    assert!(status.message.contains("data[bad key]"), "{}", status.message);
}

#[tokio::test]
async fn configmap_over_one_mebibyte_is_rejected_and_just_under_is_accepted() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let fits = "x".repeat(1024 * 1024 - 1);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "fits"}, "data": {"k": fits}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let too_big = "x".repeat(1024 * 1024 + 1);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "big"}, "data": {"k": too_big}})).unwrap();
    let status = api_error(api.create(&PostParams::default(), &cm).await);
    assert_eq!(status.code, 422);
    assert!(status.message.contains("1048576"), "{}", status.message);
}

#[tokio::test]
async fn immutable_configmap_refuses_changes() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "1"}, "immutable": true}))
            .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let status =
        api_error(api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await);
    assert_eq!(status.code, 422);
    assert!(status.message.contains("field is immutable"), "{}", status.message);
    let labels = Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}}));
    let labelled = api.patch("a", &PatchParams::default(), &labels).await;
    assert!(labelled.is_ok(), "metadata stays mutable: {labelled:?}");
}

#[tokio::test]
async fn secret_string_data_is_folded_into_base64_data() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let api: Api<Secret> = Api::namespaced(cluster.client.clone(), &ns);
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"user": "admin"}})).unwrap();
    let created = api.create(&PostParams::default(), &secret).await.unwrap();
    assert_eq!(created.data.unwrap()["user"].0, b"admin");
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(created.string_data.is_none());
}

#[tokio::test]
async fn secret_data_that_is_not_base64_is_bad_request() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("valid").await;
    let request = http::Request::post(format!("/api/v1/namespaces/{ns}/secrets"))
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"k": "not base64!"}}))
            .unwrap(),
        )
        .unwrap();
    let status = api_error(cluster.client.request::<Secret>(request).await);
    assert_eq!(status.code, 400);
}

#[tokio::test]
async fn strict_field_validation_refuses_unknown_fields_and_default_drops_them() {
    let mut cluster = TestCluster::new().await;
    // An older server ignores the parameter and would store the object.
    if !cluster.supports("fieldValidation=Strict", 25).await {
        return;
    }
    let ns = cluster.namespace("valid").await;
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"k": "v"}, "bogus": 1}))
    .unwrap();
    let post = |query: &str| {
        http::Request::post(format!("/api/v1/namespaces/{ns}/configmaps{query}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .unwrap()
    };
    let status = api_error(cluster.client.request::<ConfigMap>(post("?fieldValidation=Strict")).await);
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\""
    );
    let created = cluster.client.request::<serde_json::Value>(post("")).await.unwrap();
    assert!(created.get("bogus").is_none(), "without Strict the unknown field is dropped");
}
