//! How lists (and a few maps) merge, for both strategic merge patch and server-side apply.
//!
//! kube-apiserver reads this from Go struct tags (`patchStrategy`, `patchMergeKey`,
//! `listType`, `listMapKey`) for built-in types and from `x-kubernetes-list-type` /
//! `x-kubernetes-list-map-keys` for custom resources. kubesim has no Go types, so built-in
//! kinds use a table of the lists that matter and custom resources read their CRD schema.

use serde_json::Value;

/// How a list at a given path merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced as a whole and owned as one field.
    Atomic,
    /// A list of distinct scalars; each item is merged and owned on its own (e.g. finalizers).
    Set,
    /// A list of objects identified by these key fields (e.g. containers by `name`).
    /// Strategic merge patch uses the first key as its `patchMergeKey`.
    Map(Vec<String>),
}

impl ListType {
    fn map(keys: &[&str]) -> ListType {
        ListType::Map(keys.iter().map(|k| (*k).to_owned()).collect())
    }
}

/// Tells the merge algorithms how the lists of one kind of object behave.
pub trait ListTypes {
    /// The list type at `path`: field names from the object root with list items left out,
    /// e.g. `["spec", "containers", "env"]`.
    fn list_type(&self, path: &[&str]) -> ListType;

    /// Whether the object at `path` is an atomic map (`x-kubernetes-map-type: atomic`), which
    /// server-side apply replaces and owns as a whole. Strategic merge patch ignores this.
    fn map_is_atomic(&self, _path: &[&str]) -> bool {
        false
    }
}

/// API groups served by kube-apiserver itself; everything else is a custom resource, for
/// which strategic merge patch is not available.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether `group` is one of kube-apiserver's built-in API groups.
pub fn is_builtin_group(group: &str) -> bool {
    BUILTIN_GROUPS.contains(&group)
}

/// Merge behaviour of built-in kinds, from the Kubernetes Go types.
#[derive(Debug, Clone)]
pub struct BuiltinListTypes {
    group: String,
    kind: String,
}

impl BuiltinListTypes {
    pub fn new(group: &str, kind: &str) -> Self {
        Self { group: group.to_owned(), kind: kind.to_owned() }
    }

    /// Where the kind embeds a PodSpec, if it does.
    fn pod_spec_prefix(&self) -> Option<&'static [&'static str]> {
        match (self.group.as_str(), self.kind.as_str()) {
            ("", "Pod") => Some(&["spec"]),
            ("", "PodTemplate") => Some(&["template", "spec"]),
            ("", "ReplicationController")
            | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job") => Some(&["spec", "template", "spec"]),
            ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
            _ => None,
        }
    }

    fn kind_list_type(&self, path: &[&str]) -> Option<ListType> {
        if let Some(prefix) = self.pod_spec_prefix()
            && let Some(rest) = path.strip_prefix(prefix)
            && let Some(list_type) = pod_spec_list_type(rest)
        {
            return Some(list_type);
        }
        let list_type = match (self.group.as_str(), self.kind.as_str(), path) {
            (_, _, ["status", "conditions"]) if self.kind != "Event" => ListType::map(&["type"]),
            ("", "Pod", ["status", "podIPs" | "hostIPs"]) => ListType::map(&["ip"]),
            ("", "ServiceAccount", ["secrets"]) => ListType::map(&["name"]),
            ("", "Service", ["spec", "ports"]) => ListType::map(&["port", "protocol"]),
            ("", "Endpoints", ["subsets"]) => ListType::Atomic,
            _ => return None,
        };
        Some(list_type)
    }
}

impl ListTypes for BuiltinListTypes {
    fn list_type(&self, path: &[&str]) -> ListType {
        object_meta_list_type(path).or_else(|| self.kind_list_type(path)).unwrap_or(ListType::Atomic)
    }

    fn map_is_atomic(&self, path: &[&str]) -> bool {
        self.pod_spec_prefix()
            .and_then(|prefix| path.strip_prefix(prefix))
            .is_some_and(|rest| rest == ["nodeSelector"])
    }
}

/// Lists of `metadata`, shared by every kind including custom resources.
fn object_meta_list_type(path: &[&str]) -> Option<ListType> {
    match path {
        ["metadata", "ownerReferences"] => Some(ListType::map(&["uid"])),
        ["metadata", "finalizers"] => Some(ListType::Set),
        ["metadata", "managedFields"] => Some(ListType::Atomic),
        _ => None,
    }
}

/// Lists inside a PodSpec, `path` relative to the PodSpec.
fn pod_spec_list_type(path: &[&str]) -> Option<ListType> {
    let list_type = match path {
        ["containers" | "initContainers" | "ephemeralContainers"] => ListType::map(&["name"]),
        ["containers" | "initContainers" | "ephemeralContainers", field] => match *field {
            "env" => ListType::map(&["name"]),
            "ports" => ListType::map(&["containerPort", "protocol"]),
            "volumeMounts" => ListType::map(&["mountPath"]),
            "volumeDevices" => ListType::map(&["devicePath"]),
            _ => return None,
        },
        ["volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims"] => ListType::map(&["name"]),
        ["hostAliases"] => ListType::map(&["ip"]),
        ["topologySpreadConstraints"] => ListType::map(&["topologyKey", "whenUnsatisfiable"]),
        _ => return None,
    };
    Some(list_type)
}

/// Merge behaviour of a custom resource, read from its CRD version's `openAPIV3Schema`.
///
/// Lists without `x-kubernetes-list-type` are atomic, as in kube-apiserver; `metadata`
/// lists behave as for built-in kinds because CRD schemas do not describe ObjectMeta.
#[derive(Debug, Clone, Copy)]
pub struct SchemaListTypes<'a> {
    schema: &'a Value,
}

impl<'a> SchemaListTypes<'a> {
    /// `schema` is the `openAPIV3Schema` of the served version.
    pub fn new(schema: &'a Value) -> Self {
        Self { schema }
    }

    /// The schema node describing the value at `path`, stepping through list items.
    fn node_at(&self, path: &[&str]) -> Option<&'a Value> {
        let mut node = self.schema;
        for field in path {
            node = items_of(node);
            node = match node.get("properties").and_then(|p| p.get(*field)) {
                Some(property) => property,
                None => node.get("additionalProperties").filter(|a| a.is_object())?,
            };
        }
        Some(node)
    }
}

/// Descends from an array schema to its item schema (repeatedly, for lists of lists).
fn items_of(mut node: &Value) -> &Value {
    while node.get("type").and_then(Value::as_str) == Some("array") {
        match node.get("items") {
            Some(items) => node = items,
            None => break,
        }
    }
    node
}

impl ListTypes for SchemaListTypes<'_> {
    fn list_type(&self, path: &[&str]) -> ListType {
        if let Some(list_type) = object_meta_list_type(path) {
            return list_type;
        }
        let Some(node) = self.node_at(path) else { return ListType::Atomic };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => {
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                if keys.is_empty() { ListType::Atomic } else { ListType::Map(keys) }
            }
            _ => ListType::Atomic,
        }
    }

    fn map_is_atomic(&self, path: &[&str]) -> bool {
        self.node_at(path)
            .and_then(|node| node.get("x-kubernetes-map-type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "atomic")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_pod_lists_merge_by_their_keys() {
        let pod = BuiltinListTypes::new("", "Pod");
        assert_eq!(pod.list_type(&["spec", "containers"]), ListType::map(&["name"]));
        assert_eq!(pod.list_type(&["spec", "initContainers", "env"]), ListType::map(&["name"]));
        assert_eq!(pod.list_type(&["spec", "containers", "volumeMounts"]), ListType::map(&["mountPath"]));
        assert_eq!(
            pod.list_type(&["spec", "containers", "ports"]),
            ListType::map(&["containerPort", "protocol"])
        );
        assert_eq!(pod.list_type(&["spec", "containers", "args"]), ListType::Atomic);
        assert_eq!(pod.list_type(&["spec", "volumes"]), ListType::map(&["name"]));
        assert_eq!(pod.list_type(&["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(pod.list_type(&["status", "conditions"]), ListType::map(&["type"]));
        assert!(pod.map_is_atomic(&["spec", "nodeSelector"]));
        assert!(!pod.map_is_atomic(&["metadata", "labels"]));
    }

    #[test]
    fn builtin_metadata_lists_apply_to_every_kind() {
        let cm = BuiltinListTypes::new("", "ConfigMap");
        assert_eq!(cm.list_type(&["metadata", "ownerReferences"]), ListType::map(&["uid"]));
        assert_eq!(cm.list_type(&["metadata", "finalizers"]), ListType::Set);
    }

    #[test]
    fn builtin_rbac_lists_are_atomic() {
        let binding = BuiltinListTypes::new("rbac.authorization.k8s.io", "RoleBinding");
        assert_eq!(binding.list_type(&["subjects"]), ListType::Atomic);
        let role = BuiltinListTypes::new("rbac.authorization.k8s.io", "Role");
        assert_eq!(role.list_type(&["rules"]), ListType::Atomic);
    }

    #[test]
    fn service_account_secrets_merge_but_image_pull_secrets_are_atomic() {
        let sa = BuiltinListTypes::new("", "ServiceAccount");
        assert_eq!(sa.list_type(&["secrets"]), ListType::map(&["name"]));
        assert_eq!(sa.list_type(&["imagePullSecrets"]), ListType::Atomic);
    }

    #[test]
    fn deployment_pod_template_uses_pod_spec_keys() {
        let deployment = BuiltinListTypes::new("apps", "Deployment");
        assert_eq!(
            deployment.list_type(&["spec", "template", "spec", "containers"]),
            ListType::map(&["name"])
        );
    }

    #[test]
    fn builtin_groups_exclude_custom_resources() {
        assert!(is_builtin_group(""));
        assert!(is_builtin_group("rbac.authorization.k8s.io"));
        assert!(!is_builtin_group("kopper.dev"));
    }

    #[test]
    fn schema_list_types_read_crd_extensions() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "plain": {"type": "array", "items": {"type": "string"}},
                        "rules": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {
                                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                          "x-kubernetes-list-map-keys": ["port"], "items": {"type": "object"}}
                            }}
                        },
                        "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                        "byName": {"type": "object", "additionalProperties": {
                            "type": "object", "properties": {
                                "items": {"type": "array", "x-kubernetes-list-type": "set"}
                            }
                        }}
                    }
                },
                "status": {"type": "object", "properties": {"conditions": {
                    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object"}
                }}}
            }
        });
        let lists = SchemaListTypes::new(&schema);
        assert_eq!(lists.list_type(&["spec", "tags"]), ListType::Set);
        assert_eq!(lists.list_type(&["spec", "plain"]), ListType::Atomic);
        assert_eq!(lists.list_type(&["spec", "rules"]), ListType::map(&["name"]));
        assert_eq!(lists.list_type(&["spec", "rules", "ports"]), ListType::map(&["port"]));
        assert_eq!(lists.list_type(&["spec", "byName", "anything", "items"]), ListType::Set);
        assert_eq!(lists.list_type(&["status", "conditions"]), ListType::map(&["type"]));
        assert_eq!(lists.list_type(&["spec", "unknown"]), ListType::Atomic);
        assert_eq!(lists.list_type(&["metadata", "finalizers"]), ListType::Set);
        assert!(lists.map_is_atomic(&["spec", "selector"]));
        assert!(!lists.map_is_atomic(&["spec"]));
    }
}
