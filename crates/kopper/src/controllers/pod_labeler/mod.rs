//! Pod labeler: a pod annotated `<annotation>: "true"` carries the label
//! `<label>: <its own name>`; without the annotation, the label is removed.
//!
//! Pods are watched as metadata only (`PartialObjectMetadata`), and only the pods with work
//! pending are kept, each as the few facts the decision reads ([`pending`]): memory does not
//! grow with the pods already labelled. Changes are JSON merge patches on `metadata.labels`
//! alone: they never conflict with the kubelet's status writes and need no resourceVersion.

pub mod desired;
pub mod pending;

use std::future::Future;
use std::sync::Arc;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::debug;

use crate::runtime::controller::run_admitted_controller;
use crate::runtime::events::EventType;
use crate::runtime::{Context, ErrorCategory};
use desired::{Keys, LabelChange, NameTooLongForLabel};
use pending::{PodMeta, TrackedPod, keep_pending};

/// Name in metrics, logs, `/readyz` and `--controllers`.
pub const NAME: &str = "pod-labeler";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    NameTooLong(#[from] NameTooLongForLabel),
    #[error("patching the pod's labels failed: {0}")]
    Patch(#[source] kube::Error),
}

impl ErrorCategory for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::NameTooLong(_) => "invalid_pod_name",
            Error::Patch(_) => "kube_api",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, Error::NameTooLong(_))
    }
}

/// Runs the pod labeler until `shutdown` resolves and in-flight patches are done.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    // `Api<PartialObjectMeta<_>>` makes kube ask for metadata-only lists and watches.
    let api = Api::<PodMeta>::all(ctx.client.clone());
    let (reader, writer) = reflector::store::<TrackedPod>();
    let held = reader.clone();
    let settings = ctx.settings.clone();
    let pods = crate::runtime::watch::watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .try_filter_map(move |event| {
            let keys = Keys { annotation: &settings.pod_label_annotation, label: &settings.pod_name_label };
            std::future::ready(Ok(keep_pending(event, keys, |pod| held.get(pod))))
        })
        .reflect(writer);
    // Every pod of the cluster can ask for a label at once (a relist, a new rollout of every
    // workload): they wait in the admission queue, not as started reconciles.
    run_admitted_controller(NAME, pods, reader, ctx, shutdown, reconcile).await;
}

async fn reconcile(pod: Arc<TrackedPod>, ctx: Arc<Context>) -> Result<Action, Error> {
    let label = ctx.settings.pod_name_label.as_str();
    let change = match pod.change() {
        Ok(Some(change)) => change,
        Ok(None) => return Ok(Action::await_change()),
        Err(invalid) => {
            let note = invalid.to_string();
            publish_event(&ctx, &pod, EventType::Warning, "PodNameLabelInvalid", note).await;
            return Err(invalid.into());
        }
    };
    if patch_label(&ctx, &pod, label, &change).await? {
        ctx.metrics.wrote(NAME);
        let (reason, note) = match &change {
            LabelChange::Set(value) => ("PodNameLabelSet", format!("Set label {label}={value}")),
            LabelChange::Remove => ("PodNameLabelRemoved", format!("Removed label {label}")),
        };
        publish_event(&ctx, &pod, EventType::Normal, reason, note).await;
    }
    Ok(Action::await_change())
}

/// Writes the change; `Ok(false)` when the pod is already gone, which is not an error.
async fn patch_label(
    ctx: &Context,
    pod: &TrackedPod,
    label: &str,
    change: &LabelChange,
) -> Result<bool, Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let value = match change {
        LabelChange::Set(value) => json!(value),
        LabelChange::Remove => serde_json::Value::Null,
    };
    let patch = Patch::Merge(json!({ "metadata": { "labels": { label: value } } }));
    let params =
        PatchParams { field_manager: Some(ctx.settings.field_manager_for(NAME)), ..PatchParams::default() };
    match api.patch(&pod.name_any(), &params, &patch).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            debug!(pod = %ObjectRef::from_obj(pod), "pod is gone; nothing to label");
            Ok(false)
        }
        Err(error) => Err(Error::Patch(error)),
    }
}

/// An Event on the pod, so `kubectl describe pod` shows why its labels changed (or could
/// not). Failing to record it does not fail the reconcile: the label itself is what matters.
async fn publish_event(ctx: &Context, pod: &TrackedPod, type_: EventType, reason: &str, note: String) {
    ctx.recorder.record(&pod.object_ref(&()), type_, "Label", reason, note).await;
}
