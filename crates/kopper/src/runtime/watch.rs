//! Watches that start over from a fresh list when the API server can no longer serve the
//! resourceVersion they hold.
//!
//! kube's watcher resumes from the last resourceVersion it saw. An API server that can no
//! longer serve it answers `410 Gone`, or `504 Too large resource version` to a list at a
//! version it has not reached, and kube's watcher retries the same resume forever: the
//! caches stay as they were and kopper never sees the new state. This watcher drops its
//! state on those answers and lists again, so the reflectors behind it replace their caches.
//!
//! An API server that comes back with other data (restarted without its store, an etcd
//! restored from a backup) does not say so: a resume from a version it has not reached is
//! neither refused nor answered (kube-apiserver's watch cache stays quiet until its own
//! version passes it), and once its version has passed the one a watch holds, a resume
//! succeeds and serves only what came after. Either way kopper would never see the rest,
//! nor that objects it holds are gone. So a watch whose
//! resume found no API server there (the connection refused or never made, or a gateway
//! saying 502 or 503 for it) lists again too: the API server was down, and may be back with
//! other data. A watch cut off mid-stream, or whose resume met a connection closed under it
//! (a load balancer ending connections, a keep-alive timing out), just resumes, as before:
//! a list of every copy is not a price to pay for a connection reset.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// [`kube::runtime::watcher`] that lists again when its resourceVersion is stale, and says
/// which CRD to install when the API server does not serve the kind at all.
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher_of(api, config, not_served_message::<K>())
}

/// [`watcher`] of a kind known only at run time (an `Api<DynamicObject>`, say): `not_served`
/// is what to log when the API server does not serve it.
pub fn watcher_of<K>(
    api: Api<K>,
    config: watcher::Config,
    not_served: String,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let fresh = move || kube::runtime::watcher(api.clone(), config.clone()).boxed();
    let state = (fresh(), fresh, MissingKind::Unseen, not_served);
    futures::stream::unfold(state, |(mut stream, fresh, mut missing, not_served)| async move {
        let item = stream.next().await?;
        match &item {
            Err(error) if is_stale(error) => {
                tracing::warn!("the API server cannot resume this watch ({error}); listing again");
                stream = fresh();
            }
            Err(error) if resume_found_no_server(error) => {
                tracing::warn!(
                    "no API server was there to resume this watch ({error}); listing again once one \
                     answers, as it may be back with other data"
                );
                stream = fresh();
            }
            Err(error) if is_not_served(error) => {
                if missing == MissingKind::Unseen {
                    tracing::warn!("{not_served}");
                    missing = MissingKind::Reported;
                }
            }
            Err(_) => {}
            Ok(_) => missing = MissingKind::Unseen,
        }
        Some((item, (stream, fresh, missing, not_served)))
    })
}

/// Whether the missing-kind warning went out already (the watcher retries every few seconds;
/// once per outage is enough).
#[derive(Clone, Copy, PartialEq, Eq)]
enum MissingKind {
    Unseen,
    Reported,
}

/// Whether the API server answered 404 to the list or watch: it does not serve the kind.
fn is_not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// Names the CustomResourceDefinition a kind comes from and, for kopper's own, how to
/// install it.
fn not_served_message<K: Resource>() -> String
where
    K::DynamicType: Default,
{
    let kind_info = K::DynamicType::default();
    let (kind, group, plural) = (K::kind(&kind_info), K::group(&kind_info), K::plural(&kind_info));
    if group.is_empty() {
        return format!("the API server does not serve {kind} ({plural})");
    }
    let crd = format!("{plural}.{group}");
    let install = if group == crate::crds::GROUP {
        format!(
            "; install it with `kopper crds | kubectl apply --server-side -f -` (or the Helm chart, which \
             installs every kopper CRD): until then {kind} objects are not watched"
        )
    } else {
        String::new()
    };
    format!("the API server does not serve {kind}: CustomResourceDefinition {crd} is not installed{install}")
}

/// Whether resuming a watch failed because no API server was there: no connection could be
/// made, or a gateway in front answered 502 or 503 for it.
fn resume_found_no_server(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => matches!(status.code, 502 | 503),
        watcher::Error::WatchStartFailed(error) => could_not_connect(error),
        _ => false,
    }
}

/// Whether `error` comes from a connection that could not be made: refused, timed out, with
/// no route to the address, or ended while it was being set up (a TCP load balancer in
/// front of an API server that is down takes the connection and drops it in the TLS
/// handshake, which hyper-util reports as a connect error).
fn could_not_connect(error: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|error| error.is_connect()) {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::TimedOut
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Whether the API server says the resourceVersion a watch holds is one it cannot serve.
fn is_stale(error: &watcher::Error) -> bool {
    let status = match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.as_ref(),
        watcher::Error::WatchError(status) => status.as_ref(),
        _ => return false,
    };
    status.code == 410 || (status.code == 504 && status.message.contains("Too large resource version"))
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn status(code: u16, message: &str) -> Box<Status> {
        Box::new(Status { code, message: message.to_owned(), ..Status::default() })
    }

    /// A kopper custom resource, as any controller's.
    #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize)]
    #[kube(group = "kopper.dev", version = "v1alpha1", kind = "Widget", namespaced, schema = "disabled")]
    struct WidgetSpec {}

    #[test]
    fn a_missing_kopper_crd_is_named_with_the_command_that_installs_it() {
        let not_found = status(404, "the server could not find the requested resource");
        assert!(is_not_served(&watcher::Error::InitialListFailed(kube::Error::Api(not_found))));
        let message = not_served_message::<Widget>();
        assert!(message.contains("CustomResourceDefinition widgets.kopper.dev"), "{message}");
        assert!(message.contains("kopper crds | kubectl apply"), "{message}");
    }

    /// An error wrapped as kube's layers wrap a failed connection.
    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Wrapped(#[source] std::io::Error);

    fn resume_failed(kind: std::io::ErrorKind) -> watcher::Error {
        let wrapped = Wrapped(std::io::Error::from(kind));
        watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(wrapped)))
    }

    #[test]
    fn only_a_resume_that_found_no_server_means_listing_again() {
        assert!(resume_found_no_server(&resume_failed(std::io::ErrorKind::ConnectionRefused)));
        assert!(resume_found_no_server(&resume_failed(std::io::ErrorKind::TimedOut)));
        let gateway = watcher::Error::WatchStartFailed(kube::Error::Api(status(503, "no healthy upstream")));
        assert!(resume_found_no_server(&gateway));
        assert!(
            !resume_found_no_server(&resume_failed(std::io::ErrorKind::ConnectionReset)),
            "a connection closed under the resume: the server was there"
        );
        let forbidden = watcher::Error::WatchStartFailed(kube::Error::Api(status(403, "forbidden")));
        assert!(!resume_found_no_server(&forbidden), "an answer, handled as the status says");
        let refused = Wrapped(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let cut = watcher::Error::WatchFailed(kube::Error::Service(Box::new(refused)));
        assert!(!resume_found_no_server(&cut), "a watch cut mid-stream just resumes");
        let refused = Wrapped(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let listing = watcher::Error::InitialListFailed(kube::Error::Service(Box::new(refused)));
        assert!(!resume_found_no_server(&listing), "a watch that lists anyway");
    }

    #[test]
    fn a_resource_version_the_server_cannot_serve_means_listing_again() {
        let too_large = status(504, "Timeout: Too large resource version: 900, current: 12");
        assert!(is_stale(&watcher::Error::WatchStartFailed(kube::Error::Api(too_large))));
        assert!(is_stale(&watcher::Error::WatchError(status(410, "too old resource version"))));
        let timeout = status(504, "Timeout: request did not complete");
        assert!(!is_stale(&watcher::Error::WatchStartFailed(kube::Error::Api(timeout))));
        assert!(!is_stale(&watcher::Error::WatchError(status(500, "internal error"))));
    }
}
