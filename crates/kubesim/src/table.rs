//! `meta.k8s.io/v1` Table rendering: what `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` and prints as columns.
//!
//! The columns are kube-apiserver's for each built-in kind (its `printers.go`), the
//! generic `Name, Created At` for kinds without a printer, and for custom resources their
//! CRD's `additionalPrinterColumns` (or `Age` when it declares none).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::registry::ResourceType;

/// What each row carries besides its cells (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// A `PartialObjectMetadata`, kube-apiserver's default; kubectl reads names,
    /// namespaces and labels from it.
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn from_param(value: Option<&str>) -> Self {
        match value {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// A request for a Table: which apiVersion the client takes, and what rows carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRequest {
    pub api_version: &'static str,
    pub include: IncludeObject,
}

impl TableRequest {
    /// From the `Accept` header and `?includeObject=`; `None` when no Table is asked for.
    pub fn from_request(accept: &str, include_object: Option<&str>) -> Option<Self> {
        let api_version = requested_version(accept)?;
        Some(Self { api_version, include: IncludeObject::from_param(include_object) })
    }
}

/// The Table apiVersion an `Accept` header asks for, if it asks for a Table at all.
fn requested_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|range| {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        let is = |p: &str| params.contains(&p);
        if !is("as=Table") || !is("g=meta.k8s.io") {
            return None;
        }
        if is("v=v1") {
            Some("meta.k8s.io/v1")
        } else if is("v=v1beta1") {
            Some("meta.k8s.io/v1beta1")
        } else {
            None
        }
    })
}

/// Renders a list (anything with `items`) or a single object as a Table.
pub fn render(rt: &ResourceType, found: &Value, request: TableRequest) -> Value {
    let printer = Printer::for_type(rt);
    let now = Utc::now();
    let objects: Vec<&Value> = match found.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None => vec![found],
    };
    let rows: Vec<Value> =
        objects.into_iter().map(|object| row(rt, &printer, object, request.include, now)).collect();
    let mut metadata = json!({});
    if let Some(list_meta) = found.get("items").and(found.get("metadata")) {
        for key in ["resourceVersion", "continue", "remainingItemCount"] {
            if let Some(value) = list_meta.get(key) {
                metadata[key] = value.clone();
            }
        }
    } else if let Some(rv) = found.pointer("/metadata/resourceVersion") {
        metadata["resourceVersion"] = rv.clone();
    }
    json!({
        "kind": "Table",
        "apiVersion": request.api_version,
        "metadata": metadata,
        "columnDefinitions": printer.columns().iter().map(Column::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

fn row(
    rt: &ResourceType,
    printer: &Printer,
    object: &Value,
    include: IncludeObject,
    now: DateTime<Utc>,
) -> Value {
    let mut row = json!({"cells": printer.cells(object, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = crate::convert::partial_metadata(object),
        IncludeObject::Object => {
            // List items come without their type; kubectl decodes row objects by it
            // (`--sort-by`), so each carries it as kube-apiserver's do.
            let mut full = object.clone();
            if let Some(fields) = full.as_object_mut() {
                fields.entry("apiVersion").or_insert_with(|| rt.api_version().into());
                fields.entry("kind").or_insert_with(|| rt.kind.clone().into());
            }
            row["object"] = full;
        }
    }
    row
}

/// One column definition.
struct Column {
    name: String,
    kind: String,
    format: String,
    description: String,
    /// 0 for default columns, higher for those only `-o wide` shows.
    priority: i64,
}

impl Column {
    fn new(name: &str, kind: &str, priority: i64, description: &str) -> Self {
        let format = if name == "Name" { "name" } else { "" };
        Self {
            name: name.into(),
            kind: kind.into(),
            format: format.into(),
            description: description.into(),
            priority,
        }
    }

    fn definition(&self) -> Value {
        json!({"name": self.name, "type": self.kind, "format": self.format,
               "description": self.description, "priority": self.priority})
    }
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// How one resource type is printed.
enum Printer {
    Namespace,
    ConfigMap,
    Secret,
    Pod,
    ServiceAccount,
    Event {
        events_v1: bool,
    },
    RoleBinding,
    Lease,
    /// kube-apiserver's default for kinds without a printer (roles, CRDs): Name, Created At.
    Generic,
    /// A custom resource: its CRD's printer columns.
    Custom(Vec<PrinterColumn>),
}

/// One of a CRD's `additionalPrinterColumns`.
#[derive(Clone)]
struct PrinterColumn {
    name: String,
    kind: String,
    description: String,
    priority: i64,
    json_path: String,
}

impl Printer {
    fn for_type(rt: &ResourceType) -> Self {
        if let Some(custom) = &rt.custom {
            return Self::Custom(printer_columns(&custom.printer_columns));
        }
        match (rt.group.as_str(), rt.kind.as_str()) {
            ("", "Namespace") => Self::Namespace,
            ("", "ConfigMap") => Self::ConfigMap,
            ("", "Secret") => Self::Secret,
            ("", "Pod") => Self::Pod,
            ("", "ServiceAccount") => Self::ServiceAccount,
            ("", "Event") => Self::Event { events_v1: false },
            ("events.k8s.io", "Event") => Self::Event { events_v1: true },
            ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => Self::RoleBinding,
            ("coordination.k8s.io", "Lease") => Self::Lease,
            _ => Self::Generic,
        }
    }

    fn columns(&self) -> Vec<Column> {
        let name = || Column::new("Name", "string", 0, NAME_DESCRIPTION);
        let age = || Column::new("Age", "string", 0, AGE_DESCRIPTION);
        match self {
            Self::Namespace => {
                vec![name(), Column::new("Status", "string", 0, "The status of the namespace"), age()]
            }
            Self::ConfigMap => vec![name(), Column::new("Data", "string", 0, "Number of keys"), age()],
            Self::Secret => vec![
                name(),
                Column::new("Type", "string", 0, "The type of the secret"),
                Column::new("Data", "string", 0, "Number of keys"),
                age(),
            ],
            Self::Pod => vec![
                name(),
                Column::new(
                    "Ready",
                    "string",
                    0,
                    "The aggregate readiness state of this pod for accepting traffic.",
                ),
                Column::new("Status", "string", 0, "The aggregate status of the containers in this pod."),
                Column::new(
                    "Restarts",
                    "string",
                    0,
                    "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                ),
                age(),
                Column::new("IP", "string", 1, "IP address allocated to the pod."),
                Column::new("Node", "string", 1, "Name of the Node this pod is scheduled on."),
                Column::new(
                    "Nominated Node",
                    "string",
                    1,
                    "Name of the Node the pod is nominated to run on.",
                ),
                Column::new("Readiness Gates", "string", 1, "Readiness gates of the pod."),
            ],
            Self::ServiceAccount => {
                vec![
                    name(),
                    Column::new(
                        "Secrets",
                        "string",
                        0,
                        "Secrets is a list of the secrets in the same namespace.",
                    ),
                    age(),
                ]
            }
            Self::Event { .. } => vec![
                Column::new(
                    "Last Seen",
                    "string",
                    0,
                    "The time at which the most recent occurrence of this event was recorded.",
                ),
                Column::new(
                    "Type",
                    "string",
                    0,
                    "Type of this event (Normal, Warning), new types could be added in the future.",
                ),
                Column::new(
                    "Reason",
                    "string",
                    0,
                    "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                ),
                Column::new("Object", "string", 0, "The object that this event is about."),
                Column::new("Subobject", "string", 1, "The subobject that this event is about."),
                Column::new("Source", "string", 1, "The component reporting this event."),
                Column::new(
                    "Message",
                    "string",
                    0,
                    "A human-readable description of the status of this operation.",
                ),
                Column::new("First Seen", "string", 1, "The time at which the event was first recorded."),
                Column::new("Count", "string", 1, "The number of times this event has occurred."),
                Column::new("Name", "string", 1, NAME_DESCRIPTION),
            ],
            Self::RoleBinding => vec![
                name(),
                Column::new("Role", "string", 0, "Role for the binding."),
                age(),
                Column::new("Users", "string", 1, "Users in the binding."),
                Column::new("Groups", "string", 1, "Groups in the binding."),
                Column::new("ServiceAccounts", "string", 1, "ServiceAccounts in the binding."),
            ],
            Self::Lease => {
                vec![name(), Column::new("Holder", "string", 0, "The holder of the lease."), age()]
            }
            Self::Generic => vec![name(), Column::new("Created At", "date", 0, AGE_DESCRIPTION)],
            Self::Custom(columns) => {
                let mut all = vec![name()];
                all.extend(columns.iter().map(|c| Column::new(&c.name, &c.kind, c.priority, &c.description)));
                all
            }
        }
    }

    fn cells(&self, o: &Value, now: DateTime<Utc>) -> Vec<Value> {
        let name = json!(str_at(o, "/metadata/name"));
        let age = json!(age(o.pointer("/metadata/creationTimestamp"), now));
        match self {
            Self::Namespace => vec![name, json!(str_at(o, "/status/phase")), age],
            Self::ConfigMap => vec![name, json!(len_at(o, "/data") + len_at(o, "/binaryData")), age],
            Self::Secret => vec![name, json!(str_at(o, "/type")), json!(len_at(o, "/data")), age],
            Self::Pod => pod_cells(o, name, age, now),
            Self::ServiceAccount => vec![name, json!(len_at(o, "/secrets")), age],
            Self::Event { events_v1 } => event_cells(o, *events_v1, now),
            Self::RoleBinding => role_binding_cells(o, name, age),
            Self::Lease => vec![name, json!(str_at(o, "/spec/holderIdentity")), age],
            Self::Generic => {
                vec![name, o.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null)]
            }
            Self::Custom(columns) => {
                let mut cells = vec![name];
                cells.extend(columns.iter().map(|c| custom_cell(c, o, now)));
                cells
            }
        }
    }
}

/// A CRD version's printer columns; `Age` when it declares none, as kube-apiserver does.
fn printer_columns(declared: &[Value]) -> Vec<PrinterColumn> {
    if declared.is_empty() {
        return vec![PrinterColumn {
            name: "Age".into(),
            kind: "date".into(),
            description: AGE_DESCRIPTION.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }];
    }
    declared
        .iter()
        .map(|c| PrinterColumn {
            name: str_at(c, "/name").into(),
            kind: c.get("type").and_then(Value::as_str).unwrap_or("string").into(),
            description: str_at(c, "/description").into(),
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: str_at(c, "/jsonPath").into(),
        })
        .collect()
}

/// A printer column's cell: the first value its JSONPath finds, typed as the column says
/// (`date` columns show the time since, as kube-apiserver's do); null when nothing matches.
fn custom_cell(column: &PrinterColumn, object: &Value, now: DateTime<Utc>) -> Value {
    let Some(value) = jsonpath::first(object, &column.json_path) else { return Value::Null };
    match column.kind.as_str() {
        "integer" => {
            value.as_i64().or_else(|| value.as_f64().map(|f| f as i64)).map_or(Value::Null, Value::from)
        }
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => value.as_str().map_or(Value::Null, |_| json!(age(Some(value), now))),
        _ => match value {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

fn str_at<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn len_at(o: &Value, pointer: &str) -> usize {
    match o.pointer(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(list)) => list.len(),
        _ => 0,
    }
}

fn pod_cells(o: &Value, name: Value, age_cell: Value, now: DateTime<Utc>) -> Vec<Value> {
    let statuses =
        o.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
    let total = len_at(o, "/spec/containers");
    let ready = statuses.iter().filter(|s| s["ready"].as_bool() == Some(true)).count();
    let restarts: i64 = statuses.iter().filter_map(|s| s["restartCount"].as_i64()).sum();
    let last_restart = statuses
        .iter()
        .filter_map(|s| s.pointer("/lastState/terminated/finishedAt"))
        .filter_map(|t| t.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()))
        .max();
    let restarts = match last_restart {
        Some(at) if restarts > 0 => {
            format!("{restarts} ({} ago)", human_duration(now - at.with_timezone(&Utc)))
        }
        _ => restarts.to_string(),
    };
    let or_none = |s: &str| if s.is_empty() { "<none>".to_owned() } else { s.to_owned() };
    let gates = len_at(o, "/spec/readinessGates");
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(pod_status(o, &statuses)),
        json!(restarts),
        age_cell,
        json!(or_none(str_at(o, "/status/podIP"))),
        json!(or_none(str_at(o, "/spec/nodeName"))),
        json!(or_none(str_at(o, "/status/nominatedNodeName"))),
        json!(if gates == 0 { "<none>".to_owned() } else { format!("0/{gates}") }),
    ]
}

/// kubectl's pod STATUS: a waiting or terminated container's reason over the phase, and
/// `Terminating` once deletion has begun.
fn pod_status(o: &Value, statuses: &[Value]) -> String {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let container_reason = statuses.iter().rev().find_map(|s| {
        s.pointer("/state/waiting/reason")
            .or_else(|| s.pointer("/state/terminated/reason"))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
    });
    let reason = container_reason.unwrap_or_else(|| str_at(o, "/status/reason"));
    if !reason.is_empty() {
        return reason.into();
    }
    let phase = str_at(o, "/status/phase");
    if phase.is_empty() { "Pending".into() } else { phase.into() }
}

fn event_cells(o: &Value, events_v1: bool, now: DateTime<Utc>) -> Vec<Value> {
    // events.k8s.io/v1 renames the core/v1 fields; the table is the same.
    let field = |core: &str, v1: &str| if events_v1 { v1.to_owned() } else { core.to_owned() };
    let first_seen = o
        .pointer(&field("/firstTimestamp", "/deprecatedFirstTimestamp"))
        .filter(|v| !v.is_null())
        .or_else(|| o.pointer("/eventTime").filter(|v| !v.is_null()));
    let first = age(first_seen, now);
    let mut last =
        match o.pointer(&field("/lastTimestamp", "/deprecatedLastTimestamp")).filter(|v| !v.is_null()) {
            Some(t) => age(Some(t), now),
            None => first.clone(),
        };
    let mut count = o.pointer(&field("/count", "/deprecatedCount")).and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = o.get("series").filter(|s| !s.is_null()) {
        last = age(series.get("lastObservedTime"), now);
        count = series["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let regarding = o.pointer(&field("/involvedObject", "/regarding")).cloned().unwrap_or(Value::Null);
    let kind = str_at(&regarding, "/kind").to_lowercase();
    let target = match str_at(&regarding, "/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: &'_ str, b: &str| if a.is_empty() { b.to_owned() } else { a.to_owned() };
    let source_field = field("/source", "/deprecatedSource");
    let component = first_non_empty(
        str_at(o, &format!("{source_field}/component")),
        str_at(o, &field("/reportingComponent", "/reportingController")),
    );
    let source =
        match first_non_empty(str_at(o, &format!("{source_field}/host")), str_at(o, "/reportingInstance")) {
            instance if instance.is_empty() => component,
            instance => format!("{component}, {instance}"),
        };
    vec![
        json!(last),
        json!(str_at(o, "/type")),
        json!(str_at(o, "/reason")),
        json!(target),
        json!(str_at(&regarding, "/fieldPath")),
        json!(source),
        json!(str_at(o, &field("/message", "/note")).trim()),
        json!(first),
        json!(count),
        json!(str_at(o, "/metadata/name")),
    ]
}

fn role_binding_cells(o: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let role = format!("{}/{}", str_at(o, "/roleRef/kind"), str_at(o, "/roleRef/name"));
    let subjects = o.get("subjects").and_then(Value::as_array).cloned().unwrap_or_default();
    let of_kind = |kind: &str| -> String {
        subjects
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| match (kind, str_at(s, "/namespace")) {
                ("ServiceAccount", ns) => format!("{ns}/{}", str_at(s, "/name")),
                _ => str_at(s, "/name").to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        name,
        json!(role),
        age_cell,
        json!(of_kind("User")),
        json!(of_kind("Group")),
        json!(of_kind("ServiceAccount")),
    ]
}

/// Time since an RFC 3339 timestamp, as kubectl prints ages; `<unknown>` without one.
fn age(timestamp: Option<&Value>, now: DateTime<Utc>) -> String {
    timestamp
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - t.with_timezone(&Utc)))
}

/// apimachinery's `duration.HumanDuration`: two significant units at most, coarser as
/// the duration grows.
pub fn human_duration(d: chrono::TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        };
    }
    format!("{years}y")
}

/// The JSONPath subset CRD printer columns use: `.a.b`, `['a.b']`, `[0]`, `[*]` and
/// `[?(@.type=="Ready")]` filters on one field.
mod jsonpath {
    use serde_json::Value;

    enum Step {
        Field(String),
        Index(usize),
        All,
        /// `[?(@.a.b==value)]`: elements whose field equals a JSON literal or quoted string.
        Filter {
            path: Vec<String>,
            value: Value,
        },
    }

    pub fn first<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
        let steps = parse(path.trim().trim_start_matches('{').trim_end_matches('}'))?;
        let mut current = vec![root];
        for step in &steps {
            current = current.into_iter().flat_map(|v| apply(step, v)).collect();
        }
        current.into_iter().next()
    }

    fn apply<'a>(step: &Step, value: &'a Value) -> Vec<&'a Value> {
        match step {
            Step::Field(name) => value.get(name.as_str()).into_iter().collect(),
            Step::Index(i) => value.get(*i).into_iter().collect(),
            Step::All => match value {
                Value::Array(items) => items.iter().collect(),
                Value::Object(map) => map.values().collect(),
                _ => Vec::new(),
            },
            Step::Filter { path, value: wanted } => value
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter(|item| {
                            path.iter().try_fold(*item, |v, key| v.get(key.as_str())) == Some(wanted)
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn parse(path: &str) -> Option<Vec<Step>> {
        let mut steps = Vec::new();
        let mut rest = path.strip_prefix('$').unwrap_or(path);
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                if end > 0 {
                    steps.push(Step::Field(after[..end].to_owned()));
                }
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = bracket_end(after)?;
                steps.push(bracket(&after[..end])?);
                rest = &after[end + 1..];
            } else {
                return None;
            }
        }
        Some(steps)
    }

    /// The index of the `]` closing a bracket, skipping any inside quotes.
    fn bracket_end(s: &str) -> Option<usize> {
        let mut quote = None;
        for (i, c) in s.char_indices() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, ']') => return Some(i),
                _ => {}
            }
        }
        None
    }

    fn bracket(inner: &str) -> Option<Step> {
        let inner = inner.trim();
        if inner == "*" {
            return Some(Step::All);
        }
        if let Ok(i) = inner.parse::<usize>() {
            return Some(Step::Index(i));
        }
        if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
            let (lhs, rhs) = filter.split_once("==")?;
            let path = lhs.trim().strip_prefix("@.")?.split('.').map(str::to_owned).collect();
            let rhs = rhs.trim();
            let value = match unquote(rhs) {
                unquoted if unquoted.len() < rhs.len() => Value::String(unquoted.to_owned()),
                literal => {
                    serde_json::from_str(literal).unwrap_or_else(|_| Value::String(literal.to_owned()))
                }
            };
            return Some(Step::Filter { path, value });
        }
        Some(Step::Field(unquote(inner).to_owned()))
    }

    fn unquote(s: &str) -> &str {
        s.strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            .unwrap_or(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn request(include: IncludeObject) -> TableRequest {
        TableRequest { api_version: "meta.k8s.io/v1", include }
    }

    fn registry_type(group: &str, resource: &str) -> std::sync::Arc<ResourceType> {
        Registry::with_builtins().get(group, "v1", resource).unwrap()
    }

    #[test]
    fn kubectl_get_accept_header_asks_for_a_v1_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let request = TableRequest::from_request(accept, None).unwrap();
        assert_eq!(request.api_version, "meta.k8s.io/v1");
        assert_eq!(request.include, IncludeObject::Metadata);
        assert_eq!(TableRequest::from_request("application/json", None), None);
        let metadata_only = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(TableRequest::from_request(metadata_only, None), None);
    }

    #[test]
    fn namespaces_show_their_phase_as_status() {
        let list = json!({"kind": "NamespaceList", "metadata": {"resourceVersion": "7"}, "items": [
            {"metadata": {"name": "default", "creationTimestamp": "2020-01-01T00:00:00Z"}, "status": {"phase": "Active"}}
        ]});
        let table = render(&registry_type("", "namespaces"), &list, request(IncludeObject::Metadata));
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Status", "Age"]);
        assert_eq!(table["rows"][0]["cells"][0], "default");
        assert_eq!(table["rows"][0]["cells"][1], "Active");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn full_row_objects_carry_their_type() {
        let list = json!({"items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}]});
        let table = render(&registry_type("", "configmaps"), &list, request(IncludeObject::Object));
        let object = &table["rows"][0]["object"];
        assert_eq!((object["apiVersion"].as_str(), object["kind"].as_str()), (Some("v1"), Some("ConfigMap")));
        assert_eq!(object["data"]["k"], "v");
    }

    #[test]
    fn secrets_show_type_and_key_count() {
        let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "", "b": ""}});
        let table = render(&registry_type("", "secrets"), &secret, request(IncludeObject::None));
        assert_eq!(table["rows"][0]["cells"], json!(["s", "Opaque", 2, "<unknown>"]));
        assert!(table["rows"][0].get("object").is_none());
    }

    #[test]
    fn role_bindings_show_their_role_and_subjects() {
        let binding = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}, {"kind": "User", "name": "alice"}]});
        let rt = registry_type("rbac.authorization.k8s.io", "rolebindings");
        let cells = &render(&rt, &binding, request(IncludeObject::None))["rows"][0]["cells"];
        assert_eq!(cells[1], "ClusterRole/view");
        assert_eq!(cells[3], "alice");
        assert_eq!(cells[5], "ns/sa");
    }

    #[test]
    fn events_print_the_same_from_both_event_apis() {
        let core = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Started", "type": "Normal", "message": "hi ", "count": 2,
            "source": {"component": "kubelet", "host": "node-1"}});
        let v1 = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Pod", "name": "p"},
            "reason": "Started", "type": "Normal", "note": "hi ", "deprecatedCount": 2,
            "deprecatedSource": {"component": "kubelet", "host": "node-1"}});
        let core_row = render(&registry_type("", "events"), &core, request(IncludeObject::None));
        let v1_row = render(&registry_type("events.k8s.io", "events"), &v1, request(IncludeObject::None));
        let cells = &core_row["rows"][0]["cells"];
        assert_eq!(cells, &v1_row["rows"][0]["cells"]);
        assert_eq!(cells[3], "pod/p");
        assert_eq!(cells[5], "kubelet, node-1");
        assert_eq!(cells[6], "hi");
        assert_eq!(cells[8], 2);
    }

    #[test]
    fn printer_columns_follow_their_json_path() {
        let object = json!({"spec": {"replicas": 3.0}, "status": {"conditions": [
            {"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let ready = PrinterColumn {
            name: "Ready".into(),
            kind: "string".into(),
            description: String::new(),
            priority: 0,
            json_path: ".status.conditions[?(@.type==\"Ready\")].status".into(),
        };
        let replicas =
            PrinterColumn { kind: "integer".into(), json_path: ".spec.replicas".into(), ..ready.clone() };
        let missing = PrinterColumn { json_path: ".spec.missing".into(), ..ready.clone() };
        assert_eq!(custom_cell(&ready, &object, Utc::now()), "True");
        assert_eq!(custom_cell(&replicas, &object, Utc::now()), 3);
        assert_eq!(custom_cell(&missing, &object, Utc::now()), Value::Null);
    }

    #[test]
    fn ages_read_like_kubectl_ages() {
        let d = chrono::TimeDelta::seconds;
        assert_eq!(human_duration(d(59)), "59s");
        assert_eq!(human_duration(d(125)), "2m5s");
        assert_eq!(human_duration(d(3600 * 5 + 60 * 7)), "5h7m");
        assert_eq!(human_duration(d(3600 * 24 * 3 + 3600)), "3d1h");
        assert_eq!(human_duration(d(3600 * 24 * 400)), "400d");
    }
}
