//! kube-apiserver's privilege-escalation checks: whoever may write Roles and bindings still
//! cannot grant more than they hold, unless they may `escalate` (roles) or `bind` (the
//! referenced role). The users are impersonated, so the tests run unchanged on a real cluster.

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::access_review::{rbac_config, self_review, unique_user};
use crate::common::{TestCluster, api_error, wait_for};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn role(name: &str, rules: Value) -> Role {
    serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
}

fn binding(name: &str, role: &str, user: &str) -> RoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": role},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
    }))
    .unwrap()
}

fn read_secrets() -> Value {
    json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}])
}

/// Grants `user` the `rules` in `ns` through a Role and RoleBinding named `name`, and waits
/// until the authorizer allows the first rule's first verb (a real one reads bindings
/// through a cache).
async fn grant(cluster: &TestCluster, ns: &str, name: &str, user: &str, rules: Value) {
    let admin = &cluster.client;
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role(name, rules.clone()))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding(name, name, user))
        .await
        .unwrap();
    let first = &rules[0];
    let attributes = json!({"resourceAttributes": {
        "namespace": ns, "verb": first["verbs"][0], "group": first["apiGroups"][0],
        "resource": first["resources"][0], "name": first["resourceNames"][0].as_str().unwrap_or_default(),
    }});
    let as_user = cluster.client_impersonating(user);
    wait_for(&format!("{user} to be granted {name}"), || async {
        self_review(&as_user, attributes.clone()).await.unwrap().allowed.then_some(())
    })
    .await;
}

fn not_held(user: &str, missing: &str) -> String {
    format!(
        "user \"{user}\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not \
         currently held:\n{missing}"
    )
}

#[tokio::test]
async fn a_role_granting_what_its_writer_lacks_is_forbidden_unless_it_may_escalate() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("escalate").await;
    let user = unique_user("writer");
    let write_roles =
        json!([{"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["create", "get"]}]);
    grant(&cluster, &ns, "write-roles", &user, write_roles).await;
    let roles = Api::<Role>::namespaced(cluster.client_impersonating(&user), &ns);

    let status =
        api_error(roles.create(&PostParams::default(), &role("secret-reader", read_secrets())).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        format!(
            "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: {}",
            not_held(&user, "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}")
        )
    );
    let details = status.details.expect("a Forbidden status names the object");
    assert_eq!(
        (details.group.as_str(), details.kind.as_str(), details.name.as_str()),
        (RBAC_GROUP, "roles", "secret-reader")
    );

    let what_it_holds = json!([{"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["get"]}]);
    roles.create(&PostParams::default(), &role("role-reader", what_it_holds)).await.unwrap();

    let escalate = json!([{"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["escalate"]}]);
    grant(&cluster, &ns, "escalate-roles", &user, escalate).await;
    roles.create(&PostParams::default(), &role("secret-reader", read_secrets())).await.unwrap();
}

#[tokio::test]
async fn a_role_binding_needs_bind_on_its_role_or_every_permission_it_grants() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("bind").await;
    let user = unique_user("binder");
    let write_bindings =
        json!([{"apiGroups": [RBAC_GROUP], "resources": ["rolebindings"], "verbs": ["create"]}]);
    grant(&cluster, &ns, "write-bindings", &user, write_bindings).await;
    Api::<Role>::namespaced(cluster.client.clone(), &ns)
        .create(&PostParams::default(), &role("secret-reader", read_secrets()))
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(cluster.client_impersonating(&user), &ns);
    let team = binding("team-secrets", "secret-reader", "team-member");

    let status = api_error(bindings.create(&PostParams::default(), &team).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        format!(
            "rolebindings.rbac.authorization.k8s.io \"team-secrets\" is forbidden: {}",
            not_held(&user, "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}")
        )
    );

    let bind = json!([{"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["bind"],
                       "resourceNames": ["secret-reader"]}]);
    grant(&cluster, &ns, "bind-secret-reader", &user, bind).await;
    bindings.create(&PostParams::default(), &team).await.unwrap();

    // `bind` is on that role only; for another, the role must exist to be compared.
    let status = api_error(bindings.create(&PostParams::default(), &binding("other", "missing", "x")).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "roles.rbac.authorization.k8s.io \"missing\" not found");
}

#[tokio::test]
async fn changing_a_binding_is_checked_even_when_its_role_stays_but_not_for_finalizers() {
    let mut cluster = TestCluster::with_config(rbac_config()).await;
    let ns = cluster.namespace("rebind").await;
    let user = unique_user("labeller");
    let patch_bindings =
        json!([{"apiGroups": [RBAC_GROUP], "resources": ["rolebindings"], "verbs": ["patch"]}]);
    grant(&cluster, &ns, "patch-bindings", &user, patch_bindings).await;
    Api::<Role>::namespaced(cluster.client.clone(), &ns)
        .create(&PostParams::default(), &role("secret-reader", read_secrets()))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(cluster.client.clone(), &ns)
        .create(&PostParams::default(), &binding("team-secrets", "secret-reader", "team-member"))
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(cluster.client_impersonating(&user), &ns);
    let merge = |patch: Value| Patch::Merge(patch);

    let label = merge(json!({"metadata": {"labels": {"team": "a"}}}));
    let status = api_error(bindings.patch("team-secrets", &PatchParams::default(), &label).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert!(
        status.message.contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        status.message
    );

    // What the garbage collector changes is let through, so a deletion is never held up.
    let hold = merge(json!({"metadata": {"finalizers": ["example.com/hold"]}}));
    bindings.patch("team-secrets", &PatchParams::default(), &hold).await.unwrap();
    let release = merge(json!({"metadata": {"finalizers": null}}));
    bindings.patch("team-secrets", &PatchParams::default(), &release).await.unwrap();
}
