//! kubesim's performance figures, each next to a baseline measured in the same run:
//! - writes per second with 8 concurrent writers (baseline: `GET /version` per second over
//!   the same client and connections, i.e. the HTTP round trip alone);
//! - watch delivery latency p50/p99 with 50 watchers (baseline: one watcher);
//! - heap bytes per stored 1 KiB ConfigMap over 10,000 objects (baseline: the object's own
//!   JSON size).
//!
//! Run: `cargo bench -p kubesim --bench kubesim` (prints figures; asserts nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// Counts live heap bytes, so memory per object is measured, not guessed from RSS.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const OBJECTS: usize = 10_000;
const WRITERS: usize = 8;
const WATCHERS: usize = 50;
const LATENCY_SAMPLES: usize = 500;

fn config_map(name: &str, payload: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"payload": payload}})).unwrap()
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

/// Requests per second of `GET /version`: the cost of the round trip alone.
async fn baseline_round_trips(client: &kube::Client) -> f64 {
    let per_writer = OBJECTS / WRITERS;
    let start = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..per_writer {
                    client.apiserver_version().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_writer * WRITERS) as f64 / start.elapsed().as_secs_f64()
}

/// Creates `OBJECTS` 1 KiB ConfigMaps with `WRITERS` concurrent writers; returns writes/s.
async fn concurrent_writes(client: &kube::Client, ns: &str) -> f64 {
    let payload = Arc::new("x".repeat(1024));
    let per_writer = OBJECTS / WRITERS;
    let start = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let payload = payload.clone();
            tokio::spawn(async move {
                for i in 0..per_writer {
                    api.create(&PostParams::default(), &config_map(&format!("cm-{w}-{i}"), &payload))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_writer * WRITERS) as f64 / start.elapsed().as_secs_f64()
}

/// p50 and p99 of the time from a create's response to its event at each of `watchers`.
async fn watch_latency(client: &kube::Client, ns: &str, watchers: usize) -> (Duration, Duration) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let rv = api.list(&ListParams::default().limit(1)).await.unwrap().metadata.resource_version.unwrap();
    let epoch = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Duration)>();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let api = api.clone();
        let tx = tx.clone();
        let rv = rv.clone();
        let params = WatchParams { bookmarks: false, ..WatchParams::default() };
        let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
        tasks.push(tokio::spawn(async move {
            while let Ok(Some(event)) = stream.try_next().await {
                if let WatchEvent::Added(cm) = event {
                    let _ = tx.send((cm.metadata.name.unwrap_or_default(), epoch.elapsed()));
                }
            }
        }));
    }
    drop(tx);
    let mut sent = std::collections::HashMap::new();
    for i in 0..LATENCY_SAMPLES {
        let name = format!("lat-{watchers}-{i}");
        // Taken before the request, so each figure is an upper bound on commit-to-delivery.
        sent.insert(name.clone(), epoch.elapsed());
        api.create(&PostParams::default(), &config_map(&name, "x")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut latencies = Vec::with_capacity(LATENCY_SAMPLES * watchers);
    while latencies.len() < LATENCY_SAMPLES * watchers {
        let Ok(Some((name, at))) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await else {
            break;
        };
        if let Some(created) = sent.get(&name) {
            latencies.push(at.saturating_sub(*created));
        }
    }
    for t in tasks {
        t.abort();
    }
    latencies.sort();
    let pick =
        |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q) as usize).copied().unwrap_or_default();
    (pick(0.50), pick(0.99))
}

/// Creates per second straight through the API layer, with no HTTP or client: what the
/// store, validation and managedFields cost alone.
fn in_process_creates() -> f64 {
    let (changes, _) = tokio::sync::broadcast::channel(16);
    let mut state = kubesim::store::State::new(OBJECTS * 2, changes);
    let namespaces = state.registry.get("", "v1", "namespaces").unwrap();
    let opts = kubesim::api::WriteOptions { field_manager: "bench".into(), ..Default::default() };
    let ns = kubesim::api::Target { rt: namespaces, namespace: None, name: None, subresource: None };
    kubesim::api::create(&mut state, &ns, json!({"metadata": {"name": "bench"}}), &opts).unwrap();
    let rt = state.registry.get("", "v1", "configmaps").unwrap();
    let target = kubesim::api::Target { rt, namespace: Some("bench".into()), name: None, subresource: None };
    let payload = "x".repeat(1024);
    let start = Instant::now();
    for i in 0..OBJECTS {
        let body = json!({"metadata": {"name": format!("cm-{i}")}, "data": {"payload": payload}});
        kubesim::api::create(&mut state, &target, body, &opts).unwrap();
    }
    OBJECTS as f64 / start.elapsed().as_secs_f64()
}

/// Median time to start a server and have it answer (baseline: one `GET /version`).
async fn start_time() -> (Duration, Duration) {
    let mut starts = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let client = sim.client();
        client.apiserver_version().await.unwrap();
        starts.push(t.elapsed());
        let t = Instant::now();
        client.apiserver_version().await.unwrap();
        requests.push(t.elapsed());
        sim.shutdown().await;
    }
    starts.sort();
    requests.sort();
    (starts[starts.len() / 2], requests[requests.len() / 2])
}

#[tokio::main]
async fn main() {
    let direct = in_process_creates();
    let (start, one_request) = start_time().await;
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let client = sim.client();
    namespace(&client, "bench").await;
    namespace(&client, "latency").await;

    let baseline = baseline_round_trips(&client).await;
    let heap_before = LIVE.load(Ordering::Relaxed);
    let writes = concurrent_writes(&client, "bench").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let heap_after = LIVE.load(Ordering::Relaxed);
    let sample = serde_json::to_vec(
        &sim.client()
            .request::<serde_json::Value>(
                http::Request::get("/api/v1/namespaces/bench/configmaps/cm-0-0").body(Vec::new()).unwrap(),
            )
            .await
            .unwrap(),
    )
    .unwrap();
    let per_object = heap_after.saturating_sub(heap_before) as f64 / OBJECTS as f64;

    let (p50_one, p99_one) = watch_latency(&client, "latency", 1).await;
    let (p50, p99) = watch_latency(&client, "latency", WATCHERS).await;

    println!("kubesim benchmark ({OBJECTS} objects, {WRITERS} writers, {WATCHERS} watchers)");
    println!(
        "  start to first answer:        {:>10.3} ms   ({:.1}x one GET /version)",
        ms(start),
        ms(start) / ms(one_request).max(1e-6)
    );
    println!("  baseline GET /version:        {baseline:>10.0} req/s");
    println!(
        "  creates (1 KiB ConfigMaps):   {writes:>10.0} writes/s   ({:.2}x the baseline round trip rate)",
        writes / baseline
    );
    println!("  creates in process (no HTTP): {direct:>10.0} writes/s   (the API layer alone, one thread)");
    println!("  watch delivery, 1 watcher:    p50 {:>8.3} ms  p99 {:>8.3} ms", ms(p50_one), ms(p99_one));
    println!(
        "  watch delivery, {WATCHERS} watchers:  p50 {:>8.3} ms  p99 {:>8.3} ms   (p99 {:.2}x one watcher's)",
        ms(p50),
        ms(p99),
        ms(p99) / ms(p99_one).max(1e-6)
    );
    println!(
        "  heap per stored object:       {per_object:>10.0} bytes   ({:.2}x its {}-byte JSON; {:.2} KiB per 1 KiB of data)",
        per_object / sample.len() as f64,
        sample.len(),
        per_object / 1024.0
    );
    sim.shutdown().await;
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
