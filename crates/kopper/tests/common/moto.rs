//! moto in server mode: a real S3 and IAM API on loopback for the Bucket tests, installed
//! by scripts/setup-moto.sh.

use std::path::PathBuf;
use std::process::Stdio;

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
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(server)
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
        Some(Self { child, endpoint })
    }

    /// A provider as the test's own S3 and IAM client (moto accepts any credentials).
    pub async fn client(&self) -> AwsProvider {
        AwsProvider::new(AwsSettings {
            region: REGION.into(),
            endpoint: Some(self.endpoint.clone()),
            iam_endpoint: None,
            force_path_style: true,
            credentials: Some(StaticCredentials {
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
                session_token: None,
            }),
        })
        .await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `kopper run` flags that point the Bucket controller at `moto`, with kopper's own
/// credentials in the Secret kopper-system/s3-admin (see [`create_credentials_secret`]).
pub fn flags(moto: &Moto, cluster_id: &str) -> Vec<String> {
    [
        "--cluster-id",
        cluster_id,
        "--s3-region",
        REGION,
        "--s3-endpoint",
        &moto.endpoint,
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
