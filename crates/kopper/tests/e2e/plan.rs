//! `kopper plan` as a user and a CI pipeline run it: the binary against kubesim, rules from
//! the cluster and from files, text and JSON, and the exit status.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::Cluster;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const RULE_SAMPLE: &str = include_str!("../../../../config/samples/replicationrule-shared-settings.yaml");
const ACCESS_SAMPLE: &str =
    include_str!("../../../../config/samples/namespaceaccess-group-per-namespace.yaml");

/// kubesim with kopper's CRDs, two team namespaces, the sample's source ConfigMap and the
/// NamespaceAccess sample applied.
async fn cluster() -> Cluster {
    let cluster = Cluster::start().await;
    for crd in kopper::crds::all() {
        Api::all(cluster.client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    }
    for name in ["team-a", "team-b"] {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }
    let source =
        json!({"metadata": {"name": "shared-settings", "labels": {"copyrator": "true"}}, "data": {"a": "1"}});
    config_map(&cluster, "default", source).await;
    for document in common::manifests::yaml_documents(ACCESS_SAMPLE) {
        common::manifests::create_document(&cluster.client, document).await;
    }
    cluster
}

async fn config_map(cluster: &Cluster, namespace: &str, object: serde_json::Value) {
    let object: ConfigMap = serde_json::from_value(object).unwrap();
    Api::namespaced(cluster.client.clone(), namespace).create(&PostParams::default(), &object).await.unwrap();
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn kopper_plan(cluster: &Cluster, args: &[&str]) -> Outcome {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .arg("plan")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .output()
        .await
        .unwrap();
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn writes(counts: &BTreeMap<(String, String), u64>) -> u64 {
    counts
        .iter()
        .filter(|((verb, _), _)| !["get", "list", "watch"].contains(&verb.as_str()))
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn plan_shows_a_file_rule_next_to_the_cluster_rules_and_writes_nothing() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "rule.yaml", RULE_SAMPLE);
    let before = cluster.sim.counters().snapshot();

    let plan = kopper_plan(&cluster, &["-f", &file]).await;

    assert_eq!(plan.code, Some(0), "{}{}", plan.stdout, plan.stderr);
    let out = &plan.stdout;
    assert!(out.contains(&format!("ReplicationRule main-rule (from {file}):")), "{out}");
    assert!(
        out.contains("+ create  ConfigMap team-a/shared-settings (from default/shared-settings)"),
        "{out}"
    );
    assert!(out.contains("NamespaceAccess ad-kubernetes:\n"), "{out}");
    assert!(out.contains("+ create  RoleBinding team-b/ad-kubernetes-team-b"), "{out}");
    assert!(!out.contains("kube-system"), "protected namespaces get nothing: {out}");
    assert!(
        plan.stderr.contains("planned as if applied with the rules: ConfigMap default/shared-settings"),
        "{}",
        plan.stderr
    );
    assert_eq!(writes(&before), writes(&cluster.sim.counters().snapshot()), "plan wrote to the cluster");
}

#[tokio::test]
async fn conflicts_give_exit_status_3_and_json_a_script_can_read() {
    let cluster = cluster().await;
    config_map(&cluster, "team-a", json!({"metadata": {"name": "shared-settings"}, "data": {"mine": "yes"}}))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "rule.yaml", RULE_SAMPLE);

    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only", "-o", "json"]).await;

    assert_eq!(plan.code, Some(3), "{}{}", plan.stdout, plan.stderr);
    let report: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(report["summary"]["conflicts"], 1, "{report:#}");
    let rules = report["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "--files-only leaves the cluster's NamespaceAccess out: {report:#}");
    let conflict = rules[0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|change| change["action"] == "conflict")
        .unwrap_or_else(|| panic!("no conflict in {report:#}"));
    assert_eq!(
        (conflict["namespace"].as_str(), conflict["name"].as_str()),
        (Some("team-a"), Some("shared-settings"))
    );
    assert!(conflict["reason"].as_str().is_some_and(|reason| !reason.is_empty()), "{conflict}");
}

#[tokio::test]
async fn a_refused_rule_is_a_finding_and_a_broken_file_an_error_naming_it() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let refused = RULE_SAMPLE.replace(
        "    matchLabels:\n      copyrator: \"true\"\n---",
        "    matchExpressions: [{key: copyrator, operator: Maybe, values: [x]}]\n---",
    );
    assert_ne!(refused, RULE_SAMPLE);
    let file = write_file(dir.path(), "refused.yaml", &refused);
    let plan = kopper_plan(&cluster, &["-f", &file]).await;
    assert_eq!(plan.code, Some(3), "{}{}", plan.stdout, plan.stderr);
    assert!(plan.stdout.contains("ReplicationRule main-rule (from"), "{}", plan.stdout);
    assert!(plan.stdout.contains("refused:"), "{}", plan.stdout);

    let broken = write_file(
        dir.path(),
        "broken.yaml",
        "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r}\n",
    );
    let plan = kopper_plan(&cluster, &["-f", &broken]).await;
    assert_eq!(plan.code, Some(1), "{}{}", plan.stdout, plan.stderr);
    assert!(plan.stderr.contains("broken.yaml: document 1: ReplicationRule r"), "{}", plan.stderr);
}

/// A ConfigMapSync whose destinations have not consented, or whose source does not exist,
/// would not get what it asks for even with no conflict: plan says why, as its status would,
/// and a pipeline gating on the exit status stops.
#[tokio::test]
async fn a_rule_whose_destinations_refuse_it_or_whose_source_is_missing_is_a_finding() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let sync = |name: &str, source: &str| {
        format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ConfigMapSync\nmetadata: {{name: {name}, namespace: team-a}}\n\
             spec: {{sourceNamespace: team-a, configMapName: {source}, destinationNamespaces: [team-b]}}\n"
        )
    };
    config_map(&cluster, "team-a", json!({"metadata": {"name": "settings"}, "data": {"a": "1"}})).await;

    let file = write_file(dir.path(), "unconsented.yaml", &sync("to-b", "settings"));
    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only"]).await;
    assert_eq!(plan.code, Some(3), "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains(
            "! unmet: team-b does not accept copies from namespace team-a: its owner can accept them with \
             the annotation kopper.dev/accept-replication-from=team-a"
        ),
        "{}",
        plan.stdout
    );

    // The consent applied with the rule, in the same file, is planned as if applied.
    let consenting = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-b\n  annotations: \
                      {kopper.dev/accept-replication-from: team-a}\n---\n";
    let file = write_file(dir.path(), "consented.yaml", &format!("{consenting}{}", sync("to-b", "settings")));
    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only"]).await;
    assert_eq!(plan.code, Some(0), "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("+ create  ConfigMap team-b/settings (from team-a/settings)"),
        "{}",
        plan.stdout
    );

    let file = write_file(dir.path(), "missing.yaml", &sync("missing", "nowhere"));
    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only", "-o", "json"]).await;
    assert_eq!(plan.code, Some(3), "{}{}", plan.stdout, plan.stderr);
    let report: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let unmet = report["rules"][0]["unmet"].as_array().unwrap();
    assert!(unmet.iter().any(|line| line == "the source team-a/nowhere does not exist"), "{report:#}");
    assert_eq!(report["summary"]["unmet"], 1, "{report:#}");
}

/// The CA sample: plan shows each copy as its rule shapes it (the keys and type written, the
/// labels carried, the source's marks left out), never a value.
#[tokio::test]
async fn plan_shows_the_copies_as_their_rule_shapes_them() {
    const CA_SAMPLE: &str = include_str!("../../../../config/samples/replicationrule-ca-bundle.yaml");
    let cluster = cluster().await;
    let source: k8s_openapi::api::core::v1::Secret = kopper::samples::of_kind(CA_SAMPLE, "Secret").unwrap();
    Api::namespaced(cluster.client.clone(), "default").create(&PostParams::default(), &source).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "ca.yaml", CA_SAMPLE);

    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only"]).await;
    assert_eq!(plan.code, Some(0), "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains(
            "+ create  Secret team-a/platform-ca (from default/platform-ca); keys: ca.crt; type: Opaque; left out: \
             app.kubernetes.io/instance, meta.helm.sh/release-name, meta.helm.sh/release-namespace"
        ),
        "{}",
        plan.stdout
    );
    assert!(!plan.stdout.contains("PRIVATE KEY") && !plan.stdout.contains("CERTIFICATE"), "no value shown");

    let plan = kopper_plan(&cluster, &["-f", &file, "--files-only", "-o", "json"]).await;
    let report: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let shaped = &report["rules"][0]["changes"][0]["shaped"];
    assert_eq!(shaped["keys"], json!(["ca.crt"]), "{report:#}");
    assert_eq!(shaped["secretType"], "Opaque");
    assert_eq!(shaped["labels"], json!({"distribute": "ca-only", "trust": "platform-ca"}));

    // Without the type, the rule would not get what it asks for: a finding that names the fix.
    let untyped = write_file(dir.path(), "untyped.yaml", &CA_SAMPLE.replace("  secretType: Opaque\n", ""));
    let plan = kopper_plan(&cluster, &["-f", &untyped, "--files-only"]).await;
    assert_eq!(plan.code, Some(3), "{}{}", plan.stdout, plan.stderr);
    assert!(
        plan.stdout.contains("! unmet: default/platform-ca would be copied as a kubernetes.io/tls Secret"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("set spec.secretType"), "{}", plan.stdout);
}
