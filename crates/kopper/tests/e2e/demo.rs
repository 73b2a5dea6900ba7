//! `kopper demo` works with no cluster at all: it shows what kopper did, leaves a usable
//! kubeconfig, and stops cleanly on Ctrl-C.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use crate::common::{DEADLINE, free_admin_addr};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// Starts `kopper demo` on `samples` and returns the running child and everything it
/// printed up to its "Ctrl-C" line.
async fn demo_summary(samples: &Path, kubeconfig: &Path) -> (Child, String) {
    demo_summary_with(samples, kubeconfig, &[]).await
}

/// [`demo_summary`] with more `kopper demo` flags.
async fn demo_summary_with(samples: &Path, kubeconfig: &Path, flags: &[String]) -> (Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["demo", "--log-level", "error", "--admin-addr", &free_admin_addr()])
        .args(flags)
        .env("AWS_ACCESS_KEY_ID", "demo")
        .env("AWS_SECRET_ACCESS_KEY", "demo")
        .arg("--samples")
        .arg(samples)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = read_summary(&mut child).await;
    (child, output)
}

/// Everything the demo prints up to its "Ctrl-C" line.
async fn read_summary(child: &mut Child) -> String {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut output = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains("Ctrl-C");
            output.push(line);
            if done {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the demo printed no summary: {output:#?}"));
    output.join("\n")
}

/// Sends Ctrl-C and expects a clean exit.
async fn interrupt(mut child: Child) {
    let pid = child.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-INT", &pid]).status().await.unwrap().success());
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn demo_applies_samples_shows_the_results_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("samples");
    std::fs::create_dir(&samples).unwrap();
    let sample = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team-x\ndata:\n  a: b\n\
                  ---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-x\n\
                  ---\napiVersion: example.dev/v1\nkind: Unknown\nmetadata:\n  name: nothing\n";
    std::fs::write(samples.join("sample.yaml"), sample).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (child, output) = demo_summary(&samples, &kubeconfig).await;
    assert!(output.contains("ConfigMap team-x/settings"), "{output}");
    assert!(output.contains("skipped sample Unknown nothing"), "{output}");
    assert!(output.contains("team-a/hello  kopper.dev/pod-name=hello"), "{output}");
    assert!(output.contains(&kubeconfig.display().to_string()), "{output}");
    assert!(kube::config::Kubeconfig::read_from(&kubeconfig).is_ok());

    interrupt(child).await;
}

/// The README's first command, with the committed samples: every seed's behaviour shows up.
#[tokio::test]
async fn demo_with_the_committed_samples_shows_every_seed_at_work() {
    let dir = tempfile::tempdir().unwrap();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/samples");
    let (child, output) = demo_summary(&samples, &dir.path().join("kubeconfig")).await;
    assert!(!output.contains("skipped sample"), "{output}");
    assert!(
        output.contains("team-a/ad-kubernetes-team-a -> ClusterRole edit for Group ad-kubernetes-team-a"),
        "seed 000: {output}"
    );
    assert!(output.contains("team-a/hello  kopper.dev/pod-name=hello"), "seed 001: {output}");
    assert!(
        output.contains("destination-namespace/configmap-name <- source-namespace/configmap-name"),
        "seed 002: {output}"
    );
    assert!(output.contains("team-b/shared-settings <- default/shared-settings"), "seed 003: {output}");
    assert!(output.contains("Secret copies kopper keeps:"), "{output}");
    assert!(output.contains("team-a/platform-ca <- default/platform-ca"), "the CA sample's copies: {output}");
    assert!(output.contains("payments/shop-ca <- shop/shop-ca"), "the SecretSync sample's copy: {output}");
    assert!(!output.contains("BEGIN"), "the summary never shows a Secret's data: {output}");
    assert!(output.contains("default/s3-sample  not ready: ProviderNotConfigured"), "seed 004: {output}");
    assert!(output.contains("moto_server -p 5000"), "says how to get an S3 endpoint: {output}");
    interrupt(child).await;
}

/// Given an S3 endpoint, the demo shows seed 004's Bucket end to end.
#[tokio::test]
async fn demo_with_an_s3_endpoint_shows_the_bucket_sample_ready() {
    let Some(moto) = common::moto::Moto::start().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/samples");
    let flags: Vec<String> =
        ["--s3-region", "us-east-1", "--s3-endpoint", &moto.endpoint, "--s3-force-path-style"]
            .map(str::to_owned)
            .to_vec();
    let (child, output) = demo_summary_with(&samples, &dir.path().join("kubeconfig"), &flags).await;
    assert!(
        output.contains("default/s3-sample  bucket sample-app-data, credentials in Secret s3-sample-s3"),
        "seed 004: {output}"
    );
    interrupt(child).await;
}

/// Run from any folder with no flags: the built-in samples are applied, the admin server takes
/// a free port, and the temporary kubeconfig it names is gone after Ctrl-C.
#[tokio::test]
async fn demo_works_from_any_folder_on_a_free_port_and_cleans_up() {
    let elsewhere = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["demo", "--log-level", "error"])
        .current_dir(elsewhere.path())
        .env_remove("KOPPER_DEMO_SAMPLES")
        .env_remove("KOPPER_ADMIN_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = read_summary(&mut child).await;
    assert!(
        output.contains("team-b/shared-settings <- default/shared-settings"),
        "built-in samples: {output}"
    );
    let metrics = output.lines().find_map(|l| l.strip_prefix("metrics:")).unwrap().trim().to_owned();
    assert!(!metrics.contains(":8080/") && !metrics.contains(":0/"), "a free port: {metrics}");
    let address = metrics.trim_start_matches("http://").trim_end_matches("/metrics");
    assert_eq!(common::http_get(address, "/healthz").await.map(|(code, _)| code), Some(200));
    let kubeconfig = output.lines().find_map(|l| l.strip_prefix("kubeconfig:")).unwrap().trim().to_owned();
    assert!(Path::new(&kubeconfig).exists());
    interrupt(child).await;
    assert!(!Path::new(&kubeconfig).exists(), "the temporary kubeconfig {kubeconfig} is removed");
}
