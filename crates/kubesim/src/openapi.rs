//! The OpenAPI v3 documents kube-apiserver publishes under `/openapi/v3`, for the resource
//! types kubesim serves.
//!
//! kubectl reads them for three things: whether a PATCH endpoint takes `fieldValidation`
//! (if it does, kubectl leaves validation to the server instead of downloading
//! `/openapi/v2`), the `x-kubernetes-patch-strategy` of every field (client-side
//! `kubectl apply` builds its strategic merge patch from them), and `kubectl explain`.
//! Built-in schemas come from k8s-openapi's schemars implementations, custom resources'
//! from their CRD's `openAPIV3Schema`.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, coordination, core, discovery, events, networking,
    policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceType};

const SCHEMA_PREFIX: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// The document at `/openapi/v3/{rest}`: the index for an empty `rest`, else the document
/// of one group/version (`api/v1`, `apis/{group}/{version}`). `None` for anything else.
pub fn document(registry: &Registry, rest: &[&str]) -> Option<Value> {
    match rest {
        [] => Some(index(registry)),
        ["api", version] => group_version(registry, "", version),
        ["apis", group, version] => group_version(registry, group, version),
        _ => None,
    }
}

/// `/openapi/v3`: where each group/version's document is. The `hash` changes whenever the
/// document does (a CRD is added, changed or removed), so clients may cache by URL.
fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, version) in served_group_versions(registry) {
        let key = gv_path(&group, &version);
        let hash = fingerprint(&resources(registry, &group, &version));
        paths.insert(key.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}));
    }
    json!({ "paths": paths })
}

fn group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let served = resources(registry, group, version);
    if served.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    schemas.insert(PATCH.into(), patch_schema());
    for rt in &served {
        let Some(kind_schemas) = kind_schemas(rt) else { continue };
        schemas.extend(kind_schemas);
        paths.extend(resource_paths(rt));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

fn served_group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut gvs = vec![(String::new(), "v1".to_owned())];
    for (group, versions) in registry.groups() {
        gvs.extend(versions.into_iter().map(|v| (group.clone(), v)));
    }
    gvs
}

/// The resource types served in one group/version (subresources left out).
fn resources(registry: &Registry, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
    let list = registry.resource_list(group, version);
    let names = list["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
    names
        .iter()
        .filter_map(|r| r["name"].as_str())
        .filter(|name| !name.contains('/'))
        .filter_map(|name| registry.get(group, version, name))
        .collect()
}

/// Changes whenever a group/version's document would: built-in documents are fixed, custom
/// ones follow their CRD's schema.
fn fingerprint(served: &[Arc<ResourceType>]) -> String {
    let mut hasher = DefaultHasher::new();
    for rt in served {
        (&rt.resource, &rt.kind, rt.namespaced, &rt.subresources).hash(&mut hasher);
        if let Some(custom) = &rt.custom {
            custom.schema.to_string().hash(&mut hasher);
        }
    }
    format!("{:016X}", hasher.finish())
}

/// The component schemas a resource type's document needs: its kind's and every schema
/// that one refers to.
fn kind_schemas(rt: &ResourceType) -> Option<Map<String, Value>> {
    match &rt.custom {
        Some(custom) => Some(custom_schemas(rt, &custom.schema)),
        None => builtin_schemas().get(&(rt.group.clone(), rt.kind.clone())).cloned(),
    }
}

type SchemaSet = BTreeMap<(String, String), Map<String, Value>>;

/// Built-in kinds' schemas, generated once: they never change while the process runs.
fn builtin_schemas() -> &'static SchemaSet {
    static SCHEMAS: OnceLock<SchemaSet> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut set = SchemaSet::new();
        let mut add = |group: &str, version: &str, kind: &str, schemas: Map<String, Value>| {
            set.insert(
                (group.to_owned(), kind.to_owned()),
                with_kind_extensions(schemas, group, version, kind),
            );
        };
        add("", "v1", "Namespace", closure::<core::v1::Namespace>());
        add("", "v1", "ConfigMap", closure::<core::v1::ConfigMap>());
        add("", "v1", "Secret", closure::<core::v1::Secret>());
        add("", "v1", "Pod", closure::<core::v1::Pod>());
        add("", "v1", "ServiceAccount", closure::<core::v1::ServiceAccount>());
        add("", "v1", "Event", closure::<core::v1::Event>());
        add("events.k8s.io", "v1", "Event", closure::<events::v1::Event>());
        let rbac_group = "rbac.authorization.k8s.io";
        add(rbac_group, "v1", "Role", closure::<rbac::v1::Role>());
        add(rbac_group, "v1", "RoleBinding", closure::<rbac::v1::RoleBinding>());
        add(rbac_group, "v1", "ClusterRole", closure::<rbac::v1::ClusterRole>());
        add(rbac_group, "v1", "ClusterRoleBinding", closure::<rbac::v1::ClusterRoleBinding>());
        add("coordination.k8s.io", "v1", "Lease", closure::<coordination::v1::Lease>());
        add("", "v1", "Service", closure::<core::v1::Service>());
        add("", "v1", "Endpoints", closure::<core::v1::Endpoints>());
        add("", "v1", "PersistentVolumeClaim", closure::<core::v1::PersistentVolumeClaim>());
        add("", "v1", "PersistentVolume", closure::<core::v1::PersistentVolume>());
        add("", "v1", "ReplicationController", closure::<core::v1::ReplicationController>());
        add("", "v1", "LimitRange", closure::<core::v1::LimitRange>());
        add("", "v1", "ResourceQuota", closure::<core::v1::ResourceQuota>());
        add("", "v1", "Node", closure::<core::v1::Node>());
        add("apps", "v1", "Deployment", closure::<apps::v1::Deployment>());
        add("apps", "v1", "StatefulSet", closure::<apps::v1::StatefulSet>());
        add("apps", "v1", "DaemonSet", closure::<apps::v1::DaemonSet>());
        add("apps", "v1", "ReplicaSet", closure::<apps::v1::ReplicaSet>());
        add("apps", "v1", "ControllerRevision", closure::<apps::v1::ControllerRevision>());
        add("batch", "v1", "Job", closure::<batch::v1::Job>());
        add("batch", "v1", "CronJob", closure::<batch::v1::CronJob>());
        add("policy", "v1", "PodDisruptionBudget", closure::<policy::v1::PodDisruptionBudget>());
        add("networking.k8s.io", "v1", "NetworkPolicy", closure::<networking::v1::NetworkPolicy>());
        add("networking.k8s.io", "v1", "Ingress", closure::<networking::v1::Ingress>());
        add("networking.k8s.io", "v1", "IngressClass", closure::<networking::v1::IngressClass>());
        add(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            closure::<autoscaling::v2::HorizontalPodAutoscaler>(),
        );
        add("scheduling.k8s.io", "v1", "PriorityClass", closure::<scheduling::v1::PriorityClass>());
        add("storage.k8s.io", "v1", "StorageClass", closure::<storage::v1::StorageClass>());
        add("discovery.k8s.io", "v1", "EndpointSlice", closure::<discovery::v1::EndpointSlice>());
        add(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            closure::<admissionregistration::v1::ValidatingWebhookConfiguration>(),
        );
        add(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            closure::<admissionregistration::v1::MutatingWebhookConfiguration>(),
        );
        add(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            closure::<apiextensions::v1::CustomResourceDefinition>(),
        );
        set
    })
}

/// `T`'s schema and all it refers to, keyed by their OpenAPI names
/// (`io.k8s.api.core.v1.Pod`), with references in OpenAPI v3 form.
fn closure<T: JsonSchema>() -> Map<String, Value> {
    let mut generator = openapi_generator();
    generator.subschema_for::<T>();
    let mut schemas = generator.take_definitions(true);
    add_patch_strategies(&mut schemas);
    schemas
}

fn openapi_generator() -> SchemaGenerator {
    SchemaSettings::openapi3().with(|s| s.meta_schema = None).into_generator()
}

/// Marks the top-level schema of `kind` with the group/version/kind it is served as, which
/// is how kubectl finds a kind's schema in the document.
fn with_kind_extensions(
    mut schemas: Map<String, Value>,
    group: &str,
    version: &str,
    kind: &str,
) -> Map<String, Value> {
    let gvk = json!([{"group": group, "version": version, "kind": kind}]);
    if let Some(object) =
        schemas.get_mut(&builtin_schema_name(group, version, kind)).and_then(Value::as_object_mut)
    {
        object.insert("x-kubernetes-group-version-kind".into(), gvk);
    }
    schemas
}

/// The `patchStrategy`/`patchMergeKey` struct tags of the built-in types kubesim serves,
/// which k8s-openapi's schemas do not carry: without them kubectl's client-side apply
/// would replace lists (containers, env, ownerReferences…) instead of merging them.
const PATCH_STRATEGIES: &[(&str, &str, &str, Option<&str>)] = &[
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", "merge", None),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", "merge", Some("uid")),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "merge", Some("topologyKey")),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "merge", Some("name")),
];

fn add_patch_strategies(schemas: &mut Map<String, Value>) {
    for (schema, property, strategy, key) in PATCH_STRATEGIES {
        let Some(field) = schemas
            .get_mut(*schema)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(*property))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        field.insert("x-kubernetes-patch-strategy".into(), (*strategy).into());
        if let Some(key) = key {
            field.insert("x-kubernetes-patch-merge-key".into(), (*key).into());
        }
    }
}

/// ObjectMeta and what it refers to, shared by every custom resource document.
fn object_meta_schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(closure::<ObjectMeta>)
}

/// A custom resource's schema under the name kube-apiserver gives it
/// (`com.example.stable.v1.CronTab` for `stable.example.com/v1` `CronTab`), with
/// `metadata` pointing at ObjectMeta as kube-apiserver publishes it.
fn custom_schemas(rt: &ResourceType, schema: &Value) -> Map<String, Value> {
    let mut kind_schema = match schema {
        Value::Object(_) => schema.clone(),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    let properties = kind_schema
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut);
    if let Some(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
        );
        properties.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("{SCHEMA_PREFIX}{OBJECT_META}")}],
                   "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
    }
    if let Some(object) = kind_schema.as_object_mut() {
        object.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": rt.group, "version": rt.version, "kind": rt.kind}]),
        );
    }
    let mut schemas = object_meta_schemas().clone();
    schemas.insert(custom_schema_name(rt), kind_schema);
    schemas
}

fn custom_schema_name(rt: &ResourceType) -> String {
    let reversed: Vec<&str> = rt.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), rt.version, rt.kind)
}

fn schema_name(rt: &ResourceType) -> String {
    if rt.is_custom() {
        custom_schema_name(rt)
    } else {
        builtin_schema_name(&rt.group, &rt.version, &rt.kind)
    }
}

/// The OpenAPI name of a built-in kind: `io.k8s.api.{package}.{version}.{kind}`.
fn builtin_schema_name(group: &str, version: &str, kind: &str) -> String {
    match group {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        group => format!("io.k8s.api.{}.{version}.{kind}", group.split('.').next().unwrap_or(group)),
    }
}

fn patch_schema() -> Value {
    json!({
        "type": "object",
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
    })
}

/// The REST paths of one resource type with the operations kubesim serves on them. Each
/// operation carries its group/version/kind and its query parameters, as kubectl checks
/// those to decide what the server supports.
fn resource_paths(rt: &ResourceType) -> Map<String, Value> {
    let prefix = format!("/{}", gv_path(&rt.group, &rt.version));
    let scope = if rt.namespaced { format!("{prefix}/namespaces/{{namespace}}") } else { prefix.clone() };
    let collection = format!("{scope}/{}", rt.resource);
    let item = format!("{collection}/{{name}}");
    let ops = Operations { rt, kind_ref: json!({"$ref": format!("{SCHEMA_PREFIX}{}", schema_name(rt))}) };
    let mut paths = Map::new();
    paths.insert(
        collection.clone(),
        json!({
            "get": ops.operation("list", "list", &[]),
            "post": ops.with_body(ops.operation("post", "create", &["dryRun", "fieldManager", "fieldValidation"])),
            "delete": ops.operation("deletecollection", "deletecollection", &["dryRun"]),
            "parameters": ops.path_parameters(false),
        }),
    );
    paths.insert(item.clone(), ops.item_operations("", true));
    for sub in rt.subresources.iter().filter(|s| *s == "status") {
        paths.insert(format!("{item}/{sub}"), ops.item_operations(sub, false));
    }
    if rt.namespaced {
        paths.insert(
            format!("{prefix}/{}", rt.resource),
            json!({"get": ops.operation("list", "listForAllNamespaces", &[]), "parameters": []}),
        );
    }
    paths
}

struct Operations<'a> {
    rt: &'a ResourceType,
    kind_ref: Value,
}

impl Operations<'_> {
    fn item_operations(&self, subresource: &str, deletable: bool) -> Value {
        let suffix = if subresource.is_empty() { String::new() } else { format!("/{subresource}") };
        let mut item = json!({
            "get": self.operation("get", &format!("read{suffix}"), &[]),
            "put": self.with_body(self.operation(
                "put",
                &format!("replace{suffix}"),
                &["dryRun", "fieldManager", "fieldValidation"],
            )),
            "patch": self.patch_operation(&suffix),
            "parameters": self.path_parameters(true),
        });
        if deletable {
            item["delete"] =
                self.operation("delete", "delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"]);
        }
        item
    }

    fn operation(&self, action: &str, verb: &str, query: &[&str]) -> Value {
        let rt = self.rt;
        json!({
            "operationId": format!("{verb}{}", rt.kind),
            "parameters": query.iter().map(|name| query_parameter(name)).collect::<Vec<_>>(),
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": self.kind_ref}}}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        })
    }

    fn with_body(&self, mut operation: Value) -> Value {
        operation["requestBody"] = json!({"content": {"*/*": {"schema": self.kind_ref}}, "required": true});
        operation
    }

    /// Custom resources take no strategic merge patch, as on kube-apiserver; kubectl then
    /// falls back to a JSON merge patch.
    fn patch_operation(&self, suffix: &str) -> Value {
        let mut operation = self.operation(
            "patch",
            &format!("patch{suffix}"),
            &["dryRun", "fieldManager", "fieldValidation", "force"],
        );
        let patch = json!({"schema": {"$ref": format!("{SCHEMA_PREFIX}{PATCH}")}});
        let mut content = Map::new();
        for media in
            ["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"]
        {
            content.insert(media.into(), patch.clone());
        }
        if !self.rt.is_custom() {
            content.insert("application/strategic-merge-patch+json".into(), patch);
        }
        operation["requestBody"] = json!({"content": content, "required": true});
        operation
    }

    fn path_parameters(&self, named: bool) -> Vec<Value> {
        let mut parameters = Vec::new();
        if named {
            parameters.push(path_parameter("name", &format!("name of the {}", self.rt.kind)));
        }
        if self.rt.namespaced {
            parameters.push(path_parameter(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        parameters
    }
}

fn path_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn query_parameter(name: &str) -> Value {
    let schema = match name {
        "force" => json!({"type": "boolean", "uniqueItems": true}),
        "gracePeriodSeconds" => json!({"type": "integer", "uniqueItems": true}),
        _ => json!({"type": "string", "uniqueItems": true}),
    };
    json!({"name": name, "in": "query", "schema": schema})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with_crd() -> Registry {
        registry_with_crd_schema(json!({"type": "object", "properties": {"spec": {"type": "object"}}}))
    }

    fn registry_with_crd_schema(schema: Value) -> Registry {
        let mut registry = Registry::with_builtins();
        registry.insert(ResourceType {
            group: "stable.example.com".into(),
            version: "v1".into(),
            resource: "crontabs".into(),
            kind: "CronTab".into(),
            singular: "crontab".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            subresources: vec![],
            storage: crate::registry::StorageKey {
                group: "stable.example.com".into(),
                resource: "crontabs".into(),
            },
            view: crate::registry::View::Native,
            custom: Some(Arc::new(crate::registry::CustomInfo {
                crd_name: "crontabs.stable.example.com".into(),
                schema,
                printer_columns: vec![],
            })),
        });
        registry
    }

    #[test]
    fn index_lists_core_builtin_groups_and_crds() {
        let index = document(&registry_with_crd(), &[]).unwrap();
        let paths = index["paths"].as_object().unwrap();
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/rbac.authorization.k8s.io/v1"));
        assert!(
            paths["apis/stable.example.com/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/stable.example.com/v1?hash=")
        );
    }

    #[test]
    fn document_urls_change_with_the_crd_schema_so_cached_copies_are_not_reused() {
        let url = |registry: &Registry| {
            document(registry, &[]).unwrap()["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"]
                .clone()
        };
        let before = url(&registry_with_crd());
        assert_eq!(before, url(&registry_with_crd()));
        let changed =
            registry_with_crd_schema(json!({"type": "object", "properties": {"spec": {"type": "string"}}}));
        assert_ne!(before, url(&changed));
    }

    #[test]
    fn pod_containers_merge_by_name_in_client_side_apply() {
        let doc = document(&Registry::with_builtins(), &["api", "v1"]).unwrap();
        let spec = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(spec["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(spec["x-kubernetes-patch-merge-key"], "name");
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    }

    #[test]
    fn patch_endpoints_accept_field_validation() {
        let doc = document(&Registry::with_builtins(), &["api", "v1"]).unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        let names: Vec<&str> =
            patch["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"fieldValidation"));
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
    }

    #[test]
    fn custom_resources_get_their_crd_schema_and_no_strategic_merge() {
        let doc = document(&registry_with_crd(), &["apis", "stable.example.com", "v1"]).unwrap();
        let schema = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
        assert_eq!(schema["properties"]["spec"]["type"], "object");
        assert_eq!(schema["x-kubernetes-group-version-kind"][0]["group"], "stable.example.com");
        assert!(doc["components"]["schemas"].get(OBJECT_META).is_some());
        let patch =
            &doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]["patch"];
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_none());
    }

    #[test]
    fn unknown_group_versions_have_no_document() {
        assert!(document(&Registry::with_builtins(), &["apis", "example.com", "v1"]).is_none());
        assert!(
            document(&Registry::with_builtins(), &["apis", "apps", "v1"]).is_some(),
            "built-in kinds are served"
        );
    }
}
