use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error, create_pod_when_admitted};

async fn config_map(cluster: &TestCluster, ns: &str, data: serde_json::Value) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}, "data": data})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api
}

#[tokio::test]
async fn merge_patch_sets_and_removes_keys() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api = config_map(&cluster, &ns, json!({"keep": "1", "drop": "2"})).await;
    let patched = api
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"drop": null, "new": "3"}})))
        .await
        .unwrap();
    let data = patched.data.unwrap();
    assert_eq!(
        (data.get("keep").map(String::as_str), data.get("new").map(String::as_str)),
        (Some("1"), Some("3"))
    );
    assert!(!data.contains_key("drop"));
}

#[tokio::test]
async fn json_patch_applies_operations_and_a_failed_test_changes_nothing() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api = config_map(&cluster, &ns, json!({"k": "1"})).await;
    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "replace", "path": "/data/k", "value": "2"}])).unwrap();
    let patched = api.patch("a", &PatchParams::default(), &Patch::<()>::Json(ops)).await.unwrap();
    assert_eq!(patched.data.unwrap()["k"], "2");
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "nope"},
        {"op": "replace", "path": "/data/k", "value": "3"}]))
    .unwrap();
    let status = api_error(api.patch("a", &PatchParams::default(), &Patch::<()>::Json(failing)).await);
    assert_eq!(status.code, 422);
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "2");
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), &ns);
    // No grace period: on a real cluster a kubelet may have taken the pod, and the namespace
    // would otherwise wait out the default 30 s for it when the test cleans up.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}))
    .unwrap();
    create_pod_when_admitted(&api, &pod).await;
    let patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"}]}});
    let patched = api.patch("p", &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
    let images: Vec<String> =
        patched.spec.unwrap().containers.into_iter().map(|c| c.image.unwrap_or_default()).collect();
    assert_eq!(images, vec!["a:1", "b:2"]);
}

#[tokio::test]
async fn server_side_apply_creates_then_owns_and_prunes_its_fields() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let pp = PatchParams::apply("manager-a");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
        "data": {"one": "1", "two": "2"}});
    let created = api.patch("a", &pp, &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let managers: Vec<String> =
        created.metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert_eq!(managers, vec!["manager-a"]);
    let smaller =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"one": "1"}});
    let pruned = api.patch("a", &pp, &Patch::Apply(&smaller)).await.unwrap();
    assert_eq!(
        pruned.data.unwrap().keys().collect::<Vec<_>>(),
        vec!["one"],
        "a field dropped from apply goes"
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_with_another_managers_field_unless_forced() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let doc = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": v}});
    api.patch("a", &PatchParams::apply("first"), &Patch::Apply(doc("1"))).await.unwrap();
    let status = api_error(api.patch("a", &PatchParams::apply("second"), &Patch::Apply(doc("2"))).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(status.message.contains("conflict with \"first\""), "{}", status.message);
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "1");
    let forced =
        api.patch("a", &PatchParams::apply("second").force(), &Patch::Apply(doc("2"))).await.unwrap();
    assert_eq!(forced.data.unwrap()["k"], "2");
    let same_value = api.patch("a", &PatchParams::apply("third"), &Patch::Apply(doc("2"))).await;
    assert!(same_value.is_ok(), "applying the same value shares ownership: {same_value:?}");
}

#[tokio::test]
async fn server_side_apply_conflicts_with_fields_set_by_update() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    let api = config_map(&cluster, &ns, json!({"k": "1"})).await;
    let doc = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "2"}});
    let status = api_error(api.patch("a", &PatchParams::apply("applier"), &Patch::Apply(doc)).await);
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn unsupported_patch_content_type_is_rejected() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("patch").await;
    config_map(&cluster, &ns, json!({})).await;
    let request = http::Request::patch(format!("/api/v1/namespaces/{ns}/configmaps/a"))
        .header("content-type", "text/plain")
        .body(b"{}".to_vec())
        .unwrap();
    let status = api_error(cluster.client.request::<ConfigMap>(request).await);
    assert_eq!(status.code, 415);
}

/// An applied configuration is partial: a second manager applying only a label to a
/// RoleBinding neither touches nor conflicts on the `roleRef` it left out, and applying an
/// empty configuration releases what a manager held (shared fields stay, its own go).
#[tokio::test]
async fn apply_reads_a_partial_configuration_as_sent() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("apply-partial").await;
    let api: Api<RoleBinding> = Api::namespaced(cluster.client.clone(), &ns);
    let full = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "b", "labels": {"shared": "1", "old-only": "1"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}],
    });
    api.patch("b", &PatchParams::apply("old"), &Patch::Apply(&full)).await.unwrap();
    let mut shared = full.clone();
    shared["metadata"]["labels"] = json!({"shared": "1"});
    api.patch("b", &PatchParams::apply("new"), &Patch::Apply(&shared)).await.unwrap();

    let label_only = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                            "metadata": {"name": "b", "labels": {"third": "1"}}});
    let labelled = api.patch("b", &PatchParams::apply("third"), &Patch::Apply(&label_only)).await.unwrap();
    assert_eq!(labelled.role_ref.name, "view");

    let empty = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"}});
    let released = api.patch("b", &PatchParams::apply("old"), &Patch::Apply(&empty)).await.unwrap();
    let labels = released.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["shared", "third"], "{labels:?}");
    assert_eq!(released.role_ref.name, "view");
    let managers: Vec<String> =
        released.metadata.managed_fields.iter().flatten().filter_map(|entry| entry.manager.clone()).collect();
    assert!(!managers.contains(&"old".to_owned()), "{managers:?}");
}
