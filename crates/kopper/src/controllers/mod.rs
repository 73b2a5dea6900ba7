//! One module per controller, and the dispatch from `--controllers` names to them.

pub mod bucket;
pub mod namespace_access;
pub mod pod_labeler;
pub mod replication;

use std::future::Future;
use std::sync::Arc;

use clap::ValueEnum;

use crate::runtime::Context;
use crate::runtime::metrics::Registration;

/// The controllers kopper can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum ControllerName {
    /// RoleBindings per namespace from NamespaceAccess policies.
    NamespaceAccess,
    /// Pods labelled with their own name on request.
    PodLabeler,
    /// ConfigMaps copied between namespaces by ConfigMapSync. Shares the
    /// replication engine with replication-rule and secret-sync: naming one runs all three.
    ConfigMapSync,
    /// ConfigMaps and Secrets replicated by ReplicationRule. Shares the
    /// replication engine with config-map-sync and secret-sync: naming one runs all three.
    ReplicationRule,
    /// A tenant's Secrets shared by SecretSync. Shares the replication engine with
    /// config-map-sync and replication-rule: naming one runs all three.
    SecretSync,
    /// Object-storage buckets and their credentials.
    Bucket,
}

impl ControllerName {
    pub const ALL: [ControllerName; 6] = [
        ControllerName::NamespaceAccess,
        ControllerName::PodLabeler,
        ControllerName::ConfigMapSync,
        ControllerName::ReplicationRule,
        ControllerName::SecretSync,
        ControllerName::Bucket,
    ];

    /// The name used on the command line, in metrics labels and in `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::NamespaceAccess => "namespace-access",
            ControllerName::PodLabeler => "pod-labeler",
            ControllerName::ConfigMapSync => "config-map-sync",
            ControllerName::ReplicationRule => "replication-rule",
            ControllerName::SecretSync => "secret-sync",
            ControllerName::Bucket => "bucket",
        }
    }
}

/// What a controller needs beyond the shared [`Context`]: its own settings, parsed from the
/// flags once by the operator and handed to it alone.
#[derive(Clone, Debug, Default)]
pub struct ControllerSettings {
    /// The Bucket controller's cluster id, S3 provider and intervals.
    pub buckets: bucket::BucketSettings,
}

/// Runs one controller until `shutdown` resolves and its in-flight reconciles are done. An
/// error means the controller cannot go on; the operator then stops with it.
///
/// ConfigMapSync, ReplicationRule and SecretSync are the front doors of one replication
/// engine: any of their names runs the engine with all three (see [`units`]). Each controller registers itself
/// with [`Readiness`](crate::runtime::Readiness) under [`ControllerName::as_str`].
pub async fn run(
    name: ControllerName,
    ctx: Arc<Context>,
    settings: ControllerSettings,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    match name {
        ControllerName::NamespaceAccess => namespace_access::run(ctx, shutdown).await,
        ControllerName::PodLabeler => {
            pod_labeler::run(ctx, shutdown).await;
            Ok(())
        }
        ControllerName::ConfigMapSync | ControllerName::ReplicationRule | ControllerName::SecretSync => {
            replication::run(ctx, shutdown).await
        }
        ControllerName::Bucket => bucket::run(ctx, settings.buckets, shutdown).await,
    }
}

/// The controllers' own metrics, registered under the `kopper_` prefix next to the runtime's.
pub fn register_metrics(registration: &mut Registration<'_>) {
    replication::register_metrics(registration);
    bucket::register_metrics(registration);
}

/// The controllers to start for the names enabled: the replication engine once, however
/// many of its front doors were named.
pub fn units(enabled: &[ControllerName]) -> Vec<ControllerName> {
    let mut units = Vec::new();
    for name in enabled {
        let unit = match name {
            ControllerName::ConfigMapSync | ControllerName::SecretSync => ControllerName::ReplicationRule,
            other => *other,
        };
        if !units.contains(&unit) {
            units.push(unit);
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_engine_starts_once_for_either_front_door() {
        use ControllerName::*;
        assert_eq!(units(&[ConfigMapSync, ReplicationRule, PodLabeler]), vec![ReplicationRule, PodLabeler]);
        assert_eq!(units(&[ConfigMapSync]), vec![ReplicationRule]);
        assert_eq!(units(&[SecretSync, ConfigMapSync]), vec![ReplicationRule]);
        assert_eq!(units(&[NamespaceAccess]), vec![NamespaceAccess]);
    }
}
