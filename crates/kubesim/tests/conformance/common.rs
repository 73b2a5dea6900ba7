//! What every conformance test stands on: a cluster to talk to (a fresh kubesim, or the real
//! cluster named by `KUBESIM_CONFORMANCE_KUBECONFIG`), unique namespaces, and waiting on
//! conditions with a deadline.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Config};
use serde_json::json;

/// The environment variable that points the suite at a real cluster.
pub const REAL_CLUSTER_ENV: &str = "KUBESIM_CONFORMANCE_KUBECONFIG";

pub const DEADLINE: Duration = Duration::from_secs(20);

pub struct TestCluster {
    pub client: Client,
    /// What `client` was built from, for clients that differ (see `client_without_retries`).
    config: Config,
    sim: Option<kubesim::Server>,
    namespaces: Vec<String>,
}

impl TestCluster {
    pub async fn new() -> Self {
        Self::with_config(kubesim::Config::default()).await
    }

    /// A cluster; `config` applies only when the suite runs on kubesim.
    pub async fn with_config(config: kubesim::Config) -> Self {
        match std::env::var(REAL_CLUSTER_ENV) {
            Ok(path) if !path.is_empty() => {
                let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("readable kubeconfig");
                let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .expect("usable kubeconfig");
                let client = Client::try_from(config.clone()).expect("client");
                Self { client, config, sim: None, namespaces: Vec::new() }
            }
            _ => {
                let sim = kubesim::Server::start(config).await.expect("kubesim starts");
                Self {
                    client: sim.client(),
                    config: sim.client_config(),
                    sim: Some(sim),
                    namespaces: Vec::new(),
                }
            }
        }
    }

    /// A client that reports 429, 503 and 504 at once instead of retrying them, for tests
    /// that assert on those answers.
    pub fn client_without_retries(&self) -> Client {
        let mut config = self.config.clone();
        config.default_retry = false;
        Client::try_from(config).expect("client")
    }

    /// The admin client acting as `user` (kubectl's `--as`): authorized as that user, in
    /// `system:authenticated` only.
    pub fn client_impersonating(&self, user: &str) -> Client {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        Client::try_from(config).expect("client")
    }

    /// kubesim's own hooks (faults, counters, history), or `None` on a real cluster: tests
    /// that need them say so and return.
    pub fn sim(&self) -> Option<&kubesim::Server> {
        if self.sim.is_none() {
            eprintln!("skipped on a real cluster: needs kubesim's own hooks");
        }
        self.sim.as_ref()
    }

    /// A new namespace with a unique name, removed (on a real cluster) when the test ends.
    pub async fn namespace(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        self.namespaces.push(name.clone());
        name
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.sim.is_some() || self.namespaces.is_empty() {
            return;
        }
        let client = self.client.clone();
        let names = std::mem::take(&mut self.namespaces);
        // Best effort clean-up on a real cluster; kubesim is simply dropped.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                for name in names {
                    let _ =
                        Api::<Namespace>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
                }
            });
        }
    }
}

/// Polls `check` until it returns `Some`, or panics naming `what` after the deadline.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {DEADLINE:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `Status` of a failed call, for asserting on code and reason.
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}
