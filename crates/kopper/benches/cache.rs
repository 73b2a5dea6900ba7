//! kopper's resident memory with 1,000 Buckets and 1,000 ConfigMapSyncs at the largest size
//! their CRD schemas and the API server allow (every string at its maxLength, every list and
//! map full, 256 KiB of annotations and 64 labels on each), next to the same counts of
//! minimal objects and an empty cluster, measured in the same run. No S3 provider: every
//! Bucket reports ProviderNotConfigured once cached and reconciled.
//!
//! Run: `cargo bench -p kopper --bench cache` (prints figures; asserts nothing).
//! `KOPPER_BENCH_OBJECTS` changes the count of each kind (default 1000).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kopper::controllers::bucket::types::Bucket;
use kopper::controllers::replication::types::ConfigMapSync;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, memory_kib};

const NAMESPACES: usize = 10;

fn objects() -> usize {
    std::env::var("KOPPER_BENCH_OBJECTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

/// `text` repeated and cut to exactly `length` characters.
fn sized(text: &str, length: usize) -> String {
    text.repeat(length / text.len() + 1)[..length].to_owned()
}

/// A 317-character label key (a 253-character DNS prefix, `/`, a 63-character name) ending in `n`.
fn label_key(n: usize) -> String {
    let prefix = format!("{}.{}.{}.{}", sized("a", 63), sized("b", 63), sized("c", 63), sized("d", 61));
    format!("{prefix}/{}{n:04}", sized("k", 59))
}

/// The largest metadata the API server takes: 256 KiB of annotations, 64 labels.
fn largest_metadata(name: &str, namespace: &str) -> Value {
    let key = "example.com/note";
    let labels: serde_json::Map<String, Value> =
        (0..64).map(|n| (label_key(n), Value::from(format!("{}{n:02}", sized("v", 61))))).collect();
    json!({"name": name, "namespace": namespace,
           "annotations": {key: sized("n", 262_144 - key.len())}, "labels": labels})
}

fn largest_bucket_spec(n: usize) -> Value {
    let tags: serde_json::Map<String, Value> =
        (0..40).map(|t| (format!("{}{t:02}", sized("t", 126)), Value::from(sized("v", 256)))).collect();
    json!({"bucketName": format!("{}{n:05}", sized("b", 58)), "region": sized("r", 32),
           "secretName": format!("{}{n:05}", sized("s", 248)), "versioning": true, "tags": tags})
}

fn largest_sync_spec() -> Value {
    let namespace = |n: usize| format!("{}{n:03}", sized("d", 60));
    let values: Vec<String> = (0..64).map(|v| format!("{}{v:02}", sized("v", 61))).collect();
    let expressions: Vec<Value> =
        (0..16).map(|e| json!({"key": label_key(e), "operator": "In", "values": values})).collect();
    let match_labels: serde_json::Map<String, Value> =
        (0..64).map(|l| (label_key(100 + l), Value::from(sized("v", 63)))).collect();
    json!({"sourceNamespace": sized("s", 63), "destinationNamespace": namespace(999),
           "destinationNamespaces": (0..256).map(namespace).collect::<Vec<_>>(),
           "destinationSelector": {"matchExpressions": expressions, "matchLabels": match_labels},
           "configMapName": sized("c", 253)})
}

async fn populate(cluster: &Cluster, largest: bool) {
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    for n in 0..NAMESPACES {
        let namespace = serde_json::from_value(json!({"metadata": {"name": format!("team-{n}")}})).unwrap();
        namespaces.create(&PostParams::default(), &namespace).await.unwrap();
    }
    let tasks: Vec<_> = (0..8)
        .map(|worker| {
            let client = cluster.client.clone();
            tokio::spawn(async move {
                for n in (worker..objects()).step_by(8) {
                    let namespace = format!("team-{}", n % NAMESPACES);
                    let name = format!("object-{n}");
                    let (metadata, bucket_spec, sync_spec) = if largest {
                        (largest_metadata(&name, &namespace), largest_bucket_spec(n), largest_sync_spec())
                    } else {
                        let sync = json!({"sourceNamespace": namespace, "configMapName": "settings"});
                        (json!({"name": name, "namespace": namespace}), json!({}), sync)
                    };
                    let bucket: Bucket = serde_json::from_value(json!({"apiVersion": "kopper.dev/v1alpha1",
                        "kind": "Bucket", "metadata": metadata, "spec": bucket_spec}))
                    .unwrap();
                    let sync: ConfigMapSync =
                        serde_json::from_value(json!({"apiVersion": "kopper.dev/v1alpha1",
                        "kind": "ConfigMapSync", "metadata": metadata, "spec": sync_spec}))
                        .unwrap();
                    let buckets: Api<Bucket> = Api::namespaced(client.clone(), &namespace);
                    buckets
                        .create(&PostParams::default(), &bucket)
                        .await
                        .expect("a Bucket within the schema");
                    let syncs: Api<ConfigMapSync> = Api::namespaced(client.clone(), &namespace);
                    syncs
                        .create(&PostParams::default(), &sync)
                        .await
                        .expect("a ConfigMapSync within the schema");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

fn start_kopper(cluster: &Cluster) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--leader-elect", "false", "--controllers", "bucket,config-map-sync"])
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["--admin-addr", "127.0.0.1:0", "--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the kopper binary starts")
}

/// Objects of one kind that carry a status (so kopper has cached and reconciled them).
async fn with_status<K>(api: &Api<K>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut counted = 0;
    let mut params = ListParams::default().limit(50);
    loop {
        let Ok(page) = api.list(&params).await else { return counted };
        counted += page
            .items
            .iter()
            .filter(|object| {
                serde_json::to_value(object).is_ok_and(|v| v["status"]["conditions"][0].is_object())
            })
            .count();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return counted,
        }
    }
}

/// kopper's (resident, peak) KiB once every object is cached and has its status.
async fn measure(cluster: &Cluster) -> (u64, u64, Duration) {
    let started = Instant::now();
    let mut kopper = start_kopper(cluster);
    let buckets: Api<Bucket> = Api::all(cluster.client.clone());
    let syncs: Api<ConfigMapSync> = Api::all(cluster.client.clone());
    let deadline = Instant::now() + Duration::from_secs(1200);
    while with_status(&buckets).await < objects() || with_status(&syncs).await < objects() {
        assert!(Instant::now() < deadline, "kopper did not reconcile every object in time");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let converged = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss, peak) = memory_kib(&format!("/proc/{}/status", kopper.id()));
    kopper.kill().ok();
    kopper.wait().ok();
    (rss, peak, converged)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    let count = objects();
    let empty = Cluster::start().await;
    let mut idle = start_kopper(&empty);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (idle_rss, _) = memory_kib(&format!("/proc/{}/status", idle.id()));
    idle.kill().ok();
    idle.wait().ok();
    empty.sim.shutdown().await;

    println!("kopper memory, {count} Buckets + {count} ConfigMapSyncs cached (bucket + config-map-sync)");
    println!("  resident, empty cluster:           {:>8.1} MiB", mib(idle_rss));
    for (label, largest) in [("minimal objects", false), ("largest objects", true)] {
        let cluster = Cluster::start().await;
        let started = Instant::now();
        populate(&cluster, largest).await;
        let populated = started.elapsed();
        let (rss, peak, converged) = measure(&cluster).await;
        let per_object = (rss.saturating_sub(idle_rss) * 1024) as f64 / (2 * count) as f64;
        println!(
            "  {label}: populated in {:.0} s, reconciled in {:.0} s; resident {:.1} MiB (peak {:.1} MiB), \
             {:.0} bytes per object above the empty cluster",
            populated.as_secs_f64(),
            converged.as_secs_f64(),
            mib(rss),
            mib(peak),
            per_object
        );
        cluster.sim.shutdown().await;
    }
}
