//! Graceful shutdown: one trigger, fired by SIGTERM/SIGINT in the binary or by a test, that
//! every long-running task listens to.

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// A cloneable shutdown trigger. Controllers stop taking new work when it fires; in-flight
/// reconciles finish within the grace period.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn trigger(&self) {
        self.0.cancel();
    }

    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves once the trigger fires. `Send + Sync + 'static`, as
    /// `Controller::graceful_shutdown_on` requires.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.0.clone().cancelled_owned()
    }
}

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
pub async fn termination_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
