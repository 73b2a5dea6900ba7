//! ReplicationRules for kinds besides ConfigMap and Secret that the admin allows
//! (`--replicate-kinds`): NetworkPolicy, LimitRange, ResourceQuota, Role, RoleBinding and a
//! custom resource, copied from a protected namespace; the refusals (kind not allowed, not
//! served, source not protected, escalation); copies judged by what kopper wrote, so that
//! fields the API server fills in never cause a write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Api, Client, CustomResourceExt};
use serde_json::{Value, json};

use kopper::controllers::replication;
use kopper::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use kopper::kinds::{AllowedKinds, parse_entry};
use kopper::runtime::{Context, Metrics, Settings};
use kopper::tenancy::{DestinationPolicy, ProtectedNamespaces};

use super::Cluster;
use crate::common::{InProcess, eventually, eventually_within};

/// The namespace the sources live in: protected (kopper's own, for these tests), so no
/// tenant can write there.
const PLATFORM: &str = "platform";

/// One kind under test: how to reach it, a source's content, the same changed, and where
/// to read a value of it back.
struct Kind {
    entry: &'static str,
    resource: ApiResource,
    source: Value,
    updated: Value,
    /// A JSON pointer into the object and the value it holds in `source` and `updated`.
    probe: (&'static str, Value, Value),
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn network_policy() -> Kind {
    Kind {
        entry: "networking.k8s.io/v1/NetworkPolicy",
        resource: resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
        // No policyTypes: the API server fills them in.
        source: json!({"spec": {"podSelector": {}}}),
        updated: json!({"spec": {"podSelector": {"matchLabels": {"app": "web"}}}}),
        probe: ("/spec/podSelector", json!({}), json!({"matchLabels": {"app": "web"}})),
    }
}

fn limit_range() -> Kind {
    Kind {
        entry: "v1/LimitRange",
        resource: resource("", "v1", "LimitRange", "limitranges"),
        // Pod limits: no defaults filled in, so an edit of the max alone stays valid.
        source: json!({"spec": {"limits": [{"type": "Pod", "max": {"cpu": "2"}}]}}),
        updated: json!({"spec": {"limits": [{"type": "Pod", "max": {"cpu": "4"}}]}}),
        probe: ("/spec/limits/0/max/cpu", json!("2"), json!("4")),
    }
}

fn resource_quota() -> Kind {
    Kind {
        entry: "v1/ResourceQuota",
        resource: resource("", "v1", "ResourceQuota", "resourcequotas"),
        source: json!({"spec": {"hard": {"pods": "10"}}}),
        updated: json!({"spec": {"hard": {"pods": "20"}}}),
        probe: ("/spec/hard/pods", json!("10"), json!("20")),
    }
}

fn role() -> Kind {
    Kind {
        entry: "rbac.authorization.k8s.io/v1/Role",
        resource: resource("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        source: json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        updated: json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
        probe: ("/rules/0/verbs", json!(["get"]), json!(["get", "list"])),
    }
}

fn role_binding() -> Kind {
    let role_ref = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"});
    let subject =
        |name: &str| json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}]);
    Kind {
        entry: "rbac.authorization.k8s.io/v1/RoleBinding",
        resource: resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        source: json!({"roleRef": role_ref, "subjects": subject("auditors")}),
        updated: json!({"roleRef": role_ref, "subjects": subject("reviewers")}),
        probe: ("/subjects/0/name", json!("auditors"), json!("reviewers")),
    }
}

fn widget() -> Kind {
    Kind {
        entry: "example.com/v1/Widget",
        resource: resource("example.com", "v1", "Widget", "widgets"),
        // `spec.size` is defaulted by the CRD's schema.
        source: json!({"spec": {"color": "blue"}}),
        updated: json!({"spec": {"color": "red"}}),
        probe: ("/spec/color", json!("blue"), json!("red")),
    }
}

fn all_kinds() -> Vec<Kind> {
    vec![network_policy(), limit_range(), resource_quota(), role(), role_binding(), widget()]
}

/// A CRD for Widgets whose `spec.size` defaults to 3.
fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {
                        "color": {"type": "string"},
                        "size": {"type": "integer", "default": 3},
                    },
                }}}},
            }],
        },
    }))
    .unwrap()
}

/// Settings allowing `entries`, with [`PLATFORM`] protected.
fn settings(entries: &[&str]) -> Settings {
    Settings {
        destinations: DestinationPolicy {
            protected: ProtectedNamespaces::new(Some(PLATFORM), &[]),
            ..DestinationPolicy::default()
        },
        replicate_kinds: AllowedKinds::new(entries.iter().map(|entry| parse_entry(entry).unwrap())),
        ..Settings::default()
    }
}

fn rule_crds() -> [CustomResourceDefinition; 3] {
    [ReplicationRule::crd(), ConfigMapSync::crd(), SecretSync::crd()]
}

/// A cluster with the Widget CRD (installed before kopper starts, so discovery finds it)
/// and the namespaces `platform` and `team-a`; kopper allows `entries`.
async fn cluster_with(entries: &[&str]) -> Cluster {
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let crds = Api::<CustomResourceDefinition>::all(sim.client());
    crds.create(&PostParams::default(), &widget_crd()).await.unwrap();
    wait_served(&sim.client(), &widget().resource).await;
    let mut cluster = Cluster::on(sim, settings(entries), rule_crds()).await;
    cluster.start_operator();
    cluster.namespace(PLATFORM, json!({})).await;
    cluster.namespace("team-a", json!({})).await;
    cluster
}

async fn wait_served(client: &Client, resource: &ApiResource) {
    let api = Api::<DynamicObject>::all_with(client.clone(), resource);
    eventually(&format!("{} to be served", resource.plural), || async {
        api.list(&Default::default()).await.ok().map(drop)
    })
    .await;
}

impl Cluster {
    fn objects(&self, kind: &Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &kind.resource)
    }

    /// Creates or replaces the source `name` of `kind` in `namespace` with `body`, labelled
    /// for the rules.
    async fn put_source(&self, kind: &Kind, namespace: &str, name: &str, body: &Value) {
        let mut object = body.clone();
        object["apiVersion"] = json!(kind.resource.api_version);
        object["kind"] = json!(kind.resource.kind);
        object["metadata"] = json!({"name": name, "namespace": namespace, "labels": {"replicate": "yes"}});
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let params = PatchParams::apply("test").force();
        self.objects(kind, namespace).patch(name, &params, &Patch::Apply(&object)).await.unwrap();
    }

    /// A ReplicationRule named `name` copying `kind` from `namespaces` into every namespace.
    async fn kind_rule(&self, name: &str, kind: &Kind, namespaces: &[&str], extra: Value) {
        let mut spec = json!({
            "apiVersion": kind.resource.api_version,
            "kind": kind.resource.kind,
            "namespaces": namespaces,
            "selector": {"matchLabels": {"replicate": "yes"}},
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            spec[key] = value.clone();
        }
        let rule: ReplicationRule = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "ReplicationRule",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let params = PatchParams::apply("test").force();
        self.rules().patch(name, &params, &Patch::Apply(&rule)).await.unwrap();
    }

    /// The copy of `kind` at `namespace/name` once `done` holds for it.
    async fn copy_of_kind_when(
        &self,
        kind: &Kind,
        namespace: &str,
        name: &str,
        done: impl Fn(Option<&DynamicObject>) -> bool,
    ) -> Option<DynamicObject> {
        let api = self.objects(kind, namespace);
        eventually(&format!("{} {namespace}/{name}", kind.resource.kind), || async {
            let found = api.get_opt(name).await.unwrap();
            done(found.as_ref()).then_some(found)
        })
        .await
    }

    async fn copy_holds(&self, kind: &Kind, namespace: &str, name: &str, value: &Value) -> DynamicObject {
        let (pointer, _, _) = &kind.probe;
        let found = self
            .copy_of_kind_when(kind, namespace, name, |copy| {
                copy.and_then(|copy| serde_json::to_value(copy).ok())
                    .is_some_and(|copy| copy.pointer(pointer) == Some(value))
            })
            .await;
        found.unwrap()
    }

    /// Writes to every resource of `kinds`, and dry-runs.
    fn writes_of(&self, kinds: &[&Kind]) -> (u64, u64) {
        let counters = self.sim.counters();
        let writes = kinds.iter().map(|kind| counters.writes(&kind.resource.plural)).sum();
        let dry_runs = kinds.iter().map(|kind| counters.dry_runs(&kind.resource.plural)).sum();
        (writes, dry_runs)
    }

    /// Cuts the watches and wakes every rule by a namespace label no rule reads; waits for a
    /// pass to run.
    async fn idle_round(&self, round: usize) {
        self.sim.faults().close_watches();
        let reconciles = self.reconciles();
        let unrelated = json!({"metadata": {"labels": {"unrelated": round.to_string()}}});
        Api::<Namespace>::all(self.client.clone())
            .patch("team-a", &PatchParams::default(), &Patch::Merge(&unrelated))
            .await
            .unwrap();
        eventually("a pass after the namespace change", || async {
            (self.reconciles() > reconciles).then_some(())
        })
        .await;
    }
}

fn reason(status: &Value) -> &str {
    status["conditions"][0]["reason"].as_str().unwrap_or_default()
}

fn message(status: &Value) -> &str {
    status["conditions"][0]["message"].as_str().unwrap_or_default()
}

/// Every kind is copied into existing and new namespaces, follows its source, is restored
/// when edited or deleted, leaves an object of the same name kopper did not make alone
/// (reported as a conflict), and goes with its source.
#[tokio::test]
async fn every_allowed_kind_is_copied_restored_and_removed_with_its_source() {
    let kinds = all_kinds();
    let entries: Vec<&str> = kinds.iter().map(|kind| kind.entry).collect();
    let cluster = cluster_with(&entries).await;
    // An object of the same name kopper did not make, in team-c, for every kind.
    cluster.namespace("team-c", json!({})).await;
    for kind in &kinds {
        let mut unmanaged = kind.source.clone();
        unmanaged["apiVersion"] = json!(kind.resource.api_version);
        unmanaged["kind"] = json!(kind.resource.kind);
        unmanaged["metadata"] = json!({"name": "baseline", "namespace": "team-c"});
        let unmanaged: DynamicObject = serde_json::from_value(unmanaged).unwrap();
        cluster.objects(kind, "team-c").create(&PostParams::default(), &unmanaged).await.unwrap();
    }
    for (n, kind) in kinds.iter().enumerate() {
        cluster.put_source(kind, PLATFORM, "baseline", &kind.source).await;
        cluster.kind_rule(&format!("rule-{n}"), kind, &[PLATFORM], json!({})).await;
    }
    for kind in &kinds {
        let copy = cluster.copy_holds(kind, "team-a", "baseline", &kind.probe.1).await;
        let labels = copy.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("app.kubernetes.io/managed-by").map(String::as_str), Some("kopper"));
        assert_eq!(labels.get("replicate").map(String::as_str), Some("yes"), "the source's label");
    }
    for (n, kind) in kinds.iter().enumerate() {
        let status = cluster.rule_status(&format!("rule-{n}"), |s| s["conflictCount"] == 1).await;
        assert_eq!(status["conflicts"][0]["namespace"], "team-c", "{}: {status}", kind.entry);
        assert_eq!(status["conflicts"][0]["reason"], "NotManagedByKopper", "{}: {status}", kind.entry);
        let untouched = cluster.objects(kind, "team-c").get("baseline").await.unwrap();
        assert!(untouched.metadata.labels.unwrap_or_default().is_empty(), "{}: left as it is", kind.entry);
    }

    // A namespace created later gets every copy.
    cluster.namespace("team-b", json!({})).await;
    for kind in &kinds {
        cluster.copy_holds(kind, "team-b", "baseline", &kind.probe.1).await;
    }

    // Source updates reach every copy.
    for kind in &kinds {
        cluster.put_source(kind, PLATFORM, "baseline", &kind.updated).await;
    }
    for kind in &kinds {
        cluster.copy_holds(kind, "team-a", "baseline", &kind.probe.2).await;
        cluster.copy_holds(kind, "team-b", "baseline", &kind.probe.2).await;
    }

    // A copy edited by someone is restored; one deleted is made again.
    for kind in &kinds {
        let (pointer, original, _) = &kind.probe;
        let mut edited =
            serde_json::to_value(cluster.objects(kind, "team-a").get("baseline").await.unwrap()).unwrap();
        *edited.pointer_mut(pointer).unwrap() = original.clone();
        let edited: DynamicObject = serde_json::from_value(edited).unwrap();
        cluster.objects(kind, "team-a").replace("baseline", &PostParams::default(), &edited).await.unwrap();
        let deleted = cluster.objects(kind, "team-b").get("baseline").await.unwrap().metadata.uid;
        cluster.objects(kind, "team-b").delete("baseline", &DeleteParams::default()).await.unwrap();
        cluster.copy_holds(kind, "team-a", "baseline", &kind.probe.2).await;
        let again = cluster.copy_holds(kind, "team-b", "baseline", &kind.probe.2).await;
        assert_ne!(again.metadata.uid, deleted, "{}: made again", kind.entry);
    }

    // The source goes, and so do its copies; the object kopper did not make stays.
    for kind in &kinds {
        cluster.objects(kind, PLATFORM).delete("baseline", &DeleteParams::default()).await.unwrap();
    }
    for kind in &kinds {
        for namespace in ["team-a", "team-b"] {
            cluster.copy_of_kind_when(kind, namespace, "baseline", |copy| copy.is_none()).await;
        }
        assert!(
            cluster.objects(kind, "team-c").get_opt("baseline").await.unwrap().is_some(),
            "{}",
            kind.entry
        );
    }
}

/// Copies whose kind the API server fills in (a NetworkPolicy's policyTypes, a custom
/// resource's schema default) are judged by what kopper wrote: converged, idle passes write
/// nothing, and after a restart dry-runs alone tell they are in sync.
#[tokio::test]
async fn server_defaulted_copies_cause_no_write_while_idle_nor_after_a_restart() {
    let kinds = [network_policy(), widget()];
    let mut cluster = cluster_with(&[kinds[0].entry, kinds[1].entry]).await;
    for namespace in ["team-b", "team-c"] {
        cluster.namespace(namespace, json!({})).await;
    }
    for (n, kind) in kinds.iter().enumerate() {
        cluster.put_source(kind, PLATFORM, "default-deny", &kind.source).await;
        let teams = json!({"includeNamespaces": ["team-*"]});
        cluster.kind_rule(&format!("rule-{n}"), kind, &[PLATFORM], teams).await;
    }
    for namespace in ["team-a", "team-b", "team-c"] {
        let policy = cluster.copy_holds(&kinds[0], namespace, "default-deny", &json!({})).await;
        assert_eq!(policy.data["spec"]["policyTypes"], json!(["Ingress"]), "filled in by the server");
        let widget = cluster.copy_holds(&kinds[1], namespace, "default-deny", &json!("blue")).await;
        assert_eq!(widget.data["spec"]["size"], 3, "the schema's default");
    }
    for n in 0..2 {
        cluster.rule_status(&format!("rule-{n}"), |s| s["copiesInSync"] == 3).await;
    }
    let kind_refs: Vec<&Kind> = kinds.iter().collect();
    let (writes, dry_runs) = cluster.writes_of(&kind_refs);

    // Idle for a minute's worth of passes: watches cut and resumed, every rule woken.
    for round in 0..6 {
        cluster.idle_round(round).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(cluster.writes_of(&kind_refs), (writes, dry_runs), "no write, no dry-run while idle");

    // After a restart kopper knows no rendering: one dry-run per source tells its copies are
    // in sync; nothing is written.
    cluster.stop_operator().await;
    let (_, dry_runs) = cluster.writes_of(&kind_refs);
    let reconciles = cluster.reconciles();
    cluster.start_operator();
    eventually("passes after the restart", || async {
        (cluster.reconciles() >= reconciles + 2).then_some(())
    })
    .await;
    for n in 0..2 {
        cluster.rule_status(&format!("rule-{n}"), |s| s["copiesInSync"] == 3).await;
    }
    cluster.idle_round(99).await;
    let (after, dry_runs_after) = cluster.writes_of(&kind_refs);
    assert_eq!(after, writes, "no write after the restart");
    assert!(
        dry_runs_after - dry_runs <= 2,
        "one dry-run per source, not per copy: {}",
        dry_runs_after - dry_runs
    );
}

/// Every kind besides ConfigMap and Secret is copied from a protected namespace; from one
/// tenants can write to, only when the rule says so explicitly: a tenant's ResourceQuota of
/// `pods: "0"` shuts every namespace down as surely as a NetworkPolicy opens it.
#[tokio::test]
async fn every_allowed_kind_is_copied_only_from_protected_namespaces_unless_the_rule_allows() {
    let kinds = [network_policy(), role(), limit_range(), resource_quota()];
    let cluster = cluster_with(&kinds.iter().map(|kind| kind.entry).collect::<Vec<_>>()).await;
    cluster.namespace("tenant", json!({})).await;
    for (n, kind) in kinds.iter().enumerate() {
        cluster.put_source(kind, "tenant", "open", &kind.source).await;
        cluster.kind_rule(&format!("unprotected-{n}"), kind, &["tenant"], json!({})).await;
        let status =
            cluster.rule_status(&format!("unprotected-{n}"), |s| reason(s) == "SourceNotProtected").await;
        let text = message(&status);
        assert!(text.contains("\"tenant\"") && text.contains("spec.allowUnprotectedSources"), "{text}");
        assert!(cluster.objects(kind, "team-a").get_opt("open").await.unwrap().is_none(), "nothing copied");
    }
    for (n, kind) in kinds.iter().enumerate() {
        cluster
            .kind_rule(
                &format!("unprotected-{n}"),
                kind,
                &["tenant"],
                json!({"allowUnprotectedSources": true}),
            )
            .await;
        cluster.copy_holds(kind, "team-a", "open", &kind.probe.1).await;
    }
}

/// A rule naming a kind the admin did not allow, or one the API server does not serve, is
/// refused by name of the setting to change, and writes nothing.
#[tokio::test]
async fn kinds_not_allowed_or_not_served_are_refused_naming_the_setting() {
    let cluster = cluster_with(&["example.com/v1/Gadget"]).await;
    cluster.put_source(&limit_range(), PLATFORM, "limits", &limit_range().source).await;
    cluster.kind_rule("limits", &limit_range(), &[PLATFORM], json!({})).await;
    let status = cluster.rule_status("limits", |s| reason(s) == "KindNotAllowed").await;
    for named in ["--replicate-kinds", "KOPPER_REPLICATE_KINDS", "replication.extraKinds", "v1/LimitRange"] {
        assert!(message(&status).contains(named), "{named}: {status}");
    }
    assert!(cluster.objects(&limit_range(), "team-a").get_opt("limits").await.unwrap().is_none());

    let gadget = Kind { entry: "example.com/v1/Gadget", ..widget() };
    let gadget = Kind { resource: resource("example.com", "v1", "Gadget", "gadgets"), ..gadget };
    cluster.kind_rule("gadgets", &gadget, &[PLATFORM], json!({})).await;
    let status = cluster.rule_status("gadgets", |s| reason(s) == "KindNotServed").await;
    let text = message(&status);
    assert!(text.contains("example.com/v1/Gadget") && text.contains("CustomResourceDefinition"), "{text}");
}

/// A kind allowed but not served at start is looked for again while a rule names it: once
/// its CRD is installed, the rule copies without a restart.
#[tokio::test]
async fn a_kind_whose_crd_is_installed_later_is_copied_without_a_restart() {
    let cluster = cluster_with(&["example.com/v1/Gadget"]).await;
    let gadget = Kind {
        entry: "example.com/v1/Gadget",
        resource: resource("example.com", "v1", "Gadget", "gadgets"),
        ..widget()
    };
    cluster.kind_rule("gadgets", &gadget, &[PLATFORM], json!({"includeNamespaces": ["team-*"]})).await;
    cluster.rule_status("gadgets", |s| reason(s) == "KindNotServed").await;
    let mut crd = widget_crd();
    crd.metadata.name = Some("gadgets.example.com".into());
    crd.spec.names.kind = "Gadget".into();
    crd.spec.names.plural = "gadgets".into();
    crd.spec.names.singular = Some("gadget".into());
    crd.spec.names.list_kind = Some("GadgetList".into());
    Api::<CustomResourceDefinition>::all(cluster.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    wait_served(&cluster.client, &gadget.resource).await;
    cluster.put_source(&gadget, PLATFORM, "g", &gadget.source).await;
    let api = cluster.objects(&gadget, "team-a");
    let limit = crate::common::DEADLINE + kopper::kinds::REDISCOVERY_INTERVAL;
    eventually_within(limit, "the Gadget copied once its CRD is installed", || async {
        api.get_opt("g").await.unwrap().map(drop)
    })
    .await;
    cluster.rule_status("gadgets", |s| reason(s) == "Synced").await;
}

/// A rule deleted once its kind is no longer in --replicate-kinds: kopper cannot see its
/// copies, which stay; a Warning Event on the rule names the command that deletes them.
#[tokio::test]
async fn a_rule_deleted_after_its_kind_is_disallowed_warns_with_the_command_to_delete_its_copies() {
    let limits = limit_range();
    let mut cluster = cluster_with(&[limits.entry]).await;
    cluster.put_source(&limits, PLATFORM, "limits", &limits.source).await;
    cluster.kind_rule("limits", &limits, &[PLATFORM], json!({})).await;
    cluster.copy_holds(&limits, "team-a", "limits", &limits.probe.1).await;

    cluster.stop_operator().await;
    cluster.settings = settings(&[]);
    cluster.start_operator();
    cluster.rule_status("limits", |s| reason(s) == "KindNotAllowed").await;
    cluster.rules().delete("limits", &Default::default()).await.unwrap();
    eventually("the rule gone", || async {
        cluster.rules().get_opt("limits").await.unwrap().is_none().then_some(())
    })
    .await;
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(cluster.client.clone());
    let note = eventually("a Warning naming the command", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|event| event.reason.as_deref() == Some("CopiesLeftBehind"))
            .map(|event| (event.type_, event.message.unwrap_or_default()))
    })
    .await;
    assert_eq!(note.0.as_deref(), Some("Warning"));
    assert!(
        note.1.contains("kubectl delete limitrange -A -l app.kubernetes.io/managed-by=kopper,"),
        "{}",
        note.1
    );
    assert!(
        cluster.objects(&limits, "team-a").get_opt("limits").await.unwrap().is_some(),
        "the copy is left, as the Warning says"
    );
}

/// A RoleBinding's roleRef cannot change: when its source's does, the copy is deleted and
/// made again (a new uid, the same name).
#[tokio::test]
async fn a_role_binding_whose_role_ref_changes_is_replaced_by_delete_then_create() {
    let kind = role_binding();
    let mut cluster = cluster_with(&[kind.entry]).await;
    cluster.put_source(&kind, PLATFORM, "readers", &kind.source).await;
    cluster.kind_rule("bindings", &kind, &[PLATFORM], json!({"includeNamespaces": ["team-*"]})).await;
    let first = cluster.copy_holds(&kind, "team-a", "readers", &json!("auditors")).await;
    cluster.rule_status("bindings", |s| s["copiesInSync"] == 1).await;
    // While kopper is down, the source is made again with another role (a binding's roleRef
    // cannot change in place, the source's no more than the copy's).
    cluster.stop_operator().await;
    cluster.objects(&kind, PLATFORM).delete("readers", &DeleteParams::default()).await.unwrap();
    let mut edit = kind.source.clone();
    edit["roleRef"]["name"] = json!("edit");
    cluster.put_source(&kind, PLATFORM, "readers", &edit).await;
    cluster.start_operator();
    let replaced = cluster
        .copy_of_kind_when(&kind, "team-a", "readers", |copy| {
            copy.is_some_and(|copy| copy.data["roleRef"]["name"] == "edit")
        })
        .await
        .unwrap();
    assert_ne!(replaced.metadata.uid, first.metadata.uid, "deleted and created again");
    cluster.rule_status("bindings", |s| reason(s) == "Synced").await;
}

/// kopper writes with its own rights: a Role granting what it does not hold, or a
/// RoleBinding to a role it may not bind, is refused by the API server. The rule says so
/// by name (EscalationRefused) and tries again only after minutes.
#[tokio::test]
async fn a_refused_escalation_is_reported_by_name_and_not_retried_hot() {
    let config =
        kubesim::Config { authorization: kubesim::Authorization::Rbac, ..kubesim::Config::default() };
    let sim = kubesim::Server::start(config).await.unwrap();
    let admin = sim.client();
    super::install_crds(&admin, rule_crds()).await;
    for name in [PLATFORM, "team-a", "kopper-system"] {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }
    grant_kopper_replication_rights(&admin).await;
    let kubeconfig = sim.kubeconfig_for_service_account("kopper-system", "kopper");
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap();
    let kopper_client = Client::try_from(config).unwrap();
    let settings = settings(&[role().entry, role_binding().entry]);
    let metrics = Arc::new(Metrics::new(replication::register_metrics));
    let ctx = Arc::new(Context::new(kopper_client, metrics, settings));
    let operator = InProcess::spawn(|stopped| replication::run(ctx, stopped));

    let cluster = ClusterView { client: admin.clone() };
    // A Role granting what kopper holds is copied; one granting pods/exec is refused.
    let granted = json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
    let exec = json!({"rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]});
    cluster.create(&role(), "granted", &granted).await;
    cluster.create(&role(), "exec", &exec).await;
    cluster.rule(&role(), "roles").await;
    let status = cluster.status("roles", |s| reason(s) == "EscalationRefused").await;
    let text = message(&status);
    assert!(text.contains("Role team-a/exec"), "names the copy: {text}");
    assert!(text.contains("attempting to grant RBAC permissions not currently held"), "{text}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(admin.clone());
    eventually("a Warning Event for the refused escalation", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.iter().any(|event| event.reason.as_deref() == Some("EscalationRefused")).then_some(())
    })
    .await;
    let roles = Api::<DynamicObject>::namespaced_with(admin.clone(), "team-a", &role().resource);
    eventually("the Role kopper may grant", || async { roles.get_opt("granted").await.unwrap().map(drop) })
        .await;
    // From the first refusal on, the refused create is sent again only after the longest
    // backoff: a transient error's backoff (0.5s, 1s, 2s, 4s, ...) would send it 3 times more
    // within the window.
    let creates = || sim.counters().get("create", "roles");
    let refused_at = (std::time::Instant::now(), creates());

    // A RoleBinding to a ClusterRole kopper neither holds nor may bind.
    let exec_role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "pod-exec"},
        "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}],
    }))
    .unwrap();
    Api::all(admin.clone()).create(&PostParams::default(), &exec_role).await.unwrap();
    let binding = json!({
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-exec"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "developers"}],
    });
    cluster.create(&role_binding(), "exec", &binding).await;
    cluster.rule(&role_binding(), "bindings").await;
    let status = cluster.status("bindings", |s| reason(s) == "EscalationRefused").await;
    assert!(message(&status).contains("RoleBinding team-a/exec"), "{status}");

    // Not retried hot: over a window longer than the first backoffs' sum (0.5+1+2+4s).
    const WINDOW: std::time::Duration = std::time::Duration::from_secs(9);
    tokio::time::sleep(WINDOW.saturating_sub(refused_at.0.elapsed())).await;
    let again = creates() - refused_at.1;
    assert!(again <= 1, "retried hot: {again} creates of the refused Role within {WINDOW:?}");
    operator.stop().await;
}

/// Just enough of a cluster to drive the escalation test, whose kopper runs apart.
struct ClusterView {
    client: Client,
}

impl ClusterView {
    async fn create(&self, kind: &Kind, name: &str, body: &Value) {
        let mut object = body.clone();
        object["apiVersion"] = json!(kind.resource.api_version);
        object["kind"] = json!(kind.resource.kind);
        object["metadata"] = json!({"name": name, "namespace": PLATFORM, "labels": {"replicate": "yes"}});
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), PLATFORM, &kind.resource);
        api.create(&PostParams::default(), &object).await.unwrap();
    }

    async fn rule(&self, kind: &Kind, name: &str) {
        let rule: ReplicationRule = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "ReplicationRule", "metadata": {"name": name},
            "spec": {
                "apiVersion": kind.resource.api_version, "kind": kind.resource.kind, "namespaces": [PLATFORM],
                "selector": {"matchLabels": {"replicate": "yes"}}, "includeNamespaces": ["team-a"],
            },
        }))
        .unwrap();
        Api::<ReplicationRule>::all(self.client.clone()).create(&PostParams::default(), &rule).await.unwrap();
    }

    async fn status(&self, name: &str, done: impl Fn(&Value) -> bool) -> Value {
        let api = Api::<ReplicationRule>::all(self.client.clone());
        eventually_within(std::time::Duration::from_secs(30), &format!("status of {name}"), || async {
            let status = serde_json::to_value(api.get(name).await.unwrap().status).unwrap();
            done(&status).then_some(status)
        })
        .await
    }
}

/// Binds kopper's ServiceAccount to what the replication engine needs, and get/list/watch/
/// create/update/delete on Roles and RoleBindings: not pods/exec, nor `bind`.
async fn grant_kopper_replication_rights(admin: &Client) {
    let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "kopper-replication"},
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["kopper.dev"], "resources": ["replicationrules", "configmapsyncs", "secretsyncs"],
             "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["kopper.dev"],
             "resources": ["replicationrules/status", "configmapsyncs/status", "secretsyncs/status"],
             "verbs": ["patch"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
             "verbs": ["get", "list", "watch", "create", "update", "delete"]},
        ],
    }))
    .unwrap();
    Api::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kopper-replication"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kopper-replication"},
        "subjects": [{"kind": "ServiceAccount", "name": "kopper", "namespace": "kopper-system"}],
    }))
    .unwrap();
    Api::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();
}
