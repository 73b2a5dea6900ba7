use kube::discovery::{Discovery, Scope};

use crate::common::TestCluster;

#[tokio::test]
async fn version_reports_a_kubernetes_version() {
    let cluster = TestCluster::new().await;
    let info = cluster.client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    // Some distributions mark a patched release with a trailing "+" ("20+").
    let minor = info.minor.strip_suffix('+').unwrap_or(&info.minor);
    assert!(minor.parse::<u32>().is_ok(), "minor version {:?}", info.minor);
}

#[tokio::test]
async fn discovery_finds_the_built_in_resources_with_their_scope() {
    let cluster = TestCluster::new().await;
    let discovery = Discovery::new(cluster.client.clone()).run().await.unwrap();
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            found.push((resource.group.clone(), resource.plural.clone(), caps.scope == Scope::Namespaced));
        }
    }
    for (group, plural, namespaced) in [
        ("", "namespaces", false),
        ("", "configmaps", true),
        ("", "secrets", true),
        ("", "pods", true),
        ("", "serviceaccounts", true),
        ("", "events", true),
        ("events.k8s.io", "events", true),
        ("rbac.authorization.k8s.io", "clusterroles", false),
        ("rbac.authorization.k8s.io", "rolebindings", true),
        ("coordination.k8s.io", "leases", true),
        ("apiextensions.k8s.io", "customresourcedefinitions", false),
    ] {
        assert!(
            found.contains(&(group.to_owned(), plural.to_owned(), namespaced)),
            "{group}/{plural} (namespaced: {namespaced}) in {found:?}"
        );
    }
}
