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

use super::metrics::Metrics;
use super::readiness::Readiness;

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

/// How often [`probe_api_server`] asks, given the threshold: a few times within it, so a
/// silent API server is noticed in time, and at least once in ten seconds.
pub fn probe_interval(api_unreachable_threshold: Duration) -> Duration {
    (api_unreachable_threshold / 3).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// The API server's own readiness endpoint, which [`probe_api_server`] asks.
pub const API_READINESS_PATH: &str = "/readyz";

/// Asks the API server whether it is ready (`GET /readyz`, open to every authenticated
/// client) every `every` until `stop`, so kopper's `/readyz` judges reachability from a
/// recent answer whatever else kopper is doing. Without it, readiness heard only from the
/// requests controllers happen to make: a replica whose only request for minutes had
/// failed (a transient 503, then a quiet cluster) read as unreachable, and one whose
/// requests hung on an API server that takes connections and never answers (a black-holed
/// route) read as fine, since a request that never ends records nothing. The API server's
/// `/readyz` fails while it cannot serve (etcd down, shutting down), which `/version` would
/// not show. The request is counted in `kopper_api_requests_total` (verb `get`); a 200 or a
/// 403 (the server is up, RBAC aside) counts as an answer, anything else or nothing within
/// `every` as a failure.
pub async fn probe_api_server(
    client: kube::Client,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: impl Future<Output = ()>,
) {
    let probing = async {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let request = http::Request::get(API_READINESS_PATH).body(Vec::new());
            let Ok(request) = request else { return };
            let answered = match tokio::time::timeout(every, client.request_text(request)).await {
                Ok(Ok(_)) => true,
                Ok(Err(kube::Error::Api(status))) => status.code == 403,
                Ok(Err(_)) => false,
                Err(_elapsed) => {
                    // Dropped before the request layer saw an answer: counted here.
                    metrics.count_api_request("get", "error");
                    false
                }
            };
            metrics.api_ready(answered);
        }
    };
    tokio::select! {
        () = probing => {}
        () = stop => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_is_asked_a_few_times_within_the_threshold_and_at_least_every_ten_seconds() {
        assert_eq!(probe_interval(Duration::from_secs(30)), Duration::from_secs(10));
        assert_eq!(probe_interval(Duration::from_secs(3)), Duration::from_secs(1));
        assert_eq!(probe_interval(Duration::from_millis(100)), Duration::from_secs(1));
        assert_eq!(probe_interval(Duration::from_secs(600)), Duration::from_secs(10));
    }
}
