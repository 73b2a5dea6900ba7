//! Runs one kube-runtime Controller with kopper's error policy and metrics.
// stand-in: replaced by the runtime helper's version at merge

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::Controller;
use kube::runtime::controller::Action;

use super::context::{Context, ErrorCategory};

/// Drives `controller` until its shutdown trigger fires and its stream ends.
pub async fn run_controller<K, E, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    ctx: Arc<Context>,
    mut reconcile: F,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Action, E>> + Send + 'static,
{
    let error_policy = move |_object: Arc<K>, error: &E, ctx: Arc<Context>| {
        ctx.metrics.failed(name, error.category());
        tracing::warn!(controller = name, error = %error, "reconcile failed");
        if error.is_permanent() {
            Action::requeue(Duration::from_secs(300))
        } else {
            Action::requeue(Duration::from_secs(2))
        }
    };
    let timed = move |object: Arc<K>, ctx: Arc<Context>| {
        let started = Instant::now();
        let metrics = ctx.metrics.clone();
        let future = reconcile(object, ctx);
        async move {
            let result = future.await;
            metrics.reconciled(name, started.elapsed());
            result
        }
    };
    controller
        .run(timed, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(controller = name, error = %error, "controller event");
            }
        })
        .await;
}
