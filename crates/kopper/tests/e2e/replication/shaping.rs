//! Copies shaped on purpose (only some keys, another Secret type, labels and annotations
//! chosen), and copies a deleted rule leaves to its successor (`deletionPolicy: Orphan`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{Cluster, RULE_SAMPLE, copyrator};
use crate::common::eventually;

const CA_SAMPLE: &str = include_str!("../../../../../config/samples/replicationrule-ca-bundle.yaml");

impl Cluster {
    fn secrets(&self, namespace: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The CA sample's source Secret (`kubernetes.io/tls` with `ca.crt`, `tls.crt` and
    /// `tls.key`), in `default`.
    async fn ca_source(&self) {
        let source: Secret = kopper::samples::of_kind(CA_SAMPLE, "Secret").unwrap();
        self.secrets("default").create(&PostParams::default(), &source).await.unwrap();
    }

    /// A source ConfigMap with labels and annotations.
    async fn marked_config_map(&self, labels: serde_json::Value, annotations: serde_json::Value) {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "app-config", "labels": labels, "annotations": annotations},
            "data": {"k": "1"},
        }))
        .unwrap();
        let params = PatchParams::apply("test").force();
        self.config_maps("default").patch("app-config", &params, &Patch::Apply(&config_map)).await.unwrap();
    }

    /// The copy at `namespace/name` once `done` holds for it.
    async fn config_map_when(
        &self,
        namespace: &str,
        name: &str,
        done: impl Fn(&ConfigMap) -> bool,
    ) -> ConfigMap {
        let api = self.config_maps(namespace);
        eventually(&format!("ConfigMap {namespace}/{name}"), || async {
            api.get_opt(name).await.unwrap().filter(|config_map| done(config_map))
        })
        .await
    }

    fn count(&self, verb: &str, resource: &str) -> u64 {
        self.sim.counters().get(verb, resource)
    }

    /// Runs a pass of every rule (a namespace label no rule reads changes, after the
    /// watches were cut and resumed) and waits until one has run.
    async fn idle_pass(&self) {
        self.sim.faults().close_watches();
        let reconciles = self.reconciles();
        let unrelated = json!({"metadata": {"labels": {"unrelated": reconciles.to_string()}}});
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

fn keys<V>(map: Option<&BTreeMap<String, V>>) -> Vec<&str> {
    map.into_iter().flatten().map(|(key, _)| key.as_str()).collect()
}

#[tokio::test]
async fn a_tls_secret_s_ca_certificate_alone_is_copied_as_an_opaque_secret() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.ca_source().await;
    cluster.apply_rule(CA_SAMPLE).await;

    let copy = eventually("the CA copy", || async {
        cluster.secrets("team-a").get_opt("platform-ca").await.unwrap()
    })
    .await;
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    assert_eq!(keys(copy.data.as_ref()), ["ca.crt"], "no private key leaves its namespace");
    let source = cluster.secrets("default").get("platform-ca").await.unwrap();
    assert_eq!(copy.data.as_ref().unwrap()["ca.crt"], source.data.as_ref().unwrap()["ca.crt"]);
    assert_eq!(copy.labels()["trust"], "platform-ca", "the label the rule adds");
    assert_eq!(copy.labels()["distribute"], "ca-only");
    assert!(!copy.labels().contains_key("app.kubernetes.io/instance"), "Argo CD's tracking label stays home");
    assert!(
        !copy.annotations().keys().any(|key| key.starts_with("meta.helm.sh/")),
        "Helm's ownership stays home: {:?}",
        copy.annotations()
    );
    let status = cluster.rule_status("platform-ca", |s| s["copiesInSync"] == 1).await;
    assert_eq!(status["conditions"][0]["reason"], "Synced", "{status}");

    // An idle pass finds the shaped copy in sync and writes nothing.
    let writes = cluster.sim.counters().writes("secrets");
    cluster.idle_pass().await;
    assert_eq!(cluster.sim.counters().writes("secrets"), writes, "no write when nothing changed");
}

#[tokio::test]
async fn too_few_keys_for_a_typed_secret_are_reported_not_written_and_a_missing_key_is_named() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    cluster.ca_source().await;
    let writes = cluster.sim.counters().writes("secrets");
    cluster.apply_rule(&CA_SAMPLE.replace("  secretType: Opaque\n", "")).await;

    let status =
        cluster.rule_status("platform-ca", |s| s["conditions"][0]["reason"] == "SecretTypeNeedsKeys").await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("tls.crt, tls.key") && message.contains("spec.secretType"), "{message}");
    assert_eq!(status["conditions"][0]["status"], "False");
    cluster.idle_pass().await;
    assert_eq!(cluster.sim.counters().writes("secrets"), writes, "nothing written, nothing retried hot");
    assert!(cluster.secrets("team-a").get_opt("platform-ca").await.unwrap().is_none());

    // Fixed, and asking for a key the source lacks: the copy holds what there is.
    cluster.apply_rule(&CA_SAMPLE.replace("    - ca.crt\n", "    - ca.crt\n    - bundle.pem\n")).await;
    let status =
        cluster.rule_status("platform-ca", |s| s["conditions"][0]["reason"] == "SourceKeysMissing").await;
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("default/platform-ca lacks bundle.pem"), "{message}");
    let copy = eventually("the CA copy", || async {
        cluster.secrets("team-a").get_opt("platform-ca").await.unwrap()
    })
    .await;
    assert_eq!(keys(copy.data.as_ref()), ["ca.crt"]);
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(cluster.client.clone());
    eventually("a Warning Event naming the missing key", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.iter().any(|event| event.reason.as_deref() == Some("SourceKeysMissing")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn copies_leave_out_helm_argo_flux_and_kapp_marks_and_follow_the_rule_s_label_choices() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let mut labels = copyrator();
    for (key, value) in [
        ("app.kubernetes.io/name", "web"),
        ("app.kubernetes.io/instance", "web"),
        ("app.kubernetes.io/managed-by", "Helm"),
        ("kustomize.toolkit.fluxcd.io/name", "apps"),
        ("internal.example.com/cost-center", "42"),
    ] {
        labels[key] = value.into();
    }
    let annotations = json!({
        "meta.helm.sh/release-name": "web",
        "meta.helm.sh/release-namespace": "default",
        "argocd.argoproj.io/tracking-id": "web:/ConfigMap:default/app-config",
        "helm.toolkit.fluxcd.io/name": "web",
        "kapp.k14s.io/identity": "v1;default//ConfigMap/app-config;v1",
        "docs.example.com/url": "https://docs.example.com/web",
        "notes": "hello",
    });
    cluster.marked_config_map(labels, annotations).await;
    cluster.apply_rule(RULE_SAMPLE).await;

    let copy = cluster.config_map_when("team-a", "app-config", |_| true).await;
    let mut copied_labels: Vec<&str> = keys(copy.metadata.labels.as_ref());
    copied_labels.retain(|key| !key.starts_with("kopper.dev/"));
    assert_eq!(
        copied_labels,
        [
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/name",
            "copyrator",
            "internal.example.com/cost-center"
        ]
    );
    assert_eq!(copy.labels()["app.kubernetes.io/managed-by"], "kopper");
    let mut copied_annotations: Vec<&str> = keys(copy.metadata.annotations.as_ref());
    copied_annotations.retain(|key| !key.starts_with("kopper.dev/"));
    assert_eq!(copied_annotations, ["docs.example.com/url", "notes"]);

    // The rule narrows what is copied, keeps Argo CD's marks and adds a label: the copy
    // converges, and what kopper wrote before and no longer should is removed.
    let shaped = RULE_SAMPLE.replace(
        "  kind: ConfigMap\n",
        "  kind: ConfigMap\n  copyLabels:\n    exclude: [internal.example.com/]\n    add: {team: platform}\n  \
         copyAnnotations:\n    include: [docs.example.com/, argocd.argoproj.io/]\n  keepToolMarks: [ArgoCD]\n",
    );
    cluster.apply_rule(&shaped).await;
    let copy = cluster
        .config_map_when("team-a", "app-config", |copy| {
            copy.labels().get("team").is_some_and(|team| team == "platform")
        })
        .await;
    assert!(!copy.labels().contains_key("internal.example.com/cost-center"), "{:?}", copy.labels());
    assert_eq!(copy.labels()["app.kubernetes.io/instance"], "web", "Argo CD's marks kept on request");
    let mut copied_annotations: Vec<&str> = keys(copy.metadata.annotations.as_ref());
    copied_annotations.retain(|key| !key.starts_with("kopper.dev/"));
    assert_eq!(copied_annotations, ["argocd.argoproj.io/tracking-id", "docs.example.com/url"]);
    assert_eq!(copy.data.as_ref().unwrap()["k"], "1");

    // Converged: idle passes write nothing.
    cluster
        .rule_status("main-rule", |s| s["copiesInSync"] == 1 && s["conditions"][0]["reason"] == "Synced")
        .await;
    let writes = cluster.sim.counters().writes("configmaps");
    cluster.idle_pass().await;
    cluster.idle_pass().await;
    assert_eq!(cluster.sim.counters().writes("configmaps"), writes, "no write when nothing changed");
}

#[tokio::test]
async fn a_rule_deleted_with_orphan_leaves_its_copies_for_the_rule_that_replaces_it() {
    let mut cluster = Cluster::start().await;
    let namespaces = ["team-a", "team-b", "team-c"];
    for namespace in namespaces {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("default", "app-config", copyrator(), json!({"k": "1"})).await;
    let orphaning =
        RULE_SAMPLE.replace("  kind: ConfigMap\n", "  kind: ConfigMap\n  deletionPolicy: Orphan\n");
    cluster.apply_rule(&orphaning).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 3).await;
    let mut uids = Vec::new();
    for namespace in namespaces {
        uids.push(cluster.config_maps(namespace).get("app-config").await.unwrap().uid().unwrap());
    }
    let counts = |cluster: &Cluster| {
        ["create", "update", "patch", "delete"].map(|verb| cluster.count(verb, "configmaps"))
    };
    let [created, updated, patched, deleted] = counts(&cluster);

    cluster.rules().delete("main-rule", &DeleteParams::default()).await.unwrap();
    eventually("the rule to be gone", || async {
        cluster.rules().get_opt("main-rule").await.unwrap().is_none().then_some(())
    })
    .await;
    for (namespace, uid) in namespaces.iter().zip(&uids) {
        let copy = cluster.config_maps(namespace).get("app-config").await.unwrap();
        assert_eq!(copy.uid().as_ref(), Some(uid), "the copy in {namespace} stays");
        assert_eq!(copy.labels().get("kopper.dev/orphaned").map(String::as_str), Some("true"));
        assert!(!copy.labels().contains_key("kopper.dev/replicated-by"));
    }
    assert_eq!(counts(&cluster), [created, updated, patched + 3, deleted], "one patch per copy left");

    // A restart runs the sweep of copies whose rule is gone: orphans are not such copies.
    cluster.stop_operator().await;
    cluster.start_operator();
    cluster.apply_rule(&RULE_SAMPLE.replace("name: main-rule", "name: successor")).await;
    cluster
        .rule_status("successor", |s| s["copiesInSync"] == 3 && s["conditions"][0]["reason"] == "Synced")
        .await;
    for (namespace, uid) in namespaces.iter().zip(&uids) {
        let copy = cluster.config_maps(namespace).get("app-config").await.unwrap();
        assert_eq!(copy.uid().as_ref(), Some(uid), "the copy in {namespace} was never deleted");
        assert_eq!(copy.annotations()["kopper.dev/rule"], "ReplicationRule.successor");
        assert!(!copy.labels().contains_key("kopper.dev/orphaned"));
        assert_eq!(copy.data.as_ref().unwrap()["k"], "1");
    }
    assert_eq!(
        counts(&cluster),
        [created, updated, patched + 6, deleted],
        "taking over costs one metadata patch per copy: no create, update or delete"
    );

    // The successor owns them: deleting it (policy Delete) removes them.
    cluster.rules().delete("successor", &DeleteParams::default()).await.unwrap();
    for namespace in namespaces {
        cluster.copy_absent(namespace, "app-config").await;
    }
}

#[tokio::test]
async fn a_config_map_sync_copies_only_the_keys_and_labels_it_asks_for() {
    let cluster = Cluster::start().await;
    cluster.namespace("team-a", json!({})).await;
    let labels = json!({"app.kubernetes.io/instance": "web", "tier": "backend"});
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings", "labels": labels},
        "data": {"public": "1", "internal": "2"},
    }))
    .unwrap();
    cluster.config_maps("default").create(&PostParams::default(), &config_map).await.unwrap();
    let sync: kopper::controllers::replication::types::ConfigMapSync = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ConfigMapSync",
        "metadata": {"name": "public", "namespace": "default"},
        "spec": {"sourceNamespace": "default", "destinationNamespace": "team-a", "configMapName": "settings",
                 "keys": ["public", "absent"], "copyLabels": {"add": {"shared-by": "default"}}},
    }))
    .unwrap();
    let syncs = Api::<kopper::controllers::replication::types::ConfigMapSync>::namespaced(
        cluster.client.clone(),
        "default",
    );
    syncs.create(&PostParams::default(), &sync).await.unwrap();

    let copy = cluster.config_map_when("team-a", "settings", |_| true).await;
    assert_eq!(keys(copy.data.as_ref()), ["public"]);
    assert_eq!((copy.labels()["tier"].as_str(), copy.labels()["shared-by"].as_str()), ("backend", "default"));
    assert!(!copy.labels().contains_key("app.kubernetes.io/instance"));
    let status = eventually("the sync's status", || async {
        let status = serde_json::to_value(syncs.get("public").await.unwrap().status?).unwrap();
        (status["conditions"][0]["reason"] == "SourceKeysMissing").then_some(status)
    })
    .await;
    assert!(status.to_string().contains("default/settings lacks absent"), "{status}");
}

#[tokio::test]
async fn an_edit_asking_for_a_shape_kopper_cannot_write_keeps_every_copy_as_it_is() {
    let cluster = Cluster::start().await;
    let namespaces = ["team-a", "team-b"];
    for namespace in namespaces {
        cluster.namespace(namespace, json!({})).await;
    }
    cluster.config_map("default", "app-config", copyrator(), json!({"k": "1"})).await;
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster.rule_status("main-rule", |s| s["copiesInSync"] == 2).await;
    let mut uids = Vec::new();
    for namespace in namespaces {
        uids.push(cluster.config_maps(namespace).get("app-config").await.unwrap().uid().unwrap());
    }
    let deleted = cluster.count("delete", "configmaps");

    // Refused by the schema's CEL rules on a real API server; kubesim runs no CEL, so
    // kopper's own check answers. deletionPolicy is Delete (the default) all along.
    for invalid in [
        RULE_SAMPLE.replace("  kind: ConfigMap\n", "  kind: ConfigMap\n  secretType: Opaque\n"),
        RULE_SAMPLE.replace(
            "  kind: ConfigMap\n",
            "  kind: ConfigMap\n  copyLabels:\n    add:\n      \"not a key!\": x\n",
        ),
    ] {
        let generation = cluster.apply_rule(&invalid).await.metadata.generation;
        // The refusal is reported after what it revokes is done.
        let status = cluster
            .rule_status("main-rule", |s| {
                s["observedGeneration"] == json!(generation) && s["conditions"][0]["reason"] == "InvalidShape"
            })
            .await;
        assert_eq!(status["conditions"][0]["status"], "False");
        assert!(status["conditions"][0]["message"].as_str().unwrap().contains("spec."), "{status}");
        for (namespace, uid) in namespaces.iter().zip(&uids) {
            let copy = cluster.config_maps(namespace).get("app-config").await.unwrap();
            assert_eq!(copy.uid().as_ref(), Some(uid), "the copy in {namespace} stays");
            assert_eq!(copy.data.as_ref().unwrap()["k"], "1");
        }
        assert_eq!(cluster.count("delete", "configmaps"), deleted, "a refused shape revokes nothing");
    }

    // Fixed: the rule takes up its copies again, as they are.
    cluster.apply_rule(RULE_SAMPLE).await;
    cluster
        .rule_status("main-rule", |s| s["copiesInSync"] == 2 && s["conditions"][0]["reason"] == "Synced")
        .await;
    assert_eq!(cluster.count("delete", "configmaps"), deleted);
}
