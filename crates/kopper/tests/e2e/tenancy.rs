//! Replication tried as a hostile tenant would: kubesim enforces RBAC, kopper runs as its
//! ServiceAccount with config/rbac/ as shipped, and tenants `alice` (tenant-a) and `bob`
//! (tenant-b) have rights that end at their own namespace. Each test asserts that an attack
//! fails and that the legitimate use next to it still works.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::manifests::{create_document, rbac_documents};
use crate::common::{Operator, eventually, eventually_within, run_args};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kopper::controllers::bucket::access_types::BucketAccess;
use kopper::controllers::bucket::types::{Bucket, BucketClass};
use kopper::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const KOPPER_NAMESPACE: &str = "kopper-system";
const CONSENT: &str = "kopper.dev/accept-replication-from";

/// A cluster with kopper installed as config/rbac/ says, and two tenants.
struct Tenancy {
    sim: kubesim::Server,
    admin: Client,
    alice: Client,
    bob: Client,
    kubeconfig: PathBuf,
    operator: Option<Operator>,
    _dir: tempfile::TempDir,
}

impl Tenancy {
    async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// `flags` are extra `kopper run` flags.
    async fn start_with(flags: &[&str]) -> Self {
        let config =
            kubesim::Config { authorization: kubesim::Authorization::Rbac, ..kubesim::Config::default() };
        let sim = kubesim::Server::start(config).await.unwrap();
        let admin = sim.client();
        for document in rbac_documents() {
            create_document(&admin, document).await;
        }
        let crds = Api::all(admin.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        tenant_role(&admin).await;
        for (user, home) in [("alice", "tenant-a"), ("bob", "tenant-b")] {
            namespace(&admin, home, json!({})).await;
            bind_tenant(&admin, user, home).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let identity = sim.kubeconfig_for_service_account(KOPPER_NAMESPACE, "kopper");
        std::fs::write(&kubeconfig, serde_yaml::to_string(&identity).unwrap()).unwrap();
        let alice = sim.client_for_user("alice", &[]);
        let bob = sim.client_for_user("bob", &[]);
        let mut tenancy = Self { sim, admin, alice, bob, kubeconfig, operator: None, _dir: dir };
        tenancy.start_kopper(flags);
        tenancy
    }

    fn start_kopper(&mut self, flags: &[&str]) {
        let mut args =
            vec!["--controllers", "config-map-sync,replication-rule", "--namespace", KOPPER_NAMESPACE];
        args.extend(flags);
        self.operator = Some(Operator::start(run_args(&self.kubeconfig, &args)));
    }

    async fn restart_kopper(&mut self, flags: &[&str]) {
        self.operator.take().unwrap().stop().await.unwrap();
        self.start_kopper(flags);
    }

    fn config_maps(&self, client: &Client, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(client.clone(), namespace)
    }

    /// `alice` creates a ConfigMapSync in tenant-a.
    async fn alice_syncs(&self, name: &str, spec: Value) {
        tenant_syncs(&self.alice, "tenant-a", name, spec).await;
    }

    /// The status of alice's ConfigMapSync once `ready` holds for it.
    async fn sync_status(&self, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let api = Api::<ConfigMapSync>::namespaced(self.alice.clone(), "tenant-a");
        eventually(&format!("status of ConfigMapSync {name}"), || async {
            let sync = api.get(name).await.unwrap();
            let status = serde_json::to_value(sync.status?).unwrap();
            ready(&status).then_some(status)
        })
        .await
    }

    /// The namespaces holding a ConfigMap named `name`.
    async fn holders(&self, name: &str) -> Vec<String> {
        let all: Api<ConfigMap> = Api::all(self.admin.clone());
        let list = all.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await.unwrap();
        let mut namespaces: Vec<String> = list.items.iter().filter_map(|cm| cm.namespace()).collect();
        namespaces.sort();
        namespaces
    }

    async fn consent(&self, namespace_name: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"annotations": {CONSENT: value}}});
        Api::<Namespace>::all(self.admin.clone())
            .patch(namespace_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    async fn stop(mut self) {
        if let Some(operator) = self.operator.take() {
            operator.stop().await.unwrap();
        }
        self.sim.shutdown().await;
    }
}

/// A tenant (`client`) creates a ConfigMapSync in its namespace.
async fn tenant_syncs(client: &Client, namespace_name: &str, name: &str, spec: Value) {
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "ConfigMapSync",
        "metadata": {"name": name, "namespace": namespace_name},
        "spec": spec,
    }))
    .unwrap();
    Api::<ConfigMapSync>::namespaced(client.clone(), namespace_name)
        .create(&PostParams::default(), &sync)
        .await
        .expect("a tenant may create ConfigMapSyncs in its namespace");
}

fn ready_reason(status: &Value) -> &str {
    status["conditions"][0]["reason"].as_str().unwrap_or_default()
}

/// Tenants may manage ConfigMaps, Secrets, ConfigMapSyncs, SecretSyncs, Buckets and
/// BucketAccesses in their own namespace only.
async fn tenant_role(admin: &Client) {
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "tenant"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]},
            {"apiGroups": ["kopper.dev"], "resources": ["configmapsyncs", "secretsyncs", "buckets", "bucketaccesses"], "verbs": ["*"]},
        ],
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
}

async fn bind_tenant(admin: &Client, user: &str, namespace_name: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-tenant"), "namespace": namespace_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), namespace_name)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

async fn namespace(client: &Client, name: &str, metadata: Value) {
    let mut object = json!({"metadata": {"name": name}});
    if let Some(extra) = metadata.as_object() {
        for (key, value) in extra {
            object["metadata"][key] = value.clone();
        }
    }
    let namespace: Namespace = serde_json::from_value(object).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

async fn config_map(api: &Api<ConfigMap>, name: &str, data: Value) {
    let config_map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    api.create(&PostParams::default(), &config_map).await.unwrap();
}

async fn admin_rule(admin: &Client, name: &str, spec: Value) {
    let rule: ReplicationRule = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "ReplicationRule",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    Api::<ReplicationRule>::all(admin.clone()).create(&PostParams::default(), &rule).await.unwrap();
}

async fn rule_status(admin: &Client, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let api = Api::<ReplicationRule>::all(admin.clone());
    eventually(&format!("status of ReplicationRule {name}"), || async {
        let status = serde_json::to_value(api.get(name).await.unwrap().status?).unwrap();
        ready(&status).then_some(status)
    })
    .await
}

/// Case 1: a ConfigMapSync pushes nothing into a namespace that did not consent, protected
/// namespaces included, whether named or selected; once the destination's owner consents, it
/// gets its copy, and loses it when the consent is withdrawn.
#[tokio::test]
async fn a_tenant_cannot_push_into_namespaces_that_did_not_consent() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "later", json!({})).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "aws-auth", json!({"mapUsers": "alice"}))
        .await;
    tenancy
        .alice_syncs(
            "push",
            json!({
                "sourceNamespace": "tenant-a",
                "destinationNamespaces": ["kube-system", "tenant-b", "default", KOPPER_NAMESPACE],
                "destinationSelector": {},
                "configMapName": "aws-auth",
            }),
        )
        .await;
    let status = tenancy.sync_status("push", |s| ready_reason(s) == "DestinationRefused").await;
    assert_eq!(status["refusedDestinations"], json!(["default", "kopper-system", "kube-system", "tenant-b"]));
    assert_eq!(status["syncedCount"], 0);
    assert_eq!(tenancy.holders("aws-auth").await, ["tenant-a"], "no copy anywhere");

    tenancy.consent("tenant-b", Some("tenant-a")).await;
    eventually("the copy in tenant-b", || async {
        (tenancy.holders("aws-auth").await.len() == 2).then_some(())
    })
    .await;
    let status = tenancy.sync_status("push", |s| s["syncedNamespaces"] == json!(["tenant-b"])).await;
    assert_eq!(status["refusedDestinations"], json!(["default", "kopper-system", "kube-system"]));
    let copy = tenancy.config_maps(&tenancy.bob, "tenant-b").get("aws-auth").await.unwrap();
    assert_eq!(copy.data.unwrap()["mapUsers"], "alice");

    tenancy.consent("tenant-b", None).await;
    eventually("the copy removed once consent is withdrawn", || async {
        (tenancy.holders("aws-auth").await == ["tenant-a"]).then_some(())
    })
    .await;
    tenancy.stop().await;
}

/// Case 2: status names only namespaces the tenant wrote, says nothing of what exists in the
/// others, and never names another tenant's rule.
#[tokio::test]
async fn status_tells_a_tenant_only_what_they_could_read_anyway() {
    let tenancy = Tenancy::start().await;
    let annotations = json!({"annotations": {CONSENT: "*"}, "labels": {"shared": "yes"}});
    namespace(&tenancy.admin, "tenant-c", annotations).await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "settings", json!({"owner": "bob"})).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "settings", json!({"owner": "alice"})).await;
    tenancy
        .alice_syncs(
            "probe",
            json!({
                "sourceNamespace": "tenant-a",
                "destinationNamespace": "tenant-b",
                "destinationSelector": {"matchLabels": {"shared": "yes"}},
                "configMapName": "settings",
            }),
        )
        .await;
    let status =
        tenancy.sync_status("probe", |s| ready_reason(s) == "Conflict" && s["syncedCount"] == 1).await;
    let text = status.to_string();
    assert!(!text.contains("tenant-c"), "a selected namespace is counted, not named: {text}");
    assert_eq!(status["syncedNamespaces"], json!([]));
    assert_eq!(status["conflicts"][0]["namespace"], "tenant-b");
    assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied");
    let bobs = tenancy.config_maps(&tenancy.bob, "tenant-b").get("settings").await.unwrap();
    assert_eq!(bobs.data.unwrap()["owner"], "bob", "bob's object is left as it is");
    tenancy.stop().await;
}

/// Case 3: an admin's ReplicationRule wins a copy over a tenant's ConfigMapSync created
/// before it, so a tenant cannot squat the name of a copy others trust.
#[tokio::test]
async fn a_tenant_cannot_squat_a_copy_an_admin_rule_provides() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("*")).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "trusted-ca", json!({"ca": "alice's"}))
        .await;
    tenancy
        .alice_syncs(
            "squat",
            json!({"sourceNamespace": "tenant-a", "destinationNamespace": "tenant-b", "configMapName": "trusted-ca"}),
        )
        .await;
    let copies = tenancy.config_maps(&tenancy.bob, "tenant-b");
    eventually("alice's copy first", || async {
        let data = copies.get_opt("trusted-ca").await.unwrap()?.data?;
        (data["ca"] == "alice's").then_some(())
    })
    .await;
    namespace(&tenancy.admin, "platform", json!({})).await;
    let platform = tenancy.config_maps(&tenancy.admin, "platform");
    let ca: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "trusted-ca", "labels": {"trust": "yes"}}, "data": {"ca": "the cluster's"}}),
    )
    .unwrap();
    platform.create(&PostParams::default(), &ca).await.unwrap();
    admin_rule(
        &tenancy.admin,
        "trusted-ca",
        json!({"kind": "ConfigMap", "namespaces": ["platform"], "selector": {"matchLabels": {"trust": "yes"}}}),
    )
    .await;
    eventually("the admin's copy wins in tenant-b", || async {
        let data = copies.get("trusted-ca").await.unwrap().data?;
        (data["ca"] == "the cluster's").then_some(())
    })
    .await;
    let status = tenancy.sync_status("squat", |s| ready_reason(s) == "Conflict").await;
    assert!(!status.to_string().contains("ReplicationRule"), "no other rule named: {status}");
    tenancy.stop().await;
}

/// Case 4: bob creates his object between kopper's look and its write. kopper's create
/// fails instead of merging into it, and deleting alice's rule leaves bob's object alone.
#[tokio::test]
async fn an_object_created_in_the_race_before_kopper_writes_is_never_taken_over() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "race-cm", json!({"from": "alice"})).await;
    let mut held = tenancy.sim.faults().hold_next("create", "configmaps");
    tenancy
        .alice_syncs(
            "race",
            json!({"sourceNamespace": "tenant-a", "destinationNamespace": "tenant-b", "configMapName": "race-cm"}),
        )
        .await;
    held.arrived().await;
    let bobs = tenancy.config_maps(&tenancy.bob, "tenant-b");
    config_map(&bobs, "race-cm", json!({"mine": "bob"})).await;
    held.release();
    let status = tenancy.sync_status("race", |s| ready_reason(s) == "Conflict").await;
    assert_eq!(status["conflicts"][0]["namespace"], "tenant-b");
    let untouched = |object: ConfigMap| {
        let data = object.data.clone().unwrap_or_default();
        assert_eq!(data, BTreeMap::from([("mine".to_owned(), "bob".to_owned())]), "bob's data only");
        assert!(!object.labels().contains_key("app.kubernetes.io/managed-by"), "no kopper marks");
    };
    untouched(bobs.get("race-cm").await.unwrap());
    Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a")
        .delete("race", &DeleteParams::default())
        .await
        .unwrap();
    eventually("alice's sync gone", || async {
        Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a")
            .get_opt("race")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    untouched(bobs.get("race-cm").await.expect("bob's object survives the cleanup"));
    tenancy.stop().await;
}

/// Case 5: rules whose names are too long for a label never share the value that ties
/// copies to their rule, so deleting one never deletes the other's copies.
#[tokio::test]
async fn long_rule_names_in_two_tenants_keep_their_copies_apart() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "hub", json!({"annotations": {CONSENT: "tenant-a,tenant-b"}})).await;
    let name = format!("sync-{}", "x".repeat(200));
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "from-alice", json!({"v": "a"})).await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "from-bob", json!({"v": "b"})).await;
    tenancy
        .alice_syncs(&name, json!({"sourceNamespace": "tenant-a", "destinationNamespace": "hub", "configMapName": "from-alice"}))
        .await;
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": name, "namespace": "tenant-b"},
        "spec": {"sourceNamespace": "tenant-b", "destinationNamespace": "hub", "configMapName": "from-bob"},
    }))
    .unwrap();
    let bobs_syncs = Api::<ConfigMapSync>::namespaced(tenancy.bob.clone(), "tenant-b");
    bobs_syncs.create(&PostParams::default(), &sync).await.unwrap();
    let hub = tenancy.config_maps(&tenancy.admin, "hub");
    eventually("both copies in hub", || async {
        (hub.get_opt("from-alice").await.unwrap().is_some()
            && hub.get_opt("from-bob").await.unwrap().is_some())
        .then_some(())
    })
    .await;
    let label = |cm: ConfigMap| cm.labels()["kopper.dev/replicated-by"].clone();
    assert_ne!(label(hub.get("from-alice").await.unwrap()), label(hub.get("from-bob").await.unwrap()));
    Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a")
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("alice's copy removed", || async {
        hub.get_opt("from-alice").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(hub.get_opt("from-bob").await.unwrap().is_some(), "bob's copy stays");
    tenancy.stop().await;
}

/// Case 6: copies made while kopper allowed cross-namespace sources are removed once a
/// restart without the flag refuses the rule.
#[tokio::test]
async fn a_rule_no_longer_allowed_loses_its_copies() {
    let mut tenancy = Tenancy::start_with(&["--allow-cross-namespace-sources"]).await;
    tenancy.consent("tenant-a", Some("tenant-a")).await;
    namespace(&tenancy.admin, "shared", json!({"annotations": {CONSENT: "tenant-a"}})).await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "public", json!({"v": "1"})).await;
    tenancy
        .alice_syncs(
            "borrow",
            json!({"sourceNamespace": "tenant-b", "destinationNamespace": "shared", "configMapName": "public"}),
        )
        .await;
    eventually("the copy under the flag", || async {
        (tenancy.holders("public").await == ["shared", "tenant-b"]).then_some(())
    })
    .await;
    tenancy.restart_kopper(&[]).await;
    let status = tenancy.sync_status("borrow", |s| ready_reason(s) == "CrossNamespaceSourceDenied").await;
    assert_eq!(status["conditions"][0]["status"], "False");
    eventually("the copy revoked", || async {
        (tenancy.holders("public").await == ["tenant-b"]).then_some(())
    })
    .await;
    tenancy.stop().await;
}

/// Case 7: a Secret rule with an empty selector copies ordinary Secrets but no credential of
/// the cluster (ServiceAccount tokens, Helm release records) unless it names their type.
#[tokio::test]
async fn a_broad_secret_rule_copies_no_cluster_credentials_unless_it_names_their_type() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "platform", json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(tenancy.admin.clone(), "platform");
    for secret in [
        json!({"metadata": {"name": "plain"}, "stringData": {"k": "v"}}),
        json!({"metadata": {"name": "builder-token", "annotations": {"kubernetes.io/service-account.name": "builder"}},
               "type": "kubernetes.io/service-account-token", "stringData": {"token": "t"}}),
        json!({"metadata": {"name": "sh.helm.release.v1.app.v1", "labels": {"owner": "helm"}},
               "type": "helm.sh/release.v1", "stringData": {"release": "r"}}),
    ] {
        let secret: Secret = serde_json::from_value(secret).unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    admin_rule(
        &tenancy.admin,
        "everything",
        json!({"kind": "Secret", "namespaces": ["platform"], "selector": {}}),
    )
    .await;
    rule_status(&tenancy.admin, "everything", |s| s["copiesInSync"] == 3).await;
    let copies: Api<Secret> = Api::namespaced(tenancy.admin.clone(), "tenant-b");
    assert!(copies.get_opt("plain").await.unwrap().is_some());
    assert!(copies.get_opt("builder-token").await.unwrap().is_none());
    assert!(copies.get_opt("sh.helm.release.v1.app.v1").await.unwrap().is_none());

    let named = json!({"spec": {"credentialTypes": ["kubernetes.io/service-account-token"]}});
    Api::<ReplicationRule>::all(tenancy.admin.clone())
        .patch("everything", &PatchParams::default(), &Patch::Merge(&named))
        .await
        .unwrap();
    eventually("the named credential type copied", || async {
        copies.get_opt("builder-token").await.unwrap().map(drop)
    })
    .await;
    assert!(copies.get_opt("sh.helm.release.v1.app.v1").await.unwrap().is_none());
    tenancy.stop().await;
}

/// Case 8: even an admin's rule reaches protected namespaces only when it names them; a
/// glob or the default "every namespace" does not.
#[tokio::test]
async fn protected_namespaces_get_copies_only_when_a_cluster_rule_names_them() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "platform", json!({})).await;
    let source: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings", "labels": {"copy": "yes"}}})).unwrap();
    tenancy.config_maps(&tenancy.admin, "platform").create(&PostParams::default(), &source).await.unwrap();
    let spec = |include: Value| {
        json!({"kind": "ConfigMap", "namespaces": ["platform"], "selector": {"matchLabels": {"copy": "yes"}},
               "includeNamespaces": include})
    };
    admin_rule(&tenancy.admin, "glob", spec(json!(["*"]))).await;
    rule_status(&tenancy.admin, "glob", |s| s["copiesInSync"] == 3).await;
    assert_eq!(tenancy.holders("settings").await, ["default", "platform", "tenant-a", "tenant-b"]);
    let named = json!({"spec": {"includeNamespaces": ["*", "kube-system"]}});
    Api::<ReplicationRule>::all(tenancy.admin.clone())
        .patch("glob", &PatchParams::default(), &Patch::Merge(&named))
        .await
        .unwrap();
    eventually("the copy in the named protected namespace", || async {
        tenancy.holders("settings").await.contains(&"kube-system".to_owned()).then_some(())
    })
    .await;
    assert!(!tenancy.holders("settings").await.contains(&KOPPER_NAMESPACE.to_owned()));
    tenancy.stop().await;
}

/// Round two, case 1: tenant-c accepts copies from any tenant. bob keeps a copy there;
/// alice names her ConfigMapSync `0` so that it sorts first. Consent lets her add copies to
/// tenant-c, never replace bob's: his copy stays, untouched, and her rule reports the place
/// taken. Once bob's rule is gone, hers is next in line and takes the place.
#[tokio::test]
async fn a_tenant_cannot_take_over_another_tenant_s_copy_by_naming_its_rule_to_sort_first() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "*"}})).await;
    let spec = |from: &str| json!({"sourceNamespace": from, "destinationNamespace": "tenant-c", "configMapName": "shared"});
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "shared", json!({"owner": "bob"})).await;
    tenant_syncs(&tenancy.bob, "tenant-b", "sync", spec("tenant-b")).await;
    let copies = tenancy.config_maps(&tenancy.admin, "tenant-c");
    let owner = |owner: &'static str| {
        let copies = copies.clone();
        move || {
            let copies = copies.clone();
            async move {
                let copy = copies.get_opt("shared").await.unwrap()?;
                (copy.data.as_ref()?.get("owner")? == owner).then_some(copy)
            }
        }
    };
    let bobs = eventually("bob's copy in tenant-c", owner("bob")).await;

    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "shared", json!({"owner": "alice"})).await;
    tenancy.alice_syncs("0", spec("tenant-a")).await;
    let status = tenancy.sync_status("0", |s| ready_reason(s) == "Conflict").await;
    assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied");
    assert!(!status.to_string().contains("tenant-b"), "bob's rule is not named: {status}");
    let kept = copies.get("shared").await.unwrap();
    assert_eq!(kept.data.unwrap()["owner"], "bob", "bob's copy is not rewritten");
    assert_eq!(
        (kept.metadata.uid, kept.metadata.resource_version),
        (bobs.metadata.uid, bobs.metadata.resource_version),
        "bob's copy is not touched"
    );

    Api::<ConfigMapSync>::namespaced(tenancy.bob.clone(), "tenant-b")
        .delete("sync", &DeleteParams::default())
        .await
        .unwrap();
    eventually("alice's copy once bob's rule is gone", owner("alice")).await;
    tenancy.stop().await;
}

/// Round two, case 2 (the replication engine's side): an admin rule replicates a Secret
/// named like a Bucket's Secret (`<bucket>-s3`). The Bucket's Secret carries kopper's
/// managed-by label but no rule's label: it is another controller's, so the engine neither
/// rewrites nor deletes it and reports the place taken, while the other namespaces get
/// their copy. (With both controllers running, each rewriting the other's Secret would
/// create an access key per round; tests/bucket.rs counts those.)
#[tokio::test]
async fn an_admin_rule_never_rewrites_a_bucket_s_secret_of_the_same_name() {
    let tenancy = Tenancy::start().await;
    let buckets: Api<Secret> = Api::namespaced(tenancy.admin.clone(), "tenant-b");
    let bucket_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-s3",
                     "labels": {"app.kubernetes.io/managed-by": "kopper", "kopper.dev/bucket": "app"}},
        "stringData": {"AWS_ACCESS_KEY_ID": "AKIA-bob"},
    }))
    .unwrap();
    let before = buckets.create(&PostParams::default(), &bucket_secret).await.unwrap();
    namespace(&tenancy.admin, "platform", json!({})).await;
    let source: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-s3", "labels": {"copy": "yes"}},
        "stringData": {"AWS_ACCESS_KEY_ID": "the platform's"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(tenancy.admin.clone(), "platform")
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    admin_rule(
        &tenancy.admin,
        "platform-secret",
        json!({"kind": "Secret", "namespaces": ["platform"], "selector": {"matchLabels": {"copy": "yes"}}}),
    )
    .await;
    let status = rule_status(&tenancy.admin, "platform-secret", |s| {
        ready_reason(s) == "Conflict" && s["copiesInSync"] == 2
    })
    .await;
    assert_eq!(status["conflicts"][0]["namespace"], "tenant-b", "{status}");
    let after = buckets.get("app-s3").await.unwrap();
    assert_eq!(
        (after.metadata.uid, after.metadata.resource_version),
        (before.metadata.uid, before.metadata.resource_version),
        "the Bucket's Secret is left as it is"
    );
    tenancy.stop().await;
}

/// A tenant's burst does not hold up another tenant: 2,000 ConfigMapSyncs of alice's, each
/// refused at once (tenant-b did not consent), queue behind kopper's reconcile permits, yet
/// bob's ConfigMapSync gets its copy within seconds, because namespaces take the permits in
/// turn (one reconcile per namespace with work waiting ahead of bob's first).
#[tokio::test]
async fn a_burst_of_one_tenant_s_objects_does_not_delay_another_tenant() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "tenant-b-copies", json!({"annotations": {CONSENT: "tenant-b"}})).await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "settings", json!({"mode": "bob"})).await;
    let syncs = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    let burst = futures::stream::iter(0..2_000).for_each_concurrent(16, |n| {
        let syncs = syncs.clone();
        async move {
            let sync: ConfigMapSync = serde_json::from_value(json!({
                "apiVersion": "kopper.dev/v1alpha1",
                "kind": "ConfigMapSync",
                "metadata": {"name": format!("push-{n}"), "namespace": "tenant-a"},
                "spec": {
                    "sourceNamespace": "tenant-a",
                    "destinationNamespaces": ["tenant-b"],
                    "configMapName": "aws-auth",
                },
            }))
            .unwrap();
            syncs.create(&PostParams::default(), &sync).await.unwrap();
        }
    });
    burst.await;

    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "ConfigMapSync",
        "metadata": {"name": "share", "namespace": "tenant-b"},
        "spec": {
            "sourceNamespace": "tenant-b",
            "destinationNamespaces": ["tenant-b-copies"],
            "configMapName": "settings",
        },
    }))
    .unwrap();
    Api::<ConfigMapSync>::namespaced(tenancy.bob.clone(), "tenant-b")
        .create(&PostParams::default(), &sync)
        .await
        .unwrap();
    let copies = tenancy.config_maps(&tenancy.admin, "tenant-b-copies");
    eventually_within(Duration::from_secs(10), "bob's copy despite alice's burst", || async {
        copies.get_opt("settings").await.unwrap().map(|_| ())
    })
    .await;
    let refused = tenancy.sync_status("push-0", |s| ready_reason(s) == "DestinationRefused").await;
    assert_eq!(refused["syncedCount"], 0, "alice's syncs are refused all the same");
    tenancy.stop().await;
}

/// A source an admin rule matches by its labels but may not copy (a Helm release record,
/// whose type only its content tells) takes the place of one it copied: the old copies are
/// removed, not kept by a rule that hands them to itself pass after pass.
#[tokio::test]
async fn a_source_turned_into_a_credential_type_loses_its_copies() {
    let tenancy = Tenancy::start().await;
    admin_rule(
        &tenancy.admin,
        "publish-b",
        json!({"kind": "Secret", "namespaces": ["tenant-b"], "selector": {"matchLabels": {"publish": "yes"}}}),
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(tenancy.bob.clone(), "tenant-b");
    let source = |type_: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "x", "labels": {"publish": "yes"}},
                                      "type": type_, "stringData": {"k": "v"}}))
        .unwrap()
    };
    secrets.create(&PostParams::default(), &source("Opaque")).await.unwrap();
    let copies: Api<Secret> = Api::namespaced(tenancy.admin.clone(), "tenant-a");
    eventually("the copy in tenant-a", || async { copies.get_opt("x").await.unwrap() }).await;

    secrets.delete("x", &DeleteParams::default()).await.unwrap();
    secrets.create(&PostParams::default(), &source("helm.sh/release.v1")).await.unwrap();
    eventually("the copy of the old source removed", || async {
        copies.get_opt("x").await.unwrap().is_none().then_some(())
    })
    .await;
    tenancy.stop().await;
}

/// What a tenant sends the API server for a kind kopper caches, and the error it gets back.
async fn refused<K>(api: &Api<K>, object: Value) -> kube::core::Status
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("the API server accepted a tenant-sized object: {other:?}"),
    }
}

/// A tenant cannot fill kopper's memory through Bucket tags: 40 Buckets of 40 tags of
/// 30,000 characters (1.2 MB each) are all refused by the CRD schema, naming the tag, and
/// none is stored for kopper to cache.
#[tokio::test]
async fn tenant_sized_bucket_tags_are_refused_by_the_schema() {
    let tenancy = Tenancy::start().await;
    let api = Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a");
    let value = "v".repeat(30_000);
    let tags: BTreeMap<String, String> = (0..40).map(|i| (format!("tag{i:02}"), value.clone())).collect();
    for n in 0..40 {
        let bucket = json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": format!("big-{n}"), "namespace": "tenant-a"},
            "spec": {"tags": tags},
        });
        let status = refused(&api, bucket).await;
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert!(
            status.message.contains("spec.tags.tag00: Too long: may not be more than 256 bytes"),
            "{}",
            status.message
        );
    }
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
    let fits: BTreeMap<String, String> = [("owner".to_owned(), "v".repeat(256))].into();
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "fits", "namespace": "tenant-a"}, "spec": {"tags": fits},
    }))
    .unwrap();
    api.create(&PostParams::default(), &bucket).await.expect("tags within the S3 limits are accepted");
    tenancy.stop().await;
}

/// A ConfigMapSync's selector is bounded too: a requirement listing 300 values (at most 64) is refused,
/// naming the field.
#[tokio::test]
async fn a_tenant_sized_config_map_sync_selector_is_refused_by_the_schema() {
    let tenancy = Tenancy::start().await;
    let api = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    let values: Vec<String> = (0..300).map(|i| format!("{i:0>63}")).collect();
    let sync = json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "wide", "namespace": "tenant-a"},
        "spec": {"sourceNamespace": "tenant-a", "configMapName": "settings",
                 "destinationSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": values}]}},
    });
    let status = refused(&api, sync).await;
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(
            "spec.destinationSelector.matchExpressions[0].values: Too many: 300: must have at most 64 items"
        ),
        "{}",
        status.message
    );
    tenancy.stop().await;
}

/// The finalizer and status kopper writes from its cached copy of a ConfigMapSync, which
/// holds no annotations or labels, leave the tenant's annotations and labels on the server.
#[tokio::test]
async fn writes_from_the_cache_keep_a_config_map_syncs_annotations_and_labels() {
    let tenancy = Tenancy::start().await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "settings", json!({"a": "1"})).await;
    let note = "n".repeat(100_000);
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "noted", "namespace": "tenant-a",
                     "annotations": {"example.com/note": note}, "labels": {"team": "a"}},
        "spec": {"sourceNamespace": "tenant-a", "configMapName": "settings"},
    }))
    .unwrap();
    let api = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    api.create(&PostParams::default(), &sync).await.unwrap();
    tenancy.sync_status("noted", |status| status.get("observedGeneration").is_some()).await;
    let written = eventually("kopper's finalizer on the ConfigMapSync", || async {
        let sync = api.get("noted").await.unwrap();
        (!sync.finalizers().is_empty()).then_some(sync)
    })
    .await;
    assert_eq!(written.annotations().get("example.com/note"), Some(&note));
    assert_eq!(written.labels().get("team").map(String::as_str), Some("a"));
    tenancy.stop().await;
}

/// A ConfigMapSync's shaping lists are bounded: thousands of label prefixes (at most 32) are
/// refused, naming the field, and so is a label of kopper's own among those it adds (kubesim
/// has no CEL, so kopper refuses that one itself).
#[tokio::test]
async fn a_tenant_sized_or_mark_forging_config_map_sync_shape_is_refused() {
    let tenancy = Tenancy::start().await;
    let api = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    let prefixes: Vec<String> = (0..5_000).map(|i| format!("example.com/{i}")).collect();
    let sync = json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "wide", "namespace": "tenant-a"},
        "spec": {"sourceNamespace": "tenant-a", "configMapName": "settings", "destinationNamespace": "tenant-a",
                 "copyLabels": {"exclude": prefixes}},
    });
    let status = refused(&api, sync).await;
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("spec.copyLabels.exclude: Too many: 5000: must have at most 32 items"),
        "{}",
        status.message
    );

    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "tenant-a"}})).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "settings", json!({"a": "1"})).await;
    tenancy
        .alice_syncs(
            "forge",
            json!({"sourceNamespace": "tenant-a", "destinationNamespace": "tenant-c", "configMapName": "settings",
                   "copyLabels": {"add": {"kopper.dev/replicated-by": "r-0000"}}}),
        )
        .await;
    let status = tenancy.sync_status("forge", |s| ready_reason(s) == "InvalidShape").await;
    assert!(status.to_string().contains("kopper's own labels"), "{status}");
    assert!(tenancy.holders("settings").await == ["tenant-a"], "no copy is written");
    tenancy.stop().await;
}

/// A tenant deletes its ConfigMapSync with `deletionPolicy: Orphan`: its copy stays in the
/// namespace that accepted it. Another tenant's rule for the same place neither takes it
/// over (it copies another source) nor deletes or rewrites it: it reports the place taken,
/// without naming anyone, until the namespace's owner deletes the orphan.
#[tokio::test]
async fn a_tenant_s_orphaned_copy_is_neither_taken_over_nor_deleted_by_another_tenant_s_rule() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "tenant-a,tenant-b"}})).await;
    let spec = |from: &str| {
        json!({"sourceNamespace": from, "destinationNamespace": "tenant-c", "configMapName": "shared",
               "deletionPolicy": "Orphan"})
    };
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "shared", json!({"owner": "alice"})).await;
    tenancy.alice_syncs("share", spec("tenant-a")).await;
    let copies = tenancy.config_maps(&tenancy.admin, "tenant-c");
    let alices = eventually("alice's copy in tenant-c", || async {
        let copy = copies.get_opt("shared").await.unwrap()?;
        (copy.data.as_ref()?.get("owner")? == "alice").then_some(copy)
    })
    .await;
    let syncs = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    syncs.delete("share", &DeleteParams::default()).await.unwrap();
    eventually("alice's sync to be gone", || async {
        syncs.get_opt("share").await.unwrap().is_none().then_some(())
    })
    .await;
    let orphan = copies.get("shared").await.unwrap();
    assert_eq!(orphan.labels().get("kopper.dev/orphaned").map(String::as_str), Some("true"));

    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "shared", json!({"owner": "bob"})).await;
    tenant_syncs(&tenancy.bob, "tenant-b", "sync", spec("tenant-b")).await;
    let bobs = Api::<ConfigMapSync>::namespaced(tenancy.bob.clone(), "tenant-b");
    let status = eventually("bob's sync to report the place taken", || async {
        let status = serde_json::to_value(bobs.get("sync").await.unwrap().status?).unwrap();
        (ready_reason(&status) == "Conflict").then_some(status)
    })
    .await;
    assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied");
    assert!(!status.to_string().contains("tenant-a"), "alice is not named: {status}");
    let kept = copies.get("shared").await.unwrap();
    assert_eq!(
        (kept.metadata.uid, kept.metadata.resource_version, kept.data.unwrap()["owner"].clone()),
        (alices.metadata.uid, orphan.metadata.resource_version, "alice".to_owned()),
        "the orphan is not touched"
    );

    copies.delete("shared", &DeleteParams::default()).await.unwrap();
    eventually("bob's copy once the namespace's owner removed the orphan", || async {
        let copy = copies.get_opt("shared").await.unwrap()?;
        (copy.data.as_ref()?.get("owner")? == "bob").then_some(())
    })
    .await;
    tenancy.stop().await;
}

/// alice shares `trusted-ca` into tenant-b (and tenant-c) with `deletionPolicy: Orphan`, then
/// deletes her ConfigMapSync: the copies stay, as orphans, until it is gone.
async fn alice_s_orphans(tenancy: &Tenancy) {
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "tenant-a"}})).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "trusted-ca", json!({"ca": "alice's"}))
        .await;
    tenancy
        .alice_syncs(
            "share",
            json!({"sourceNamespace": "tenant-a", "destinationNamespaces": ["tenant-b", "tenant-c"],
                   "configMapName": "trusted-ca", "deletionPolicy": "Orphan"}),
        )
        .await;
    tenancy.sync_status("share", |s| s["syncedCount"] == 2).await;
    let syncs = Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a");
    syncs.delete("share", &Default::default()).await.unwrap();
    eventually("the ConfigMapSync gone", || async {
        syncs.get_opt("share").await.unwrap().is_none().then_some(())
    })
    .await;
    for namespace in ["tenant-b", "tenant-c"] {
        let copy = tenancy.config_maps(&tenancy.admin, namespace).get("trusted-ca").await.unwrap();
        assert_eq!(copy.labels().get("kopper.dev/orphaned").map(String::as_str), Some("true"), "{namespace}");
    }
}

/// An orphan ranks no higher than the rule that left it: a tenant cannot keep a copy the
/// admin's rule provides by deleting their ConfigMapSync with `deletionPolicy: Orphan` first.
#[tokio::test]
async fn an_admin_rule_replaces_what_a_tenant_s_deleted_sync_left_behind() {
    let tenancy = Tenancy::start().await;
    alice_s_orphans(&tenancy).await;
    namespace(&tenancy.admin, "platform", json!({})).await;
    let ca: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "trusted-ca", "labels": {"trust": "yes"}}, "data": {"ca": "the cluster's"}}),
    )
    .unwrap();
    tenancy.config_maps(&tenancy.admin, "platform").create(&PostParams::default(), &ca).await.unwrap();
    admin_rule(
        &tenancy.admin,
        "trusted-ca",
        json!({"kind": "ConfigMap", "namespaces": ["platform"], "selector": {"matchLabels": {"trust": "yes"}},
               "includeNamespaces": ["tenant-b"]}),
    )
    .await;

    let copies = tenancy.config_maps(&tenancy.bob, "tenant-b");
    eventually("the admin's copy in place of alice's orphan", || async {
        let copy = copies.get("trusted-ca").await.unwrap();
        (copy.data?["ca"] == "the cluster's").then_some(())
    })
    .await;
    let status = rule_status(&tenancy.admin, "trusted-ca", |s| s["copiesInSync"] == 1).await;
    assert_eq!(status["conflictCount"], 0, "{status}");
    let copy = copies.get("trusted-ca").await.unwrap();
    assert!(!copy.labels().contains_key("kopper.dev/orphaned"));
    tenancy.stop().await;
}

/// An orphan a ConfigMapSync left is kopper's copy made under the destination's consent:
/// withdrawing it removes the orphan too, as soon as the namespace change is served (no
/// restart, no wait for the minute's sweep), while an orphan where consent stands is left
/// alone.
#[tokio::test]
async fn withdrawing_consent_removes_what_a_deleted_sync_left_behind() {
    let tenancy = Tenancy::start().await;
    alice_s_orphans(&tenancy).await;

    tenancy.consent("tenant-b", None).await;

    eventually("alice's orphan gone from tenant-b", || async {
        (tenancy.holders("trusted-ca").await == ["tenant-a", "tenant-c"]).then_some(())
    })
    .await;
    let kept = tenancy.config_maps(&tenancy.admin, "tenant-c").get("trusted-ca").await.unwrap();
    assert_eq!(kept.data.unwrap()["ca"], "alice's", "consent stands in tenant-c: its orphan stays");
    tenancy.stop().await;
}

/// A tenant (`client`) creates a SecretSync in its namespace.
async fn tenant_shares_secret(client: &Client, namespace_name: &str, name: &str, spec: Value) {
    let sync: SecretSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "SecretSync",
        "metadata": {"name": name, "namespace": namespace_name}, "spec": spec,
    }))
    .unwrap();
    Api::<SecretSync>::namespaced(client.clone(), namespace_name)
        .create(&PostParams::default(), &sync)
        .await
        .expect("a tenant may create SecretSyncs in its namespace");
}

/// The status of the SecretSync `namespace_name/name`, read as `client`, once `ready` holds.
async fn secret_sync_status(
    client: &Client,
    namespace_name: &str,
    name: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let api = Api::<SecretSync>::namespaced(client.clone(), namespace_name);
    eventually(&format!("status of SecretSync {namespace_name}/{name}"), || async {
        let status = serde_json::to_value(api.get(name).await.unwrap().status?).unwrap();
        ready(&status).then_some(status)
    })
    .await
}

/// `client` creates a Secret in `namespace_name`.
async fn secret(client: &Client, namespace_name: &str, object: Value) {
    let secret: Secret = serde_json::from_value(object).unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace_name)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// The namespaces holding a Secret named `name`.
async fn secret_holders(admin: &Client, name: &str) -> Vec<String> {
    let all: Api<Secret> = Api::all(admin.clone());
    let list = all.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await.unwrap();
    let mut namespaces: Vec<String> = list.items.iter().filter_map(|secret| secret.namespace()).collect();
    namespaces.sort();
    namespaces
}

/// A tenant's SecretSync writes nothing into namespaces that did not consent, protected or
/// not, named or selected, existing or not; its status names only the namespaces it named,
/// the same whether a Secret of that name is there or not, so it cannot probe bob's.
#[tokio::test]
async fn a_tenant_cannot_share_a_secret_into_a_namespace_that_did_not_consent() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "selected", json!({"labels": {"team": "x"}})).await;
    secret(
        &tenancy.bob,
        "tenant-b",
        json!({"metadata": {"name": "api-key"}, "stringData": {"key": "bob's"}}),
    )
    .await;
    secret(
        &tenancy.alice,
        "tenant-a",
        json!({"metadata": {"name": "api-key"}, "stringData": {"key": "alice's"}}),
    )
    .await;
    secret(
        &tenancy.alice,
        "tenant-a",
        json!({"metadata": {"name": "other-key"}, "stringData": {"key": "alice's"}}),
    )
    .await;
    let push = |secret_name: &str| {
        json!({
            "sourceNamespace": "tenant-a",
            "secretName": secret_name,
            "destinationNamespaces": ["tenant-b", "ghost", "kube-system", KOPPER_NAMESPACE],
            "destinationSelector": {},
        })
    };
    tenant_shares_secret(&tenancy.alice, "tenant-a", "push", push("api-key")).await;
    tenant_shares_secret(&tenancy.alice, "tenant-a", "probe", push("other-key")).await;
    let refused = |s: &Value| ready_reason(s) == "DestinationRefused";
    let status = secret_sync_status(&tenancy.alice, "tenant-a", "push", refused).await;
    assert_eq!(status["refusedDestinations"], json!(["ghost", "kopper-system", "kube-system", "tenant-b"]));
    assert_eq!((&status["syncedCount"], &status["conflicts"]), (&json!(0), &json!([])));
    let text = status.to_string();
    assert!(!text.contains("selected") && !text.contains("bob"), "nothing of others' namespaces: {text}");
    let probe = secret_sync_status(&tenancy.alice, "tenant-a", "probe", refused).await;
    assert_eq!(
        (&probe["refusedDestinations"], &probe["conflicts"], &probe["conditions"][0]["message"]),
        (&status["refusedDestinations"], &status["conflicts"], &status["conditions"][0]["message"]),
        "whether bob holds a Secret of the name changes nothing alice sees"
    );
    assert_eq!(secret_holders(&tenancy.admin, "api-key").await, ["tenant-a", "tenant-b"]);
    assert_eq!(secret_holders(&tenancy.admin, "other-key").await, ["tenant-a"], "no copy anywhere");
    let bobs = Api::<Secret>::namespaced(tenancy.bob.clone(), "tenant-b").get("api-key").await.unwrap();
    assert_eq!(bobs.data.unwrap()["key"].0, b"bob's", "bob's Secret is left as it is");
    tenancy.stop().await;
}

/// Credentials of the cluster are never shared by a tenant, even into a namespace that
/// accepts everything from them: a ServiceAccount token (told by its annotation) and a Helm
/// release record (told only by its type) are refused by name, and nothing is written.
#[tokio::test]
async fn a_tenant_cannot_share_a_service_account_token_or_a_helm_release() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    for object in [
        json!({"metadata": {"name": "builder-token", "annotations": {"kubernetes.io/service-account.name": "default"}},
               "type": "kubernetes.io/service-account-token", "stringData": {"token": "t"}}),
        json!({"metadata": {"name": "release"}, "type": "helm.sh/release.v1", "stringData": {"release": "r"}}),
        json!({"metadata": {"name": "registry"}, "type": "kubernetes.io/dockerconfigjson",
               "stringData": {".dockerconfigjson": "{\"auths\": {}}"}}),
    ] {
        secret(&tenancy.alice, "tenant-a", object).await;
    }
    for (sync, secret_name) in [("token", "builder-token"), ("helm", "release"), ("registry", "registry")] {
        let spec = json!({"sourceNamespace": "tenant-a", "secretName": secret_name, "destinationNamespace": "tenant-b"});
        tenant_shares_secret(&tenancy.alice, "tenant-a", sync, spec).await;
    }
    for (sync, secret_type) in
        [("token", "kubernetes.io/service-account-token"), ("helm", "helm.sh/release.v1")]
    {
        let status = secret_sync_status(&tenancy.alice, "tenant-a", sync, |s| {
            ready_reason(s) == "CredentialTypeRefused"
        })
        .await;
        let message = status["conditions"][0]["message"].as_str().unwrap();
        assert!(message.contains(secret_type), "{message}");
        assert_eq!(status["conditions"][0]["status"], "False");
    }
    // A registry credential is the common share, and allowed.
    secret_sync_status(&tenancy.alice, "tenant-a", "registry", |s| ready_reason(s) == "Synced").await;
    assert_eq!(secret_holders(&tenancy.admin, "registry").await, ["tenant-a", "tenant-b"]);
    assert_eq!(secret_holders(&tenancy.admin, "builder-token").await, ["tenant-a"], "nothing written");
    assert_eq!(secret_holders(&tenancy.admin, "release").await, ["tenant-a"], "nothing written");
    tenancy.stop().await;
}

/// What alice shared with bob alone, bob cannot pass on: a copy kopper made is no source,
/// and bob's SecretSync of it says so; alice's share is unaffected.
#[tokio::test]
async fn a_tenant_cannot_re_share_a_secret_shared_with_it() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "*"}})).await;
    secret(
        &tenancy.alice,
        "tenant-a",
        json!({"metadata": {"name": "api-key"}, "stringData": {"key": "alice's"}}),
    )
    .await;
    let spec =
        json!({"sourceNamespace": "tenant-a", "secretName": "api-key", "destinationNamespace": "tenant-b"});
    tenant_shares_secret(&tenancy.alice, "tenant-a", "to-bob", spec).await;
    secret_sync_status(&tenancy.alice, "tenant-a", "to-bob", |s| ready_reason(s) == "Synced").await;

    let spec =
        json!({"sourceNamespace": "tenant-b", "secretName": "api-key", "destinationNamespace": "tenant-c"});
    tenant_shares_secret(&tenancy.bob, "tenant-b", "onwards", spec).await;
    let status =
        secret_sync_status(&tenancy.bob, "tenant-b", "onwards", |s| ready_reason(s) == "SourceMadeByKopper")
            .await;
    assert!(status["conditions"][0]["message"].as_str().unwrap().contains("tenant-b/api-key"), "{status}");
    assert_eq!(
        secret_holders(&tenancy.admin, "api-key").await,
        ["tenant-a", "tenant-b"],
        "nothing in tenant-c"
    );
    secret_sync_status(&tenancy.alice, "tenant-a", "to-bob", |s| ready_reason(s) == "Synced").await;
    tenancy.stop().await;
}

/// alice's ConfigMapSync `name` is given a label kopper cannot write, and is refused for it
/// (`InvalidShape`): its copies are kept as they are meanwhile.
async fn alice_breaks_her_shape(tenancy: &Tenancy, name: &str) {
    let patch = json!({"spec": {"copyLabels": {"add": {"not a key": "x"}}}});
    Api::<ConfigMapSync>::namespaced(tenancy.alice.clone(), "tenant-a")
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    tenancy.sync_status(name, |s| ready_reason(s) == "InvalidShape").await;
}

/// A ConfigMapSync refused for its shape keeps its copies, but consent is what lets a tenant
/// write into another's namespace: once tenant-b withdraws it, alice's copy there goes, as it
/// would from a rule in force, while the copy where consent stands stays.
#[tokio::test]
async fn an_invalid_shape_keeps_no_copy_where_consent_is_withdrawn() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "tenant-a"}})).await;
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "cfg", json!({"a": "1"})).await;
    tenancy
        .alice_syncs(
            "share",
            json!({"sourceNamespace": "tenant-a", "destinationNamespaces": ["tenant-b", "tenant-c"],
                   "configMapName": "cfg"}),
        )
        .await;
    tenancy.sync_status("share", |s| s["syncedCount"] == 2).await;
    alice_breaks_her_shape(&tenancy, "share").await;
    assert_eq!(
        tenancy.holders("cfg").await,
        ["tenant-a", "tenant-b", "tenant-c"],
        "a bad shape keeps the copies"
    );

    tenancy.consent("tenant-b", None).await;

    eventually("alice's copy gone from tenant-b", || async {
        (tenancy.holders("cfg").await == ["tenant-a", "tenant-c"]).then_some(())
    })
    .await;
    let kept = tenancy.config_maps(&tenancy.admin, "tenant-c").get("cfg").await.unwrap();
    assert_eq!(kept.data.unwrap()["a"], "1", "consent stands in tenant-c: its copy stays");
    tenancy.stop().await;
}

/// alice's copy holds a place bob's ConfigMapSync waits for. Her rule refused for its shape
/// keeps the copy as it is, and keeps the place too: bob's rule, run again, still reports it
/// taken and leaves her copy untouched, as it would were her rule in force.
#[tokio::test]
async fn a_copy_kept_by_an_invalid_shape_is_not_taken_by_another_tenant_s_rule() {
    let tenancy = Tenancy::start().await;
    namespace(&tenancy.admin, "tenant-c", json!({"annotations": {CONSENT: "tenant-a,tenant-b"}})).await;
    let spec = |from: &str| json!({"sourceNamespace": from, "destinationNamespace": "tenant-c", "configMapName": "shared"});
    config_map(&tenancy.config_maps(&tenancy.alice, "tenant-a"), "shared", json!({"owner": "alice"})).await;
    tenancy.alice_syncs("share", spec("tenant-a")).await;
    let copies = tenancy.config_maps(&tenancy.admin, "tenant-c");
    let alices = eventually("alice's copy in tenant-c", || async {
        let copy = copies.get_opt("shared").await.unwrap()?;
        (copy.data.as_ref()?.get("owner")? == "alice").then_some(copy)
    })
    .await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "shared", json!({"owner": "bob"})).await;
    tenant_syncs(&tenancy.bob, "tenant-b", "sync", spec("tenant-b")).await;
    let bobs = Api::<ConfigMapSync>::namespaced(tenancy.bob.clone(), "tenant-b");
    // bob's status once his rule has run at `generation` (and reported `reason`, if given).
    let bob_s_status = |generation: i64, reason: Option<&'static str>| {
        let bobs = bobs.clone();
        move || {
            let bobs = bobs.clone();
            async move {
                let status = serde_json::to_value(bobs.get("sync").await.unwrap().status?).unwrap();
                let ran = status["conditions"][0]["observedGeneration"] == generation;
                (ran && reason.is_none_or(|reason| ready_reason(&status) == reason)).then_some(status)
            }
        }
    };
    eventually("bob's sync to report the place taken", bob_s_status(1, Some("Conflict"))).await;

    alice_breaks_her_shape(&tenancy, "share").await;
    // bob's rule runs again (its spec changed), with alice's rule refused.
    let patch = json!({"spec": {"copyLabels": {"add": {"team": "bob"}}}});
    let changed = bobs.patch("sync", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let generation = changed.metadata.generation.unwrap();
    let status = eventually("bob's sync to run again", bob_s_status(generation, None)).await;

    assert_eq!(ready_reason(&status), "Conflict", "{status}");
    assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied", "{status}");
    let kept = copies.get("shared").await.unwrap();
    assert_eq!(
        (kept.metadata.uid, kept.metadata.resource_version, kept.data.unwrap()["owner"].clone()),
        (alices.metadata.uid, alices.metadata.resource_version, "alice".to_owned()),
        "alice's copy is not touched"
    );
    tenancy.stop().await;
}

/// A tenant's Bucket reaches only a ServiceAccount of its own namespace: a name that carries
/// another namespace is refused by the schema, naming the field, and a name that exists only
/// in bob's namespace is looked for in alice's own (ServiceAccountNotFound): bob's
/// ServiceAccount is never annotated, and the role alice gets trusts only her namespace's.
#[tokio::test]
async fn a_tenant_cannot_have_another_namespace_s_service_account_given_its_role() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let mut tenancy = Tenancy::start().await;
    crate::common::moto::create_credentials_secret(&tenancy.admin).await;
    tenancy.operator.take().unwrap().stop().await.unwrap();
    let oidc = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/TENANCY";
    let mut args =
        vec!["--controllers", "bucket", "--namespace", KOPPER_NAMESPACE, "--oidc-provider-arn", oidc];
    let s3_flags = crate::common::moto::flags(&moto.endpoint, "tenancy");
    args.extend(s3_flags.iter().map(String::as_str));
    tenancy.operator = Some(Operator::start(run_args(&tenancy.kubeconfig, &args)));
    let bobs: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "deployer", "namespace": "tenant-b"}})).unwrap();
    let bob_accounts = Api::<ServiceAccount>::namespaced(tenancy.admin.clone(), "tenant-b");
    bob_accounts.create(&PostParams::default(), &bobs).await.unwrap();

    let api = Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a");
    let bucket = |name: &str, account: &str| {
        json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "tenant-a"},
            "spec": {"access": {"mode": "ServiceAccount", "serviceAccountName": account}},
        })
    };
    for named in ["tenant-b/deployer", "system:serviceaccount:tenant-b:deployer"] {
        let status = refused(&api, bucket("elsewhere", named)).await;
        assert_eq!(status.code, 422, "{named}: {status:?}");
        assert!(status.message.contains("spec.access.serviceAccountName"), "{named}: {}", status.message);
    }

    api.create(&PostParams::default(), &serde_json::from_value(bucket("steal", "deployer")).unwrap())
        .await
        .unwrap();
    let reason = eventually("alice's Bucket to report the ServiceAccount missing in tenant-a", || async {
        let bucket = api.get("steal").await.unwrap();
        let ready = bucket.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "ServiceAccountNotFound").then_some(ready.message)
    })
    .await;
    assert!(reason.contains("namespace tenant-a"), "{reason}");
    let untouched = bob_accounts.get("deployer").await.unwrap();
    assert!(untouched.annotations().is_empty(), "bob's ServiceAccount was annotated: {untouched:?}");

    // Her own ServiceAccount of that name gets the role; bob's still nothing.
    let hers: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "deployer", "namespace": "tenant-a"}})).unwrap();
    let her_accounts = Api::<ServiceAccount>::namespaced(tenancy.admin.clone(), "tenant-a");
    her_accounts.create(&PostParams::default(), &hers).await.unwrap();
    eventually("alice's ServiceAccount annotated with her role", || async {
        let account = her_accounts.get("deployer").await.unwrap();
        account.annotations().get("eks.amazonaws.com/role-arn").map(drop)
    })
    .await;
    assert!(bob_accounts.get("deployer").await.unwrap().annotations().is_empty());
    let s3 = moto.client().await;
    let roles =
        kopper::controllers::bucket::provider::Provider::roles(&s3, "/kopper/tenancy/").await.unwrap();
    assert_eq!(roles.len(), 1, "{roles:?}");
    let role = kopper::controllers::bucket::provider::Provider::role(&s3, &roles[0]).await.unwrap().unwrap();
    assert!(role.trust.to_string().contains("system:serviceaccount:tenant-a:deployer"), "{}", role.trust);
    tenancy.stop().await;
}

/// Creates namespace `name` unless it is there (kopper's own may be).
async fn ensure_namespace(admin: &Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("namespace {name}: {error}"),
    }
}

/// Even with --allow-cross-namespace-sources, a SecretSync reads only its own namespace's
/// Secrets (not bob's, not kopper's credentials), and no tenant's rule reads a protected
/// namespace (kube-system); a ConfigMapSync still reads bob's ConfigMap under the flag.
#[tokio::test]
async fn with_the_flag_a_secret_sync_reads_only_its_own_namespace_and_no_sync_a_protected_one() {
    let tenancy = Tenancy::start_with(&["--allow-cross-namespace-sources"]).await;
    namespace(&tenancy.admin, "shared", json!({"annotations": {CONSENT: "tenant-a"}})).await;
    ensure_namespace(&tenancy.admin, KOPPER_NAMESPACE).await;
    secret(&tenancy.bob, "tenant-b", json!({"metadata": {"name": "bobs-key"}, "stringData": {"k": "bob's"}}))
        .await;
    let aws = json!({"metadata": {"name": "aws-credentials"}, "stringData": {"AWS_SECRET_ACCESS_KEY": "s"}});
    secret(&tenancy.admin, KOPPER_NAMESPACE, aws).await;
    config_map(&tenancy.config_maps(&tenancy.admin, "kube-system"), "cluster-ca", json!({"ca": "c"})).await;
    config_map(&tenancy.config_maps(&tenancy.bob, "tenant-b"), "public", json!({"v": "1"})).await;
    let share = |source: &str, name: &str| json!({"sourceNamespace": source, "secretName": name, "destinationNamespace": "shared"});
    tenant_shares_secret(&tenancy.alice, "tenant-a", "bobs", share("tenant-b", "bobs-key")).await;
    tenant_shares_secret(&tenancy.alice, "tenant-a", "kopper", share(KOPPER_NAMESPACE, "aws-credentials"))
        .await;
    let sync = |source: &str, name: &str| json!({"sourceNamespace": source, "configMapName": name, "destinationNamespace": "shared"});
    tenancy.alice_syncs("cluster-ca", sync("kube-system", "cluster-ca")).await;
    tenancy.alice_syncs("public", sync("tenant-b", "public")).await;
    tenancy.sync_status("public", |s| ready_reason(s) == "Synced").await;
    assert_eq!(tenancy.holders("public").await, ["shared", "tenant-b"], "the flag is on");
    for (name, source) in [("bobs", "tenant-b"), ("kopper", KOPPER_NAMESPACE)] {
        let denied = |s: &Value| ready_reason(s) == "CrossNamespaceSourceDenied";
        let status = secret_sync_status(&tenancy.alice, "tenant-a", name, denied).await;
        let message = status["conditions"][0]["message"].as_str().unwrap();
        assert!(message.contains("never reads another namespace's Secrets"), "{message}");
        assert!(
            message.contains(&format!("the owner of {source:?} can create the SecretSync there")),
            "{message}"
        );
    }
    let status = tenancy.sync_status("cluster-ca", |s| ready_reason(s) == "CrossNamespaceSourceDenied").await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("protected namespace"), "{message}");
    assert_eq!(secret_holders(&tenancy.admin, "bobs-key").await, ["tenant-b"], "nothing copied");
    assert_eq!(secret_holders(&tenancy.admin, "aws-credentials").await, [KOPPER_NAMESPACE], "nothing copied");
    assert_eq!(tenancy.holders("cluster-ca").await, ["kube-system"], "nothing copied");
    tenancy.stop().await;
}

/// Helm takes any Secret or ConfigMap labelled owner=helm for a release record, and Argo CD
/// a Secret labelled argocd.argoproj.io/secret-type for its credentials: alice shares no such
/// object, cannot label her copies so, and her copies lose those labels even when she keeps
/// Argo CD's marks.
#[tokio::test]
async fn a_tenant_cannot_plant_a_helm_release_or_an_argo_cd_credential_in_a_consenting_namespace() {
    let tenancy = Tenancy::start().await;
    tenancy.consent("tenant-b", Some("tenant-a")).await;
    let release_labels = json!({"owner": "helm", "name": "web", "status": "deployed", "version": "1"});
    let fake = json!({"metadata": {"name": "fake-release", "labels": release_labels}, "stringData": {"release": "r"}});
    secret(&tenancy.alice, "tenant-a", fake).await;
    secret(&tenancy.alice, "tenant-a", json!({"metadata": {"name": "plain"}, "stringData": {"k": "v"}}))
        .await;
    let repo_labels = json!({"argocd.argoproj.io/secret-type": "repository", "argocd.argoproj.io/x": "y"});
    let repo = json!({"metadata": {"name": "repo", "labels": repo_labels}, "stringData": {"url": "u"}});
    secret(&tenancy.alice, "tenant-a", repo).await;
    let helm_config_map: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "cm-release", "labels": release_labels}, "data": {"release": "r"}}),
    )
    .unwrap();
    let alices_config_maps = tenancy.config_maps(&tenancy.alice, "tenant-a");
    alices_config_maps.create(&PostParams::default(), &helm_config_map).await.unwrap();
    let share = |name: &str, shaping: Value| {
        let mut spec =
            json!({"sourceNamespace": "tenant-a", "secretName": name, "destinationNamespace": "tenant-b"});
        spec.as_object_mut().unwrap().extend(shaping.as_object().unwrap().clone());
        spec
    };
    tenant_shares_secret(&tenancy.alice, "tenant-a", "release", share("fake-release", json!({}))).await;
    let add_owner = share("plain", json!({"copyLabels": {"add": {"owner": "helm"}}}));
    tenant_shares_secret(&tenancy.alice, "tenant-a", "owner", add_owner).await;
    tenant_shares_secret(
        &tenancy.alice,
        "tenant-a",
        "repo",
        share("repo", json!({"keepToolMarks": ["ArgoCD"]})),
    )
    .await;
    let config_map_spec = json!({"sourceNamespace": "tenant-a", "configMapName": "cm-release", "destinationNamespace": "tenant-b"});
    tenancy.alice_syncs("cm-release", config_map_spec).await;

    secret_sync_status(&tenancy.alice, "tenant-a", "repo", |s| ready_reason(s) == "Synced").await;
    let copy = Api::<Secret>::namespaced(tenancy.admin.clone(), "tenant-b").get("repo").await.unwrap();
    let labels = copy.labels();
    assert!(!labels.contains_key("argocd.argoproj.io/secret-type"), "{labels:?}");
    assert_eq!(labels.get("argocd.argoproj.io/x").map(String::as_str), Some("y"), "Argo CD's marks as kept");
    let refused = |s: &Value| ready_reason(s) == "CredentialTypeRefused";
    let status = secret_sync_status(&tenancy.alice, "tenant-a", "release", refused).await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("labelled owner=helm"), "{message}");
    let invalid = |s: &Value| ready_reason(s) == "InvalidShape";
    let status = secret_sync_status(&tenancy.alice, "tenant-a", "owner", invalid).await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.starts_with("spec.copyLabels.add: owner: helm "), "{message}");
    let status = tenancy.sync_status("cm-release", |s| ready_reason(s) == "HelmReleaseRefused").await;
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(secret_holders(&tenancy.admin, "fake-release").await, ["tenant-a"], "nothing written");
    assert_eq!(secret_holders(&tenancy.admin, "plain").await, ["tenant-a"], "nothing written");
    assert_eq!(tenancy.holders("cm-release").await, ["tenant-a"], "nothing written");
    tenancy.stop().await;
}

/// kopper given NetworkPolicies as the chart's `replication.extraKinds` would: the flag, and
/// the rights on them, bound to its ServiceAccount; alice may write NetworkPolicies in
/// tenant-a.
async fn network_policies_allowed() -> Tenancy {
    let tenancy = Tenancy::start_with(&["--replicate-kinds", "networking.k8s.io/v1/NetworkPolicy"]).await;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "kopper-extra-kinds"},
        "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                   "verbs": ["get", "list", "watch", "create", "update", "delete"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(tenancy.admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kopper-extra-kinds"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopper-extra-kinds"},
        "subjects": [{"kind": "ServiceAccount", "name": "kopper", "namespace": KOPPER_NAMESPACE}],
    }))
    .unwrap();
    Api::all(tenancy.admin.clone()).create(&PostParams::default(), &binding).await.unwrap();
    let tenant_policies: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "tenant-network-policies"},
        "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["*"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(tenancy.admin.clone())
        .create(&PostParams::default(), &tenant_policies)
        .await
        .unwrap();
    let alice_policies: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-network-policies", "namespace": "tenant-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tenant-network-policies"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(tenancy.admin.clone(), "tenant-a")
        .create(&PostParams::default(), &alice_policies)
        .await
        .unwrap();
    tenancy
}

/// The NetworkPolicies named `name` outside tenant-a.
async fn network_policies_elsewhere(admin: &Client, name: &str) -> Vec<String> {
    let all: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = Api::all(admin.clone());
    let list = all.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await.unwrap();
    list.items.iter().filter_map(|policy| policy.namespace()).filter(|ns| ns != "tenant-a").collect()
}

/// An admin's rule copying NetworkPolicies from a namespace a tenant writes to is refused
/// (SourceNotProtected): alice, editing the source there to allow everything, opens no other
/// namespace's network.
#[tokio::test]
async fn a_tenant_editing_the_source_of_a_network_policy_rule_gets_nothing_copied() {
    let tenancy = network_policies_allowed().await;
    namespace(&tenancy.admin, "team-x", json!({})).await;
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(tenancy.alice.clone(), "tenant-a");
    let allow_all = |labels: Value| {
        serde_json::from_value::<k8s_openapi::api::networking::v1::NetworkPolicy>(json!({
            "metadata": {"name": "baseline", "namespace": "tenant-a", "labels": labels},
            "spec": {"podSelector": {}, "ingress": [{}], "egress": [{}]},
        }))
        .unwrap()
    };
    policies.create(&PostParams::default(), &allow_all(json!({"replicate": "yes"}))).await.unwrap();
    admin_rule(
        &tenancy.admin,
        "baseline-policy",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "namespaces": ["tenant-a"],
               "selector": {"matchLabels": {"replicate": "yes"}}}),
    )
    .await;
    let status =
        rule_status(&tenancy.admin, "baseline-policy", |s| ready_reason(s) == "SourceNotProtected").await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("\"tenant-a\"") && message.contains("spec.allowUnprotectedSources"),
        "{message}"
    );
    // alice edits her source again: still refused, still nothing copied.
    let edit = json!({"metadata": {"labels": {"replicate": "yes", "edited": "1"}}});
    policies.patch("baseline", &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(network_policies_elsewhere(&tenancy.admin, "baseline").await.is_empty());
    rule_status(&tenancy.admin, "baseline-policy", |s| ready_reason(s) == "SourceNotProtected").await;
    tenancy.stop().await;
}

/// A tenant's ConfigMapSync and SecretSync copy ConfigMaps and Secrets only: naming another
/// kind in their spec is dropped by the schema (no such field), so kopper copies no
/// NetworkPolicy through them, into a namespace that consents to everything.
#[tokio::test]
async fn a_tenant_cannot_make_kopper_copy_another_kind_through_its_syncs() {
    let tenancy = network_policies_allowed().await;
    namespace(&tenancy.admin, "team-x", json!({"annotations": {CONSENT: "*"}})).await;
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(tenancy.alice.clone(), "tenant-a");
    let policy = serde_json::from_value(json!({
        "metadata": {"name": "open", "namespace": "tenant-a"},
        "spec": {"podSelector": {}, "ingress": [{}]},
    }))
    .unwrap();
    policies.create(&PostParams::default(), &policy).await.unwrap();
    // Sent as raw JSON, so the fields reach the API server.
    let sneaky = |resource: kube::core::ApiResource, source_field: &str| {
        let api =
            Api::<kube::core::DynamicObject>::namespaced_with(tenancy.alice.clone(), "tenant-a", &resource);
        let object: kube::core::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": resource.kind,
            "metadata": {"name": "open", "namespace": "tenant-a"},
            "spec": {"sourceNamespace": "tenant-a", source_field: "open", "destinationNamespace": "team-x",
                     "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"},
        }))
        .unwrap();
        async move { api.create(&PostParams::default(), &object).await.unwrap() }
    };
    let stored = sneaky(kube::core::ApiResource::erase::<ConfigMapSync>(&()), "configMapName").await;
    assert!(stored.data["spec"].get("kind").is_none(), "pruned: {:?}", stored.data);
    let stored = sneaky(kube::core::ApiResource::erase::<SecretSync>(&()), "secretName").await;
    assert!(stored.data["spec"].get("apiVersion").is_none(), "pruned: {:?}", stored.data);
    tenancy.sync_status("open", |s| ready_reason(s) == "SourceNotFound").await;
    assert!(network_policies_elsewhere(&tenancy.admin, "open").await.is_empty());
    tenancy.stop().await;
}

/// kopper with the Bucket controller on moto, as config/rbac/ allows it, for the Bucket tests.
fn start_bucket_kopper(tenancy: &mut Tenancy, moto: &crate::common::moto::Moto, cluster_id: &str) {
    let mut args = vec!["--controllers", "bucket", "--namespace", KOPPER_NAMESPACE];
    let s3_flags = crate::common::moto::flags(&moto.endpoint, cluster_id);
    args.extend(s3_flags.iter().map(String::as_str));
    tenancy.operator = Some(Operator::start(run_args(&tenancy.kubeconfig, &args)));
}

/// The BucketClass `name` with `spec`, as a cluster admin creates it.
async fn admin_class(admin: &Client, name: &str, spec: Value) {
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    Api::<BucketClass>::all(admin.clone()).create(&PostParams::default(), &class).await.unwrap();
}

/// The reason and message of the Ready condition of alice's Bucket `name` once it is `reason`.
async fn alice_bucket_refused(tenancy: &Tenancy, name: &str, reason: &str) -> (Bucket, String) {
    let api = Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a");
    eventually(&format!("alice's Bucket {name} to report {reason}"), || async {
        let bucket = api.get(name).await.unwrap();
        let ready = bucket.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        (ready.reason == reason).then_some((bucket, ready.message))
    })
    .await
}

/// A tenant's Bucket asking for what its class forbids (an access mode, versioning off, a tag
/// the class sets) gets nothing: no bucket, no user, no Secret; the reason names the field and
/// the class. A Bucket the class allows, next to them, gets its bucket.
#[tokio::test]
async fn a_tenant_s_bucket_gets_nothing_its_class_forbids() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let mut tenancy = Tenancy::start().await;
    crate::common::moto::create_credentials_secret(&tenancy.admin).await;
    tenancy.operator.take().unwrap().stop().await.unwrap();
    start_bucket_kopper(&mut tenancy, &moto, "tenancy");
    let spec =
        json!({"allowedAccessModes": ["Key"], "versioning": "Enabled", "tags": {"cost-centre": "platform"}});
    admin_class(&tenancy.admin, "restricted", spec).await;

    let api = Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a");
    let asks = [
        (
            "keyless",
            json!({"access": {"mode": "ServiceAccount", "serviceAccountName": "app"}}),
            "spec.access.mode",
        ),
        ("unversioned", json!({"versioning": false}), "spec.versioning"),
        ("free-ride", json!({"tags": {"cost-centre": "someone-else"}}), "spec.tags"),
        ("allowed", json!({"versioning": true}), ""),
    ];
    for (name, spec, _) in &asks {
        let mut spec = spec.clone();
        spec["className"] = json!("restricted");
        let bucket: Bucket = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "tenant-a"}, "spec": spec,
        }))
        .unwrap();
        api.create(&PostParams::default(), &bucket).await.unwrap();
    }
    for (name, _, field) in asks.iter().filter(|(_, _, field)| !field.is_empty()) {
        let (bucket, message) = alice_bucket_refused(&tenancy, name, "ForbiddenByClass").await;
        assert!(
            message.starts_with(field) && message.contains("BucketClass restricted"),
            "{name}: {message}"
        );
        let status = bucket.status.unwrap();
        assert!(
            status.bucket_name.is_none() && status.user_name.is_none(),
            "{name} got something: {status:?}"
        );
        let secrets = Api::<Secret>::namespaced(tenancy.admin.clone(), "tenant-a");
        assert!(secrets.get_opt(&format!("{name}-s3")).await.unwrap().is_none(), "{name} got a Secret");
    }
    let (allowed, _) = alice_bucket_refused(&tenancy, "allowed", "Ready").await;
    let status = allowed.status.unwrap();
    let s3 = moto.client().await;
    let bucket = status.bucket_name.unwrap();
    let kopper::controllers::bucket::provider::BucketLookup::Ours { tags } =
        kopper::controllers::bucket::provider::Provider::lookup_bucket(&s3, &bucket).await.unwrap()
    else {
        panic!("no bucket {bucket}")
    };
    assert_eq!(tags["cost-centre"], "platform", "the class's tag, not the tenant's");
    tenancy.stop().await;
}

/// Classes are the admin's: a tenant can neither create one nor point one at a Secret of
/// theirs. A class names a Secret in kopper's own namespace only, so a class naming a Secret
/// that exists only in a tenant's namespace is not Ready, and its Buckets get nothing.
#[tokio::test]
async fn a_tenant_cannot_create_a_class_nor_have_one_read_their_secret() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let mut tenancy = Tenancy::start().await;
    crate::common::moto::create_credentials_secret(&tenancy.admin).await;
    tenancy.operator.take().unwrap().stop().await.unwrap();
    start_bucket_kopper(&mut tenancy, &moto, "tenancy");
    let class = json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": "alices"},
        "spec": {"backend": {"region": "us-east-1", "endpoint": moto.endpoint, "credentialsSecret": "alices-keys"}},
    });
    let status = refused(&Api::<BucketClass>::all(tenancy.alice.clone()), class.clone()).await;
    assert_eq!(status.code, 403, "{status:?}");

    let keys = json!({"metadata": {"name": "alices-keys"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}});
    secret(&tenancy.alice, "tenant-a", keys).await;
    // Even an admin's class cannot reach a tenant's Secret: the name is looked for in kopper's namespace.
    admin_class(&tenancy.admin, "alices", class["spec"].clone()).await;
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "data", "namespace": "tenant-a"}, "spec": {"className": "alices"},
    }))
    .unwrap();
    Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a")
        .create(&PostParams::default(), &bucket)
        .await
        .unwrap();
    let (bucket, message) = alice_bucket_refused(&tenancy, "data", "ClassNotReady").await;
    // The tenant learns which class and who must act; the Secret and kopper's namespace are
    // the admin's, in the class's status.
    assert!(message.contains("BucketClass alices") && message.contains("cluster admin"), "{message}");
    assert!(!message.contains(KOPPER_NAMESPACE) && !message.contains("alices-keys"), "{message}");
    assert!(bucket.status.unwrap().bucket_name.is_none());
    let classes = Api::<BucketClass>::all(tenancy.admin.clone());
    let (reason, detail) = eventually("the class to report its credentials unusable", || async {
        let class = classes.get("alices").await.unwrap();
        let ready = class.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "False").then_some((ready.reason, ready.message))
    })
    .await;
    assert_eq!(reason, "CredentialsNotUsable");
    assert!(detail.contains(&format!("namespace {KOPPER_NAMESPACE}")), "{detail}");
    tenancy.stop().await;
}

/// Alice's Bucket `name` in tenant-a, shared as `shared_with` says, once it is Ready.
async fn alice_shared_bucket(tenancy: &Tenancy, name: &str, shared_with: Value) -> Bucket {
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket",
        "metadata": {"name": name, "namespace": "tenant-a"}, "spec": {"sharedWith": shared_with},
    }))
    .unwrap();
    let api = Api::<Bucket>::namespaced(tenancy.alice.clone(), "tenant-a");
    api.create(&PostParams::default(), &bucket).await.unwrap();
    alice_bucket_refused(tenancy, name, "Ready").await.0
}

/// Bob asks, from tenant-b, for `mode` on alice's Bucket `bucket` (`secret_name`: where).
async fn bob_asks(tenancy: &Tenancy, name: &str, bucket: &str, mode: &str, secret_name: Option<&str>) {
    let mut spec = json!({"bucketRef": {"namespace": "tenant-a", "name": bucket}, "mode": mode});
    if let Some(secret_name) = secret_name {
        spec["secretName"] = json!(secret_name);
    }
    let grant: BucketAccess = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketAccess",
        "metadata": {"name": name, "namespace": "tenant-b"}, "spec": spec,
    }))
    .unwrap();
    Api::<BucketAccess>::namespaced(tenancy.bob.clone(), "tenant-b")
        .create(&PostParams::default(), &grant)
        .await
        .expect("a tenant may create BucketAccesses in its namespace");
}

/// The reason and message of bob's BucketAccess `name` once its reason is `reason`.
async fn bob_grant(tenancy: &Tenancy, name: &str, reason: &str) -> (BucketAccess, String) {
    let api = Api::<BucketAccess>::namespaced(tenancy.bob.clone(), "tenant-b");
    eventually(&format!("bob's BucketAccess {name} to report {reason}"), || async {
        let grant = api.get(name).await.unwrap();
        let ready = grant.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        (ready.reason == reason).then_some((grant, ready.message))
    })
    .await
}

/// kopper with the Bucket controller (and so BucketAccess) on moto, as config/rbac/ allows it.
async fn bucket_tenancy(moto: &crate::common::moto::Moto) -> Tenancy {
    let mut tenancy = Tenancy::start().await;
    crate::common::moto::create_credentials_secret(&tenancy.admin).await;
    tenancy.operator.take().unwrap().stop().await.unwrap();
    start_bucket_kopper(&mut tenancy, moto, "tenancy");
    tenancy
}

/// IAM users kopper made, as an admin lists them.
async fn iam_users(moto: &crate::common::moto::Moto) -> Vec<String> {
    let s3 = moto.client().await;
    kopper::controllers::bucket::provider::Provider::users(&s3, "/", "").await.unwrap()
}

/// Bob cannot have alice's bucket without her consent: he cannot write the consent himself
/// (her Bucket is hers), a grant of a Bucket she did not share with him is refused with no
/// IAM user made, and it reads exactly as a grant of a Bucket that does not exist, so that
/// BucketAccesses cannot probe which Buckets other namespaces have.
#[tokio::test]
async fn a_tenant_gets_no_grant_without_consent_and_cannot_tell_an_unshared_bucket_from_none() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let tenancy = bucket_tenancy(&moto).await;
    alice_shared_bucket(&tenancy, "data", json!([{"namespace": "tenant-c", "mode": "ReadWrite"}])).await;
    let before = iam_users(&moto).await;

    let consent = json!({"spec": {"sharedWith": [{"namespace": "tenant-b", "mode": "ReadWrite"}]}});
    let denied = Api::<Bucket>::namespaced(tenancy.bob.clone(), "tenant-a")
        .patch("data", &PatchParams::default(), &Patch::Merge(&consent))
        .await
        .expect_err("bob cannot write alice's Bucket");
    assert!(matches!(denied, kube::Error::Api(ref status) if status.code == 403), "{denied:?}");

    bob_asks(&tenancy, "data", "data", "ReadOnly", None).await;
    bob_asks(&tenancy, "nothing", "nothing", "ReadOnly", None).await;
    let (unshared, unshared_message) = bob_grant(&tenancy, "data", "NotShared").await;
    let (_, missing_message) = bob_grant(&tenancy, "nothing", "NotShared").await;
    assert_eq!(unshared_message, missing_message.replace("tenant-a/nothing", "tenant-a/data"));
    assert!(unshared.status.unwrap().user_name.is_none());
    assert_eq!(iam_users(&moto).await, before, "no IAM user for bob");
    let bobs = Api::<Secret>::namespaced(tenancy.bob.clone(), "tenant-b");
    assert!(bobs.get_opt("data").await.unwrap().is_none(), "no Secret for bob");
    tenancy.stop().await;
}

/// Alice shares ReadOnly: bob asking for ReadWrite is refused (ModeNotShared) and gets no
/// user; asking for ReadOnly he gets a key whose policy writes nothing.
#[tokio::test]
async fn read_only_consent_never_gives_read_write() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let tenancy = bucket_tenancy(&moto).await;
    alice_shared_bucket(&tenancy, "data", json!([{"namespace": "tenant-b", "mode": "ReadOnly"}])).await;
    let before = iam_users(&moto).await;
    bob_asks(&tenancy, "writer", "data", "ReadWrite", None).await;
    let (_, message) = bob_grant(&tenancy, "writer", "ModeNotShared").await;
    assert!(message.contains("ReadOnly only"), "{message}");
    assert_eq!(iam_users(&moto).await, before, "no IAM user for a mode not consented to");

    let lower = json!({"spec": {"mode": "ReadOnly"}});
    Api::<BucketAccess>::namespaced(tenancy.bob.clone(), "tenant-b")
        .patch("writer", &PatchParams::default(), &Patch::Merge(&lower))
        .await
        .unwrap();
    let (granted, _) = bob_grant(&tenancy, "writer", "Granted").await;
    let user = granted.status.unwrap().user_name.unwrap();
    let s3 = moto.client().await;
    let policy = kopper::controllers::bucket::provider::Provider::user_policy(
        &s3,
        &user,
        kopper::controllers::bucket::names::POLICY_NAME,
    )
    .await
    .unwrap()
    .unwrap()
    .to_string();
    assert!(policy.contains("s3:GetObject") && !policy.contains("s3:PutObject"), "{policy}");
    tenancy.stop().await;
}

/// A Secret already in bob's namespace under the grant's secretName is not kopper's: it is
/// never overwritten, the grant reports SecretNameTaken and no key is issued into it.
#[tokio::test]
async fn a_squatted_secret_name_is_never_overwritten_by_a_grant() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let tenancy = bucket_tenancy(&moto).await;
    alice_shared_bucket(&tenancy, "data", json!([{"namespace": "tenant-b", "mode": "ReadOnly"}])).await;
    let squatted = json!({"metadata": {"name": "app-config", "namespace": "tenant-b"}, "stringData": {"password": "hunter2"}});
    secret(&tenancy.bob, "tenant-b", squatted).await;
    bob_asks(&tenancy, "reader", "data", "ReadOnly", Some("app-config")).await;
    let (granted, message) = bob_grant(&tenancy, "reader", "SecretNameTaken").await;
    assert!(message.contains("spec.secretName"), "{message}");
    let kept = Api::<Secret>::namespaced(tenancy.bob.clone(), "tenant-b").get("app-config").await.unwrap();
    let data = kept.data.unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["password"], "the Secret is left as it was");
    assert!(kept.metadata.owner_references.is_none());
    let s3 = moto.client().await;
    let user = granted.status.unwrap().user_name.unwrap();
    let keys = kopper::controllers::bucket::provider::Provider::access_keys(&s3, &user).await.unwrap();
    assert!(keys.is_empty(), "no key issued: {keys:?}");
    tenancy.stop().await;
}

/// A namespace given consent cannot use up the account's IAM users: of a burst of 11 of bob's
/// BucketAccesses naming alice's Bucket, exactly 10 get a user each, whatever order kopper
/// takes them in, and the other reports TooManyGrants and holds nothing until one of those is
/// deleted.
#[tokio::test]
async fn a_consented_tenant_gets_at_most_ten_grants_of_one_bucket() {
    let Some(moto) = crate::common::moto::Moto::start().await else { return };
    let tenancy = bucket_tenancy(&moto).await;
    alice_shared_bucket(&tenancy, "data", json!([{"namespace": "tenant-b", "mode": "ReadOnly"}])).await;
    let before = iam_users(&moto).await.len();
    let names: Vec<String> = (0..=10).map(|index| format!("g-{index:02}")).collect();
    for name in &names {
        bob_asks(&tenancy, name, "data", "ReadOnly", None).await;
    }
    let api = Api::<BucketAccess>::namespaced(tenancy.bob.clone(), "tenant-b");
    let decided = || async {
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for name in &names {
            let grant = api.get(name).await.unwrap();
            let status = grant.status.clone()?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
            match ready.reason.as_str() {
                "Granted" => granted.push(name.clone()),
                "TooManyGrants" if status.user_name.is_none() => refused.push((name.clone(), ready.message)),
                _ => return None,
            }
        }
        Some((granted, refused))
    };
    let (granted, refused) = eventually("every grant of the burst Granted or TooManyGrants", decided).await;
    assert_eq!((granted.len(), refused.len()), (10, 1), "granted {granted:?}, refused {refused:?}");
    let (waiting, message) = refused[0].clone();
    assert!(message.contains("10 other BucketAccesses"), "{message}");
    assert_eq!(iam_users(&moto).await.len(), before + 10, "one IAM user per admitted grant");

    api.delete(&granted[3], &DeleteParams::default()).await.unwrap();
    bob_grant(&tenancy, &waiting, "Granted").await;
    assert_eq!(iam_users(&moto).await.len(), before + 10);
    tenancy.stop().await;
}
