//! The part of kube-controller-manager's resource quota controller a client can see: each
//! ResourceQuota's `status.hard` follows its `spec.hard`, and `status.used` counts the objects
//! of its namespace for the resources it limits.
//!
//! kubesim runs no kubelet, so compute resources (`cpu`, `requests.memory`, …) are always
//! used `0`; object counts (`pods`, `configmaps`, `count/<resource>[.<group>]`) are real.
//! Quotas are not enforced: a create over a quota succeeds.

use serde_json::{Map, Value, json};

use crate::api::{self, Target, WriteOptions};
use crate::registry::StorageKey;
use crate::store::{ObjKey, State};

pub fn resource_quotas() -> StorageKey {
    StorageKey { group: String::new(), resource: "resourcequotas".into() }
}

/// Brings the status of every ResourceQuota in `namespace` up to date, writing only those
/// that differ, so the write it causes changes nothing on the next pass.
pub fn refresh(state: &mut State, namespace: &str, manager: &str) {
    if namespace.is_empty() {
        return;
    }
    for (key, stored) in state.list(&resource_quotas(), Some(namespace)) {
        if stored.deleting {
            continue;
        }
        let mut quota = stored.value();
        let Some(hard) = quota.pointer("/spec/hard").and_then(Value::as_object).filter(|h| !h.is_empty())
        else {
            continue;
        };
        let status = json!({"hard": hard, "used": used(state, namespace, hard)});
        if quota.get("status") == Some(&status) {
            continue;
        }
        quota["status"] = status;
        let Some(t) = status_target(state, &key) else { continue };
        let opts = WriteOptions { field_manager: manager.to_owned(), ..WriteOptions::default() };
        if let Err(error) = api::update(state, &t, quota, &opts) {
            tracing::warn!(namespace = %key.0, name = %key.1, error = %error.message, "update quota status failed");
        }
    }
}

fn status_target(state: &State, key: &ObjKey) -> Option<Target> {
    let rt = state.registry.by_storage(&resource_quotas()).into_iter().next()?;
    Some(Target {
        rt,
        namespace: Some(key.0.clone()),
        name: Some(key.1.clone()),
        subresource: Some("status".into()),
    })
}

/// What `namespace` uses of each resource in `hard`, for the resources kube-apiserver's quota
/// evaluators know; others are left out, as the controller leaves them out.
fn used(state: &State, namespace: &str, hard: &Map<String, Value>) -> Map<String, Value> {
    let count = |group: &str, resource: &str| {
        let storage = StorageKey { group: group.to_owned(), resource: resource.to_owned() };
        Value::String(state.list(&storage, Some(namespace)).len().to_string())
    };
    let mut used = Map::new();
    for name in hard.keys() {
        let value = match name.as_str() {
            "pods"
            | "configmaps"
            | "secrets"
            | "services"
            | "persistentvolumeclaims"
            | "replicationcontrollers"
            | "resourcequotas" => count("", name),
            "services.loadbalancers" | "services.nodeports" => json!("0"),
            counted if counted.starts_with("count/") => {
                let plural = &counted["count/".len()..];
                let (resource, group) = plural.split_once('.').unwrap_or((plural, ""));
                count(group, resource)
            }
            compute if is_compute(compute) => json!("0"),
            _ => continue,
        };
        used.insert(name.clone(), value);
    }
    used
}

/// The resources the pod evaluator sums over pods' containers.
fn is_compute(name: &str) -> bool {
    let bare = name.strip_prefix("requests.").or_else(|| name.strip_prefix("limits.")).unwrap_or(name);
    matches!(bare, "cpu" | "memory" | "ephemeral-storage" | "storage")
        || bare.starts_with("hugepages-")
        || (name != bare && bare.contains('/'))
}
