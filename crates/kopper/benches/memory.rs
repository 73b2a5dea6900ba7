//! kopper's resident memory on a large cluster: 2,000 namespaces and 20,000 pods (half of
//! them asking for the pod-name label) in kubesim, with the pod labeler and NamespaceAccess
//! running, next to the baseline of the same binary on an empty cluster in the same run.
//!
//! Run: `cargo bench -p kopper --bench memory` (prints figures; asserts nothing).

mod support;

use support::wait_until;

use support::memory_kib;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAMESPACES: usize = 2_000;
const PODS_PER_NAMESPACE: usize = 10;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap()
}

fn start_kopper(kubeconfig: &Path, admin_port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--leader-elect", "false", "--controllers", "namespace-access,pod-labeler"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--admin-addr", &format!("127.0.0.1:{admin_port}"), "--log-level", "warn"])
        .stdout(Stdio::null())
        .spawn()
        .expect("the kopper binary starts")
}

async fn ready(admin_port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", admin_port)).await else {
        return false;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = "GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response.starts_with("HTTP/1.1 200")
}

async fn populate(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..NAMESPACES {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": format!("team-{n}")}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
    }
    let tasks: Vec<_> = (0..8)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in (worker..NAMESPACES).step_by(8) {
                    let pods: Api<Pod> = Api::namespaced(client.clone(), &format!("team-{n}"));
                    for p in 0..PODS_PER_NAMESPACE {
                        let annotations = if p % 2 == 0 {
                            json!({"kopper.dev/add-pod-name-label": "true"})
                        } else {
                            json!({})
                        };
                        let pod: Pod = serde_json::from_value(json!({
                            "metadata": {"name": format!("pod-{p}"), "annotations": annotations},
                            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
                        }))
                        .unwrap();
                        pods.create(&PostParams::default(), &pod).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

async fn install_policy(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kopper::crds::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let sample = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config/samples/namespaceaccess-group-per-namespace.yaml"),
    )
    .unwrap();
    let policy: kube::api::DynamicObject = kopper::samples::of_kind(&sample, "NamespaceAccess").unwrap();
    let gvk = kube::api::GroupVersionKind::gvk("kopper.dev", "v1alpha1", "NamespaceAccess");
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(&gvk, "namespaceaccesses"),
    );
    api.create(&PostParams::default(), &policy).await.unwrap();
}

#[tokio::main]
async fn main() {
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let client = sim.client();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    install_policy(&client).await;

    let port = free_port();
    let mut idle = start_kopper(&kubeconfig, port);
    wait_until("kopper ready on an empty cluster", Duration::from_secs(60), || ready(port)).await;
    let (idle_rss, _) = memory_kib(&format!("/proc/{}/status", idle.id()));
    idle.kill().ok();
    idle.wait().ok();

    let started = Instant::now();
    populate(&client).await;
    let populated = started.elapsed();

    let port = free_port();
    let started = Instant::now();
    let mut loaded = start_kopper(&kubeconfig, port);
    let pods: Api<Pod> = Api::all(client.clone());
    let bindings: Api<RoleBinding> = Api::all(client.clone());
    let labelled = ListParams::default().labels("kopper.dev/pod-name");
    let managed = ListParams::default().labels("app.kubernetes.io/managed-by=kopper");
    wait_until("every asking pod labelled and every namespace bound", Duration::from_secs(600), || async {
        let pods = pods.list_metadata(&labelled).await.map(|l| l.items.len()).unwrap_or(0);
        let bindings = bindings.list_metadata(&managed).await.map(|l| l.items.len()).unwrap_or(0);
        pods >= NAMESPACES * PODS_PER_NAMESPACE / 2 && bindings >= NAMESPACES
    })
    .await;
    let converged = started.elapsed();
    let (rss, peak) = memory_kib(&format!("/proc/{}/status", loaded.id()));
    loaded.kill().ok();
    loaded.wait().ok();

    let objects = NAMESPACES * (PODS_PER_NAMESPACE + 1);
    println!(
        "kopper memory ({NAMESPACES} namespaces, {} pods; pod labeler + NamespaceAccess)",
        NAMESPACES * PODS_PER_NAMESPACE
    );
    println!("  cluster populated in:         {:>8.1} s", populated.as_secs_f64());
    println!("  kopper converged in:          {:>8.1} s", converged.as_secs_f64());
    println!("  resident, empty cluster:      {:>8.1} MiB   (baseline)", idle_rss as f64 / 1024.0);
    println!(
        "  resident, after convergence:  {:>8.1} MiB   ({:.2}x the baseline)",
        rss as f64 / 1024.0,
        rss as f64 / idle_rss.max(1) as f64
    );
    println!("  peak resident:                {:>8.1} MiB", peak as f64 / 1024.0);
    println!(
        "  per watched object:           {:>8.0} bytes above the baseline",
        (rss.saturating_sub(idle_rss) * 1024) as f64 / objects as f64
    );
    sim.shutdown().await;
}
