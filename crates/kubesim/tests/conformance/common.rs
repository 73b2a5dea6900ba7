//! What every conformance test stands on: a cluster to talk to (a fresh kubesim, or the real
//! cluster named by `KUBESIM_CONFORMANCE_KUBECONFIG`), names unique to each test, clean-up that
//! runs whether the test passes or fails, the server's version before a feature is used, and
//! waiting on conditions with a deadline.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::json;

/// The environment variable that points the suite at a real cluster.
pub const REAL_CLUSTER_ENV: &str = "KUBESIM_CONFORMANCE_KUBECONFIG";

pub const DEADLINE: Duration = Duration::from_secs(20);

/// How long a namespace may take to go. A real namespace controller deletes the contents and
/// then looks again only after a back-off of several seconds when a finalizer held something.
pub const NAMESPACE_DEADLINE: Duration = Duration::from_secs(120);

/// Finalizers this suite puts on objects start with this; clean-up removes them, so a test
/// that fails while holding an object cannot keep its namespace terminating for ever.
pub const TEST_FINALIZER_PREFIX: &str = "example.com/";

pub struct TestCluster {
    pub client: Client,
    /// What `client` was built from, for clients that differ (see `client_without_retries`)
    /// and for the clean-up, which needs a client of its own.
    config: Config,
    sim: Option<kubesim::Server>,
    created: Created,
}

/// What a test created on a real cluster and must remove again.
#[derive(Default)]
struct Created {
    namespaces: Vec<String>,
    crds: Vec<String>,
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
                Self { client, config, sim: None, created: Created::default() }
            }
            _ => {
                let sim = kubesim::Server::start(config).await.expect("kubesim starts");
                Self {
                    client: sim.client(),
                    config: sim.client_config(),
                    sim: Some(sim),
                    created: Created::default(),
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

    /// Whether the suite runs on kubesim, for the assertions that only hold where a
    /// `kubesim::Config` took effect.
    pub fn is_kubesim(&self) -> bool {
        self.sim.is_some()
    }

    /// Whether the server is at least v1.`minor`, which `feature` needs; if not, prints why
    /// the calling test skips, so a feature the server lacks is neither failed nor passed.
    pub async fn supports(&self, feature: &str, minor: u32) -> bool {
        let info = self.client.apiserver_version().await.expect("the server answers /version");
        if server_minor(&info) >= minor {
            return true;
        }
        eprintln!("skipped: {feature} needs v1.{minor}, server is {}", info.git_version);
        false
    }

    /// A new namespace with a unique name, removed (on a real cluster) when the test ends.
    pub async fn namespace(&mut self, prefix: &str) -> String {
        let name = unique_name(prefix);
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        self.created.namespaces.push(name.clone());
        name
    }

    /// Creates `crd`, removed (on a real cluster) when the test ends, and waits until it is
    /// `Established`: a real API server serves its objects only from then on.
    pub async fn crd(&mut self, crd: &CustomResourceDefinition) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let name = crds.create(&PostParams::default(), crd).await.expect("CRD created").metadata.name;
        let name = name.expect("a created CRD has a name");
        self.created.crds.push(name.clone());
        wait_for(&format!("CRD {name} to be established"), || async {
            let conditions = crds.get(&name).await.ok()?.status?.conditions?;
            conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
        })
        .await;
    }
}

/// `prefix` and a random suffix: a name no other test, and no earlier run, uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// The minor version as a number; some distributions write it as "20+".
fn server_minor(info: &k8s_openapi::apimachinery::pkg::version::Info) -> u32 {
    let digits: String = info.minor.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

impl Drop for TestCluster {
    /// Removes what the test created on a real cluster, whether it passed or failed; kubesim
    /// is simply dropped. The test's runtime stops as soon as its body returns or panics and
    /// would cancel a spawned task, so the clean-up runs to the end on a runtime and a
    /// client of its own, on a thread of its own.
    fn drop(&mut self) {
        let created = std::mem::take(&mut self.created);
        if self.sim.is_some() || (created.namespaces.is_empty() && created.crds.is_empty()) {
            return;
        }
        let config = self.config.clone();
        let outcome = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(clean_up(config, created))
        })
        .join();
        let leftover = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => "the clean-up panicked".to_owned(),
        };
        // A second panic while the test is already unwinding would abort the whole run.
        if std::thread::panicking() {
            eprintln!("clean-up failed: {leftover}");
        } else {
            panic!("clean-up failed: {leftover}");
        }
    }
}

/// Deletes the test's CRDs (their objects go with them) and namespaces, and waits until
/// they are gone, so a later run finds nothing left from this one.
async fn clean_up(config: Config, created: Created) -> anyhow::Result<()> {
    let client = Client::try_from(config)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in &created.crds {
        delete_if_present(&crds, name).await?;
    }
    for name in &created.namespaces {
        release_test_finalizers::<ConfigMap>(&client, name).await?;
        release_test_finalizers::<Secret>(&client, name).await?;
        delete_if_present(&namespaces, name).await?;
    }
    let deadline = tokio::time::Instant::now() + NAMESPACE_DEADLINE;
    loop {
        let mut remaining = Vec::new();
        for name in &created.crds {
            if crds.get_opt(name).await?.is_some() {
                remaining.push(format!("CRD {name}"));
            }
        }
        for name in &created.namespaces {
            if namespaces.get_opt(name).await?.is_some() {
                remaining.push(format!("namespace {name}"));
            }
        }
        if remaining.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("still there after {NAMESPACE_DEADLINE:?}: {}", remaining.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn delete_if_present<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Drops the suite's own finalizers from the `K`s in `namespace`, which a failed test may
/// have left holding them.
async fn release_test_finalizers<K>(client: &Client, namespace: &str) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let objects = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for object in objects {
        let meta = object.meta();
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let kept: Vec<&String> =
            finalizers.iter().filter(|f| !f.starts_with(TEST_FINALIZER_PREFIX)).collect();
        if kept.len() == finalizers.len() {
            continue;
        }
        let name = meta.name.clone().unwrap_or_default();
        let patch = Patch::Merge(json!({"metadata": {"finalizers": kept}}));
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Polls `check` until it returns `Some`, or panics naming `what` after the deadline.
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_within(DEADLINE, what, check).await
}

/// `wait_for` with a deadline of its own, for what a real cluster takes longer to do.
pub async fn wait_for_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `pod`, retrying while ServiceAccount admission refuses it. A real cluster admits
/// pods into a new namespace only once kube-controller-manager has made its `default`
/// ServiceAccount (403, "error looking up service account") and, before v1.22, that
/// account's token Secret (500 ServerTimeout, "No API token found for service account").
pub async fn create_pod_when_admitted(api: &Api<Pod>, pod: &Pod) -> Pod {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match api.create(&PostParams::default(), pod).await {
            Ok(created) => return created,
            Err(kube::Error::Api(status))
                if refused_for_service_account(&status) && tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("pod not created: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn refused_for_service_account(status: &kube::core::Status) -> bool {
    let forbidden = status.code == 403 && status.message.contains("error looking up service account");
    let no_token = status.reason == "ServerTimeout" && status.message.contains("service account");
    forbidden || no_token
}

/// The `Status` of a failed call, for asserting on code and reason.
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}
