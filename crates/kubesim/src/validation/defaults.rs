//! Defaults kube-apiserver fills into built-in kinds that kopper may copy, where a client can
//! tell (`SetDefaults_*` in `k8s.io/kubernetes/pkg/apis/*/v1/defaults.go`): a controller that
//! compares what it wrote with what the server returns must see the server's additions.

use serde_json::{Map, Value, json};

/// `SetDefaults_NetworkPolicy` and `SetDefaults_NetworkPolicyPort`: a policy without
/// `policyTypes` is `Ingress`, plus `Egress` when it has egress rules; a port without a
/// protocol is TCP.
pub fn network_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let no_types = spec.get("policyTypes").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if no_types {
        let has_egress = spec.get("egress").and_then(Value::as_array).is_some_and(|rules| !rules.is_empty());
        let types = if has_egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
        spec.insert("policyTypes".into(), types);
    }
    for direction in ["ingress", "egress"] {
        let rules = spec.get_mut(direction).and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten() {
            let ports = rule.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
                if port.get("protocol").is_none_or(Value::is_null) {
                    port.insert("protocol".into(), json!("TCP"));
                }
            }
        }
    }
}

/// `SetDefaults_LimitRangeItem`, for `Container` limits: a default limit missing is the max,
/// a default request missing is the default limit, else the min.
pub fn limit_range(obj: &mut Value) {
    let limits = obj.pointer_mut("/spec/limits").and_then(Value::as_array_mut);
    for item in limits.into_iter().flatten().filter_map(Value::as_object_mut) {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let max = resources(item, "max");
        let min = resources(item, "min");
        let mut default = resources(item, "default");
        fill_missing(&mut default, &max);
        let mut default_request = resources(item, "defaultRequest");
        fill_missing(&mut default_request, &default);
        fill_missing(&mut default_request, &min);
        // Go leaves empty maps out of the JSON it serves.
        for (field, list) in [("default", default), ("defaultRequest", default_request)] {
            if !list.is_empty() {
                item.insert(field.into(), Value::Object(list));
            }
        }
    }
}

fn resources(item: &Map<String, Value>, field: &str) -> Map<String, Value> {
    item.get(field).and_then(Value::as_object).cloned().unwrap_or_default()
}

fn fill_missing(list: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (resource, quantity) in from {
        list.entry(resource.clone()).or_insert_with(|| quantity.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_policy_without_types_is_ingress_plus_egress_when_it_has_egress_rules() {
        let mut deny_all = json!({"spec": {"podSelector": {}}});
        network_policy(&mut deny_all);
        assert_eq!(deny_all["spec"]["policyTypes"], json!(["Ingress"]));
        let mut with_egress = json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}});
        network_policy(&mut with_egress);
        assert_eq!(with_egress["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(with_egress["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let mut named = json!({"spec": {"podSelector": {}, "policyTypes": ["Egress"]}});
        network_policy(&mut named);
        assert_eq!(named["spec"]["policyTypes"], json!(["Egress"]), "types given are kept");
    }

    #[test]
    fn container_limits_get_defaults_from_max_default_and_min() {
        let mut range = json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}},
            {"type": "Pod", "max": {"cpu": "4"}},
        ]}});
        limit_range(&mut range);
        let container = &range["spec"]["limits"][0];
        assert_eq!(container["default"], json!({"cpu": "2"}));
        assert_eq!(container["defaultRequest"], json!({"cpu": "2", "memory": "64Mi"}));
        assert!(range["spec"]["limits"][1].get("default").is_none(), "only Container limits");
    }
}
