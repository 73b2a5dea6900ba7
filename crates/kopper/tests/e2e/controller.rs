//! The shared controller driver (`run_controller`) on kubesim: graceful shutdown lets
//! in-flight reconciles finish, and failures are retried with backoff and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::common::{Cluster, DEADLINE, eventually};
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

/// With one permit, the reconcile queued behind a long one waits for it. An update made
/// meanwhile is what that reconcile sees when its turn comes, not the version it was queued
/// with.
#[tokio::test]
async fn a_reconcile_that_waited_for_its_turn_sees_the_object_as_it_is_now() {
    let cluster = Cluster::start().await;
    for name in ["first", "second"] {
        create_config_map(&cluster, name).await;
    }
    let settings = Settings { concurrency: 1, ..Settings::default() };
    let ctx = Arc::new(Context::new(cluster.client.clone(), Arc::new(Metrics::default()), settings));
    let holder = Arc::new(std::sync::Mutex::new(None::<String>));
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, Option<String>)>::new()));
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let shutdown = Shutdown::new();
    let reconcile = {
        let (holder, seen, started, release) =
            (holder.clone(), seen.clone(), started.clone(), release.clone());
        move |config_map: Arc<ConfigMap>, _: Arc<Context>| {
            let (holder, seen, started, release) =
                (holder.clone(), seen.clone(), started.clone(), release.clone());
            async move {
                let name = config_map.metadata.name.clone().unwrap_or_default();
                let version = config_map.data.as_ref().and_then(|data| data.get("version").cloned());
                seen.lock().unwrap().push((name.clone(), version));
                let first_turn = holder.lock().unwrap().get_or_insert_with(|| name.clone()) == &name
                    && seen.lock().unwrap().len() == 1;
                if first_turn {
                    started.notify_one();
                    release.notified().await;
                }
                Ok::<_, TransientError>(Action::await_change())
            }
        }
    };
    let controller = controller(&cluster);
    let store = controller.store();
    let driver = tokio::spawn(run_controller("test", controller, ctx, shutdown.wait(), reconcile));
    tokio::time::timeout(DEADLINE, started.notified()).await.expect("no reconcile started");
    let waiting = if holder.lock().unwrap().as_deref() == Some("first") { "second" } else { "first" };

    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let patch = serde_json::json!({"data": {"version": "2"}});
    api.patch(waiting, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    let waiting_ref = kube::runtime::reflector::ObjectRef::new(waiting).within("default");
    eventually("the controller's cache to hold the update", || async {
        store.get(&waiting_ref).filter(|cm| cm.data.as_ref().is_some_and(|d| d.contains_key("version")))
    })
    .await;
    release.notify_one();

    eventually("the waiting object to be reconciled", || async {
        seen.lock().unwrap().iter().find(|(name, _)| name == waiting).cloned()
    })
    .await;
    let first_look = seen.lock().unwrap().iter().find(|(name, _)| name == waiting).cloned().unwrap();
    assert_eq!(first_look.1.as_deref(), Some("2"), "it reconciled the version it was queued with: {seen:?}");
    shutdown.trigger();
    tokio::time::timeout(DEADLINE, driver).await.unwrap().unwrap();
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
