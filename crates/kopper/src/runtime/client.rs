//! Connecting to the API server the way kubectl does, with errors that say what to fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use tracing::Instrument as _;

use super::api_requests::ApiRequestsLayer;
use super::fence::{FenceLayer, WriteFence};
use super::metrics::Metrics;

/// Name of the span the start-up check of the API server runs in. Telemetry drops kube's own
/// log of that request failing, since [`ConnectError::Unreachable`] reports the same failure.
pub const PROBE_SPAN: &str = "api_server_probe";

/// Why kopper could not reach a cluster. Each message is one line that names the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot read kubeconfig {path}: {cause} (check --kubeconfig / KOPPER_KUBECONFIG)")]
    ReadKubeconfig { path: PathBuf, cause: KubeconfigError },
    #[error("kubeconfig is not usable: {0} (check --context / KOPPER_CONTEXT and KUBECONFIG)")]
    Kubeconfig(KubeconfigError),
    #[error(
        "no cluster found: no --kubeconfig, KUBECONFIG or ~/.kube/config, and not running in a pod \
         (to try kopper without a cluster, run `kopper demo`)"
    )]
    NoCluster,
    #[error("cannot build a client: {0}")]
    Client(kube::Error),
    #[error(
        "cannot reach the Kubernetes API server at {url}: {cause} (is the cluster running? check \
         --kubeconfig and --context, or run `kopper demo` to try kopper without a cluster)"
    )]
    Unreachable { url: String, cause: kube::Error },
    #[error(
        "the Kubernetes API server at {url} took the connection but did not answer within {}s (is \
         something in between holding it? check --kubeconfig and --context)",
        waited.as_secs()
    )]
    NoAnswer { url: String, waited: std::time::Duration },
}

impl ConnectError {
    /// Whether the API server (or the way to it) failed, rather than the configuration:
    /// worth trying again.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::NoAnswer { .. })
    }
}

/// How long the start-up check waits for the API server's answer: kube's client sets no
/// read timeout, and an API server that takes the connection and never answers would
/// otherwise hold `kopper run` for good.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The longest a request waits on a connection with nothing to read. kube sets none, so a
/// request on a connection to an API server that died without a reset (a node gone behind
/// a TCP load balancer) would wait until the kernel gives the connection up, about 15
/// minutes. Longer than the 290 s after which the API server ends kube's watches, so a
/// quiet watch is never cut by it; counted from the request (see
/// `reset_reader_on_write`), not from when its pooled connection went idle.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(330);

/// Builds a client from, in order: `--kubeconfig`, `KUBECONFIG`, `~/.kube/config`, the pod's
/// service account; then checks that the API server answers, so a wrong address fails at
/// start-up rather than as a stream of watch errors. With `metrics`, every request is
/// counted in `kopper_api_requests_total`; every write passes `fence` (see
/// [`super::fence`]).
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    metrics: Option<Arc<Metrics>>,
    fence: Arc<WriteFence>,
) -> Result<kube::Client, ConnectError> {
    let mut config = load_config(kubeconfig, context).await?;
    config.read_timeout = Some(READ_TIMEOUT);
    config.reset_reader_on_write = true;
    if fence.fences() {
        // kube's retry layer sits inside the fence layer: a write it retried (after a 429 or
        // 503) would reach the API server without being checked again. With fencing, a
        // failed write fails, and the controller's requeue retries it through the fence.
        config.default_retry = false;
    }
    let url = config.cluster_url.to_string();
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ConnectError::Client)?;
    let builder = builder.with_layer(&FenceLayer::new(fence));
    let client = match metrics {
        Some(metrics) => builder.with_layer(&ApiRequestsLayer::new(metrics)).build(),
        None => builder.build(),
    };
    // ERROR level, so the span exists (and telemetry can recognise the probe) at any --log-level
    // that logs errors; with `kopper=off` kube's line would show again.
    let probe = tracing::error_span!(PROBE_SPAN, %url);
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version().instrument(probe)).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(cause)) => Err(ConnectError::Unreachable { url, cause }),
        Err(_elapsed) => Err(ConnectError::NoAnswer { url, waited: PROBE_TIMEOUT }),
    }
}

async fn load_config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<kube::Config, ConnectError> {
    let options = KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
    if let Some(path) = kubeconfig {
        let file = Kubeconfig::read_from(path)
            .map_err(|cause| ConnectError::ReadKubeconfig { path: path.to_owned(), cause })?;
        return kube::Config::from_custom_kubeconfig(file, &options).await.map_err(ConnectError::Kubeconfig);
    }
    if std::env::var_os("KUBECONFIG").is_some_and(|paths| !paths.is_empty()) || default_kubeconfig_exists() {
        return kube::Config::from_kubeconfig(&options).await.map_err(ConnectError::Kubeconfig);
    }
    kube::Config::incluster().map_err(|_| ConnectError::NoCluster)
}

fn default_kubeconfig_exists() -> bool {
    std::env::var_os("HOME").is_some_and(|home| Path::new(&home).join(".kube/config").exists())
}

/// Whether this process runs in a pod, judged as kube's in-cluster config does.
pub fn running_in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
}

/// The pod's own namespace when running in a cluster.
pub fn pod_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|namespace| namespace.trim().to_owned())
        .filter(|namespace| !namespace.is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::runtime::fence::WriteFence;

    /// The fence on a real client (built as `kopper run` builds it) against kubesim: a closed
    /// fence keeps every write from reaching the API server, while reads and the Lease pass.
    #[tokio::test]
    async fn a_client_behind_a_closed_fence_reaches_the_api_server_only_to_read_and_renew() {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, PostParams};

        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        let fence = WriteFence::closed();
        let client = connect(Some(&kubeconfig), None, None, fence.clone()).await.unwrap();
        let config_maps = Api::<ConfigMap>::namespaced(client.clone(), "default");
        let config_map: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "c"}})).unwrap();

        let refused = config_maps.create(&PostParams::default(), &config_map).await;
        assert!(refused.is_err(), "a write past a closed fence fails");
        assert_eq!(sim.counters().writes("configmaps"), 0, "and never reaches the API server");
        assert!(config_maps.get_opt("c").await.unwrap().is_none(), "reads pass");
        let lease: Lease = serde_json::from_value(serde_json::json!({"metadata": {"name": "l"}})).unwrap();
        let leases = Api::<Lease>::namespaced(client.clone(), "default");
        leases
            .create(&PostParams::default(), &lease)
            .await
            .expect("the Lease is renewed through a closed fence");

        fence.open_until(Instant::now() + Duration::from_secs(10));
        config_maps
            .create(&PostParams::default(), &config_map)
            .await
            .expect("an open fence lets writes through");
        assert_eq!(sim.counters().writes("configmaps"), 1);
    }
}
