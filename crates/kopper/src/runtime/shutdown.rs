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

/// Installs SIGTERM and SIGINT handlers now, and returns a future that resolves on the first
/// of them. Installing eagerly matters: a signal that arrives before the handlers exist
/// kills the process with the default action instead of shutting it down gracefully.
#[cfg(unix)]
pub fn termination_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(not(unix))]
pub fn termination_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
