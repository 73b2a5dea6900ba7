//! Which pods the labeler keeps in memory: only those whose labels it still has to change,
//! and of those only what its decision reads.
//!
//! Every watch event carries a pod's whole metadata, so the decision for a pod can be taken
//! from the event itself. A pod whose labels are already right needs nothing kept: its next
//! change comes with its next event. So the labeler's store holds the pods with work pending
//! (to label, to unlabel, or refused), each as a [`TrackedPod`], and a cluster of 150,000
//! labelled pods costs the labeler no memory per pod. A relist looks at every pod again.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde::Deserialize;

use super::desired::{Keys, LabelChange, NameTooLongForLabel, label_change, wants_label};

/// A pod as the API server sends it to the labeler: metadata only.
pub type PodMeta = PartialObjectMeta<Pod>;

/// What the labeler keeps of a pod: its name, namespace and uid (to patch it and to record
/// Events on it), and the facts its decision reads.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct TrackedPod {
    metadata: ObjectMeta,
    wants_label: bool,
    label: Option<String>,
    deleting: bool,
}

impl TrackedPod {
    pub fn observe(pod: &PodMeta, keys: Keys<'_>) -> Self {
        let metadata = ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        };
        Self {
            metadata,
            wants_label: wants_label(pod.annotations(), keys),
            label: pod.labels().get(keys.label).cloned(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The change this pod's labels need; none for a pod being deleted.
    pub fn change(&self) -> Result<Option<LabelChange>, NameTooLongForLabel> {
        if self.deleting {
            return Ok(None);
        }
        label_change(
            self.metadata.name.as_deref().unwrap_or_default(),
            self.wants_label,
            self.label.as_deref(),
        )
    }

    fn has_work(&self) -> bool {
        !matches!(self.change(), Ok(None))
    }
}

impl Resource for TrackedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the labeler's store and queue hear of a watch event: a pod with work pending is
/// kept (or replaced, when what the decision reads changed); a pod with none is let go, and
/// dropped from the store if it was held. `held` looks a pod up in the store as it is.
/// `None`: nothing to tell them.
pub fn keep_pending(
    event: Event<PodMeta>,
    keys: Keys<'_>,
    held: impl Fn(&ObjectRef<TrackedPod>) -> Option<Arc<TrackedPod>>,
) -> Option<Event<TrackedPod>> {
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(pod) => {
            Some(TrackedPod::observe(&pod, keys)).filter(TrackedPod::has_work).map(Event::InitApply)
        }
        Event::Apply(pod) => {
            let pod = TrackedPod::observe(&pod, keys);
            let before = held(&ObjectRef::from_obj(&pod));
            match (pod.has_work(), before) {
                (true, Some(before)) if *before == pod => None,
                (true, _) => Some(Event::Apply(pod)),
                (false, Some(_)) => Some(Event::Delete(pod)),
                (false, None) => None,
            }
        }
        Event::Delete(pod) => {
            let pod = TrackedPod::observe(&pod, keys);
            held(&ObjectRef::from_obj(&pod)).is_some().then_some(Event::Delete(pod))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const KEYS: Keys<'static> =
        Keys { annotation: "kopper.dev/add-pod-name-label", label: "kopper.dev/pod-name" };

    fn pod(name: &str, annotated: bool, label: Option<&str>) -> PodMeta {
        let mut pod = PodMeta::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("team-a".into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod.metadata.resource_version = Some("7".into());
        pod.labels_mut().insert("app".into(), "web".into());
        if annotated {
            pod.annotations_mut().insert(KEYS.annotation.into(), "true".into());
        }
        if let Some(label) = label {
            pod.labels_mut().insert(KEYS.label.into(), label.into());
        }
        pod
    }

    /// A store as the reflector keeps it, fed only what `keep_pending` lets through.
    #[derive(Default)]
    struct Held(HashMap<ObjectRef<TrackedPod>, Arc<TrackedPod>>);

    impl Held {
        fn hear(&mut self, event: Event<PodMeta>) -> Option<Event<TrackedPod>> {
            let kept = keep_pending(event, KEYS, |key| self.0.get(key).cloned());
            match &kept {
                Some(Event::Apply(pod) | Event::InitApply(pod)) => {
                    self.0.insert(ObjectRef::from_obj(pod), Arc::new(pod.clone()));
                }
                Some(Event::Delete(pod)) => {
                    self.0.remove(&ObjectRef::from_obj(pod));
                }
                _ => {}
            }
            kept
        }
    }

    #[test]
    fn labelled_and_unannotated_pods_are_not_kept() {
        let mut held = Held::default();
        assert!(held.hear(Event::InitApply(pod("done", true, Some("done")))).is_none());
        assert!(held.hear(Event::InitApply(pod("plain", false, None))).is_none());
        assert!(held.hear(Event::Apply(pod("plain-too", false, None))).is_none());
        assert!(held.0.is_empty());
    }

    #[test]
    fn a_pod_to_label_is_kept_with_only_what_the_decision_reads() {
        let mut held = Held::default();
        let Some(Event::Apply(kept)) = held.hear(Event::Apply(pod("web-1", true, None))) else {
            panic!("a pod asking for the label is kept");
        };
        assert_eq!(kept.change(), Ok(Some(LabelChange::Set("web-1".into()))));
        assert_eq!(kept.meta().uid.as_deref(), Some("uid-web-1"), "Events name the pod by uid");
        assert!(kept.meta().labels.is_none() && kept.meta().annotations.is_none());
        assert!(kept.meta().resource_version.is_none());
    }

    #[test]
    fn a_pod_is_let_go_once_its_label_is_right() {
        let mut held = Held::default();
        held.hear(Event::Apply(pod("web-1", true, None)));
        assert!(matches!(held.hear(Event::Apply(pod("web-1", true, Some("web-1")))), Some(Event::Delete(_))));
        assert!(held.0.is_empty());
    }

    #[test]
    fn a_change_the_decision_does_not_read_wakes_nothing() {
        let mut held = Held::default();
        let long = "p".repeat(64);
        held.hear(Event::Apply(pod(&long, true, None)));
        let mut status_update = pod(&long, true, None);
        status_update.metadata.resource_version = Some("8".into());
        assert!(held.hear(Event::Apply(status_update)).is_none(), "a refused pod is not retried hot");
        assert!(matches!(held.hear(Event::Apply(pod(&long, false, None))), Some(Event::Delete(_))));
    }

    #[test]
    fn a_label_to_remove_and_a_pod_being_deleted() {
        let mut held = Held::default();
        let Some(Event::Apply(kept)) = held.hear(Event::Apply(pod("web-1", false, Some("web-1")))) else {
            panic!("a pod whose label must go is kept");
        };
        assert_eq!(kept.change(), Ok(Some(LabelChange::Remove)));
        let mut deleting = pod("web-1", false, Some("web-1"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(matches!(held.hear(Event::Apply(deleting)), Some(Event::Delete(_))));
        assert!(held.hear(Event::Delete(pod("web-1", false, None))).is_none(), "not held any more");
    }
}
