//! Conversions between how an object is stored and how a served resource shows it.

use serde_json::{Map, Value, json};

use crate::registry::{ResourceType, View};

/// The stored form of an object written through `rt`.
pub fn to_storage(rt: &ResourceType, mut object: Value) -> Value {
    match rt.view {
        View::Native => object,
        View::EventsV1 => {
            events_v1_to_core(&mut object);
            object
        }
    }
}

/// How `rt` shows a stored object.
pub fn from_storage(rt: &ResourceType, mut object: Value) -> Value {
    match rt.view {
        View::EventsV1 => core_to_events_v1(&mut object),
        View::Native => {
            // Custom resources without conversion webhooks differ between versions only by
            // their apiVersion.
            if let Some(obj) = object.as_object_mut() {
                obj.insert("apiVersion".into(), rt.api_version().into());
                obj.insert("kind".into(), rt.kind.clone().into());
            }
            // kube-apiserver defaults custom resources as it reads them from etcd too, so a
            // default added to a CRD shows in objects stored before it.
            if let Some(custom) = rt.custom.as_ref().filter(|custom| !custom.schema.is_null()) {
                crate::validation::schema::apply_defaults(&mut object, Some(&custom.schema));
            }
        }
    }
    object
}

/// Field renames between `events.k8s.io/v1` and core/v1 events: (v1 name, core name).
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("deprecatedSource", "source"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = obj.remove(from) {
        obj.insert(to.into(), v);
    }
}

fn events_v1_to_core(object: &mut Value) {
    let Some(obj) = object.as_object_mut() else { return };
    for (v1, core) in EVENT_RENAMES {
        rename(obj, v1, core);
    }
    obj.insert("apiVersion".into(), "v1".into());
    obj.insert("kind".into(), "Event".into());
    if let Some(series) = obj.get("series").cloned() {
        obj.insert(
            "series".into(),
            json!({"count": series.get("count"), "lastObservedTime": series.get("lastObservedTime")}),
        );
    }
}

fn core_to_events_v1(object: &mut Value) {
    let Some(obj) = object.as_object_mut() else { return };
    for (v1, core) in EVENT_RENAMES {
        rename(obj, core, v1);
    }
    obj.insert("apiVersion".into(), "events.k8s.io/v1".into());
    obj.insert("kind".into(), "Event".into());
}

/// kube-apiserver's `PartialObjectMetadata` rendering (metadata-only watches and lists).
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn events_round_trip_between_both_apis() {
        let registry = Registry::with_builtins();
        let v1 = registry.get("events.k8s.io", "v1", "events").unwrap();
        let written = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Created", "type": "Normal",
            "reportingController": "kopper"});
        let stored = to_storage(&v1, written.clone());
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["message"], "hello");
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(from_storage(&v1, stored), written);
    }
}
