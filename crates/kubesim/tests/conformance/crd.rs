use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::common::{TestCluster, api_error, unique_name, wait_for};

/// A `Widget` CRD in a group of one test's own, so tests running side by side on one cluster
/// never share a CRD.
pub struct Widgets {
    group: String,
}

impl Widgets {
    /// Installs the CRD in a new group named after `test`, and waits until it is established.
    pub async fn install(cluster: &mut TestCluster, test: &str) -> Self {
        let widgets = Self { group: format!("{}.test.kubesim.dev", unique_name(test)) };
        cluster.crd(&widgets.crd()).await;
        widgets
    }

    pub fn crd_name(&self) -> String {
        format!("widgets.{}", self.group)
    }

    /// Namespaced, served at v1 (storage) and v1beta1.
    fn crd(&self) -> CustomResourceDefinition {
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
            "metadata": {"name": self.crd_name()},
            "spec": {
                "group": self.group,
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                          "shortNames": ["wd"], "categories": ["kubesim"]},
                "versions": [version("v1", true), version("v1beta1", false)],
            },
        }))
        .unwrap()
    }

    pub fn api(&self, cluster: &TestCluster, ns: &str, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&self.group, version, "Widget");
        Api::namespaced_with(cluster.client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
    }

    fn widget(&self, name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": format!("{}/v1", self.group), "kind": "Widget",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap()
    }
}

#[tokio::test]
async fn created_crd_is_served_at_once_with_discovery() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "served").await;
    let api = widgets.api(&cluster, &ns, "v1");
    api.create(&PostParams::default(), &widgets.widget("w", json!({"size": 1}))).await.unwrap();
    // A real API server updates discovery shortly after the CRD is established.
    let (versions, plural) = wait_for("both versions of the group in discovery", || async {
        let only_ours = Discovery::new(cluster.client.clone()).filter(&[widgets.group.as_str()]);
        let discovery = only_ours.run().await.ok()?;
        let group = discovery.get(&widgets.group)?;
        let versions: Vec<String> = group.versions().map(str::to_owned).collect();
        let (resource, _) = group.recommended_kind("Widget")?;
        (versions.len() == 2).then_some((versions, resource.plural))
    })
    .await;
    assert_eq!(versions, vec!["v1", "v1beta1"], "GA first");
    assert_eq!(plural, "widgets");
}

#[tokio::test]
async fn every_served_version_reads_the_same_object() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "versions").await;
    widgets
        .api(&cluster, &ns, "v1")
        .create(&PostParams::default(), &widgets.widget("w", json!({"size": 2})))
        .await
        .unwrap();
    let beta = widgets.api(&cluster, &ns, "v1beta1").get("w").await.unwrap();
    assert_eq!(beta.types.unwrap().api_version, format!("{}/v1beta1", widgets.group));
    assert_eq!(beta.data["spec"]["size"], 2);
}

#[tokio::test]
async fn schema_violations_are_invalid_and_name_each_field() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "schema").await;
    let api = widgets.api(&cluster, &ns, "v1");
    let bad = widgets.widget("w", json!({"size": 11, "color": "green", "name": "UPPER"}));
    let status = api_error(api.create(&PostParams::default(), &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = status.details.unwrap().causes.into_iter().map(|c| c.field).collect();
    for field in ["spec.size", "spec.color", "spec.name"] {
        assert!(fields.iter().any(|f| f == field), "{field} named in {fields:?}");
    }
    let missing = api_error(api.create(&PostParams::default(), &widgets.widget("w", json!({}))).await);
    assert!(missing.message.contains("spec.size: Required value"), "{}", missing.message);
}

#[tokio::test]
async fn defaults_are_applied_and_unknown_fields_pruned() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "defaults").await;
    let api = widgets.api(&cluster, &ns, "v1");
    let spec = json!({"size": 3, "unknown": "dropped", "free": {"anything": {"goes": 1}}, "port": "http"});
    let created = api.create(&PostParams::default(), &widgets.widget("w", spec)).await.unwrap();
    assert_eq!(created.data["spec"]["color"], "red");
    assert!(created.data["spec"].get("unknown").is_none());
    assert_eq!(created.data["spec"]["free"]["anything"]["goes"], 1);
    assert_eq!(created.data["spec"]["port"], "http");
}

#[tokio::test]
async fn a_default_added_to_the_schema_shows_in_objects_stored_before_it() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "read-defaults").await;
    let api = widgets.api(&cluster, &ns, "v1");
    api.create(&PostParams::default(), &widgets.widget("w", json!({"size": 1}))).await.unwrap();
    let shape = json!({"type": "object", "default": {}, "properties": {
        "kind": {"type": "string", "default": "round"},
        "edges": {"type": "integer"},
    }});
    let add_shape: Vec<Value> = (0..2)
        .map(|version| {
            json!({"op": "add", "value": shape,
                   "path": format!("/spec/versions/{version}/schema/openAPIV3Schema/properties/spec/properties/shape")})
        })
        .collect();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let patch = Patch::Json::<()>(serde_json::from_value(Value::Array(add_shape)).unwrap());
    crds.patch(&widgets.crd_name(), &PatchParams::default(), &patch).await.unwrap();
    // A real API server serves the new schema once it has rebuilt the CRD's handler.
    let spec = wait_for("the new default to show in the stored widget", || async {
        let spec = api.get("w").await.ok()?.data["spec"].clone();
        spec.get("shape").is_some().then_some(spec)
    })
    .await;
    assert_eq!(
        spec["shape"],
        json!({"kind": "round"}),
        "an absent object gets its default, then its own defaults"
    );
    assert_eq!(spec["color"], "red");
}

#[tokio::test]
async fn generation_follows_spec_changes_only() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let widgets = Widgets::install(&mut cluster, "generation").await;
    let api = widgets.api(&cluster, &ns, "v1");
    let created = api.create(&PostParams::default(), &widgets.widget("w", json!({"size": 1}))).await.unwrap();
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
    let widgets = Widgets::install(&mut cluster, "status").await;
    let api = widgets.api(&cluster, &ns, "v1");
    let mut with_status = widgets.widget("w", json!({"size": 1}));
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
    let mut cluster = TestCluster::new().await;
    let group = format!("{}.test.kubesim.dev", unique_name("cluster-scoped"));
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    cluster.crd(&crd).await;
    let gvk = GroupVersionKind::gvk(&group, "v1", "Gadget");
    let api: Api<DynamicObject> =
        Api::all_with(cluster.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "gadgets"));
    let gadget: DynamicObject =
        serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
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
    let widgets = Widgets::install(&mut cluster, "deleting").await;
    let api = widgets.api(&cluster, &ns, "v1");
    api.create(&PostParams::default(), &widgets.widget("w", json!({"size": 1}))).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let name = widgets.crd_name();
    crds.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the CRD to go", || async { crds.get_opt(&name).await.unwrap().is_none().then_some(()) }).await;
    let status = api_error(api.get("w").await);
    assert_eq!(status.code, 404);
}

/// The bounds an operator puts on tenant-written fields (`maxLength` on map values and list
/// items, `maxProperties`, `maxItems`) are enforced on create with kube-apiserver's wording,
/// each cause naming its field, and an object within them is stored.
#[tokio::test]
async fn length_and_count_bounds_are_enforced_with_the_apiservers_wording() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("crd").await;
    let group = format!("{}.test.kubesim.dev", unique_name("bounds"));
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "tags": {"type": "object", "maxProperties": 2,
                             "additionalProperties": {"type": "string", "maxLength": 4}},
                    "names": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 3}},
                }}},
            }}}],
        },
    }))
    .unwrap();
    cluster.crd(&crd).await;
    let gvk = GroupVersionKind::gvk(&group, "v1", "Gadget");
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, "gadgets"),
    );
    let gadget = |name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap()
    };
    let long = gadget("long", json!({"tags": {"a": "12345"}, "names": ["abcd"]}));
    let status = api_error(api.create(&PostParams::default(), &long).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    for cause in [
        "spec.tags.a: Too long: may not be more than 4 bytes",
        "spec.names[0]: Too long: may not be more than 3 bytes",
    ] {
        assert!(status.message.contains(cause), "{cause} in {}", status.message);
    }
    let many = gadget("many", json!({"tags": {"a": "1", "b": "2", "c": "3"}, "names": ["a", "b", "c"]}));
    let status = api_error(api.create(&PostParams::default(), &many).await);
    for cause in [
        "spec.tags: Too many: 2: must have at most 2 items",
        "spec.names: Too many: 3: must have at most 2 items",
    ] {
        assert!(status.message.contains(cause), "{cause} in {}", status.message);
    }
    api.create(
        &PostParams::default(),
        &gadget("fits", json!({"tags": {"a": "1234"}, "names": ["abc", "de"]})),
    )
    .await
    .expect("an object within its bounds is stored");
}
