//! The installed `kubectl` against kubesim: the commands people run by hand while
//! developing against the simulator behave as they do against kube-apiserver.
//!
//! Each test starts its own kubesim and runs `kubectl` with a kubeconfig in a temporary
//! HOME and an otherwise empty environment, so nothing of the developer's is used. The
//! tests skip, saying so, when `kubectl` is not on PATH.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

const CONFIGMAP: &str = "
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  mode: fast
";

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
"#;

const WIDGET: &str = "
apiVersion: example.com/v1
kind: Widget
metadata:
  name: big
  namespace: default
spec:
  size: 7
  color: red
";

/// A kubesim and a kubectl configured for it.
struct Kubectl {
    binary: PathBuf,
    home: TempDir,
    sim: kubesim::Server,
}

impl Kubectl {
    /// `None` (after saying why) when there is no kubectl to run.
    async fn start() -> Option<Self> {
        Self::start_with(kubesim::Config::default()).await
    }

    /// [`Kubectl::start`] on a kubesim started with `config`; kubectl acts as the admin.
    async fn start_with(config: kubesim::Config) -> Option<Self> {
        let Some(binary) = find_on_path("kubectl") else {
            eprintln!("SKIPPED: kubectl is not on PATH");
            return None;
        };
        let sim = kubesim::Server::start(config).await.unwrap();
        let home = tempfile::tempdir().unwrap();
        sim.write_kubeconfig(&home.path().join("kubeconfig")).unwrap();
        Some(Self { binary, home, sim })
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_with(&self.home.path().join("kubeconfig"), args)
    }

    fn command_with(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .env_clear()
            // PATH stays: kubectl wrappers (such as the Cloud SDK's version dispatcher) find
            // the real binary through it.
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().await.unwrap()
    }

    /// Runs kubectl with another kubeconfig, such as a user's.
    async fn run_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        self.command_with(kubeconfig, args).output().await.unwrap()
    }

    /// Runs kubectl, fails the test if it fails, and returns its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        expect_success(args, self.run(args).await)
    }

    /// `kubectl apply|create -f -` (plus `extra` flags) with `manifest` on stdin.
    async fn with_manifest(&self, verb: &str, manifest: &str, extra: &[&str]) -> String {
        let mut args = vec![verb, "-f", "-"];
        args.extend_from_slice(extra);
        expect_success(&args, self.piped(&args, manifest).await)
    }

    /// Runs kubectl with `input` on stdin.
    async fn piped(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        child.wait_with_output().await.unwrap()
    }
}

fn expect_success(args: &[&str], output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {} failed:\nstdout: {stdout}\nstderr: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The table row (split on whitespace) whose first cell is `name`.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(cells)
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_then_configures_with_server_side_validation() {
    let Some(k) = Kubectl::start().await else { return };
    assert_eq!(k.with_manifest("apply", CONFIGMAP, &[]).await.trim(), "configmap/settings created");
    let changed = CONFIGMAP.replace("mode: fast", "mode: slow");
    assert_eq!(k.with_manifest("apply", &changed, &[]).await.trim(), "configmap/settings configured");
    assert_eq!(k.with_manifest("apply", &changed, &[]).await.trim(), "configmap/settings unchanged");
    assert_eq!(k.ok(&["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]).await, "slow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_leaves_validation_to_the_server() {
    let Some(k) = Kubectl::start().await else { return };
    let output = k.piped(&["apply", "-f", "-", "-v=6"], CONFIGMAP).await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("fieldValidation=Strict"), "kubectl did not ask for server-side validation:\n{log}");
    assert!(!log.contains("/openapi/v2"), "kubectl fell back to client-side validation:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_of_a_pod_merges_containers_by_name() {
    let Some(k) = Kubectl::start().await else { return };
    let pod = "
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - {name: app, image: nginx:1}
  - {name: sidecar, image: busybox:1}
";
    k.with_manifest("apply", pod, &[]).await;
    let output = k.piped(&["apply", "-f", "-", "-v=8"], &pod.replace("nginx:1", "nginx:2")).await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("application/strategic-merge-patch+json"), "{log}");
    // A merge key on `containers` is what makes kubectl order the list by name.
    assert!(log.contains("$setElementOrder/containers"), "patch did not merge containers by name:\n{log}");
    let images = k.ok(&["get", "pod", "web", "-o", "jsonpath={.spec.containers[*].image}"]).await;
    assert_eq!(images, "nginx:2 busybox:1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_updates_and_reports_conflicts_between_managers() {
    let Some(k) = Kubectl::start().await else { return };
    let applied = k.with_manifest("apply", CONFIGMAP, &["--server-side"]).await;
    assert_eq!(applied.trim(), "configmap/settings serverside-applied");
    let changed = CONFIGMAP.replace("mode: fast", "mode: slow");
    k.with_manifest("apply", &changed, &["--server-side"]).await;
    assert_eq!(k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.mode}"]).await, "slow");

    let other = CONFIGMAP.replace("mode: fast", "mode: other");
    let conflict = k.piped(&["apply", "-f", "-", "--server-side", "--field-manager=ops"], &other).await;
    let stderr = String::from_utf8_lossy(&conflict.stderr);
    assert!(
        !conflict.status.success() && stderr.contains(r#"conflict with "kubectl": .data.mode"#),
        "{stderr}"
    );
    k.with_manifest("apply", &other, &["--server-side", "--field-manager=ops", "--force-conflicts"]).await;
    let managed = [
        "get",
        "cm",
        "settings",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ];
    assert!(k.ok(&managed).await.contains("ops"));
    assert_eq!(k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.mode}"]).await, "other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_annotate_are_seen_by_selectors_and_output() {
    let Some(k) = Kubectl::start().await else { return };
    k.with_manifest("create", CONFIGMAP, &[]).await;
    k.with_manifest("create", &CONFIGMAP.replace("name: settings", "name: other"), &[]).await;
    assert_eq!(k.ok(&["label", "cm", "settings", "tier=db"]).await.trim(), "configmap/settings labeled");
    assert_eq!(
        k.ok(&["annotate", "cm", "settings", "owner=team-a"]).await.trim(),
        "configmap/settings annotated"
    );
    assert_eq!(k.ok(&["get", "cm", "-l", "tier=db", "-o", "name"]).await.trim(), "configmap/settings");
    assert_eq!(k.ok(&["get", "cm", "-l", "tier!=db", "-o", "name"]).await.trim(), "configmap/other");
    let annotation = k.ok(&["get", "cm", "settings", "-o", "jsonpath={.metadata.annotations.owner}"]).await;
    assert_eq!(annotation, "team-a");
    let yaml = k.ok(&["get", "cm", "settings", "-o", "yaml"]).await;
    assert!(yaml.contains("tier: db"), "{yaml}");
    k.ok(&["label", "cm", "settings", "tier-"]).await;
    assert_eq!(k.ok(&["get", "cm", "-l", "tier", "-o", "name"]).await.trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_accepts_merge_json_and_strategic_patches() {
    let Some(k) = Kubectl::start().await else { return };
    k.with_manifest("create", CONFIGMAP, &[]).await;
    k.ok(&["patch", "cm", "settings", "--type=merge", "-p", r#"{"data":{"merge":"1"}}"#]).await;
    k.ok(&[
        "patch",
        "cm",
        "settings",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/json","value":"2"}]"#,
    ])
    .await;
    let out = k.ok(&["patch", "cm", "settings", "-p", r#"{"data":{"strategic":"3"}}"#]).await;
    assert_eq!(out.trim(), "configmap/settings patched");
    let data = k.ok(&["get", "cm", "settings", "-o", "json"]).await;
    let data: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(
        data["data"],
        serde_json::json!({"mode": "fast", "merge": "1", "json": "2", "strategic": "3"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prints_the_columns_kube_apiserver_prints() {
    let Some(k) = Kubectl::start().await else { return };
    let namespaces = k.ok(&["get", "namespaces"]).await;
    assert!(namespaces.starts_with("NAME"), "{namespaces}");
    assert_eq!(row(&namespaces, "NAME"), ["NAME", "STATUS", "AGE"]);
    assert_eq!(row(&namespaces, "default")[1], "Active");
    let sorted = k.ok(&["get", "namespaces", "--sort-by=.metadata.name"]).await;
    assert_eq!(row(&sorted, "kube-system")[1], "Active");

    k.with_manifest("create", CONFIGMAP, &[]).await;
    let configmaps = k.ok(&["get", "cm"]).await;
    assert_eq!(row(&configmaps, "NAME"), ["NAME", "DATA", "AGE"]);
    assert_eq!(row(&configmaps, "settings")[1], "1");

    let all = k.ok(&["get", "cm", "-A"]).await;
    assert_eq!(row(&all, "NAMESPACE"), ["NAMESPACE", "NAME", "DATA", "AGE"]);
    assert_eq!(row(&all, "default")[1], "settings");

    let secret = "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"creds\",\"namespace\":\"default\"},\"type\":\"Opaque\",\"data\":{\"a\":\"eA==\",\"b\":\"eQ==\"}}";
    k.with_manifest("apply", secret, &[]).await;
    assert_eq!(row(&k.ok(&["get", "secret", "creds"]).await, "creds")[1..3], ["Opaque", "2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_apply_once_their_crd_is_established() {
    let Some(k) = Kubectl::start().await else { return };
    k.with_manifest("apply", CRD, &[]).await;
    let waited =
        k.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s"]).await;
    assert_eq!(
        waited.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com condition met"
    );
    assert_eq!(k.with_manifest("apply", WIDGET, &[]).await.trim(), "widget.example.com/big created");
    let table = k.ok(&["get", "widgets"]).await;
    assert_eq!(row(&table, "NAME"), ["NAME", "SIZE", "COLOR"]);
    assert_eq!(row(&table, "big"), ["big", "7", "red"]);
    let bigger = WIDGET.replace("size: 7", "size: 9");
    assert_eq!(k.with_manifest("apply", &bigger, &[]).await.trim(), "widget.example.com/big configured");
    let waited = k.ok(&["wait", "--for=jsonpath={.spec.size}=9", "wd/big", "--timeout=10s"]).await;
    assert_eq!(waited.trim(), "widget.example.com/big condition met");
    assert_eq!(row(&k.ok(&["get", "crd"]).await, "NAME"), ["NAME", "CREATED", "AT"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_delete_returns_once_finalizers_are_gone() {
    let Some(k) = Kubectl::start().await else { return };
    let held = CONFIGMAP
        .replace("  namespace: default\n", "  namespace: default\n  finalizers: [example.com/hold]\n");
    k.with_manifest("create", &held, &[]).await;
    k.ok(&["delete", "cm", "settings", "--wait=false"]).await;
    let early = k.run(&["wait", "--for=delete", "cm/settings", "--timeout=1s"]).await;
    assert!(!early.status.success(), "wait returned while a finalizer still held the object");
    k.ok(&[
        "patch",
        "cm",
        "settings",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    k.ok(&["wait", "--for=delete", "cm/settings", "--timeout=10s"]).await;
    let gone = k.run(&["get", "cm", "settings"]).await;
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_rows_for_new_objects() {
    let Some(k) = Kubectl::start().await else { return };
    k.with_manifest("create", CONFIGMAP, &[]).await;
    let mut watch = k.command(&["get", "cm", "--watch"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(cells(&next_line(&mut lines).await), ["NAME", "DATA", "AGE"]);
    assert_eq!(cells(&next_line(&mut lines).await)[..2], ["settings", "1"]);
    // kubectl watches from the list's resource version, so this is seen however soon it comes.
    k.with_manifest("create", &CONFIGMAP.replace("name: settings", "name: later"), &[]).await;
    assert_eq!(cells(&next_line(&mut lines).await)[..2], ["later", "1"]);
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    line.expect("no output from kubectl within 10s").unwrap().expect("kubectl ended its output")
}

fn cells(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_describes_fields_from_the_openapi_schema() {
    let Some(k) = Kubectl::start().await else { return };
    let explained = k.ok(&["explain", "configmap.data"]).await;
    assert!(explained.contains("FIELD: data <map[string]string>"), "{explained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_configmap_from_literals_sends_protobuf_and_stores_the_literals() {
    let Some(k) = Kubectl::start().await else { return };
    let args =
        ["create", "configmap", "settings", "--from-literal=mode=fast", "--from-literal=level=3", "-v=8"];
    let output = k.run(&args).await;
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(expect_success(&args, output).trim(), "configmap/settings created");
    // Without this the test would no longer cover kubesim's protobuf decoding.
    assert!(log.contains("Content-Type: application/vnd.kubernetes.protobuf"), "{log}");
    let data = k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data}"]).await;
    let data: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data, serde_json::json!({"mode": "fast", "level": "3"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_secret_generic_stores_the_literal_base64_encoded() {
    let Some(k) = Kubectl::start().await else { return };
    let created = k.ok(&["create", "secret", "generic", "creds", "--from-literal=password=s3cr3t"]).await;
    assert_eq!(created.trim(), "secret/creds created");
    assert_eq!(k.ok(&["get", "secret", "creds", "-o", "jsonpath={.data.password}"]).await, "czNjcjN0");
    assert_eq!(k.ok(&["get", "secret", "creds", "-o", "jsonpath={.type}"]).await, "Opaque");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_namespace_makes_an_active_namespace() {
    let Some(k) = Kubectl::start().await else { return };
    assert_eq!(k.ok(&["create", "namespace", "team-a"]).await.trim(), "namespace/team-a created");
    assert_eq!(k.ok(&["get", "ns", "team-a", "-o", "jsonpath={.status.phase}"]).await, "Active");
    let in_it = k.ok(&["create", "serviceaccount", "builder", "-n", "team-a"]).await;
    assert_eq!(in_it.trim(), "serviceaccount/builder created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_rolebinding_binds_a_group_to_a_cluster_role() {
    let Some(k) = Kubectl::start().await else { return };
    let created = k.ok(&["create", "rolebinding", "editors", "--clusterrole=edit", "--group=g"]).await;
    assert_eq!(created.trim(), "rolebinding.rbac.authorization.k8s.io/editors created");
    let binding = k.ok(&["get", "rolebinding", "editors", "-o", "json"]).await;
    let binding: serde_json::Value = serde_json::from_str(&binding).unwrap();
    assert_eq!(
        binding["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"})
    );
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_server_dry_run_prints_the_object_without_storing_it() {
    let Some(k) = Kubectl::start().await else { return };
    let printed =
        k.ok(&["create", "configmap", "draft", "--from-literal=a=b", "--dry-run=server", "-o", "yaml"]).await;
    let printed: serde_json::Value = serde_yaml::from_str(&printed).unwrap();
    assert_eq!(printed["metadata"]["name"], "draft");
    assert_eq!(printed["data"], serde_json::json!({"a": "b"}));
    let stored = k.run(&["get", "cm", "draft"]).await;
    assert!(String::from_utf8_lossy(&stored.stderr).contains("NotFound"), "a dry run stored the object");
}

const DEPLOYMENT: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{containerPort: 80}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 80}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
  namespace: default
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: web}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_workload_kinds_are_served_to_kubectl() {
    let Some(k) = Kubectl::start().await else { return };
    let resources = k.ok(&["api-resources", "--no-headers"]).await;
    for (name, group) in [
        ("deployments", "apps/v1"),
        ("poddisruptionbudgets", "policy/v1"),
        ("services", "v1"),
        ("cronjobs", "batch/v1"),
        ("ingresses", "networking.k8s.io/v1"),
    ] {
        assert!(
            resources.lines().any(|line| line.starts_with(name) && line.contains(group)),
            "{name} missing:\n{resources}"
        );
    }
    let applied = k.with_manifest("apply", DEPLOYMENT, &[]).await;
    assert!(applied.contains("deployment.apps/web created"), "{applied}");
    assert!(
        applied.contains("service/web created") && applied.contains("poddisruptionbudget.policy/web created"),
        "{applied}"
    );
    let all = k.ok(&["get", "all"]).await;
    assert!(all.contains("deployment.apps/web"), "{all}");
    assert!(all.contains("service/web"), "{all}");
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]).await, "2");
    let changed = DEPLOYMENT.replace("replicas: 2", "replicas: 3");
    assert!(k.with_manifest("apply", &changed, &[]).await.contains("deployment.apps/web configured"));
    assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.metadata.generation}"]).await, "2");
    let wrong = DEPLOYMENT.replace("replicas: 2", "replicas: two");
    let refused = k.piped(&["apply", "-f", "-"], &wrong).await;
    assert!(!refused.status.success(), "a wrong field type is refused");
}

/// What `kubectl auth can-i` printed and whether it exited 0 (it exits 1 for "no").
async fn can_i(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> (String, bool) {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let output = k.run_as(kubeconfig, &all).await;
    let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        matches!(answer.as_str(), "yes" | "no"),
        "kubectl {} printed {answer:?}, stderr: {}",
        all.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    (answer, output.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_tls_is_refused_until_bound_and_can_i_agrees() {
    let config = kubesim::Config {
        authorization: kubesim::Authorization::Rbac,
        tls: true,
        ..kubesim::Config::default()
    };
    let Some(k) = Kubectl::start_with(config).await else { return };
    assert!(k.sim.url().starts_with("https://"), "{}", k.sim.url());
    let alice = k.home.path().join("alice.kubeconfig");
    k.sim.write_kubeconfig_for_user(&alice, "alice", &[]).unwrap();
    k.ok(&["create", "namespace", "team"]).await;

    let refused = k.run_as(&alice, &["get", "configmaps", "-n", "team"]).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(
            "Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \
             \"configmaps\" in API group \"\" in the namespace \"team\""
        ),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(can_i(&k, &alice, &["list", "configmaps", "-n", "team"]).await, ("no".to_owned(), false));
    let admin = k.home.path().join("kubeconfig");
    let as_alice = ["list", "configmaps", "-n", "team", "--as", "alice"];
    assert_eq!(can_i(&k, &admin, &as_alice).await, ("no".to_owned(), false));
    let listed = expect_success(
        &["auth", "can-i", "--list"],
        k.run_as(&alice, &["auth", "can-i", "--list", "-n", "team"]).await,
    );
    assert!(!listed.lines().any(|line| line.starts_with("configmaps ")), "{listed}");

    k.ok(&["create", "rolebinding", "alice-views", "--clusterrole=view", "--user=alice", "-n", "team"]).await;
    let allowed = k.run_as(&alice, &["get", "configmaps", "-n", "team"]).await;
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    assert_eq!(can_i(&k, &alice, &["list", "configmaps", "-n", "team"]).await, ("yes".to_owned(), true));
    assert_eq!(can_i(&k, &admin, &as_alice).await, ("yes".to_owned(), true));
    let listed = expect_success(
        &["auth", "can-i", "--list"],
        k.run_as(&alice, &["auth", "can-i", "--list", "-n", "team"]).await,
    );
    assert_eq!(row(&listed, "configmaps"), ["configmaps", "[]", "[]", "[get", "list", "watch]"], "{listed}");

    // view grants no writes, and both kubectl and can-i say so.
    assert_eq!(can_i(&k, &alice, &["create", "configmaps", "-n", "team"]).await, ("no".to_owned(), false));
    let write = k.run_as(&alice, &["create", "configmap", "x", "-n", "team"]).await;
    assert!(!write.status.success());
    let refusal = "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\"";
    assert!(String::from_utf8_lossy(&write.stderr).contains(refusal), "{write:?}");
    assert_eq!(can_i(&k, &alice, &["list", "configmaps", "-n", "other"]).await, ("no".to_owned(), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_kubeconfig_acts_as_the_service_account() {
    let config = kubesim::Config {
        authorization: kubesim::Authorization::Rbac,
        tls: true,
        ..kubesim::Config::default()
    };
    let Some(k) = Kubectl::start_with(config).await else { return };
    let builder = k.home.path().join("team-a-builder.kubeconfig");
    k.sim.write_kubeconfig_for_service_account(&builder, "team-a", "builder").unwrap();
    k.ok(&["create", "namespace", "team-a"]).await;
    let whoami = k.run_as(&builder, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).await;
    assert_eq!(expect_success(&["auth", "whoami"], whoami), "system:serviceaccount:team-a:builder");
    assert_eq!(can_i(&k, &builder, &["get", "secrets", "-n", "team-a"]).await.0, "no");
    k.ok(&[
        "create",
        "rolebinding",
        "builder-edits",
        "--clusterrole=edit",
        "--serviceaccount=team-a:builder",
        "-n",
        "team-a",
    ])
    .await;
    assert_eq!(can_i(&k, &builder, &["get", "secrets", "-n", "team-a"]).await.0, "yes");
    let created = k.run_as(&builder, &["create", "configmap", "built", "-n", "team-a"]).await;
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
}
