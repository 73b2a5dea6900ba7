//! kube-apiserver's semantics for each verb, independent of HTTP: what a create, update,
//! patch or delete does to the store, and which errors it answers with.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::convert;
use crate::error::{ApiError, ApiResult, StatusCause};
use crate::patch::{self, PatchError, PatchType};
use crate::registry::{CustomInfo, ResourceType, StorageKey, View, version_priority};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ObjKey, State, StoredObject};
use crate::validation;

/// The finalizer a namespace carries in `spec.finalizers` until its content is gone.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";
/// The finalizer a CRD carries until its custom resources are gone.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// The object or collection a request is about.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    fn key(&self) -> ObjKey {
        (self.namespace.clone().unwrap_or_default(), self.name.clone().unwrap_or_default())
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.rt.group, &self.rt.resource, self.name())
    }
}

#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// The `fieldManager` query parameter, or the user agent's product name.
    pub field_manager: String,
    pub force: bool,
    /// `fieldValidation=Strict`: unknown fields are an error instead of being dropped.
    pub strict: bool,
    /// Who writes, when kubesim authorizes by RBAC: writes of Roles, ClusterRoles and their
    /// bindings then pass kube-apiserver's privilege-escalation checks ([`crate::escalation`]).
    /// `None` (kubesim's own writes, or no authorization) skips them.
    pub requester: Option<crate::authz::UserInfo>,
}

#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<LabelSelector>,
    pub field_selector: Option<FieldSelector>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

impl ListOptions {
    /// Whether a stored object at `key` passes the label and field selectors. Selectors on
    /// the name and namespace are answered from the key, without decoding the object.
    pub fn matches(&self, rt: &ResourceType, key: &ObjKey, stored: &StoredObject) -> bool {
        if let Some(labels) = &self.label_selector
            && !labels.matches(stored.labels.as_ref())
        {
            return false;
        }
        match &self.field_selector {
            Some(fields) => fields
                .matches_place(&key.0, &key.1)
                .unwrap_or_else(|| fields.matches(&convert::from_storage(rt, stored.value()))),
            None => true,
        }
    }

    fn has_selector(&self) -> bool {
        self.label_selector.is_some() || self.field_selector.as_ref().is_some_and(|fields| !fields.is_empty())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (kubectl and kube-rs send one) plus query overrides.
    pub fn from_body(body: &Value) -> Self {
        let propagation = match body["propagationPolicy"].as_str() {
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Orphan") => Some(Propagation::Orphan),
            Some("Background") => Some(Propagation::Background),
            _ => match body["orphanDependents"].as_bool() {
                Some(true) => Some(Propagation::Orphan),
                Some(false) => Some(Propagation::Background),
                None => None,
            },
        };
        Self {
            propagation,
            precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_owned),
            precondition_resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned),
            dry_run: body["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All")),
        }
    }
}

/// RFC 3339 with seconds, as kube-apiserver writes timestamps.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn get(state: &State, t: &Target) -> ApiResult<Value> {
    let stored = state.get(&t.rt.storage, &t.key()).ok_or_else(|| t.not_found())?;
    Ok(convert::from_storage(&t.rt, stored.value()))
}

pub fn list(state: &State, t: &Target, opts: &ListOptions) -> ApiResult<Value> {
    let start_after = match &opts.continue_token {
        Some(token) => Some(decode_continue(token)?),
        None => None,
    };
    let mut items = Vec::new();
    let mut remaining = 0usize;
    let mut last_key = None;
    // A page starts where the last one ended, so reading a large list page by page costs
    // its size once, not once per page.
    for (key, stored) in state.scan(&t.rt.storage, t.namespace.as_deref(), start_after.as_ref()) {
        if !opts.matches(&t.rt, key, stored) {
            continue;
        }
        if opts.limit.is_some_and(|limit| items.len() >= limit) {
            remaining += 1;
            if opts.has_selector() {
                // kube-apiserver does not count what remains past a selector.
                break;
            }
            continue;
        }
        let mut item = convert::from_storage(&t.rt, stored.value());
        if !t.rt.is_custom()
            && let Some(obj) = item.as_object_mut()
        {
            // kube-apiserver leaves the type out of built-in list items.
            obj.remove("apiVersion");
            obj.remove("kind");
        }
        items.push(item);
        last_key = Some(key);
    }
    let mut metadata = json!({"resourceVersion": state.resource_version().to_string()});
    if remaining > 0
        && let Some(key) = last_key
    {
        metadata["continue"] = encode_continue(state.resource_version(), key).into();
        if !opts.has_selector() {
            metadata["remainingItemCount"] = remaining.into();
        }
    }
    Ok(json!({
        "kind": format!("{}List", t.rt.kind),
        "apiVersion": t.rt.api_version(),
        "metadata": metadata,
        "items": items,
    }))
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": [key.0, key.1]});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> ApiResult<ObjKey> {
    let invalid =
        || ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion");
    let bytes = base64::engine::general_purpose::URL_SAFE.decode(token).map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    match (value["start"][0].as_str(), value["start"][1].as_str()) {
        (Some(ns), Some(name)) => Ok((ns.to_owned(), name.to_owned())),
        _ => Err(invalid()),
    }
}

pub fn create(state: &mut State, t: &Target, body: Value, opts: &WriteOptions) -> ApiResult<Value> {
    let prepared = prepare_create(t, body, opts);
    commit_create(state, t, prepared, opts)
}

/// A create's work that needs no store: decoding, defaults, validation and managedFields.
/// Done before taking the store lock, so concurrent writers only queue for the commit.
pub struct PreparedCreate {
    name: String,
    object: ApiResult<Value>,
    /// The body as decoded, for the privilege-escalation check, which comes before validation.
    grants: Option<Value>,
}

pub fn prepare_create(t: &Target, body: Value, opts: &WriteOptions) -> PreparedCreate {
    let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let grants = (opts.requester.is_some() && crate::escalation::guards(t)).then(|| body.clone());
    let object = check_known_fields(t, &body, opts)
        .map_err(|error| cannot_be_handled(t, &body, error))
        .and_then(|()| prepare_new_object(t, body))
        .map(|mut object| {
            track_update(t, None, &mut object, &opts.field_manager);
            object
        });
    PreparedCreate { name, object, grants }
}

/// Stores a prepared create. The namespace is checked first, as kube-apiserver's admission
/// does before validation, so its errors come before any validation error.
pub fn commit_create(
    state: &mut State,
    t: &Target,
    prepared: PreparedCreate,
    opts: &WriteOptions,
) -> ApiResult<Value> {
    if let Some(ns) = &t.namespace {
        check_namespace_accepts(state, t, ns, &prepared.name)?;
    }
    // A body that cannot be decoded is refused before anything looks at what it grants.
    let decoded = !matches!(&prepared.object, Err(error) if error.code != 422);
    if let (Some(user), Some(grants), true) = (&opts.requester, &prepared.grants, decoded) {
        crate::escalation::check_create(state, t, user, grants)?;
    }
    let object = prepared.object?;
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let key = (t.namespace.clone().unwrap_or_default(), name.clone());
    if state.get(&t.rt.storage, &key).is_some() {
        return Err(ApiError::already_exists(&t.rt.group, &t.rt.resource, &name));
    }
    insert_new(state, t, key, object, opts.dry_run)
}

/// Everything a create does to the body before the object is stored: defaults, checks,
/// server fields.
fn prepare_new_object(t: &Target, body: Value) -> ApiResult<Value> {
    let mut object = typed_object(t, body)?;
    let meta = metadata_mut(&mut object);
    match (&t.namespace, meta.get("namespace").and_then(Value::as_str)) {
        (Some(ns), Some(body_ns)) if !body_ns.is_empty() && body_ns != ns => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(ns), _) => {
            meta.insert("namespace".into(), ns.clone().into());
        }
        (None, _) => {
            meta.remove("namespace");
        }
    }
    generate_name(meta);
    for server_field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "generation",
        "managedFields",
    ] {
        meta.remove(server_field);
    }
    prepare_kind_on_create(t, &mut object)?;
    validate(t, None, &mut object)?;
    let meta = metadata_mut(&mut object);
    meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
    meta.insert("creationTimestamp".into(), now().into());
    if t.rt.tracks_generation() {
        meta.insert("generation".into(), 1.into());
    }
    Ok(object)
}

/// Stores a new object (unless dry run) and answers with it as served.
fn insert_new(
    state: &mut State,
    t: &Target,
    key: ObjKey,
    mut object: Value,
    dry_run: bool,
) -> ApiResult<Value> {
    if dry_run {
        return Ok(convert::from_storage(&t.rt, object));
    }
    let rv = state.next_resource_version();
    metadata_mut(&mut object).insert("resourceVersion".into(), rv.to_string().into());
    let stored = convert::to_storage(&t.rt, object);
    state.put(&t.rt.storage, key, &stored, rv);
    after_write(state, t, &stored);
    Ok(convert::from_storage(&t.rt, stored))
}

/// With `fieldValidation=Strict`, refuses fields the type or schema does not have, with
/// kube-apiserver's `strict decoding error` message; otherwise they are dropped silently.
fn check_known_fields(t: &Target, body: &Value, opts: &WriteOptions) -> ApiResult<()> {
    if !opts.strict || !body.is_object() {
        return Ok(());
    }
    let known = match &t.rt.custom {
        Some(custom) if !custom.schema.is_null() => {
            let mut pruned = body.clone();
            validation::schema::prune(&custom.schema, &mut pruned);
            pruned
        }
        Some(_) => return Ok(()),
        None => match crate::typed::normalize(&t.rt.group, &t.rt.kind, body.clone()) {
            Ok(known) => known,
            Err(_) => return Ok(()), // the decode step reports type errors
        },
    };
    let mut unknown = Vec::new();
    dropped_fields(body, &known, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    Err(ApiError::bad_request(format!("strict decoding error: {}", listed.join(", "))))
}

/// A create's or update's body that does not decode, as kube-apiserver words it: the kind and
/// version the body names (the resource's where it names none), then the decoder's error.
/// Patches do not pass through this wrapper there either.
fn cannot_be_handled(t: &Target, body: &Value, mut error: ApiError) -> ApiError {
    let kind = body["kind"].as_str().filter(|kind| !kind.is_empty()).unwrap_or(&t.rt.kind);
    let version = body["apiVersion"]
        .as_str()
        .map(|api_version| api_version.rsplit('/').next().unwrap_or(api_version))
        .filter(|version| !version.is_empty())
        .unwrap_or(&t.rt.version);
    error.message =
        format!("{kind} in version \"{version}\" cannot be handled as a {}: {}", t.rt.kind, error.message);
    error
}

/// Paths of non-null fields of `sent` that `kept` does not have.
fn dropped_fields(sent: &Value, kept: &Value, prefix: &str, out: &mut Vec<String>) {
    match (sent, kept) {
        (Value::Object(sent), Value::Object(kept)) => {
            for (key, value) in sent {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                match kept.get(key) {
                    Some(kept_value) => dropped_fields(value, kept_value, &path, out),
                    None if !value.is_null() => out.push(path),
                    None => {}
                }
            }
        }
        (Value::Array(sent), Value::Array(kept)) => {
            for (i, (s, k)) in sent.iter().zip(kept).enumerate() {
                dropped_fields(s, k, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The body as an object of the target's type, with apiVersion and kind filled in.
fn typed_object(t: &Target, body: Value) -> ApiResult<Value> {
    let Value::Object(mut obj) = body else {
        return Err(ApiError::bad_request("the body of the request must be a JSON or YAML object"));
    };
    let expected = t.rt.api_version();
    if let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str)
        && api_version != expected
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != t.rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            t.rt.kind
        )));
    }
    obj.insert("apiVersion".into(), expected.into());
    obj.insert("kind".into(), t.rt.kind.clone().into());
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj.insert("metadata".into(), json!({}));
    }
    let object = Value::Object(obj);
    if !t.rt.is_custom()
        && let Some(message) = validation::builtin_decode_error(&t.rt.group, &t.rt.resource, &object)
    {
        return Err(ApiError::bad_request(message));
    }
    crate::typed::normalize(&t.rt.group, &t.rt.kind, object).map_err(ApiError::bad_request)
}

pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(meta) => meta,
        None => unreachable!("metadata was just made an object"),
    }
}

/// kube-apiserver's generateName: the prefix plus five random characters from an
/// alphabet without vowels or look-alikes.
fn generate_name(meta: &mut Map<String, Value>) {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let has_name = meta.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let Some(prefix) =
        meta.get("generateName").and_then(Value::as_str).filter(|p| !has_name && !p.is_empty())
    else {
        return;
    };
    let random = uuid::Uuid::new_v4();
    let suffix: String =
        random.as_bytes()[..5].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
    let prefix: String = prefix.chars().take(63 - 5).collect();
    meta.insert("name".into(), format!("{prefix}{suffix}").into());
}

fn check_namespace_accepts(state: &State, t: &Target, ns: &str, name: &str) -> ApiResult<()> {
    let namespaces = StorageKey { group: String::new(), resource: "namespaces".into() };
    let Some(namespace) = state.get(&namespaces, &(String::new(), ns.to_owned())) else {
        return Err(ApiError::not_found("", "namespaces", ns));
    };
    if namespace.deleting {
        let message = format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            crate::error::qualified(&t.rt.group, &t.rt.resource)
        );
        return Err(ApiError::forbidden(&t.rt.group, &t.rt.resource, name, message).with_causes(vec![
            StatusCause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {ns} is being terminated"),
                field: "metadata.namespace".into(),
            },
        ]));
    }
    Ok(())
}

/// What kube-apiserver's strategies do to a new object of each kind before validation.
fn prepare_kind_on_create(t: &Target, object: &mut Value) -> ApiResult<()> {
    let rt = &t.rt;
    if rt.is_custom() && rt.has_status() {
        drop_key(object, "status");
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "namespaces") => {
            object["spec"]["finalizers"] = json!([NAMESPACE_FINALIZER]);
            object["status"] = json!({"phase": "Active"});
        }
        ("", "secrets") => prepare_secret(object)?,
        ("", "pods") => object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"}),
        ("apiextensions.k8s.io", "customresourcedefinitions") => prepare_crd(object),
        _ => {}
    }
    Ok(())
}

fn prepare_secret(object: &mut Value) -> ApiResult<()> {
    if let Some(message) = validation::secret_data_decode_error(object) {
        return Err(ApiError::bad_request(message));
    }
    validation::fold_string_data(object);
    Ok(())
}

fn drop_key(object: &mut Value, key: &str) {
    if let Some(obj) = object.as_object_mut() {
        obj.remove(key);
    }
}

fn prepare_crd(object: &mut Value) {
    let meta = metadata_mut(object);
    let mut finalizers: Vec<Value> =
        meta.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    if !finalizers.iter().any(|f| f == CRD_CLEANUP_FINALIZER) {
        finalizers.push(CRD_CLEANUP_FINALIZER.into());
    }
    meta.insert("finalizers".into(), Value::Array(finalizers));
    let now = now();
    let storage_versions: Vec<Value> = object["spec"]["versions"]
        .as_array()
        .map(|vs| vs.iter().filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect())
        .unwrap_or_default();
    object["status"] = json!({
        "acceptedNames": object["spec"]["names"].clone(),
        "storedVersions": storage_versions,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    });
}

/// Runs every validation that applies; a failure is a 422 naming each bad field.
fn validate(t: &Target, old: Option<&Value>, object: &mut Value) -> ApiResult<()> {
    let rt = &t.rt;
    let mut causes = Vec::new();
    match &rt.custom {
        Some(custom) => {
            causes.extend(validation::validate_metadata(
                object,
                validation::NameRule::Subdomain,
                rt.namespaced,
            ));
            if !custom.schema.is_null() {
                causes.extend(validation::prune_default_validate(&custom.schema, object));
            }
            if let Some(old) = old {
                causes.extend(validation::validate_metadata_update(old, object));
            }
        }
        None => {
            validation::apply_builtin_defaults(&rt.group, &rt.resource, object);
            causes.extend(validation::validate_builtin(&rt.group, &rt.resource, object));
            if let Some(old) = old {
                causes.extend(validation::validate_builtin_update(&rt.group, &rt.resource, old, object));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let message =
        validation::invalid_message(&validation::qualified_kind(&rt.group, &rt.kind), &name, &causes);
    let causes = causes
        .into_iter()
        .map(|c| StatusCause { reason: c.reason.to_owned(), message: c.message, field: c.field })
        .collect();
    Err(ApiError::invalid(&rt.group, &rt.kind, &name, message, causes))
}

/// Records a non-apply write in managedFields, with the list semantics of the object's type.
fn track_update(t: &Target, old: Option<&Value>, new: &mut Value, manager: &str) {
    let now = now();
    let sub = t.subresource.as_deref();
    match &t.rt.custom {
        Some(custom) => {
            let lists = patch::SchemaListTypes::new(&custom.schema);
            patch::record_update_with(old, new, manager, sub, &now, &lists);
        }
        None => patch::record_update(old, new, manager, sub, &now),
    }
}

pub fn update(state: &mut State, t: &Target, body: Value, opts: &WriteOptions) -> ApiResult<Value> {
    check_known_fields(t, &body, opts).map_err(|error| cannot_be_handled(t, &body, error))?;
    let mut object = typed_object(t, body)?;
    check_body_name(t, &mut object)?;
    let Some(existing) = state.get(&t.rt.storage, &t.key()) else {
        if t.rt.allows_create_on_update() && t.subresource.is_none() {
            return create(state, t, object, opts);
        }
        return Err(t.not_found());
    };
    let old = convert::from_storage(&t.rt, existing.value());
    // An update without a resourceVersion is unconditional.
    let sent = object["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty());
    check_resource_version(t, sent, existing.resource_version)?;
    let mut object = prepare_update(t, &old, object, escalation_guard(state, opts))?;
    track_update(t, Some(&old), &mut object, &opts.field_manager);
    commit_update(state, t, &old, object, opts.dry_run)
}

/// What [`prepare_update`] needs to run the privilege-escalation check of an update.
type EscalationGuard<'a> = Option<(&'a State, &'a crate::authz::UserInfo)>;

fn escalation_guard<'a>(state: &'a State, opts: &'a WriteOptions) -> EscalationGuard<'a> {
    opts.requester.as_ref().map(|user| (state, user))
}

/// A write that names a resourceVersion other than the stored one is stale: 409 Conflict.
fn check_resource_version(t: &Target, sent: Option<&str>, current: u64) -> ApiResult<()> {
    match sent {
        Some(rv) if rv != current.to_string() => Err(ApiError::stale(&t.rt.group, &t.rt.resource, t.name())),
        _ => Ok(()),
    }
}

fn check_body_name(t: &Target, object: &mut Value) -> ApiResult<()> {
    let meta = metadata_mut(object);
    match meta.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() && name != t.name() => Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            t.name()
        ))),
        _ => {
            meta.insert("name".into(), t.name().into());
            Ok(())
        }
    }
}

/// What an update may change, per subresource, and the checks it must pass.
fn prepare_update(t: &Target, old: &Value, mut new: Value, escalation: EscalationGuard) -> ApiResult<Value> {
    let rt = &t.rt;
    match t.subresource.as_deref() {
        Some("status") => {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if merged["status"].is_null() {
                drop_key(&mut merged, "status");
            }
            new = merged;
        }
        Some("finalize") => {
            let mut merged = old.clone();
            merged["spec"]["finalizers"] = new["spec"]["finalizers"].clone();
            new = merged;
        }
        Some(other) => {
            return Err(ApiError::no_such_resource().with_details(crate::error::Details {
                name: t.name().into(),
                group: rt.group.clone(),
                kind: format!("{}/{other}", rt.resource),
            }));
        }
        None => {
            if rt.has_status() {
                match old.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => drop_key(&mut new, "status"),
                }
            }
            if rt.resource == "namespaces" && rt.group.is_empty() {
                new["spec"]["finalizers"] = old["spec"]["finalizers"].clone();
            }
            if rt.group.is_empty() && rt.resource == "secrets" {
                prepare_secret(&mut new)?;
            }
        }
    }
    keep_server_metadata(old, &mut new);
    if let Some((state, user)) = escalation {
        // Compared as stored: with the defaults the stored object got.
        validation::apply_builtin_defaults(&rt.group, &rt.resource, &mut new);
        crate::escalation::check_update(state, t, user, old, &new)?;
    }
    validate(t, Some(old), &mut new)?;
    Ok(new)
}

/// Fields of metadata that only the server sets.
fn keep_server_metadata(old: &Value, new: &mut Value) {
    let old_meta = &old["metadata"];
    let meta = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
}

/// Stores an updated object, unless nothing but bookkeeping changed; removes it when it was
/// being deleted and its last finalizer is gone.
fn commit_update(
    state: &mut State,
    t: &Target,
    old: &Value,
    mut new: Value,
    dry_run: bool,
) -> ApiResult<Value> {
    bump_generation(&t.rt, old, &mut new);
    metadata_mut(&mut new).insert("resourceVersion".into(), old["metadata"]["resourceVersion"].clone());
    if same_but_managed_field_times(&new, old) || dry_run {
        return Ok(if dry_run { new } else { old.clone() });
    }
    if finalized(&t.rt, &new) {
        return Ok(remove_now(state, t, new));
    }
    let rv = state.next_resource_version();
    metadata_mut(&mut new).insert("resourceVersion".into(), rv.to_string().into());
    let stored = convert::to_storage(&t.rt, new);
    state.put(&t.rt.storage, t.key(), &stored, rv);
    after_write(state, t, &stored);
    Ok(convert::from_storage(&t.rt, stored))
}

/// Whether a deleting object has no finalizer left holding it.
fn finalized(rt: &ResourceType, object: &Value) -> bool {
    let meta = &object["metadata"];
    if meta.get("deletionTimestamp").is_none_or(Value::is_null) {
        return false;
    }
    let empty = |v: &Value| v.as_array().is_none_or(Vec::is_empty);
    let namespace_done =
        !(rt.group.is_empty() && rt.resource == "namespaces") || empty(&object["spec"]["finalizers"]);
    empty(&meta["finalizers"]) && namespace_done
}

/// Whether `new` equals `old` but for the `time` of `metadata.managedFields` entries: such an
/// update changes nothing, so kube-apiserver keeps the resourceVersion and sends no watch event.
/// Walks both objects in place, as it runs on every update, patch and apply.
fn same_but_managed_field_times(new: &Value, old: &Value) -> bool {
    same_members_but(new, old, "metadata", |new, old| match (new, old) {
        (Some(new), Some(old)) => same_metadata_but_times(new, old),
        (new, old) => new == old,
    })
}

fn same_metadata_but_times(new: &Value, old: &Value) -> bool {
    same_members_but(new, old, "managedFields", |new, old| match (new, old) {
        (Some(Value::Array(new)), Some(Value::Array(old))) => {
            new.len() == old.len()
                && new.iter().zip(old).all(|(new, old)| same_members_but(new, old, "time", |_, _| true))
        }
        (new, old) => new == old,
    })
}

/// Whether two values are equal, comparing the member `key` of two objects with `same_at_key`
/// (given the member of each, if present) rather than by equality; values that are not both
/// objects are compared as they are.
fn same_members_but(
    new: &Value,
    old: &Value,
    key: &str,
    same_at_key: impl Fn(Option<&Value>, Option<&Value>) -> bool,
) -> bool {
    let (Some(new_members), Some(old_members)) = (new.as_object(), old.as_object()) else {
        return new == old;
    };
    let others = |members: &Map<String, Value>| members.len() - usize::from(members.contains_key(key));
    others(new_members) == others(old_members)
        && new_members
            .iter()
            .filter(|(name, _)| *name != key)
            .all(|(name, value)| old_members.get(name) == Some(value))
        && same_at_key(new_members.get(key), old_members.get(key))
}

fn bump_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
    if !rt.tracks_generation() {
        return;
    }
    let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
    let spec_of = |v: &Value| -> Value {
        let mut copy = v.clone();
        if let Some(obj) = copy.as_object_mut() {
            obj.remove("metadata");
            obj.remove("status");
        }
        copy
    };
    let changed = spec_of(old) != spec_of(new);
    metadata_mut(new).insert("generation".into(), (if changed { generation + 1 } else { generation }).into());
}

pub fn patch(
    state: &mut State,
    t: &Target,
    kind: PatchType,
    body: &[u8],
    opts: &WriteOptions,
) -> ApiResult<Value> {
    let document = parse_patch_body(kind, body)?;
    let existing = state.get(&t.rt.storage, &t.key());
    if kind == PatchType::Apply {
        return apply(state, t, existing.map(|e| convert::from_storage(&t.rt, e.value())), document, opts);
    }
    let Some(existing) = existing else { return Err(t.not_found()) };
    let old = convert::from_storage(&t.rt, existing.value());
    let mut patched = old.clone();
    match kind {
        PatchType::Json => patch::json_patch(&mut patched, &document),
        PatchType::Merge => {
            patch::merge_patch(&mut patched, &document);
            Ok(())
        }
        PatchType::StrategicMerge if t.rt.is_custom() => {
            let accepted =
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";
            Err(PatchError::Unsupported(format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            )))
        }
        PatchType::StrategicMerge => {
            patch::strategic_merge_patch(&mut patched, &document, &t.rt.group, &t.rt.kind)
        }
        PatchType::Apply => unreachable!("handled above"),
    }
    .map_err(|e| patch_error(t, e))?;
    check_known_fields(t, &patched, opts)?;
    let mut patched = typed_object(t, patched)?;
    check_body_name(t, &mut patched)?;
    check_resource_version(t, patched["metadata"]["resourceVersion"].as_str(), existing.resource_version)?;
    let mut object = prepare_update(t, &old, patched, escalation_guard(state, opts))?;
    track_update(t, Some(&old), &mut object, &opts.field_manager);
    commit_update(state, t, &old, object, opts.dry_run)
}

fn parse_patch_body(kind: PatchType, body: &[u8]) -> ApiResult<Value> {
    let parsed = if kind == PatchType::Apply {
        serde_yaml::from_slice::<Value>(body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// The patch engine's error as the `Status` kube-apiserver sends: its own code, reason,
/// message and conflict causes, with the object named in the details.
fn patch_error(t: &Target, error: PatchError) -> ApiError {
    let causes = error
        .causes()
        .iter()
        .map(|c| StatusCause {
            reason: c["reason"].as_str().unwrap_or_default().to_owned(),
            message: c["message"].as_str().unwrap_or_default().to_owned(),
            field: c["field"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    ApiError::new(error.status_code(), error.reason(), error.to_string())
        .with_details(crate::error::Details {
            name: t.name().into(),
            group: t.rt.group.clone(),
            kind: t.rt.resource.clone(),
        })
        .with_causes(causes)
}

fn apply(
    state: &mut State,
    t: &Target,
    live: Option<Value>,
    applied: Value,
    opts: &WriteOptions,
) -> ApiResult<Value> {
    if opts.field_manager.is_empty() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    check_known_fields(t, &applied, opts)?;
    let sent = applied.clone();
    let mut typed = typed_object(t, applied)?;
    only_fields_sent(&mut typed, &sent);
    let mut applied = restrict_to_subresource(t, typed);
    check_body_name(t, &mut applied)?;
    if let Some(ns) = &t.namespace {
        metadata_mut(&mut applied).insert("namespace".into(), ns.clone().into());
    }
    let now = now();
    let schema_lists;
    let builtin_lists;
    let lists: &dyn patch::ListTypes = match &t.rt.custom {
        Some(custom) => {
            schema_lists = patch::SchemaListTypes::new(&custom.schema);
            &schema_lists
        }
        None => {
            builtin_lists = patch::BuiltinListTypes::new(&t.rt.group, &t.rt.kind);
            &builtin_lists
        }
    };
    let sub = t.subresource.as_deref();
    let merged =
        patch::server_side_apply(live.as_ref(), &applied, &opts.field_manager, opts.force, sub, lists, &now)
            .map_err(|e| patch_error(t, e))?;
    match live {
        None => {
            if t.subresource.is_some() {
                return Err(t.not_found());
            }
            if let Some(ns) = &t.namespace {
                check_namespace_accepts(state, t, ns, t.name())?;
            }
            if let Some(user) = &opts.requester {
                crate::escalation::check_create(state, t, user, &merged)?;
            }
            let mut object = prepare_new_object(t, merged.clone())?;
            if let Some(fields) = merged["metadata"].get("managedFields") {
                metadata_mut(&mut object).insert("managedFields".into(), fields.clone());
            }
            insert_new(state, t, t.key(), object, opts.dry_run)
        }
        Some(old) => {
            let current =
                old["metadata"]["resourceVersion"].as_str().and_then(|rv| rv.parse().ok()).unwrap_or(0);
            check_resource_version(t, applied["metadata"]["resourceVersion"].as_str(), current)?;
            let mut object = prepare_update(t, &old, merged.clone(), escalation_guard(state, opts))?;
            if let Some(fields) = merged["metadata"].get("managedFields") {
                metadata_mut(&mut object).insert("managedFields".into(), fields.clone());
            }
            commit_update(state, t, &old, object, opts.dry_run)
        }
    }
}

/// An applied configuration is partial: decoding it into its type fills the fields it left
/// out with empty values (a RoleBinding without `roleRef` would apply an empty one, and
/// conflict with whoever owns the real one). kube-apiserver reads an applied configuration
/// as it was sent, so what the round trip added is taken out again; what it dropped or
/// converted stays as the type says.
fn only_fields_sent(typed: &mut Value, sent: &Value) {
    // The root's type and metadata are the request's own, filled in whether sent or not.
    if let (Value::Object(typed), Value::Object(sent)) = (&mut *typed, sent) {
        typed.retain(|key, _| {
            sent.contains_key(key) || ["apiVersion", "kind", "metadata"].contains(&key.as_str())
        });
    }
    fields_sent_below(typed, sent);
}

fn fields_sent_below(typed: &mut Value, sent: &Value) {
    match (typed, sent) {
        (Value::Object(typed), Value::Object(sent)) => {
            typed.retain(|key, _| sent.contains_key(key));
            for (key, value) in typed.iter_mut() {
                if let Some(original) = sent.get(key) {
                    fields_sent_below(value, original);
                }
            }
        }
        (Value::Array(typed), Value::Array(sent)) if typed.len() == sent.len() => {
            for (value, original) in typed.iter_mut().zip(sent) {
                fields_sent_below(value, original);
            }
        }
        _ => {}
    }
}

/// The fields an apply may set through this endpoint: the main resource of a kind with a
/// status subresource ignores `status`; `/status` ignores everything else.
fn restrict_to_subresource(t: &Target, mut applied: Value) -> Value {
    match t.subresource.as_deref() {
        Some("status") => {
            let meta = &applied["metadata"];
            let mut kept = json!({"apiVersion": applied["apiVersion"], "kind": applied["kind"],
                "metadata": {"name": meta["name"]}});
            if let Some(ns) = meta.get("namespace") {
                kept["metadata"]["namespace"] = ns.clone();
            }
            if let Some(rv) = meta.get("resourceVersion") {
                kept["metadata"]["resourceVersion"] = rv.clone();
            }
            if let Some(status) = applied.get("status") {
                kept["status"] = status.clone();
            }
            kept
        }
        _ => {
            if t.rt.has_status() {
                drop_key(&mut applied, "status");
            }
            applied
        }
    }
}

/// The response body for a delete: the object (if it lingers, or for kinds that return
/// it) or a Success status.
pub fn delete(state: &mut State, t: &Target, opts: &DeleteOptions) -> ApiResult<Value> {
    let existing = state.get(&t.rt.storage, &t.key()).ok_or_else(|| t.not_found())?;
    let mut object = convert::from_storage(&t.rt, existing.value());
    check_preconditions(t, &existing, opts)?;
    if opts.dry_run {
        return Ok(object);
    }
    if existing.deleting {
        return Ok(object);
    }
    let propagation = opts.propagation.unwrap_or(Propagation::Background);
    let meta = metadata_mut(&mut object);
    let mut finalizers: Vec<Value> =
        meta.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    let extra = match propagation {
        Propagation::Foreground => Some(FOREGROUND_FINALIZER),
        Propagation::Orphan => Some(ORPHAN_FINALIZER),
        Propagation::Background => None,
    };
    if let Some(f) = extra
        && !finalizers.iter().any(|x| x == f)
    {
        finalizers.push(f.into());
    }
    let is_namespace = t.rt.group.is_empty() && t.rt.resource == "namespaces";
    if finalizers.is_empty() && !is_namespace {
        let removed = remove_now(state, t, object);
        return Ok(deleted_response(t, &existing, removed));
    }
    meta.insert("finalizers".into(), Value::Array(finalizers));
    meta.insert("deletionTimestamp".into(), now().into());
    meta.insert("deletionGracePeriodSeconds".into(), 0.into());
    if is_namespace {
        object["status"]["phase"] = "Terminating".into();
    }
    let rv = state.next_resource_version();
    metadata_mut(&mut object).insert("resourceVersion".into(), rv.to_string().into());
    let stored = convert::to_storage(&t.rt, object);
    state.put(&t.rt.storage, t.key(), &stored, rv);
    Ok(convert::from_storage(&t.rt, stored))
}

fn check_preconditions(t: &Target, existing: &StoredObject, opts: &DeleteOptions) -> ApiResult<()> {
    if let Some(uid) = &opts.precondition_uid
        && uid != &existing.uid
    {
        let why =
            format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", existing.uid);
        return Err(ApiError::conflict(&t.rt.group, &t.rt.resource, t.name(), &why));
    }
    if let Some(rv) = &opts.precondition_resource_version
        && rv != &existing.resource_version.to_string()
    {
        let why = format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            existing.resource_version
        );
        return Err(ApiError::conflict(&t.rt.group, &t.rt.resource, t.name(), &why));
    }
    Ok(())
}

fn deleted_response(t: &Target, existing: &StoredObject, removed: Value) -> Value {
    if t.rt.returns_deleted_object() {
        return removed;
    }
    let mut details = json!({"name": t.name(), "kind": t.rt.resource, "uid": existing.uid});
    if !t.rt.group.is_empty() {
        details["group"] = t.rt.group.clone().into();
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// Removes an object for good and tells watchers; returns its final state as served.
fn remove_now(state: &mut State, t: &Target, mut object: Value) -> Value {
    let rv = state.next_resource_version();
    metadata_mut(&mut object).insert("resourceVersion".into(), rv.to_string().into());
    let stored = convert::to_storage(&t.rt, object);
    state.remove(&t.rt.storage, &t.key(), &stored, rv);
    after_remove(state, t, &stored);
    convert::from_storage(&t.rt, stored)
}

pub fn delete_collection(
    state: &mut State,
    t: &Target,
    list: &ListOptions,
    opts: &DeleteOptions,
) -> ApiResult<Value> {
    let names: Vec<ObjKey> = state
        .list(&t.rt.storage, t.namespace.as_deref())
        .into_iter()
        .filter(|(key, stored)| list.matches(&t.rt, key, stored))
        .map(|(key, _)| key)
        .collect();
    let mut items = Vec::new();
    for (ns, name) in names {
        let target =
            Target { namespace: if ns.is_empty() { None } else { Some(ns) }, name: Some(name), ..t.clone() };
        match delete(state, &target, opts) {
            Ok(object) if object["kind"] != "Status" => items.push(object),
            Ok(_) | Err(ApiError { code: 404, .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json!({
        "kind": format!("{}List", t.rt.kind),
        "apiVersion": t.rt.api_version(),
        "metadata": {"resourceVersion": state.resource_version().to_string()},
        "items": items,
    }))
}

/// Keeps the registry in step with CRDs as they are written.
fn after_write(state: &mut State, t: &Target, crd: &Value) {
    if is_crd_storage(&t.rt.storage) {
        serve_crd(state, crd);
    }
}

pub(crate) fn is_crd_storage(storage: &StorageKey) -> bool {
    storage.group == "apiextensions.k8s.io" && storage.resource == "customresourcedefinitions"
}

/// Serves the versions `crd` declares, in place of what an earlier state of it declared.
pub(crate) fn serve_crd(state: &mut State, crd: &Value) {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    state.registry.remove_crd(&name);
    for rt in served_versions(crd) {
        state.registry.insert(rt);
    }
}

fn after_remove(state: &mut State, t: &Target, crd: &Value) {
    if t.rt.group == "apiextensions.k8s.io" && t.rt.resource == "customresourcedefinitions" {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(storage) = crd_storage(crd) {
            state.drop_table(&storage);
        }
        state.registry.remove_crd(name);
    }
}

pub fn crd_storage(crd: &Value) -> Option<StorageKey> {
    Some(StorageKey {
        group: crd["spec"]["group"].as_str()?.to_owned(),
        resource: crd["spec"]["names"]["plural"].as_str()?.to_owned(),
    })
}

/// One served resource type per served version of a CRD.
fn served_versions(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let Some(storage) = crd_storage(crd) else { return Vec::new() };
    let names = &spec["names"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    let mut versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| v.iter().filter(|v| v["served"] != false).collect())
        .unwrap_or_default();
    versions.sort_by(|a, b| {
        version_priority(b["name"].as_str().unwrap_or_default())
            .cmp(&version_priority(a["name"].as_str().unwrap_or_default()))
    });
    versions
        .into_iter()
        .map(|version| ResourceType {
            group: storage.group.clone(),
            version: version["name"].as_str().unwrap_or_default().to_owned(),
            resource: storage.resource.clone(),
            kind: kind.clone(),
            singular: names["singular"].as_str().map_or_else(|| kind.to_lowercase(), str::to_owned),
            namespaced: spec["scope"] != "Cluster",
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            subresources: if version["subresources"]["status"].is_object() {
                vec!["status".into()]
            } else {
                vec![]
            },
            storage: storage.clone(),
            view: View::Native,
            custom: Some(Arc::new(CustomInfo {
                crd_name: crd["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                schema: version["schema"]["openAPIV3Schema"].clone(),
                printer_columns: version["additionalPrinterColumns"].as_array().cloned().unwrap_or_default(),
            })),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmap(label: &str, managed_fields: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "default",
                "resourceVersion": "7",
                "labels": {"tier": label},
                "managedFields": managed_fields,
            },
            "data": {"mode": "fast"},
        })
    }

    fn entry(manager: &str, field: &str, time: &str) -> Value {
        json!({
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {(format!("f:{field}")): {}}},
        })
    }

    #[test]
    fn update_moving_only_managed_field_times_changes_nothing() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let new = configmap("web", json!([entry("kubectl", "mode", "2024-06-01T12:30:00Z")]));
        assert!(same_but_managed_field_times(&new, &old));
    }

    #[test]
    fn update_adding_or_dropping_a_managed_field_time_changes_nothing() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let mut new = old.clone();
        new["metadata"]["managedFields"][0].as_object_mut().unwrap().remove("time");
        assert!(same_but_managed_field_times(&new, &old));
        assert!(same_but_managed_field_times(&old, &new));
    }

    #[test]
    fn update_changing_a_label_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let new = configmap("db", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        assert!(!same_but_managed_field_times(&new, &old));
    }

    #[test]
    fn update_changing_data_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let mut new = old.clone();
        new["data"]["mode"] = json!("slow");
        assert!(!same_but_managed_field_times(&new, &old));
    }

    #[test]
    fn update_changing_a_managed_entrys_fields_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let new = configmap("web", json!([entry("kubectl", "size", "2024-01-01T00:00:00Z")]));
        assert!(!same_but_managed_field_times(&new, &old));
    }

    #[test]
    fn update_changing_a_managed_entrys_manager_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let new = configmap("web", json!([entry("helm", "mode", "2024-01-01T00:00:00Z")]));
        assert!(!same_but_managed_field_times(&new, &old));
    }

    #[test]
    fn update_adding_a_managed_entry_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let new = configmap(
            "web",
            json!([
                entry("kubectl", "mode", "2024-01-01T00:00:00Z"),
                entry("helm", "size", "2024-01-01T00:00:00Z"),
            ]),
        );
        assert!(!same_but_managed_field_times(&new, &old));
        assert!(!same_but_managed_field_times(&old, &new));
    }

    #[test]
    fn update_adding_or_removing_a_member_is_a_real_update() {
        let old = configmap("web", json!([entry("kubectl", "mode", "2024-01-01T00:00:00Z")]));
        let mut new = old.clone();
        new["metadata"]["annotations"] = json!({"note": "x"});
        assert!(!same_but_managed_field_times(&new, &old));
        assert!(!same_but_managed_field_times(&old, &new));
        let mut without_managed_fields = old.clone();
        without_managed_fields["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert!(!same_but_managed_field_times(&without_managed_fields, &old));
        assert!(!same_but_managed_field_times(&old, &without_managed_fields));
    }
}
