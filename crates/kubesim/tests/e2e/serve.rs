//! The `kubesim serve` binary: prints its URL, writes a kubeconfig kube-rs and kubectl both
//! accept, and exits 0 on SIGTERM; and serving HTTPS, from the binary and the library.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};

#[tokio::test]
async fn serve_writes_a_usable_kubeconfig_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["serve", "--port", "0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("kubesim serving at http://127.0.0.1:"), "{first}");
    let written = lines.next().unwrap().unwrap();
    assert!(written.starts_with("kubeconfig written to"), "{written}");

    let config = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let namespaces = Api::<Namespace>::all(client).list(&ListParams::default()).await.unwrap();
    assert!(namespaces.items.iter().any(|n| n.metadata.name.as_deref() == Some("default")));

    if which_kubectl() {
        let out = Command::new("kubectl")
            .args(["get", "namespace", "default", "-o", "jsonpath={.status.phase}"])
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "Active",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("kubectl not on PATH: the kubectl half of this test did not run");
    }

    let status = stop(&mut child);
    assert!(status.success(), "exit status {status}");
}

/// Sends SIGTERM and waits, at most 10s, for the process to end.
fn stop(child: &mut Child) -> ExitStatus {
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "kubesim did not stop within 10s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Whether the kubeconfig's user may list ConfigMaps in `default`, by its own account.
async fn may_list_configmaps(client: kube::Client) -> bool {
    let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({"spec": {
        "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "configmaps"}
    }}))
    .unwrap();
    let created =
        Api::<SelfSubjectAccessReview>::all(client).create(&PostParams::default(), &review).await.unwrap();
    created.status.unwrap().allowed
}

#[tokio::test]
async fn serve_with_rbac_serves_https_and_writes_a_kubeconfig_per_identity() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args(["serve", "--authorization", "rbac", "--user", "alice", "--service-account", "team-a/builder"])
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("kubesim serving at https://127.0.0.1:"), "{first}");
    let written: Vec<String> = (0..3).map(|_| lines.next().unwrap().unwrap()).collect();
    for file in ["admin.kubeconfig", "alice.kubeconfig", "team-a-builder.kubeconfig"] {
        let path = dir.path().join(file);
        assert!(written.contains(&format!("kubeconfig written to {}", path.display())), "{written:?}");
    }

    assert!(may_list_configmaps(client_from(&dir.path().join("admin.kubeconfig")).await).await);
    assert!(!may_list_configmaps(client_from(&dir.path().join("alice.kubeconfig")).await).await);
    assert!(!may_list_configmaps(client_from(&dir.path().join("team-a-builder.kubeconfig")).await).await);

    let status = stop(&mut child);
    assert!(status.success(), "exit status {status}");
}

/// `kubesim serve` with `args`, expected to refuse them: its exit code and stderr.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kubesim")).arg("serve").args(args).output().unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn bad_identity_flags_are_refused_naming_the_flag() {
    let (code, stderr) = refused(&["--service-account", "builder", "--kubeconfig-dir", "/nonexistent"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--service-account") && stderr.contains("NAMESPACE/NAME"), "{stderr}");

    let (code, stderr) = refused(&["--user", "alice"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--kubeconfig-dir"), "{stderr}");

    let (code, stderr) =
        refused(&["--user", "a-b", "--service-account", "a/b", "--user", "a-b", "--kubeconfig-dir", "/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("a-b.kubeconfig"), "{stderr}");

    let (code, stderr) = refused(&["--tls=maybe"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--tls"), "{stderr}");
}

#[tokio::test]
async fn a_tls_server_is_reached_by_its_own_clients_only_over_https() {
    let sim =
        kubesim::Server::start(kubesim::Config { tls: true, ..kubesim::Config::default() }).await.unwrap();
    assert!(sim.url().starts_with("https://"), "{}", sim.url());
    let namespaces = Api::<Namespace>::all(sim.client()).list(&ListParams::default()).await.unwrap();
    assert!(namespaces.items.iter().any(|n| n.metadata.name.as_deref() == Some("default")));

    // A client that does not trust kubesim's CA is refused at the handshake.
    let untrusting = kube::Config::new(sim.url().parse().unwrap());
    let reached = match kube::Client::try_from(untrusting) {
        Ok(client) => Api::<Namespace>::all(client).list(&ListParams::default()).await.is_ok(),
        // No system roots to build a verifier from: no way to reach the server either.
        Err(_) => false,
    };
    assert!(!reached, "a client without kubesim's CA connected");

    // Plain HTTP to the TLS port gets no API answer.
    let plain = kube::Config::new(format!("http://{}", sim.addr()).parse().unwrap());
    let result =
        Api::<Namespace>::all(kube::Client::try_from(plain).unwrap()).list(&ListParams::default()).await;
    assert!(result.is_err(), "plain HTTP was answered");
    // The admin's kubeconfig carries the CA, so kubectl and kube-rs trust the server.
    let cluster = &sim.kubeconfig().clusters[0];
    assert!(cluster.cluster.as_ref().unwrap().certificate_authority_data.is_some());
}

fn which_kubectl() -> bool {
    Command::new("kubectl").arg("version").arg("--client").output().is_ok_and(|o| o.status.success())
}

/// `Counters::open_watches` follows the watches being served: one while a client watches,
/// none once it hung up (tests that restart the server wait on it).
#[tokio::test]
async fn open_watches_count_the_watches_being_served() {
    use futures::StreamExt;
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(sim.client());
    assert_eq!(sim.counters().open_watches(), 0);
    let stream = namespaces.watch(&kube::api::WatchParams::default(), "0").await.unwrap().boxed();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.counters().open_watches() != 1 {
        assert!(Instant::now() < deadline, "the watch was never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stream);
    while sim.counters().open_watches() != 0 {
        assert!(Instant::now() < deadline, "the closed watch is still counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
