//! kopper's metrics, alert rules and dashboard, checked by the tools of the field: promtool
//! lints the metrics of a running kopper and runs the rules' unit tests, and a real
//! Prometheus scrapes kopper on kubesim while a conflict and an error burst make the alerts go
//! pending. Prometheus and promtool come from Debian's `prometheus` package
//! (scripts/setup-prometheus.sh); without them these tests fail under `CI=true` and are
//! skipped, saying so, elsewhere.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{Cluster, Operator, eventually, eventually_within, free_admin_addr, http_get};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kopper::controllers::replication::types::ReplicationRule;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const RULE_SAMPLE: &str = include_str!("../../../../config/samples/replicationrule-shared-settings.yaml");

fn config(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config").join(path)
}

fn read_yaml(path: &Path) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The installed tool, or `None` (with the reason printed) when it is missing outside CI.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    if found.is_none() {
        let message = format!("{name} is not installed: run scripts/setup-prometheus.sh");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("skipped: {message}");
    }
    found
}

/// Runs promtool with `args` and `stdin`; its exit status and everything it printed.
fn promtool(promtool: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(promtool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// kopper on kubesim with its CRDs, the seed 003 rule and a ConfigMap kopper did not make
/// where the rule wants a copy: every controller has something to report.
struct Scene {
    cluster: Cluster,
    operator: Option<Operator>,
    admin: String,
}

impl Scene {
    async fn start() -> Self {
        let cluster = Cluster::start().await;
        let crds = Api::all(cluster.client.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let admin = free_admin_addr();
        let operator = Some(Operator::start(cluster.run_args(&["--admin-addr", &admin])));
        let scene = Self { cluster, operator, admin };
        scene.conflict().await;
        scene
    }

    /// The seed 003 rule copies `shared-settings` everywhere: team-a already has one of its
    /// own, team-ok gets its copy.
    async fn conflict(&self) {
        let client = &self.cluster.client;
        for name in ["team-a", "team-ok"] {
            let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
        }
        let theirs: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "shared-settings"}})).unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), "team-a")
            .create(&PostParams::default(), &theirs)
            .await
            .unwrap();
        for document in kopper::samples::documents(RULE_SAMPLE).unwrap() {
            let name = document["metadata"]["name"].as_str().unwrap().to_owned();
            let params = PatchParams::apply("test").force();
            match document["kind"].as_str() {
                Some("ReplicationRule") => {
                    Api::<ReplicationRule>::all(client.clone())
                        .patch(&name, &params, &Patch::Apply(&document))
                        .await
                        .unwrap();
                }
                _ => {
                    Api::<ConfigMap>::namespaced(client.clone(), "default")
                        .patch(&name, &params, &Patch::Apply(&document))
                        .await
                        .unwrap();
                }
            }
        }
    }

    /// Every write of a copy fails from now on, and a new namespace asks for one.
    async fn error_burst(&self) {
        self.cluster.sim.faults().fail_next(kubesim::Fault {
            verb: Some("create".into()),
            resource: Some("configmaps".into()),
            count: 1_000,
            status: 500,
        });
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
        Api::<Namespace>::all(self.cluster.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }

    /// `/metrics` once the conflict shows in it.
    async fn metrics(&self) -> String {
        eventually("the conflict in kopper's metrics", || async {
            let (_, body) = http_get(&self.admin, "/metrics").await?;
            body.contains("kopper_conflicts{controller=\"replication-rule\"} 1").then_some(body)
        })
        .await
    }

    async fn stop(mut self) {
        self.operator.take().unwrap().stop().await.unwrap();
    }
}

#[tokio::test]
async fn promtool_finds_nothing_to_fix_in_kopper_s_metrics() {
    let Some(promtool_path) = tool("promtool") else { return };
    let scene = Scene::start().await;
    let metrics = scene.metrics().await;
    let (ok, output) = promtool(&promtool_path, &["check", "metrics"], &metrics);
    assert!(ok && output.trim().is_empty(), "promtool check metrics:\n{output}\n{metrics}");
    for sample in
        ["kopper_build_info{", "process_resident_memory_bytes ", "kopper_api_requests_total{verb=\"watch\""]
    {
        assert!(metrics.contains(sample), "{sample} missing from:\n{metrics}");
    }
    let controllers: BTreeSet<&str> =
        metrics.split("controller=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    // The namespace cache every controller shares counts as its own owner.
    let known = [
        "bucket",
        kopper::controllers::bucket::class_status::CLASS_CONTROLLER,
        kopper::controllers::bucket::grant_controller::NAME,
        "config-map-sync",
        "namespace-access",
        "namespace-access-status",
        "pod-labeler",
        "replication-rule",
        "secret-sync",
        kopper::runtime::namespaces::CACHE_OWNER,
    ];
    assert!(
        controllers.iter().all(|name| known.contains(name)),
        "one label value per controller: {controllers:?}"
    );
    assert!(!metrics.contains("kind=\"ConfigMap copy\""), "no spaces in label values");
    scene.stop().await;
}

/// Every alert rule: loaded by promtool, with a summary, a description and a runbook section
/// that exists, identical in the plain file and the PrometheusRule, and unit-tested.
#[tokio::test]
async fn alert_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool_path) = tool("promtool") else { return };
    let rules_path = config("prometheus/kopper-alerts.yaml");
    let rules = read_yaml(&rules_path);
    let operator_rule = read_yaml(&config("prometheus/kopper-prometheusrule.yaml"));
    assert_eq!(operator_rule["spec"], rules, "the PrometheusRule carries exactly the plain rules");
    let runbooks = std::fs::read_to_string(config("../docs/operations.md")).unwrap().to_lowercase();
    let alerts: Vec<&Value> =
        rules["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    for alert in &alerts {
        let name = alert["alert"].as_str().unwrap();
        let annotations = &alert["annotations"];
        assert!(annotations["summary"].as_str().is_some_and(|s| !s.is_empty()), "{name}: summary");
        assert!(annotations["description"].as_str().is_some_and(|s| s.len() > 40), "{name}: description");
        let anchor = annotations["runbook_url"].as_str().unwrap().rsplit_once('#').unwrap().1;
        assert!(runbooks.contains(&format!("### {anchor}")), "{name}: runbook section {anchor}");
    }
    let (ok, output) = promtool(&promtool_path, &["check", "rules", rules_path.to_str().unwrap()], "");
    assert!(ok, "promtool check rules:\n{output}");
    let tests = config("prometheus/kopper-alerts.test.yaml");
    let unit_tests = read_yaml(&tests);
    for alert in &alerts {
        let name = alert["alert"].as_str().unwrap();
        let cases: Vec<&Value> = unit_tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|test| test["alert_rule_test"].as_array().unwrap())
            .filter(|case| case["alertname"] == name)
            .collect();
        assert!(
            cases.iter().any(|c| !c["exp_alerts"].as_array().unwrap().is_empty()),
            "{name} has a firing case"
        );
        assert!(
            cases.iter().any(|c| c["exp_alerts"].as_array().unwrap().is_empty()),
            "{name} has a quiet case"
        );
    }
    let (ok, output) = promtool(&promtool_path, &["test", "rules", tests.to_str().unwrap()], "");
    assert!(ok, "promtool test rules:\n{output}");
}

/// The metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        rest = &rest[start..];
        let end =
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        let word = &rest[..end];
        if word.starts_with("kopper_") || word.starts_with("process_") {
            names.insert(word.to_owned());
        }
        rest = &rest[end..];
    }
    names
}

fn dashboard_queries() -> Vec<String> {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(config("grafana/kopper-dashboard.json")).unwrap())
            .unwrap();
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap())
        .map(|target| target["expr"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn dashboard_queries_are_valid_promql_over_metrics_kopper_exports() {
    let Some(promtool_path) = tool("promtool") else { return };
    let json = std::fs::read_to_string(config("grafana/kopper-dashboard.json")).unwrap();
    let configmap = read_yaml(&config("grafana/kopper-dashboard-configmap.yaml"));
    assert_eq!(
        configmap["data"]["kopper-dashboard.json"].as_str(),
        Some(json.as_str()),
        "ConfigMap holds the JSON"
    );
    assert_eq!(configmap["metadata"]["labels"]["grafana_dashboard"], "1");
    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "{queries:?}");
    // promtool parses PromQL when it checks rules: each query becomes a recording rule.
    let rules = json!({"groups": [{"name": "dashboard", "rules": queries.iter().enumerate()
        .map(|(i, expr)| json!({"record": format!("dashboard:query_{i}"), "expr": expr})).collect::<Vec<_>>()}]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-rules.yaml");
    std::fs::write(&file, serde_yaml::to_string(&rules).unwrap()).unwrap();
    let (ok, output) = promtool(&promtool_path, &["check", "rules", file.to_str().unwrap()], "");
    assert!(ok, "dashboard queries are not valid PromQL:\n{output}");

    let scene = Scene::start().await;
    scene.metrics().await;
    // Some families have samples only once something went wrong: make it go wrong.
    scene.error_burst().await;
    let faults = scene.cluster.sim.faults();
    faults.fail_next(kubesim::Fault {
        verb: Some("watch".into()),
        resource: Some("configmaps".into()),
        count: 1,
        status: 500,
    });
    faults.close_watches();
    let wanted: BTreeSet<String> = queries.iter().flat_map(|query| metric_names(query)).collect();
    let missing = |metrics: &str| {
        let exported: BTreeSet<&str> = metrics
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split(['{', ' ']).next())
            .collect();
        wanted.iter().filter(|name| !exported.contains(name.as_str())).cloned().collect::<Vec<_>>()
    };
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    loop {
        let (_, metrics) = http_get(&scene.admin, "/metrics").await.unwrap();
        let absent = missing(&metrics);
        if absent.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dashboard reads metrics kopper does not export: {absent:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    scene.stop().await;
}

/// A real Prometheus on loopback, scraping kopper every second and evaluating the alert rules.
struct Prometheus {
    child: std::process::Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, kopper_admin: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rules = config("prometheus/kopper-alerts.yaml");
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [rules.to_str().unwrap()],
            "scrape_configs": [{"job_name": "kopper", "static_configs": [{"targets": [kopper_admin]}]}],
        });
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, serde_yaml::to_string(&config).unwrap()).unwrap();
        let address = free_admin_addr();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, address, _dir: dir }
    }

    /// An HTTP API answer's `data`, if Prometheus answered with success.
    async fn api(&self, path: &str) -> Option<Value> {
        let (status, body) = http_get(&self.address, path).await?;
        let answer: Value = serde_json::from_str(&body).ok()?;
        (status == 200 && answer["status"] == "success").then(|| answer["data"].clone())
    }

    async fn query(&self, expr: &str) -> Option<Vec<Value>> {
        let data = self.api(&format!("/api/v1/query?query={}", percent_encode(expr))).await?;
        data["result"].as_array().cloned()
    }

    async fn alert_states(&self) -> Vec<(String, String)> {
        let Some(data) = self.api("/api/v1/alerts").await else { return Vec::new() };
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or_default().to_owned(),
                    a["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn prometheus_scrapes_kopper_and_the_alerts_go_pending_on_a_conflict_and_an_error_burst() {
    let (Some(prometheus_path), Some(_)) = (tool("prometheus"), tool("promtool")) else { return };
    let scene = Scene::start().await;
    scene.metrics().await;
    let prometheus = Prometheus::start(&prometheus_path, &scene.admin);
    let deadline = std::time::Duration::from_secs(60);
    eventually_within(deadline, "Prometheus to scrape kopper", || async {
        let up = prometheus.query("up{job=\"kopper\"} == 1").await?;
        (!up.is_empty()).then_some(())
    })
    .await;

    scene.error_burst().await;

    let expected =
        ["KopperConflicts", "KopperRulesNotReady", "KopperCopiesOutOfSync", "KopperReconcileErrors"];
    let states = eventually_within(deadline, "the alerts to go pending", || async {
        let states = prometheus.alert_states().await;
        expected
            .iter()
            .all(|alert| states.iter().any(|(name, state)| name == alert && state == "pending"))
            .then_some(states)
    })
    .await;
    for quiet in ["KopperDown", "KopperNoLeader"] {
        assert!(!states.iter().any(|(name, _)| name == quiet), "{quiet} must stay quiet: {states:?}");
    }
    let main_queries = [
        "sum by (controller) (rate(kopper_reconciles_total[5m]))",
        "sum by (controller, category) (rate(kopper_reconcile_errors_total[5m]))",
        "max by (kind) (kopper_copies_out_of_sync)",
        "max by (controller) (kopper_conflicts)",
        "process_resident_memory_bytes{job=\"kopper\"}",
        "sum by (verb, code) (rate(kopper_api_requests_total[5m]))",
        "kopper_leader",
    ];
    for query in main_queries {
        assert!(dashboard_queries().iter().any(|q| q == query), "{query} is a dashboard query");
        let result = eventually_within(deadline, &format!("data for {query}"), || async {
            prometheus.query(query).await.filter(|result| !result.is_empty())
        })
        .await;
        assert!(!result.is_empty());
    }
    scene.stop().await;
}
