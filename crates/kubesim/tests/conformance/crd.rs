use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::common::{TestCluster, api_error, wait_for};

/// A namespaced `Widget` CRD in group `test.kubesim.dev`, served at v1 (storage) and v1beta1.
pub fn widget_crd() -> CustomResourceDefinition {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                    "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "port": {"x-kubernetes-int-or-string": true},
                },
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    });
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": schema},
               "subresources": {"status": {}},
               "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]})
    };
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.test.kubesim.dev"},
        "spec": {
            "group": "test.kubesim.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                      "shortNames": ["wd"], "categories": ["kubesim"]},
            "versions": [version("v1", true), version("v1beta1", false)],
        },
    }))
    .unwrap()
}

pub fn widgets(cluster: &TestCluster, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("test.kubesim.dev", version, "Widget");
    Api::namespaced_with(cluster.client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
}

pub async fn install_widgets(cluster: &TestCluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    crds.create(&PostParams::default(), &widget_crd()).await.unwrap();
    wait_for("the CRD to be established", || async {
        let crd = crds.get("widgets.test.kubesim.dev").await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "test.kubesim.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec}))
    .unwrap()
}

#[tokio::test]
async fn created_crd_is_served_at_once_with_discovery() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    api.create(&PostParams::default(), &widget("w", json!({"size": 1}))).await.unwrap();
    let discovery = Discovery::new(cluster.client.clone()).run().await.unwrap();
    let group = discovery.get("test.kubesim.dev").expect("the group is discovered");
    let versions: Vec<String> = group.versions().map(str::to_owned).collect();
    assert_eq!(versions, vec!["v1", "v1beta1"], "GA first");
    let (resource, _) = group.recommended_kind("Widget").unwrap();
    assert_eq!(resource.plural, "widgets");
}

#[tokio::test]
async fn every_served_version_reads_the_same_object() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    widgets(&cluster, &ns, "v1")
        .create(&PostParams::default(), &widget("w", json!({"size": 2})))
        .await
        .unwrap();
    let beta = widgets(&cluster, &ns, "v1beta1").get("w").await.unwrap();
    assert_eq!(beta.types.unwrap().api_version, "test.kubesim.dev/v1beta1");
    assert_eq!(beta.data["spec"]["size"], 2);
}

#[tokio::test]
async fn schema_violations_are_invalid_and_name_each_field() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    let bad = widget("w", json!({"size": 11, "color": "green", "name": "UPPER"}));
    let status = api_error(api.create(&PostParams::default(), &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = status.details.unwrap().causes.into_iter().map(|c| c.field).collect();
    for field in ["spec.size", "spec.color", "spec.name"] {
        assert!(fields.iter().any(|f| f == field), "{field} named in {fields:?}");
    }
    let missing = api_error(api.create(&PostParams::default(), &widget("w", json!({}))).await);
    assert!(missing.message.contains("spec.size: Required value"), "{}", missing.message);
}

#[tokio::test]
async fn defaults_are_applied_and_unknown_fields_pruned() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    let spec = json!({"size": 3, "unknown": "dropped", "free": {"anything": {"goes": 1}}, "port": "http"});
    let created = api.create(&PostParams::default(), &widget("w", spec)).await.unwrap();
    assert_eq!(created.data["spec"]["color"], "red");
    assert!(created.data["spec"].get("unknown").is_none());
    assert_eq!(created.data["spec"]["free"]["anything"]["goes"], 1);
    assert_eq!(created.data["spec"]["port"], "http");
}

#[tokio::test]
async fn generation_follows_spec_changes_only() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    let created = api.create(&PostParams::default(), &widget("w", json!({"size": 1}))).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let labelled =
        api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    assert_eq!(labelled.metadata.generation, Some(1), "metadata changes keep the generation");
    let status = api.patch_status("w", &pp, &Patch::Merge(json!({"status": {"ready": true}}))).await.unwrap();
    assert_eq!(status.metadata.generation, Some(1), "status changes keep the generation");
    let resized = api.patch("w", &pp, &Patch::Merge(json!({"spec": {"size": 2}}))).await.unwrap();
    assert_eq!(resized.metadata.generation, Some(2));
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status_writes() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    let mut with_status = widget("w", json!({"size": 1}));
    with_status.data["status"] = json!({"ready": true});
    let created = api.create(&PostParams::default(), &with_status).await.unwrap();
    assert!(created.data.get("status").is_none(), "status is ignored on create");
    let pp = PatchParams::default();
    let main = json!({"spec": {"size": 5}, "status": {"ready": true}});
    let patched = api.patch("w", &pp, &Patch::Merge(main)).await.unwrap();
    assert_eq!(patched.data["spec"]["size"], 5);
    assert!(patched.data.get("status").is_none(), "the main resource ignores status");
    let status = json!({"spec": {"size": 9}, "status": {"ready": true}});
    let patched = api.patch_status("w", &pp, &Patch::Merge(status)).await.unwrap();
    assert_eq!(patched.data["status"]["ready"], true);
    assert_eq!(patched.data["spec"]["size"], 5, "/status ignores spec");
}

#[tokio::test]
async fn cluster_scoped_crd_serves_objects_without_namespace() {
    let cluster = TestCluster::new().await;
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.test.kubesim.dev"},
        "spec": {"group": "test.kubesim.dev", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = GroupVersionKind::gvk("test.kubesim.dev", "v1", "Gadget");
    let api: Api<DynamicObject> =
        Api::all_with(cluster.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "gadgets"));
    let gadget: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "test.kubesim.dev/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"x": 1}}))
        .unwrap();
    let created = api.create(&PostParams::default(), &gadget).await.unwrap();
    assert_eq!(created.metadata.namespace, None);
    assert_eq!(api.get("g").await.unwrap().data["spec"]["x"], 1);
}

#[tokio::test]
async fn deleting_a_crd_removes_its_objects_and_stops_serving_it() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    install_widgets(&cluster).await;
    let api = widgets(&cluster, &ns, "v1");
    api.create(&PostParams::default(), &widget("w", json!({"size": 1}))).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    crds.delete("widgets.test.kubesim.dev", &DeleteParams::default()).await.unwrap();
    wait_for("the CRD to go", || async {
        crds.get_opt("widgets.test.kubesim.dev").await.unwrap().is_none().then_some(())
    })
    .await;
    let status = api_error(api.get("w").await);
    assert_eq!(status.code, 404);
}
