//! Fencing: a leader writes only while it can prove it still holds the lease.
//!
//! A leader learns that it lost the lease only when it next tries to renew. A process paused
//! (SIGSTOP, a long GC-like stall, a frozen VM) past its lease wakes up with reconciles
//! mid-flight and watch events queued, and would write on top of the new leader's work before
//! its renewal loop noticed. So every write to the API server goes through [`FenceLayer`],
//! which refuses it unless the monotonic clock is still before the deadline the last
//! successful renewal earned (the time the renewal was sent plus the renew deadline, which is
//! shorter than the lease duration). Requests to the Lease itself pass, so renewing and
//! releasing still work; reads pass too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Until when this replica may write. Shared by the client's [`FenceLayer`] and the leader
/// election that moves it.
#[derive(Debug)]
pub struct WriteFence {
    open_until: Mutex<Option<Instant>>,
    /// Without leader election the fence never closes.
    always_open: bool,
}

impl WriteFence {
    /// A fence for a replica without leader election: every write passes.
    pub fn open() -> Arc<Self> {
        Arc::new(Self { open_until: Mutex::new(None), always_open: true })
    }

    /// A fence for a replica that takes part in leader election: closed until the lease is
    /// taken.
    pub fn closed() -> Arc<Self> {
        Arc::new(Self { open_until: Mutex::new(None), always_open: false })
    }

    /// A renewal sent at some instant succeeded: writes may go on until `deadline`.
    pub fn open_until(&self, deadline: Instant) {
        let mut open_until = self.open_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *open_until = Some(open_until.map_or(deadline, |current| current.max(deadline)));
    }

    /// Leadership is lost or given back: no more writes.
    pub fn close(&self) {
        *self.open_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// Whether this fence can close at all (leader election is on).
    pub fn fences(&self) -> bool {
        !self.always_open
    }

    pub fn is_open(&self) -> bool {
        if self.always_open {
            return true;
        }
        let open_until = *self.open_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open_until.is_some_and(|deadline| Instant::now() < deadline)
    }
}

/// A write refused because this replica cannot prove it still leads.
#[derive(Debug, thiserror::Error)]
#[error("not written: this replica cannot prove it still holds the leader lease")]
pub struct Fenced;

/// The tower layer that applies a [`WriteFence`] to every request of a client.
#[derive(Clone)]
pub struct FenceLayer {
    fence: Arc<WriteFence>,
}

impl FenceLayer {
    pub fn new(fence: Arc<WriteFence>) -> Self {
        Self { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService { inner, fence: self.fence.clone() }
    }
}

#[derive(Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: Arc<WriteFence>,
}

/// Whether a request must pass the fence: it changes something, and not the Lease.
fn is_fenced_write(method: &http::Method, path: &str) -> bool {
    let writes = !matches!(*method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS);
    writes && !path.starts_with("/apis/coordination.k8s.io/")
}

impl<S, B, R> Service<http::Request<B>> for FencedService<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if is_fenced_write(request.method(), request.uri().path()) && !self.fence.is_open() {
            return Box::pin(std::future::ready(Err(Fenced.into())));
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reads_and_lease_writes_pass_a_closed_fence_other_writes_do_not() {
        assert!(!is_fenced_write(&http::Method::GET, "/api/v1/namespaces/a/configmaps"));
        assert!(!is_fenced_write(&http::Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/k/leases/l"));
        assert!(is_fenced_write(&http::Method::PATCH, "/api/v1/namespaces/a/pods/p"));
        assert!(is_fenced_write(&http::Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events"));
        let status = "/apis/kopper.dev/v1alpha1/namespaces/a/configmapsyncs/s/status";
        assert!(is_fenced_write(&http::Method::PATCH, status), "status writes are fenced like the rest");
        assert!(is_fenced_write(&http::Method::DELETE, "/api/v1/namespaces/a/secrets/s"));
    }

    #[tokio::test]
    async fn a_fence_is_open_only_until_the_deadline_the_last_renewal_earned() {
        let fence = WriteFence::closed();
        assert!(!fence.is_open(), "closed until the lease is taken");
        fence.open_until(Instant::now() + Duration::from_millis(30));
        assert!(fence.is_open());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(!fence.is_open(), "a leader that did not renew in time stops writing");
        fence.open_until(Instant::now() + Duration::from_secs(8));
        fence.close();
        assert!(!fence.is_open());
        assert!(WriteFence::open().is_open());
    }
}
