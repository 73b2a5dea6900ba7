//! One module per controller, and the dispatch from `--controllers` names to them.

pub mod namespace_access;
pub mod pod_labeler;

use std::future::Future;
use std::sync::Arc;

use tracing::warn;

use crate::cli::ControllerName;
use crate::runtime::Context;

/// Runs one controller until `shutdown` resolves and its in-flight reconciles are done. An
/// error means the controller cannot go on; the operator then stops with it.
///
/// Each controller registers itself with [`Readiness`](crate::runtime::Readiness) under
/// [`ControllerName::as_str`]; a name not built into this binary is marked ready at once so
/// that it cannot hold `/readyz` down.
pub async fn run(
    name: ControllerName,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    match name {
        ControllerName::NamespaceAccess => namespace_access::run(ctx, shutdown).await,
        ControllerName::PodLabeler => {
            pod_labeler::run(ctx, shutdown).await;
            Ok(())
        }
        ControllerName::ConfigMapSync | ControllerName::ReplicationRule | ControllerName::Bucket => {
            warn!(controller = name.as_str(), "this controller is not part of this build yet; skipping it");
            ctx.readiness.mark_synced(name.as_str());
            Ok(())
        }
    }
}
