//! The Helm chart (charts/kopper), exercised by real Helm: Helm's Go library from the PyPI
//! wheel helm-sdkpy, installed by scripts/setup-helm.sh into target/tools/helm and driven by
//! scripts/helm_driver.py. It lints, installs, upgrades and uninstalls onto kubesim, refuses
//! bad values by its schema, and kopper runs with the RBAC it installs without a 403. Without
//! helm-sdkpy these tests fail under `CI=true` and are skipped, saying so, elsewhere.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::manifests::{create_document, yaml_documents};
use crate::common::{Operator, eventually, run_args};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use serde_json::{Value, json};

const NAMESPACE: &str = "kopper-system";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

/// Helm, or `None` (with the reason printed) when it is not installed outside CI.
struct Helm {
    python: PathBuf,
}

impl Helm {
    fn find() -> Option<Self> {
        let python = repo("target/tools/helm/bin/python");
        let works = Command::new(&python)
            .args(["-c", "import helm_sdkpy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !works {
            let message = "helm-sdkpy is not installed: run scripts/setup-helm.sh";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("skipped: {message}");
            return None;
        }
        Some(Self { python })
    }

    /// Runs the driver; Helm's JSON answer, or its error message. It blocks its thread, so
    /// async tests run on a multi-threaded runtime where kubesim keeps serving meanwhile.
    fn run(&self, args: &[&str]) -> Result<Value, String> {
        let output =
            Command::new(&self.python).arg(repo("scripts/helm_driver.py")).args(args).output().unwrap();
        if output.status.success() {
            Ok(serde_json::from_slice(&output.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn release(
        &self,
        action: &str,
        kubeconfig: &Path,
        release: &str,
        values: Value,
    ) -> Result<Value, String> {
        let chart = repo("charts/kopper");
        self.run(&[
            action,
            kubeconfig.to_str().unwrap(),
            NAMESPACE,
            release,
            chart.to_str().unwrap(),
            &values.to_string(),
        ])
    }
}

/// kubesim with a kubeconfig Helm can read.
struct Cluster {
    sim: kubesim::Server,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(authorization: kubesim::Authorization) -> Self {
        let sim =
            kubesim::Server::start(kubesim::Config { authorization, ..Default::default() }).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        Self { sim, kubeconfig, _dir: dir }
    }
}

fn rules_of(documents: &[Value], kind: &str) -> Vec<PolicyRule> {
    let document = documents.iter().find(|d| d["kind"] == kind).unwrap();
    serde_json::from_value(document["rules"].clone()).unwrap()
}

fn config_rbac() -> Vec<Value> {
    common::manifests::rbac_documents()
}

#[test]
fn the_chart_ships_the_committed_crds_alerts_and_dashboard_unchanged() {
    for entry in std::fs::read_dir(repo("config/crd")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let shipped = std::fs::read_to_string(repo(&format!("charts/kopper/crds/{name}")))
            .unwrap_or_else(|_| panic!("charts/kopper/crds/{name} is missing; copy config/crd/ into it"));
        assert_eq!(
            shipped,
            std::fs::read_to_string(&path).unwrap(),
            "charts/kopper/crds/{name} drifted from config/crd/"
        );
    }
    for (shipped, source) in [
        ("charts/kopper/files/kopper-alerts.yaml", "config/prometheus/kopper-alerts.yaml"),
        ("charts/kopper/files/kopper-dashboard.json", "config/grafana/kopper-dashboard.json"),
    ] {
        assert_eq!(
            std::fs::read_to_string(repo(shipped)).unwrap(),
            std::fs::read_to_string(repo(source)).unwrap(),
            "{shipped} drifted from {source}"
        );
    }
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo("charts/kopper/Chart.yaml")).unwrap()).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "the chart installs this release");
}

#[test]
fn the_chart_lints_without_errors() {
    let Some(helm) = Helm::find() else { return };
    let lint = helm.run(&["lint", repo("charts/kopper").to_str().unwrap()]).unwrap();
    assert_eq!(lint["TotalChartsLinted"], 1);
    let errors: Vec<&Value> = lint["Messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["Severity"].as_i64() >= Some(3))
        .collect();
    assert!(errors.is_empty(), "helm lint: {lint}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_schema_refuses_are_named_with_the_fix() {
    let Some(helm) = Helm::find() else { return };
    let cluster = Cluster::start(kubesim::Authorization::AlwaysAllow).await;
    for (values, field) in [
        (json!({"logFormat": "xml"}), "/logFormat"),
        (json!({"replicaCount": 0}), "/replicaCount"),
        (json!({"controllers": ["pod-labeler", "teleport"]}), "/controllers/1"),
        (json!({"leaderElection": {"leaseDuration": "fifteen"}}), "/leaderElection/leaseDuration"),
        (json!({"replicaCnt": 2}), "replicaCnt"),
        (json!({"bucket": {"clusterId": "Prod!"}}), "/bucket/clusterId"),
        (json!({"bucket": {"credentialsSecret": "no-namespace"}}), "/bucket/credentialsSecret"),
        (
            json!({"replication": {"extraKinds": [{"apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket", "resource": "buckets"}]}}),
            "/replication/extraKinds/0/apiVersion",
        ),
        (
            json!({"replication": {"extraKinds": [{"apiVersion": "v1", "kind": "Secret", "resource": "secrets"}]}}),
            "/replication/extraKinds/0/kind",
        ),
        (
            json!({"replication": {"extraKinds": [{"apiVersion": "v1", "kind": "LimitRange"}]}}),
            "/replication/extraKinds/0",
        ),
    ] {
        let error = helm.release("install", &cluster.kubeconfig, "refused", values.clone()).unwrap_err();
        assert!(error.contains("schema") && error.contains(field), "{values}: {error}");
    }
    // Keyless access with the default cluster id: refused by the template, naming both values.
    let oidc = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/CHART";
    let keyless = json!({"bucket": {"oidcProviderArn": oidc}});
    let error = helm.release("install", &cluster.kubeconfig, "refused", keyless).unwrap_err();
    assert!(error.contains("bucket.oidcProviderArn") && error.contains("bucket.clusterId"), "{error}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(cluster.sim.client());
    assert!(
        secrets.list(&Default::default()).await.unwrap().items.iter().all(|s| !s
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .contains("refused")),
        "no release recorded"
    );
}

/// Each kind of `replication.extraKinds` reaches kopper as `--replicate-kinds` and gets exactly
/// one ClusterRole rule, for its own group and plural; with none, the rules are config/rbac's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_kinds_render_their_flag_and_one_rbac_rule_each() {
    let Some(helm) = Helm::find() else { return };
    let cluster = Cluster::start(kubesim::Authorization::AlwaysAllow).await;
    let client = cluster.sim.client();
    let values = json!({"replication": {"extraKinds": [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "resource": "networkpolicies"},
        {"apiVersion": "v1", "kind": "LimitRange", "resource": "limitranges"},
    ]}});
    helm.release("install", &cluster.kubeconfig, "kopper", values).unwrap();
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get("kopper").await.unwrap();
    let args = deployment.spec.template.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(
        args.contains(&"--replicate-kinds=networking.k8s.io/v1/NetworkPolicy,v1/LimitRange".to_owned()),
        "{args:?}"
    );
    let rules = Api::<ClusterRole>::all(client.clone()).get("kopper").await.unwrap().rules.unwrap();
    let mut extra: Vec<PolicyRule> =
        rules.into_iter().filter(|rule| !rules_of(&config_rbac(), "ClusterRole").contains(rule)).collect();
    extra.sort_by(|a, b| a.resources.cmp(&b.resources));
    let verbs: Vec<String> =
        ["get", "list", "watch", "create", "update", "patch", "delete"].map(str::to_owned).to_vec();
    let rule = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: verbs.clone(),
        ..PolicyRule::default()
    };
    assert_eq!(extra, [rule("", "limitranges"), rule("networking.k8s.io", "networkpolicies")]);
}

/// Minimal CRDs of the Prometheus Operator's kinds, so the chart's optional objects install.
async fn monitoring_crds(cluster: &Cluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.sim.client());
    for (plural, kind) in [("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")] {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        }))
        .unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_and_uninstall_onto_kubesim_with_the_rbac_of_config_rbac() {
    let Some(helm) = Helm::find() else { return };
    let cluster = Cluster::start(kubesim::Authorization::AlwaysAllow).await;
    let client = cluster.sim.client();
    let installed = helm.release("install", &cluster.kubeconfig, "kopper", json!({})).unwrap();
    assert_eq!(installed["info"]["status"], "deployed", "{installed}");

    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get("kopper").await.unwrap();
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some(format!("kopper:{}", env!("CARGO_PKG_VERSION")).as_str()));
    let hardened = container.security_context.clone().unwrap();
    assert_eq!(hardened.read_only_root_filesystem, Some(true));
    assert_eq!(hardened.allow_privilege_escalation, Some(false));
    assert_eq!(hardened.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(pod.security_context.unwrap().run_as_user, Some(65532));
    assert!(container.args.as_ref().unwrap().contains(&"--leader-elect=true".to_owned()));
    assert_eq!(
        container.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap().path.as_deref(),
        Some("/readyz")
    );

    let rbac = config_rbac();
    let cluster_role = Api::<ClusterRole>::all(client.clone()).get("kopper").await.unwrap();
    assert_eq!(
        cluster_role.rules.unwrap(),
        rules_of(&rbac, "ClusterRole"),
        "the chart's ClusterRole drifted from config/rbac/"
    );
    let role =
        Api::<Role>::namespaced(client.clone(), NAMESPACE).get("kopper-leader-election").await.unwrap();
    assert_eq!(
        role.rules.unwrap(),
        rules_of(&rbac, "Role"),
        "the chart's leader-election Role drifted from config/rbac/"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kopper::crds::all() {
        assert!(crds.get_opt(crd.metadata.name.as_deref().unwrap()).await.unwrap().is_some());
    }

    monitoring_crds(&cluster).await;
    let values = json!({
        "replicaCount": 3,
        "controllers": ["replication-rule", "config-map-sync"],
        "replication": {"protectedNamespaces": ["platform"]},
        "bucket": {"clusterId": "prod", "region": "eu-west-1", "endpoint": "https://s3.example.com",
                   "forcePathStyle": true, "credentialsSecret": "kopper-system/s3"},
        "metrics": {"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true}, "dashboard": {"enabled": true}},
    });
    let upgraded = helm.release("upgrade", &cluster.kubeconfig, "kopper", values).unwrap();
    assert_eq!(upgraded["version"], 2, "{upgraded}");
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get("kopper").await.unwrap();
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(3));
    let args = spec.template.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(args.contains(&"--controllers=replication-rule,config-map-sync".to_owned()), "{args:?}");
    assert!(args.contains(&"--protected-namespaces=platform".to_owned()), "{args:?}");
    for flag in [
        "--cluster-id=prod",
        "--s3-region=eu-west-1",
        "--s3-endpoint=https://s3.example.com",
        "--s3-force-path-style",
        "--s3-credentials-secret=kopper-system/s3",
    ] {
        assert!(args.contains(&flag.to_owned()), "{flag} in {args:?}");
    }
    let dashboard =
        Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE).get("kopper-dashboard").await.unwrap();
    assert_eq!(
        dashboard.data.unwrap()["kopper-dashboard.json"],
        std::fs::read_to_string(repo("config/grafana/kopper-dashboard.json")).unwrap()
    );
    let manifest = upgraded["manifest"].as_str().unwrap();
    assert!(
        manifest.contains("kind: PrometheusRule") && manifest.contains("KopperDown"),
        "the alerts ship in the chart"
    );
    assert!(manifest.contains("kind: ServiceMonitor"));

    let uninstalled =
        helm.run(&["uninstall", cluster.kubeconfig.to_str().unwrap(), NAMESPACE, "kopper"]).unwrap();
    assert_eq!(uninstalled["release"]["info"]["status"], "uninstalled", "{uninstalled}");
    eventually("the release's objects to go", || async {
        let gone = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
            .get_opt("kopper")
            .await
            .unwrap()
            .is_none()
            && Api::<ClusterRole>::all(client.clone()).get_opt("kopper").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
}

/// The plain install manifest: the chart rendered by Helm with its default values, after the
/// Namespace and the CRDs, as `kubectl apply -f deploy/kopper.yaml` wants it.
fn install_manifest(rendered: &str) -> String {
    let mut manifest = String::from(MANIFEST_HEADER);
    manifest.push_str(&std::fs::read_to_string(repo("config/rbac/00-namespace.yaml")).unwrap());
    let mut crds: Vec<PathBuf> =
        std::fs::read_dir(repo("config/crd")).unwrap().map(|entry| entry.unwrap().path()).collect();
    crds.sort();
    for crd in crds {
        manifest.push_str("---\n");
        manifest.push_str(&std::fs::read_to_string(crd).unwrap());
    }
    manifest.push_str(rendered.trim_start_matches('\n'));
    manifest
}

const MANIFEST_HEADER: &str = "\
# kopper's plain install manifest: `kubectl apply --server-side -f deploy/kopper.yaml`.
# Generated: the Helm chart (charts/kopper) rendered with its default values into the
# kopper-system namespace, after that Namespace and the CRDs. Do not edit; change the chart and
# run `KOPPER_REGENERATE=1 cargo test -p kopper --test e2e chart::` (tests/chart.rs checks it).
";

/// Renders the chart's default install by installing it with Helm onto a throwaway kubesim
/// (helm-sdkpy has no `helm template`).
async fn rendered_default_install(helm: &Helm) -> String {
    let cluster = Cluster::start(kubesim::Authorization::AlwaysAllow).await;
    let installed = helm.release("install", &cluster.kubeconfig, "kopper", json!({})).unwrap();
    install_manifest(installed["manifest"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_kopper_yaml_is_the_chart_rendered_with_its_defaults() {
    let Some(helm) = Helm::find() else { return };
    let rendered = rendered_default_install(&helm).await;
    let path = repo("deploy/kopper.yaml");
    if std::env::var("KOPPER_REGENERATE").as_deref() == Ok("1") {
        std::fs::create_dir_all(repo("deploy")).unwrap();
        std::fs::write(&path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "deploy/kopper.yaml drifted from the chart; run `KOPPER_REGENERATE=1 cargo test -p kopper --test e2e chart::`"
    );
}

/// Creates any manifest document as `client`, finding its resource by discovery.
async fn create_any(client: &kube::Client, document: Value) {
    let object: DynamicObject = serde_json::from_value(document).unwrap();
    let gvk = GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = match (&capabilities.scope, object.metadata.namespace.as_deref()) {
        (Scope::Namespaced, Some(namespace)) => Api::namespaced_with(client.clone(), namespace, &resource),
        (Scope::Namespaced, None) => panic!("{gvk:?} {:?} names no namespace", object.metadata.name),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// `kubectl apply` of deploy/kopper.yaml, first as a server-side dry run (kubesim validates
/// every object and stores none), then for real, then again (nothing changes).
#[tokio::test]
async fn kubectl_applies_deploy_kopper_yaml() {
    let cluster = Cluster::start(kubesim::Authorization::AlwaysAllow).await;
    let client = cluster.sim.client();
    let kubectl = |args: &[&str]| {
        let kubeconfig = cluster.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
        async move {
            let output = tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(&args)
                .env_remove("KUBECONFIG")
                .output()
                .await
                .expect("kubectl is on PATH");
            assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
            String::from_utf8(output.stdout).unwrap()
        }
    };
    let manifest = repo("deploy/kopper.yaml");
    let manifest = manifest.to_str().unwrap();
    // As against kube-apiserver, a dry run cannot create the namespace its objects go in.
    kubectl(&["create", "namespace", NAMESPACE]).await;
    let dry_run = kubectl(&["apply", "--server-side", "--dry-run=server", "-f", manifest]).await;
    assert!(dry_run.contains("deployment.apps/kopper serverside-applied (server dry run)"), "{dry_run}");
    assert!(
        Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get_opt("kopper").await.unwrap().is_none(),
        "a dry run stores nothing"
    );
    kubectl(&["apply", "--server-side", "-f", manifest]).await;
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get("kopper").await.unwrap();
    assert_eq!(deployment.spec.template.spec.unwrap().service_account_name.as_deref(), Some("kopper"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kopper::crds::all() {
        assert!(crds.get_opt(crd.metadata.name.as_deref().unwrap()).await.unwrap().is_some());
    }
    kubectl(&["apply", "--server-side", "-f", manifest]).await;
    let unchanged = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get("kopper").await.unwrap();
    assert_eq!(
        unchanged.metadata.resource_version, deployment.metadata.resource_version,
        "a second apply of the same manifest writes nothing"
    );
}

/// kopper running as the ServiceAccount of deploy/kopper.yaml (the chart's default install),
/// with the RBAC it grants, does its work on kubesim in RBAC mode and is never answered 403.
/// The manifest is created by a kube-rs admin client: kubesim serves plain HTTP, over which
/// client-go (so Helm and kubectl) sends no credentials, and RBAC mode needs them.
#[tokio::test]
async fn kopper_works_with_the_rbac_the_chart_installs_and_is_never_refused() {
    let cluster = Cluster::start(kubesim::Authorization::Rbac).await;
    let admin = cluster.sim.client();
    for document in yaml_documents(&std::fs::read_to_string(repo("deploy/kopper.yaml")).unwrap()) {
        create_any(&admin, document).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let identity = cluster.sim.kubeconfig_for_service_account(NAMESPACE, "kopper");
    std::fs::write(&kubeconfig, serde_yaml::to_string(&identity).unwrap()).unwrap();
    let operator = Operator::start(run_args(
        &kubeconfig,
        &["--leader-elect", "true", "--lease-namespace", NAMESPACE, "--namespace", NAMESPACE],
    ));
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    for sample in ["namespaceaccess-group-per-namespace.yaml", "replicationrule-shared-settings.yaml"] {
        for document in
            yaml_documents(&std::fs::read_to_string(repo(&format!("config/samples/{sample}"))).unwrap())
        {
            create_document(&admin, document).await;
        }
    }
    let copies: Api<ConfigMap> = Api::namespaced(admin.clone(), "team-a");
    eventually("the seed 003 copy in team-a", || async {
        copies.get_opt("shared-settings").await.unwrap().map(drop)
    })
    .await;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), "team-a");
    eventually("the seed 000 binding in team-a", || async {
        bindings.get_opt("ad-kubernetes-team-a").await.unwrap().map(drop)
    })
    .await;
    assert_eq!(cluster.sim.counters().status(403), 0, "kopper was refused something");
    operator.stop().await.unwrap();
}
