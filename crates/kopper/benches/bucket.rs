//! What the Bucket controller costs against S3 and IAM, with the `kopper` binary as a child
//! process on kubesim and moto in server mode behind scripts/fault_proxy.py, which names and
//! counts every HTTP call (the SDK's retries included). Figures:
//! 1. S3 and IAM calls per Bucket created, reads and writes by operation;
//! 2. time from creating a Bucket to Ready, p50 and p99, next to a baseline measured in the
//!    same run: the same S3 and IAM calls made directly, one after another, by this process;
//! 3. calls per Bucket in an idle reconcile (kopper restarted on converged Buckets; aim:
//!    zero writes, few reads);
//! 4. calls per Bucket deleted (`deletionPolicy: Delete`) and time from delete to gone;
//! 5. a class change over many Buckets (a BucketClass's encryption and tag changed): calls per
//!    Bucket until every bucket follows it, and the time that takes.
//!
//! Run: `cargo bench -p kopper --bench bucket` (needs scripts/setup-moto.sh; prints figures,
//! asserts nothing). `BUCKET_BENCH_COUNT` sets how many Buckets (default 30),
//! `BUCKET_BENCH_CLASS_COUNT` how many share the changed class (default 100).

/// The tests' moto and fault-proxy harness, shared rather than copied.
#[path = "../tests/e2e/common/moto.rs"]
#[allow(dead_code)]
mod moto;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use kopper::controllers::bucket::names::{self, Owner};
use kopper::controllers::bucket::provider::BucketLookup;
use kopper::controllers::bucket::provider::Provider;
use kopper::controllers::bucket::types::{Bucket, BucketClass};
use moto::{Call, FaultProxy, Moto, REGION};

const NAMESPACE: &str = "bench";
const CLUSTER_ID: &str = "bench";
const LIMIT: Duration = Duration::from_secs(120);

/// What tests/e2e/common/moto.rs waits with: polls `check` until it yields a value.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `kopper` binary running the Bucket controller; killed when dropped.
struct Kopper {
    child: Child,
    admin_port: u16,
}

impl Kopper {
    fn start(kubeconfig: &Path, endpoint: &str) -> Self {
        let admin_port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kopper"))
            .args(["run", "--leader-elect", "false", "--controllers", "bucket", "--log-level", "warn"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
            .args(moto::flags(endpoint, CLUSTER_ID))
            .stdout(Stdio::null())
            .spawn()
            .expect("the kopper binary starts");
        Self { child, admin_port }
    }

    /// `kopper_reconciles_total` of the bucket controller, from `/metrics`.
    async fn reconciles(&self) -> u64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.admin_port)).await else {
            return 0;
        };
        let request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        let mut response = String::new();
        if stream.write_all(request.as_bytes()).await.is_err()
            || stream.read_to_string(&mut response).await.is_err()
        {
            return 0;
        }
        response
            .lines()
            .find(|l| l.starts_with("kopper_reconciles_total{controller=\"bucket\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Kopper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Cluster {
    sim: kubesim::Server,
    client: kube::Client,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let client = sim.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        for name in ["kopper-system", NAMESPACE] {
            let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
        }
        moto::create_credentials_secret(&client).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        Self { sim, client, kubeconfig, _dir: dir }
    }

    fn buckets(&self) -> Api<Bucket> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    async fn create(&self, name: &str) {
        self.create_with(name, json!({"deletionPolicy": "Delete"})).await;
    }

    async fn create_with(&self, name: &str, spec: serde_json::Value) {
        let bucket: Bucket = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "Bucket",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }))
        .unwrap();
        self.buckets().create(&PostParams::default(), &bucket).await.unwrap();
    }

    fn classes(&self) -> Api<BucketClass> {
        Api::all(self.client.clone())
    }

    async fn wait_ready(&self, name: &str) {
        let api = self.buckets();
        eventually(&format!("Bucket {name} to be Ready"), || async {
            let bucket = api.get(name).await.ok()?;
            let ready = bucket.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
            (ready.status == "True").then_some(())
        })
        .await;
    }

    async fn delete_and_wait_gone(&self, name: &str) {
        let api = self.buckets();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        eventually(&format!("Bucket {name} to be gone"), || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
}

/// The calls a phase made, per Bucket, by operation and in total.
fn print_calls(title: &str, calls: &[Call], buckets: usize) {
    let mut by_operation: BTreeMap<(String, String), usize> = BTreeMap::new();
    for call in calls {
        *by_operation.entry((call.service.clone(), call.operation.clone())).or_default() += 1;
    }
    let per = |count: usize| count as f64 / buckets as f64;
    let writes = calls.iter().filter(|c| c.is_write()).count();
    println!(
        "{title}: {:.2} calls per Bucket ({:.2} writes, {:.2} reads)",
        per(calls.len()),
        per(writes),
        per(calls.len() - writes)
    );
    for ((service, operation), count) in by_operation {
        println!("    {service:>3} {operation:<22} {:.2}", per(count));
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The provider calls a Bucket needs, made directly and in order: what kopper's time to Ready
/// is measured against.
async fn direct_calls(provider: &impl Provider, owner: &Owner) -> Duration {
    let started = Instant::now();
    let bucket = owner.default_bucket_name();
    let user = owner.user_name();
    assert!(matches!(
        provider.lookup_bucket(&bucket).await.unwrap(),
        kopper::controllers::bucket::provider::BucketLookup::Missing
    ));
    provider.create_bucket(&bucket, REGION).await.unwrap();
    provider.tag_bucket(&bucket, &owner.tags()).await.unwrap();
    provider.create_user(&user, names::BUCKET_USER_PATH, &owner.tags()).await.unwrap();
    provider.put_user_policy(&user, names::POLICY_NAME, &names::policy_document(&bucket)).await.unwrap();
    provider.create_access_key(&user).await.unwrap();
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::var("BUCKET_BENCH_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let count = count.max(1);
    let Some(moto) = Moto::start().await else { panic!("moto is not installed: run scripts/setup-moto.sh") };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = Cluster::start().await;
    println!("Bucket controller, {count} Buckets, kopper on kubesim, moto behind a counting proxy");

    let provider = moto::client_of(&proxy.endpoint).await;
    let mut baseline = Vec::new();
    for index in 0..count {
        let owner = Owner {
            cluster: "baseline".into(),
            namespace: NAMESPACE.into(),
            name: format!("direct-{index}"),
            uid: format!("00000000-0000-0000-0000-{index:012}"),
        };
        baseline.push(direct_calls(&provider, &owner).await);
    }

    let kopper = Kopper::start(&cluster.kubeconfig, &proxy.endpoint);
    proxy.reset_calls().await;
    let mut to_ready = Vec::new();
    for index in 0..count {
        let name = format!("b{index}");
        let started = Instant::now();
        cluster.create(&name).await;
        cluster.wait_ready(&name).await;
        to_ready.push(started.elapsed());
    }
    // Let the reconcile the Secret's creation triggers finish before counting.
    let settled = kopper.reconciles().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let created_calls = proxy.calls().await;
    print_calls("1. created", &created_calls, count);

    to_ready.sort();
    baseline.sort();
    let (p50, p99, base50) =
        (percentile(&to_ready, 0.5), percentile(&to_ready, 0.99), percentile(&baseline, 0.5));
    println!(
        "2. time to Ready: p50 {:.1} ms, p99 {:.1} ms; baseline (the same calls made directly) p50 {:.1} ms; ratio p50 {:.2}",
        ms(p50),
        ms(p99),
        ms(base50),
        p50.as_secs_f64() / base50.as_secs_f64()
    );
    println!("   (reconciles while creating: {settled})");

    drop(kopper);
    proxy.reset_calls().await;
    let kopper = Kopper::start(&cluster.kubeconfig, &proxy.endpoint);
    eventually("kopper to reconcile every Bucket after its restart", || async {
        (kopper.reconciles().await >= count as u64).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = proxy.calls().await;
    let reconciles = kopper.reconciles().await;
    print_calls(&format!("3. idle reconcile after a restart ({reconciles} reconciles)"), &idle, count);

    proxy.reset_calls().await;
    let mut to_gone = Vec::new();
    for index in 0..count {
        let started = Instant::now();
        cluster.delete_and_wait_gone(&format!("b{index}")).await;
        to_gone.push(started.elapsed());
    }
    print_calls("4. deleted", &proxy.calls().await, count);
    to_gone.sort();
    println!(
        "   time from delete to gone: p50 {:.1} ms, p99 {:.1} ms",
        ms(percentile(&to_gone, 0.5)),
        ms(percentile(&to_gone, 0.99))
    );
    class_change(&cluster, &proxy, &moto, &kopper).await;
    drop(kopper);
    cluster.sim.shutdown().await;
}

/// Row 5: `BUCKET_BENCH_CLASS_COUNT` Buckets of one class, then the class's encryption and a
/// tag changed: the calls until every bucket has the new tag (checked on moto directly, past
/// the counting proxy), per Bucket.
async fn class_change(cluster: &Cluster, proxy: &FaultProxy, moto: &Moto, kopper: &Kopper) {
    let count: usize =
        std::env::var("BUCKET_BENCH_CLASS_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(100).max(1);
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": "bench"},
        "spec": {"encryption": {"algorithm": "AES256"}, "tags": {"tier": "gold"}},
    }))
    .unwrap();
    cluster.classes().create(&PostParams::default(), &class).await.unwrap();
    for index in 0..count {
        cluster.create_with(&format!("c{index}"), json!({"className": "bench"})).await;
    }
    let mut names = Vec::new();
    for index in 0..count {
        let name = format!("c{index}");
        cluster.wait_ready(&name).await;
        let bucket = cluster.buckets().get(&name).await.unwrap();
        names.push(bucket.status.and_then(|status| status.bucket_name).unwrap());
    }
    let before = kopper.reconciles().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.reset_calls().await;
    let change = json!({"spec": {"encryption": {"algorithm": "aws:kms"}, "tags": {"tier": "silver"}}});
    let started = Instant::now();
    cluster
        .classes()
        .patch("bench", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(change))
        .await
        .unwrap();
    let direct = moto::client_of(&moto.endpoint).await;
    for name in &names {
        eventually(&format!("bucket {name} to follow its class"), || async {
            match direct.lookup_bucket(name).await.ok()? {
                BucketLookup::Ours { tags } => {
                    (tags.get("tier").map(String::as_str) == Some("silver")).then_some(())
                }
                _ => None,
            }
        })
        .await;
    }
    let converged = started.elapsed();
    // The passes still running when the last tag landed finish before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reconciles = kopper.reconciles().await - before;
    print_calls(
        &format!(
            "5. class change over {count} Buckets ({reconciles} reconciles, all converged in {:.1} ms)",
            ms(converged)
        ),
        &proxy.calls().await,
        count,
    );
}
