//! Events on the objects kopper acts on, with a bounded memory of the ones it sent.
//!
//! An Event repeated soon after the first (same object, type, reason, action) becomes a
//! series on that Event, counted, rather than a new object, as `kubectl describe` expects.
//! kube's own recorder remembers every Event it sent for six minutes and scans all of them
//! on each publish: a pod labeler that labels 75,000 pods after a restart keeps 75,000
//! Events in memory and spends a pass over them per pod. Here the memory holds at most
//! [`RECENT_EVENTS`] Events, oldest forgotten first; a repeat of a forgotten one starts a new
//! Event, which is what kube's recorder does after six minutes anyway.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;

/// Events remembered for their series, at most; the bound on the recorder's memory.
pub const RECENT_EVENTS: usize = 1024;

/// How long a repeat still joins the first Event's series (kube's recorder uses the same).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Publishes Events for every controller; cheap to clone (the memory is shared).
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    recent: Arc<Mutex<RecentEvents>>,
}

impl Recorder {
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self { client, reporter, recent: Arc::new(Mutex::new(RecentEvents::new(RECENT_EVENTS))) }
    }

    /// Creates the Event in `regarding`'s namespace, or counts it on the series of the same
    /// Event sent within [`SERIES_WINDOW`].
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = EventKey::of(event, regarding);
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let events = Api::<K8sEvent>::namespaced(self.client.clone(), &namespace);
        let repeat = self.recent().repeat_of(&key, now);
        let sent = match repeat {
            Some(Sent { name, count, .. }) => {
                let count = count + 1;
                let series = EventSeries { count, last_observed_time: MicroTime(now) };
                let patch = Patch::Merge(json!({ "series": series }));
                events.patch(&name, &PatchParams::default(), &patch).await?;
                Sent { name, count, last: now }
            }
            None => {
                let created =
                    events.create(&PostParams::default(), &self.new_event(event, regarding, now)).await?;
                Sent { name: created.metadata.name.unwrap_or_default(), count: 1, last: now }
            }
        };
        self.recent().remember(key, sent);
        Ok(())
    }

    /// Publishes an Event about `regarding` and never fails: an Event that cannot be
    /// recorded is logged, because what the controller did matters more than telling of it.
    pub async fn record(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        action: &str,
        reason: &str,
        note: String,
    ) {
        let event =
            Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
        if let Err(error) = self.publish(&event, regarding).await {
            tracing::warn!(
                namespace = regarding.namespace.as_deref().unwrap_or_default(),
                name = regarding.name.as_deref().unwrap_or_default(),
                %reason,
                %error,
                "could not record an Event"
            );
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, RecentEvents> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        let object = regarding.name.as_deref().unwrap_or(controller);
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone().unwrap_or_else(|| controller.clone())),
            type_: Some(match event.type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            ..K8sEvent::default()
        }
    }
}

/// What makes two Events the same for a series: the object, type, reason and action (the
/// note may differ; the series keeps the first one's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    related: Option<(Option<String>, Option<String>, Option<String>)>,
    warning: bool,
    reason: String,
    action: String,
}

impl EventKey {
    pub fn of(event: &Event, regarding: &ObjectReference) -> Self {
        let reference = |object: &ObjectReference| {
            (object.kind.clone(), object.namespace.clone(), object.name.clone(), object.uid.clone())
        };
        Self {
            regarding: reference(regarding),
            related: event.secondary.as_ref().map(|related| {
                let (kind, namespace, name, _) = reference(related);
                (kind, namespace, name)
            }),
            warning: event.type_ == EventType::Warning,
            reason: event.reason.clone(),
            action: event.action.clone(),
        }
    }
}

/// An Event kopper created: its name, how often it was seen, and when last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub name: String,
    pub count: i32,
    pub last: Timestamp,
}

/// The Events sent lately, at most `capacity` of them, oldest forgotten first.
#[derive(Debug)]
pub struct RecentEvents {
    capacity: usize,
    sent: HashMap<EventKey, Sent>,
    /// Keys in the order they were first remembered, for forgetting the oldest.
    order: VecDeque<EventKey>,
}

impl RecentEvents {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, sent: HashMap::new(), order: VecDeque::new() }
    }

    /// The Event to count a repeat on: one sent with `key` within [`SERIES_WINDOW`] of `now`.
    pub fn repeat_of(&self, key: &EventKey, now: Timestamp) -> Option<Sent> {
        self.sent.get(key).filter(|sent| sent.last + SERIES_WINDOW > now).cloned()
    }

    /// Records that `sent` went out for `key`, forgetting the oldest Event beyond capacity.
    pub fn remember(&mut self, key: EventKey, sent: Sent) {
        if self.sent.insert(key.clone(), sent).is_none() {
            self.order.push_back(key);
        }
        while self.sent.len() > self.capacity {
            let Some(oldest) = self.order.pop_front() else { break };
            self.sent.remove(&oldest);
        }
    }

    pub fn len(&self) -> usize {
        self.sent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(pod: &str) -> EventKey {
        let event = Event {
            type_: EventType::Normal,
            reason: "PodNameLabelSet".into(),
            note: Some(format!("Set label kopper.dev/pod-name={pod}")),
            action: "Label".into(),
            secondary: None,
        };
        let regarding = ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("team-a".into()),
            name: Some(pod.into()),
            uid: Some(format!("uid-{pod}")),
            ..ObjectReference::default()
        };
        EventKey::of(&event, &regarding)
    }

    fn sent(name: &str, count: i32, last: Timestamp) -> Sent {
        Sent { name: name.into(), count, last }
    }

    #[test]
    fn memory_holds_no_more_than_its_capacity_however_many_objects_had_events() {
        let mut recent = RecentEvents::new(100);
        let now = Timestamp::now();
        for pod in 0..10_000 {
            recent.remember(labelled(&format!("pod-{pod}")), sent(&format!("pod-{pod}.1"), 1, now));
            assert!(recent.len() <= 100, "{} Events remembered after {pod} pods", recent.len());
            assert!(recent.order.len() <= 100, "the order of {} Events kept", recent.order.len());
        }
        assert_eq!(recent.len(), 100);
        assert!(recent.repeat_of(&labelled("pod-9999"), now).is_some(), "the newest are kept");
        assert!(recent.repeat_of(&labelled("pod-0"), now).is_none(), "the oldest are forgotten");
    }

    #[test]
    fn a_repeat_within_the_window_joins_the_first_events_series() {
        let mut recent = RecentEvents::new(10);
        let first = Timestamp::now();
        recent.remember(labelled("web-1"), sent("web-1.a", 1, first));
        let soon = first + SignedDuration::from_mins(1);
        assert_eq!(recent.repeat_of(&labelled("web-1"), soon), Some(sent("web-1.a", 1, first)));
        assert_eq!(recent.repeat_of(&labelled("web-2"), soon), None, "another pod's Event is its own");
        recent.remember(labelled("web-1"), sent("web-1.a", 2, soon));
        assert_eq!(recent.len(), 1);
        assert_eq!(recent.order.len(), 1, "a repeat does not take a second place in the order");
    }

    #[test]
    fn a_repeat_after_the_window_starts_a_new_event() {
        let mut recent = RecentEvents::new(10);
        let first = Timestamp::now();
        recent.remember(labelled("web-1"), sent("web-1.a", 3, first));
        assert_eq!(recent.repeat_of(&labelled("web-1"), first + SERIES_WINDOW), None);
    }

    #[test]
    fn a_warning_is_not_counted_on_a_normal_events_series() {
        let regarding = ObjectReference { name: Some("web-1".into()), ..ObjectReference::default() };
        let event = |type_| Event {
            type_,
            reason: "PodNameLabelInvalid".into(),
            note: None,
            action: "Label".into(),
            secondary: None,
        };
        assert_ne!(
            EventKey::of(&event(EventType::Normal), &regarding),
            EventKey::of(&event(EventType::Warning), &regarding)
        );
    }
}
