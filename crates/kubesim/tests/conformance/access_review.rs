//! SelfSubjectAccessReview and SubjectAccessReview: answers that agree with what the server
//! then does, in kube-apiserver's words. Reviews about made-up users asked by the admin run on
//! a real cluster too; reviews asked *as* those users need kubesim's tokens.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview, SubjectAccessReviewStatus,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::authz::grant;
use crate::common::{TestCluster, api_error, wait_for};

pub(crate) fn rbac_config() -> kubesim::Config {
    kubesim::Config { authorization: kubesim::Authorization::Rbac, ..kubesim::Config::default() }
}

/// A user name no other test (or earlier run on a real cluster) uses.
pub(crate) fn unique_user(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

async fn subject_review(client: &kube::Client, spec: Value) -> kube::Result<SubjectAccessReviewStatus> {
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": spec})).unwrap();
    let created =
        Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
    Ok(created.status.expect("a created review has a status"))
}

pub(crate) async fn self_review(
    client: &kube::Client,
    spec: Value,
) -> kube::Result<SubjectAccessReviewStatus> {
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({"spec": spec})).unwrap();
    let created =
        Api::<SelfSubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
    Ok(created.status.expect("a created review has a status"))
}

fn list_configmaps(ns: &str) -> Value {
    json!({"resourceAttributes": {"namespace": ns, "verb": "list", "resource": "configmaps"}})
}

fn read_configmaps() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}])
}

#[tokio::test]
async fn subject_access_review_follows_role_bindings_and_names_the_grant() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("sar").await;
    let other = cluster.namespace("sar").await;
    let user = unique_user("reader");
    let asks = |ns: &str| {
        json!({"user": user, "groups": ["system:authenticated"],
               "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "configmaps"}})
    };

    let before = subject_review(&cluster.client, asks(&ns)).await.unwrap();
    assert!(!before.allowed);
    assert_ne!(before.denied, Some(true), "RBAC only ever fails to allow");

    grant(&cluster.client, &ns, &user, read_configmaps()).await;
    // A real cluster's authorizer sees new bindings through a cache, a moment later.
    let after = wait_for("the RoleBinding to allow the review", || async {
        Some(subject_review(&cluster.client, asks(&ns)).await.unwrap()).filter(|status| status.allowed)
    })
    .await;
    assert_eq!(
        after.reason.as_deref(),
        Some(
            format!("RBAC: allowed by RoleBinding \"{user}/{ns}\" of Role \"{user}\" to User \"{user}\"")
                .as_str()
        )
    );
    assert!(!subject_review(&cluster.client, asks(&other)).await.unwrap().allowed);
}

#[tokio::test]
async fn non_resource_reviews_use_the_discovery_roles() {
    let cluster = TestCluster::with_config(rbac_config()).await;
    let user = unique_user("viewer");
    let asks = |path: &str| {
        json!({"user": user, "groups": ["system:authenticated"],
               "nonResourceAttributes": {"path": path, "verb": "get"}})
    };
    assert!(subject_review(&cluster.client, asks("/apis")).await.unwrap().allowed);
    assert!(!subject_review(&cluster.client, asks("/metrics")).await.unwrap().allowed);
}

#[tokio::test]
async fn a_review_without_attributes_is_invalid() {
    let cluster = TestCluster::with_config(rbac_config()).await;
    let status = api_error(self_review(&cluster.client, json!({})).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    // kube-apiserver 1.32 leaves the kind out of the qualified name (the review's kind is
    // empty once decoded); kubesim names it. Either is the same error to a client.
    let detail = "\"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of \
                  nonResourceAttributes or resourceAttributes must be specified";
    let worded = |kind: &str| format!("{kind}.authorization.k8s.io {detail}");
    assert!([worded("SelfSubjectAccessReview"), worded("")].contains(&status.message), "{}", status.message);
}

#[tokio::test]
async fn access_reviews_are_in_discovery_as_create_only() {
    let cluster = TestCluster::new().await;
    let resources = cluster.client.list_api_group_resources("authorization.k8s.io/v1").await.unwrap();
    for name in ["selfsubjectaccessreviews", "subjectaccessreviews"] {
        let resource =
            resources.resources.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(resource.verbs, ["create"], "{name}");
        assert!(!resource.namespaced, "{name}");
    }
}

#[tokio::test]
async fn self_review_agrees_with_what_the_server_then_allows() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("ssar").await;
    let Some(sim) = cluster.sim() else { return };
    let alice = sim.client_for_user("alice", &[]);
    let configmaps = Api::<ConfigMap>::namespaced(alice.clone(), &ns);

    assert!(!self_review(&alice, list_configmaps(&ns)).await.unwrap().allowed);
    assert_eq!(api_error(configmaps.list(&Default::default()).await).code, 403);

    grant(&cluster.client, &ns, "alice", read_configmaps()).await;
    assert!(self_review(&alice, list_configmaps(&ns)).await.unwrap().allowed);
    assert!(configmaps.list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn subject_access_review_needs_permission_to_create_it() {
    let cluster = TestCluster::with_config(rbac_config()).await;
    let Some(sim) = cluster.sim() else { return };
    let alice = sim.client_for_user("alice", &[]);
    let status = api_error(
        subject_review(&alice, json!({"user": "bob", "nonResourceAttributes": {"path": "/", "verb": "get"}}))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"alice\" cannot create resource \
         \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
    );
}

#[tokio::test]
async fn everything_is_allowed_without_rbac() {
    let cluster = TestCluster::new().await;
    let Some(sim) = cluster.sim() else { return };
    let alice = sim.client_for_user("alice", &[]);
    let status = self_review(&alice, list_configmaps("anywhere")).await.unwrap();
    assert!(status.allowed);
    assert_eq!(status.reason, None);
}

#[tokio::test]
async fn an_impersonated_user_is_reviewed_and_authorized_as_that_user() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("impersonate").await;
    let user = unique_user("tenant");
    let tenant = cluster.client_impersonating(&user);
    let configmaps = Api::<ConfigMap>::namespaced(tenant.clone(), &ns);

    assert!(!self_review(&tenant, list_configmaps(&ns)).await.unwrap().allowed);
    let status = api_error(configmaps.list(&Default::default()).await);
    assert_eq!(status.code, 403);
    assert!(status.message.contains(&format!("User \"{user}\" cannot list")), "{}", status.message);

    grant(&cluster.client, &ns, &user, read_configmaps()).await;
    // A real cluster's authorizer sees new bindings through a cache, a moment later.
    wait_for("the RoleBinding to allow the impersonated user", || async {
        self_review(&tenant, list_configmaps(&ns)).await.unwrap().allowed.then_some(())
    })
    .await;
    assert!(configmaps.list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let cluster = TestCluster::with_config(rbac_config()).await;
    let Some(sim) = cluster.sim() else { return };
    let mut config = sim.client_config();
    config.auth_info.token = Some(kubesim::authz::token_for_user("alice", &[]).into());
    config.auth_info.impersonate = Some("bob".to_owned());
    let alice_as_bob = kube::Client::try_from(config).unwrap();
    let status =
        api_error(Api::<ConfigMap>::namespaced(alice_as_bob, "default").list(&Default::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at \
         the cluster scope"
    );
}

#[tokio::test]
async fn self_subject_review_names_the_token_user_and_groups() {
    let cluster = TestCluster::with_config(rbac_config()).await;
    let Some(sim) = cluster.sim() else { return };
    let whoami = |client: kube::Client| async move {
        let review: SelfSubjectReview = serde_json::from_value(json!({})).unwrap();
        let created =
            Api::<SelfSubjectReview>::all(client).create(&PostParams::default(), &review).await.unwrap();
        let user = created.status.and_then(|status| status.user_info).expect("userInfo");
        (user.username.unwrap_or_default(), user.groups.unwrap_or_default())
    };
    assert_eq!(
        whoami(sim.client_for_user("bob", &["devs"])).await,
        ("bob".to_owned(), vec!["devs".to_owned(), "system:authenticated".to_owned()])
    );
    let (name, groups) = whoami(sim.client_for_service_account("team-a", "builder")).await;
    assert_eq!(name, "system:serviceaccount:team-a:builder");
    assert!(groups.contains(&"system:serviceaccounts:team-a".to_owned()), "{groups:?}");
}

#[tokio::test]
async fn self_rules_review_lists_what_the_bindings_in_the_namespace_grant() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("rules").await;
    let Some(sim) = cluster.sim() else { return };
    let alice = sim.client_for_user("alice", &[]);
    let grants_configmaps = |alice: kube::Client, ns: String| async move {
        let review: SelfSubjectRulesReview =
            serde_json::from_value(json!({"spec": {"namespace": ns}})).unwrap();
        let created =
            Api::<SelfSubjectRulesReview>::all(alice).create(&PostParams::default(), &review).await.unwrap();
        let status = created.status.expect("status");
        assert!(!status.incomplete, "{:?}", status.evaluation_error);
        status.resource_rules.iter().any(|rule| {
            rule.resources.as_ref().is_some_and(|r| r.contains(&"configmaps".to_owned()))
                && rule.verbs.contains(&"list".to_owned())
        })
    };
    assert!(!grants_configmaps(alice.clone(), ns.clone()).await);
    grant(&cluster.client, &ns, "alice", read_configmaps()).await;
    assert!(grants_configmaps(alice.clone(), ns.clone()).await);
    assert!(!grants_configmaps(alice, "elsewhere".to_owned()).await);
}
