//! config/rbac/ is what kopper runs with in a cluster. These tests run kopper in-process as its
//! ServiceAccount on kubesim with RBAC enforced, and prove the RBAC both sufficient (every
//! controller does its whole job and the API server never answers 403) and minimal (without
//! any one verb of any rule, of the ClusterRole or of the leader-election Role, kopper is
//! refused something).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::manifests::{create_document, kind_of, rbac_documents, yaml_documents};
use crate::common::moto::Moto;
use crate::common::{Operator, eventually, eventually_within, run_args};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleBinding};
use kopper::controllers::bucket::access_types::BucketAccess;
use kopper::controllers::bucket::types::Bucket;
use kopper::controllers::namespace_access::types::NamespaceAccess;
use kopper::controllers::replication::types::ReplicationRule;
use kopper::controllers::replication::types::{ConfigMapSync, SecretSync};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NAMESPACE_ACCESS_SAMPLE: &str =
    include_str!("../../../../config/samples/namespaceaccess-group-per-namespace.yaml");
const CONFIG_MAP_SYNC_SAMPLE: &str =
    include_str!("../../../../config/samples/configmapsync-across-namespaces.yaml");
const REPLICATION_RULE_SAMPLE: &str =
    include_str!("../../../../config/samples/replicationrule-shared-settings.yaml");
const SECRET_SYNC_SAMPLE: &str = include_str!("../../../../config/samples/secretsync-ca-certificate.yaml");

/// kopper's identity in the cluster, as config/rbac/ binds it.
const KOPPER_NAMESPACE: &str = "kopper-system";
const KOPPER_SERVICE_ACCOUNT: &str = "kopper";
/// The OIDC provider kopper is given, so that keyless Buckets are part of every run.
const OIDC_ARN: &str = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/RBAC";
const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
/// The pod labeler's default label.
const POD_NAME_LABEL: &str = "kopper.dev/pod-name";
/// How long a cut-down RBAC may take to get kopper refused. Refusals come within a second or
/// two; this only bounds a failing run.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(30);
/// How long a kopper that was refused gets to stop before it is aborted; a healthy one stops
/// in milliseconds.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The documents of config/rbac/ with `verb` taken out of rule `index` of the object of `kind`
/// (and the rule removed if that was its only verb).
fn without_verb(
    documents: &[serde_json::Value],
    kind: &str,
    index: usize,
    verb: &str,
) -> Vec<serde_json::Value> {
    let mut documents = documents.to_vec();
    let document = documents.iter_mut().find(|document| kind_of(document) == kind).unwrap();
    let rules = document["rules"].as_array_mut().unwrap();
    let verbs = rules[index]["verbs"].as_array_mut().unwrap();
    verbs.retain(|held| held != verb);
    if verbs.is_empty() {
        rules.remove(index);
    }
    documents
}

fn rules_of(documents: &[serde_json::Value], kind: &str) -> Vec<PolicyRule> {
    let document = documents.iter().find(|document| kind_of(document) == kind).unwrap();
    serde_json::from_value(document["rules"].clone()).unwrap()
}

/// `verb on group/resources[names]`, to name a permission in a failure message.
fn describe(kind: &str, rule: &PolicyRule, verb: &str) -> String {
    let groups = rule.api_groups.clone().unwrap_or_default().join(",");
    let resources = rule.resources.clone().unwrap_or_default().join(",");
    let names = rule.resource_names.clone().map(|names| format!(" {names:?}")).unwrap_or_default();
    format!("{kind}: {verb} on {groups}/{resources}{names}")
}

/// A kubesim enforcing RBAC, set up as an administrator would install kopper: its namespace,
/// the given RBAC manifests and the CRDs; and kopper running as its ServiceAccount.
struct Installation {
    sim: kubesim::Server,
    admin: Client,
    operator: Option<Operator>,
    _dir: tempfile::TempDir,
}

impl Installation {
    /// kopper with `rbac`, its Bucket controller on `moto` under `cluster_id` (so that
    /// installations sharing one moto never share a bucket or a user).
    async fn start(rbac: Vec<serde_json::Value>, moto: &Moto, cluster_id: &str) -> Self {
        let config =
            kubesim::Config { authorization: kubesim::Authorization::Rbac, ..kubesim::Config::default() };
        let sim = kubesim::Server::start(config).await.unwrap();
        let admin = sim.client();
        for document in rbac {
            create_document(&admin, document).await;
        }
        let crds = Api::all(admin.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        common::moto::create_credentials_secret(&admin).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let service_account = sim.kubeconfig_for_service_account(KOPPER_NAMESPACE, KOPPER_SERVICE_ACCOUNT);
        std::fs::write(&kubeconfig, serde_yaml::to_string(&service_account).unwrap()).unwrap();
        let s3_flags = common::moto::flags(&moto.endpoint, cluster_id);
        let mut flags: Vec<&str> = s3_flags.iter().map(String::as_str).collect();
        flags.extend([
            "--oidc-provider-arn",
            OIDC_ARN,
            // The Bucket's Secret is deleted and written again with a new key at once.
            "--bucket-key-interval",
            "1s",
            "--leader-elect",
            "true",
            "--lease-namespace",
            KOPPER_NAMESPACE,
            // Renewed every second, so that renewing is part of every run.
            "--lease-duration",
            "3s",
            "--renew-interval",
            "1s",
            // A controller whose watch is refused never syncs and only stops when the
            // grace period ends: keep that short.
            "--shutdown-grace-period",
            "2s",
        ]);
        let args = run_args(&kubeconfig, &flags);
        let operator = Some(Operator::start(args));
        Self { sim, admin, operator, _dir: dir }
    }

    fn forbidden(&self) -> u64 {
        self.sim.counters().status(403)
    }

    /// Resolves once kubesim has answered any request with 403.
    async fn first_refusal(&self) {
        eventually_within(REFUSAL_DEADLINE, "kopper to be refused something", || async {
            (self.forbidden() > 0).then_some(())
        })
        .await;
    }

    /// Stops kopper and kubesim; false if kopper did not stop within [`STOP_DEADLINE`]. A kopper
    /// that was refused may have stopped with an error already: only a clean shutdown
    /// matters to the sufficient case, which checks it itself.
    async fn stop(mut self) -> bool {
        let mut stopped = true;
        if let Some(operator) = self.operator.take() {
            operator.shutdown.trigger();
            let abort = operator.handle.abort_handle();
            stopped = tokio::time::timeout(STOP_DEADLINE, operator.handle).await.is_ok();
            abort.abort();
        }
        self.sim.shutdown().await;
        stopped
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

/// What a user of every controller does, and what they then expect to see, in order: every
/// API call kopper makes in normal operation is made at least once. Panics naming the
/// expectation that was not met.
async fn use_every_controller(admin: &Client) {
    create_inputs(admin).await;
    expect_outputs(admin).await;
    expect_statuses(admin).await;
    expect_hand_edits_undone(admin).await;
    expect_cleanups(admin).await;
    expect_lease_renewed(admin).await;
}

/// The leader renews its Lease in kopper-system (every second, with the flags used here).
async fn expect_lease_renewed(admin: &Client) {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), KOPPER_NAMESPACE);
    eventually("kopper's lease renewed", || async {
        let lease = leases.get_opt("kopper-leader").await.unwrap()?;
        let spec = lease.spec.unwrap_or_default();
        (spec.renew_time.is_some() && spec.renew_time != spec.acquire_time).then_some(())
    })
    .await;
}

/// The samples of seeds 000, 002 and 003 (`team-editors` is left out: it only adds bindings
/// to roles kopper may bind), the seed 003 rule once more for Secrets, and a namespace with
/// an annotated pod.
async fn create_inputs(admin: &Client) {
    create_namespace(admin, "team-a").await;
    let mut samples: Vec<serde_json::Value> =
        [NAMESPACE_ACCESS_SAMPLE, CONFIG_MAP_SYNC_SAMPLE, REPLICATION_RULE_SAMPLE, SECRET_SYNC_SAMPLE]
            .into_iter()
            .flat_map(yaml_documents)
            .collect();
    samples.sort_by_key(|document| kind_of(document) != "Namespace");
    let mut secret_rule =
        samples.iter().find(|document| kind_of(document) == "ReplicationRule").unwrap().clone();
    secret_rule["metadata"]["name"] = json!("secret-rule");
    secret_rule["spec"]["kind"] = json!("Secret");
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "shared-secret", "namespace": "default", "labels": {"copyrator": "true"}},
        "stringData": {"token": "3"},
    });
    for document in samples.into_iter().chain([secret_rule]) {
        create_document(admin, document).await;
    }
    let secret: Secret = serde_json::from_value(secret).unwrap();
    Api::namespaced(admin.clone(), "default").create(&PostParams::default(), &secret).await.unwrap();
    let pod = common::pod("hello", &[("kopper.dev/add-pod-name-label", "true")], &[]);
    Api::<Pod>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &pod).await.unwrap();
    // A default class with a quota: Buckets are admitted to it (a fresh read of the class).
    let class = json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "BucketClass",
        "metadata": {"name": "standard", "annotations": {"kopper.dev/is-default-class": "true"}},
        "spec": {"maxBucketsPerNamespace": 5},
    });
    create_document(admin, class).await;
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": "store", "namespace": "team-a"},
        "spec": {"deletionPolicy": "Delete"},
    }))
    .unwrap();
    Api::<Bucket>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &bucket).await.unwrap();
    // A grant of that Bucket from its own namespace (which needs no consent): a fresh read of
    // the Bucket, a user and key of its own, its Secret.
    let grant: BucketAccess = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "BucketAccess",
        "metadata": {"name": "store-reader", "namespace": "team-a"},
        "spec": {"bucketRef": {"name": "store"}, "mode": "ReadOnly"},
    }))
    .unwrap();
    Api::<BucketAccess>::namespaced(admin.clone(), "team-a")
        .create(&PostParams::default(), &grant)
        .await
        .unwrap();
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "app", "namespace": "team-a"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let keyless: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": "keyless", "namespace": "team-a"},
        "spec": {"access": {"mode": "ServiceAccount", "serviceAccountName": "app"}},
    }))
    .unwrap();
    Api::<Bucket>::namespaced(admin.clone(), "team-a")
        .create(&PostParams::default(), &keyless)
        .await
        .unwrap();
}

/// The role ARN kopper put on ServiceAccount team-a/app, once there is one.
async fn role_annotation(admin: &Client) -> Option<String> {
    let account = Api::<ServiceAccount>::namespaced(admin.clone(), "team-a").get("app").await.unwrap();
    account.metadata.annotations?.get(ROLE_ARN_ANNOTATION).cloned()
}

/// The access key id in the Bucket store's Secret, once there is one.
async fn bucket_key(admin: &Client) -> Option<String> {
    let secret = Api::<Secret>::namespaced(admin.clone(), "team-a").get_opt("store-s3").await.unwrap()?;
    let id = secret.data?.get("AWS_ACCESS_KEY_ID")?.0.clone();
    String::from_utf8(id).ok()
}

async fn expect_outputs(admin: &Client) {
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "team-a");
    eventually("RoleBinding team-a/ad-kubernetes-team-a binding ClusterRole edit", || async {
        bindings.get_opt("ad-kubernetes-team-a").await.unwrap()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    eventually("pod team-a/hello labelled with its name", || async {
        (common::label_of(&pods, "hello", POD_NAME_LABEL).await.as_deref() == Some("hello")).then_some(())
    })
    .await;
    eventually("ConfigMapSync's copy in destination-namespace", || async {
        config_map_exists(admin, "destination-namespace", "configmap-name").await.then_some(())
    })
    .await;
    eventually("ReplicationRule main-rule's copy in team-a", || async {
        config_map_exists(admin, "team-a", "shared-settings").await.then_some(())
    })
    .await;
    let secrets = Api::<Secret>::namespaced(admin.clone(), "team-a");
    eventually("ReplicationRule secret-rule's copy in team-a", || async {
        secrets.get_opt("shared-secret").await.unwrap()
    })
    .await;
    eventually("Bucket store's credentials in Secret team-a/store-s3", || async { bucket_key(admin).await })
        .await;
    let secrets = Api::<Secret>::namespaced(admin.clone(), "team-a");
    eventually("BucketAccess store-reader's credentials in Secret team-a/store-reader", || async {
        secrets.get_opt("store-reader").await.unwrap()?.data?.get("AWS_ACCESS_KEY_ID").map(drop)
    })
    .await;
    eventually("Bucket keyless's role on ServiceAccount team-a/app", || async {
        role_annotation(admin).await
    })
    .await;
}

async fn config_map_exists(admin: &Client, namespace: &str, name: &str) -> bool {
    Api::<ConfigMap>::namespaced(admin.clone(), namespace).get_opt(name).await.unwrap().is_some()
}

/// A managed binding edited by hand is put back (server-side apply); a pod label removed by
/// hand is set again, and the repeated Event becomes a series (the recorder's patch).
async fn expect_hand_edits_undone(admin: &Client) {
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "team-a");
    let intruder =
        json!({"subjects": [{"kind": "User", "name": "intruder", "apiGroup": "rbac.authorization.k8s.io"}]});
    bindings.patch("ad-kubernetes-team-a", &PatchParams::default(), &Patch::Merge(&intruder)).await.unwrap();
    eventually("the edited binding's subjects put back", || async {
        let binding = bindings.get("ad-kubernetes-team-a").await.unwrap();
        binding
            .subjects
            .unwrap_or_default()
            .iter()
            .any(|subject| subject.name == "ad-kubernetes-team-a")
            .then_some(())
    })
    .await;

    let copies = Api::<ConfigMap>::namespaced(admin.clone(), "team-a");
    let tampered = json!({"data": {"log-level": "debug", "extra": "added by hand"}});
    copies.patch("shared-settings", &PatchParams::default(), &Patch::Merge(&tampered)).await.unwrap();
    eventually("the edited copy made equal to its source again", || async {
        let data = copies.get("shared-settings").await.unwrap().data.unwrap_or_default();
        (data.get("log-level").map(String::as_str) == Some("info") && !data.contains_key("extra"))
            .then_some(())
    })
    .await;

    let first_key = bucket_key(admin).await.unwrap();
    let secrets = Api::<Secret>::namespaced(admin.clone(), "team-a");
    secrets.delete("store-s3", &DeleteParams::default()).await.unwrap();
    eventually("the Bucket's deleted Secret written again, with a new key", || async {
        bucket_key(admin).await.filter(|key| *key != first_key).map(drop)
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let unlabel = json!({"metadata": {"labels": {POD_NAME_LABEL: null}}});
    pods.patch("hello", &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    let events: Api<Event> = Api::namespaced(admin.clone(), "team-a");
    eventually("the pod relabelled and its Event counted twice", || async {
        let events = events.list(&ListParams::default()).await.unwrap().items;
        let repeated = events.iter().any(|event| {
            let about_pod = event.regarding.as_ref().and_then(|pod| pod.name.as_deref()) == Some("hello");
            about_pod && event.reporting_controller.as_deref() == Some("kopper") && event.series.is_some()
        });
        (repeated && common::label_of(&pods, "hello", POD_NAME_LABEL).await.as_deref() == Some("hello"))
            .then_some(())
    })
    .await;
}

/// A namespace the policy stops matching loses its binding; a deleted rule's copies are
/// removed before its finalizer is released.
async fn expect_cleanups(admin: &Client) {
    let policies: Api<NamespaceAccess> = Api::all(admin.clone());
    let exclude = json!({"spec": {"namespaces": {"exclude": ["team-a"]}}});
    policies.patch("ad-kubernetes", &PatchParams::default(), &Patch::Merge(&exclude)).await.unwrap();
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "team-a");
    eventually("the binding of an excluded namespace removed", || async {
        bindings.get_opt("ad-kubernetes-team-a").await.unwrap().is_none().then_some(())
    })
    .await;

    let buckets: Api<Bucket> = Api::namespaced(admin.clone(), "team-a");
    buckets.delete("store", &DeleteParams::default()).await.unwrap();
    eventually("Bucket store's user and bucket deleted and its finalizer released", || async {
        buckets.get_opt("store").await.unwrap().is_none().then_some(())
    })
    .await;
    let grants: Api<BucketAccess> = Api::namespaced(admin.clone(), "team-a");
    grants.delete("store-reader", &DeleteParams::default()).await.unwrap();
    eventually("BucketAccess store-reader's finalizer released", || async {
        grants.get_opt("store-reader").await.unwrap().is_none().then_some(())
    })
    .await;
    buckets.delete("keyless", &DeleteParams::default()).await.unwrap();
    eventually("Bucket keyless's role and annotation removed and its finalizer released", || async {
        let gone =
            buckets.get_opt("keyless").await.unwrap().is_none() && role_annotation(admin).await.is_none();
        gone.then_some(())
    })
    .await;

    // A rule deleted with deletionPolicy Orphan leaves its copy (a patch of its labels), and
    // the rule that replaces it takes the copy over (another patch).
    let rules: Api<ReplicationRule> = Api::all(admin.clone());
    let orphan = json!({"spec": {"deletionPolicy": "Orphan"}});
    rules.patch("secret-rule", &PatchParams::default(), &Patch::Merge(&orphan)).await.unwrap();
    let mut successor = rules.get("secret-rule").await.unwrap();
    rules.delete("secret-rule", &DeleteParams::default()).await.unwrap();
    let secrets = Api::<Secret>::namespaced(admin.clone(), "team-a");
    let labelled = |key: &'static str, value: &'static str| {
        let secrets = secrets.clone();
        move || {
            let secrets = secrets.clone();
            async move {
                let copy = secrets.get_opt("shared-secret").await.unwrap()?;
                let marks = copy.metadata.labels.unwrap_or_default().into_iter();
                marks
                    .chain(copy.metadata.annotations.unwrap_or_default())
                    .any(|(k, v)| k == key && v == value)
                    .then_some(())
            }
        }
    };
    eventually("secret-rule's copy left as an orphan", labelled("kopper.dev/orphaned", "true")).await;
    successor.metadata =
        kube::core::ObjectMeta { name: Some("secret-successor".into()), ..Default::default() };
    successor.status = None;
    rules.create(&PostParams::default(), &successor).await.unwrap();
    eventually(
        "the orphan taken over by secret-successor",
        labelled("kopper.dev/rule", "ReplicationRule.secret-successor"),
    )
    .await;

    rules.delete("main-rule", &DeleteParams::default()).await.unwrap();
    eventually("main-rule's copies removed and its finalizer released", || async {
        let gone = !config_map_exists(admin, "team-a", "shared-settings").await
            && rules.get_opt("main-rule").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
}

/// Every kind of kopper object got a status written by kopper.
async fn expect_statuses(admin: &Client) {
    let policies: Api<NamespaceAccess> = Api::all(admin.clone());
    eventually("NamespaceAccess ad-kubernetes's status", || async {
        let policy = policies.get("ad-kubernetes").await.unwrap();
        policy.status.filter(|status| !status.conditions.is_empty())
    })
    .await;
    let syncs: Api<ConfigMapSync> = Api::namespaced(admin.clone(), "source-namespace");
    eventually("ConfigMapSync configmapsync-sample's status", || async {
        let sync = syncs.get("configmapsync-sample").await.unwrap();
        sync.status.filter(|status| status.synced_count == 1)
    })
    .await;
    let secret_syncs: Api<SecretSync> = Api::namespaced(admin.clone(), "shop");
    eventually("SecretSync shop-ca's status", || async {
        let sync = secret_syncs.get("shop-ca").await.unwrap();
        sync.status.filter(|status| status.synced_count == 1)
    })
    .await;
    let buckets: Api<Bucket> = Api::namespaced(admin.clone(), "team-a");
    eventually("Bucket store's status", || async {
        let bucket = buckets.get("store").await.unwrap();
        bucket.status.filter(|status| status.access_key_id.is_some())
    })
    .await;
    let rules: Api<ReplicationRule> = Api::all(admin.clone());
    eventually("ReplicationRule main-rule's status", || async {
        let rule = rules.get("main-rule").await.unwrap();
        rule.status.filter(|status| status.copies_in_sync > 0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kopper_does_every_controllers_job_as_its_service_account_and_is_never_refused() {
    let Some(moto) = Moto::start().await else { return };
    let mut installation = Installation::start(rbac_documents(), &moto, "sufficient").await;
    use_every_controller(&installation.admin).await;
    assert_eq!(installation.forbidden(), 0, "kubesim answered 403 to kopper");
    assert_eq!(installation.sim.counters().status(401), 0, "kubesim answered 401 to kopper");
    installation.operator.take().unwrap().stop().await.unwrap();
    installation.stop().await;
}

/// An install whose ClusterRole lacks the serviceaccounts rule (an older chart, an admin who
/// cut it): kopper is refused its ServiceAccount watch, and Buckets in mode Key still get
/// their credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_service_account_rule_key_buckets_still_get_credentials() {
    let Some(moto) = Moto::start().await else { return };
    let mut documents = rbac_documents();
    let role = documents.iter_mut().find(|document| kind_of(document) == "ClusterRole").unwrap();
    let rules = role["rules"].as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|rule| rule["resources"] != json!(["serviceaccounts"]));
    assert_eq!(rules.len(), before - 1, "the serviceaccounts rule was there to remove");
    let mut installation = Installation::start(documents, &moto, "no-sa-rule").await;
    create_namespace(&installation.admin, "team-a").await;
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": "store", "namespace": "team-a"},
        "spec": {},
    }))
    .unwrap();
    let buckets = Api::<Bucket>::namespaced(installation.admin.clone(), "team-a");
    buckets.create(&PostParams::default(), &bucket).await.unwrap();
    installation.first_refusal().await;
    eventually("Bucket store's credentials in Secret team-a/store-s3", || async {
        bucket_key(&installation.admin).await
    })
    .await;
    installation.operator.take().unwrap().stop().await.unwrap();
    installation.stop().await;
}

/// The permission missing from an installation, whether kopper got refused without it, and
/// whether it then still stopped on request.
struct Case {
    permission: String,
    refused: bool,
    stopped: bool,
}

/// How many installations run at once: each is a kubesim and a kopper doing every
/// controller's job against the usual deadlines, so on a loaded 2-core machine running all
/// thirty at once would time out rather than find what is refused.
const CASES_AT_ONCE: usize = 8;

/// Runs kopper with `rbac` until kubesim refuses it anything or it has done its whole job.
/// Only kopper can be refused: the admin is a system:master, and with the full RBAC the same
/// run sees no 403 at all.
async fn run_without(
    permission: String,
    rbac: Vec<serde_json::Value>,
    moto: Arc<Moto>,
    case: usize,
    turns: Arc<tokio::sync::Semaphore>,
) -> Case {
    let _turn = turns.acquire().await.unwrap();
    let installation = Installation::start(rbac, &moto, &format!("case-{case}")).await;
    let refused = tokio::select! {
        () = installation.first_refusal() => true,
        () = use_every_controller(&installation.admin) => installation.forbidden() > 0,
    };
    let stopped = installation.stop().await;
    Case { permission, refused, stopped }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_one_verb_of_its_rules_kopper_is_refused() {
    let Some(moto) = Moto::start().await else { return };
    let moto = Arc::new(moto);
    let documents = rbac_documents();
    let mut cases = tokio::task::JoinSet::new();
    let turns = Arc::new(tokio::sync::Semaphore::new(CASES_AT_ONCE));
    for kind in ["ClusterRole", "Role"] {
        for (index, rule) in rules_of(&documents, kind).iter().enumerate() {
            for verb in &rule.verbs {
                let rbac = without_verb(&documents, kind, index, verb);
                let case = cases.len();
                cases.spawn(run_without(describe(kind, rule, verb), rbac, moto.clone(), case, turns.clone()));
            }
        }
    }
    let mut unneeded = Vec::new();
    while let Some(case) = cases.join_next().await {
        let case = case.unwrap();
        if !case.stopped {
            // Not what this test is about, but worth seeing: kopper should stop on request
            // even while one of its watches is refused.
            eprintln!("kopper did not stop within {STOP_DEADLINE:?} without {}", case.permission);
        }
        if !case.refused {
            unneeded.push(case.permission);
        }
    }
    assert!(unneeded.is_empty(), "kopper did its whole job without these permissions: {unneeded:#?}");
}
