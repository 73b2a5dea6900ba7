//! Watches that start over from a fresh list when the API server can no longer serve the
//! resourceVersion they hold.
//!
//! kube's watcher resumes from the last resourceVersion it saw. An API server that lost its
//! state (restarted without its store, an etcd restored from a backup) answers such a resume
//! with `504 Too large resource version` (or `410 Gone` when starting the watch), and kube's
//! watcher retries the same resume forever: the caches stay as they were and kopper never
//! sees the new state. This watcher drops its state on those answers and lists again, so
//! the reflectors behind it replace their caches.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// [`kube::runtime::watcher`] that lists again when its resourceVersion is stale.
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let fresh = move || kube::runtime::watcher(api.clone(), config.clone()).boxed();
    futures::stream::unfold((fresh(), fresh), |(mut stream, fresh)| async move {
        let item = stream.next().await?;
        if let Err(error) = &item
            && is_stale(error)
        {
            tracing::warn!("the API server cannot resume this watch ({error}); listing again");
            stream = fresh();
        }
        Some((item, (stream, fresh)))
    })
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
