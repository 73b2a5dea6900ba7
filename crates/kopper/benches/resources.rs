//! kopper's memory and connections in the three situations of issue #12, on kubesim with the
//! `kopper` binary as a child process. Each figure is printed next to a baseline measured in
//! the same run:
//! 1. churn: a tenant creates a ~900 KB ConfigMap and a ConfigMapSync copying it into one
//!    consenting namespace, waits for the copy, deletes the ConfigMapSync, waits for the copy
//!    to go and deletes the ConfigMap, 60 times. kopper's resident memory before (baseline),
//!    its peak, and after half the rounds and after all of them, each after a settle (aim:
//!    back near the baseline, and no growth from the first half to the second);
//! 2. restart with large copies: a ReplicationRule copies one ~900 KB ConfigMap into 300
//!    namespaces; kopper's steady resident memory and peak (baseline), then kopper killed
//!    (SIGKILL) and started again on the converged cluster: the new process's peak up to its
//!    first pass, and its ratio to the first process's steady state (aim: within 1.5x);
//! 3. connections under name squatting: 200 ConfigMapSyncs in one tenant namespace whose
//!    copies are blocked by ConfigMaps of the same names that kopper did not make. kopper's
//!    established connections to the API server and its `kopper_scoped_watches` gauges
//!    before the ConfigMapSyncs exist (baseline) and once all of them report the conflict
//!    (aim: bounded, not one per rule).
//!
//! Run: `cargo bench -p kopper --bench resources` (prints figures; asserts nothing).
//! `RESOURCES_BENCH_CHURN` sets the rounds of figure 1 (default 60), `RESOURCES_BENCH_COPIES`
//! the namespaces of figure 2 (default 300) and `RESOURCES_BENCH_BLOCKED` the ConfigMapSyncs
//! of figure 3 (default 200). `RESOURCES_BENCH_CHURN_LINGER` (seconds, default 0) keeps
//! kopper running that long after the churn and prints its resident memory every 30 s:
//! kube's watches end and are made again every 290 s, which frees buffers sized by the
//! largest event they read.

mod support;

use support::{Cluster, memory_kib, tcp_connections_to};

use std::future::Future;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use kopper::controllers::replication::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use kopper::controllers::replication::types::ConfigMapSync;
use kopper::controllers::replication::types::ReplicationRule;
use kopper::tenancy::ACCEPT_REPLICATION_FROM;

/// The seed-003 sample: every ConfigMap labelled `copyrator: "true"` in `default` copied
/// into every other Active namespace.
const RULE_SAMPLE: &str = include_str!("../../../config/samples/replicationrule-shared-settings.yaml");
const RULE_SOURCE_NAMESPACE: &str = "default";
const RULE_SOURCE_LABEL: (&str, &str) = ("copyrator", "true");
/// The size of issue #12's ConfigMaps: large, yet under the API server's 1 MiB limit.
const LARGE_PAYLOAD_BYTES: usize = 900 * 1024;
/// Time given to one step (a copy appearing or going, a process becoming ready).
const STEP_LIMIT: Duration = Duration::from_secs(60);
/// Time given to a whole convergence (hundreds of copies or conflicts).
const CONVERGENCE_LIMIT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);
/// Settle before reading a process's resident memory or connections once a step is done, so
/// that what it frees or closes at the end of the step is gone from the figure.
const SETTLE: Duration = Duration::from_secs(5);
/// With `RESOURCES_BENCH_CHURN_LINGER`, how often resident memory is read after the churn.
const LINGER_STEP: Duration = Duration::from_secs(30);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The sum of metric samples, from +0: std's `f64` sum of nothing is -0, printed `-0`.
fn sum(samples: &[(String, f64)]) -> f64 {
    samples.iter().fold(0.0, |total, (_, value)| total + value)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Polls `check` until it holds; panics naming `what` past `limit`.
async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

impl Cluster {
    /// Starts kopper with only `controllers` on this cluster, and waits until it is ready.
    async fn kopper(&self, controllers: &str) -> Kopper {
        let kopper = Kopper::start(&self.kubeconfig, controllers, self.sim.addr().port());
        wait_until("kopper's /readyz", STEP_LIMIT, || kopper.ready()).await;
        kopper
    }

    /// Creates a namespace; with `accept_from`, one that accepts copies from that namespace.
    async fn create_namespace(&self, name: &str, accept_from: Option<&str>) {
        let annotations = accept_from.map(|from| json!({ACCEPT_REPLICATION_FROM: from}));
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}})).unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    fn config_maps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn syncs(&self, namespace: &str) -> Api<ConfigMapSync> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Creates a ConfigMap not made by kopper, with `labels` and one key holding `payload`.
    async fn create_config_map(&self, namespace: &str, name: &str, labels: serde_json::Value, payload: &str) {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "data": {"payload": payload},
        }))
        .unwrap();
        self.config_maps(namespace).create(&PostParams::default(), &config_map).await.unwrap();
    }

    /// Creates a ConfigMapSync in `namespace` copying its ConfigMap `config_map` into `destination`.
    async fn create_sync(&self, namespace: &str, name: &str, config_map: &str, destination: &str) {
        let sync: ConfigMapSync = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "ConfigMapSync",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "sourceNamespace": namespace,
                "destinationNamespace": destination,
                "configMapName": config_map,
            },
        }))
        .unwrap();
        self.syncs(namespace).create(&PostParams::default(), &sync).await.unwrap();
    }

    async fn exists(&self, namespace: &str, name: &str) -> bool {
        self.config_maps(namespace).get_metadata_opt(name).await.unwrap().is_some()
    }

    /// kopper's copies in the cluster, counted in kubesim's store rather than listed.
    fn copies(&self) -> usize {
        self.sim.count_labelled("configmaps", &format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")).unwrap()
    }
}

/// The `kopper` binary as a child process; killed (SIGKILL) when dropped.
struct Kopper {
    child: Child,
    admin_port: u16,
    /// kubesim's port, to tell kopper's connections to the API server from its others.
    api_port: u16,
}

impl Kopper {
    fn start(kubeconfig: &Path, controllers: &str, api_port: u16) -> Self {
        let admin_port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kopper"))
            .args(["run", "--leader-elect", "false", "--controllers", controllers])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}"), "--log-level", "warn"])
            .stdout(Stdio::null())
            .spawn()
            .expect("the kopper binary starts");
        Self { child, admin_port, api_port }
    }

    async fn ready(&self) -> bool {
        self.get("/readyz").await.is_some_and(|response| response.starts_with("HTTP/1.1 200"))
    }

    /// The samples of the `/metrics` series whose name is `name`, as (labels, value).
    async fn metric(&self, name: &str) -> Vec<(String, f64)> {
        let metrics = self.get("/metrics").await.unwrap_or_default();
        metrics
            .lines()
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let labels = series.strip_prefix(name)?;
                let value: f64 = value.parse().ok()?;
                (labels.is_empty() || labels.starts_with('{')).then(|| (labels.to_owned(), value))
            })
            .collect()
    }

    /// The sum of a metric's samples, 0 when it has none.
    async fn metric_sum(&self, name: &str) -> f64 {
        sum(&self.metric(name).await)
    }

    /// Passes one controller has finished since this process started.
    async fn passes(&self, controller: &str) -> f64 {
        let labels = format!("{{controller=\"{controller}\"}}");
        let samples = self.metric("kopper_reconciles_total").await;
        samples.iter().find(|(l, _)| *l == labels).map_or(0.0, |(_, value)| *value)
    }

    /// The raw HTTP response of the admin server for `path`.
    async fn get(&self, path: &str) -> Option<String> {
        support::admin_get(self.admin_port, path).await
    }

    /// (VmRSS, VmHWM) in KiB.
    fn memory_kib(&self) -> (u64, u64) {
        memory_kib(&format!("/proc/{}/status", self.child.id()))
    }

    /// Established TCP connections to the API server.
    fn api_connections(&self) -> usize {
        tcp_connections_to(self.child.id(), self.api_port)
    }
}

impl Drop for Kopper {
    fn drop(&mut self) {
        // std's kill is SIGKILL: no graceful shutdown, as when a node dies.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Figure 1: a ConfigMapSync of a large ConfigMap created and deleted `rounds` times.
async fn churn(rounds: usize, linger: Duration) {
    const TENANT: &str = "churn-tenant";
    const DESTINATION: &str = "churn-destination";
    let cluster = Cluster::start().await;
    cluster.create_namespace(TENANT, None).await;
    cluster.create_namespace(DESTINATION, Some(TENANT)).await;
    let kopper = cluster.kopper("config-map-sync").await;
    tokio::time::sleep(SETTLE).await;
    let (before, _) = kopper.memory_kib();

    let payload = "x".repeat(LARGE_PAYLOAD_BYTES);
    let started = Instant::now();
    let halfway_round = rounds / 2;
    let mut halfway = None;
    for round in 0..rounds {
        if round == halfway_round && round > 0 {
            tokio::time::sleep(SETTLE).await;
            halfway = Some(kopper.memory_kib().0);
        }
        let name = format!("large-{round:03}");
        cluster.create_config_map(TENANT, &name, json!({}), &payload).await;
        cluster.create_sync(TENANT, &name, &name, DESTINATION).await;
        wait_until("the copy of a ConfigMapSync", STEP_LIMIT, || cluster.exists(DESTINATION, &name)).await;
        cluster.syncs(TENANT).delete(&name, &DeleteParams::default()).await.unwrap();
        wait_until("the copy of a deleted ConfigMapSync to go", STEP_LIMIT, || async {
            !cluster.exists(DESTINATION, &name).await
        })
        .await;
        cluster.config_maps(TENANT).delete(&name, &DeleteParams::default()).await.unwrap();
    }
    let churned = started.elapsed() - if halfway.is_some() { SETTLE } else { Duration::ZERO };
    tokio::time::sleep(SETTLE).await;
    let (after, peak) = kopper.memory_kib();
    let cached = kopper.metric_sum("kopper_cached_source_contents").await;
    let mut later = Vec::new();
    let lingered = Instant::now();
    while lingered.elapsed() < linger {
        tokio::time::sleep(LINGER_STEP.min(linger)).await;
        later.push((lingered.elapsed(), kopper.memory_kib().0));
    }
    drop(kopper);

    println!(
        "1. churn: {rounds} rounds of a {} KiB ConfigMap + ConfigMapSync into 1 consenting namespace, \
         copy awaited, ConfigMapSync deleted, copy gone awaited, ConfigMap deleted ({:.1} s)",
        LARGE_PAYLOAD_BYTES / 1024,
        churned.as_secs_f64()
    );
    println!("   kopper resident before:       {:>8.1} MiB   (baseline)", mib(before));
    println!(
        "   kopper peak (VmHWM):          {:>8.1} MiB   ({:.2}x the baseline)",
        mib(peak),
        peak as f64 / before.max(1) as f64
    );
    if let Some(halfway) = halfway {
        println!(
            "   kopper resident halfway:      {:>8.1} MiB   ({:.2}x the baseline, \
             after {halfway_round} rounds and a {} s settle)",
            mib(halfway),
            halfway as f64 / before.max(1) as f64,
            SETTLE.as_secs()
        );
    }
    println!(
        "   kopper resident after:        {:>8.1} MiB   ({:.2}x the baseline, \
         after {rounds} rounds and a {} s settle; kopper_cached_source_contents {cached})",
        mib(after),
        after as f64 / before.max(1) as f64,
        SETTLE.as_secs()
    );
    for (elapsed, resident) in later {
        println!(
            "   kopper resident {:>4} s later: {:>8.1} MiB   ({:.2}x the baseline)",
            elapsed.as_secs(),
            mib(resident),
            resident as f64 / before.max(1) as f64
        );
    }
    if let Some(halfway) = halfway {
        println!(
            "   growth over the second half:  {:>8.1} MiB   \
             (memory bounded by what exists, not by history: near 0)",
            (after as f64 - halfway as f64) / 1024.0
        );
    }
    cluster.sim.shutdown().await;
}

/// Figure 2: one large source copied into `namespaces` namespaces, then kopper restarted.
async fn restart(namespaces: usize) {
    let cluster = Cluster::start().await;
    for n in 0..namespaces {
        cluster.create_namespace(&format!("copies-{n:04}"), None).await;
    }
    let labels = json!({RULE_SOURCE_LABEL.0: RULE_SOURCE_LABEL.1});
    let payload = "x".repeat(LARGE_PAYLOAD_BYTES);
    cluster.create_config_map(RULE_SOURCE_NAMESPACE, "large-source", labels, &payload).await;
    let rule: ReplicationRule = kopper::samples::of_kind(RULE_SAMPLE, "ReplicationRule").unwrap();
    Api::<ReplicationRule>::all(cluster.client.clone()).create(&PostParams::default(), &rule).await.unwrap();
    // kubesim's other namespaces are protected (kube-system, ...): only those created here
    // receive a copy.
    let copies = namespaces;

    let started = Instant::now();
    let first = cluster.kopper("replication-rule").await;
    wait_until("every copy of the large source", CONVERGENCE_LIMIT, || async { cluster.copies() >= copies })
        .await;
    let converged = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let (steady, first_peak) = first.memory_kib();
    drop(first);

    let started = Instant::now();
    let restarted = cluster.kopper("replication-rule").await;
    wait_until("the restarted kopper's first replication pass", CONVERGENCE_LIMIT, || async {
        restarted.passes("replication-rule").await > 0.0
    })
    .await;
    let first_pass = started.elapsed();
    let (restart_rss, restart_peak) = restarted.memory_kib();
    drop(restarted);

    println!(
        "2. restart with large copies: 1 ReplicationRule copying a {} KiB ConfigMap into {copies} namespaces \
         (converged in {:.1} s)",
        LARGE_PAYLOAD_BYTES / 1024,
        converged.as_secs_f64()
    );
    println!(
        "   first kopper, steady:         {:>8.1} MiB   (baseline; its peak (VmHWM) {:.1} MiB, after a {} s settle)",
        mib(steady),
        mib(first_peak),
        SETTLE.as_secs()
    );
    println!(
        "   restarted kopper, peak:       {:>8.1} MiB   ({:.2}x the first's steady state, {:.2}x its peak; \
         first pass done {:.1} s after start, resident then {:.1} MiB)",
        mib(restart_peak),
        restart_peak as f64 / steady.max(1) as f64,
        restart_peak as f64 / first_peak.max(1) as f64,
        first_pass.as_secs_f64(),
        mib(restart_rss)
    );
    cluster.sim.shutdown().await;
}

/// kopper's connections to the API server and its `kopper_scoped_watches` samples.
async fn connections_line(kopper: &Kopper) -> String {
    let watches = kopper.metric("kopper_scoped_watches").await;
    let listed: Vec<String> = watches.iter().map(|(labels, value)| format!("{labels} {value}")).collect();
    let total = sum(&watches);
    format!(
        "{:>4} connections   kopper_scoped_watches {total} [{}]",
        kopper.api_connections(),
        listed.join(", ")
    )
}

/// ConfigMapSyncs in `namespace` whose status reports a conflict.
async fn syncs_reporting_conflict(cluster: &Cluster, namespace: &str) -> usize {
    let syncs = cluster.syncs(namespace).list(&ListParams::default()).await.unwrap();
    syncs.items.iter().filter(|sync| sync.status.as_ref().is_some_and(|s| !s.conflicts.is_empty())).count()
}

/// Figure 3: `blocked` ConfigMapSyncs whose copies are blocked by squatters.
async fn squatting(blocked: usize) {
    const TENANT: &str = "squat-tenant";
    const DESTINATION: &str = "squat-destination";
    let cluster = Cluster::start().await;
    cluster.create_namespace(TENANT, None).await;
    cluster.create_namespace(DESTINATION, Some(TENANT)).await;
    for n in 0..blocked {
        let name = format!("blocked-{n:04}");
        cluster.create_config_map(TENANT, &name, json!({}), "the source").await;
        cluster.create_config_map(DESTINATION, &name, json!({}), "a squatter").await;
    }
    let kopper = cluster.kopper("config-map-sync").await;
    tokio::time::sleep(SETTLE).await;
    let before = connections_line(&kopper).await;

    let started = Instant::now();
    for n in 0..blocked {
        let name = format!("blocked-{n:04}");
        cluster.create_sync(TENANT, &name, &name, DESTINATION).await;
    }
    // Connections sampled while waiting: a peak that a settled figure would hide.
    let mut most_connections = 0;
    wait_until("every ConfigMapSync to report its conflict", CONVERGENCE_LIMIT, || {
        most_connections = most_connections.max(kopper.api_connections());
        async { syncs_reporting_conflict(&cluster, TENANT).await >= blocked }
    })
    .await;
    let reported = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let after = connections_line(&kopper).await;
    drop(kopper);

    println!(
        "3. name squatting: {blocked} ConfigMapSyncs in 1 namespace, each copy blocked by a ConfigMap kopper \
         did not make (all conflicts reported in {:.1} s)",
        reported.as_secs_f64()
    );
    println!("   to the API server, before:    {before}   (baseline: no ConfigMapSync)");
    println!("   after, {} s settle:            {after}", SETTLE.as_secs());
    println!("   most while waiting:           {most_connections:>4} connections");
    cluster.sim.shutdown().await;
}

#[tokio::main]
async fn main() {
    let rounds = env_usize("RESOURCES_BENCH_CHURN", 60).max(1);
    let copies = env_usize("RESOURCES_BENCH_COPIES", 300).max(1);
    let blocked = env_usize("RESOURCES_BENCH_BLOCKED", 200).max(1);
    let started = Instant::now();
    churn(rounds, Duration::from_secs(env_usize("RESOURCES_BENCH_CHURN_LINGER", 0) as u64)).await;
    restart(copies).await;
    squatting(blocked).await;
    println!("   (whole benchmark: {:.0} s)", started.elapsed().as_secs_f64());
}
