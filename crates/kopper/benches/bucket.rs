//! What the Bucket controller and its BucketAccess (grant) controller cost against S3 and
//! IAM, with the `kopper` binary as a child process on kubesim and moto in server mode behind
//! scripts/fault_proxy.py, which names and counts every HTTP call (the SDK's retries included).
//! Figures, by access mode:
//!
//! Key (the default: an IAM user and an access key in a Secret):
//! 1. S3 and IAM calls per Bucket created, reads and writes by operation;
//! 2. time from creating a Bucket to Ready, p50 and p99, next to a baseline measured in the
//!    same run: the same S3 and IAM calls made directly, one after another, by this process;
//! 3. calls per Bucket in an idle reconcile (kopper restarted on converged Buckets; aim:
//!    zero writes, few reads);
//! 4. calls per Bucket deleted (`deletionPolicy: Delete`) and time from delete to gone.
//!
//! Keyless (`access.mode: ServiceAccount`: an IAM role trusted through the cluster's OIDC
//! provider, kopper run with `--oidc-provider-arn`), each Bucket naming its own ServiceAccount:
//! 5. calls per Bucket created (and time to Ready), in an idle reconcile after a restart, and
//!    per Bucket deleted (and time to gone), as 1, 3 and 4.
//!
//! Grant (a BucketAccess in another namespace, for a Bucket whose `spec.sharedWith` lists that
//! namespace; one grant per Bucket), counting the IAM calls that name the grant's own user,
//! per grant, apart from the shared Buckets' own calls:
//! 6. calls per grant created (and time to Granted), in an idle reconcile after a restart, per
//!    grant deleted, and per grant when its Bucket is deleted (the Bucket's cleanup deletes the
//!    grant's user; the grant's next pass finds it gone).
//!
//! 7. A class change over many Buckets (a BucketClass's encryption and tag changed): calls per
//!    Bucket until every bucket follows it, and the time that takes.
//!
//! The idle figures after a restart include the orphan sweep kopper runs once at start-up
//! (`--cluster-id` is set): one ListUsers and one ListRoles, then a ListUserTags per IAM user
//! and a ListRoleTags per role of this cluster.
//!
//! Run: `cargo bench -p kopper --bench bucket` (needs scripts/setup-moto.sh; prints figures,
//! asserts nothing). `BUCKET_BENCH_COUNT` sets how many Buckets of each access mode, and how
//! many grants (default 30); `BUCKET_BENCH_CLASS_COUNT` how many share the changed class
//! (default 100).

/// The tests' moto and fault-proxy harness, shared rather than copied.
#[path = "../tests/e2e/common/moto.rs"]
#[allow(dead_code)]
mod moto;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

use kopper::controllers::bucket::access_types::BucketAccess;
use kopper::controllers::bucket::names::{self, Owner};
use kopper::controllers::bucket::provider::BucketLookup;
use kopper::controllers::bucket::provider::Provider;
use kopper::controllers::bucket::types::{Bucket, BucketClass};
use kopper::controllers::bucket::{NAME as BUCKETS, grant_controller::NAME as GRANTS};
use moto::{Call, FaultProxy, Moto, REGION};

const NAMESPACE: &str = "bench";
/// The namespace of the grants, which the shared Buckets' `spec.sharedWith` lists.
const CONSUMER: &str = "bench-consumer";
const CLUSTER_ID: &str = "bench";
/// The OIDC provider kopper is given for keyless Buckets (moto's default account).
const OIDC_PROVIDER_ARN: &str = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/BENCH";
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

/// How a phase starts kopper, kept so that its restart starts it the same way.
#[derive(Clone)]
struct Launch {
    kubeconfig: PathBuf,
    endpoint: String,
    extra: Vec<String>,
}

/// The `kopper` binary running the Bucket controller; killed when dropped.
struct Kopper {
    child: Child,
    admin_port: u16,
    launch: Launch,
}

impl Kopper {
    fn start(launch: Launch) -> Self {
        let admin_port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kopper"))
            .args(["run", "--leader-elect", "false", "--controllers", "bucket", "--log-level", "warn"])
            .arg("--kubeconfig")
            .arg(&launch.kubeconfig)
            .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
            .args(moto::flags(&launch.endpoint, CLUSTER_ID))
            .args(&launch.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("the kopper binary starts");
        Self { child, admin_port, launch }
    }

    /// `kopper_reconciles_total` of `controller`, from `/metrics`.
    async fn reconciles(&self, controller: &str) -> u64 {
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
        let series = format!("kopper_reconciles_total{{controller=\"{controller}\"}}");
        response
            .lines()
            .find(|l| l.starts_with(&series))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Waits until neither the Bucket nor the grant controller has finished a pass for 2 s:
    /// the passes a phase's own writes queued (Secrets, ConfigMaps, status) are over before
    /// its calls are counted.
    async fn quiet(&self) {
        let passes = || async { self.reconciles(BUCKETS).await + self.reconciles(GRANTS).await };
        eventually("kopper to go quiet", || async {
            let before = passes().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            (passes().await == before).then_some(())
        })
        .await;
    }
}

impl Drop for Kopper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kopper stopped and started again as before, on converged objects: the calls of its first
/// passes, once each `(controller, objects)` has reconciled that many and it went quiet.
async fn idle_after_restart(
    kopper: Kopper,
    proxy: &FaultProxy,
    expected: &[(&str, usize)],
) -> (Kopper, Vec<Call>) {
    let launch = kopper.launch.clone();
    drop(kopper);
    proxy.reset_calls().await;
    let kopper = Kopper::start(launch);
    for (controller, objects) in expected {
        eventually(
            &format!("kopper's {controller} controller to reconcile all after its restart"),
            || async { (kopper.reconciles(controller).await >= *objects as u64).then_some(()) },
        )
        .await;
    }
    kopper.quiet().await;
    let calls = proxy.calls().await;
    (kopper, calls)
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
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig).unwrap();
        let cluster = Self { sim, client, kubeconfig, _dir: dir };
        for name in ["kopper-system", NAMESPACE, CONSUMER] {
            cluster.create_namespace(name).await;
        }
        moto::create_credentials_secret(&cluster.client).await;
        cluster
    }

    /// kopper on this cluster with its S3 and IAM endpoint at `endpoint`, and `extra` flags.
    fn launch(&self, endpoint: &str, extra: &[&str]) -> Launch {
        Launch {
            kubeconfig: self.kubeconfig.clone(),
            endpoint: endpoint.to_owned(),
            extra: extra.iter().map(|flag| flag.to_string()).collect(),
        }
    }

    async fn create_namespace(&self, name: &str) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    async fn create_service_account(&self, name: &str) {
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": NAMESPACE}})).unwrap();
        Api::<ServiceAccount>::namespaced(self.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
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

    fn grants(&self) -> Api<BucketAccess> {
        Api::namespaced(self.client.clone(), CONSUMER)
    }

    /// A read-only BucketAccess `name` in [`CONSUMER`] for the Bucket `bucket`.
    async fn create_grant(&self, name: &str, bucket: &str) {
        let grant: BucketAccess = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "BucketAccess",
            "metadata": {"name": name, "namespace": CONSUMER},
            "spec": {"bucketRef": {"namespace": NAMESPACE, "name": bucket}, "mode": "ReadOnly"},
        }))
        .unwrap();
        self.grants().create(&PostParams::default(), &grant).await.unwrap();
    }

    fn classes(&self) -> Api<BucketClass> {
        Api::all(self.client.clone())
    }

    async fn wait_ready(&self, name: &str) {
        wait_for_reason(&self.buckets(), name, "Ready", |bucket| bucket.status.map(|s| s.conditions)).await;
    }

    async fn wait_grant(&self, name: &str, reason: &str) {
        wait_for_reason(&self.grants(), name, reason, |grant| grant.status.map(|s| s.conditions)).await;
    }

    async fn delete_and_wait_gone(&self, name: &str) {
        delete_and_wait_gone(&self.buckets(), name).await;
    }
}

/// Waits for the Ready condition of `name` to give `reason`; `conditions` reads them.
async fn wait_for_reason<K>(
    api: &Api<K>,
    name: &str,
    reason: &str,
    conditions: fn(K) -> Option<Vec<Condition>>,
) where
    K: Clone + DeserializeOwned + Debug,
{
    eventually(&format!("{name} to report {reason}"), || async {
        let object = api.get(name).await.ok()?;
        let ready = conditions(object)?.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == reason).then_some(())
    })
    .await;
}

async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Clone + DeserializeOwned + Debug,
{
    api.delete(name, &DeleteParams::default()).await.unwrap();
    eventually(&format!("{name} to be gone"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// `step(0..count)` one after another; the time each took.
async fn one_by_one(count: usize, step: impl AsyncFn(usize)) -> Vec<Duration> {
    let mut times = Vec::with_capacity(count);
    for index in 0..count {
        let started = Instant::now();
        step(index).await;
        times.push(started.elapsed());
    }
    times.sort();
    times
}

/// The calls a phase made, per Bucket, by operation and in total.
fn print_calls(title: &str, calls: &[Call], buckets: usize) {
    print_calls_per(title, calls, buckets, "Bucket");
}

/// The calls a phase made, per `unit` (`objects` of them), by operation and in total.
fn print_calls_per(title: &str, calls: &[Call], objects: usize, unit: &str) {
    let mut by_operation: BTreeMap<(String, String), usize> = BTreeMap::new();
    for call in calls {
        *by_operation.entry((call.service.clone(), call.operation.clone())).or_default() += 1;
    }
    let per = |count: usize| count as f64 / objects as f64;
    let writes = calls.iter().filter(|c| c.is_write()).count();
    println!(
        "{title}: {:.2} calls per {unit} ({:.2} writes, {:.2} reads)",
        per(calls.len()),
        per(writes),
        per(calls.len() - writes)
    );
    for ((service, operation), count) in by_operation {
        println!("    {service:>3} {operation:<22} {:.2}", per(count));
    }
}

/// A grant phase's calls: those naming a grant's IAM user per grant, and the rest (the shared
/// Buckets' own, one Bucket per grant) per Bucket, when there are any.
fn print_grant_calls(title: &str, calls: &[Call], grants: usize) {
    let prefix = format!("{}ga-", names::user_name_prefix(CLUSTER_ID));
    let (of_grants, rest): (Vec<Call>, Vec<Call>) = calls
        .iter()
        .cloned()
        .partition(|call| call.user.as_deref().is_some_and(|user| user.starts_with(&prefix)));
    print_calls_per(title, &of_grants, grants, "grant");
    if !rest.is_empty() {
        print_calls("   meanwhile the shared Buckets' own", &rest, grants);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `   <what>: p50 …, p99 …` of times sorted by [`one_by_one`].
fn print_p50_p99(what: &str, sorted: &[Duration]) {
    println!(
        "   {what}: p50 {:.1} ms, p99 {:.1} ms",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99))
    );
}

/// The provider calls a Bucket needs, made directly and in order: what kopper's time to Ready
/// is measured against.
async fn direct_calls(provider: &impl Provider, owner: &Owner) -> Duration {
    let started = Instant::now();
    let bucket = owner.default_bucket_name();
    let user = owner.user_name();
    assert!(matches!(provider.lookup_bucket(&bucket).await.unwrap(), BucketLookup::Missing));
    provider.create_bucket(&bucket, REGION).await.unwrap();
    provider.tag_bucket(&bucket, &owner.tags()).await.unwrap();
    provider.create_user(&user, names::BUCKET_USER_PATH, &owner.tags()).await.unwrap();
    provider.put_user_policy(&user, names::POLICY_NAME, &names::policy_document(&bucket)).await.unwrap();
    provider.create_access_key(&user).await.unwrap();
    started.elapsed()
}

/// A count from the environment variable `name`, at least 1.
fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default).max(1)
}

#[tokio::main]
async fn main() {
    let count = count_from_env("BUCKET_BENCH_COUNT", 30);
    let Some(moto) = Moto::start().await else { panic!("moto is not installed: run scripts/setup-moto.sh") };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = Cluster::start().await;
    println!(
        "Bucket controller, {count} Buckets of each access mode, kopper on kubesim, moto behind a counting proxy"
    );
    key_buckets(&cluster, &proxy, count).await;
    keyless_buckets(&cluster, &proxy, count).await;
    grants(&cluster, &proxy, count).await;
    class_change(&cluster, &proxy, &moto).await;
    cluster.sim.shutdown().await;
}

/// Rows 1 to 4: Buckets with a key, next to the same calls made directly.
async fn key_buckets(cluster: &Cluster, proxy: &FaultProxy, count: usize) {
    println!("Key: an IAM user and an access key in a Secret");
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
    baseline.sort();

    let kopper = Kopper::start(cluster.launch(&proxy.endpoint, &[]));
    proxy.reset_calls().await;
    let to_ready = one_by_one(count, async |index| {
        let name = format!("b{index}");
        cluster.create(&name).await;
        cluster.wait_ready(&name).await;
    })
    .await;
    // The reconciles the Secrets' creation triggers finish before counting.
    let settled = kopper.reconciles(BUCKETS).await;
    kopper.quiet().await;
    print_calls("1. created", &proxy.calls().await, count);

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

    let (kopper, idle) = idle_after_restart(kopper, proxy, &[(BUCKETS, count)]).await;
    let reconciles = kopper.reconciles(BUCKETS).await;
    print_calls(&format!("3. idle reconcile after a restart ({reconciles} reconciles)"), &idle, count);

    proxy.reset_calls().await;
    let to_gone =
        one_by_one(count, async |index| cluster.delete_and_wait_gone(&format!("b{index}")).await).await;
    print_calls("4. deleted", &proxy.calls().await, count);
    print_p50_p99("time from delete to gone", &to_gone);
}

/// Row 5: keyless Buckets, each naming its own ServiceAccount, with kopper given the
/// cluster's OIDC provider.
async fn keyless_buckets(cluster: &Cluster, proxy: &FaultProxy, count: usize) {
    println!("Keyless: an IAM role for a ServiceAccount, trusted through the cluster's OIDC provider");
    let name = |index: usize| format!("k{index}");
    for index in 0..count {
        cluster.create_service_account(&name(index)).await;
    }
    let kopper = Kopper::start(cluster.launch(&proxy.endpoint, &["--oidc-provider-arn", OIDC_PROVIDER_ARN]));
    proxy.reset_calls().await;
    let to_ready = one_by_one(count, async |index| {
        let access = json!({"mode": "ServiceAccount", "serviceAccountName": name(index)});
        cluster.create_with(&name(index), json!({"deletionPolicy": "Delete", "access": access})).await;
        cluster.wait_ready(&name(index)).await;
    })
    .await;
    kopper.quiet().await;
    print_calls("5. created", &proxy.calls().await, count);
    print_p50_p99("time to Ready", &to_ready);

    let (kopper, idle) = idle_after_restart(kopper, proxy, &[(BUCKETS, count)]).await;
    let reconciles = kopper.reconciles(BUCKETS).await;
    print_calls(&format!("5. idle reconcile after a restart ({reconciles} reconciles)"), &idle, count);

    proxy.reset_calls().await;
    let to_gone = one_by_one(count, async |index| cluster.delete_and_wait_gone(&name(index)).await).await;
    print_calls("5. deleted", &proxy.calls().await, count);
    print_p50_p99("time from delete to gone", &to_gone);
}

/// Row 6: one read-only grant from [`CONSUMER`] per Bucket shared with it. The Buckets are
/// made and Ready before counting starts; the grants are made again (uncounted) after 6's
/// "grant deleted", for "Bucket deleted", and the grants left holding nothing are deleted at
/// the end.
async fn grants(cluster: &Cluster, proxy: &FaultProxy, count: usize) {
    println!("Grant: a BucketAccess in another namespace, for a Bucket shared with it");
    let bucket = |index: usize| format!("s{index}");
    let grant = |index: usize| format!("g{index}");
    let kopper = Kopper::start(cluster.launch(&proxy.endpoint, &[]));
    let shared_with = json!([{"namespace": CONSUMER, "mode": "ReadOnly"}]);
    for index in 0..count {
        cluster
            .create_with(&bucket(index), json!({"deletionPolicy": "Delete", "sharedWith": shared_with}))
            .await;
    }
    for index in 0..count {
        cluster.wait_ready(&bucket(index)).await;
    }
    let grant_each = async || {
        one_by_one(count, async |index| {
            cluster.create_grant(&grant(index), &bucket(index)).await;
            cluster.wait_grant(&grant(index), "Granted").await;
        })
        .await
    };
    kopper.quiet().await;
    proxy.reset_calls().await;
    let to_granted = grant_each().await;
    kopper.quiet().await;
    print_grant_calls("6. grant created", &proxy.calls().await, count);
    print_p50_p99("time to Granted", &to_granted);

    let (kopper, idle) = idle_after_restart(kopper, proxy, &[(BUCKETS, count), (GRANTS, count)]).await;
    let reconciles = kopper.reconciles(GRANTS).await;
    print_grant_calls(
        &format!("6. idle reconcile after a restart ({reconciles} grant reconciles)"),
        &idle,
        count,
    );

    proxy.reset_calls().await;
    let to_gone =
        one_by_one(count, async |index| delete_and_wait_gone(&cluster.grants(), &grant(index)).await).await;
    kopper.quiet().await;
    print_grant_calls("6. grant deleted", &proxy.calls().await, count);
    print_p50_p99("time from delete to gone", &to_gone);

    grant_each().await;
    kopper.quiet().await;
    proxy.reset_calls().await;
    one_by_one(count, async |index| {
        cluster.delete_and_wait_gone(&bucket(index)).await;
        cluster.wait_grant(&grant(index), "NotShared").await;
    })
    .await;
    kopper.quiet().await;
    print_grant_calls("6. Bucket deleted, its grant's share", &proxy.calls().await, count);
    one_by_one(count, async |index| delete_and_wait_gone(&cluster.grants(), &grant(index)).await).await;
}

/// Row 7: `BUCKET_BENCH_CLASS_COUNT` Buckets of one class, then the class's encryption and a
/// tag changed: the calls until every bucket has the new tag (checked on moto directly, past
/// the counting proxy), per Bucket.
async fn class_change(cluster: &Cluster, proxy: &FaultProxy, moto: &Moto) {
    let count = count_from_env("BUCKET_BENCH_CLASS_COUNT", 100);
    let kopper = Kopper::start(cluster.launch(&proxy.endpoint, &[]));
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
    kopper.quiet().await;
    let before = kopper.reconciles(BUCKETS).await;
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
    kopper.quiet().await;
    let reconciles = kopper.reconciles(BUCKETS).await - before;
    print_calls(
        &format!(
            "7. class change over {count} Buckets ({reconciles} reconciles, all converged in {:.1} ms)",
            ms(converged)
        ),
        &proxy.calls().await,
        count,
    );
}
