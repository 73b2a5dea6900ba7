//! Pod labeler: a pod annotated `<annotation>: "true"` carries the label
//! `<label>: <its own name>`; without the annotation, the label is removed.
//!
//! Pods are watched as metadata only (`PartialObjectMetadata`), so the cache holds names,
//! labels and annotations rather than whole pod specs and statuses. Changes are JSON merge
//! patches on `metadata.labels` alone: they never conflict with the kubelet's status writes
//! and need no resourceVersion.

pub mod desired;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::predicates;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, Predicate, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

use crate::runtime::{Context, ErrorCategory, run_controller};
use desired::{Keys, LabelChange, NameTooLongForLabel, label_change};

/// Name in metrics, logs, `/readyz` and `--controllers`.
pub const NAME: &str = "pod-labeler";

type PodMeta = PartialObjectMeta<Pod>;

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
    let (reader, writer) = reflector::store::<PodMeta>();
    // Only label and annotation changes matter; the kubelet's frequent status updates bump
    // the pod's resourceVersion and would otherwise each cause a reconcile.
    let pods = crate::runtime::watch::watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        // managedFields are most of a pod's metadata and the labeler never reads them.
        .modify(|pod| pod.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::labels.combine(predicates::annotations), Default::default());
    let controller = Controller::for_stream(pods, reader).with_config(crate::runtime::controller::config());
    run_controller(NAME, controller, ctx, shutdown, reconcile).await;
}

async fn reconcile(pod: Arc<PodMeta>, ctx: Arc<Context>) -> Result<Action, Error> {
    if pod.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let settings = &ctx.settings;
    let keys = Keys { annotation: &settings.pod_label_annotation, label: &settings.pod_name_label };
    let change = match label_change(&pod.name_any(), pod.annotations(), pod.labels(), keys) {
        Ok(Some(change)) => change,
        Ok(None) => return Ok(Action::await_change()),
        Err(invalid) => {
            let note = invalid.to_string();
            publish_event(&ctx, &pod, EventType::Warning, "PodNameLabelInvalid", note).await;
            return Err(invalid.into());
        }
    };
    if patch_label(&ctx, &pod, keys.label, &change).await? {
        ctx.metrics.wrote(NAME);
        let (reason, note) = match &change {
            LabelChange::Set(value) => ("PodNameLabelSet", format!("Set label {}={value}", keys.label)),
            LabelChange::Remove => ("PodNameLabelRemoved", format!("Removed label {}", keys.label)),
        };
        publish_event(&ctx, &pod, EventType::Normal, reason, note).await;
    }
    Ok(Action::await_change())
}

/// Writes the change; `Ok(false)` when the pod is already gone, which is not an error.
async fn patch_label(ctx: &Context, pod: &PodMeta, label: &str, change: &LabelChange) -> Result<bool, Error> {
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
async fn publish_event(ctx: &Context, pod: &PodMeta, type_: EventType, reason: &str, note: String) {
    let event =
        Event { type_, reason: reason.into(), note: Some(note), action: "Label".into(), secondary: None };
    if let Err(error) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
        warn!(pod = %ObjectRef::from_obj(pod), "could not record an Event: {error}");
    }
}
