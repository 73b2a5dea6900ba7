//! The admin server: `/metrics` for Prometheus, `/healthz` for liveness, `/readyz` for
//! readiness (true once every controller's caches have their first list, and false while
//! the API server has not answered for longer than a threshold: a replica that cannot see
//! the cluster is not doing its work, whatever its caches say).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use super::controller::Readiness;
use super::metrics::Metrics;

/// What the OpenMetrics text format is served as, per the Prometheus exposition docs.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
    api_unreachable_threshold: Duration,
}

pub fn router(metrics: Arc<Metrics>, readiness: Readiness, api_unreachable_threshold: Duration) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_readiness))
        .with_state(AdminState { metrics, readiness, api_unreachable_threshold })
}

/// Serves the admin endpoints on `listener` until `shutdown` resolves. The listener is bound
/// by the caller so that a busy port is reported at start-up.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    api_unreachable_threshold: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, readiness, api_unreachable_threshold))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The classic text format, for clients that do not ask for OpenMetrics.
const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics when the scraper asks for it (Prometheus does), the classic text format
/// otherwise (curl, `promtool check metrics`).
async fn serve_metrics(State(state): State<AdminState>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|value| value.to_str().ok()).unwrap_or_default();
    if accept.contains("application/openmetrics-text") {
        ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], state.metrics.encode())
    } else {
        ([(header::CONTENT_TYPE, CLASSIC_CONTENT_TYPE)], state.metrics.encode_classic())
    }
}

async fn serve_readiness(State(state): State<AdminState>) -> impl IntoResponse {
    if let Some(unreachable) = state.metrics.api_unreachable_for()
        && unreachable >= state.api_unreachable_threshold
    {
        let message = format!("the Kubernetes API server has not answered for {}s\n", unreachable.as_secs());
        return (StatusCode::SERVICE_UNAVAILABLE, message);
    }
    if let Some((watch, failing_for)) = state.metrics.watch_failing_longest()
        && failing_for >= state.api_unreachable_threshold
    {
        let message = format!("a watch has been refused for {}s: {watch}\n", failing_for.as_secs());
        return (StatusCode::SERVICE_UNAVAILABLE, message);
    }
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        let pending = state.readiness.pending().join(", ");
        (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for caches to sync: {pending}\n"))
    }
}
