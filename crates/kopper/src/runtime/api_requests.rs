//! Counts every request kopper's client sends to the Kubernetes API by verb and status
//! code (`kopper_api_requests_total`): a tower layer on the client, so no call site can be
//! missed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::metrics::Metrics;

#[derive(Clone)]
pub struct ApiRequestsLayer {
    metrics: Arc<Metrics>,
}

impl ApiRequestsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for ApiRequestsLayer {
    type Service = ApiRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiRequests { inner, metrics: self.metrics.clone() }
    }
}

#[derive(Clone)]
pub struct ApiRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> Service<http::Request<B>> for ApiRequests<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = verb_of(request.method(), request.uri());
        let watch = (verb == "watch").then(|| watched(request.uri()));
        let probe = request.uri().path() == super::admin::API_READINESS_PATH;
        let metrics = self.metrics.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "error".to_owned(),
            };
            if probe {
                // The probe judges the answer itself: a 500 from `/readyz` is a server that
                // cannot serve.
                metrics.count_api_request(verb, &code);
            } else {
                metrics.api_request(verb, &code);
            }
            if let Some(watch) = watch {
                let answered = matches!(&result, Ok(response) if response.status().is_success());
                metrics.watch_request(&watch, !answered);
            }
            result
        })
    }
}

/// The Kubernetes verb of a request, as kube-apiserver's audit log names it.
pub fn verb_of(method: &http::Method, uri: &http::Uri) -> &'static str {
    match *method {
        http::Method::GET if uri.query().is_some_and(|query| query.split('&').any(|p| p == "watch=true")) => {
            "watch"
        }
        http::Method::GET if names_a_collection(uri.path()) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// What a watch request watches: its path and selectors, without the resourceVersion and
/// timeouts that change from one request of the same watch to the next.
fn watched(uri: &http::Uri) -> String {
    let selectors: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|parameter| {
            parameter.starts_with("labelSelector=") || parameter.starts_with("fieldSelector=")
        })
        .collect();
    if selectors.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), selectors.join("&"))
    }
}

/// Whether a resource path names a collection (`…/configmaps`) rather than one object
/// (`…/configmaps/x`, `…/namespaces/x`).
fn names_a_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|segment| !segment.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
        _ => return false,
    };
    let rest = match rest {
        ["namespaces", _namespace, inner @ ..] if !inner.is_empty() => inner,
        other => other,
    };
    rest.len() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(method: http::Method, uri: &str) -> &'static str {
        verb_of(&method, &uri.parse().unwrap())
    }

    #[test]
    fn verbs_follow_the_kubernetes_names() {
        assert_eq!(verb(http::Method::GET, "/api/v1/namespaces/a/configmaps"), "list");
        assert_eq!(verb(http::Method::GET, "/api/v1/namespaces/a/configmaps/x"), "get");
        assert_eq!(verb(http::Method::GET, "/api/v1/namespaces"), "list");
        assert_eq!(verb(http::Method::GET, "/api/v1/namespaces/a"), "get");
        assert_eq!(verb(http::Method::GET, "/apis/kopper.dev/v1alpha1/replicationrules"), "list");
        assert_eq!(verb(http::Method::GET, "/api/v1/configmaps?watch=true&resourceVersion=1"), "watch");
        assert_eq!(verb(http::Method::POST, "/api/v1/namespaces/a/configmaps"), "create");
        assert_eq!(verb(http::Method::PUT, "/api/v1/namespaces/a/configmaps/x"), "update");
        assert_eq!(verb(http::Method::PATCH, "/apis/kopper.dev/v1alpha1/replicationrules/r/status"), "patch");
        assert_eq!(verb(http::Method::DELETE, "/api/v1/namespaces/a/configmaps/x"), "delete");
        assert_eq!(verb(http::Method::GET, "/version"), "get");
    }

    #[test]
    fn a_watch_is_named_by_its_path_and_selectors_whatever_its_resource_version() {
        let watch = |uri: &str| watched(&uri.parse().unwrap());
        let first = watch(
            "/api/v1/configmaps?watch=true&resourceVersion=1&fieldSelector=metadata.name%3Da&timeoutSeconds=290",
        );
        let next = watch("/api/v1/configmaps?fieldSelector=metadata.name%3Da&watch=true&resourceVersion=9");
        assert_eq!(first, next);
        assert_eq!(first, "/api/v1/configmaps?fieldSelector=metadata.name%3Da");
        assert_ne!(first, watch("/api/v1/configmaps?watch=true&fieldSelector=metadata.name%3Db"));
        assert_eq!(watch("/api/v1/namespaces/a/pods?watch=true"), "/api/v1/namespaces/a/pods");
    }
}
