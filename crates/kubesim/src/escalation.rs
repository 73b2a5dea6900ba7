//! kube-apiserver's privilege-escalation checks on writes of Roles, ClusterRoles and their
//! bindings (`pkg/registry/rbac/*/policybased`), run where its RBAC registry runs them:
//! after the request is authorized and the namespace admitted, before validation.
//!
//! The decisions are [`crate::authz`]'s; this module reads the RBAC objects from the store
//! the write holds locked and turns a refusal into kube-apiserver's Status.

use serde_json::Value;

use crate::api::Target;
use crate::authz::{self, Refusal, UserInfo};
use crate::error::ApiError;
use crate::registry::StorageKey;
use crate::store::State;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The stored RBAC objects, copied out of the store so a decision reads one consistent view.
pub struct RbacObjects {
    roles: Vec<Value>,
    role_bindings: Vec<Value>,
    cluster_roles: Vec<Value>,
    cluster_role_bindings: Vec<Value>,
}

impl RbacObjects {
    pub fn load(state: &State) -> Self {
        let objects = |resource: &str| -> Vec<Value> {
            state.list(&rbac_storage(resource), None).into_iter().map(|(_, stored)| stored.value()).collect()
        };
        Self {
            roles: objects("roles"),
            role_bindings: objects("rolebindings"),
            cluster_roles: objects("clusterroles"),
            cluster_role_bindings: objects("clusterrolebindings"),
        }
    }

    pub fn snapshot(&self) -> authz::RbacSnapshot<'_> {
        authz::RbacSnapshot {
            roles: &self.roles,
            role_bindings: &self.role_bindings,
            cluster_roles: &self.cluster_roles,
            cluster_role_bindings: &self.cluster_role_bindings,
        }
    }
}

pub fn rbac_storage(resource: &str) -> StorageKey {
    StorageKey { group: RBAC_GROUP.into(), resource: resource.into() }
}

/// Whether writes to `t` grant permissions, and so pass these checks.
pub fn guards(t: &Target) -> bool {
    t.rt.group == RBAC_GROUP
        && t.subresource.is_none()
        && matches!(t.rt.resource.as_str(), "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings")
}

/// The check of a create: `object` is the decoded body, named as sent (kube-apiserver checks
/// before it generates a name).
pub fn check_create(state: &State, t: &Target, user: &UserInfo, object: &Value) -> Result<(), ApiError> {
    if !guards(t) {
        return Ok(());
    }
    check(state, t, user, object)
}

/// The check of an update, patch or apply of an existing object. kube-apiserver lets through
/// an update that changes only what the garbage collector changes (`IsOnlyMutatingGCFields`:
/// owner references and finalizers), so a deletion is never held up by it; any other write
/// is checked as a create is, whether or not it changes what is granted.
pub fn check_update(
    state: &State,
    t: &Target,
    user: &UserInfo,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if !guards(t) || only_gc_fields_differ(old, new) {
        return Ok(());
    }
    check(state, t, user, new)
}

fn check(state: &State, t: &Target, user: &UserInfo, object: &Value) -> Result<(), ApiError> {
    let namespace = t.namespace.as_deref().unwrap_or_default();
    let objects = RbacObjects::load(state);
    let refusal = match t.rt.resource.as_str() {
        "roles" | "clusterroles" => {
            let rules = object.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            authz::role_refusal(
                user,
                &t.rt.resource,
                t.name.as_deref(),
                namespace,
                rules,
                &objects.snapshot(),
            )
        }
        _ => {
            let role_ref = object.get("roleRef").unwrap_or(&Value::Null);
            authz::binding_refusal(user, role_ref, namespace, &objects.snapshot())
        }
    };
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    match refusal {
        None => Ok(()),
        Some(Refusal::NotHeld(reason)) => {
            let qualified = crate::error::qualified(&t.rt.group, &t.rt.resource);
            let message = format!("{qualified} {name:?} is forbidden: {reason}");
            Err(ApiError::forbidden(&t.rt.group, &t.rt.resource, name, message))
        }
        Some(Refusal::RoleNotFound { resource, name }) => {
            Err(ApiError::not_found(RBAC_GROUP, resource, &name))
        }
        Some(Refusal::UnsupportedKind(reason)) => {
            Err(ApiError::internal(format!("Internal error occurred: {reason}")))
        }
    }
}

/// `IsOnlyMutatingGCFields`: `new` is `old` but for owner references, finalizers and
/// managedFields.
fn only_gc_fields_differ(old: &Value, new: &Value) -> bool {
    let mut copy = new.clone();
    let (Some(meta), Some(old_meta)) =
        (copy.get_mut("metadata").and_then(Value::as_object_mut), old.get("metadata"))
    else {
        return false;
    };
    for field in ["ownerReferences", "finalizers", "managedFields", "selfLink"] {
        match old_meta.get(field) {
            Some(value) => meta.insert(field.to_owned(), value.clone()),
            None => meta.remove(field),
        };
    }
    copy == *old
}
