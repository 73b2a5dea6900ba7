//! The replication engine at scale on kubesim, with the `kopper` binary as a child process
//! running the seed-003 ReplicationRule sample. Each figure is printed next to a baseline
//! measured in the same run and, where there is one, its aim; nothing is asserted.
//!
//! Once per scale N, each on a fresh kubesim and a fresh kopper, with N namespaces and 5
//! sources replicated into all of them:
//! 1. new-namespace latency: M more namespaces created one at a time, 50 ms apart, each
//!    awaited until its 5 copies exist; p50/p99 from the namespace's watch event reaching
//!    the bench's own watcher (the earliest any controller can act) to its last copy's watch
//!    event (aim: p50 under 20 ms, and the same at 10,000 as at 1,000); baseline: that
//!    namespace event's own delay after the create request;
//! 2. fan-out: p50/p99 from a source's update event to the last of its N copies updated
//!    (aim: within 1.5x the baseline at 10,000); baseline: kubesim taking the same N writes
//!    (full replaces of ConfigMaps shaped like the copies, as much data and as many labels
//!    and annotations, in the same namespaces) straight from the bench, 16 at a time as
//!    kopper writes for one rule, before kopper starts, timed like
//!    the copies (until the bench's own watch has seen the last one) and until the last
//!    write is acknowledged; also the first copy and the source's own event;
//! 3. API writes per copy that changed, and writes when nothing a rule cares about changes
//!    (aim: 1 and 0), from kubesim's request counters;
//! 4. kopper's peak resident memory (VmHWM) after the fan-out, next to the same binary idle
//!    on an empty cluster (aim: under 100 MiB at 10,000).
//!
//! A table then puts the scales side by side. Then, once:
//! 5. kopper's peak resident memory with 5,000 namespaces and 50 sources replicated
//!    (250,000 copies), next to the same binary idle on an empty cluster and to the heap
//!    the same objects take in kubesim (counted by this process's global allocator, as
//!    kubesim runs in-process); then kopper restarted on the converged cluster: its memory,
//!    how long its first pass takes, and its writes (aim: none).
//!
//! Run: `cargo bench -p kopper --bench replication` (prints figures; asserts nothing; about
//! 4 minutes at the defaults on 2 cores, 10,000 namespaces set up in under 2 s).
//! Environment:
//! - `REPLICATION_BENCH_SCALES`: the scales N, comma-separated (default `1000,10000`);
//! - `REPLICATION_BENCH_NEW_NAMESPACES`: M, the new namespaces of figure 1 (default 200, so
//!   that its p99 is the third slowest, not the slowest as over 50);
//! - `REPLICATION_BENCH_UPDATES`: source updates timed for figure 2 at each scale
//!   (default 20);
//! - `REPLICATION_BENCH_NAMESPACES`: the namespaces of figure 5 (default 5000; 0 skips it);
//! - `REPLICATION_BENCH_SINGLE_SOURCE`: the namespaces of figure 6 (default: the largest
//!   scale; 0 skips it).
//!
//! 6. Then two single-source runs at one scale, each on a fresh kubesim and kopper: one
//!    rule copying one Secret, then one rule copying one default-deny NetworkPolicy (kopper
//!    run with `--replicate-kinds networking.k8s.io/v1/NetworkPolicy`), from a protected
//!    namespace into every namespace, both measured as figures 1 and 2 are: new-namespace
//!    latency from the namespace's watch event to its copy's; fan-out of a source update
//!    against kubesim taking the same N replaces of objects of that kind shaped like the
//!    copies (a copy's labels and annotations) from the bench, 16 at a time, until the
//!    bench's watch saw the last one; writes and dry-runs per copy and while idle, and
//!    kopper's peak memory. A table sets the two side by side (aim: the NetworkPolicy no
//!    worse than the Secret; kopper's peak with one Secret in each of 10,000 namespaces at
//!    most 50 MiB).
//!
//! For a quick check: `REPLICATION_BENCH_SCALES=200 REPLICATION_BENCH_NEW_NAMESPACES=10
//! REPLICATION_BENCH_UPDATES=3 REPLICATION_BENCH_NAMESPACES=0 cargo bench -p kopper --bench
//! replication`.

mod support;

use support::{Cluster, memory_kib};

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{NamespaceResourceScope, ObjectMeta, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use kopper::controllers::replication::desired::desired_copy;
use kopper::controllers::replication::model::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectInfo, ObjectKind, Payload, RuleId, SOURCE_VERSION_ANNOTATION,
    Source,
};
use kopper::controllers::replication::types::ReplicationRule;
use kopper::kinds::{AllowedKinds, parse_entry};

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
/// Figures 1 to 4: sources, each copied into every namespace.
const LATENCY_SOURCES: usize = 5;
/// Keeps each new namespace of figure 1 a lone event rather than part of a burst: a burst
/// lets an engine serve several namespaces with one pass (a debounce does), which would
/// hide the latency one namespace sees when tenants arrive one by one.
const NEW_NAMESPACE_GAP: Duration = Duration::from_millis(50);
/// kopper's `CONCURRENT_WRITES` (controllers/replication/apply.rs, private there): the
/// writes one rule has in flight at once, and so those of the fan-out baseline.
const KOPPER_CONCURRENT_WRITES: usize = 16;
/// The fan-out baseline's rounds; their median is printed.
const BASELINE_ROUNDS: usize = 3;
/// The ConfigMap in every namespace that the fan-out baseline rewrites.
const BASELINE_NAME: &str = "bench-baseline";
/// kopper's own prefix of label and annotation keys, and what the fan-out baseline writes
/// in its place: as long, so a baseline object is exactly as big as a copy.
const KOPPER_KEY_PREFIX: (&str, &str) = ("kopper.dev/", "bnchmk.dev/");
/// Figure 5: sources, each copied into every namespace.
const MEMORY_SOURCES: usize = 50;
/// Unlabelled ConfigMaps created and namespaces relabelled to check that kopper ignores them.
const UNRELATED_CHANGES: usize = 100;
const STEADY_PERIOD: Duration = Duration::from_secs(10);
/// Each source (and so each copy) carries this much data, like kubesim's own benchmark.
const PAYLOAD_BYTES: usize = 1024;
/// Objects created at once while setting up: one at a time, 10,000 namespaces take long.
const CREATE_WORKERS: usize = 16;
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

/// The ReplicationRule of the seed-003 sample, which every figure runs.
fn rule() -> ReplicationRule {
    kopper::samples::of_kind(RULE_SAMPLE, "ReplicationRule").unwrap()
}

/// The sources of figures 1 to 5.
fn source_selector() -> String {
    format!("{}={}", SOURCE_LABEL.0, SOURCE_LABEL.1)
}

fn copy_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

async fn create_namespace(api: &Api<Namespace>, n: usize) {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": namespace_name(n)}})).unwrap();
    api.create(&PostParams::default(), &namespace).await.unwrap();
}

impl Cluster {
    async fn create_namespace(&self, n: usize) {
        create_namespace(&Api::all(self.client.clone()), n).await;
    }

    async fn create_named_namespace(&self, name: &str) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
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
        Api::<ReplicationRule>::all(self.client.clone())
            .create(&PostParams::default(), &rule())
            .await
            .unwrap();
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
        Self::start_with(kubeconfig, &[])
    }

    /// With `extra` flags of `kopper run`.
    fn start_with(kubeconfig: &Path, extra: &[&str]) -> Self {
        let admin_port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kopper"))
            .args(["run", "--leader-elect", "false", "--controllers", "replication-rule"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}"), "--log-level", "warn"])
            .args(extra)
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
        support::admin_get(self.admin_port, path).await
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
    /// Watches of namespaces, of the sources of kind `K` in `source_namespace` selected by
    /// `source_selector`, and of kopper's copies of kind `K`.
    async fn start<K>(client: &kube::Client, source_namespace: &str, source_selector: &str) -> Self
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
        K: Send + Sync + 'static,
    {
        let (tx, events) = mpsc::unbounded_channel();
        let tasks = vec![
            spawn_watch(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                watcher::Config::default(),
                tx.clone(),
                |meta| Seen::Namespace { name: meta.name.clone().unwrap_or_default() },
            ),
            spawn_watch(
                Api::<PartialObjectMeta<K>>::namespaced(client.clone(), source_namespace),
                watcher::Config::default().labels(source_selector),
                tx.clone(),
                |meta| Seen::Source {
                    name: meta.name.clone().unwrap_or_default(),
                    version: meta.resource_version.clone().unwrap_or_default(),
                },
            ),
            spawn_watch(
                Api::<PartialObjectMeta<K>>::all(client.clone()),
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

/// Figures 1 to 4 at one scale.
#[derive(Clone, Copy)]
struct Scale {
    namespaces: usize,
    new_namespaces: usize,
    updates: usize,
}

/// What a scale's run measured, kept for the closing comparison across scales.
struct ScaleSummary {
    namespaces: usize,
    new_namespace_p50: Duration,
    new_namespace_p99: Duration,
    fan_out_p50: Duration,
    fan_out_baseline: Baseline,
    idle_kib: u64,
    peak_kib: u64,
}

/// Figure 1, per new namespace: its own watch event after the create request, and its last
/// copy's watch event after that.
struct NewNamespace {
    namespace_seen: Duration,
    copies_after_event: Duration,
}

/// Creates namespace `n` and waits until the bench has seen it and all its `sources` copies.
async fn new_namespace(cluster: &Cluster, observer: &mut Observer, n: usize, sources: usize) -> NewNamespace {
    let name = namespace_name(n);
    let started = Instant::now();
    cluster.create_namespace(n).await;
    let deadline = started + EVENT_LIMIT;
    let mut namespace_seen = None;
    let mut copies = HashSet::new();
    loop {
        let observed = observer.next(deadline, "the new namespace's copies").await;
        match observed.seen {
            Seen::Namespace { name: seen } if seen == name => {
                namespace_seen.get_or_insert(observed.at);
            }
            Seen::Copy { namespace, name: copy, .. } if namespace == name => {
                copies.insert(copy);
            }
            _ => continue,
        }
        if let Some(namespace_seen) = namespace_seen
            && copies.len() == sources
        {
            return NewNamespace {
                namespace_seen: namespace_seen - started,
                copies_after_event: observed.at.saturating_duration_since(namespace_seen),
            };
        }
    }
}

/// Figure 1: `count` namespaces after the first `first`, one at a time, each awaited, with
/// a gap between them; each gets `sources` copies.
async fn new_namespaces(
    cluster: &Cluster,
    observer: &mut Observer,
    first: usize,
    count: usize,
    sources: usize,
) -> Vec<NewNamespace> {
    let mut samples = Vec::with_capacity(count);
    for n in first..first + count {
        samples.push(new_namespace(cluster, observer, n, sources).await);
        tokio::time::sleep(NEW_NAMESPACE_GAP).await;
    }
    samples
}

/// Figure 2, per update, from the update request: the source's own watch event, its first
/// and its last copy updated.
struct Update {
    source_seen: Duration,
    first_copy: Duration,
    last_copy: Duration,
}

impl Update {
    /// The fan-out: from the source's update event (what kopper acts on) to its last copy.
    fn fan_out(&self) -> Duration {
        self.last_copy.saturating_sub(self.source_seen)
    }
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
    time_fan_out(observer, source, &version, started, namespaces).await
}

/// Times the copies of `source` at `version`, updated by a request sent at `started`, until
/// `namespaces` of them are seen.
async fn time_fan_out(
    observer: &mut Observer,
    source: &str,
    version: &str,
    started: Instant,
    namespaces: usize,
) -> Update {
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

/// Runs `task(n)` for every `n` in `items`, `limit` at a time, in this task: the way kopper
/// runs its writes (a buffered stream), so the fan-out baseline is written alike.
async fn concurrently<F, Fut>(items: Range<usize>, limit: usize, task: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    futures::stream::iter(items).map(task).buffer_unordered(limit).collect::<Vec<()>>().await;
}

/// What the fan-out baseline writes: objects shaped like kopper's copies. The API server's
/// work for a write grows with the object's metadata (each label and annotation is
/// validated, diffed and tracked in managedFields): at 10,000 namespaces, kubesim took
/// about 1.35x as long for ConfigMaps carrying a copy's three labels and six annotations as
/// for ones with a single label and the same data. So a baseline of lighter objects would
/// charge kopper for the API server's own work on the writes it must make.
struct BaselineShape {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    /// The annotation that names the round that wrote the object, for the bench's watch (in
    /// place of the source resourceVersion a copy carries).
    round_key: String,
}

impl BaselineShape {
    /// The labels and annotations kopper gives its copies of source 0 under the rule, with
    /// kopper's own keys and every label value replaced by ones as long: neither kopper's
    /// copy watch (by its managed-by label) nor the rule's selector (by the sources' labels,
    /// which copies carry) selects these objects, and the rule reads sources from
    /// `SOURCE_NAMESPACE` only, so kopper never watches, copies or writes them.
    async fn of_copies(cluster: &Cluster) -> Self {
        let rule = Api::<ReplicationRule>::all(cluster.client.clone()).get(&rule().name_any()).await.unwrap();
        assert_eq!(
            rule.spec.namespaces,
            [SOURCE_NAMESPACE],
            "the rule must not read the tenants' namespaces"
        );
        let source = cluster.config_maps(SOURCE_NAMESPACE).get(&source_name(0)).await.unwrap();
        let source = Source::new(ObjectInfo::from_meta(&source.metadata), Payload::from_config_map(&source));
        let shape = Self::of_copy(&rule, ObjectKind::ConfigMap, &source);
        assert!(shape.labels.get(SOURCE_LABEL.0).is_some_and(|value| value != SOURCE_LABEL.1));
        shape
    }

    /// The labels and annotations of `rule`'s copy of `source` (of `kind`), renamed as
    /// [`BaselineShape::of_copies`] says.
    fn of_copy(rule: &ReplicationRule, kind: ObjectKind, source: &Source) -> Self {
        let rule_id = RuleId::replication_rule(&rule.name_any());
        let rule_uid = rule.uid().unwrap_or_default();
        let copy = desired_copy(&rule_id, &rule_uid, kind, source, &namespace_name(0));
        let rename = |key: &str| key.replacen(KOPPER_KEY_PREFIX.0, KOPPER_KEY_PREFIX.1, 1);
        let shape = Self {
            labels: copy.labels.iter().map(|(key, value)| (rename(key), "b".repeat(value.len()))).collect(),
            annotations: copy.annotations.iter().map(|(key, value)| (rename(key), value.clone())).collect(),
            round_key: rename(SOURCE_VERSION_ANNOTATION),
        };
        assert!(shape.labels.get(MANAGED_BY_LABEL).is_some_and(|value| value != MANAGED_BY_VALUE));
        assert!(shape.annotations.contains_key(&shape.round_key), "a copy names its source's version");
        shape
    }

    /// The metadata of the baseline object in namespace `n` in `round`.
    fn metadata(&self, n: usize, round: usize) -> serde_json::Value {
        let mut annotations = self.annotations.clone();
        annotations.insert(self.round_key.clone(), round.to_string());
        json!({
            "name": BASELINE_NAME, "namespace": namespace_name(n),
            "labels": self.labels, "annotations": annotations,
        })
    }

    /// The ConfigMap the fan-out baseline writes in namespace `n` in `round`: as big as a
    /// copy, with as many labels and annotations.
    fn config_map(&self, n: usize, round: usize) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": self.metadata(n, round),
            "data": {"payload": "x".repeat(PAYLOAD_BYTES), "revision": round.to_string()},
        }))
        .unwrap()
    }

    /// The object of kind `K` a single-source run's baseline writes in namespace `n` in
    /// `round`: the source at that revision, with a copy's labels and annotations.
    fn object<K: SingleSource>(&self, n: usize, round: usize) -> K {
        let mut object = K::source(BASELINE_NAME, &namespace_name(n), round);
        *object.meta_mut() = serde_json::from_value(self.metadata(n, round)).unwrap();
        object
    }
}

/// A copy and a fan-out baseline object in one namespace, in bytes as kubesim serves them
/// and in labels and annotations, so the output shows that the baseline writes objects as
/// heavy as the copies.
struct ObjectSizes {
    copy: (usize, usize),
    baseline: (usize, usize),
}

impl ObjectSizes {
    /// The copy named `copy` and the baseline object, both of kind `K`, in namespace 0.
    async fn read<K: Resource<DynamicType = ()>>(cluster: &Cluster, copy: &str) -> Self {
        let measure = |name: String| async move {
            let path = K::url_path(&(), Some(&namespace_name(0)));
            let request = http::Request::get(format!("{path}/{name}")).body(Vec::new()).unwrap();
            let text = cluster.client.request_text(request).await.unwrap();
            let object: PartialObjectMeta<K> = serde_json::from_str(&text).unwrap();
            (text.len(), object.labels().len() + object.annotations().len())
        };
        Self { copy: measure(copy.to_owned()).await, baseline: measure(BASELINE_NAME.to_owned()).await }
    }

    fn print(&self) {
        println!(
            "    objects written:            a copy {} B with {} labels and annotations, a baseline object \
             {} B with {} (managedFields included)",
            self.copy.0, self.copy.1, self.baseline.0, self.baseline.1
        );
    }
}

/// Creates namespaces `range` and the fan-out baseline's ConfigMap in each, `CREATE_WORKERS`
/// at a time (one at a time, 10,000 namespaces take long).
async fn create_tenants(cluster: &Cluster, shape: &BaselineShape, range: Range<usize>) {
    concurrently(range, CREATE_WORKERS, |n| async move {
        cluster.create_namespace(n).await;
        let config_map = shape.config_map(n, 0);
        cluster.config_maps(&namespace_name(n)).create(&PostParams::default(), &config_map).await.unwrap();
    })
    .await;
}

/// What the baseline reads from the answer to a write, as kopper does: the rest of the
/// object is skipped while parsing.
#[derive(serde::Deserialize)]
struct Written {
    #[serde(rename = "metadata")]
    _metadata: WrittenMeta,
}

#[derive(serde::Deserialize)]
struct WrittenMeta {
    #[serde(rename = "resourceVersion")]
    _resource_version: String,
}

/// Figure 2's baseline, in two readings of the same writes.
#[derive(Clone, Copy)]
struct Baseline {
    /// Until the bench's own watch has seen the last write: how kopper's fan-out is timed
    /// (its last copy's watch event), so the ratio compares like with like.
    watched: Duration,
    /// Until the last write was acknowledged.
    acknowledged: Duration,
}

/// Figure 2's baseline: kubesim taking the fan-out's writes straight from the bench, one
/// full replace per namespace of an object shaped like a copy (`shape`), as many at once as
/// kopper has in flight for one rule, while the bench watches them as it watches copies
/// (metadata only). Made before kopper starts, so neither slows the other. The bodies are
/// serialised before the clock starts and only the resourceVersion is read from each
/// answer, as kopper writes its copies, so the bench's own work on the 2 cores is no
/// heavier than kopper's. The median of a few rounds.
async fn direct_fan_out(cluster: &Cluster, shape: &BaselineShape, namespaces: usize) -> Baseline {
    direct_fan_out_of::<ConfigMap>(cluster, shape, namespaces, |n, round| {
        serde_json::to_vec(&shape.config_map(n, round)).unwrap()
    })
    .await
}

/// [`direct_fan_out`] for objects of kind `K`, `body(n, round)` the one in namespace `n`.
async fn direct_fan_out_of<K>(
    cluster: &Cluster,
    shape: &BaselineShape,
    namespaces: usize,
    body: impl Fn(usize, usize) -> Vec<u8>,
) -> Baseline
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K: Send + Sync + 'static,
{
    let (mut watched, mut acknowledged) = (Vec::new(), Vec::new());
    for round in 1..=BASELINE_ROUNDS {
        let bodies: Vec<Vec<u8>> = (0..namespaces).map(|n| body(n, round)).collect();
        let mut watch = baseline_watch::<K>(cluster).await;
        let started = Instant::now();
        let writes = async {
            concurrently(0..namespaces, KOPPER_CONCURRENT_WRITES, |n| {
                let body = bodies[n].clone();
                async move {
                    let requests = kube::core::Request::new(K::url_path(&(), Some(&namespace_name(n))));
                    let request = requests.replace(BASELINE_NAME, &PostParams::default(), body).unwrap();
                    let _: Written = cluster.client.request(request).await.unwrap();
                }
            })
            .await;
            started.elapsed()
        };
        let seen = async {
            let mut seen = HashSet::new();
            let deadline = Instant::now() + EVENT_LIMIT;
            while seen.len() < namespaces {
                let event = tokio::time::timeout_at(deadline.into(), watch.next()).await;
                let Ok(Some(Ok(watcher::Event::Apply(meta) | watcher::Event::InitApply(meta)))) = event
                else {
                    assert!(event.is_ok(), "timed out waiting for the baseline's writes to be watched");
                    continue;
                };
                if meta.annotations().get(&shape.round_key) == Some(&round.to_string()) {
                    seen.insert(meta.namespace().unwrap_or_default());
                }
            }
            started.elapsed()
        };
        let (acked, watched_all) = tokio::join!(writes, seen);
        acknowledged.push(acked);
        watched.push(watched_all);
    }
    Baseline { watched: percentile(&mut watched, 0.5), acknowledged: percentile(&mut acknowledged, 0.5) }
}

/// A metadata watch of the baseline's objects of kind `K`, as the bench watches copies, once
/// synced.
async fn baseline_watch<K>(
    cluster: &Cluster,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<PartialObjectMeta<K>>>> + Unpin
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K: Send + Sync + 'static,
{
    let api = Api::<PartialObjectMeta<K>>::all(cluster.client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={BASELINE_NAME}"));
    let mut watch = watcher(api, config).boxed();
    while let Some(event) = watch.next().await {
        if let Ok(watcher::Event::InitDone) = event {
            break;
        }
    }
    watch
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
/// before it. Then counts requests over a period with no changes. `namespaces` exist.
async fn quiet_periods(cluster: &Cluster, observer: &mut Observer, namespaces: usize) -> Quiet {
    let writes = cluster.writes();
    let namespace_api: Api<Namespace> = Api::all(cluster.client.clone());
    for n in 0..UNRELATED_CHANGES {
        let namespace = namespace_name(n % namespaces);
        let unrelated: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("unrelated-{n}")}, "data": {"payload": "not replicated"},
        }))
        .unwrap();
        cluster.config_maps(&namespace).create(&PostParams::default(), &unrelated).await.unwrap();
        let relabel = Patch::Merge(json!({"metadata": {"labels": {"bench.kopper.dev/touched": "true"}}}));
        namespace_api.patch(&namespace, &PatchParams::default(), &relabel).await.unwrap();
    }
    timed_update(cluster, observer, &source_name(0), usize::MAX, namespaces).await;
    let bench_writes = UNRELATED_CHANGES as u64 + 1;
    let unrelated_kopper_writes = (cluster.writes() - writes).saturating_sub(bench_writes);

    let (writes, lists) = (cluster.writes(), cluster.lists());
    tokio::time::sleep(STEADY_PERIOD).await;
    Quiet {
        unrelated_kopper_writes,
        fence_copies: namespaces,
        steady_writes: cluster.writes() - writes,
        steady_lists: cluster.lists() - lists,
    }
}

/// kopper's resident memory (VmRSS, KiB) once ready on a cluster with nothing to replicate.
async fn idle_kopper_kib(cluster: &Cluster) -> u64 {
    let idle = Kopper::start(&cluster.kubeconfig);
    idle.wait_ready().await;
    idle.memory_kib().0
}

/// Figures 1 to 4 at one scale, on a fresh kubesim and a fresh kopper.
async fn scale_figures(scale: &Scale) -> ScaleSummary {
    let Scale { namespaces, new_namespaces: new_count, updates } = *scale;
    let cluster = Cluster::start().await;
    let idle_kib = idle_kopper_kib(&cluster).await;

    let setup_started = Instant::now();
    cluster.create_sources(LATENCY_SOURCES).await;
    cluster.apply_rule().await;
    let shape = BaselineShape::of_copies(&cluster).await;
    create_tenants(&cluster, &shape, 0..namespaces).await;
    let setup = setup_started.elapsed();
    let baseline = direct_fan_out(&cluster, &shape, namespaces).await;

    let (writes, reads) = (cluster.writes(), cluster.reads());
    let kopper = Kopper::start(&cluster.kubeconfig);
    let initial_copies = namespaces * LATENCY_SOURCES;
    let initial = cluster.wait_for_copies(initial_copies).await;
    let initial_writes = cluster.writes() - writes;
    let initial_reads = cluster.reads() - reads;
    let sizes = ObjectSizes::read::<ConfigMap>(&cluster, &source_name(0)).await;
    let mut observer =
        Observer::start::<ConfigMap>(&cluster.client, SOURCE_NAMESPACE, &source_selector()).await;

    let writes = cluster.writes();
    let mut samples = Vec::with_capacity(updates);
    for revision in 1..=updates {
        let source = source_name(revision % LATENCY_SOURCES);
        samples.push(timed_update(&cluster, &mut observer, &source, revision, namespaces).await);
    }
    let update_writes = (cluster.writes() - writes).saturating_sub(updates as u64);
    let (_, peak_kib) = kopper.memory_kib();

    let writes = cluster.writes();
    let mut arrivals = new_namespaces(&cluster, &mut observer, namespaces, new_count, LATENCY_SOURCES).await;
    let new_namespace_writes = cluster.writes() - writes;

    let quiet = quiet_periods(&cluster, &mut observer, namespaces + new_count).await;
    drop(observer);
    drop(kopper);
    cluster.sim.shutdown().await;

    println!(
        "replication at {namespaces} namespaces ({LATENCY_SOURCES} sources of {PAYLOAD_BYTES} B, \
         1 ReplicationRule; kopper as a child process)"
    );
    println!(
        "  setup:                        {:>8.1} s   ({namespaces} namespaces + {namespaces} baseline \
         ConfigMaps, {CREATE_WORKERS} creates at a time)",
        setup.as_secs_f64()
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
    let new_namespace = print_new_namespaces(&mut arrivals, LATENCY_SOURCES, new_namespace_writes);
    let fan_out_p50 = print_fan_out(&mut samples, namespaces, baseline, update_writes, "ConfigMaps");
    sizes.print();
    print_quiet(&quiet);
    println!(
        "  kopper resident:              {:>8.1} MiB peak (VmHWM) after the fan-out   (baseline: {:.1} MiB \
         idle on an empty cluster; aim: under 100 MiB at 10000)",
        mib(peak_kib * 1024),
        mib(idle_kib * 1024)
    );
    ScaleSummary {
        namespaces,
        new_namespace_p50: new_namespace.0,
        new_namespace_p99: new_namespace.1,
        fan_out_p50,
        fan_out_baseline: baseline,
        idle_kib,
        peak_kib,
    }
}

/// The `q` quantile (0 to 1) of `values`, nearest rank; sorts them.
fn percentile(values: &mut [Duration], q: f64) -> Duration {
    values.sort();
    values.get(((values.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

/// p50 and p99 of one measure of `samples`.
fn p50_p99<T>(samples: &[T], measure: impl Fn(&T) -> Duration) -> (Duration, Duration) {
    let mut values: Vec<_> = samples.iter().map(measure).collect();
    (percentile(&mut values, 0.5), percentile(&mut values, 0.99))
}

/// Prints figure 1 for namespaces that get `sources` copies each; returns its p50 and p99.
fn print_new_namespaces(samples: &mut [NewNamespace], sources: usize, writes: u64) -> (Duration, Duration) {
    let n = samples.len();
    let (copies50, copies99) = p50_p99(samples, |s| s.copies_after_event);
    let (seen50, seen99) = p50_p99(samples, |s| s.namespace_seen);
    println!(
        "  new namespace to its {sources} copies ({n} namespaces, one at a time, {} ms apart; \
         aim: p50 under 20 ms, the same at every scale):",
        NEW_NAMESPACE_GAP.as_millis()
    );
    println!("    from its watch event:       p50 {:>8.1} ms  p99 {:>8.1} ms", ms(copies50), ms(copies99));
    println!(
        "    its watch event itself:     p50 {:>8.1} ms  p99 {:>8.1} ms   (baseline: kubesim's delivery \
         after the create request)",
        ms(seen50),
        ms(seen99)
    );
    let copies = (n * sources).max(1);
    println!(
        "    writes by kopper:           {:>8}      ({:.2} per copy)",
        writes,
        writes as f64 / copies as f64
    );
    (copies50, copies99)
}

/// Prints figure 2 and the update writes of figure 3, for copies of `kind` (plural, as
/// printed); returns the fan-out's p50.
fn print_fan_out(
    samples: &mut [Update],
    namespaces: usize,
    baseline: Baseline,
    writes: u64,
    kind: &str,
) -> Duration {
    let n = samples.len();
    let (fan50, fan99) = p50_p99(samples, Update::fan_out);
    let (first50, first99) = p50_p99(samples, |s| s.first_copy.saturating_sub(s.source_seen));
    let (source50, source99) = p50_p99(samples, |s| s.source_seen);
    println!(
        "  fan-out of a source update to {namespaces} copies ({n} updates, each awaited; p99 of {n} is \
         near the max):"
    );
    println!(
        "    source event to last copy:  p50 {:>8.1} ms  p99 {:>8.1} ms   ({:.2}x the baseline at p50; \
         aim: within 1.5x at 10000)",
        ms(fan50),
        ms(fan99),
        ms(fan50) / ms(baseline.watched).max(1e-3)
    );
    println!(
        "    baseline, direct writes:        {:>8.1} ms   (kubesim taking {namespaces} replaces of {kind} \
         shaped like the copies from the bench, {KOPPER_CONCURRENT_WRITES} at a time, until the bench's watch saw the last \
         one, as copies are timed; median of {BASELINE_ROUNDS})",
        ms(baseline.watched)
    );
    println!(
        "      the same, acknowledged:       {:>8.1} ms   ({:.2}x: kopper against the last write's answer)",
        ms(baseline.acknowledged),
        ms(fan50) / ms(baseline.acknowledged).max(1e-3)
    );
    println!("    source event to first copy: p50 {:>8.1} ms  p99 {:>8.1} ms", ms(first50), ms(first99));
    println!(
        "    source's own watch event:   p50 {:>8.1} ms  p99 {:>8.1} ms   (after the update request)",
        ms(source50),
        ms(source99)
    );
    let changed = n * namespaces;
    println!(
        "    writes by kopper:           {:>8}      ({:.3} per copy changed; {changed} copies changed)",
        writes,
        writes as f64 / changed.max(1) as f64
    );
    fan50
}

fn print_quiet(quiet: &Quiet) {
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
}

/// The scales side by side: figure 1 should not grow with N, figure 2 should stay near
/// kubesim's own time, and memory should stay small.
fn print_summary(summaries: &[ScaleSummary]) {
    println!("replication across scales");
    println!(
        "  {:>10}  {:>14}  {:>14}  {:>14}  {:>14}  {:>8}  {:>14}  {:>8}  {:>12}  {:>12}",
        "namespaces",
        "new ns p50 ms",
        "new ns p99 ms",
        "fan-out p50 ms",
        "direct ms",
        "ratio",
        "direct ack ms",
        "ratio",
        "idle MiB",
        "peak MiB"
    );
    for s in summaries {
        let (watched, acknowledged) = (s.fan_out_baseline.watched, s.fan_out_baseline.acknowledged);
        println!(
            "  {:>10}  {:>14.1}  {:>14.1}  {:>14.1}  {:>14.1}  {:>8.2}  {:>14.1}  {:>8.2}  {:>12.1}  {:>12.1}",
            s.namespaces,
            ms(s.new_namespace_p50),
            ms(s.new_namespace_p99),
            ms(s.fan_out_p50),
            ms(watched),
            ms(s.fan_out_p50) / ms(watched).max(1e-3),
            ms(acknowledged),
            ms(s.fan_out_p50) / ms(acknowledged).max(1e-3),
            mib(s.idle_kib * 1024),
            mib(s.peak_kib * 1024)
        );
    }
    println!(
        "  (aims: new ns p50 under 20 ms and flat across scales; fan-out within 1.5x direct at 10000; \
         peak under 100 MiB at 10000)"
    );
}

/// The bench's live heap once it stops falling: the clusters of the figures before this one
/// are shut down, but their tasks may still be dropping the last references to their stores.
/// Read at once, the 10,000-namespace cluster's store was still counted in the baseline of
/// the next figure and hid 500 MiB of kubesim's heap. Half a second with less than
/// 256 KiB of change counts as settled; after 30 s the figure is taken as it is.
async fn settled_heap() -> usize {
    const STILL: usize = 256 * 1024;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = LIVE.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = LIVE.load(Ordering::Relaxed);
        if now.abs_diff(last) < STILL || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// Figure 5: kopper's memory with `namespaces` x 50 copies next to kubesim's heap for them.
async fn memory_figures(namespaces: usize) {
    let cluster = Cluster::start().await;
    let idle = Kopper::start(&cluster.kubeconfig);
    idle.wait_ready().await;
    let (idle_rss, _) = idle.memory_kib();
    drop(idle);

    let heap_empty = settled_heap().await;
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
    let scales = env_scales("REPLICATION_BENCH_SCALES", &[1_000, 10_000]);
    let new_namespaces = env_usize("REPLICATION_BENCH_NEW_NAMESPACES", 200).max(1);
    let updates = env_usize("REPLICATION_BENCH_UPDATES", 20).max(1);
    let memory_namespaces = env_usize("REPLICATION_BENCH_NAMESPACES", 5_000);
    let started = Instant::now();
    let mut summaries = Vec::with_capacity(scales.len());
    for namespaces in scales {
        let scale = Scale { namespaces, new_namespaces, updates };
        summaries.push(scale_figures(&scale).await);
    }
    print_summary(&summaries);
    let largest = summaries.iter().map(|summary| summary.namespaces).max().unwrap_or(1_000);
    let single_source_namespaces = env_usize("REPLICATION_BENCH_SINGLE_SOURCE", largest);
    if single_source_namespaces > 0 {
        single_source_runs(single_source_namespaces, new_namespaces, updates).await;
    }
    if memory_namespaces > 0 {
        memory_figures(memory_namespaces).await;
    }
    println!("  (whole benchmark: {:.0} s)", started.elapsed().as_secs_f64());
}

/// The namespace the single-source runs' source lives in, protected (a NetworkPolicy is
/// copied only from a protected namespace).
const SINGLE_SOURCE_NAMESPACE: &str = "platform";
/// The single-source runs' source, and the label that selects it.
const SINGLE_SOURCE_NAME: &str = "shared";
const SINGLE_SOURCE_LABEL: (&str, &str) = ("replicate", "everywhere");

/// A kind of figure 6's single-source runs.
trait SingleSource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    /// As `--replicate-kinds` and a rule's `apiVersion` name it.
    const API_VERSION: &str;
    /// Its resource and API group, as kubesim's counters and label index name them.
    const RESOURCE: (&str, &str);
    /// Plural, as printed.
    const PLURAL: &str;
    /// The object named `name` in `namespace` at `revision`, selected by the run's rule and
    /// labelled `revision`, so that a copy's revision shows in kubesim's label index.
    fn source(name: &str, namespace: &str, revision: usize) -> Self;
    /// Its content, as kopper's engine reads it.
    fn payload(&self) -> Payload;
    /// Its kind, as kopper's engine names it.
    fn object_kind() -> ObjectKind;
    /// The flags kopper needs to copy it.
    fn kopper_flags() -> Vec<String> {
        vec!["--protected-namespaces".into(), SINGLE_SOURCE_NAMESPACE.into()]
    }
}

/// The metadata of the single-source runs' source `name` at `revision`.
fn single_source_meta(name: &str, namespace: &str, revision: usize) -> serde_json::Value {
    json!({"name": name, "namespace": namespace,
           "labels": {SINGLE_SOURCE_LABEL.0: SINGLE_SOURCE_LABEL.1, "revision": revision.to_string()}})
}

/// A default-deny NetworkPolicy; `revision` also goes into its pod selector.
impl SingleSource for NetworkPolicy {
    const API_VERSION: &str = "networking.k8s.io/v1";
    const RESOURCE: (&str, &str) = ("networkpolicies", "networking.k8s.io");
    const PLURAL: &str = "NetworkPolicies";

    fn source(name: &str, namespace: &str, revision: usize) -> Self {
        serde_json::from_value(json!({
            "metadata": single_source_meta(name, namespace, revision),
            "spec": {"podSelector": {"matchExpressions": [
                {"key": "revision", "operator": "NotIn", "values": [revision.to_string()]}]}},
        }))
        .unwrap()
    }

    fn payload(&self) -> Payload {
        let json = serde_json::to_value(self).unwrap();
        Payload::generic(json.as_object().cloned().unwrap_or_default())
    }

    fn object_kind() -> ObjectKind {
        let entry = parse_entry(&format!("{}/NetworkPolicy", Self::API_VERSION)).unwrap();
        let kinds = AllowedKinds::new([entry]);
        ObjectKind::Other(kinds.find(Self::API_VERSION, "NetworkPolicy").unwrap())
    }

    fn kopper_flags() -> Vec<String> {
        let mut flags = vec!["--replicate-kinds".to_owned(), format!("{}/NetworkPolicy", Self::API_VERSION)];
        flags.extend(["--protected-namespaces".into(), SINGLE_SOURCE_NAMESPACE.into()]);
        flags
    }
}

/// A Secret of `PAYLOAD_BYTES`, as large as the ConfigMap sources of figures 1 to 4.
impl SingleSource for Secret {
    const API_VERSION: &str = "v1";
    const RESOURCE: (&str, &str) = ("secrets", "");
    const PLURAL: &str = "Secrets";

    fn source(name: &str, namespace: &str, revision: usize) -> Self {
        let data = [("payload", "x".repeat(PAYLOAD_BYTES)), ("revision", revision.to_string())];
        Secret {
            metadata: serde_json::from_value(single_source_meta(name, namespace, revision)).unwrap(),
            data: Some(
                data.into_iter()
                    .map(|(key, value)| (key.to_owned(), ByteString(value.into_bytes())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn payload(&self) -> Payload {
        Payload::from_secret(self)
    }

    fn object_kind() -> ObjectKind {
        ObjectKind::Secret
    }
}

impl Cluster {
    fn objects<K: SingleSource>(&self, namespace: &str) -> Api<K> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// kopper's copies of kind `K` holding `revision`.
    fn copies_at<K: SingleSource>(&self, revision: usize) -> usize {
        let selector = format!("{},revision={revision}", copy_selector());
        let (resource, group) = K::RESOURCE;
        self.sim.count_labelled_in(group, resource, &selector).unwrap()
    }

    async fn wait_for_copies_at<K: SingleSource>(&self, count: usize, revision: usize) -> Duration {
        let started = Instant::now();
        while self.copies_at::<K>(revision) < count {
            assert!(started.elapsed() < CONVERGENCE_LIMIT, "timed out waiting for {count} {}", K::PLURAL);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        started.elapsed()
    }

    /// Writes and dry-runs of objects of kind `K`, by anyone.
    fn writes_of<K: SingleSource>(&self) -> (u64, u64) {
        let counters = self.sim.counters();
        (counters.writes(K::RESOURCE.0), counters.dry_runs(K::RESOURCE.0))
    }
}

/// The single-source runs' rule: the source copied into the bench's namespaces.
fn single_source_rule<K: SingleSource>() -> ReplicationRule {
    let kind = K::kind(&());
    serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "ReplicationRule", "metadata": {"name": "everywhere"},
        "spec": {"apiVersion": K::API_VERSION, "kind": kind, "namespaces": [SINGLE_SOURCE_NAMESPACE],
                 "selector": {"matchLabels": {SINGLE_SOURCE_LABEL.0: SINGLE_SOURCE_LABEL.1}},
                 // Only the bench's namespaces, so copies and namespaces are as many.
                 "excludeNamespaces": ["default"]},
    }))
    .unwrap()
}

/// What figure 6 measured for one kind.
struct SingleSourceSummary {
    plural: &'static str,
    new_namespace: (Duration, Duration),
    fan_out_p50: Duration,
    baseline: Baseline,
    idle_kib: u64,
    peak_kib: u64,
}

impl SingleSourceSummary {
    fn ratio(&self) -> f64 {
        ms(self.fan_out_p50) / ms(self.baseline.watched).max(1e-3)
    }
}

/// Figure 6 for kind `K` at `namespaces`, measured as figures 1 and 2 are.
async fn single_source_figures<K: SingleSource>(
    namespaces: usize,
    new_count: usize,
    updates: usize,
) -> SingleSourceSummary {
    let cluster = Cluster::start().await;
    let idle_kib = idle_kopper_kib(&cluster).await;
    cluster.create_named_namespace(SINGLE_SOURCE_NAMESPACE).await;
    let source = K::source(SINGLE_SOURCE_NAME, SINGLE_SOURCE_NAMESPACE, 0);
    let source =
        cluster.objects::<K>(SINGLE_SOURCE_NAMESPACE).create(&PostParams::default(), &source).await.unwrap();
    let rule = Api::<ReplicationRule>::all(cluster.client.clone())
        .create(&PostParams::default(), &single_source_rule::<K>())
        .await
        .unwrap();
    let source = Source::new(ObjectInfo::from_meta(source.meta()), source.payload());
    let shape = BaselineShape::of_copy(&rule, K::object_kind(), &source);
    concurrently(0..namespaces, CREATE_WORKERS, |n| {
        let (cluster, shape) = (&cluster, &shape);
        async move {
            cluster.create_namespace(n).await;
            let baseline = shape.object::<K>(n, 0);
            cluster.objects::<K>(&namespace_name(n)).create(&PostParams::default(), &baseline).await.unwrap();
        }
    })
    .await;
    let baseline = direct_fan_out_of::<K>(&cluster, &shape, namespaces, |n, round| {
        serde_json::to_vec(&shape.object::<K>(n, round)).unwrap()
    })
    .await;

    let (writes, _) = cluster.writes_of::<K>();
    let flags = K::kopper_flags();
    let kopper =
        Kopper::start_with(&cluster.kubeconfig, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let initial = cluster.wait_for_copies_at::<K>(namespaces, 0).await;
    let initial_writes = cluster.writes_of::<K>().0 - writes;
    let sizes = ObjectSizes::read::<K>(&cluster, SINGLE_SOURCE_NAME).await;
    let selector = format!("{}={}", SINGLE_SOURCE_LABEL.0, SINGLE_SOURCE_LABEL.1);
    let mut observer = Observer::start::<K>(&cluster.client, SINGLE_SOURCE_NAMESPACE, &selector).await;

    let (writes, dry_runs) = cluster.writes_of::<K>();
    let mut samples = Vec::with_capacity(updates);
    for revision in 1..=updates {
        let started = Instant::now();
        let updated = K::source(SINGLE_SOURCE_NAME, SINGLE_SOURCE_NAMESPACE, revision);
        let params = PatchParams::apply("bench").force();
        let answer = cluster
            .objects::<K>(SINGLE_SOURCE_NAMESPACE)
            .patch(SINGLE_SOURCE_NAME, &params, &Patch::Apply(&updated))
            .await
            .unwrap();
        let version = answer.resource_version().unwrap_or_default();
        samples.push(time_fan_out(&mut observer, SINGLE_SOURCE_NAME, &version, started, namespaces).await);
    }
    let (after, after_dry) = cluster.writes_of::<K>();
    let update_writes = (after - writes).saturating_sub(updates as u64);
    let update_dry_runs = after_dry - dry_runs;
    let (_, peak_kib) = kopper.memory_kib();

    let writes = cluster.writes_of::<K>().0;
    let mut arrivals = new_namespaces(&cluster, &mut observer, namespaces, new_count, 1).await;
    let new_namespace_writes = cluster.writes_of::<K>().0 - writes;

    let idle = cluster.writes_of::<K>();
    tokio::time::sleep(STEADY_PERIOD).await;
    let idle_after = cluster.writes_of::<K>();
    drop(observer);
    drop(kopper);
    cluster.sim.shutdown().await;

    println!(
        "replication of one {} at {namespaces} namespaces (1 source in a protected namespace; kopper run with {})",
        K::kind(&()),
        flags.join(" ")
    );
    println!(
        "  initial replication:          {:>8.2} s for {namespaces} copies   ({initial_writes} writes, {:.3} per copy)",
        initial.as_secs_f64(),
        initial_writes as f64 / namespaces as f64
    );
    let new_namespace = print_new_namespaces(&mut arrivals, 1, new_namespace_writes);
    let fan_out_p50 = print_fan_out(&mut samples, namespaces, baseline, update_writes, K::PLURAL);
    println!(
        "    dry-runs by kopper:         {:>8}      ({:.3} per copy changed)",
        update_dry_runs,
        update_dry_runs as f64 / (updates * namespaces).max(1) as f64
    );
    sizes.print();
    println!(
        "  steady, no changes, {:>3} s:    {:>8} writes, {} dry-runs   (aim: 0)",
        STEADY_PERIOD.as_secs(),
        idle_after.0 - idle.0,
        idle_after.1 - idle.1
    );
    println!(
        "  kopper resident:              {:>8.1} MiB peak (VmHWM) after the fan-out   (baseline: {:.1} MiB \
         idle on an empty cluster)",
        mib(peak_kib * 1024),
        mib(idle_kib * 1024)
    );
    SingleSourceSummary { plural: K::PLURAL, new_namespace, fan_out_p50, baseline, idle_kib, peak_kib }
}

/// Figure 6: one Secret, then one NetworkPolicy, at `namespaces`, side by side.
async fn single_source_runs(namespaces: usize, new_count: usize, updates: usize) {
    let runs = [
        single_source_figures::<Secret>(namespaces, new_count, updates).await,
        single_source_figures::<NetworkPolicy>(namespaces, new_count, updates).await,
    ];
    println!(
        "one source copied into {namespaces} namespaces (aims: a NetworkPolicy no worse than a Secret; \
         with a Secret, a peak of at most 50 MiB at 10000)"
    );
    println!(
        "  {:>16}  {:>14}  {:>14}  {:>14}  {:>12}  {:>8}  {:>10}  {:>10}",
        "kind",
        "new ns p50 ms",
        "new ns p99 ms",
        "fan-out p50 ms",
        "direct ms",
        "ratio",
        "idle MiB",
        "peak MiB"
    );
    for run in &runs {
        println!(
            "  {:>16}  {:>14.1}  {:>14.1}  {:>14.1}  {:>12.1}  {:>8.2}  {:>10.1}  {:>10.1}",
            run.plural,
            ms(run.new_namespace.0),
            ms(run.new_namespace.1),
            ms(run.fan_out_p50),
            ms(run.baseline.watched),
            run.ratio(),
            mib(run.idle_kib * 1024),
            mib(run.peak_kib * 1024)
        );
    }
}

/// A comma-separated list of namespace counts; `default` when unset or unreadable.
fn env_scales(name: &str, default: &[usize]) -> Vec<usize> {
    let parsed: Option<Vec<usize>> = std::env::var(name)
        .ok()
        .and_then(|v| v.split(',').map(|n| n.trim().parse().ok().filter(|&n| n > 0)).collect());
    parsed.filter(|scales| !scales.is_empty()).unwrap_or_else(|| default.to_vec())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
