//! The shared controller driver (`run_controller`) on kubesim: graceful shutdown lets
//! in-flight reconciles finish, and failures are retried with backoff and counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use common::{Cluster, DEADLINE, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kopper::runtime::{Context, ErrorCategory, Metrics, Settings, Shutdown, run_controller};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
#[error("the test asked this reconcile to fail")]
struct TransientError;

impl ErrorCategory for TransientError {
    fn category(&self) -> &'static str {
        "test_transient"
    }
}

async fn create_config_map(cluster: &Cluster, name: &str) {
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("test".to_owned(), "controller".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    api.create(&PostParams::default(), &config_map).await.unwrap();
}

fn context(cluster: &Cluster) -> Arc<Context> {
    Arc::new(Context::new(cluster.client.clone(), Arc::new(Metrics::default()), Settings::default()))
}

fn controller(cluster: &Cluster) -> Controller<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    Controller::new(api, watcher::Config::default().labels("test=controller"))
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_reconcile_finish() {
    let cluster = Cluster::start().await;
    create_config_map(&cluster, "slow").await;
    let (started, release, finished) =
        (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
    let shutdown = Shutdown::new();
    let reconcile = {
        let (started, release, finished) = (started.clone(), release.clone(), finished.clone());
        move |_: Arc<ConfigMap>, _: Arc<Context>| {
            let (started, release, finished) = (started.clone(), release.clone(), finished.clone());
            async move {
                started.notify_one();
                release.notified().await;
                finished.store(true, Ordering::SeqCst);
                Ok::<_, TransientError>(Action::await_change())
            }
        }
    };
    let driver = tokio::spawn(run_controller(
        "test",
        controller(&cluster),
        context(&cluster),
        shutdown.wait(),
        reconcile,
    ));
    tokio::time::timeout(DEADLINE, started.notified()).await.expect("the reconcile never started");

    shutdown.trigger();
    release.notify_one();

    tokio::time::timeout(DEADLINE, driver).await.expect("the controller did not stop").unwrap();
    assert!(finished.load(Ordering::SeqCst), "the in-flight reconcile was cut short");
}

/// With every permit taken, the reconciles waiting for one give up their turn at shutdown:
/// stopping waits for the running reconcile only, not for the backlog behind it.
#[tokio::test]
async fn shutdown_does_not_wait_for_reconciles_queued_behind_the_permits() {
    let cluster = Cluster::start().await;
    for name in ["first", "second", "third"] {
        create_config_map(&cluster, name).await;
    }
    let settings = Settings { concurrency: 1, ..Settings::default() };
    let ctx = Arc::new(Context::new(cluster.client.clone(), Arc::new(Metrics::default()), settings));
    let (started, release, runs) =
        (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(AtomicU32::new(0)));
    let shutdown = Shutdown::new();
    let reconcile = {
        let (started, release, runs) = (started.clone(), release.clone(), runs.clone());
        move |_: Arc<ConfigMap>, _: Arc<Context>| {
            let (started, release, runs) = (started.clone(), release.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                started.notify_one();
                release.notified().await;
                Ok::<_, TransientError>(Action::await_change())
            }
        }
    };
    let driver = tokio::spawn(run_controller("test", controller(&cluster), ctx, shutdown.wait(), reconcile));
    tokio::time::timeout(DEADLINE, started.notified()).await.expect("no reconcile started");

    shutdown.trigger();
    release.notify_one();
    tokio::time::timeout(DEADLINE, driver).await.expect("the controller did not stop").unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the reconcile holding the permit ran");
}

#[tokio::test]
async fn failed_reconciles_are_retried_and_counted_until_they_succeed() {
    let cluster = Cluster::start().await;
    create_config_map(&cluster, "flaky").await;
    let attempts = Arc::new(AtomicU32::new(0));
    let shutdown = Shutdown::new();
    let ctx = context(&cluster);
    let reconcile = {
        let attempts = attempts.clone();
        move |_: Arc<ConfigMap>, _: Arc<Context>| {
            let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if attempt <= 2 { Err(TransientError) } else { Ok(Action::await_change()) } }
        }
    };
    let driver =
        tokio::spawn(run_controller("test", controller(&cluster), ctx.clone(), shutdown.wait(), reconcile));

    eventually("a third, successful attempt", || async {
        (attempts.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains(r#"kopper_reconcile_errors_total{controller="test",category="test_transient"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"kopper_reconciles_total{controller="test"} 3"#), "{metrics}");
    shutdown.trigger();
    tokio::time::timeout(DEADLINE, driver).await.unwrap().unwrap();
}

#[tokio::test]
async fn readiness_waits_for_the_first_list() {
    let cluster = Cluster::start().await;
    let ctx = context(&cluster);
    let shutdown = Shutdown::new();
    ctx.readiness.register("test");
    assert!(!ctx.readiness.is_ready());
    let reconcile =
        |_: Arc<ConfigMap>, _: Arc<Context>| async { Ok::<_, TransientError>(Action::await_change()) };
    let driver =
        tokio::spawn(run_controller("test", controller(&cluster), ctx.clone(), shutdown.wait(), reconcile));

    eventually("the controller to be ready", || async { ctx.readiness.is_ready().then_some(()) }).await;
    shutdown.trigger();
    tokio::time::timeout(DEADLINE, driver).await.unwrap().unwrap();
}
