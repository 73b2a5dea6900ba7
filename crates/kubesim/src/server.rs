//! Starting and stopping a kubesim server, and the handles tests use to steer it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::State;

/// How requests are authorized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Authorization {
    /// Every request is allowed, as with kube-apiserver's `AlwaysAllow`.
    #[default]
    AlwaysAllow,
    /// Requests are authorized by the cluster's Roles and bindings for the bearer token's user.
    Rbac,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one.
    pub addr: SocketAddr,
    pub authorization: Authorization,
    /// How many changes of each resource type watches can resume from before they get
    /// `410 Gone` (kube-apiserver keeps a watch cache per resource type).
    pub watch_history: usize,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Largest request body accepted (kube-apiserver: 3 MiB).
    pub max_body_bytes: usize,
    /// Create the namespaces every cluster has (default, kube-system, kube-public, kube-node-lease).
    pub default_namespaces: bool,
    /// How long a terminating namespace keeps its contents before the namespace controller
    /// deletes them (zero: at once). A real cluster's namespace controller takes seconds.
    pub namespace_deletion_delay: Duration,
    /// Serve HTTPS with a CA and serving certificate generated at start (for `localhost`,
    /// the loopback addresses and the bind address), instead of plain HTTP. Kubeconfigs and
    /// clients from [`Server`] trust that CA. kubectl sends bearer tokens only over TLS, so
    /// per-user kubeconfigs need this to work from kubectl.
    pub tls: bool,
    /// Where the store is kept across restarts (see [`crate::persist`]); in memory only if
    /// `None`.
    pub data_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            authorization: Authorization::AlwaysAllow,
            watch_history: 100_000,
            bookmark_interval: Duration::from_secs(1),
            max_body_bytes: 3 * 1024 * 1024,
            default_namespaces: true,
            namespace_deletion_delay: Duration::ZERO,
            tls: false,
            data_dir: None,
        }
    }
}

/// A request failure to inject: the next `count` requests that match get `status`.
#[derive(Debug, Clone, Default)]
pub struct Fault {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; any if `None`.
    pub verb: Option<String>,
    /// Resource plural (`configmaps`), optionally with a subresource (`pods/status`); any if `None`.
    pub resource: Option<String>,
    pub count: u32,
    /// 409, 429 or 5xx.
    pub status: u16,
}

/// A request kubesim holds before serving it (see [`Faults::hold_next`]), so a test can
/// put another write in front of it: the race between a controller's look and its write.
pub struct HeldRequest {
    arrived: Option<tokio::sync::oneshot::Receiver<()>>,
    release: tokio::sync::oneshot::Sender<()>,
}

impl HeldRequest {
    /// Waits until the request has come in and is being held.
    pub async fn arrived(&mut self) {
        if let Some(arrived) = self.arrived.take() {
            let _ = arrived.await;
        }
    }

    /// Lets the request go on, to be served against whatever the store holds now.
    pub fn release(self) {
        let _ = self.release.send(());
    }
}

struct Hold {
    verb: String,
    resource: String,
    arrived: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
}

/// Fault injection: failing requests, holding one back, closing watches, delaying watch
/// events.
pub struct Faults {
    pending: Mutex<Vec<Fault>>,
    holds: Mutex<Vec<Hold>>,
    watch_delay: Mutex<Duration>,
    /// Bumped to close every open watch; each watch holds a receiver.
    close: tokio::sync::watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            holds: Mutex::default(),
            watch_delay: Mutex::default(),
            close: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Faults {
    pub fn fail_next(&self, fault: Fault) {
        lock(&self.pending).push(fault);
    }

    /// Drops every fault not yet used up.
    pub fn clear(&self) {
        lock(&self.pending).clear();
    }

    /// Holds the next request with this verb on this resource (e.g. `create`,
    /// `configmaps`) after it is authorized and before it is served, until the test
    /// releases it; a dropped [`HeldRequest`] releases it too.
    pub fn hold_next(&self, verb: &str, resource: &str) -> HeldRequest {
        let (arrived_tx, arrived_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel();
        lock(&self.holds).push(Hold {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            arrived: arrived_tx,
            release: release_rx,
        });
        HeldRequest { arrived: Some(arrived_rx), release: release_tx }
    }

    /// Waits while a hold set for this request lasts.
    pub(crate) async fn wait_if_held(&self, verb: &str, resource: &str) {
        let hold = {
            let mut holds = lock(&self.holds);
            let position = holds.iter().position(|h| h.verb == verb && h.resource == resource);
            position.map(|position| holds.remove(position))
        };
        if let Some(hold) = hold {
            let _ = hold.arrived.send(());
            let _ = hold.release.await;
        }
    }

    /// Ends every open watch stream, as an API server restart or a load balancer would.
    pub fn close_watches(&self) {
        self.close.send_modify(|generation| *generation += 1);
    }

    pub fn set_watch_delay(&self, delay: Duration) {
        *lock(&self.watch_delay) = delay;
    }

    pub(crate) fn watch_delay(&self) -> Duration {
        *lock(&self.watch_delay)
    }

    pub(crate) fn close_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.close.subscribe()
    }

    /// The status to fail this request with, if a fault matches it.
    pub(crate) fn take(&self, verb: &str, resource: &str) -> Option<u16> {
        let mut pending = lock(&self.pending);
        let position = pending.iter().position(|f| {
            f.count > 0
                && f.verb.as_deref().is_none_or(|v| v == verb)
                && f.resource.as_deref().is_none_or(|r| r == resource)
        })?;
        let fault = &mut pending[position];
        fault.count -= 1;
        let status = fault.status;
        if fault.count == 0 {
            pending.remove(position);
        }
        Some(status)
    }
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// How a dry-run write's verb is counted: `dryrun:update`.
pub(crate) const DRY_RUN_PREFIX: &str = "dryrun:";

/// Requests served, per verb and resource (`resource/subresource` for subresources), and
/// responses sent, per status code.
#[derive(Default)]
pub struct Counters {
    counts: Mutex<BTreeMap<(String, String), u64>>,
    statuses: Mutex<BTreeMap<u16, u64>>,
    open_watches: std::sync::atomic::AtomicUsize,
}

/// Counts one watch as open for as long as it lives.
pub(crate) struct OpenWatch<'a>(&'a Counters);

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Counters {
    pub(crate) fn watch_opened(&self) -> OpenWatch<'_> {
        self.open_watches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenWatch(self)
    }

    /// Watches being served now: a test that restarts the server waits until its client
    /// found each of them gone, so that none resumes on the new server unnoticed.
    pub fn open_watches(&self) -> usize {
        self.open_watches.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn record(&self, verb: &str, resource: &str) {
        *lock(&self.counts).entry((verb.to_owned(), resource.to_owned())).or_default() += 1;
    }

    pub(crate) fn record_status(&self, code: u16) {
        *lock(&self.statuses).entry(code).or_default() += 1;
    }

    /// Responses answered with this HTTP status code, for any request, including the ones
    /// refused before they reached a resource (401, 403): how a test proves that a client
    /// was never denied.
    pub fn status(&self, code: u16) -> u64 {
        lock(&self.statuses).get(&code).copied().unwrap_or(0)
    }

    pub fn get(&self, verb: &str, resource: &str) -> u64 {
        lock(&self.counts).get(&(verb.to_owned(), resource.to_owned())).copied().unwrap_or(0)
    }

    /// Writes (create, update, patch, delete, deletecollection) to a resource; dry-runs,
    /// which write nothing, are not counted (see [`Counters::dry_runs`]).
    pub fn writes(&self, resource: &str) -> u64 {
        WRITE_VERBS.iter().map(|v| self.get(v, resource)).sum()
    }

    /// Writes to a resource made with `dryRun=All`: answered as if made, nothing stored.
    pub fn dry_runs(&self, resource: &str) -> u64 {
        WRITE_VERBS.iter().map(|v| self.get(&format!("{DRY_RUN_PREFIX}{v}"), resource)).sum()
    }

    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.counts).clone()
    }

    pub fn reset(&self) {
        lock(&self.counts).clear();
        lock(&self.statuses).clear();
    }
}

/// A mutex poisoned by a panicking holder still guards consistent data here: every
/// critical section either completes or changes nothing, so recover the guard.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The shared core of one server: state, faults, counters and settings.
pub struct Sim {
    state: Mutex<State>,
    pub config: Config,
    pub faults: Faults,
    pub counters: Counters,
}

impl Sim {
    /// A fresh store, in memory only, whatever `config.data_dir` says.
    pub fn new(config: Config) -> Arc<Self> {
        let mut state = Self::empty_state(&config);
        if config.default_namespaces {
            crate::seed::default_objects(&mut state);
        }
        Self::with_state(state, config)
    }

    /// The store saved in `config.data_dir` if there is one, else a fresh one.
    pub fn open(config: Config) -> std::io::Result<Arc<Self>> {
        let Some(dir) = &config.data_dir else { return Ok(Self::new(config)) };
        let mut state = Self::empty_state(&config);
        if !crate::persist::load(&mut state, dir)? && config.default_namespaces {
            crate::seed::default_objects(&mut state);
        }
        Ok(Self::with_state(state, config))
    }

    fn empty_state(config: &Config) -> State {
        let (changes, _) = broadcast::channel(65_536);
        State::new(config.watch_history, changes)
    }

    fn with_state(state: State, config: Config) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(state),
            config,
            faults: Faults::default(),
            counters: Counters::default(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// A running kubesim: an HTTP server on loopback plus its background controllers.
pub struct Server {
    sim: Arc<Sim>,
    addr: SocketAddr,
    /// Present when serving HTTPS.
    certificates: Option<Arc<crate::tls::Certificates>>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds, starts serving and returns at once; takes milliseconds.
    pub async fn start(config: Config) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.addr).await?;
        let addr = listener.local_addr()?;
        let certificates =
            if config.tls { Some(Arc::new(crate::tls::Certificates::generate(addr.ip())?)) } else { None };
        let sim = Sim::open(config)?;
        let shutdown = CancellationToken::new();
        let app = crate::http::router(sim.clone(), shutdown.clone());
        let http = match &certificates {
            Some(certificates) => {
                let listener = crate::tls::TlsListener::new(listener, certificates, shutdown.clone())?;
                spawn_serving(listener, app, shutdown.clone())
            }
            None => {
                // Watch events are small writes on long-lived connections: without TCP_NODELAY,
                // Nagle's algorithm and delayed ACKs hold some of them back by tens of milliseconds.
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "could not set TCP_NODELAY");
                    }
                });
                spawn_serving(listener, app, shutdown.clone())
            }
        };
        let controllers = tokio::spawn(crate::controllers::run(sim.clone(), shutdown.clone()));
        let mut tasks = vec![http, controllers];
        if let Some(dir) = sim.config.data_dir.clone() {
            tasks.push(tokio::spawn(crate::persist::run(sim.clone(), dir, shutdown.clone())));
        }
        Ok(Self { sim, addr, certificates, shutdown, tasks })
    }

    /// `https://…` when serving TLS ([`Config::tls`]), `http://…` otherwise.
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The PEM of the CA that signed the serving certificate, when serving TLS: what a client
    /// other than the ones [`Server`] builds must trust.
    pub fn ca_pem(&self) -> Option<&str> {
        self.certificates.as_deref().map(|c| c.ca_pem.as_str())
    }

    fn kubeconfig_for_token(&self, user: &str, token: &str) -> kube::config::Kubeconfig {
        crate::kubeconfig::for_token(self.endpoint(&self.url()), user, token)
    }

    fn client_for_token(&self, token: &str) -> kube::Client {
        crate::kubeconfig::client(self.endpoint(&self.url()), token)
    }

    fn endpoint<'a>(&'a self, url: &'a str) -> crate::kubeconfig::Endpoint<'a> {
        let certificates = self.certificates.as_deref();
        crate::kubeconfig::Endpoint {
            url,
            ca_pem: certificates.map(|c| c.ca_pem.as_str()),
            ca_der: certificates.map(|c| c.ca_der.as_slice()),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig for the admin user, which kubectl and kube-rs both accept.
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        self.kubeconfig_for_token(crate::authz::ADMIN_USER, crate::authz::ADMIN_TOKEN)
    }

    /// A kubeconfig that authenticates as `user` in `groups` (for `Authorization::Rbac`).
    pub fn kubeconfig_for_user(&self, user: &str, groups: &[&str]) -> kube::config::Kubeconfig {
        self.kubeconfig_for_token(user, &crate::authz::token_for_user(user, groups))
    }

    pub fn kubeconfig_for_service_account(&self, namespace: &str, name: &str) -> kube::config::Kubeconfig {
        let token = crate::authz::token_for_service_account(namespace, name);
        self.kubeconfig_for_token(&format!("system:serviceaccount:{namespace}:{name}"), &token)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        crate::kubeconfig::write(&self.kubeconfig(), path)
    }

    /// Writes [`Server::kubeconfig_for_user`] to `path`, for kubectl as that user.
    pub fn write_kubeconfig_for_user(&self, path: &Path, user: &str, groups: &[&str]) -> std::io::Result<()> {
        crate::kubeconfig::write(&self.kubeconfig_for_user(user, groups), path)
    }

    /// Writes [`Server::kubeconfig_for_service_account`] to `path`.
    pub fn write_kubeconfig_for_service_account(
        &self,
        path: &Path,
        namespace: &str,
        name: &str,
    ) -> std::io::Result<()> {
        crate::kubeconfig::write(&self.kubeconfig_for_service_account(namespace, name), path)
    }

    /// An admin client.
    pub fn client(&self) -> kube::Client {
        self.client_for_token(crate::authz::ADMIN_TOKEN)
    }

    /// The admin client's configuration, for tests that need to change it.
    pub fn client_config(&self) -> kube::Config {
        crate::kubeconfig::client_config(self.endpoint(&self.url()), crate::authz::ADMIN_TOKEN)
    }

    pub fn client_for_user(&self, user: &str, groups: &[&str]) -> kube::Client {
        self.client_for_token(&crate::authz::token_for_user(user, groups))
    }

    pub fn client_for_service_account(&self, namespace: &str, name: &str) -> kube::Client {
        self.client_for_token(&crate::authz::token_for_service_account(namespace, name))
    }

    pub fn faults(&self) -> &Faults {
        &self.sim.faults
    }

    pub fn counters(&self) -> &Counters {
        &self.sim.counters
    }

    /// Shrinks each resource type's watch history, so that older resource versions answer
    /// `410 Gone`.
    pub fn set_watch_history(&self, changes: usize) {
        self.sim.lock().set_history_limit(changes);
    }

    /// Forgets all watch history, as an etcd compaction would.
    pub fn compact(&self) {
        self.sim.lock().compact();
    }

    /// The number of objects stored, over all resources.
    pub fn object_count(&self) -> usize {
        let state = self.sim.lock();
        state.storages_with_objects().iter().map(|s| state.count(s, None)).sum()
    }

    /// Objects of a core (`v1`) resource whose labels match `label_selector`, counted in
    /// place: for benchmarks that poll large numbers without listing them.
    pub fn count_labelled(&self, resource: &str, label_selector: &str) -> Result<usize, String> {
        self.count_labelled_in("", resource, label_selector)
    }

    /// [`Server::count_labelled`] for a resource of the API group `group`.
    pub fn count_labelled_in(
        &self,
        group: &str,
        resource: &str,
        label_selector: &str,
    ) -> Result<usize, String> {
        let selector = crate::selector::LabelSelector::parse(label_selector)?;
        let storage = crate::registry::StorageKey { group: group.to_owned(), resource: resource.to_owned() };
        let state = self.sim.lock();
        Ok(state
            .scan(&storage, None, None)
            .filter(|(_, stored)| selector.matches(stored.labels.as_ref()))
            .count())
    }

    /// Stops serving, waits for the background tasks to end, and then saves the store if it
    /// has a data directory, so the last write is kept.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        if let Some(dir) = &self.sim.config.data_dir
            && let Err(e) = crate::persist::save(&self.sim, dir)
        {
            tracing::error!(error = %e, dir = %dir.display(), "could not save the store on shutdown");
        }
    }
}

/// Serves `app` on `listener` until `shutdown`, letting open requests finish.
fn spawn_serving<L>(listener: L, app: axum::Router, shutdown: CancellationToken) -> JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        if let Err(e) = served {
            tracing::error!(error = %e, "kubesim HTTP server stopped");
        }
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
