//! NamespaceAccess end to end: the controllers run against a fresh kubesim per test.

use crate::common;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;

use kopper::controllers::namespace_access::{self, NamespaceAccess};
use kopper::runtime::{Context, Metrics, Settings};

use crate::common::{InProcess, eventually};

const SEED_SAMPLE: &str = include_str!("../../../../config/samples/namespaceaccess-group-per-namespace.yaml");

/// One kubesim with the CRD installed, and the controllers running against it.
struct Cluster {
    sim: kubesim::Server,
    client: Client,
    operator: Option<InProcess>,
    /// The running operator's metrics.
    metrics: Arc<Metrics>,
}

impl Cluster {
    async fn start() -> Self {
        Self::start_with_crd(NamespaceAccess::crd()).await
    }

    async fn start_with_crd(crd: CustomResourceDefinition) -> Self {
        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let client = sim.client();
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .unwrap();
        let mut cluster = Self { sim, client, operator: None, metrics: Arc::default() };
        cluster.start_operator();
        cluster
    }

    /// Where several tests start: namespace team-1 and the seed policy, once the policy's
    /// binding there (`ad-kubernetes-team-1`) exists; with that binding.
    async fn with_seed_binding() -> (Self, RoleBinding) {
        let cluster = Self::start().await;
        cluster.namespace("team-1", json!({})).await;
        cluster.apply_policy(SEED_SAMPLE).await;
        let binding =
            cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
        (cluster, binding)
    }

    fn start_operator(&mut self) {
        self.metrics = Arc::default();
        let ctx = Arc::new(Context::new(self.client.clone(), self.metrics.clone(), Settings::default()));
        self.operator = Some(InProcess::spawn(|stopped| namespace_access::run(ctx, stopped)));
    }

    async fn stop_operator(&mut self) {
        self.operator.take().unwrap().stop().await;
    }

    /// Stops kubesim and starts it again on the same address with an empty store, while the
    /// controllers run on.
    async fn with_api_server_restarted_empty(self) -> Self {
        let Self { sim, operator, metrics, .. } = self;
        let sim = common::restart_api_server(sim, kubesim::Config::default()).await;
        let client = sim.client();
        Self { sim, client, operator, metrics }
    }

    fn policies(&self) -> Api<NamespaceAccess> {
        Api::all(self.client.clone())
    }

    fn bindings(&self, namespace: &str) -> Api<RoleBinding> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn apply_policy(&self, yaml: &str) -> NamespaceAccess {
        let policy: NamespaceAccess = serde_yaml::from_str(yaml).unwrap();
        let params = PatchParams::apply("test").force();
        self.policies().patch(&policy.name_any(), &params, &Patch::Apply(&policy)).await.unwrap()
    }

    async fn namespace(&self, name: &str, labels: serde_json::Value) {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    async fn label_namespace(&self, name: &str, labels: serde_json::Value) {
        let patch = json!({"metadata": {"labels": labels}});
        Api::<Namespace>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits until the binding exists and `check` accepts it.
    async fn binding_where(
        &self,
        namespace: &str,
        name: &str,
        check: impl Fn(&RoleBinding) -> bool,
    ) -> RoleBinding {
        let api = self.bindings(namespace);
        eventually(&format!("RoleBinding {namespace}/{name}"), || async {
            api.get_opt(name).await.unwrap().filter(|binding| check(binding))
        })
        .await
    }

    async fn binding_gone(&self, namespace: &str, name: &str) {
        let api = self.bindings(namespace);
        eventually(&format!("RoleBinding {namespace}/{name} to go"), || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await
    }

    /// Waits until the policy's status satisfies `check`.
    async fn status_where(
        &self,
        policy: &str,
        check: impl Fn(&namespace_access::NamespaceAccessStatus) -> bool,
    ) -> namespace_access::NamespaceAccessStatus {
        let api = self.policies();
        eventually(&format!("status of {policy}"), || async {
            api.get(policy).await.unwrap().status.filter(|status| check(status))
        })
        .await
    }

    async fn event_with_reason(&self, policy: &str, reason: &str) -> Event {
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        eventually(&format!("{reason} event for {policy}"), || async {
            api.list(&Default::default()).await.unwrap().items.into_iter().find(|event| {
                event.reason.as_deref() == Some(reason)
                    && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(policy)
            })
        })
        .await
    }
}

fn ready(status: &namespace_access::NamespaceAccessStatus) -> Option<(&str, &str)> {
    status.conditions.iter().find(|c| c.type_ == "Ready").map(|c| (c.status.as_str(), c.reason.as_str()))
}

fn subject_names(binding: &RoleBinding) -> Vec<String> {
    binding.subjects.iter().flatten().map(|subject| subject.name.clone()).collect()
}

fn is_seed_binding(namespace: &str) -> impl Fn(&RoleBinding) -> bool + '_ {
    move |binding| {
        binding.role_ref.kind == "ClusterRole"
            && binding.role_ref.name == "edit"
            && binding
                .subjects
                .iter()
                .flatten()
                .any(|s| s.kind == "Group" && s.name == format!("ad-kubernetes-{namespace}"))
    }
}

const TEAM_POLICY: &str = r#"
apiVersion: kopper.dev/v1alpha1
kind: NamespaceAccess
metadata: {name: teams}
spec:
  namespaces:
    selector: {matchExpressions: [{key: team, operator: Exists}]}
  bindings:
  - name: "team-{labels.team}"
    roleRef: {kind: ClusterRole, name: edit}
    subjects: [{kind: Group, name: "team-{labels.team}"}]
"#;

#[tokio::test]
async fn seed_policy_gives_every_namespace_its_own_editors() {
    let cluster = Cluster::start().await;
    cluster.namespace("before", json!({})).await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.namespace("after", json!({})).await;

    for namespace in ["before", "after"] {
        let binding = cluster
            .binding_where(namespace, &format!("ad-kubernetes-{namespace}"), is_seed_binding(namespace))
            .await;
        assert_eq!(binding.labels()["app.kubernetes.io/managed-by"], "kopper");
        assert_eq!(binding.labels()["kopper.dev/namespace-access"], "ad-kubernetes");
        assert_eq!(binding.owner_references()[0].kind, "NamespaceAccess");
    }
    let status = cluster
        .status_where("ad-kubernetes", |s| {
            ready(s) == Some(("True", "BindingsReady")) && s.bindings_ready == 2
        })
        .await;
    assert_eq!(status.matched_namespaces, 2, "system namespaces are not selected");
    assert!(cluster.bindings("kube-system").get_opt("ad-kubernetes-kube-system").await.unwrap().is_none());
    assert!(cluster.bindings("default").get_opt("ad-kubernetes-default").await.unwrap().is_none());
}

/// An API server back without its data holds objects of the same names under lower
/// resourceVersions: the controllers' caches must be listed again, or they would keep the
/// old binding and never make it in the new cluster.
#[tokio::test]
async fn an_api_server_back_without_its_data_gets_its_bindings_made_again() {
    let (cluster, _) = Cluster::with_seed_binding().await;
    let name = "ad-kubernetes-team-1";

    let cluster = cluster.with_api_server_restarted_empty().await;
    assert!(cluster.bindings("team-1").get_opt(name).await.unwrap().is_none(), "an empty store");
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    crds.create(&PostParams::default(), &NamespaceAccess::crd()).await.unwrap();
    cluster.namespace("team-1", json!({})).await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.binding_where("team-1", name, is_seed_binding("team-1")).await;
    cluster.namespace("team-2", json!({})).await;
    cluster.binding_where("team-2", "ad-kubernetes-team-2", is_seed_binding("team-2")).await;
    cluster.status_where("ad-kubernetes", |status| status.bindings_ready == 2).await;
}

#[tokio::test]
async fn binding_is_restored_after_manual_delete_and_edit() {
    let (cluster, original) = Cluster::with_seed_binding().await;
    let name = "ad-kubernetes-team-1";

    cluster.bindings("team-1").delete(name, &DeleteParams::default()).await.unwrap();
    let restored = cluster.binding_where("team-1", name, |b| b.uid() != original.uid()).await;
    assert!(is_seed_binding("team-1")(&restored));

    let edit = json!({"subjects": [{"kind": "Group", "name": "intruders", "apiGroup": "rbac.authorization.k8s.io"}]});
    cluster.bindings("team-1").patch(name, &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
    cluster.binding_where("team-1", name, |b| subject_names(b) == ["ad-kubernetes-team-1"]).await;
}

#[tokio::test]
async fn namespace_gains_and_loses_access_with_its_labels() {
    let cluster = Cluster::start().await;
    cluster.apply_policy(TEAM_POLICY).await;
    cluster.namespace("shop", json!({})).await;
    cluster.status_where("teams", |s| ready(s) == Some(("True", "BindingsReady"))).await;
    assert!(cluster.bindings("shop").list(&Default::default()).await.unwrap().items.is_empty());

    cluster.label_namespace("shop", json!({"team": "blue"})).await;
    let binding = cluster.binding_where("shop", "team-blue", |_| true).await;
    assert_eq!(subject_names(&binding), ["team-blue"]);

    cluster.label_namespace("shop", json!({"team": null})).await;
    cluster.binding_gone("shop", "team-blue").await;
}

#[tokio::test]
async fn policy_change_updates_bindings_and_deleting_the_policy_removes_them() {
    let (cluster, _) = Cluster::with_seed_binding().await;
    let name = "ad-kubernetes-team-1";

    // roleRef cannot change in place: kopper replaces the binding.
    cluster.apply_policy(&SEED_SAMPLE.replace("name: edit", "name: view")).await;
    cluster.binding_where("team-1", name, |b| b.role_ref.name == "view").await;
    let status = cluster.status_where("ad-kubernetes", |s| s.observed_generation == Some(2)).await;
    assert_eq!(status.conditions[0].observed_generation, Some(2));

    cluster.policies().delete("ad-kubernetes", &DeleteParams::default()).await.unwrap();
    cluster.binding_gone("team-1", name).await;
}

#[tokio::test]
async fn user_binding_with_a_managed_name_is_left_alone_and_reported() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-1", json!({})).await;
    let mine: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ad-kubernetes-team-1"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    }))
    .unwrap();
    let mine = cluster.bindings("team-1").create(&PostParams::default(), &mine).await.unwrap();
    cluster.apply_policy(SEED_SAMPLE).await;

    let status = cluster.status_where("ad-kubernetes", |s| s.conflict_count == 1).await;
    assert_eq!(ready(&status), Some(("False", "Conflict")));
    assert_eq!(status.conflicts[0].namespace, "team-1");
    assert_eq!(status.conflicts[0].name, "ad-kubernetes-team-1");
    assert_eq!(status.conflicts[0].reason, "NotManagedByKopper");
    let event = cluster.event_with_reason("ad-kubernetes", "BindingConflict").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    let after = cluster.bindings("team-1").get("ad-kubernetes-team-1").await.unwrap();
    assert_eq!(
        after.resource_version(),
        mine.resource_version(),
        "kopper never writes a binding it did not make"
    );

    // Once its owner deletes it, the name is free: kopper makes its own and the conflict goes.
    cluster.bindings("team-1").delete("ad-kubernetes-team-1", &DeleteParams::default()).await.unwrap();
    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    let status =
        cluster.status_where("ad-kubernetes", |s| s.conflict_count == 0 && s.bindings_ready == 1).await;
    assert_eq!(ready(&status), Some(("True", "BindingsReady")));
}

#[tokio::test]
async fn older_policy_wins_a_contested_name_and_the_other_reports_it() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-1", json!({})).await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    let rival =
        SEED_SAMPLE.replace("name: ad-kubernetes\n", "name: rival\n").replace("name: edit", "name: admin");
    cluster.apply_policy(&rival).await;

    let status = cluster.status_where("rival", |s| s.conflict_count == 1).await;
    assert_eq!(status.conflicts[0].reason, "ClaimedByOtherPolicy");
    let binding = cluster.bindings("team-1").get("ad-kubernetes-team-1").await.unwrap();
    assert_eq!(binding.role_ref.name, "edit");
    assert_eq!(binding.labels()["kopper.dev/namespace-access"], "ad-kubernetes");
}

#[tokio::test]
async fn missing_label_is_reported_with_the_field_not_retried() {
    let cluster = Cluster::start().await;
    let policy = TEAM_POLICY
        .replace("selector: {matchExpressions: [{key: team, operator: Exists}]}", "include: [\"shop\"]");
    cluster.namespace("shop", json!({})).await;
    cluster.apply_policy(&policy).await;

    let status = cluster.status_where("teams", |s| ready(s).is_some_and(|r| r.1 == "InvalidBinding")).await;
    let message = &status.conditions[0].message;
    assert!(message.contains(r#"spec.bindings[0].name: namespace "shop" has no label "team""#), "{message}");
    cluster.event_with_reason("teams", "InvalidBinding").await;

    cluster.label_namespace("shop", json!({"team": "red"})).await;
    cluster.binding_where("shop", "team-red", |_| true).await;
    cluster.status_where("teams", |s| ready(s) == Some(("True", "BindingsReady"))).await;
}

#[tokio::test]
async fn restarted_operator_converges_on_changes_it_missed() {
    let mut cluster = Cluster::start().await;
    cluster.namespace("team-1", json!({})).await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    cluster.stop_operator().await;

    cluster.bindings("team-1").delete("ad-kubernetes-team-1", &DeleteParams::default()).await.unwrap();
    cluster.namespace("team-2", json!({})).await;
    cluster.start_operator();

    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    cluster.binding_where("team-2", "ad-kubernetes-team-2", is_seed_binding("team-2")).await;
    cluster.status_where("ad-kubernetes", |s| s.bindings_ready == 2).await;
}

/// A restart over namespaces whose bindings are in place reads none of them: kopper's index of
/// its own bindings says nothing is to be written (at 10,000 namespaces, 10,000 lists fewer at
/// every restart), and writes nothing.
#[tokio::test]
async fn a_restart_over_bindings_in_place_reads_no_namespace_and_writes_nothing() {
    let mut cluster = Cluster::start().await;
    let teams = ["team-1", "team-2", "team-3", "team-4", "team-5", "team-6"];
    for team in teams {
        cluster.namespace(team, json!({})).await;
    }
    cluster.apply_policy(SEED_SAMPLE).await;
    for team in teams {
        cluster.binding_where(team, &format!("ad-kubernetes-{team}"), is_seed_binding(team)).await;
    }
    cluster.stop_operator().await;
    let counters = cluster.sim.counters();
    let (lists, writes) = (counters.get("list", "rolebindings"), counters.writes("rolebindings"));
    cluster.start_operator();
    let namespaces = Api::<Namespace>::all(cluster.client.clone()).list(&Default::default()).await.unwrap();
    let reconciled = r#"kopper_reconciles_total{controller="namespace-access"}"#;
    eventually("every namespace reconciled after the restart", || async {
        let count = cluster
            .metrics
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix(reconciled)?.trim().parse::<usize>().ok());
        count.filter(|count| *count >= namespaces.items.len()).map(drop)
    })
    .await;
    let counters = cluster.sim.counters();
    assert_eq!(counters.writes("rolebindings"), writes, "nothing written");
    let read = counters.get("list", "rolebindings") - lists;
    assert!(read <= 2, "only the two RoleBinding watches list, no namespace is read: {read} lists");
}

#[tokio::test]
async fn injected_server_errors_are_retried_until_the_binding_exists() {
    let cluster = Cluster::start().await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.status_where("ad-kubernetes", |s| ready(s).is_some()).await;
    for status in [500, 409] {
        cluster.sim.faults().fail_next(kubesim::Fault {
            verb: Some("create".into()),
            resource: Some("rolebindings".into()),
            count: 2,
            status,
        });
    }
    cluster.namespace("team-1", json!({})).await;
    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    assert!(cluster.sim.counters().get("create", "rolebindings") >= 3);
}

#[tokio::test]
async fn refused_binding_is_reported_and_retried_when_something_changes() {
    let cluster = Cluster::start().await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.status_where("ad-kubernetes", |s| ready(s).is_some()).await;
    cluster.sim.faults().fail_next(kubesim::Fault {
        verb: Some("create".into()),
        resource: Some("rolebindings".into()),
        count: 3,
        status: 403,
    });
    cluster.namespace("team-1", json!({})).await;

    let status = cluster.status_where("ad-kubernetes", |s| ready(s) == Some(("False", "Refused"))).await;
    assert!(status.conditions[0].message.contains("team-1/ad-kubernetes-team-1"), "{:?}", status.conditions);
    let event = cluster.event_with_reason("ad-kubernetes", "Refused").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // A refusal waits for a change rather than being retried hot; each change retries it.
    let api = cluster.bindings("team-1");
    let mut touches = 0;
    eventually("binding after the refusals run out", || {
        touches += 1;
        let (cluster, api, touch) = (&cluster, &api, touches);
        async move {
            cluster.label_namespace("team-1", json!({"touched": touch.to_string()})).await;
            api.get_opt("ad-kubernetes-team-1").await.unwrap()
        }
    })
    .await;
    cluster.status_where("ad-kubernetes", |s| ready(s) == Some(("True", "BindingsReady"))).await;
}

#[tokio::test]
async fn unreadable_policy_is_reported_and_does_not_stop_the_others() {
    // A schema that accepts anything, as an older or hand-edited CRD might.
    let mut crd = NamespaceAccess::crd();
    let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    crd.spec.versions[0].schema.as_mut().unwrap().open_api_v3_schema =
        Some(serde_json::from_value(schema).unwrap());
    let cluster = Cluster::start_with_crd(crd).await;
    let resource = kube::api::ApiResource::erase::<NamespaceAccess>(&());
    let broken: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "NamespaceAccess",
        "metadata": {"name": "broken"}, "spec": {"bindings": "not a list"},
    }))
    .unwrap();
    Api::<kube::api::DynamicObject>::all_with(cluster.client.clone(), &resource)
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();

    cluster.namespace("team-1", json!({})).await;
    cluster.apply_policy(SEED_SAMPLE).await;
    cluster.binding_where("team-1", "ad-kubernetes-team-1", is_seed_binding("team-1")).await;
    cluster.status_where("ad-kubernetes", |s| ready(s) == Some(("True", "BindingsReady"))).await;
    let event = cluster.event_with_reason("broken", "InvalidObject").await;
    assert!(event.note.unwrap_or_default().contains("cannot be read"));
}
