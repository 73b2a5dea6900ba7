//! Validation and server-filled fields of the kinds a replicator copies into every namespace:
//! NetworkPolicy, LimitRange, ResourceQuota, Role and RoleBinding. Messages that echo a
//! composite value (a list, a quantity, a roleRef) differ between releases (Go syntax up to
//! v1.33, JSON from v1.34), so those are asserted by field, reason and detail.

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::common::{TestCluster, api_error, wait_for};

/// The causes of a 422 Invalid, as (field, message) pairs in the server's order.
fn invalid_causes(status: kube::core::Status) -> Vec<(String, String)> {
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{}", status.message);
    let causes = status.details.expect("an Invalid status has details").causes;
    causes.into_iter().map(|cause| (cause.field, cause.message)).collect()
}

fn object<K: DeserializeOwned>(name: &str, body: Value) -> K {
    let mut body = body;
    body["metadata"] = json!({"name": name});
    serde_json::from_value(body).unwrap()
}

fn pair(field: &str, message: &str) -> (String, String) {
    (field.to_owned(), message.to_owned())
}

#[tokio::test]
async fn a_network_policy_with_bad_ports_or_cidrs_is_invalid_at_each_field() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("netpol").await;
    let api: Api<NetworkPolicy> = Api::namespaced(cluster.client.clone(), &ns);
    let policy = object(
        "bad",
        json!({"spec": {
            "podSelector": {},
            "ingress": [{"ports": [{"protocol": "ICMP", "port": 80}, {"port": 0}, {"port": 80, "endPort": 79}]}],
            "egress": [{"to": [
                {"ipBlock": {"cidr": "10.0.0.0/33"}},
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}},
                {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
            ]}],
        }}),
    );
    let causes = invalid_causes(api_error(api.create(&PostParams::default(), &policy).await));
    assert_eq!(
        causes,
        [
            pair(
                "spec.ingress[0].ports[0].protocol",
                "Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\""
            ),
            pair("spec.ingress[0].ports[1].port", "Invalid value: 0: must be between 1 and 65535, inclusive"),
            pair(
                "spec.ingress[0].ports[2].endPort",
                "Invalid value: 79: must be greater than or equal to `port`"
            ),
            pair("spec.egress[0].to[0].ipBlock.cidr", "Invalid value: \"10.0.0.0/33\": not a valid CIDR"),
            pair(
                "spec.egress[0].to[1].ipBlock.except[0]",
                "Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`"
            ),
            pair("spec.egress[0].to[2]", "Forbidden: may not specify both ipBlock and another peer"),
        ]
    );
}

#[tokio::test]
async fn a_limit_range_whose_min_is_above_its_max_or_of_an_unknown_type_is_invalid() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("limits").await;
    let api: Api<LimitRange> = Api::namespaced(cluster.client.clone(), &ns);
    let inverted = object(
        "inverted",
        json!({"spec": {"limits": [{"type": "Pod", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]}}),
    );
    let causes = invalid_causes(api_error(api.create(&PostParams::default(), &inverted).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "spec.limits[0].min[cpu]");
    assert!(causes[0].1.ends_with(": min value 2 is greater than max value 1"), "{causes:?}");

    let node = object("node", json!({"spec": {"limits": [{"type": "Node", "max": {"cpu": "1"}}]}}));
    let causes = invalid_causes(api_error(api.create(&PostParams::default(), &node).await));
    assert_eq!(
        causes,
        [pair(
            "spec.limits[0].type",
            "Invalid value: \"Node\": must be a standard limit type or fully qualified"
        )]
    );

    let pod_default =
        object("pod-default", json!({"spec": {"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}}));
    let causes = invalid_causes(api_error(api.create(&PostParams::default(), &pod_default).await));
    assert_eq!(
        causes,
        [pair("spec.limits[0].default", "Forbidden: may not be specified when `type` is 'Pod'")]
    );
}

#[tokio::test]
async fn a_resource_quota_needs_valid_quantities_resources_and_scopes() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("quota").await;
    let api: Api<ResourceQuota> = Api::namespaced(cluster.client.clone(), &ns);
    let create = |name: &str, spec: Value| {
        let quota: ResourceQuota = object(name, json!({"spec": spec}));
        let api = api.clone();
        async move { api.create(&PostParams::default(), &quota).await }
    };

    let causes = invalid_causes(api_error(create("negative", json!({"hard": {"requests.cpu": "-1"}})).await));
    assert_eq!(
        causes,
        [pair("spec.hard[requests.cpu]", "Invalid value: \"-1\": must be greater than or equal to 0")]
    );

    let causes = invalid_causes(api_error(create("fraction", json!({"hard": {"pods": "1500m"}})).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "spec.hard[pods]");
    assert!(causes[0].1.ends_with(": must be an integer"), "{causes:?}");

    let causes = invalid_causes(api_error(create("widgets", json!({"hard": {"widgets": "1"}})).await));
    let fields: Vec<&str> = causes.iter().map(|(field, _)| field.as_str()).collect();
    assert_eq!(fields, ["spec.hard[widgets]", "spec.hard[widgets]"]);
    assert!(causes[1].1.ends_with(": must be a standard resource for quota"), "{causes:?}");

    let conflicting = json!({"hard": {"pods": "1"}, "scopes": ["BestEffort", "NotBestEffort"]});
    let causes = invalid_causes(api_error(create("conflicting", conflicting).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "spec.scopes");
    assert!(causes[0].1.ends_with(": conflicting scopes"), "{causes:?}");

    let selector = json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
        {"scopeName": "Terminating", "operator": "In", "values": ["x"]},
    ]}});
    let causes = invalid_causes(api_error(create("selector", selector).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "spec.scopeSelector.matchExpressions.operator");
    assert!(
        causes[0].1.starts_with("Invalid value: \"In\": must be 'Exist' when scope is any of"),
        "{causes:?}"
    );

    let status = api_error(create("unparsable", json!({"hard": {"pods": "many"}})).await);
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        status.message,
        "ResourceQuota in version \"v1\" cannot be handled as a ResourceQuota: quantities must match the regular \
         expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}

#[tokio::test]
async fn a_resource_quota_gets_its_hard_limits_and_usage_in_status() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("quota").await;
    let api: Api<ResourceQuota> = Api::namespaced(cluster.client.clone(), &ns);
    let quota: ResourceQuota = object(
        "limits",
        json!({"spec": {"hard": {"pods": "10", "requests.cpu": "2", "count/widgets.example.com": "5"}}}),
    );
    api.create(&PostParams::default(), &quota).await.unwrap();
    let status = wait_for("the quota controller to fill in status", || async {
        let status = api.get("limits").await.ok()?.status?;
        status.hard.is_some().then_some(status)
    })
    .await;
    let hard: Vec<(String, String)> =
        status.hard.unwrap().into_iter().map(|(resource, quantity)| (resource, quantity.0)).collect();
    assert_eq!(
        hard,
        [
            ("count/widgets.example.com".to_owned(), "5".to_owned()),
            ("pods".to_owned(), "10".to_owned()),
            ("requests.cpu".to_owned(), "2".to_owned())
        ]
    );
    let used = status.used.expect("usage is reported with the limits");
    assert_eq!(used.get("pods").map(|q| q.0.as_str()), Some("0"));
    assert_eq!(used.get("requests.cpu").map(|q| q.0.as_str()), Some("0"));

    let raised = Patch::Merge(json!({"spec": {"hard": {"pods": "20"}}}));
    api.patch("limits", &PatchParams::default(), &raised).await.unwrap();
    wait_for("status.hard to follow spec.hard", || async {
        let hard = api.get("limits").await.ok()?.status?.hard?;
        (hard.get("pods")?.0 == "20").then_some(())
    })
    .await;
}

#[tokio::test]
async fn roles_need_verbs_and_resources_and_bindings_a_role_they_may_reference() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("rbac").await;
    let roles: Api<Role> = Api::namespaced(cluster.client.clone(), &ns);
    let empty_rule: Role = object("empty", json!({"rules": [{}]}));
    assert_eq!(
        invalid_causes(api_error(roles.create(&PostParams::default(), &empty_rule).await)),
        [
            pair("rules[0].verbs", "Required value: verbs must contain at least one value"),
            pair("rules[0].apiGroups", "Required value: resource rules must supply at least one api group"),
            pair("rules[0].resources", "Required value: resource rules must supply at least one resource"),
        ]
    );
    let urls: Role = object("urls", json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}));
    let causes = invalid_causes(api_error(roles.create(&PostParams::default(), &urls).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "rules[0].nonResourceURLs");
    assert!(causes[0].1.ends_with(": namespaced rules cannot apply to non-resource URLs"), "{causes:?}");

    let bindings: Api<RoleBinding> = Api::namespaced(cluster.client.clone(), &ns);
    let binding = |role_ref: Value, subjects: Value| -> RoleBinding {
        object("b", json!({"roleRef": role_ref, "subjects": subjects}))
    };
    let robot = binding(
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Policy", "name": "view"}),
        json!([{"kind": "Robot", "name": "r2"}]),
    );
    assert_eq!(
        invalid_causes(api_error(bindings.create(&PostParams::default(), &robot).await)),
        [
            pair(
                "roleRef.kind",
                "Unsupported value: \"Policy\": supported values: \"Role\", \"ClusterRole\""
            ),
            pair(
                "subjects[0].kind",
                "Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""
            ),
        ]
    );

    let view = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"});
    let user = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]);
    bindings.create(&PostParams::default(), &binding(view, user)).await.unwrap();
    let to_edit = Patch::Merge(json!({"roleRef": {"name": "edit"}}));
    let status = api_error(bindings.patch("b", &PatchParams::default(), &to_edit).await);
    assert!(
        status
            .message
            .starts_with("RoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef: Invalid value: "),
        "{}",
        status.message
    );
    let causes = invalid_causes(status);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "roleRef");
    assert!(
        causes[0].1.contains("\"edit\"") && causes[0].1.ends_with(": cannot change roleRef"),
        "{causes:?}"
    );
}

/// What a replicator that judges its copies by the server's rendering relies on: a dry-run
/// replace answers with the object as it would be stored (server defaults filled in) and
/// stores nothing; it is held to the resourceVersion sent (409 when stale) and to the same
/// validation as a real one (a RoleBinding's roleRef cannot change).
#[tokio::test]
async fn a_dry_run_replace_renders_defaults_stores_nothing_and_is_validated_as_a_real_one() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("dryrun").await;
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.client.clone(), &ns);
    let policy: NetworkPolicy = object("deny", json!({"spec": {"podSelector": {}}}));
    let created = policies.create(&PostParams::default(), &policy).await.unwrap();
    let version = created.metadata.resource_version.clone();
    let mut changed: NetworkPolicy =
        object("deny", json!({"spec": {"podSelector": {"matchLabels": {"app": "web"}}}}));
    changed.metadata.resource_version = version.clone();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let answered = policies.replace("deny", &dry_run, &changed).await.unwrap();
    let spec = answered.spec.unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]), "defaults filled in");
    assert!(spec.pod_selector.is_some_and(|selector| selector.match_labels.is_some()));
    let stored = policies.get("deny").await.unwrap();
    assert_eq!(stored.metadata.resource_version, version, "nothing stored");
    assert!(stored.spec.unwrap().pod_selector.is_none_or(|selector| selector.match_labels.is_none()));

    changed.metadata.resource_version = Some("1".to_owned());
    let status = api_error(policies.replace("deny", &dry_run, &changed).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"), "{}", status.message);

    let bindings: Api<RoleBinding> = Api::namespaced(cluster.client.clone(), &ns);
    let subjects = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "readers"}]);
    let view = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"});
    let binding: RoleBinding = object("b", json!({"roleRef": view, "subjects": subjects}));
    let created = bindings.create(&PostParams::default(), &binding).await.unwrap();
    let mut to_edit: RoleBinding = object("b", json!({"roleRef": view, "subjects": subjects}));
    to_edit.role_ref.name = "edit".to_owned();
    to_edit.metadata.resource_version = created.metadata.resource_version;
    let causes = invalid_causes(api_error(bindings.replace("b", &dry_run, &to_edit).await));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "roleRef");
}
