//! Built-in objects pass through their Go-equivalent types, as kube-apiserver decodes every
//! request body into typed structs: a field of the wrong type is a 400, and fields the type
//! does not have are dropped.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, coordination, core, discovery, events, networking,
    policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn round_trip<T: DeserializeOwned + Serialize>(kind: &str, object: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(object).map_err(|e| format!("unable to decode {kind}: {e}"))?;
    serde_json::to_value(typed).map_err(|e| format!("unable to encode {kind}: {e}"))
}

/// The object as its type sees it, or the decoding error; objects of kinds kubesim has no
/// type for (custom resources) come back unchanged.
pub fn normalize(group: &str, kind: &str, object: Value) -> Result<Value, String> {
    match (group, kind) {
        ("", "Namespace") => round_trip::<core::v1::Namespace>(kind, object),
        ("", "ConfigMap") => round_trip::<core::v1::ConfigMap>(kind, object),
        ("", "Secret") => round_trip::<core::v1::Secret>(kind, object),
        ("", "Pod") => round_trip::<core::v1::Pod>(kind, object),
        ("", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>(kind, object),
        ("", "Event") => round_trip::<core::v1::Event>(kind, object),
        ("events.k8s.io", "Event") => round_trip::<events::v1::Event>(kind, object),
        ("rbac.authorization.k8s.io", "Role") => round_trip::<rbac::v1::Role>(kind, object),
        ("rbac.authorization.k8s.io", "RoleBinding") => round_trip::<rbac::v1::RoleBinding>(kind, object),
        ("rbac.authorization.k8s.io", "ClusterRole") => round_trip::<rbac::v1::ClusterRole>(kind, object),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            round_trip::<rbac::v1::ClusterRoleBinding>(kind, object)
        }
        ("coordination.k8s.io", "Lease") => round_trip::<coordination::v1::Lease>(kind, object),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            round_trip::<CustomResourceDefinition>(kind, object)
        }
        ("", "Service") => round_trip::<core::v1::Service>(kind, object),
        ("", "Endpoints") => round_trip::<core::v1::Endpoints>(kind, object),
        ("", "PersistentVolumeClaim") => round_trip::<core::v1::PersistentVolumeClaim>(kind, object),
        ("", "PersistentVolume") => round_trip::<core::v1::PersistentVolume>(kind, object),
        ("", "ReplicationController") => round_trip::<core::v1::ReplicationController>(kind, object),
        ("", "LimitRange") => round_trip::<core::v1::LimitRange>(kind, object),
        ("", "ResourceQuota") => round_trip::<core::v1::ResourceQuota>(kind, object),
        ("", "Node") => round_trip::<core::v1::Node>(kind, object),
        ("apps", "Deployment") => round_trip::<apps::v1::Deployment>(kind, object),
        ("apps", "StatefulSet") => round_trip::<apps::v1::StatefulSet>(kind, object),
        ("apps", "DaemonSet") => round_trip::<apps::v1::DaemonSet>(kind, object),
        ("apps", "ReplicaSet") => round_trip::<apps::v1::ReplicaSet>(kind, object),
        ("apps", "ControllerRevision") => round_trip::<apps::v1::ControllerRevision>(kind, object),
        ("batch", "Job") => round_trip::<batch::v1::Job>(kind, object),
        ("batch", "CronJob") => round_trip::<batch::v1::CronJob>(kind, object),
        ("policy", "PodDisruptionBudget") => round_trip::<policy::v1::PodDisruptionBudget>(kind, object),
        ("networking.k8s.io", "NetworkPolicy") => round_trip::<networking::v1::NetworkPolicy>(kind, object),
        ("networking.k8s.io", "Ingress") => round_trip::<networking::v1::Ingress>(kind, object),
        ("networking.k8s.io", "IngressClass") => round_trip::<networking::v1::IngressClass>(kind, object),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            round_trip::<autoscaling::v2::HorizontalPodAutoscaler>(kind, object)
        }
        ("scheduling.k8s.io", "PriorityClass") => round_trip::<scheduling::v1::PriorityClass>(kind, object),
        ("storage.k8s.io", "StorageClass") => round_trip::<storage::v1::StorageClass>(kind, object),
        ("discovery.k8s.io", "EndpointSlice") => round_trip::<discovery::v1::EndpointSlice>(kind, object),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            round_trip::<admissionregistration::v1::ValidatingWebhookConfiguration>(kind, object)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            round_trip::<admissionregistration::v1::MutatingWebhookConfiguration>(kind, object)
        }
        _ => Ok(object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_field_type_is_refused() {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": 1}});
        assert!(normalize("", "ConfigMap", cm).unwrap_err().contains("invalid type"));
    }

    #[test]
    fn unknown_fields_of_built_in_kinds_are_dropped() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "bogus": true});
        assert!(normalize("", "ConfigMap", cm).unwrap().get("bogus").is_none());
    }

    #[test]
    fn custom_kinds_are_left_alone() {
        let w = json!({"apiVersion": "x/v1", "kind": "Widget", "anything": 1});
        assert_eq!(normalize("x", "Widget", w.clone()).unwrap(), w);
    }
}
