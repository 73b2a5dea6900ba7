//! The resource types kubesim serves: the built-in ones and those added by CRDs, and the
//! discovery documents that describe them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::{access_review, self_subject_review};

/// Where objects of a resource are stored. Two served resources may share one storage
/// (core `events` and `events.k8s.io` events), as they do in kube-apiserver.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageKey {
    pub group: String,
    pub resource: String,
}

/// How a served resource presents the stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Stored as served.
    Native,
    /// `events.k8s.io/v1` events, stored as core/v1 events.
    EventsV1,
}

/// The parts of a CustomResourceDefinition a served version needs.
#[derive(Debug, Clone)]
pub struct CustomInfo {
    pub crd_name: String,
    /// `openAPIV3Schema` of the served version (`Value::Null` when none).
    pub schema: Value,
    pub printer_columns: Vec<Value>,
}

/// One served group/version/resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub subresources: Vec<String>,
    pub storage: StorageKey,
    pub view: View,
    pub custom: Option<Arc<CustomInfo>>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }

    /// Custom resources return the deleted object; most built-ins return a `Status`.
    pub fn returns_deleted_object(&self) -> bool {
        self.is_custom()
            || matches!(self.resource.as_str(), "namespaces" | "pods" | "customresourcedefinitions")
    }

    /// kube-apiserver bumps `metadata.generation` only for resources with a spec it tracks.
    pub fn tracks_generation(&self) -> bool {
        self.is_custom()
            || (self.group != "events.k8s.io" && TRACKS_GENERATION.contains(&self.resource.as_str()))
    }

    /// Leases and events may be created by an update (PUT) of a missing name.
    pub fn allows_create_on_update(&self) -> bool {
        matches!(self.resource.as_str(), "leases" | "events")
    }
}

/// The resources kube-apiserver puts in the `all` category (`kubectl get all`).
const IN_ALL_CATEGORY: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "deployments",
    "statefulsets",
    "daemonsets",
    "replicasets",
    "jobs",
    "cronjobs",
    "horizontalpodautoscalers",
];

/// Built-in resources whose `metadata.generation` kube-apiserver bumps on spec changes.
const TRACKS_GENERATION: &[&str] = &[
    "pods",
    "customresourcedefinitions",
    "deployments",
    "statefulsets",
    "daemonsets",
    "replicasets",
    "replicationcontrollers",
    "jobs",
    "cronjobs",
    "poddisruptionbudgets",
    "horizontalpodautoscalers",
    "ingresses",
    "networkpolicies",
    "priorityclasses",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
];

struct Builtin {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    subresources: &'static [&'static str],
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        resource: "namespaces",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        subresources: &["status", "finalize"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "secrets",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "pods",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "serviceaccounts",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "events",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        resource: "events",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "roles",
        kind: "Role",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "rolebindings",
        kind: "RoleBinding",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "clusterroles",
        kind: "ClusterRole",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "clusterrolebindings",
        kind: "ClusterRoleBinding",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        resource: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "services",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "endpoints",
        kind: "Endpoints",
        namespaced: true,
        short_names: &["ep"],
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "persistentvolumes",
        kind: "PersistentVolume",
        namespaced: false,
        short_names: &["pv"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "replicationcontrollers",
        kind: "ReplicationController",
        namespaced: true,
        short_names: &["rc"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "limitranges",
        kind: "LimitRange",
        namespaced: true,
        short_names: &["limits"],
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "resourcequotas",
        kind: "ResourceQuota",
        namespaced: true,
        short_names: &["quota"],
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        resource: "nodes",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        subresources: &["status"],
    },
    Builtin {
        group: "apps",
        version: "v1",
        resource: "deployments",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        subresources: &["status"],
    },
    Builtin {
        group: "apps",
        version: "v1",
        resource: "statefulsets",
        kind: "StatefulSet",
        namespaced: true,
        short_names: &["sts"],
        subresources: &["status"],
    },
    Builtin {
        group: "apps",
        version: "v1",
        resource: "daemonsets",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        subresources: &["status"],
    },
    Builtin {
        group: "apps",
        version: "v1",
        resource: "replicasets",
        kind: "ReplicaSet",
        namespaced: true,
        short_names: &["rs"],
        subresources: &["status"],
    },
    Builtin {
        group: "apps",
        version: "v1",
        resource: "controllerrevisions",
        kind: "ControllerRevision",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "batch",
        version: "v1",
        resource: "jobs",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        subresources: &["status"],
    },
    Builtin {
        group: "batch",
        version: "v1",
        resource: "cronjobs",
        kind: "CronJob",
        namespaced: true,
        short_names: &["cj"],
        subresources: &["status"],
    },
    Builtin {
        group: "policy",
        version: "v1",
        resource: "poddisruptionbudgets",
        kind: "PodDisruptionBudget",
        namespaced: true,
        short_names: &["pdb"],
        subresources: &["status"],
    },
    Builtin {
        group: "networking.k8s.io",
        version: "v1",
        resource: "networkpolicies",
        kind: "NetworkPolicy",
        namespaced: true,
        short_names: &["netpol"],
        subresources: &[],
    },
    Builtin {
        group: "networking.k8s.io",
        version: "v1",
        resource: "ingresses",
        kind: "Ingress",
        namespaced: true,
        short_names: &["ing"],
        subresources: &["status"],
    },
    Builtin {
        group: "networking.k8s.io",
        version: "v1",
        resource: "ingressclasses",
        kind: "IngressClass",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "autoscaling",
        version: "v2",
        resource: "horizontalpodautoscalers",
        kind: "HorizontalPodAutoscaler",
        namespaced: true,
        short_names: &["hpa"],
        subresources: &["status"],
    },
    Builtin {
        group: "scheduling.k8s.io",
        version: "v1",
        resource: "priorityclasses",
        kind: "PriorityClass",
        namespaced: false,
        short_names: &["pc"],
        subresources: &[],
    },
    Builtin {
        group: "storage.k8s.io",
        version: "v1",
        resource: "storageclasses",
        kind: "StorageClass",
        namespaced: false,
        short_names: &["sc"],
        subresources: &[],
    },
    Builtin {
        group: "discovery.k8s.io",
        version: "v1",
        resource: "endpointslices",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        resource: "validatingwebhookconfigurations",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        resource: "mutatingwebhookconfigurations",
        kind: "MutatingWebhookConfiguration",
        namespaced: false,
        short_names: &[],
        subresources: &[],
    },
];

/// Every served resource, keyed by (group, version, resource).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    served: BTreeMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        for b in BUILTINS {
            let storage = if b.resource == "events" {
                StorageKey { group: String::new(), resource: "events".into() }
            } else {
                StorageKey { group: b.group.into(), resource: b.resource.into() }
            };
            let categories =
                if IN_ALL_CATEGORY.contains(&b.resource) { vec!["all".to_owned()] } else { Vec::new() };
            registry.insert(ResourceType {
                group: b.group.into(),
                version: b.version.into(),
                resource: b.resource.into(),
                kind: b.kind.into(),
                singular: b.kind.to_lowercase(),
                namespaced: b.namespaced,
                short_names: b.short_names.iter().map(|s| (*s).to_owned()).collect(),
                categories,
                subresources: b.subresources.iter().map(|s| (*s).to_owned()).collect(),
                storage,
                view: if b.group == "events.k8s.io" { View::EventsV1 } else { View::Native },
                custom: None,
            });
        }
        registry
    }

    pub fn insert(&mut self, rt: ResourceType) {
        self.served.insert((rt.group.clone(), rt.version.clone(), rt.resource.clone()), Arc::new(rt));
    }

    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        self.served.get(&(group.to_owned(), version.to_owned(), resource.to_owned())).cloned()
    }

    /// Drops every served version that a CRD added.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.served.retain(|_, rt| rt.custom.as_ref().is_none_or(|c| c.crd_name != crd_name));
    }

    /// The resource types stored under `storage`, one per served version.
    pub fn by_storage(&self, storage: &StorageKey) -> Vec<Arc<ResourceType>> {
        self.served.values().filter(|rt| &rt.storage == storage).cloned().collect()
    }

    /// The distinct storages, with one served type for each (the first version).
    pub fn storages(&self) -> Vec<Arc<ResourceType>> {
        let mut seen = BTreeMap::new();
        for rt in self.served.values() {
            seen.entry(rt.storage.clone()).or_insert_with(|| rt.clone());
        }
        seen.into_values().collect()
    }

    /// `(group, versions sorted by preference)` for every served group but the core one.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (group, version) in CREATE_ONLY_GROUP_VERSIONS {
            groups.insert(group.to_owned(), vec![version.to_owned()]);
        }
        for (g, v, _) in self.served.keys() {
            if g.is_empty() {
                continue;
            }
            let versions = groups.entry(g.clone()).or_default();
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
        groups
            .into_iter()
            .map(|(g, mut vs)| {
                vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
                (g, vs)
            })
            .collect()
    }

    pub fn group_version_served(&self, group: &str, version: &str) -> bool {
        create_only_resources(group, version).is_some()
            || self.served.keys().any(|(g, v, _)| g == group && v == version)
    }

    /// `/api` or `/apis/{group}/{version}`'s APIResourceList.
    pub fn resource_list(&self, group: &str, version: &str) -> Value {
        let mut resources = Vec::new();
        for ((g, v, _), rt) in &self.served {
            if g != group || v != version {
                continue;
            }
            let mut entry = json!({
                "name": rt.resource,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            });
            if !rt.short_names.is_empty() {
                entry["shortNames"] = json!(rt.short_names);
            }
            if !rt.categories.is_empty() {
                entry["categories"] = json!(rt.categories);
            }
            resources.push(entry);
            for sub in &rt.subresources {
                let verbs =
                    if sub == "finalize" { json!(["update"]) } else { json!(["get", "patch", "update"]) };
                resources.push(json!({
                    "name": format!("{}/{sub}", rt.resource),
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": verbs,
                }));
            }
        }
        resources.extend(create_only_resources(group, version).unwrap_or_default());
        let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
    }

    /// `/apis`' APIGroupList.
    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self.groups().into_iter().map(|(g, vs)| group_document(&g, &vs)).collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `/apis/{group}`'s APIGroup.
    pub fn group(&self, group: &str) -> Option<Value> {
        self.groups().into_iter().find(|(g, _)| g == group).map(|(g, vs)| {
            let mut doc = group_document(&g, &vs);
            doc["kind"] = "APIGroup".into();
            doc["apiVersion"] = "v1".into();
            doc
        })
    }
}

/// The group versions of the reviews, which are served but never stored (created, answered,
/// forgotten), so they are not in `served`.
const CREATE_ONLY_GROUP_VERSIONS: [(&str, &str); 2] = [
    (access_review::GROUP, access_review::VERSION),
    (self_subject_review::GROUP, self_subject_review::VERSION),
];

/// The reviews' discovery entries: listed like any resource, as `kubectl auth can-i` and
/// `kubectl auth whoami` look for them there.
fn create_only_resources(group: &str, version: &str) -> Option<Vec<Value>> {
    match (group, version) {
        (access_review::GROUP, access_review::VERSION) => Some(access_review::discovery_resources()),
        (self_subject_review::GROUP, self_subject_review::VERSION) => {
            Some(vec![self_subject_review::discovery_resource()])
        }
        _ => None,
    }
}

fn group_document(group: &str, versions: &[String]) -> Value {
    let listed: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    let preferred = listed.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": listed, "preferredVersion": preferred})
}

/// Kubernetes' version ordering: GA over beta over alpha, higher numbers first, others last.
pub fn version_priority(version: &str) -> (u8, u32, u32) {
    let Some(rest) = version.strip_prefix('v') else { return (0, 0, 0) };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else { return (0, 0, 0) };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match minor.parse::<u32>() {
        Ok(minor) => (level, major, minor),
        Err(_) => (0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_versions_are_preferred_over_beta_and_alpha() {
        let mut versions = vec!["v1alpha1", "v2beta1", "v1", "v1beta2", "foo"];
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(versions, vec!["v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]);
    }

    #[test]
    fn both_event_apis_share_one_storage() {
        let registry = Registry::with_builtins();
        let core = registry.get("", "v1", "events").unwrap();
        let v1 = registry.get("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(core.storage, v1.storage);
        assert_eq!(v1.view, View::EventsV1);
    }

    #[test]
    fn discovery_lists_subresources_after_their_resource() {
        let registry = Registry::with_builtins();
        let list = registry.resource_list("", "v1");
        let names: Vec<&str> =
            list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        let pods = names.iter().position(|n| *n == "pods").unwrap();
        assert_eq!(names[pods + 1], "pods/status");
    }
}
