//! What a new cluster holds before anyone writes to it.

use serde_json::{Value, json};

use crate::api::{self, Target, WriteOptions};
use crate::store::State;

/// The namespaces every cluster has.
pub const DEFAULT_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The default namespaces, and the bootstrap ClusterRoles and bindings kube-apiserver
/// creates (`cluster-admin`, `admin`/`edit`/`view`, discovery roles), so that bindings to
/// them behave as on a real cluster.
pub fn default_objects(state: &mut State) {
    let namespaces = DEFAULT_NAMESPACES
        .iter()
        .map(|name| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
    create_all(state, "", "namespaces", namespaces.collect());
    create_all(state, "rbac.authorization.k8s.io", "clusterroles", crate::authz::default_cluster_roles());
    create_all(
        state,
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        crate::authz::default_cluster_role_bindings(),
    );
}

fn create_all(state: &mut State, group: &str, resource: &str, objects: Vec<Value>) {
    let opts = WriteOptions { field_manager: "kube-apiserver".into(), ..WriteOptions::default() };
    let Some(rt) = state.registry.get(group, "v1", resource) else { return };
    let t = Target { rt, namespace: None, name: None, subresource: None };
    for object in objects {
        if let Err(e) = api::create(state, &t, object, &opts) {
            tracing::error!(resource, error = %e.message, "could not create a bootstrap object");
        }
    }
}
