//! The admin server: `/metrics` for Prometheus, `/healthz` for liveness, `/readyz` for
//! readiness (true once every controller's caches have their first list).

use std::future::Future;
use std::sync::Arc;

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
}

pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_readiness))
        .with_state(AdminState { metrics, readiness })
}

/// Serves the admin endpoints on `listener` until `shutdown` resolves. The listener is bound
/// by the caller so that a busy port is reported at start-up.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, readiness)).with_graceful_shutdown(shutdown).await
}

async fn serve_metrics(State(state): State<AdminState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], state.metrics.encode())
}

async fn serve_readiness(State(state): State<AdminState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        let pending = state.readiness.pending().join(", ");
        (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for caches to sync: {pending}\n"))
    }
}
