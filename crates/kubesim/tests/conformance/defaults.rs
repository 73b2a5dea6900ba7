use k8s_openapi::api::core::v1::LimitRange;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::TestCluster;

/// A controller that copies these kinds compares what it wrote with what the server serves,
/// so the server's additions must be what kube-apiserver adds.
#[tokio::test]
async fn a_network_policy_is_served_with_its_default_types_and_port_protocols() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("defaults").await;
    let api: Api<NetworkPolicy> = Api::namespaced(cluster.client.clone(), &ns);
    let policy = |name: &str, spec: serde_json::Value| -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let deny = api.create(&PostParams::default(), &policy("deny", json!({"podSelector": {}}))).await.unwrap();
    assert_eq!(deny.spec.unwrap().policy_types.unwrap(), ["Ingress"]);
    let dns = json!({"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]});
    let dns = api.create(&PostParams::default(), &policy("dns", dns)).await.unwrap().spec.unwrap();
    assert_eq!(dns.policy_types.as_deref(), Some(&["Ingress".to_owned(), "Egress".to_owned()][..]));
    let egress = dns.egress.unwrap_or_default();
    let protocol = egress[0].ports.iter().flatten().next().and_then(|port| port.protocol.clone());
    assert_eq!(protocol.as_deref(), Some("TCP"));
}

#[tokio::test]
async fn a_limit_range_is_served_with_container_defaults_from_its_max_and_min() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("defaults").await;
    let api: Api<LimitRange> = Api::namespaced(cluster.client.clone(), &ns);
    let range: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "limits"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}]},
    }))
    .unwrap();
    let served = api.create(&PostParams::default(), &range).await.unwrap();
    let item = &served.spec.unwrap().limits[0];
    let quantities = |list: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        list.iter().flatten().map(|(key, value)| (key.clone(), value.0.clone())).collect::<Vec<_>>()
    };
    assert_eq!(quantities(&item.default), [("cpu".to_owned(), "2".to_owned())]);
    assert_eq!(
        quantities(&item.default_request),
        [("cpu".to_owned(), "2".to_owned()), ("memory".to_owned(), "64Mi".to_owned())]
    );
}
