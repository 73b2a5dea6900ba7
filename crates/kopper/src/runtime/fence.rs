//! Fencing: a leader writes only while it can prove it still holds the lease.
//!
//! A leader learns that it lost the lease only when it next tries to renew. A process paused
//! (SIGSTOP, a long stall) past its lease wakes up with reconciles
//! mid-flight and watch events queued, and would write on top of the new leader's work before
//! its renewal loop noticed. So every write to the API server goes through [`FenceLayer`],
//! which refuses it unless the monotonic clock is still before the deadline the last
//! successful renewal earned (the time the renewal was sent plus the renew deadline, which is
//! shorter than the lease duration). A write let through is abandoned once the fence closes
//! (no renewal moved the deadline on) before it is answered: one still waiting for a
//! connection (to a server that is slow to accept, or across a partition) is never sent
//! after that. A write already sent cannot be called back: its bytes may sit in the
//! kernel's buffers across a partition that heals later, or the server may apply it late.
//! Fencing narrows that window to writes in flight at the deadline; closing it would take
//! fencing tokens the Kubernetes API does not have. Requests to the Lease itself pass, so
//! renewing and releasing still work; reads pass too.

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

    /// Until when a write made now may be sent: `Ok(None)` without leader election (no
    /// limit), the deadline the last renewal earned while it lasts, [`Fenced`] after it.
    pub fn write_deadline(&self) -> Result<Option<Instant>, Fenced> {
        if self.always_open {
            return Ok(None);
        }
        let open_until = *self.open_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match open_until {
            Some(deadline) if Instant::now() < deadline => Ok(Some(deadline)),
            _ => Err(Fenced),
        }
    }
}

impl WriteFence {
    /// Waits for `write`, let through while the fence was open until `deadline` (`None`: no
    /// limit, as [`Self::write_deadline`] says), for as long as the fence stays open: a
    /// renewal that succeeds meanwhile moves the deadline on (a slow admission webhook, or a
    /// bucket emptied in many batches, outlasts one renewal), and the write is abandoned only
    /// once the fence closed or its deadline passed with no renewal.
    pub async fn while_open<F: Future>(
        &self,
        deadline: Option<Instant>,
        write: F,
    ) -> Result<F::Output, Fenced> {
        let Some(mut deadline) = deadline else { return Ok(write.await) };
        let mut write = std::pin::pin!(write);
        loop {
            match tokio::time::timeout_at(deadline, write.as_mut()).await {
                Ok(output) => return Ok(output),
                Err(_elapsed) => match self.write_deadline()? {
                    Some(renewed) => deadline = renewed,
                    None => return Ok(write.await),
                },
            }
        }
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
    S::Error: Into<BoxError> + Send,
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
        let deadline = if is_fenced_write(request.method(), request.uri().path()) {
            match self.fence.write_deadline() {
                Ok(deadline) => deadline,
                Err(fenced) => return Box::pin(std::future::ready(Err(fenced.into()))),
            }
        } else {
            None
        };
        let response = self.inner.call(request);
        let fence = self.fence.clone();
        // Dropping the response future cancels a request not yet written (hyper checks before
        // it writes), so a late write is never sent.
        Box::pin(async move { fence.while_open(deadline, response).await?.map_err(Into::into) })
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
        assert!(fence.write_deadline().is_err(), "closed until the lease is taken");
        fence.open_until(Instant::now() + Duration::from_millis(30));
        assert!(fence.write_deadline().is_ok());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(fence.write_deadline().is_err(), "a leader that did not renew in time stops writing");
        fence.open_until(Instant::now() + Duration::from_secs(8));
        fence.close();
        assert!(fence.write_deadline().is_err());
        assert_eq!(WriteFence::open().write_deadline().ok(), Some(None), "open, with no deadline");
    }

    /// An inner service whose answer takes `delay`, and a flag set once it has answered.
    fn slow_service(
        delay: Duration,
    ) -> (
        impl Service<http::Request<()>, Response = http::Response<()>, Error = BoxError, Future: Send + 'static>,
        Arc<std::sync::atomic::AtomicBool>,
    ) {
        let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = answered.clone();
        let service = tower::service_fn(move |_request: http::Request<()>| {
            let flag = flag.clone();
            async move {
                tokio::time::sleep(delay).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, BoxError>(http::Response::new(()))
            }
        });
        (service, answered)
    }

    fn request(method: http::Method, path: &str) -> http::Request<()> {
        http::Request::builder().method(method).uri(path).body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_not_answered_by_the_deadline_is_abandoned_and_reads_wait_as_long_as_they_take() {
        let fence = WriteFence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(8));
        let (inner, answered) = slow_service(Duration::from_secs(30));
        let mut service = FenceLayer::new(fence).layer(inner);

        let started = Instant::now();
        let write = service.call(request(http::Method::POST, "/api/v1/namespaces/a/configmaps")).await;
        let error = write.expect_err("a write that outlives the lease is not waited for");
        assert!(error.is::<Fenced>(), "{error}");
        assert_eq!(started.elapsed(), Duration::from_secs(8), "given up at the deadline");
        assert!(!answered.load(std::sync::atomic::Ordering::SeqCst));

        let read = service.call(request(http::Method::GET, "/api/v1/namespaces/a/configmaps")).await;
        assert!(read.is_ok(), "reads have no deadline");
        assert!(answered.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_write_is_waited_for_while_renewals_keep_the_fence_open() {
        let fence = WriteFence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(8));
        let renewing = fence.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            renewing.open_until(Instant::now() + Duration::from_secs(10));
        });
        let (inner, answered) = slow_service(Duration::from_secs(12));
        let mut service = FenceLayer::new(fence).layer(inner);

        let write = service.call(request(http::Method::POST, "/api/v1/namespaces/a/configmaps")).await;

        assert!(write.is_ok(), "the renewal at 5 s kept the fence open until 15 s");
        assert!(answered.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn without_leader_election_a_slow_write_is_waited_for() {
        let (inner, answered) = slow_service(Duration::from_secs(30));
        let mut service = FenceLayer::new(WriteFence::open()).layer(inner);

        let write = service.call(request(http::Method::PUT, "/api/v1/namespaces/a/configmaps/c")).await;

        assert!(write.is_ok() && answered.load(std::sync::atomic::Ordering::SeqCst));
    }
}
