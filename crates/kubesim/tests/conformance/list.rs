use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error};

async fn seed(api: &Api<ConfigMap>) {
    for (name, labels) in [
        ("a", json!({"tier": "web", "env": "prod"})),
        ("b", json!({"tier": "db", "env": "prod"})),
        ("c", json!({"tier": "web"})),
        ("d", json!({})),
    ] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

async fn names(api: &Api<ConfigMap>, params: &ListParams) -> Vec<String> {
    let mut names: Vec<String> =
        api.list(params).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    names.sort();
    names
}

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    seed(&api).await;
    let cases = [
        ("tier=web", vec!["a", "c"]),
        ("tier==web", vec!["a", "c"]),
        ("tier!=web", vec!["b", "d"]),
        ("tier in (web,db)", vec!["a", "b", "c"]),
        ("tier notin (web)", vec!["b", "d"]),
        ("env", vec!["a", "b"]),
        ("!env", vec!["c", "d"]),
        ("tier=web,env=prod", vec!["a"]),
    ];
    for (selector, expected) in cases {
        assert_eq!(
            names(&api, &ListParams::default().labels(selector)).await,
            expected,
            "selector {selector}"
        );
    }
}

#[tokio::test]
async fn malformed_label_selector_is_bad_request() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let status = api_error(api.list(&ListParams::default().labels("a in (b")).await);
    assert_eq!(status.code, 400);
}

#[tokio::test]
async fn field_selectors_filter_by_name_namespace_and_type() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    seed(&api).await;
    assert_eq!(names(&api, &ListParams::default().fields("metadata.name=b")).await, vec!["b"]);
    assert_eq!(names(&api, &ListParams::default().fields("metadata.name!=b")).await, vec!["a", "c", "d"]);
    let all: Api<ConfigMap> = Api::all(cluster.client.clone());
    let in_ns = all.list(&ListParams::default().fields(&format!("metadata.namespace={ns}"))).await.unwrap();
    assert_eq!(in_ns.items.len(), 4);

    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), &ns);
    for (name, kind) in [("s1", "Opaque"), ("s2", "kubernetes.io/basic-auth")] {
        let mut secret = json!({"metadata": {"name": name}, "type": kind});
        if kind == "kubernetes.io/basic-auth" {
            secret["stringData"] = json!({"username": "u"});
        }
        secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    }
    let opaque = secrets.list(&ListParams::default().fields("type=Opaque")).await.unwrap();
    assert_eq!(opaque.items.iter().filter_map(|s| s.metadata.name.clone()).collect::<Vec<_>>(), vec!["s1"]);
}

#[tokio::test]
async fn unsupported_field_selector_is_bad_request() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let status = api_error(api.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!(status.code, 400);
    assert!(status.message.contains("\"data.k\" is not a known field selector"), "{}", status.message);
}

#[tokio::test]
async fn namespace_phase_field_selector_finds_active_namespaces() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<Namespace> = Api::all(cluster.client.clone());
    let active = api.list(&ListParams::default().fields("status.phase=Active")).await.unwrap();
    assert!(active.items.iter().any(|n| n.metadata.name.as_deref() == Some(ns.as_str())));
}

#[tokio::test]
async fn limit_and_continue_page_through_everything_once() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    for i in 0..7 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    let mut pages = 0;
    loop {
        let page = api.list(&params).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 3);
        seen.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(pages, 3);
    assert_eq!(seen, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn pages_of_a_selected_list_hold_only_matches_and_count_no_remainder() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    for i in 0..9 {
        let labels = if i % 3 == 0 { json!({"pick": "yes"}) } else { json!({}) };
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}"), "labels": labels}}))
                .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let first = api.list(&ListParams::default().labels("pick=yes").limit(2)).await.unwrap();
    let names: Vec<_> = first.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, ["cm-0", "cm-3"]);
    assert_eq!(first.metadata.remaining_item_count, None, "not counted past a selector");
    let token = first.metadata.continue_.expect("a next page");
    let rest =
        api.list(&ListParams::default().labels("pick=yes").limit(2).continue_token(&token)).await.unwrap();
    let names: Vec<_> = rest.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, ["cm-6"]);
    let unselected = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(unselected.metadata.remaining_item_count, Some(7));
}

#[tokio::test]
async fn list_carries_a_resource_version_to_watch_from() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert!(list.metadata.resource_version.is_some_and(|rv| rv.parse::<u64>().is_ok()));
}

#[tokio::test]
async fn list_across_all_namespaces_sees_every_namespace() {
    let mut cluster = TestCluster::new().await;
    let first = cluster.namespace("list").await;
    let second = cluster.namespace("list").await;
    for ns in [&first, &second] {
        let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), ns);
        seed(&api).await;
    }
    let all: Api<ConfigMap> = Api::all(cluster.client.clone());
    let found = all.list(&ListParams::default().labels("tier=web")).await.unwrap();
    let mut namespaces: Vec<String> = found.items.into_iter().filter_map(|c| c.metadata.namespace).collect();
    namespaces.sort();
    namespaces.dedup();
    assert!(namespaces.contains(&first) && namespaces.contains(&second));
}

#[tokio::test]
async fn delete_collection_removes_only_what_the_selector_matches() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("list").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    seed(&api).await;
    api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=web")).await.unwrap();
    assert_eq!(names(&api, &ListParams::default()).await, vec!["b", "d"]);
}
