//! moto in server mode: a real S3 and IAM API on loopback for the Bucket tests, installed
//! by scripts/setup-moto.sh.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU16, Ordering};

use k8s_openapi::api::core::v1::Secret;
use kopper::controllers::bucket::aws::{AwsProvider, AwsSettings, StaticCredentials};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::eventually;

pub const REGION: &str = "us-east-1";

/// A moto server on a free loopback port, killed on drop.
pub struct Moto {
    child: std::process::Child,
    pub endpoint: String,
}

impl Moto {
    pub async fn start() -> Option<Self> {
        let server =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/moto/bin/moto_server");
        if !server.exists() {
            let message = "moto is not installed: run scripts/setup-moto.sh";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("skipped: {message}");
            return None;
        }
        let port = next_port();
        let mut child = std::process::Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let endpoint = format!("http://127.0.0.1:{port}");
        let address = format!("127.0.0.1:{port}");
        eventually("moto to listen", || async {
            tokio::net::TcpStream::connect(&address).await.ok().map(drop)
        })
        .await;
        assert!(child.try_wait().unwrap().is_none(), "moto exited: port {port} was taken meanwhile");
        Some(Self { child, endpoint })
    }

    /// From now on moto enforces IAM: after the next `open_calls` requests, every request must
    /// be signed by an identity of moto's IAM whose policies allow it (moto's
    /// `INITIAL_NO_AUTH_ACTION_COUNT`, reset through its `/moto-api/reset-auth`). The admin
    /// credentials kopper and tests use exist in no IAM, so nothing else works after that.
    pub async fn enforce_iam_after(&self, open_calls: u32) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = self.endpoint.trim_start_matches("http://");
        let body = open_calls.to_string();
        let request = format!(
            "POST /moto-api/reset-auth HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"), "{response}");
    }

    /// A provider as the test's own S3 and IAM client (moto accepts any credentials).
    pub async fn client(&self) -> AwsProvider {
        client_of(&self.endpoint).await
    }
}

/// A provider as the test's own S3 and IAM client of `endpoint` (moto accepts any
/// credentials).
pub async fn client_of(endpoint: &str) -> AwsProvider {
    AwsProvider::new(AwsSettings {
        region: REGION.into(),
        endpoint: Some(endpoint.to_owned()),
        iam_endpoint: None,
        force_path_style: true,
        credentials: Some(StaticCredentials {
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
            session_token: None,
        }),
        delete_batch: None,
    })
    .await
}

/// A port for a moto server or fault proxy of this process. A port the OS handed out and took back (bind to
/// port 0) can be handed to another test's server in the second moto takes to start, and the
/// test would then talk to that server, and lose it when that test ends. So the ports come
/// from below Linux's ephemeral range (32768 and up, where the OS's picks land), one range
/// of 200 per process, each used once; one another process holds is skipped.
fn next_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + u16::try_from(std::process::id() % 60).unwrap() * 200;
    (0..200)
        .map(|_| base + NEXT.fetch_add(1, Ordering::Relaxed) % 200)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port for moto")
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `kopper run` flags that point the Bucket controller at `endpoint` (moto, or a
/// [`FaultProxy`] in front of it), with kopper's own credentials in the Secret
/// kopper-system/s3-admin (see [`create_credentials_secret`]).
pub fn flags(endpoint: &str, cluster_id: &str) -> Vec<String> {
    [
        "--cluster-id",
        cluster_id,
        "--s3-region",
        REGION,
        "--s3-endpoint",
        endpoint,
        "--s3-force-path-style",
        "--s3-credentials-secret",
        "kopper-system/s3-admin",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// kopper's own S3 credentials (moto takes any), in the namespace kopper-system.
pub async fn create_credentials_secret(client: &kube::Client) {
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-admin", "namespace": "kopper-system"},
        "stringData": {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "kopper-system")
        .create(&PostParams::default(), &credentials)
        .await
        .unwrap();
}

/// scripts/fault_proxy.py in front of a server: names the S3 or IAM operation of every call,
/// logs it, and fails the calls a test asks it to fail. Killed on drop.
pub struct FaultProxy {
    child: std::process::Child,
    address: String,
    pub endpoint: String,
}

/// One call the proxy saw.
#[derive(Clone, Debug, serde::Deserialize, PartialEq, Eq)]
pub struct Call {
    pub service: String,
    pub operation: String,
    pub status: u16,
    /// The `UserName` an IAM call names.
    #[serde(default)]
    pub user: Option<String>,
}

impl Call {
    /// Whether the call changes something (every S3 and IAM operation that does not read).
    pub fn is_write(&self) -> bool {
        !["Get", "List", "Head"].iter().any(|read| self.operation.starts_with(read))
    }
}

impl FaultProxy {
    pub async fn start(upstream: &str) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let python = root.join("target/tools/moto/bin/python");
        let port = next_port();
        let mut child = std::process::Command::new(python)
            .arg(root.join("scripts/fault_proxy.py"))
            .args(["--upstream", upstream, "--port", &port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start scripts/fault_proxy.py with the moto virtual environment's python");
        let address = format!("127.0.0.1:{port}");
        eventually("the fault proxy to listen", || async {
            tokio::net::TcpStream::connect(&address).await.ok().map(drop)
        })
        .await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "the fault proxy exited: port {port} was taken meanwhile"
        );
        Self { child, endpoint: format!("http://{address}"), address }
    }

    /// Replaces the proxy's rules; see scripts/fault_proxy.py for their fields.
    pub async fn set_faults(&self, rules: serde_json::Value) {
        let (status, _) = self.request("PUT", "/__proxy/faults", &rules.to_string()).await;
        assert_eq!(status, 204, "the fault proxy refused the rules");
    }

    /// The rules with the times each has left.
    pub async fn faults(&self) -> serde_json::Value {
        let (_, body) = self.request("GET", "/__proxy/faults", "").await;
        serde_json::from_str(&body).unwrap()
    }

    /// Every call since the last [`FaultProxy::reset_calls`], in order.
    pub async fn calls(&self) -> Vec<Call> {
        let (_, body) = self.request("GET", "/__proxy/calls", "").await;
        serde_json::from_str(&body).unwrap()
    }

    pub async fn reset_calls(&self) {
        self.request("DELETE", "/__proxy/calls", "").await;
    }

    async fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&self.address).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
        (status, body)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
