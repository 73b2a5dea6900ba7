//! Shared test harness: one kubesim per test, kopper run in-process against it, and waiting
//! on conditions with deadlines instead of sleeping.
#![allow(dead_code)]

pub mod manifests;
pub mod moto;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kopper::cli::{Cli, Command, RunArgs};
use kopper::runtime::Shutdown;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::task::JoinHandle;

/// How long any condition may take before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// How often a condition is checked again: short, so tests take about as long as kopper does.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Polls `check` until it yields a value and returns it; panics naming `what` after
/// [`DEADLINE`]. Conditions without a value to return yield `cond.then_some(())`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(DEADLINE, what, check).await
}

/// [`eventually`] with its own deadline, for the few conditions that may take longer than
/// [`DEADLINE`].
pub async fn eventually_within<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < give_up, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What a controller's `run` is told to stop by.
pub type StopSignal = std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// A controller's `run` started in-process on a task, stopped through its shutdown future.
pub struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl InProcess {
    /// Spawns `run(stop_signal)`.
    pub fn spawn<Run>(run: impl FnOnce(StopSignal) -> Run) -> Self
    where
        Run: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(Box::pin(async move {
            let _ = stopped.await;
        })));
        Self { stop, task }
    }

    /// Signals the stop and waits, within [`DEADLINE`], for `run` to return `Ok`.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(DEADLINE, self.task).await.unwrap().unwrap().unwrap();
    }
}

/// A kubesim server and a kubeconfig file that points at it.
pub struct Cluster {
    pub sim: kubesim::Server,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub async fn start() -> Self {
        Self::start_with(kubesim::Config::default()).await
    }

    /// A kubesim started with `config` (a `data_dir` to keep its store across restarts).
    pub async fn start_with(config: kubesim::Config) -> Self {
        let sim = kubesim::Server::start(config).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        let client = sim.client();
        Self { sim, client, _dir: dir, kubeconfig }
    }

    /// This cluster with kubesim restarted on the same address with `config`, once the
    /// kopper serving `/metrics` on `admin` found the old server gone (see
    /// [`restart_api_server_once_noticed`]): the kubeconfig stays valid, and kopper's clients
    /// reach the new server. kopper must have found every watch it had open gone, not just
    /// one: a watch that resumes on a new server without the old one's store, from a version
    /// that server has not reached, stays quiet, and kopper would never see what it watches.
    pub async fn with_api_server_restarted(self, config: kubesim::Config, admin: &str) -> Self {
        let Self { sim, _dir, kubeconfig, .. } = self;
        let failed = unanswered_watches(admin).await;
        let open = sim.counters().open_watches() as f64;
        let noticed = || async { unanswered_watches(admin).await >= failed + open.max(1.0) };
        let sim = restart_api_server_once_noticed(sim, config, noticed).await;
        let client = sim.client();
        Self { sim, client, _dir, kubeconfig }
    }

    /// `kopper run` flags for this cluster: leader election off and an ephemeral admin port
    /// unless `extra` says otherwise.
    pub fn run_args(&self, extra: &[&str]) -> RunArgs {
        run_args(&self.kubeconfig, extra)
    }

    pub fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

pub fn run_args(kubeconfig: &Path, extra: &[&str]) -> RunArgs {
    let kubeconfig = kubeconfig.to_str().unwrap();
    let base = [
        "kopper",
        "run",
        "--kubeconfig",
        kubeconfig,
        "--admin-addr",
        "127.0.0.1:0",
        "--leader-elect",
        "false",
        // Tests are not run as kopper's pod, even on a runner that is a pod.
        "--wait-for-api-server",
        "false",
    ];
    let command = Cli::try_parse_from(base.iter().chain(extra)).unwrap().into_command();
    let Command::Run(args) = command else { panic!("expected run") };
    args
}

/// kopper running in-process; stopped gracefully by [`Operator::stop`].
pub struct Operator {
    pub shutdown: Shutdown,
    pub handle: JoinHandle<anyhow::Result<()>>,
    /// Its `--shutdown-grace-period`: how long it may take to finish in-flight reconciles.
    grace: Duration,
}

impl Operator {
    pub fn start(args: RunArgs) -> Self {
        let shutdown = Shutdown::new();
        let grace = args.shutdown_grace_period;
        let handle = tokio::spawn(kopper::run(args, shutdown.wait()));
        Self { shutdown, handle, grace }
    }

    /// Triggers graceful shutdown and returns what `kopper::run` returned. kopper may take its
    /// grace period to finish reconciles in flight (on a loaded machine, API calls that take
    /// seconds), and then the usual deadline to release its lease and stop.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.trigger();
        tokio::time::timeout(self.grace + DEADLINE, self.handle)
            .await
            .expect("kopper did not stop in time")
            .unwrap()
    }
}

/// Stops `sim` and starts a kubesim with `config` on the same address, as an API server that
/// restarts does: with an empty store, or with the one kept in `config.data_dir`. Clients of
/// the old server (kopper's among them) reach the new one.
pub async fn restart_api_server(sim: kubesim::Server, config: kubesim::Config) -> kubesim::Server {
    restart_api_server_once_noticed(sim, config, || async { true }).await
}

/// [`restart_api_server`], the new server started only once `noticed` says kopper found the
/// old one gone (a watch resume refused, say), as during a real restart, which takes seconds:
/// a server back without its data does not refuse a resume from a version it has not
/// reached, it stays quiet, so only a resume that found no server makes kopper list again.
pub async fn restart_api_server_once_noticed<F, Fut>(
    sim: kubesim::Server,
    config: kubesim::Config,
    noticed: F,
) -> kubesim::Server
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let addr = sim.addr();
    sim.shutdown().await;
    eventually("kopper to find the API server gone", || async { noticed().await.then_some(()) }).await;
    kubesim::Server::start(kubesim::Config { addr, ..config }).await.unwrap()
}

/// Watch requests of the kopper serving `/metrics` on `admin` that got no answer so far.
pub async fn unanswered_watches(admin: &str) -> f64 {
    metric(admin, r#"kopper_api_requests_total{verb="watch",code="error"}"#).await.unwrap_or(0.0)
}

/// Watches that failed in this process so far, of every controller and kind
/// (`kopper_watch_errors_total`).
pub fn watch_errors(metrics: &kopper::runtime::Metrics) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with("kopper_watch_errors_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A loopback address with a port that was free a moment ago, for `--admin-addr` in tests
/// that read `/metrics` or `/readyz`.
pub fn free_admin_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// A minimal HTTP/1.0 GET (no client library in the dependency tree): status code and body.
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// The value of a counter or gauge sample from `/metrics`, by its full name and labels as
/// rendered (e.g. `kopper_reconciles_total{controller="pod-labeler"}`).
pub async fn metric(addr: &str, sample: &str) -> Option<f64> {
    let (_, body) = http_get(addr, "/metrics").await?;
    body.lines().find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
}

pub fn pod(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Pod {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let mut pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
    }))
    .unwrap();
    pod.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        annotations: Some(map(annotations)),
        labels: Some(map(labels)),
        ..ObjectMeta::default()
    };
    pod
}

pub async fn create_pod(api: &Api<Pod>, pod: &Pod) {
    api.create(&PostParams::default(), pod).await.unwrap();
}

pub async fn label_of(api: &Api<Pod>, name: &str, key: &str) -> Option<String> {
    let pod = api.get_opt(name).await.unwrap()?;
    pod.metadata.labels.and_then(|labels| labels.get(key).cloned())
}

/// Waits until pod `default/name` has label `key` set to `expected` (`None`: no such label).
pub async fn wait_for_label(cluster: &Cluster, name: &str, key: &str, expected: Option<&str>) {
    let pods = cluster.pods("default");
    let what = format!("label {key} of pod {name} to be {expected:?}");
    eventually(&what, || async { (label_of(&pods, name, key).await.as_deref() == expected).then_some(()) })
        .await;
}
