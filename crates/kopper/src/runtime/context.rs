//! What every reconcile gets: cheap, shared handles and nothing that must be looked up again.

use std::sync::Arc;

use super::events::{Recorder, Reporter};
use super::metrics::Metrics;
use super::readiness::Readiness;
use crate::tenancy::DestinationPolicy;

/// Handles shared by all controllers. Built once at start-up; cloning the `Arc` is the only
/// cost a reconcile pays to reach the client, the event recorder or the metrics.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
    /// Which controllers have synced their caches; read by `/readyz`.
    pub readiness: Readiness,
    /// The namespaces, one cache for every controller that follows them.
    pub namespaces: Arc<super::namespaces::SharedNamespaces>,
    /// Whether this replica may write; the client checks it on every write to the API
    /// server, and writes outside the cluster (S3, IAM) must check it too.
    pub fence: Arc<super::fence::WriteFence>,
}

/// Operator-wide settings the controllers read. Parsed from flags once; a reconcile never
/// reads the environment itself.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The base of every controller's field manager (`kopper`): see [`Settings::field_manager_for`].
    pub field_manager: String,
    /// Annotation that asks the pod labeler for a label.
    pub pod_label_annotation: String,
    /// Label the pod labeler writes, holding the pod's own name.
    pub pod_name_label: String,
    /// Whether a ConfigMapSync may read from a namespace other than its own.
    pub allow_cross_namespace_sources: bool,
    /// Reconciles each controller runs at once (0: unbounded).
    pub concurrency: u16,
    /// Where tenants' resources may write: protected namespaces and destination consent.
    pub destinations: DestinationPolicy,
    /// The kinds besides ConfigMap and Secret that ReplicationRules may copy.
    pub replicate_kinds: crate::kinds::AllowedKinds,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            field_manager: "kopper".into(),
            pod_label_annotation: "kopper.dev/add-pod-name-label".into(),
            pod_name_label: "kopper.dev/pod-name".into(),
            allow_cross_namespace_sources: false,
            concurrency: 4,
            destinations: DestinationPolicy::default(),
            replicate_kinds: crate::kinds::AllowedKinds::default(),
        }
    }
}

impl Settings {
    /// The field manager `controller` writes with, e.g. `kopper/namespace-access`.
    pub fn field_manager_for(&self, controller: &str) -> String {
        super::field_manager::for_controller(&self.field_manager, controller)
    }
}

impl Context {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>, settings: Settings) -> Self {
        let recorder =
            Recorder::new(client.clone(), Reporter { controller: "kopper".into(), instance: None });
        let namespaces = Arc::new(super::namespaces::SharedNamespaces::new(client.clone(), metrics.clone()));
        Self {
            client,
            recorder,
            namespaces,
            metrics,
            settings: Arc::new(settings),
            readiness: Readiness::default(),
            fence: super::fence::WriteFence::open(),
        }
    }

    /// The same context whose writes outside the cluster pass `fence` (the one the client's
    /// writes pass).
    pub fn with_fence(self, fence: Arc<super::fence::WriteFence>) -> Self {
        Self { fence, ..self }
    }
}

/// Every controller's error enum implements this, so metrics and Warning Events can name a
/// bounded category instead of a free-form message.
pub trait ErrorCategory {
    /// A short, fixed string such as `kube_api`, `invalid_spec`, `conflict`.
    fn category(&self) -> &'static str;
    /// Permanent errors (bad spec) are reported in status and wait for the object to change;
    /// transient ones are retried with exponential backoff.
    fn is_permanent(&self) -> bool {
        false
    }
}
