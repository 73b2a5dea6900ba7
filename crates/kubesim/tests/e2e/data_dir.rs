//! `Config::data_dir` (`kubesim serve --data-dir`): a restarted kubesim has the objects and
//! resource versions it had, and goes on from there, as kube-apiserver does with etcd.

use std::path::Path;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent, WatchParams,
};
use kubesim::{Config, Server};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(10);

fn config(dir: &Path) -> Config {
    Config { data_dir: Some(dir.to_owned()), ..Config::default() }
}

fn resource_version(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|rv| rv.parse().ok()).expect("a numeric resourceVersion")
}

async fn create_config_map(client: &kube::Client, ns: &str, name: &str) -> ConfigMap {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
    Api::namespaced(client.clone(), ns).create(&PostParams::default(), &cm).await.unwrap()
}

fn gadgets(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("restart.kubesim.dev", "v1", "Gadget");
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "gadgets"))
}

/// A cluster-scoped CRD and one object of it: after a restart the object must still be
/// served, which needs the CRD's resource back in discovery and routing, not only in storage.
async fn create_gadget(client: &kube::Client) -> DynamicObject {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.restart.kubesim.dev"},
        "spec": {"group": "restart.kubesim.dev", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    let gadget: DynamicObject = serde_json::from_value(json!({"apiVersion": "restart.kubesim.dev/v1",
        "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"x": 1}}))
    .unwrap();
    gadgets(client).create(&PostParams::default(), &gadget).await.unwrap()
}

#[tokio::test]
async fn restarted_server_keeps_objects_and_resource_versions_and_continues_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(config(dir.path())).await.unwrap();
    let client = first.client();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kept"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    let before = create_config_map(&client, "kept", "a").await;
    let gadget = create_gadget(&client).await;
    let list_rv = Api::<ConfigMap>::all(client.clone()).list(&ListParams::default()).await.unwrap().metadata;
    let cluster_rv: u64 = list_rv.resource_version.unwrap().parse().unwrap();
    first.shutdown().await;

    let second = Server::start(config(dir.path())).await.unwrap();
    let client = second.client();
    let after = Api::<ConfigMap>::namespaced(client.clone(), "kept").get("a").await.unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same object, not a new one");
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version);
    assert_eq!(after.data, before.data);
    let gadget_after = gadgets(&client).get("g").await.unwrap();
    assert_eq!(gadget_after.metadata.resource_version, gadget.metadata.resource_version);
    assert_eq!(gadget_after.data["spec"]["x"], 1);
    let defaults = Api::<Namespace>::all(client.clone()).get_opt("default").await.unwrap();
    assert!(defaults.is_some(), "the default namespaces are part of the saved state");

    let newer = create_config_map(&client, "kept", "b").await;
    assert!(
        resource_version(&newer.metadata) > cluster_rv,
        "a write after the restart ({:?}) is newer than everything before it ({cluster_rv})",
        newer.metadata.resource_version
    );
}

#[tokio::test]
async fn a_watch_from_before_the_restart_is_told_to_list_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(config(dir.path())).await.unwrap();
    let old = create_config_map(&first.client(), "default", "a").await;
    create_config_map(&first.client(), "default", "b").await;
    first.shutdown().await;

    let second = Server::start(config(dir.path())).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(second.client(), "default");
    let rv = old.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let event = tokio::time::timeout(DEADLINE, stream.try_next()).await.expect("an event in time");
    match event.expect("no stream error").expect("stream still open") {
        // kube-apiserver's watch cache starts at its current revision after a restart.
        WatchEvent::Error(e) => assert_eq!(e.code, 410, "{}", e.message),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn writes_are_saved_while_serving_so_a_crash_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(config(dir.path())).await.unwrap();
    let created = create_config_map(&first.client(), "default", "a").await;
    let snapshot = kubesim::persist::snapshot_path(dir.path());
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !std::fs::read_to_string(&snapshot).is_ok_and(|s| s.contains(r#""name":"a""#)) {
        assert!(tokio::time::Instant::now() < deadline, "the write was not saved within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Dropped without `shutdown`: no save on the way out.
    drop(first);

    let second = Server::start(config(dir.path())).await.unwrap();
    let kept = Api::<ConfigMap>::namespaced(second.client(), "default").get("a").await.unwrap();
    assert_eq!(kept.metadata.uid, created.metadata.uid);
}
