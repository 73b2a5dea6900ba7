//! What a new cluster holds before anyone writes to it.

use serde_json::json;

use crate::api::{self, Target, WriteOptions};
use crate::store::State;

/// The namespaces every cluster has.
pub const DEFAULT_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

pub fn default_objects(state: &mut State, _rbac: bool) {
    let opts = WriteOptions { field_manager: "kube-apiserver".into(), ..WriteOptions::default() };
    if let Some(rt) = state.registry.get("", "v1", "namespaces") {
        let t = Target { rt, namespace: None, name: None, subresource: None };
        for name in DEFAULT_NAMESPACES {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            if let Err(e) = api::create(state, &t, body, &opts) {
                tracing::error!(namespace = name, error = %e.message, "could not create a default namespace");
            }
        }
    }
}
