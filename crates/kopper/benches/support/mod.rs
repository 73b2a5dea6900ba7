//! What the benchmarks share.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// A kubesim in this process with kopper's CRDs, and a kubeconfig for kopper as a child
/// process. Each benchmark adds its own steps in its own `impl Cluster`.
#[allow(dead_code)] // not every bench runs a cluster
pub struct Cluster {
    pub sim: kubesim::Server,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

#[allow(dead_code)]
impl Cluster {
    pub async fn start() -> Self {
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
}

/// (VmRSS, VmHWM) in KiB from a `/proc/*/status` file (`/proc/self/status` or a child's).
pub fn memory_kib(status_path: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(status_path).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Established TCP connections of process `pid` whose peer listens on `port`: the process's
/// socket inodes (links `socket:[N]` in `/proc/<pid>/fd`) matched against the rows of
/// `/proc/<pid>/net/tcp{,6}`, which list every socket of the network namespace, the bench's
/// own (such as kubesim's end of the same connections) included.
#[allow(dead_code)] // not every bench counts connections
pub fn tcp_connections_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| Some(target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned()))
        .collect();
    let peer_port = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|row| {
            // sl local_address rem_address st ... inode: state 01 is ESTABLISHED.
            let columns: Vec<&str> = row.split_whitespace().collect();
            columns.len() > 9
                && columns[2].ends_with(&peer_port)
                && columns[3] == "01"
                && inodes.contains(columns[9])
        })
        .count()
}

/// The raw HTTP response of kopper's admin server on `port` for `path` (`/readyz`,
/// `/metrics`), or `None` if it does not answer.
#[allow(dead_code)] // not every bench reads the admin server
pub async fn admin_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    Some(response)
}

/// Waits until `check` holds, asking every 100 ms; panics naming `what` after `limit`.
#[allow(dead_code)] // not every bench waits this way
pub async fn wait_until<F, Fut>(what: &str, limit: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + limit;
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
