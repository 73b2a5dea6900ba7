//! Field managers: each controller writes under its own name, `<--field-manager>/<controller>`
//! (`kopper/namespace-access`), so `managedFields` tell which controller owns a field.
//!
//! Releases before that wrote everything as plain `kopper`. Where that name applied fields
//! with server-side apply, it still owns them, and a field the controller stops applying
//! would never be removed (the old entry keeps it). So after a controller applies an object
//! that still carries such an entry, it applies an empty configuration under the old name:
//! the old entry then owns nothing and the API server drops it, while every field the new
//! manager applied stays. Entries of other operations (create, update, patch) own nothing
//! that apply prunes, and are left to age out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The field manager `controller` writes with.
pub fn for_controller(base: &str, controller: &str) -> String {
    format!("{base}/{controller}")
}

/// Whether `manager` (the name of earlier releases) still owns applied fields of the object,
/// on the main resource (`subresource` `None`) or on a subresource such as `status`. API
/// servers before v1.22 record no subresource: there an entry holds status fields when its
/// field set has `f:status`.
pub fn holds_applied_fields(meta: &ObjectMeta, manager: &str, subresource: Option<&str>) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        let recorded = entry.subresource.as_deref().filter(|s| !s.is_empty());
        let on_subresource = match (recorded, subresource) {
            (None, Some(wanted)) => {
                entry.fields_v1.as_ref().is_some_and(|fields| fields.0.get(format!("f:{wanted}")).is_some())
            }
            (recorded, wanted) => recorded == wanted,
        };
        entry.manager.as_deref() == Some(manager)
            && entry.operation.as_deref() == Some("Apply")
            && on_subresource
    })
}

/// Hands what `manager` applied over to whoever else owns it (call it only after the new
/// manager applied the same object), by applying an empty configuration under `manager`.
pub async fn release<K>(api: &Api<K>, name: &str, manager: &str, status: bool) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let empty = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
    });
    let params = PatchParams::apply(manager);
    if status {
        api.patch_status(name, &params, &Patch::Apply(&empty)).await.map(drop)
    } else {
        api.patch(name, &params, &Patch::Apply(&empty)).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use super::*;

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(str::to_owned),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn only_an_apply_entry_of_that_manager_and_subresource_holds_applied_fields() {
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                entry("kopper", "Update", None),
                entry("kopper", "Apply", Some("status")),
                entry("kopper/namespace-access", "Apply", None),
            ]),
            ..ObjectMeta::default()
        };
        assert!(!holds_applied_fields(&meta, "kopper", None));
        assert!(holds_applied_fields(&meta, "kopper", Some("status")));
        assert!(holds_applied_fields(&meta, "kopper/namespace-access", None));
        assert!(!holds_applied_fields(&ObjectMeta::default(), "kopper", None));
        // Before v1.22 a status apply records no subresource; its fields say where it applied.
        let mut old_server = entry("kopper", "Apply", None);
        old_server.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
            serde_json::json!({"f:status": {"f:observedGeneration": {}}}),
        ));
        let meta = ObjectMeta { managed_fields: Some(vec![old_server]), ..ObjectMeta::default() };
        assert!(holds_applied_fields(&meta, "kopper", Some("status")));
        assert_eq!(for_controller("kopper", "bucket"), "kopper/bucket");
    }
}
