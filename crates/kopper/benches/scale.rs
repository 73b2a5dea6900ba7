//! kopper at Kubernetes' published limits: 10,000 namespaces and 150,000 pods (half of them
//! asking for the pod-name label) in kubesim, with the pod labeler and NamespaceAccess (5
//! policies over every namespace) running in the `kopper` binary as a child process. Each
//! figure is printed next to a baseline measured in the same run, as soon as it is measured;
//! nothing is asserted.
//!
//! 1. idle: kopper's resident memory on an empty cluster (the policies only);
//! 2. namespaces: the namespaces created, then the floor (the same RoleBinding creates sent
//!    straight from the bench, as many at a time as kopper sends, timed until the bench's
//!    watch has seen them all, as kopper's are), then kopper started:
//!    its time until every namespace has its 5 bindings, and its memory per namespace above
//!    idle;
//! 3. pods: the pods created, the floor (the same label patches from the bench), kopper
//!    started again: its time until every asking pod is labelled, and its memory per pod
//!    above the namespaces-only figure; next to what a pod's metadata weighs (without
//!    managed fields) and what kubesim holds per pod;
//! 4. latency while every pod exists: new annotated pods created at a steady rate, each
//!    timed from its create answered to its label seen by the bench's watch (p50/p99); then
//!    new namespaces, each timed until its 5 bindings are seen;
//! 5. restart: kopper stopped and started on the converged cluster: time to ready, time
//!    until a pod created then is labelled, and its peak memory against its steady memory.
//!
//! Run: `cargo bench -p kopper --bench scale` (about 5 minutes at the defaults on 2 cores;
//! kubesim holds the 150,000 pods in about 600 MiB). Environment:
//! - `SCALE_BENCH_NAMESPACES` (default 10000), `SCALE_BENCH_PODS` (default 150000);
//! - `SCALE_BENCH_NEW_PODS` (default 500, created at `SCALE_BENCH_NEW_PODS_PER_SECOND`,
//!   default 50), `SCALE_BENCH_NEW_NAMESPACES` (default 100, 10 a second);
//! - `SCALE_BENCH_KOPPER_WRAPPER`: a command kopper runs under, such as `heaptrack -o
//!   /tmp/kopper-heap` for a heap profile (its memory figures are then the wrapper's);
//! - `SCALE_BENCH_HEAP_STATS`: set, glibc's `malloc_stats()` of kopper is printed through
//!   gdb once the namespaces are bound, 3 s and 14 s after (on standard error).
//!
//! The namespaces' phase also prints every request kubesim served while kopper bound them
//! (per namespace), the CPU time kopper and this process used meanwhile against the
//! floor's, and kopper's memory one trim period later with its peak.
//!
//! For a quick check: `SCALE_BENCH_NAMESPACES=200 SCALE_BENCH_PODS=2000 SCALE_BENCH_NEW_PODS=50
//! SCALE_BENCH_NEW_NAMESPACES=10 cargo bench -p kopper --bench scale`.

mod support;

use support::wait_until;

use support::{Cluster, admin_get, memory_kib};

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

const POLICIES: usize = 5;
/// Reconciles kopper runs at once per controller (`--concurrency`, its default), and so the
/// writes the floor sends at once per kind.
const CONCURRENCY: usize = 4;
const ANNOTATION: &str = "kopper.dev/add-pod-name-label";
const LABEL: &str = "kopper.dev/pod-name";
const MANAGED: &str = "app.kubernetes.io/managed-by=kopper";
const FLOOR_LABEL: &str = "bench.kopper.dev/floor";
/// The floor writes under a field manager of its own, as kopper does.
const FLOOR_FIELD_MANAGER: &str = "kopper-bench-floor";
/// How long after the first memory reading the settled one is taken: past kopper's 10 s
/// period of giving glibc's free memory back.
const SETTLE: Duration = Duration::from_secs(11);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Scale {
    namespaces: usize,
    pods: usize,
    new_pods: usize,
    new_pods_per_second: usize,
    new_namespaces: usize,
}

impl Scale {
    fn from_env() -> Self {
        Self {
            namespaces: env_or("SCALE_BENCH_NAMESPACES", 10_000).max(1),
            pods: env_or("SCALE_BENCH_PODS", 150_000),
            new_pods: env_or("SCALE_BENCH_NEW_PODS", 500),
            new_pods_per_second: env_or("SCALE_BENCH_NEW_PODS_PER_SECOND", 50).max(1),
            new_namespaces: env_or("SCALE_BENCH_NEW_NAMESPACES", 100),
        }
    }

    fn namespace(&self, pod: usize) -> String {
        format!("team-{}", pod % self.namespaces)
    }

    fn asking(&self) -> usize {
        self.pods.div_ceil(2)
    }
}

fn pod_name(n: usize) -> String {
    format!("app-{n:06}-7d9f8c6b5-x2x4z")
}

/// A pod shaped like a Deployment's: its labels and annotations. No owner reference: kubesim
/// collects pods whose owner does not exist, as Kubernetes does.
fn pod(name: &str, asking: bool) -> Pod {
    let mut annotations = json!({"kubectl.kubernetes.io/restartedAt": "2026-11-28T10:00:00Z"});
    if asking {
        annotations[ANNOTATION] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5", "team": "platform"},
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

struct Kopper {
    child: Child,
    port: u16,
}

impl Kopper {
    fn start(cluster: &Cluster) -> Self {
        let port = free_port();
        let wrapper = std::env::var("SCALE_BENCH_KOPPER_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut command = Command::new(program);
                command.args(words).arg(env!("CARGO_BIN_EXE_kopper"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_kopper")),
        };
        let child = command
            .args(["run", "--leader-elect", "false", "--controllers", "namespace-access,pod-labeler"])
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{port}"), "--log-level", "warn"])
            .stdout(Stdio::null())
            .spawn()
            .expect("the kopper binary starts");
        Self { child, port }
    }

    /// The process whose memory is measured: kopper itself, also under a wrapper.
    fn pid(&self) -> u32 {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.child.id()))
            .unwrap_or_default();
        let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        children
            .split_whitespace()
            .find(|pid| exe(pid).is_some_and(|path| path.ends_with("kopper")))
            .and_then(|pid| pid.parse().ok())
            .unwrap_or(self.child.id())
    }

    /// CPU time kopper used so far (user and system).
    fn cpu(&self) -> Duration {
        cpu_time(&format!("/proc/{}/stat", self.pid()))
    }

    /// (VmRSS, VmHWM) in KiB.
    fn memory(&self) -> (u64, u64) {
        memory_kib(&format!("/proc/{}/status", self.pid()))
    }

    /// With `SCALE_BENCH_HEAP_STATS` set, has glibc print kopper's heap (system bytes against
    /// bytes in use, per arena) on kopper's standard error, through gdb: how much of the
    /// resident memory is free memory glibc keeps.
    fn print_heap_stats(&self, when: &str) {
        if std::env::var_os("SCALE_BENCH_HEAP_STATS").is_none() {
            return;
        }
        eprintln!("kopper's heap ({when}):");
        let _ = Command::new("gdb")
            .args(["-batch", "-p", &self.pid().to_string(), "-ex", "call (void) malloc_stats()"])
            .stdout(Stdio::null())
            .status();
    }

    async fn wait_ready(&self) -> Duration {
        let started = Instant::now();
        wait_until("kopper ready", Duration::from_secs(900), || async {
            admin_get(self.port, "/readyz").await.is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        })
        .await;
        started.elapsed()
    }

    fn stop(mut self) {
        // SIGTERM to kopper itself, which ends it cleanly, so a wrapper such as heaptrack
        // writes its profile.
        let _ = Command::new("kill").arg(self.pid().to_string()).status();
        if self.child.wait().is_err() {
            self.child.kill().ok();
        }
    }
}

/// When the bench's own watch first saw each object (`namespace/name`) matching a selector.
#[derive(Clone, Default)]
struct Seen {
    at: Arc<Mutex<HashMap<String, Instant>>>,
    listed: Arc<std::sync::atomic::AtomicBool>,
    task: Option<tokio::task::AbortHandle>,
}

impl Seen {
    fn watch<K>(api: Api<K>, selector: &str) -> Self
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let (at, listed) = (
            Arc::<Mutex<HashMap<String, Instant>>>::default(),
            Arc::<std::sync::atomic::AtomicBool>::default(),
        );
        let (record, list_done) = (at.clone(), listed.clone());
        let config = watcher::Config::default().labels(selector);
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                        let key = format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
                        record.lock().unwrap().entry(key).or_insert_with(Instant::now);
                    }
                    Ok(watcher::Event::InitDone) => {
                        list_done.store(true, std::sync::atomic::Ordering::SeqCst)
                    }
                    _ => {}
                }
            }
        });
        Self { at, listed, task: Some(task.abort_handle()) }
    }

    /// Waits until the watch has listed what exists: whatever comes after is seen as it comes.
    async fn wait_listed(&self) {
        wait_until("the bench's watch listed", Duration::from_secs(60), || {
            std::future::ready(self.listed.load(std::sync::atomic::Ordering::SeqCst))
        })
        .await;
    }

    /// Ends the watch, so that it costs kubesim and this process nothing more.
    fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }

    fn count(&self) -> usize {
        self.at.lock().unwrap().len()
    }

    /// When the first object was seen.
    fn first(&self) -> Option<Instant> {
        self.at.lock().unwrap().values().min().copied()
    }

    fn at(&self, key: &str) -> Option<Instant> {
        self.at.lock().unwrap().get(key).copied()
    }

    fn in_namespace(&self, namespace: &str) -> Vec<Instant> {
        let prefix = format!("{namespace}/");
        self.at.lock().unwrap().iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(_, at)| *at).collect()
    }

    async fn wait_for(&self, what: &str, count: usize) -> Instant {
        wait_until(what, Duration::from_secs(900), || std::future::ready(self.count() >= count)).await;
        Instant::now()
    }
}

fn policy(index: usize) -> serde_json::Value {
    json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "NamespaceAccess",
        "metadata": {"name": format!("policy-{index}")},
        "spec": {"bindings": [{
            "name": format!("policy-{index}-{{namespace}}"),
            "roleRef": {"kind": "ClusterRole", "name": if index.is_multiple_of(2) { "edit" } else { "view" }},
            "subjects": [{"kind": "Group", "name": format!("group-{index}-{{namespace}}")}],
        }]},
    })
}

/// Creates the policies; their uids, which the floor's bindings name as their owner.
async fn install_policies(client: &kube::Client) -> Vec<String> {
    let gvk = kube::api::GroupVersionKind::gvk("kopper.dev", "v1alpha1", "NamespaceAccess");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "namespaceaccesses");
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut uids = Vec::new();
    for index in 0..POLICIES {
        let policy = serde_json::from_value(policy(index)).unwrap();
        uids.push(api.create(&PostParams::default(), &policy).await.unwrap().uid().unwrap());
    }
    uids
}

async fn create_namespaces(client: &kube::Client, names: impl Iterator<Item = String>) {
    let api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(names)
        .for_each_concurrent(8, |name| {
            let api = api.clone();
            async move {
                let namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
                api.create(&PostParams::default(), &namespace).await.unwrap();
            }
        })
        .await;
}

async fn create_pods(client: &kube::Client, scale: &Scale) {
    futures::stream::iter(0..scale.pods)
        .for_each_concurrent(8, |n| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &scale.namespace(n));
            async move {
                api.create(&PostParams::default(), &pod(&pod_name(n), n.is_multiple_of(2))).await.unwrap();
            }
        })
        .await;
}

/// A RoleBinding as a policy's binding is written (its labels, role, subjects and owner, the
/// policy `policy_uid` names), under another name and label.
fn floor_binding(namespace: &str, index: usize, policy_uid: &str) -> RoleBinding {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("floor-{index}-{namespace}"),
            "labels": {FLOOR_LABEL: "true", "kopper.dev/namespace-access": format!("policy-{index}")},
            "ownerReferences": [{
                "apiVersion": "kopper.dev/v1alpha1", "kind": "NamespaceAccess",
                "name": format!("policy-{index}"), "uid": policy_uid, "controller": true,
            }],
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": if index.is_multiple_of(2) { "edit" } else { "view" },
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("group-{index}-{namespace}")}],
    }))
    .unwrap()
}

/// The floor for the bindings: every namespace's 5 creates, a namespace per worker as kopper
/// reconciles them, until the bench's watch has seen them all (as kopper's are timed); then
/// the floor's bindings are deleted (not timed). Its time, and the CPU time this process
/// (kubesim and the bench) used for it.
async fn binding_floor(client: &kube::Client, scale: &Scale, policy_uids: &[String]) -> (Duration, Duration) {
    let seen = Seen::watch(Api::<RoleBinding>::all(client.clone()), FLOOR_LABEL);
    seen.wait_listed().await;
    let cpu_before = cpu_time("/proc/self/stat");
    let started = Instant::now();
    futures::stream::iter(0..scale.namespaces)
        .for_each_concurrent(CONCURRENCY, |n| {
            let namespace = format!("team-{n}");
            let api: Api<RoleBinding> = Api::namespaced(client.clone(), &namespace);
            async move {
                for (index, policy_uid) in policy_uids.iter().enumerate() {
                    let params = PostParams {
                        field_manager: Some(FLOOR_FIELD_MANAGER.into()),
                        ..PostParams::default()
                    };
                    api.create(&params, &floor_binding(&namespace, index, policy_uid)).await.unwrap();
                }
            }
        })
        .await;
    seen.wait_for("every floor binding seen", scale.namespaces * POLICIES).await;
    let took = (started.elapsed(), cpu_time("/proc/self/stat") - cpu_before);
    seen.stop();
    futures::stream::iter(0..scale.namespaces)
        .for_each_concurrent(8, |n| {
            let api: Api<RoleBinding> = Api::namespaced(client.clone(), &format!("team-{n}"));
            async move {
                let floor = ListParams::default().labels(FLOOR_LABEL);
                api.delete_collection(&DeleteParams::default(), &floor).await.unwrap();
            }
        })
        .await;
    took
}

/// The floor for the labels: the same merge patch kopper sends, on another label key, until
/// the bench's watch has seen every pod patched (as kopper's labels are timed).
async fn label_floor(client: &kube::Client, scale: &Scale) -> Duration {
    let seen = Seen::watch(Api::<PartialObjectMeta<Pod>>::all(client.clone()), FLOOR_LABEL);
    seen.wait_listed().await;
    let started = Instant::now();
    futures::stream::iter((0..scale.pods).step_by(2))
        .for_each_concurrent(CONCURRENCY, |n| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &scale.namespace(n));
            async move {
                let name = pod_name(n);
                let patch = Patch::Merge(json!({"metadata": {"labels": {FLOOR_LABEL: name}}}));
                api.patch(&name, &PatchParams::default(), &patch).await.unwrap();
            }
        })
        .await;
    seen.wait_for("every floor label seen", scale.asking()).await;
    let took = started.elapsed();
    seen.stop();
    took
}

/// Average bytes per pod of the metadata as the API server sends it without managed fields,
/// and of the fields kopper's decision reads (name, namespace, uid, the label).
async fn pod_weights(client: &kube::Client) -> (f64, f64) {
    let api: Api<PartialObjectMeta<Pod>> = Api::all(client.clone());
    let (mut count, mut metadata, mut kept) = (0usize, 0usize, 0usize);
    let mut pages =
        std::pin::pin!(watcher(api, watcher::Config::default().page_size(2000)).default_backoff());
    while let Some(event) = pages.try_next().await.unwrap() {
        match event {
            watcher::Event::InitApply(mut pod) => {
                pod.managed_fields_mut().clear();
                count += 1;
                metadata += serde_json::to_vec(&pod.metadata).unwrap().len();
                kept += pod.name_any().len()
                    + pod.namespace().unwrap_or_default().len()
                    + pod.uid().unwrap_or_default().len()
                    + pod.labels().get(LABEL).map_or(0, String::len);
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    let count = count.max(1) as f64;
    (metadata as f64 / count, kept as f64 / count)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// New annotated pods at a steady rate, each timed from its create answered to its label
/// seen by the bench's watch.
async fn label_latency(client: &kube::Client, scale: &Scale, labelled: &Seen) -> Vec<Duration> {
    let interval = Duration::from_secs_f64(1.0 / scale.new_pods_per_second as f64);
    let mut ticks = tokio::time::interval(interval);
    let mut created = Vec::new();
    for n in 0..scale.new_pods {
        ticks.tick().await;
        let namespace = scale.namespace(n * 7919);
        let name = format!("new-{n}");
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        api.create(&PostParams::default(), &pod(&name, true)).await.unwrap();
        created.push((format!("{namespace}/{name}"), Instant::now()));
    }
    let mut latencies = Vec::new();
    for (key, at) in created {
        wait_until("a new pod labelled", Duration::from_secs(60), || {
            std::future::ready(labelled.at(&key).is_some())
        })
        .await;
        latencies.push(labelled.at(&key).unwrap().saturating_duration_since(at));
    }
    latencies.sort();
    latencies
}

/// New namespaces, 10 a second, each timed from its create answered to its 5th binding seen.
async fn binding_latency(client: &kube::Client, scale: &Scale, bindings: &Seen) -> Vec<Duration> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let mut created = Vec::new();
    for n in 0..scale.new_namespaces {
        ticks.tick().await;
        let name = format!("new-team-{n}");
        let namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &namespace).await.unwrap();
        created.push((name, Instant::now()));
    }
    let mut latencies = Vec::new();
    for (name, at) in created {
        wait_until("a new namespace bound", Duration::from_secs(60), || {
            std::future::ready(bindings.in_namespace(&name).len() >= POLICIES)
        })
        .await;
        let last = bindings.in_namespace(&name).into_iter().max().unwrap();
        latencies.push(last.saturating_duration_since(at));
    }
    latencies.sort();
    latencies
}

/// User and system CPU time of a process, from a `/proc/*/stat` file (in ticks of 10 ms).
fn cpu_time(stat_path: &str) -> Duration {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default().split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Requests served between two snapshots of kubesim's counters, those that changed.
fn requests_since(
    before: &std::collections::BTreeMap<(String, String), u64>,
    after: &std::collections::BTreeMap<(String, String), u64>,
) -> Vec<((String, String), u64)> {
    after
        .iter()
        .map(|(key, count)| (key.clone(), count - before.get(key).copied().unwrap_or(0)))
        .filter(|(_, count)| *count > 0)
        .collect()
}

fn per(kib: u64, count: usize) -> f64 {
    (kib * 1024) as f64 / count.max(1) as f64
}

/// Each figure is printed as soon as it is measured, so a failure late in the run keeps the
/// figures before it.
#[tokio::main]
async fn main() {
    let scale = Scale::from_env();
    let (namespaces, pods) = (scale.namespaces, scale.pods);
    println!(
        "kopper at scale: {namespaces} namespaces, {pods} pods ({} asking for the label), {POLICIES} NamespaceAccess policies",
        scale.asking()
    );
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let policy_uids = install_policies(&client).await;

    // 1. Idle.
    let idle = Kopper::start(&cluster);
    idle.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, _) = idle.memory();
    idle.stop();
    println!("memory, idle on an empty cluster:    {:>8.1} MiB   (baseline)", mib(idle_rss));

    // 2. Namespaces.
    let (sim_before, _) = memory_kib("/proc/self/status");
    let started = Instant::now();
    create_namespaces(&client, (0..namespaces).map(|n| format!("team-{n}"))).await;
    let namespaces_created = started.elapsed();
    let (sim_namespaces, _) = memory_kib("/proc/self/status");
    println!(
        "kubesim: namespaces created in {:.1} s; it holds {:.0} bytes per namespace (this process's RSS)",
        namespaces_created.as_secs_f64(),
        per(sim_namespaces.saturating_sub(sim_before), namespaces)
    );
    let bindings = Seen::watch(Api::<RoleBinding>::all(client.clone()), MANAGED);
    bindings.wait_listed().await;
    let (floor_bindings, floor_cpu) = binding_floor(&client, &scale, &policy_uids).await;
    let requests_before = cluster.sim.counters().snapshot();
    let sim_cpu_before = cpu_time("/proc/self/stat");
    let started = Instant::now();
    let kopper = Kopper::start(&cluster);
    let (ready_in, _) =
        tokio::join!(kopper.wait_ready(), bindings.wait_for("every namespace bound", namespaces * POLICIES));
    let bound_in = started.elapsed();
    let first_bound_in =
        bindings.first().map(|first| first.saturating_duration_since(started)).unwrap_or_default();
    let requests = requests_since(&requests_before, &cluster.sim.counters().snapshot());
    let (kopper_cpu, sim_cpu) = (kopper.cpu(), cpu_time("/proc/self/stat") - sim_cpu_before);
    println!(
        "convergence, bindings ({} creates): kopper {:>7.1} s, floor {:>7.1} s  ({:.2}x; aim 1.5x; floor: the same writes from the bench, {CONCURRENCY} at a time, until its watch saw them)",
        namespaces * POLICIES,
        bound_in.as_secs_f64(),
        floor_bindings.as_secs_f64(),
        bound_in.as_secs_f64() / floor_bindings.as_secs_f64().max(1e-9)
    );
    println!(
        "convergence, bindings: kopper ready in {:.1} s, its first binding seen {:.1} s after its start",
        ready_in.as_secs_f64(),
        first_bound_in.as_secs_f64()
    );
    println!(
        "CPU time, bindings: kopper {:.1} s until converged; this process (kubesim and the bench) {:.1} s meanwhile, {:.1} s for the floor (its deletes not counted)",
        kopper_cpu.as_secs_f64(),
        sim_cpu.as_secs_f64(),
        floor_cpu.as_secs_f64()
    );
    println!("requests during convergence (every client's; the bench sends none then), per namespace:");
    for ((verb, resource), count) in &requests {
        println!("  {verb:>8} {resource:<32} {:>8.2}   ({count})", *count as f64 / namespaces as f64);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (namespaces_rss, _) = kopper.memory();
    kopper.print_heap_stats("namespaces bound, 3 s after");
    println!(
        "memory, namespaces bound (3 s after): {:>8.1} MiB   {:>6.0} bytes per namespace above idle (aim: 2048)",
        mib(namespaces_rss),
        per(namespaces_rss.saturating_sub(idle_rss), namespaces)
    );
    // kopper gives glibc's free memory back every 10 s when more than 16 MiB are free: a
    // figure after one more period shows what stays.
    tokio::time::sleep(SETTLE).await;
    let (settled_rss, namespaces_peak) = kopper.memory();
    kopper.print_heap_stats("namespaces bound, settled");
    kopper.stop();
    println!(
        "memory, namespaces bound ({} s after): {:>7.1} MiB   {:>6.0} bytes per namespace above idle; peak (VmHWM) {:.1} MiB",
        (SETTLE + Duration::from_secs(3)).as_secs(),
        mib(settled_rss),
        per(settled_rss.saturating_sub(idle_rss), namespaces),
        mib(namespaces_peak)
    );

    // 3. Pods.
    let started = Instant::now();
    create_pods(&client, &scale).await;
    let pods_created = started.elapsed();
    let (sim_pods, _) = memory_kib("/proc/self/status");
    println!(
        "kubesim: pods created in {:.1} s; it holds {:.0} bytes per pod (this process's RSS)",
        pods_created.as_secs_f64(),
        per(sim_pods.saturating_sub(sim_namespaces), pods)
    );
    let floor_labels = label_floor(&client, &scale).await;
    let labelled = Seen::watch(Api::<PartialObjectMeta<Pod>>::all(client.clone()), LABEL);
    labelled.wait_listed().await;
    let started = Instant::now();
    let kopper = Kopper::start(&cluster);
    labelled.wait_for("every asking pod labelled", scale.asking()).await;
    let labelled_in = started.elapsed();
    println!(
        "convergence, labels ({} patches):   kopper {:>7.1} s, floor {:>7.1} s  ({:.2}x)",
        scale.asking(),
        labelled_in.as_secs_f64(),
        floor_labels.as_secs_f64(),
        labelled_in.as_secs_f64() / floor_labels.as_secs_f64().max(1e-9)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (converged_rss, converged_peak) = kopper.memory();
    println!(
        "memory, pods labelled too:           {:>8.1} MiB   {:>6.0} bytes per pod above that (aim: 1024), peak {:.1} MiB",
        mib(converged_rss),
        per(converged_rss.saturating_sub(namespaces_rss), pods),
        mib(converged_peak)
    );
    let (metadata_weight, kept_weight) = pod_weights(&client).await;
    println!(
        "memory, a pod's metadata, managedFields dropped: {metadata_weight:>6.0} bytes; the fields the labeler's decision reads: {kept_weight:.0} bytes"
    );

    // 4. Latency while every pod exists.
    let pod_latencies = label_latency(&client, &scale, &labelled).await;
    println!(
        "latency, new pod labelled ({} at {}/s):     p50 {:>7.1} ms, p99 {:>7.1} ms (aim: p99 100 ms)",
        pod_latencies.len(),
        scale.new_pods_per_second,
        ms(percentile(&pod_latencies, 0.5)),
        ms(percentile(&pod_latencies, 0.99))
    );
    let namespace_latencies = binding_latency(&client, &scale, &bindings).await;
    println!(
        "latency, new namespace bound ({} at 10/s): p50 {:>7.1} ms, p99 {:>7.1} ms (aim: p99 50 ms)",
        namespace_latencies.len(),
        ms(percentile(&namespace_latencies, 0.5)),
        ms(percentile(&namespace_latencies, 0.99))
    );
    let (after_latency_rss, _) = kopper.memory();
    kopper.stop();
    println!("memory, after the latency runs:      {:>8.1} MiB", mib(after_latency_rss));

    // 5. Restart.
    let started = Instant::now();
    let kopper = Kopper::start(&cluster);
    let ready_in = kopper.wait_ready().await;
    println!("restart on the converged cluster: ready in {:.1} s", ready_in.as_secs_f64());
    let api: Api<Pod> = Api::namespaced(client.clone(), "team-0");
    api.create(&PostParams::default(), &pod("after-restart", true)).await.unwrap();
    wait_until("the pod created after the restart labelled", Duration::from_secs(600), || {
        std::future::ready(labelled.at("team-0/after-restart").is_some())
    })
    .await;
    let working_in = started.elapsed();
    println!(
        "restart on the converged cluster: a pod created then labelled {:.1} s after the start",
        working_in.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (restart_rss, restart_peak) = kopper.memory();
    kopper.stop();
    println!(
        "restart on the converged cluster: peak {:.1} MiB against steady {:.1} MiB ({:.2}x; aim 1.5x)",
        mib(restart_peak),
        mib(restart_rss),
        restart_peak as f64 / restart_rss.max(1) as f64
    );
    cluster.sim.shutdown().await;
}
