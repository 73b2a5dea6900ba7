//! The replication engine at scale on kubesim, with the `kopper` binary as a child process
//! running the seed-003 ReplicationRule sample. Each figure is printed next to a baseline
//! measured in the same run:
//! 1. time from creating the 1,000th namespace to its copies present (baseline: the
//!    namespace's own watch event reaching a watcher, the earliest any controller can act);
//! 2. p50/p99 time from a source update to all its copies updated across 1,000 namespaces
//!    (baselines: the source's own watch event, and the first of its copies updated);
//! 3. API writes per copy that changed, and writes when nothing a rule cares about changes
//!    (aim: 1 and 0), from kubesim's request counters;
//! 4. kopper's peak resident memory with 5,000 namespaces and 50 sources replicated
//!    (250,000 copies), next to the same binary idle on an empty cluster and to the heap
//!    the same objects take in kubesim (counted by this process's global allocator, as
//!    kubesim runs in-process); then kopper restarted on the converged cluster: its memory,
//!    how long its first pass takes, and its writes (aim: none).
//!
//! Run: `cargo bench -p kopper --bench replication` (prints figures; asserts nothing).
//! `REPLICATION_BENCH_NAMESPACES` sets the namespaces of figure 4 (default 5000) and
//! `REPLICATION_BENCH_UPDATES` the source updates timed for figure 2 (default 20).

mod support;

use support::memory_kib;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::fmt::Debug;
use std::net::TcpListener;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use kopper::controllers::replication::desired::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, SOURCE_VERSION_ANNOTATION,
};
use kopper::controllers::replication_rule::types::ReplicationRule;

/// Counts live heap bytes, so kubesim's memory for the replicated objects is measured, not
/// guessed from RSS.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The seed-003 sample: every ConfigMap labelled `copyrator: "true"` in `default` copied
/// into every other Active namespace.
const RULE_SAMPLE: &str = include_str!("../../../config/samples/replicationrule-shared-settings.yaml");
const SOURCE_NAMESPACE: &str = "default";
const SOURCE_LABEL: (&str, &str) = ("copyrator", "true");
/// Figures 1 to 3: namespaces (the last one created while kopper runs) and sources.
const LATENCY_NAMESPACES: usize = 1_000;
const LATENCY_SOURCES: usize = 5;
/// Figure 4: sources, each copied into every namespace.
const MEMORY_SOURCES: usize = 50;
/// Unlabelled ConfigMaps created and namespaces relabelled to check that kopper ignores them.
const UNRELATED_CHANGES: usize = 100;
const STEADY_PERIOD: Duration = Duration::from_secs(10);
/// Each source (and so each copy) carries this much data, like kubesim's own benchmark.
const PAYLOAD_BYTES: usize = 1024;
const CREATE_WORKERS: usize = 8;
const CONVERGENCE_LIMIT: Duration = Duration::from_secs(900);
const EVENT_LIMIT: Duration = Duration::from_secs(120);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn namespace_name(n: usize) -> String {
    format!("team-{n:05}")
}

fn source_name(n: usize) -> String {
    format!("shared-{n:02}")
}

fn copy_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

async fn create_namespace(api: &Api<Namespace>, n: usize) {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": namespace_name(n)}})).unwrap();
    api.create(&PostParams::default(), &namespace).await.unwrap();
}

/// A kubesim with kopper's CRDs, the sources and the rule, and a kubeconfig for kopper.
struct Cluster {
    sim: kubesim::Server,
    client: kube::Client,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let client = sim.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        Self { sim, client, kubeconfig, _dir: dir }
    }

    async fn create_namespace(&self, n: usize) {
        create_namespace(&Api::all(self.client.clone()), n).await;
    }

    async fn create_namespaces(&self, range: Range<usize>) {
        let tasks: Vec<_> = (0..CREATE_WORKERS)
            .map(|worker| {
                let api: Api<Namespace> = Api::all(self.client.clone());
                let range = range.clone();
                tokio::spawn(async move {
                    for n in range.skip(worker).step_by(CREATE_WORKERS) {
                        create_namespace(&api, n).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }

    fn config_maps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn create_sources(&self, count: usize) {
        let payload = "x".repeat(PAYLOAD_BYTES);
        for n in 0..count {
            let source: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": source_name(n), "labels": {SOURCE_LABEL.0: SOURCE_LABEL.1}},
                "data": {"payload": payload, "revision": "0"},
            }))
            .unwrap();
            self.config_maps(SOURCE_NAMESPACE).create(&PostParams::default(), &source).await.unwrap();
        }
    }

    /// Changes one key of a source; returns the source's new resourceVersion.
    async fn update_source(&self, name: &str, revision: usize) -> String {
        let patch = Patch::Merge(json!({"data": {"revision": revision.to_string()}}));
        let updated =
            self.config_maps(SOURCE_NAMESPACE).patch(name, &PatchParams::default(), &patch).await.unwrap();
        updated.resource_version().unwrap_or_default()
    }

    async fn apply_rule(&self) {
        let rule: ReplicationRule = kopper::samples::of_kind(RULE_SAMPLE, "ReplicationRule").unwrap();
        Api::<ReplicationRule>::all(self.client.clone()).create(&PostParams::default(), &rule).await.unwrap();
    }

    /// Copies in the cluster, counted in kubesim's store rather than listed.
    async fn copies(&self) -> usize {
        self.sim.count_labelled("configmaps", &copy_selector()).unwrap()
    }

    /// Waits until `count` copies exist; returns how long that took.
    async fn wait_for_copies(&self, count: usize) -> Duration {
        let started = Instant::now();
        loop {
            let copies = self.copies().await;
            if copies >= count {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < CONVERGENCE_LIMIT,
                "timed out after {CONVERGENCE_LIMIT:?} with {copies} of {count} copies written \
                 (fewer namespaces: REPLICATION_BENCH_NAMESPACES)"
            );
            // Counting walks every ConfigMap in kubesim: rarely, when there are many.
            let poll = if count > 10_000 { Duration::from_secs(1) } else { Duration::from_millis(250) };
            tokio::time::sleep(poll).await;
        }
    }

    /// Requests that wrote ConfigMaps or Secrets, by anyone.
    fn writes(&self) -> u64 {
        let counters = self.sim.counters();
        counters.writes("configmaps") + counters.writes("secrets")
    }

    /// Requests that read one ConfigMap or Secret, by anyone.
    fn reads(&self) -> u64 {
        let counters = self.sim.counters();
        counters.get("get", "configmaps") + counters.get("get", "secrets")
    }

    /// List requests for ConfigMaps, Secrets and namespaces, by anyone.
    fn lists(&self) -> u64 {
        let counters = self.sim.counters();
        ["configmaps", "secrets", "namespaces"].iter().map(|r| counters.get("list", r)).sum()
    }
}

/// The `kopper` binary running the replication engine; killed when dropped.
struct Kopper {
    child: Child,
    admin_port: u16,
}

impl Kopper {
    fn start(kubeconfig: &Path) -> Self {
        let admin_port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kopper"))
            .args(["run", "--leader-elect", "false", "--controllers", "replication-rule"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}"), "--log-level", "warn"])
            .stdout(Stdio::null())
            .spawn()
            .expect("the kopper binary starts");
        Self { child, admin_port }
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.ready().await {
            assert!(Instant::now() < deadline, "timed out waiting for kopper's /readyz");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready(&self) -> bool {
        self.get("/readyz").await.is_some_and(|response| response.starts_with("HTTP/1.1 200"))
    }

    /// Waits until the replication-rule controller has finished a pass since it started.
    async fn wait_for_a_pass(&self) {
        let deadline = Instant::now() + CONVERGENCE_LIMIT;
        while self.passes().await == 0 {
            assert!(Instant::now() < deadline, "timed out waiting for kopper's first replication pass");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `kopper_reconciles_total` of the replication-rule controller, from `/metrics`.
    async fn passes(&self) -> u64 {
        let metrics = self.get("/metrics").await.unwrap_or_default();
        metrics
            .lines()
            .find(|l| l.starts_with("kopper_reconciles_total{controller=\"replication-rule\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The raw HTTP response of the admin server for `path`.
    async fn get(&self, path: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.admin_port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response)
    }

    /// (VmRSS, VmHWM) in KiB.
    fn memory_kib(&self) -> (u64, u64) {
        memory_kib(&format!("/proc/{}/status", self.child.id()))
    }
}

impl Drop for Kopper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one of the bench's watches saw.
#[derive(Debug)]
enum Seen {
    /// The watch listed what exists and is now following changes.
    Synced,
    Namespace {
        name: String,
    },
    Source {
        name: String,
        version: String,
    },
    /// A copy, with the source resourceVersion it was written from.
    Copy {
        namespace: String,
        name: String,
        version: String,
    },
}

struct Observed {
    seen: Seen,
    at: Instant,
}

/// Metadata-only watches of namespaces, sources and copies, timestamped as they arrive.
struct Observer {
    events: mpsc::UnboundedReceiver<Observed>,
    tasks: Vec<JoinHandle<()>>,
}

impl Observer {
    async fn start(client: &kube::Client) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let source_selector = format!("{}={}", SOURCE_LABEL.0, SOURCE_LABEL.1);
        let tasks = vec![
            spawn_watch(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                watcher::Config::default(),
                tx.clone(),
                |meta| Seen::Namespace { name: meta.name.clone().unwrap_or_default() },
            ),
            spawn_watch(
                Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), SOURCE_NAMESPACE),
                watcher::Config::default().labels(&source_selector),
                tx.clone(),
                |meta| Seen::Source {
                    name: meta.name.clone().unwrap_or_default(),
                    version: meta.resource_version.clone().unwrap_or_default(),
                },
            ),
            spawn_watch(
                Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()),
                watcher::Config::default().labels(&copy_selector()),
                tx,
                |meta| Seen::Copy {
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    name: meta.name.clone().unwrap_or_default(),
                    version: meta
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(SOURCE_VERSION_ANNOTATION))
                        .cloned()
                        .unwrap_or_default(),
                },
            ),
        ];
        let mut observer = Self { events, tasks };
        let deadline = Instant::now() + EVENT_LIMIT;
        let mut synced = 0;
        while synced < observer.tasks.len() {
            if let Seen::Synced = observer.next(deadline, "the bench's watches to sync").await.seen {
                synced += 1;
            }
        }
        observer
    }

    async fn next(&mut self, deadline: Instant, what: &str) -> Observed {
        match tokio::time::timeout_at(deadline.into(), self.events.recv()).await {
            Ok(Some(observed)) => observed,
            Ok(None) => panic!("the bench's watches ended while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    tx: mpsc::UnboundedSender<Observed>,
    classify: fn(&ObjectMeta) -> Seen,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let at = Instant::now();
            let seen = match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    classify(object.meta())
                }
                Ok(watcher::Event::InitDone) => Seen::Synced,
                _ => continue,
            };
            if tx.send(Observed { seen, at }).is_err() {
                return;
            }
        }
    })
}

/// Figure 1: the namespace's own watch event, and its last copy's.
struct NewNamespace {
    namespace_seen: Duration,
    copies_present: Duration,
    kopper_writes: u64,
}

async fn new_namespace(cluster: &Cluster, observer: &mut Observer) -> NewNamespace {
    let name = namespace_name(LATENCY_NAMESPACES - 1);
    let writes = cluster.writes();
    let started = Instant::now();
    cluster.create_namespace(LATENCY_NAMESPACES - 1).await;
    let deadline = started + EVENT_LIMIT;
    let mut namespace_seen = None;
    let mut copies = HashSet::new();
    loop {
        let observed = observer.next(deadline, "the new namespace's copies").await;
        let at = observed.at - started;
        match observed.seen {
            Seen::Namespace { name: seen } if seen == name => namespace_seen = Some(at),
            Seen::Copy { namespace, name: copy, .. } if namespace == name => {
                copies.insert(copy);
            }
            _ => continue,
        }
        if let Some(namespace_seen) = namespace_seen
            && copies.len() == LATENCY_SOURCES
        {
            return NewNamespace {
                namespace_seen,
                copies_present: at,
                kopper_writes: cluster.writes() - writes,
            };
        }
    }
}

/// Figure 2, per update: the source's own watch event, its first and its last copy updated.
struct Update {
    source_seen: Duration,
    first_copy: Duration,
    last_copy: Duration,
}

/// Updates one source and times its copies; `namespaces` copies are expected.
async fn timed_update(
    cluster: &Cluster,
    observer: &mut Observer,
    source: &str,
    revision: usize,
    namespaces: usize,
) -> Update {
    let started = Instant::now();
    let version = cluster.update_source(source, revision).await;
    let deadline = Instant::now() + EVENT_LIMIT;
    let mut source_seen = None;
    let mut first_copy = None;
    let mut updated = HashSet::new();
    loop {
        let observed = observer.next(deadline, "every copy of an updated source").await;
        let at = observed.at - started;
        match observed.seen {
            Seen::Source { name, version: seen } if name == source && seen == version => {
                source_seen = Some(at);
            }
            Seen::Copy { namespace, name, version: seen } if name == source && seen == version => {
                first_copy.get_or_insert(at);
                updated.insert(namespace);
                if updated.len() == namespaces {
                    return Update {
                        source_seen: source_seen.unwrap_or(at),
                        first_copy: first_copy.unwrap_or(at),
                        last_copy: at,
                    };
                }
            }
            _ => {}
        }
    }
}

/// Figure 3 besides updates: unrelated changes, then a period with no changes at all.
struct Quiet {
    unrelated_kopper_writes: u64,
    fence_copies: usize,
    steady_writes: u64,
    steady_lists: u64,
}

/// Creates unlabelled ConfigMaps and relabels namespaces (nothing a rule copies), then
/// updates a source as a fence: once its copies are written, kopper has seen the changes
/// before it. Then counts requests over a period with no changes.
async fn quiet_periods(cluster: &Cluster, observer: &mut Observer) -> Quiet {
    let writes = cluster.writes();
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    for n in 0..UNRELATED_CHANGES {
        let namespace = namespace_name(n % (LATENCY_NAMESPACES - 1));
        let unrelated: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "unrelated"}, "data": {"payload": "not replicated"},
        }))
        .unwrap();
        cluster.config_maps(&namespace).create(&PostParams::default(), &unrelated).await.unwrap();
        let relabel = Patch::Merge(json!({"metadata": {"labels": {"bench.kopper.dev/touched": "true"}}}));
        namespaces.patch(&namespace, &PatchParams::default(), &relabel).await.unwrap();
    }
    timed_update(cluster, observer, &source_name(0), usize::MAX, LATENCY_NAMESPACES).await;
    let bench_writes = UNRELATED_CHANGES as u64 + 1;
    let unrelated_kopper_writes = (cluster.writes() - writes).saturating_sub(bench_writes);

    let (writes, lists) = (cluster.writes(), cluster.lists());
    tokio::time::sleep(STEADY_PERIOD).await;
    Quiet {
        unrelated_kopper_writes,
        fence_copies: LATENCY_NAMESPACES,
        steady_writes: cluster.writes() - writes,
        steady_lists: cluster.lists() - lists,
    }
}

/// Figures 1 to 3 on 1,000 namespaces and 5 sources.
async fn latency_figures(updates: usize) {
    let cluster = Cluster::start().await;
    cluster.create_namespaces(0..LATENCY_NAMESPACES - 1).await;
    cluster.create_sources(LATENCY_SOURCES).await;
    cluster.apply_rule().await;
    let (writes, reads) = (cluster.writes(), cluster.reads());
    let kopper = Kopper::start(&cluster.kubeconfig);
    let initial_copies = (LATENCY_NAMESPACES - 1) * LATENCY_SOURCES;
    let initial = cluster.wait_for_copies(initial_copies).await;
    let initial_writes = cluster.writes() - writes;
    let initial_reads = cluster.reads() - reads;
    let mut observer = Observer::start(&cluster.client).await;

    let namespace = new_namespace(&cluster, &mut observer).await;

    let writes = cluster.writes();
    let mut samples = Vec::with_capacity(updates);
    for revision in 1..=updates {
        let source = source_name(revision % LATENCY_SOURCES);
        samples.push(timed_update(&cluster, &mut observer, &source, revision, LATENCY_NAMESPACES).await);
    }
    let update_writes = (cluster.writes() - writes).saturating_sub(updates as u64);

    let quiet = quiet_periods(&cluster, &mut observer).await;
    drop(observer);
    drop(kopper);

    println!(
        "replication latency and writes ({LATENCY_NAMESPACES} namespaces, {LATENCY_SOURCES} sources of \
         {PAYLOAD_BYTES} B, 1 ReplicationRule; kopper as a child process)"
    );
    println!(
        "  initial replication:          {:>8.2} s for {initial_copies} copies   ({} writes, {:.3} per copy; \
         {} reads, {:.3} per copy)",
        initial.as_secs_f64(),
        initial_writes,
        initial_writes as f64 / initial_copies as f64,
        initial_reads,
        initial_reads as f64 / initial_copies as f64
    );
    println!(
        "  namespace #{LATENCY_NAMESPACES} to its {LATENCY_SOURCES} copies: {:>8.1} ms   \
         (baseline: its own watch event in {:.1} ms; {:.1}x)",
        ms(namespace.copies_present),
        ms(namespace.namespace_seen),
        ms(namespace.copies_present) / ms(namespace.namespace_seen).max(1e-3)
    );
    println!(
        "    writes:                     {:>8}      ({:.2} per copy)",
        namespace.kopper_writes,
        namespace.kopper_writes as f64 / LATENCY_SOURCES as f64
    );
    print_updates(&mut samples);
    let changed = updates * LATENCY_NAMESPACES;
    println!(
        "    writes by kopper:           {:>8}      ({:.3} per copy changed; {changed} copies changed)",
        update_writes,
        update_writes as f64 / changed as f64
    );
    println!(
        "  {UNRELATED_CHANGES} unlabelled ConfigMaps + {UNRELATED_CHANGES} namespaces relabelled, then 1 \
         source update: {} writes by kopper ({} expected: the update's copies)",
        quiet.unrelated_kopper_writes, quiet.fence_copies
    );
    println!(
        "  steady, no changes, {:>3} s:    {:>8} writes, {} lists of configmaps/secrets/namespaces",
        STEADY_PERIOD.as_secs(),
        quiet.steady_writes,
        quiet.steady_lists
    );
    cluster.sim.shutdown().await;
}

fn print_updates(samples: &mut [Update]) {
    let n = samples.len();
    let pick = |values: &mut Vec<Duration>, q: f64| {
        values.sort();
        values.get(((values.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
    };
    let mut last: Vec<_> = samples.iter().map(|s| s.last_copy).collect();
    let mut first: Vec<_> = samples.iter().map(|s| s.first_copy).collect();
    let mut source: Vec<_> = samples.iter().map(|s| s.source_seen).collect();
    let (last50, last99) = (pick(&mut last, 0.5), pick(&mut last, 0.99));
    let (first50, first99) = (pick(&mut first, 0.5), pick(&mut first, 0.99));
    let (source50, source99) = (pick(&mut source, 0.5), pick(&mut source, 0.99));
    println!("  source update to copies ({n} updates, each awaited; p99 of {n} is near the max):");
    println!(
        "    all {LATENCY_NAMESPACES} copies updated:     p50 {:>8.1} ms  p99 {:>8.1} ms",
        ms(last50),
        ms(last99)
    );
    println!(
        "    first copy updated:         p50 {:>8.1} ms  p99 {:>8.1} ms   (baseline: a single copy)",
        ms(first50),
        ms(first99)
    );
    println!(
        "    source's own watch event:   p50 {:>8.1} ms  p99 {:>8.1} ms   (baseline: kubesim's delivery; \
         all copies p50 is {:.0}x)",
        ms(source50),
        ms(source99),
        ms(last50) / ms(source50).max(1e-3)
    );
}

/// Figure 4: kopper's memory with `namespaces` x 50 copies next to kubesim's heap for them.
async fn memory_figures(namespaces: usize) {
    let cluster = Cluster::start().await;
    let idle = Kopper::start(&cluster.kubeconfig);
    idle.wait_ready().await;
    let (idle_rss, _) = idle.memory_kib();
    drop(idle);

    let heap_empty = LIVE.load(Ordering::Relaxed);
    let (rss_empty, _) = memory_kib("/proc/self/status");
    cluster.create_namespaces(0..namespaces).await;
    cluster.create_sources(MEMORY_SOURCES).await;
    cluster.apply_rule().await;
    let heap_sources = LIVE.load(Ordering::Relaxed);

    let writes = cluster.writes();
    let kopper = Kopper::start(&cluster.kubeconfig);
    let copies = namespaces * MEMORY_SOURCES;
    let converged = cluster.wait_for_copies(copies).await;
    let (rss, peak) = kopper.memory_kib();
    let kopper_writes = cluster.writes() - writes;
    let heap_all = LIVE.load(Ordering::Relaxed);
    let (rss_all, _) = memory_kib("/proc/self/status");
    drop(kopper);

    let (writes, reads) = (cluster.writes(), cluster.reads());
    let restarted = Kopper::start(&cluster.kubeconfig);
    let started = Instant::now();
    restarted.wait_ready().await;
    restarted.wait_for_a_pass().await;
    let restart_pass = started.elapsed();
    let (restart_rss, restart_peak) = restarted.memory_kib();
    let restart_writes = cluster.writes() - writes;
    let restart_reads = cluster.reads() - reads;
    drop(restarted);

    let copy = cluster.config_maps(&namespace_name(0)).get(&source_name(0)).await.unwrap();
    let copy_json = serde_json::to_vec(&copy).unwrap().len();
    let kubesim_heap = heap_all.saturating_sub(heap_empty) as f64;
    let copies_heap = heap_all.saturating_sub(heap_sources) as f64;
    let peak_bytes = (peak * 1024) as f64;

    println!(
        "kopper memory ({namespaces} namespaces x {MEMORY_SOURCES} sources = {copies} copies of \
         {PAYLOAD_BYTES} B data, {copy_json} B of JSON each)"
    );
    println!(
        "  converged in:                 {:>8.1} s   ({:.0} copies/s; {kopper_writes} writes, {:.3} per copy)",
        converged.as_secs_f64(),
        copies as f64 / converged.as_secs_f64(),
        kopper_writes as f64 / copies as f64
    );
    println!("  kopper resident, idle:        {:>8.1} MiB   (baseline: empty cluster)", mib(idle_rss * 1024));
    println!(
        "  kopper resident, converged:   {:>8.1} MiB   peak (VmHWM) {:.1} MiB; {:.0} bytes per copy above idle",
        mib(rss * 1024),
        mib(peak * 1024),
        peak.saturating_sub(idle_rss) as f64 * 1024.0 / copies as f64
    );
    println!(
        "  kopper restarted, converged:  {:>8.1} MiB   peak {:.1} MiB; first pass done in {:.1} s with {} writes \
         and {} reads",
        mib(restart_rss * 1024),
        mib(restart_peak * 1024),
        restart_pass.as_secs_f64(),
        restart_writes,
        restart_reads
    );
    println!(
        "  kubesim heap for them:        {:>8.1} MiB   (namespaces + sources {:.1} MiB, copies {:.1} MiB = \
         {:.0} bytes per copy; bench VmRSS +{:.1} MiB)",
        mib(kubesim_heap as u64),
        mib(heap_sources.saturating_sub(heap_empty) as u64),
        mib(copies_heap as u64),
        copies_heap / copies as f64,
        mib(rss_all.saturating_sub(rss_empty) * 1024)
    );
    println!(
        "  kopper peak / kubesim heap:   {:>8.3}      (kopper's peak as a fraction of what it replicates)",
        peak_bytes / kubesim_heap.max(1.0)
    );
    cluster.sim.shutdown().await;
}

#[tokio::main]
async fn main() {
    let updates = env_usize("REPLICATION_BENCH_UPDATES", 20).max(1);
    let namespaces = env_usize("REPLICATION_BENCH_NAMESPACES", 5_000).max(1);
    let started = Instant::now();
    latency_figures(updates).await;
    memory_figures(namespaces).await;
    println!("  (whole benchmark: {:.0} s)", started.elapsed().as_secs_f64());
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
