use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{TestCluster, api_error};

async fn rbac_cluster() -> Option<TestCluster> {
    let config =
        kubesim::Config { authorization: kubesim::Authorization::Rbac, ..kubesim::Config::default() };
    let cluster = TestCluster::with_config(config).await;
    // On a real cluster the users below do not exist.
    cluster.sim()?;
    Some(cluster)
}

#[tokio::test]
async fn user_without_bindings_is_forbidden_with_kube_apiservers_message() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let ns = cluster.namespace("authz").await;
    let alice = cluster.sim().unwrap().client_for_user("alice", &[]);
    let status = api_error(Api::<ConfigMap>::namespaced(alice, &ns).list(&ListParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        format!(
            "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
        )
    );
}

#[tokio::test]
async fn status_counter_counts_each_denied_request() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let ns = cluster.namespace("authz").await;
    let sim = cluster.sim().unwrap();
    let before_ok = sim.counters().status(200);
    let alice = Api::<ConfigMap>::namespaced(sim.client_for_user("alice", &[]), &ns);
    assert_eq!(sim.counters().status(403), 0);
    api_error(alice.list(&ListParams::default()).await);
    api_error(alice.get("x").await);
    assert_eq!(sim.counters().status(403), 2);
    Api::<ConfigMap>::namespaced(cluster.client.clone(), &ns).list(&ListParams::default()).await.unwrap();
    assert_eq!(sim.counters().status(200), before_ok + 1);
}

#[tokio::test]
async fn rolebinding_to_edit_grants_access_in_its_namespace_only() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let team = cluster.namespace("authz").await;
    let other = cluster.namespace("authz").await;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "team-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team"}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cluster.client.clone(), &team)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let member = cluster.sim().unwrap().client_for_user("bob", &["team"]);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    Api::<ConfigMap>::namespaced(member.clone(), &team).create(&PostParams::default(), &cm).await.unwrap();
    let status =
        api_error(Api::<ConfigMap>::namespaced(member, &other).create(&PostParams::default(), &cm).await);
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn service_account_tokens_authenticate_as_the_service_account() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let ns = cluster.namespace("authz").await;
    let sa = cluster.sim().unwrap().client_for_service_account(&ns, "robot");
    let status = api_error(Api::<ConfigMap>::namespaced(sa, &ns).get("x").await);
    assert!(
        status.message.contains(&format!("User \"system:serviceaccount:{ns}:robot\"")),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn unknown_token_is_unauthorized() {
    let Some(cluster) = rbac_cluster().await else { return };
    let sim = cluster.sim().unwrap();
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.auth_info.token = Some("not-a-kubesim-token".to_owned().into());
    let client = kube::Client::try_from(config).unwrap();
    let status =
        api_error(Api::<ConfigMap>::namespaced(client, "default").list(&ListParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
}

/// A Role in `ns` granting `rules`, bound to user `user`.
pub(crate) async fn grant(client: &kube::Client, ns: &str, user: &str, rules: serde_json::Value) {
    let role: Role = serde_json::from_value(json!({"metadata": {"name": user}, "rules": rules})).unwrap();
    Api::<Role>::namespaced(client.clone(), ns).create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn binding_a_cluster_role_needs_bind_on_it() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let ns = cluster.namespace("authz").await;
    let write_bindings = json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"],
                                "verbs": ["create"]});
    grant(&cluster.client, &ns, "carol", json!([write_bindings])).await;
    let bind_edit = json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                           "verbs": ["bind"], "resourceNames": ["edit"]});
    grant(&cluster.client, &ns, "dave", json!([write_bindings, bind_edit])).await;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "team-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team"}],
    }))
    .unwrap();
    let sim = cluster.sim().unwrap();
    let as_user = |user: &str| Api::<RoleBinding>::namespaced(sim.client_for_user(user, &[]), &ns);
    let status = api_error(as_user("carol").create(&PostParams::default(), &binding).await);
    assert_eq!(status.code, 403);
    assert!(
        status.message.contains("attempting to grant RBAC permissions not currently held"),
        "{}",
        status.message
    );
    as_user("dave").create(&PostParams::default(), &binding).await.unwrap();
}

#[tokio::test]
async fn server_side_apply_that_creates_needs_create() {
    let Some(mut cluster) = rbac_cluster().await else { return };
    let ns = cluster.namespace("authz").await;
    let patch = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]});
    grant(&cluster.client, &ns, "erin", json!([patch])).await;
    let sim = cluster.sim().unwrap();
    let erin = Api::<ConfigMap>::namespaced(sim.client_for_user("erin", &[]), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                                       "metadata": {"name": "a"}, "data": {"k": "1"}}))
    .unwrap();
    let params = PatchParams::apply("erin").force();
    assert_eq!(api_error(erin.patch("a", &params, &Patch::Apply(&cm)).await).code, 403);
    Api::<ConfigMap>::namespaced(cluster.client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    erin.patch("a", &params, &Patch::Apply(&cm)).await.unwrap();
}
