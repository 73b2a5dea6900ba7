//! Replication end to end: ReplicationRule and ConfigMapSync run against a fresh kubesim per test.

use crate::common;

mod kinds;
mod secret_sync;
mod shaping;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;

use kopper::controllers::replication;
use kopper::controllers::replication::metrics::{ReplicationMetrics, ScopedWatchLabels};
use kopper::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use kopper::runtime::metrics::{ControllerLabels, KindLabels};
use kopper::runtime::{Context, Metrics, Settings};

use crate::common::{InProcess, eventually};

const RULE_SAMPLE: &str = include_str!("../../../../config/samples/replicationrule-shared-settings.yaml");
const SYNC_SAMPLE: &str = include_str!("../../../../config/samples/configmapsync-across-namespaces.yaml");

struct Cluster {
    sim: kubesim::Server,
    client: Client,
    metrics: Arc<Metrics>,
    settings: Settings,
    operator: Option<InProcess>,
}

impl Cluster {
    async fn start() -> Self {
        Self::start_with(Settings::default()).await
    }

    async fn start_with(settings: Settings) -> Self {
        Self::start_with_crds(settings, [ReplicationRule::crd(), ConfigMapSync::crd(), SecretSync::crd()])
            .await
    }

    async fn start_with_crds(settings: Settings, crds: [CustomResourceDefinition; 3]) -> Self {
        Self::start_on(kubesim::Config::default(), settings, crds).await
    }

    async fn start_on(
        config: kubesim::Config,
        settings: Settings,
        crds: [CustomResourceDefinition; 3],
    ) -> Self {
        // RUST_LOG=kopper=debug shows the controllers' logs of a failing test.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let sim = kubesim::Server::start(config).await.unwrap();
        let mut cluster = Self::on(sim, settings, crds).await;
        cluster.start_operator();
        cluster
    }

    /// The rule CRDs installed on `sim`, kopper not started yet.
    async fn on(sim: kubesim::Server, settings: Settings, crds: [CustomResourceDefinition; 3]) -> Self {
        let client = sim.client();
        install_crds(&client, crds).await;
        Self {
            sim,
            client,
            metrics: Arc::new(Metrics::new(replication::register_metrics)),
            settings,
            operator: None,
        }
    }

    /// Stops kubesim and starts it again on the same address with `config` (its store gone,
    /// or kept in `config.data_dir`), while the operator runs on.
    async fn with_api_server_restarted(self, config: kubesim::Config) -> Self {
        let Self { sim, metrics, settings, operator, .. } = self;
        let failed = common::watch_errors(&metrics);
        let noticed = || async { common::watch_errors(&metrics) > failed };
        let sim = common::restart_api_server_once_noticed(sim, config, noticed).await;
        let client = sim.client();
        Self { sim, client, metrics, settings, operator }
    }

    /// Where most tests start: namespace team-a, the source `default/app-config` holding
    /// `key: value`, and the sample rule, once the copy in team-a holds it too.
    async fn with_copy(key: &str, value: &str) -> Self {
        let cluster = Self::start().await;
        cluster.namespace("team-a", json!({})).await;
        cluster.config_map("default", "app-config", copyrator(), json!({ key: value })).await;
        cluster.apply_rule(RULE_SAMPLE).await;
        cluster.copy_has("team-a", "app-config", key, value).await;
        cluster
    }

    fn start_operator(&mut self) {
        let ctx = Arc::new(Context::new(self.client.clone(), self.metrics.clone(), self.settings.clone()));
        self.operator = Some(InProcess::spawn(|stopped| replication::run(ctx, stopped)));
    }

    async fn stop_operator(&mut self) {
        self.operator.take().unwrap().stop().await;
    }

    fn config_maps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn rules(&self) -> Api<ReplicationRule> {
        Api::all(self.client.clone())
    }

    /// A namespace that accepts copies from any namespace: consent itself is tested in
    /// tests/tenancy.rs.
    async fn namespace(&self, name: &str, labels: serde_json::Value) {
        let annotations = json!({"kopper.dev/accept-replication-from": "*"});
        let namespace: Namespace = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}}),
        )
        .unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
        labels: serde_json::Value,
        data: serde_json::Value,
    ) {
        let config_map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data}))
                .unwrap();
        let params = PatchParams::apply("test").force();
        self.config_maps(namespace).patch(name, &params, &Patch::Apply(&config_map)).await.unwrap();
    }

    async fn apply_rule(&self, yaml: &str) -> ReplicationRule {
        let rule: ReplicationRule = kopper::samples::of_kind(yaml, "ReplicationRule").unwrap();
        let params = PatchParams::apply("test").force();
        self.rules().patch(&rule.name_any(), &params, &Patch::Apply(&rule)).await.unwrap()
    }

    /// The copy's data once it satisfies `done`.
    async fn copy_data_when(
        &self,
        namespace: &str,
        name: &str,
        done: impl Fn(Option<&BTreeMap<String, String>>) -> bool,
    ) -> Option<BTreeMap<String, String>> {
        let api = self.config_maps(namespace);
        eventually(&format!("ConfigMap {namespace}/{name}"), || async {
            let found = api.get_opt(name).await.unwrap();
            let data = found.as_ref().map(|cm| cm.data.clone().unwrap_or_default());
            done(data.as_ref()).then_some(data)
        })
        .await
    }

    async fn copy_has(&self, namespace: &str, name: &str, key: &str, value: &str) {
        self.copy_data_when(namespace, name, |data| {
            data.and_then(|d| d.get(key)).is_some_and(|v| v == value)
        })
        .await;
    }

    async fn copy_absent(&self, namespace: &str, name: &str) {
        self.copy_data_when(namespace, name, |data| data.is_none()).await;
    }

    /// Deletes the copy `namespace/name` and waits until kopper has made it again: another
    /// object (another uid) holding `key: value`. Waiting to see it absent in between would
    /// race kopper, which may recreate it before the first look.
    async fn delete_copy_and_await_restored(&self, namespace: &str, name: &str, key: &str, value: &str) {
        let api = self.config_maps(namespace);
        let deleted = api.get(name).await.unwrap().uid();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        eventually(&format!("ConfigMap {namespace}/{name} made again"), || async {
            let found = api.get_opt(name).await.unwrap()?;
            let holds = found.data.as_ref().and_then(|data| data.get(key)).is_some_and(|v| v == value);
            (found.uid() != deleted && holds).then_some(())
        })
        .await;
    }

    fn reconciles(&self) -> u64 {
        let labels = ControllerLabels { controller: replication::RULE_CONTROLLER.to_owned() };
        self.metrics.reconciles.get_or_create(&labels).get()
    }

    async fn rule_status(&self, name: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let api = self.rules();
        eventually(&format!("status of ReplicationRule {name}"), || async {
            let rule = api.get(name).await.unwrap();
            let status = serde_json::to_value(&rule.status).unwrap();
            done(&status).then_some(status)
        })
        .await
    }
}

async fn install_crds(client: &Client, crds: [CustomResourceDefinition; 3]) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds {
        api.create(&PostParams::default(), &crd).await.unwrap();
    }
}

fn copyrator() -> serde_json::Value {
    json!({"copyrator": "true"})
}

#[tokio::test]
async fn copies_appear_in_new_namespaces_and_follow_source_updates() {
    let cluster = Cluster::with_copy("level", "info").await;

    cluster.namespace("team-b", json!({})).await;
    cluster.copy_has("team-b", "app-config", "level", "info").await;

    cluster.config_map("default", "app-config", copyrator(), json!({"level": "debug"})).await;
    cluster.copy_has("team-a", "app-config", "level", "debug").await;
    cluster.copy_has("team-b", "app-config", "level", "debug").await;

    let copy = cluster.config_maps("team-a").get("app-config").await.unwrap();
    assert_eq!(copy.labels()["app.kubernetes.io/managed-by"], "kopper");
    assert_eq!(copy.annotations()["kopper.dev/rule"], "ReplicationRule.main-rule");
    let id = kopper::controllers::replication::model::RuleId::replication_rule("main-rule");
    assert_eq!(copy.labels()["kopper.dev/replicated-by"], id.label_value());
    assert_eq!(copy.annotations()["kopper.dev/source-namespace"], "default");
    for system in ["kube-system", "kube-public", "kube-node-lease"] {
        assert!(cluster.config_maps(system).get_opt("app-config").await.unwrap().is_none());
    }
    let status = cluster.rule_status("main-rule", |s| s["copiesInSync"] == 2).await;
    assert_eq!(status["sourcesMatched"], 1);
    assert_eq!(status["conditions"][0]["status"], "True");
}

/// New namespaces get their copies outside the rule's passes, and its status is then brought
/// up to date by a pass woken for status only: it counts them all, one by one or in a burst.
#[tokio::test]
async fn copies_into_new_namespaces_are_counted_in_the_rule_s_status() {
    let cluster = Cluster::with_copy("level", "info").await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 1).await;
    for n in 0..3 {
        let name = format!("late-{n}");
        cluster.namespace(&name, json!({})).await;
        cluster.copy_has(&name, "app-config", "level", "info").await;
        cluster.rule_status("main-rule", |s| s["copiesInSync"] == 2 + n).await;
    }
    for n in 0..20 {
        cluster.namespace(&format!("burst-{n}"), json!({})).await;
    }
    let status = cluster.rule_status("main-rule", |s| s["copiesInSync"] == 24).await;
    assert_eq!(status["conditions"][0]["status"], "True", "{status}");
}

#[tokio::test]
async fn deleted_or_edited_copy_is_restored() {
    let cluster = Cluster::with_copy("level", "info").await;

    cluster.delete_copy_and_await_restored("team-a", "app-config", "level", "info").await;

    let edit = json!({"data": {"level": "hacked"}});
    cluster
        .config_maps("team-a")
        .patch("app-config", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    cluster.copy_has("team-a", "app-config", "level", "info").await;
}

/// A copy edited by hand gets back exactly its source's content (keys and binaryData added
/// are removed) and labels (one of the source's removed is put back); the rewrite that does
/// it sends kopper's labels and annotations only, so one someone added goes too. (A label
/// or annotation added alone writes nothing: see README, "The tenant model".)
#[tokio::test]
async fn a_copy_edited_by_hand_gets_back_exactly_its_source_content_and_labels() {
    let cluster = Cluster::with_copy("level", "info").await;

    let edit = json!({
        "metadata": {"labels": {"copyrator": null, "backup.example.com/tier": "gold"}},
        "data": {"extra": "added by hand"},
        "binaryData": {"blob": "AAE="},
    });
    let api = cluster.config_maps("team-a");
    api.patch("app-config", &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
    let copy = eventually("the copy's content and labels to be its source's again", || async {
        let copy = api.get("app-config").await.unwrap();
        let source_label = copy.labels().get("copyrator").map(String::as_str);
        (source_label == Some("true")).then_some(copy)
    })
    .await;
    assert_eq!(copy.data, Some(BTreeMap::from([("level".to_owned(), "info".to_owned())])));
    assert!(copy.binary_data.as_ref().is_none_or(BTreeMap::is_empty), "binaryData added by hand is removed");
    assert!(!copy.labels().contains_key("backup.example.com/tier"), "{:?}", copy.labels());
}

#[tokio::test]
async fn copy_is_deleted_when_its_source_stops_matching_and_when_the_rule_goes() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "one", copyrator(), json!({"k": "1"})).await;
    cluster.config_map("default", "two", copyrator(), json!({"k": "2"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "one", "k", "1").await;
    cluster.copy_has("team-a", "two", "k", "2").await;

    cluster.config_map("default", "one", json!({}), json!({"k": "1"})).await;
    cluster.copy_absent("team-a", "one").await;

    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    cluster.copy_absent("team-a", "two").await;
    eventually("the rule to be gone", || async {
        cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        cluster.config_maps("default").get_opt("two").await.unwrap().is_some(),
        "sources are never deleted"
    );
}

/// A copy that changes while the rule's cleanup deletes it (its delete, conditioned on the
/// version kopper's cache knew, is refused): the cleanup finds it again in its list of the
/// rule's copies and deletes it before letting the rule go, not a minute later by the
/// orphan sweep, nor never if kopper is uninstalled meanwhile.
#[tokio::test]
async fn a_copy_changed_while_its_rule_is_cleaned_up_is_deleted_before_the_rule_goes() {
    let cluster = Cluster::with_copy("k", "1").await;
    let mut held = cluster.sim.faults().hold_next("delete", "configmaps");
    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    held.arrived().await;
    let edit = json!({"data": {"edited": "meanwhile"}});
    cluster
        .config_maps("team-a")
        .patch("app-config", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    held.release();

    eventually("the rule to be gone", || async {
        cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
    let left = cluster.config_maps("team-a").get_opt("app-config").await.unwrap();
    assert!(
        left.is_none_or(|copy| copy.metadata.deletion_timestamp.is_some()),
        "the copy outlived its rule's cleanup"
    );
}

/// New namespaces get their copies outside the rule's passes; none of those may land after
/// the rule's cleanup looked for its copies, or it would stay behind until the orphan sweep
/// (a minute later), or for ever if kopper stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_created_while_their_rule_is_deleted_keep_no_copy_of_it() {
    let cluster = Cluster::with_copy("k", "1").await;

    let namespaces: Vec<String> = (0..40).map(|n| format!("burst-{n}")).collect();
    // The rule is deleted once the burst's first copy exists, while namespaces still come.
    let deleted = tokio::sync::Notify::new();
    let creating = async {
        for (n, name) in namespaces.iter().enumerate() {
            cluster.namespace(name, json!({})).await;
            if n == 10 {
                deleted.notified().await;
            }
        }
    };
    let deleting = async {
        cluster.copy_has("burst-0", "app-config", "k", "1").await;
        cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
        deleted.notify_one();
    };
    tokio::join!(creating, deleting);
    eventually("the rule to be gone", || async {
        cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
    let copies = Api::<ConfigMap>::all(cluster.client.clone());
    let params = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=kopper");
    // Well within the orphan sweep's minute: only the cleanup can have removed them.
    common::eventually_within(std::time::Duration::from_secs(10), "no copy to be left", || async {
        let left = copies.list(&params).await.unwrap().items;
        let live = left.iter().filter(|copy| copy.metadata.deletion_timestamp.is_none()).count();
        (live == 0).then_some(())
    })
    .await;
}

/// A copy is rewritten without being read first when the watch shows all a rewrite needs;
/// one that someone gave a finalizer or an owner is read first, so those are kept.
#[tokio::test]
async fn updating_a_copy_keeps_the_finalizers_and_owners_others_gave_it() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.namespace("team-b", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"k": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "k", "1").await;
    cluster.copy_has("team-b", "app-config", "k", "1").await;
    let held = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    cluster
        .config_maps("team-a")
        .patch("app-config", &PatchParams::default(), &Patch::Merge(&held))
        .await
        .unwrap();

    cluster.config_map("default", "app-config", copyrator(), json!({"k": "2"})).await;
    cluster.copy_has("team-a", "app-config", "k", "2").await;
    cluster.copy_has("team-b", "app-config", "k", "2").await;
    let copy = cluster.config_maps("team-a").get("app-config").await.unwrap();
    assert_eq!(copy.finalizers(), ["example.com/hold"]);
    let released = json!({"metadata": {"finalizers": null}});
    cluster
        .config_maps("team-a")
        .patch("app-config", &PatchParams::default(), &Patch::Merge(&released))
        .await
        .unwrap();
}

/// A copy deleted while another controller's finalizer holds it cannot be made again until
/// that controller lets go: status says so (not that copies are being written), and the copy
/// comes back once the finalizer goes.
#[tokio::test]
async fn a_copy_held_in_deletion_by_another_finalizer_is_reported_and_made_again_once_gone() {
    let cluster = Cluster::with_copy("key", "value").await;
    let held = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    let copies = cluster.config_maps("team-a");
    let old = copies.patch("app-config", &PatchParams::default(), &Patch::Merge(&held)).await.unwrap();
    copies.delete("app-config", &DeleteParams::default()).await.unwrap();

    let status =
        cluster.rule_status("main-rule", |s| s["conditions"][0]["reason"] == "CopyBeingDeleted").await;
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["copiesInSync"], 0);

    let released = json!({"metadata": {"finalizers": null}});
    copies.patch("app-config", &PatchParams::default(), &Patch::Merge(&released)).await.unwrap();
    eventually("the copy to be made again", || async {
        let copy = copies.get_opt("app-config").await.unwrap()?;
        (copy.uid() != old.uid() && copy.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    cluster.copy_has("team-a", "app-config", "key", "value").await;
    cluster.rule_status("main-rule", |s| s["conditions"][0]["reason"] == "Synced").await;
}

/// A copy someone took over (kopper's managed-by label removed) is theirs: deleting the
/// rule leaves it, even though it still names the rule.
#[tokio::test]
async fn a_copy_taken_over_by_its_owner_outlives_the_rule() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.namespace("team-b", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"k": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "k", "1").await;
    cluster.copy_has("team-b", "app-config", "k", "1").await;
    let taken = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}});
    cluster
        .config_maps("team-a")
        .patch("app-config", &PatchParams::default(), &Patch::Merge(&taken))
        .await
        .unwrap();

    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    eventually("the rule to be gone", || async {
        cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
    cluster.copy_absent("team-b", "app-config").await;
    let kept = cluster.config_maps("team-a").get("app-config").await.unwrap();
    assert_eq!(kept.data.unwrap()["k"], "1", "the object taken over is left as it is");
}

#[tokio::test]
async fn unmanaged_object_is_left_byte_for_byte() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.namespace("team-b", json!({})).await;
    cluster.config_map("team-a", "app-config", json!({"owner": "team-a"}), json!({"mine": "yes"})).await;
    let before =
        serde_json::to_value(cluster.config_maps("team-a").get("app-config").await.unwrap()).unwrap();
    cluster.config_map("default", "app-config", copyrator(), json!({"level": "info"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;

    cluster.copy_has("team-b", "app-config", "level", "info").await;
    let status = cluster.rule_status("main-rule", |s| s["conflictCount"] == 1).await;
    assert_eq!(status["conflicts"][0]["namespace"], "team-a");
    assert_eq!(status["conflicts"][0]["reason"], "NotManagedByKopper");
    assert_eq!(status["conditions"][0]["status"], "False");
    let after = serde_json::to_value(cluster.config_maps("team-a").get("app-config").await.unwrap()).unwrap();
    assert_eq!(before, after);

    let events = Api::<k8s_openapi::api::core::v1::Event>::all(cluster.client.clone());
    eventually("a Warning Event for the conflict", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.iter().any(|e| e.reason.as_deref() == Some("NotManagedByKopper")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn first_rule_by_name_wins_whatever_its_age_and_the_other_reports_the_conflict() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"level": "info"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 1).await;
    // A rule created later but first by name takes the copy over: a rule recreated by a
    // GitOps tool keeps what it had, whatever was created meanwhile.
    cluster.apply_rule(&RULE_SAMPLE.replace("name: main-rule", "name: a-later-rule")).await;
    let status = cluster.rule_status("main-rule", |s| s["conflictCount"] == 1).await;
    assert_eq!(status["conflicts"][0]["reason"], "ClaimedByOtherRule");
    cluster.rule_status("a-later-rule", |s| s["copiesInSync"] == 1).await;
    let copy = cluster.config_maps("team-a").get("app-config").await.unwrap();
    assert_eq!(copy.annotations()["kopper.dev/rule"], "ReplicationRule.a-later-rule");
}

#[tokio::test]
async fn cross_namespace_config_map_sync_is_refused() {
    let cluster = Cluster::start().await;
    for namespace in ["tenant", "source-namespace", "destination-namespace"] {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("source-namespace", "configmap-name", json!({}), json!({"secret": "theirs"})).await;
    let mut sync: ConfigMapSync = kopper::samples::of_kind(SYNC_SAMPLE, "ConfigMapSync").unwrap();
    sync.metadata.namespace = Some("tenant".into());
    Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "tenant")
        .create(&PostParams::default(), &sync)
        .await
        .unwrap();
    let api = Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "tenant");
    let condition = eventually("the refusal in status", || async {
        let sync = api.get("configmapsync-sample").await.unwrap();
        sync.status.and_then(|s| s.conditions.into_iter().next())
    })
    .await;
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason, "CrossNamespaceSourceDenied");
    assert!(condition.message.contains("--allow-cross-namespace-sources"));
    assert!(cluster.config_maps("destination-namespace").get_opt("configmap-name").await.unwrap().is_none());
}

#[tokio::test]
async fn seed_config_map_sync_copies_from_its_own_namespace() {
    let cluster = Cluster::start().await;
    for namespace in ["source-namespace", "destination-namespace"] {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("source-namespace", "configmap-name", json!({}), json!({"a": "1"})).await;
    let sync: ConfigMapSync = kopper::samples::of_kind(SYNC_SAMPLE, "ConfigMapSync").unwrap();
    Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "source-namespace")
        .create(&PostParams::default(), &sync)
        .await
        .unwrap();
    cluster.copy_has("destination-namespace", "configmap-name", "a", "1").await;
    let api = Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "source-namespace");
    let status = eventually("synced namespaces in status", || async {
        let status = api.get("configmapsync-sample").await.unwrap().status?;
        (status.synced_namespaces == ["destination-namespace"]).then_some(status)
    })
    .await;
    assert!(status.last_sync_time.is_some());
}

#[tokio::test]
async fn restart_converges_with_no_duplicate_and_no_orphan() {
    let mut cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.namespace("team-b", json!({})).await;
    cluster.config_map("default", "one", copyrator(), json!({"k": "1"})).await;
    cluster.config_map("default", "two", copyrator(), json!({"k": "2"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-b", "two", "k", "2").await;
    cluster.copy_has("team-a", "one", "k", "1").await;

    cluster.stop_operator().await;
    cluster.config_map("default", "one", copyrator(), json!({"k": "1-new"})).await;
    cluster.config_map("default", "two", json!({}), json!({"k": "2"})).await;
    cluster.namespace("team-c", json!({})).await;
    Api::<Namespace>::all(cluster.client.clone()).delete("team-b", &DeleteParams::default()).await.unwrap();
    cluster.start_operator();

    cluster.copy_has("team-a", "one", "k", "1-new").await;
    cluster.copy_has("team-c", "one", "k", "1-new").await;
    cluster.copy_absent("team-a", "two").await;
    cluster.copy_absent("team-c", "two").await;
    let copies = eventually("exactly the wanted copies", || async {
        let copies = copies_and_values(&cluster.client, "k").await;
        (copies == ["team-a/one=1-new", "team-c/one=1-new"]).then_some(copies)
    })
    .await;
    assert_eq!(copies.len(), 2);
}

/// `kopper run` as a process of its own, running the replication engine, so it can be killed.
fn replication_process(kubeconfig: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--controllers", "replication-rule", "--admin-addr", "127.0.0.1:0"])
        .args(["--leader-elect", "false", "--kubeconfig"])
        .arg(kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Every copy kopper made, as `namespace/name=` and its value of `key`.
async fn copies_and_values(client: &Client, key: &str) -> Vec<String> {
    let params = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=kopper");
    let copies = Api::<ConfigMap>::all(client.clone()).list(&params).await.unwrap();
    let mut found: Vec<String> = copies
        .iter()
        .map(|copy| {
            let value = copy.data.as_ref().and_then(|data| data.get(key)).cloned().unwrap_or_default();
            format!("{}/{}={value}", copy.namespace().unwrap_or_default(), copy.name_any())
        })
        .collect();
    found.sort();
    found
}

/// kopper killed with SIGKILL again and again, at different points of its work, while the
/// cluster changes under it and the API server fails some of its requests (409, 429, 500),
/// cuts its watches and compacts their history: once it runs undisturbed, the copies are
/// exactly those wanted, each with its source's latest content. None missing, none
/// orphaned (in a namespace gone, or of a source that stopped matching), none stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_again_and_again_under_api_faults_converges_with_no_missing_orphaned_or_stale_copy() {
    let mut cluster = Cluster::start().await;
    cluster.stop_operator().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.sim.write_kubeconfig(&kubeconfig).unwrap();
    for n in 0..3 {
        cluster.namespace(&format!("team-{n}"), json!({})).await;
    }
    cluster.config_map("default", "one", copyrator(), json!({"v": "0"})).await;
    cluster.config_map("default", "two", copyrator(), json!({"v": "0"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;

    const ROUNDS: u64 = 6;
    for round in 1..=ROUNDS {
        let mut kopper = replication_process(&kubeconfig);
        // The test's own changes first, with no fault pending that they would meet.
        cluster.sim.faults().clear();
        cluster.config_map("default", "one", copyrator(), json!({"v": round.to_string()})).await;
        cluster.namespace(&format!("late-{round}"), json!({})).await;
        match round {
            2 => {
                let namespaces = Api::<Namespace>::all(cluster.client.clone());
                namespaces.delete("team-0", &DeleteParams::default()).await.unwrap();
            }
            3 => cluster.config_map("default", "two", json!({}), json!({"v": "3"})).await,
            5 => cluster.config_map("default", "two", copyrator(), json!({"v": "5"})).await,
            _ => {}
        }
        for (verb, status) in
            [("create", 409), ("update", 429), ("patch", 500), ("delete", 500), ("list", 500)]
        {
            let fault = kubesim::Fault { verb: Some(verb.to_owned()), resource: None, count: 2, status };
            cluster.sim.faults().fail_next(fault);
        }
        if round % 2 == 0 {
            cluster.sim.faults().close_watches();
            cluster.sim.compact();
        }
        // Killed at a different point of its work each round: starting, listing, writing.
        tokio::time::sleep(std::time::Duration::from_millis(100 * round)).await;
        kopper.start_kill().unwrap();
        kopper.wait().await.unwrap();
    }

    cluster.sim.faults().clear();
    let _kopper = replication_process(&kubeconfig);
    let mut wanted: Vec<String> = ["team-1", "team-2"]
        .into_iter()
        .map(str::to_owned)
        .chain((1..=ROUNDS).map(|round| format!("late-{round}")))
        .flat_map(|namespace| [format!("{namespace}/one={ROUNDS}"), format!("{namespace}/two=5")])
        .collect();
    wanted.sort();
    eventually("exactly the wanted copies, each with its source's latest content", || async {
        (copies_and_values(&cluster.client, "v").await == wanted).then_some(())
    })
    .await;
}

#[tokio::test]
async fn closed_watches_and_compacted_history_still_converge() {
    let cluster = Cluster::with_copy("v", "1").await;

    cluster.sim.compact();
    cluster.sim.faults().close_watches();
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "2"})).await;
    cluster.namespace("team-b", json!({})).await;
    cluster.copy_has("team-a", "app-config", "v", "2").await;
    cluster.copy_has("team-b", "app-config", "v", "2").await;
}

/// An API server back without its data (restarted without its store, or etcd restored from
/// an older backup) holds objects of the same names under lower resourceVersions. kopper's
/// resumes found no server while it was down, and its caches must be replaced by a new list: kept, they
/// would hold a copy that no longer exists, which kopper would try to update instead of
/// making again.
#[tokio::test]
async fn an_api_server_back_without_its_data_gets_its_copies_made_again() {
    let cluster = Cluster::with_copy("v", "before").await;

    let cluster = cluster.with_api_server_restarted(kubesim::Config::default()).await;
    assert!(cluster.config_maps("team-a").get_opt("app-config").await.unwrap().is_none(), "an empty store");
    install_crds(&cluster.client, [ReplicationRule::crd(), ConfigMapSync::crd(), SecretSync::crd()]).await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "after"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "v", "after").await;
    cluster.namespace("team-b", json!({})).await;
    cluster.copy_has("team-b", "app-config", "v", "after").await;
    cluster.rule_status("main-rule", |status| status["copiesInSync"] == 2).await;
}

/// An API server that restarts with its data: resourceVersions go on, resumed watches are
/// refused with 410 or resumed, and kopper keeps its copies in step with what changes after.
#[tokio::test]
async fn an_api_server_back_with_its_data_keeps_copies_in_step() {
    let data = tempfile::tempdir().unwrap();
    let config = || kubesim::Config { data_dir: Some(data.path().to_owned()), ..kubesim::Config::default() };
    let crds = [ReplicationRule::crd(), ConfigMapSync::crd(), SecretSync::crd()];
    let cluster = Cluster::start_on(config(), Settings::default(), crds).await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "v", "1").await;

    let cluster = cluster.with_api_server_restarted(config()).await;
    cluster.copy_has("team-a", "app-config", "v", "1").await;
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "2"})).await;
    cluster.copy_has("team-a", "app-config", "v", "2").await;
    cluster.namespace("team-b", json!({})).await;
    cluster.copy_has("team-b", "app-config", "v", "2").await;
    cluster.delete_copy_and_await_restored("team-a", "app-config", "v", "2").await;
    cluster.rule_status("main-rule", |status| status["copiesInSync"] == 2).await;
}

#[tokio::test]
async fn one_write_per_copy_and_none_when_nothing_changed() {
    let cluster = Cluster::start().await;
    for namespace in ["a", "b", "c"] {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    let writes_before = cluster.sim.counters().writes("configmaps");
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 3).await;
    assert_eq!(cluster.sim.counters().writes("configmaps") - writes_before, 3, "one write per copy");

    // Watches cut and resumed, then a pass (woken by a namespace label no rule reads) that
    // finds everything in sync writes nothing.
    cluster.sim.faults().close_watches();
    let reconciles = cluster.reconciles();
    let unrelated = json!({"metadata": {"labels": {"unrelated": "yes"}}});
    Api::<Namespace>::all(cluster.client.clone())
        .patch("a", &PatchParams::default(), &Patch::Merge(&unrelated))
        .await
        .unwrap();
    eventually("a pass after the namespace change", || async {
        (cluster.reconciles() > reconciles).then_some(())
    })
    .await;
    assert_eq!(
        cluster.sim.counters().writes("configmaps") - writes_before,
        3,
        "no write when nothing changed"
    );
}

#[tokio::test]
async fn secret_copies_keep_their_type_and_immutable_copies_are_replaced() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let secrets = |namespace: &str| Api::<Secret>::namespaced(cluster.client.clone(), namespace);
    let secret = |value: &str| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "tls", "labels": {"copyrator": "true"}},
            "type": "kubernetes.io/tls",
            "immutable": true,
            "data": {"tls.crt": ByteString(value.as_bytes().to_vec()), "tls.key": ByteString(b"key".to_vec())},
        }))
        .unwrap()
    };
    secrets("default").create(&PostParams::default(), &secret("cert-1")).await.unwrap();
    cluster.apply_rule(&RULE_SAMPLE.replace("kind: ConfigMap", "kind: Secret")).await;
    let copy =
        eventually("the Secret copy", || async { secrets("team-a").get_opt("tls").await.unwrap() }).await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(copy.immutable, Some(true));

    secrets("default").delete("tls", &DeleteParams::default()).await.unwrap();
    eventually("the source to be gone", || async {
        secrets("default").get_opt("tls").await.unwrap().is_none().then_some(())
    })
    .await;
    secrets("default").create(&PostParams::default(), &secret("cert-2")).await.unwrap();
    eventually("the copy replaced", || async {
        let copy = secrets("team-a").get_opt("tls").await.unwrap()?;
        (copy.data?.get("tls.crt")? == &ByteString(b"cert-2".to_vec())).then_some(())
    })
    .await;
}

#[tokio::test]
async fn conflict_clears_when_the_unmanaged_object_goes() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("team-a", "app-config", json!({}), json!({"mine": "yes"})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"level": "info"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["conflictCount"] == 1).await;

    cluster.config_maps("team-a").delete("app-config", &DeleteParams::default()).await.unwrap();
    cluster.copy_has("team-a", "app-config", "level", "info").await;
    let status = cluster.rule_status("main-rule", |s| s["conflictCount"] == 0).await;
    assert_eq!(status["conditions"][0]["status"], "True");
    // The list is written empty, not left as it was (a merge patch skips absent fields).
    assert_eq!(status["conflicts"], json!([]), "{status}");
}

#[tokio::test]
async fn config_map_sync_follows_its_destination_list_and_selector() {
    let cluster = Cluster::start().await;
    cluster.namespace("apps", json!({})).await;
    cluster.namespace("listed", json!({})).await;
    cluster.namespace("prod-1", json!({"env": "prod"})).await;
    cluster.namespace("dev-1", json!({"env": "dev"})).await;
    cluster.config_map("apps", "settings", json!({}), json!({"a": "1"})).await;
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "ConfigMapSync",
        "metadata": {"name": "settings", "namespace": "apps"},
        "spec": {
            "sourceNamespace": "apps",
            "configMapName": "settings",
            "destinationNamespaces": ["listed"],
            "destinationSelector": {"matchLabels": {"env": "prod"}},
        },
    }))
    .unwrap();
    let syncs = Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "apps");
    syncs.create(&PostParams::default(), &sync).await.unwrap();
    cluster.copy_has("listed", "settings", "a", "1").await;
    cluster.copy_has("prod-1", "settings", "a", "1").await;
    assert!(cluster.config_maps("dev-1").get_opt("settings").await.unwrap().is_none());

    cluster.namespace("prod-2", json!({"env": "prod"})).await;
    cluster.copy_has("prod-2", "settings", "a", "1").await;
    let demote = json!({"metadata": {"labels": {"env": "dev"}}});
    Api::<Namespace>::all(cluster.client.clone())
        .patch("prod-1", &PatchParams::default(), &Patch::Merge(&demote))
        .await
        .unwrap();
    cluster.copy_absent("prod-1", "settings").await;
    let synced = |expected: &'static [&'static str]| {
        let syncs = syncs.clone();
        async move {
            eventually(&format!("syncedNamespaces to read {expected:?}"), || async {
                let status = serde_json::to_value(syncs.get("settings").await.unwrap().status).unwrap();
                (status["syncedNamespaces"] == json!(expected)).then_some(())
            })
            .await
        }
    };
    // Named only where the tenant wrote the name; prod-2, reached by the selector, is counted.
    synced(&["listed"]).await;

    // No destination left: the list is written empty, not left as it was.
    let namespaces = Api::<Namespace>::all(cluster.client.clone());
    namespaces.patch("prod-2", &PatchParams::default(), &Patch::Merge(&demote)).await.unwrap();
    let withdraw = json!({"metadata": {"annotations": {"kopper.dev/accept-replication-from": null}}});
    namespaces.patch("listed", &PatchParams::default(), &Patch::Merge(&withdraw)).await.unwrap();
    cluster.copy_absent("listed", "settings").await;
    cluster.copy_absent("prod-2", "settings").await;
    synced(&[]).await;

    syncs.delete("settings", &DeleteParams::default()).await.unwrap();
    cluster.copy_absent("listed", "settings").await;
    cluster.copy_absent("prod-2", "settings").await;
}

#[tokio::test]
async fn namespaces_deleted_while_copies_are_written_are_not_errors() {
    let cluster = Cluster::start().await;
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    let names: Vec<String> = (0..20).map(|i| format!("team-{i:02}")).collect();
    for name in &names {
        cluster.namespace(name, json!({})).await;
    }
    cluster.apply_rule(RULE_SAMPLE).await;
    let namespaces = Api::<Namespace>::all(cluster.client.clone());
    for name in names.iter().step_by(2) {
        namespaces.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in names.iter().skip(1).step_by(2) {
        cluster.copy_has(name, "app-config", "v", "1").await;
    }
    let status = cluster.rule_status("main-rule", |s| s["copiesInSync"] == 10).await;
    assert_eq!(status["conditions"][0]["status"], "True", "{status}");
}

#[tokio::test]
async fn source_near_the_size_limit_is_copied() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let big = "x".repeat(1_000_000);
    cluster.config_map("default", "big", copyrator(), json!({"blob": big})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    let data = cluster
        .copy_data_when("team-a", "big", |data| {
            data.and_then(|d| d.get("blob")).is_some_and(|v| v.len() == big.len())
        })
        .await;
    assert_eq!(data.unwrap()["blob"], big);
}

#[tokio::test]
async fn source_update_costs_one_write_per_copy() {
    let cluster = Cluster::start().await;
    for namespace in ["a", "b", "c", "d"] {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 4).await;
    for namespace in ["a", "b", "c", "d"] {
        cluster.copy_has(namespace, "app-config", "v", "1").await;
    }
    let before = cluster.sim.counters().writes("configmaps");
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "2"})).await;
    for namespace in ["a", "b", "c", "d"] {
        cluster.copy_has(namespace, "app-config", "v", "2").await;
    }
    // Watches cut and resumed, then a new namespace: the passes that follow write its copy
    // and nothing else.
    cluster.sim.faults().close_watches();
    cluster.namespace("e", json!({})).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 5).await;
    // One write for the source itself, one per copy, one into the new namespace.
    assert_eq!(cluster.sim.counters().writes("configmaps") - before, 1 + 4 + 1);

    let text = cluster.metrics.encode();
    let observed = text
        .lines()
        .find_map(|line| line.strip_prefix("kopper_replication_source_to_copy_seconds_count "))
        .and_then(|count| count.trim().parse::<u64>().ok());
    assert!(observed.is_some_and(|count| count > 0), "{text}");
}

/// The ReplicationRule CRD with a spec that accepts anything, so an object kopper cannot
/// read can be stored.
fn permissive_rule_crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(ReplicationRule::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(crd).unwrap()
}

#[tokio::test]
async fn unreadable_rule_is_reported_and_does_not_stop_the_others() {
    let cluster = Cluster::start_with_crds(
        Settings::default(),
        [permissive_rule_crd(), ConfigMapSync::crd(), SecretSync::crd()],
    )
    .await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"level": "info"})).await;
    cluster.config_map("default", "other", json!({"other": "yes"}), json!({"k": "v"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "level", "info").await;

    // The rule becomes unreadable: its copies stay, and an Event says why.
    let broken = json!({"spec": {"kind": 42}});
    let raw = Api::<kube::core::DynamicObject>::all_with(
        cluster.client.clone(),
        &kube::core::ApiResource::erase::<ReplicationRule>(&()),
    );
    raw.patch("main-rule", &PatchParams::default(), &Patch::Merge(&broken)).await.unwrap();
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(cluster.client.clone());
    eventually("a Warning Event for the unreadable rule", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.iter().any(|e| e.reason.as_deref() == Some("InvalidObject")).then_some(())
    })
    .await;

    // Another rule still works.
    let other = RULE_SAMPLE
        .replace("name: main-rule", "name: other-rule")
        .replace("copyrator: \"true\"", "other: \"yes\"");
    cluster.apply_rule(&other).await;
    cluster.copy_has("team-a", "other", "k", "v").await;
    assert!(cluster.config_maps("team-a").get_opt("app-config").await.unwrap().is_some());

    // Deleting the unreadable rule still removes its copies and releases it.
    raw.delete("main-rule", &DeleteParams::default()).await.unwrap();
    cluster.copy_absent("team-a", "app-config").await;
    eventually("the rule to be gone", || async {
        raw.get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn failed_writes_are_retried_and_reported_until_they_succeed() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"level": "info"})).await;
    let fault = kubesim::Fault {
        verb: Some("create".into()),
        resource: Some("configmaps".into()),
        count: 2,
        status: 500,
    };
    cluster.sim.faults().fail_next(fault);
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "level", "info").await;
    let status = cluster.rule_status("main-rule", |s| s["copiesInSync"] == 1).await;
    assert_eq!(status["conditions"][0]["status"], "True");
    let errors = cluster.metrics.encode();
    assert!(errors.contains("category=\"write\""), "{errors}");
}

#[tokio::test]
async fn copies_of_a_rule_deleted_behind_kopper_s_back_are_collected_and_nothing_else() {
    let mut cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    cluster.config_map("team-a", "their-own", json!({}), json!({"v": "theirs"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "app-config", "v", "1").await;
    cluster.config_map("default", "other", json!({}), json!({"o": "1"})).await;
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "keep", "namespace": "default"},
        "spec": {"sourceNamespace": "default", "destinationNamespace": "team-a", "configMapName": "other"},
    }))
    .unwrap();
    Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "default")
        .create(&PostParams::default(), &sync)
        .await
        .unwrap();
    cluster.copy_has("team-a", "other", "o", "1").await;

    // With kopper down, the rule's finalizer is removed by hand and the rule deleted.
    cluster.stop_operator().await;
    let no_finalizers = json!({"metadata": {"finalizers": null}});
    cluster.rules().patch("main-rule", &PatchParams::default(), &Patch::Merge(&no_finalizers)).await.unwrap();
    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    cluster.start_operator();

    cluster.copy_absent("team-a", "app-config").await;
    let theirs = cluster.config_maps("team-a").get("their-own").await.unwrap();
    assert_eq!(theirs.data.unwrap()["v"], "theirs", "objects kopper did not make are kept");
    assert!(cluster.config_maps("default").get_opt("app-config").await.unwrap().is_some());
    cluster.copy_has("team-a", "other", "o", "1").await;
}

/// A rule whose finalizer was removed by hand, deleted, and made again under its name (by
/// GitOps, say) with a narrower selector: the new object takes over the copies it wants,
/// and those of its predecessor it does not want go too, instead of staying stale for as
/// long as the name exists.
#[tokio::test]
async fn a_rule_made_again_under_its_name_removes_what_its_predecessor_copied_and_it_does_not_want() {
    let mut cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster
        .config_map("default", "kept", json!({"copyrator": "true", "tier": "kept"}), json!({"v": "1"}))
        .await;
    cluster.config_map("default", "dropped", copyrator(), json!({"v": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("team-a", "kept", "v", "1").await;
    cluster.copy_has("team-a", "dropped", "v", "1").await;
    let kept_uid = cluster.config_maps("team-a").get("kept").await.unwrap().metadata.uid;

    cluster.stop_operator().await;
    let no_finalizers = json!({"metadata": {"finalizers": null}});
    cluster.rules().patch("main-rule", &PatchParams::default(), &Patch::Merge(&no_finalizers)).await.unwrap();
    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    let narrower = RULE_SAMPLE.replace("copyrator: \"true\"", "tier: kept");
    let made_again = cluster.apply_rule(&narrower).await;
    cluster.start_operator();

    cluster.copy_absent("team-a", "dropped").await;
    let kept = eventually("the kept copy marked with the new object's uid", || async {
        let copy = cluster.config_maps("team-a").get("kept").await.ok()?;
        (copy.annotations().get("kopper.dev/rule-uid") == made_again.metadata.uid.as_ref()).then_some(copy)
    })
    .await;
    assert_eq!(kept.data.unwrap()["v"], "1");
    assert_eq!(kept.metadata.uid, kept_uid, "taken over in place, never deleted");
    assert!(cluster.config_maps("default").get_opt("dropped").await.unwrap().is_some(), "the source stays");
}

#[tokio::test]
async fn only_kopper_s_copies_are_cached_not_the_cluster_s_other_objects() {
    let cluster = Cluster::start().await;
    cluster.namespace("busy", json!({})).await;
    for index in 0..30 {
        cluster.config_map("busy", &format!("unrelated-{index}"), json!({}), json!({"n": "1"})).await;
    }
    cluster.config_map("default", "app-config", copyrator(), json!({"v": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.copy_has("busy", "app-config", "v", "1").await;
    let labels = kopper::runtime::metrics::CacheLabels {
        controller: replication::RULE_CONTROLLER.to_owned(),
        kind: "ConfigMap".to_owned(),
    };
    let copies = Api::<ConfigMap>::all(cluster.client.clone())
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=kopper"))
        .await
        .unwrap()
        .items
        .len();
    let cached = eventually("the copy cache to hold the copies", || async {
        let cached = cluster.metrics.cached_objects.get_or_create(&labels).get();
        (cached == i64::try_from(copies).unwrap()).then_some(cached)
    })
    .await;
    assert!(cached < 30, "the 30 unrelated ConfigMaps are not cached: {cached}");
}

/// A tenant namespace holding `settings-<tenant>` and a ConfigMapSync copying it into `hub`.
async fn tenant_syncing_to_hub(cluster: &Cluster, tenant: usize) {
    let namespace = format!("tenant-{tenant}");
    cluster.namespace(&namespace, json!({})).await;
    let name = format!("settings-{tenant}");
    cluster.config_map(&namespace, &name, json!({}), json!({"owner": namespace})).await;
    let sync: ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "to-hub", "namespace": namespace},
        "spec": {"sourceNamespace": namespace, "destinationNamespace": "hub", "configMapName": name},
    }))
    .unwrap();
    Api::<ConfigMapSync>::namespaced(cluster.client.clone(), &namespace)
        .create(&PostParams::default(), &sync)
        .await
        .unwrap();
}

#[tokio::test]
async fn config_map_syncs_in_many_tenant_namespaces_share_one_watch_and_all_copy() {
    let cluster = Cluster::start().await;
    cluster.namespace("hub", json!({})).await;
    let tenants = replication::cache::scoped::MAX_NAMESPACE_WATCHES + 1;
    for tenant in 0..tenants {
        tenant_syncing_to_hub(&cluster, tenant).await;
    }
    for tenant in 0..tenants {
        cluster.copy_has("hub", &format!("settings-{tenant}"), "owner", &format!("tenant-{tenant}")).await;
    }

    // One more tenant is served by the cluster-wide watch: no watch of its own.
    let watches = cluster.sim.counters().get("watch", "configmaps");
    tenant_syncing_to_hub(&cluster, tenants).await;
    cluster.copy_has("hub", &format!("settings-{tenants}"), "owner", &format!("tenant-{tenants}")).await;
    assert_eq!(cluster.sim.counters().get("watch", "configmaps"), watches, "no watch per tenant");
    cluster.config_maps("tenant-0").delete("settings-0", &DeleteParams::default()).await.unwrap();
    cluster.copy_absent("hub", "settings-0").await;

    // Back at the limit, the cluster-wide watch stays (a rule made and deleted in a loop
    // there must not cost a list of every ConfigMap each time), until far fewer remain.
    let watches = |scope: &str| {
        let labels = ScopedWatchLabels { kind: "ConfigMap".into(), scope: scope.into() };
        cluster.metrics.kept::<ReplicationMetrics>().unwrap().scoped_watches.get_or_create(&labels).get()
    };
    let cluster = &cluster;
    let delete_sync = |tenant: usize| async move {
        let syncs = Api::<ConfigMapSync>::namespaced(cluster.client.clone(), &format!("tenant-{tenant}"));
        syncs.delete("to-hub", &DeleteParams::default()).await.unwrap();
        cluster.copy_absent("hub", &format!("settings-{tenant}")).await;
        eventually("the ConfigMapSync's cleanup", || async {
            syncs.get_opt("to-hub").await.unwrap().is_none().then_some(())
        })
        .await;
    };
    let syncing = tenants + 1;
    for tenant in 0..syncing - replication::cache::scoped::MAX_NAMESPACE_WATCHES {
        delete_sync(tenant).await;
    }
    assert_eq!((watches("cluster"), watches("namespace")), (1, 0), "the cluster-wide watch stays");
    for tenant in syncing - replication::cache::scoped::MAX_NAMESPACE_WATCHES
        ..syncing - replication::cache::scoped::NAMESPACE_WATCHES_AGAIN
    {
        delete_sync(tenant).await;
    }
    eventually("watches of each source namespace again", || async {
        (watches("cluster") == 0).then_some(())
    })
    .await;
    let last = syncing - 1;
    cluster
        .config_map(
            &format!("tenant-{last}"),
            &format!("settings-{last}"),
            json!({}),
            json!({"owner": "changed"}),
        )
        .await;
    cluster.copy_has("hub", &format!("settings-{last}"), "owner", "changed").await;
}

#[tokio::test]
async fn stopping_while_a_cache_cannot_list_ends_promptly() {
    let mut cluster = Cluster::with_copy("v", "1").await;
    cluster.stop_operator().await;

    // Every list of Secrets fails, so the engine's caches never become ready and the
    // rule's pass waits for them; stopping must not wait for a list that never comes.
    let lists = cluster.sim.counters().get("list", "secrets");
    cluster.sim.faults().fail_next(kubesim::Fault {
        verb: Some("list".into()),
        resource: Some("secrets".into()),
        count: 1_000,
        status: 500,
    });
    cluster.start_operator();
    eventually("the Secret list to be retried", || async {
        (cluster.sim.counters().get("list", "secrets") >= lists + 2).then_some(())
    })
    .await;
    cluster.stop_operator().await;
}

/// Copies blocked under more names than name watches may be open cost one cluster-wide
/// watch, not a connection per name (tenants choose how many names they block), and every
/// one still follows when its blocker goes; the cluster-wide watch lasts only while that
/// many names are blocked, and a name's watch only while something blocks it.
#[tokio::test]
async fn copies_blocked_under_many_names_share_one_watch_and_follow_when_freed() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let names = replication::cache::scoped::MAX_NAME_WATCHES + 3;
    for n in 0..names {
        cluster.config_map("team-a", &format!("app-{n}"), json!({}), json!({"mine": "yes"})).await;
        cluster.config_map("default", &format!("app-{n}"), copyrator(), json!({"level": "info"})).await;
    }
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["conflictCount"] == names).await;

    let watches = |scope: &str| {
        let labels = ScopedWatchLabels { kind: "ConfigMap".into(), scope: scope.into() };
        cluster.metrics.kept::<ReplicationMetrics>().unwrap().scoped_watches.get_or_create(&labels).get()
    };
    eventually("the name watches to give way to one cluster-wide watch", || async {
        (watches("cluster") == 1 && watches("name") == 0).then_some(())
    })
    .await;
    for n in [0, names - 1] {
        cluster.config_maps("team-a").delete(&format!("app-{n}"), &DeleteParams::default()).await.unwrap();
        cluster.copy_has("team-a", &format!("app-{n}"), "level", "info").await;
    }
    cluster.rule_status("main-rule", |s| s["conflictCount"] == names - 2).await;
    assert_eq!(watches("cluster"), 1, "still more names blocked than the cap");

    // Fewer blocked names than the cap, once a blocker goes: the cluster-wide watch gives
    // way to a watch per name still blocked (a name whose blocker went needs none).
    cluster
        .config_maps("team-a")
        .delete(&format!("app-{}", names - 2), &DeleteParams::default())
        .await
        .unwrap();
    cluster.copy_has("team-a", &format!("app-{}", names - 2), "level", "info").await;
    let still_blocked = names - 3;
    eventually("the cluster-wide watch to give way to the name watches still needed", || async {
        (watches("cluster") == 0 && watches("name") as usize == still_blocked).then_some(())
    })
    .await;

    // Names whose sources are gone need no watch either, and a copy still follows when its
    // blocker goes.
    for n in 1..=4 {
        cluster.config_maps("default").delete(&format!("app-{n}"), &DeleteParams::default()).await.unwrap();
    }
    eventually("the watches of names no source has any more to stop", || async {
        (watches("cluster") == 0 && watches("name") as usize == still_blocked - 4).then_some(())
    })
    .await;
    cluster.config_maps("team-a").delete("app-5", &DeleteParams::default()).await.unwrap();
    cluster.copy_has("team-a", "app-5", "level", "info").await;
    eventually("the freed name's watch to stop", || async {
        (watches("name") as usize == still_blocked - 5).then_some(())
    })
    .await;
}

/// Memory follows what is replicated now, not what was: a source's content is dropped once
/// no rule copies it, so creating and deleting rules and large sources in a loop (what a
/// tenant can do) leaves nothing behind.
#[tokio::test]
async fn source_content_is_forgotten_once_no_rule_copies_it() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let held = || {
        let labels = KindLabels { kind: "ConfigMap".into() };
        cluster
            .metrics
            .kept::<ReplicationMetrics>()
            .unwrap()
            .cached_source_contents
            .get_or_create(&labels)
            .get()
    };
    let large = "x".repeat(200 * 1024);
    for round in 0..3 {
        let name = format!("big-{round}");
        cluster.config_map("default", &name, copyrator(), json!({"blob": large})).await;
        cluster.apply_rule(RULE_SAMPLE).await;
        cluster.copy_data_when("team-a", &name, |data| data.is_some()).await;
        assert!(held() >= 1, "the source's content is held while it is copied");
        cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
        cluster.copy_absent("team-a", &name).await;
        eventually("the rule to be gone", || async {
            cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
        })
        .await;
        cluster.config_maps("default").delete(&name, &DeleteParams::default()).await.unwrap();
        eventually("the source's content to be forgotten", || async { (held() == 0).then_some(()) }).await;
    }
}

/// A ConfigMapSync whose ConfigMap does not exist is not Ready and says so, then copies it
/// as soon as it is created.
#[tokio::test]
async fn a_config_map_sync_without_its_source_is_not_ready_until_the_source_exists() {
    let cluster = Cluster::start().await;
    for namespace in ["source-namespace", "destination-namespace"] {
        cluster.namespace(namespace, json!({})).await;
    }
    let sync: ConfigMapSync = kopper::samples::of_kind(SYNC_SAMPLE, "ConfigMapSync").unwrap();
    let api = Api::<ConfigMapSync>::namespaced(cluster.client.clone(), "source-namespace");
    api.create(&PostParams::default(), &sync).await.unwrap();
    let ready = |reason: &'static str| {
        let api = api.clone();
        async move {
            eventually(&format!("Ready reason {reason}"), || async {
                let status = api.get("configmapsync-sample").await.unwrap().status?;
                let ready = status.conditions.into_iter().find(|c| c.type_ == "Ready")?;
                (ready.reason == reason).then_some(ready)
            })
            .await
        }
    };
    let missing = ready("SourceNotFound").await;
    assert_eq!(missing.status, "False");
    assert!(missing.message.contains("source-namespace/configmap-name"), "{}", missing.message);

    cluster.config_map("source-namespace", "configmap-name", json!({}), json!({"a": "1"})).await;
    cluster.copy_has("destination-namespace", "configmap-name", "a", "1").await;
    assert_eq!(ready("Synced").await.status, "True");
}
