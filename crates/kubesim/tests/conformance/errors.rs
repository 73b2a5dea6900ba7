use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error};

fn post(path: &str, content_type: &str, body: Vec<u8>) -> http::Request<Vec<u8>> {
    http::Request::post(path).header("content-type", content_type).body(body).unwrap()
}

#[tokio::test]
async fn malformed_json_is_bad_request_and_stores_nothing() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("errors").await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let status = api_error(
        cluster.client.request::<ConfigMap>(post(&path, "application/json", b"{\"meta".to_vec())).await,
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn unknown_resource_is_not_found() {
    let cluster = TestCluster::new().await;
    let request = http::Request::get("/api/v1/namespaces/default/widgets").body(Vec::new()).unwrap();
    let status = api_error(cluster.client.request::<serde_json::Value>(request).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
}

#[tokio::test]
async fn unsupported_media_type_is_415() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("errors").await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let status =
        api_error(cluster.client.request::<ConfigMap>(post(&path, "text/csv", b"a,b".to_vec())).await);
    assert_eq!(status.code, 415);
}

#[tokio::test]
async fn oversized_body_is_413() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("errors").await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let body =
        serde_json::to_vec(&json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(4 * 1024 * 1024)}}))
            .unwrap();
    let status = api_error(cluster.client.request::<ConfigMap>(post(&path, "application/json", body)).await);
    assert_eq!(status.code, 413);
}

#[tokio::test]
async fn injected_faults_fail_the_next_matching_requests_then_stop() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("errors").await;
    let Some(sim) = cluster.sim() else { return };
    sim.faults().fail_next(kubesim::Fault {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        count: 2,
        status: 500,
    });
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    assert_eq!(api_error(api.create(&PostParams::default(), &cm).await).code, 500);
    assert_eq!(api_error(api.create(&PostParams::default(), &cm).await).code, 500);
    api.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(sim.counters().get("create", "configmaps"), 3);
    // kube-rs retries a 429 after its Retry-After, so the read succeeds on the second try.
    sim.faults().fail_next(kubesim::Fault {
        verb: Some("get".into()),
        resource: None,
        count: 1,
        status: 429,
    });
    api.get("a").await.unwrap();
    assert_eq!(sim.counters().get("get", "configmaps"), 2);
    sim.faults().fail_next(kubesim::Fault {
        verb: Some("update".into()),
        resource: None,
        count: 1,
        status: 409,
    });
    let current = api.get("a").await.unwrap();
    assert_eq!(api_error(api.replace("a", &PostParams::default(), &current).await).reason, "Conflict");
}
