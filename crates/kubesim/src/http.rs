//! The HTTP face of kubesim: routes kube-apiserver's paths to the API functions, encodes
//! responses and errors, and streams watches.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::access_review::{self, ReviewKind};
use crate::api::{self, DeleteOptions, ListOptions, Target, WriteOptions};
use crate::authz::{self, RequestAttributes};
use crate::error::{ApiError, ApiResult};
use crate::escalation::RbacObjects;
use crate::patch::PatchType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::self_subject_review;
use crate::server::{Authorization, DRY_RUN_PREFIX, Sim};
use crate::watch;

#[derive(Clone)]
struct App {
    sim: Arc<Sim>,
    shutdown: CancellationToken,
}

pub fn router(sim: Arc<Sim>, shutdown: CancellationToken) -> Router {
    Router::new().fallback(handle).layer(DefaultBodyLimit::disable()).with_state(App { sim, shutdown })
}

/// A parsed request: what it is about and how it was asked.
struct Request {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
}

impl Request {
    fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    fn header(&self, name: header::HeaderName) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    fn wants_metadata_only(&self) -> bool {
        self.header(header::ACCEPT).contains("as=PartialObjectMetadata")
    }
}

async fn handle(
    AxumState(app): AxumState<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = uri
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let request = Request { method, path: uri.path().to_owned(), query, headers, body };
    let response = match route(&app, &request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    app.sim.counters.record_status(response.status().as_u16());
    response
}

async fn route(app: &App, req: &Request) -> ApiResult<Response> {
    if req.body.len() > app.sim.config.max_body_bytes {
        return Err(ApiError::too_large(app.sim.config.max_body_bytes));
    }
    let segments: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(response) = non_resource(app, req, &segments)? {
        return Ok(response);
    }
    if let ["apis", access_review::GROUP, access_review::VERSION, resource] = segments.as_slice()
        && let Some(kind) = ReviewKind::from_resource(resource)
    {
        return review_access(app, req, kind);
    }
    if let ["apis", access_review::GROUP, access_review::VERSION, access_review::RULES_RESOURCE] =
        segments.as_slice()
    {
        return review_rules(app, req);
    }
    if let ["apis", self_subject_review::GROUP, self_subject_review::VERSION, self_subject_review::RESOURCE] =
        segments.as_slice()
    {
        return review_self(app, req);
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_such_resource()),
    };
    let (target, watch_path) = resolve(app, group, version, rest)?;
    let verb = verb_of(req, &target, watch_path)?;
    let resource = match &target.subresource {
        Some(sub) => format!("{}/{sub}", target.rt.resource),
        None => target.rt.resource.clone(),
    };
    authorize(app, req, &target, verb)?;
    // A dry-run writes nothing: counted apart, so "no write" stays provable with them.
    if req.param("dryRun") == Some("All") {
        app.sim.counters.record(&format!("{DRY_RUN_PREFIX}{verb}"), &resource);
    } else {
        app.sim.counters.record(verb, &resource);
    }
    app.sim.faults.wait_if_held(verb, &resource).await;
    if let Some(status) = app.sim.faults.take(verb, &resource) {
        return Err(injected(status, &target));
    }
    dispatch(app, req, &target, verb).await
}

/// Creates a SelfSubjectAccessReview or SubjectAccessReview: the request itself is
/// authorized like any create, then the question it asks goes to the authorizer that
/// decides every other request.
fn review_access(app: &App, req: &Request, kind: ReviewKind) -> ApiResult<Response> {
    let requester = review_requester(app, req, access_review::GROUP, kind.resource())?;
    let body = decode_body(req)?;
    let question = access_review::question(kind, &body, &requester)?;
    let verdict = decide(app, &question.user, &question.attrs);
    Ok(json_response(StatusCode::CREATED, &access_review::answer(kind, &body, &verdict)))
}

/// Creates a SelfSubjectRulesReview: what the requester may do in one namespace, from the
/// same bindings that authorize requests. Without RBAC, anything.
fn review_rules(app: &App, req: &Request) -> ApiResult<Response> {
    let requester = review_requester(app, req, access_review::GROUP, access_review::RULES_RESOURCE)?;
    let body = decode_body(req)?;
    let namespace = access_review::rules_namespace(&body)?;
    let (rules, error) = match app.sim.config.authorization {
        Authorization::Rbac => authz::rules_for(&requester, &namespace, &rbac_objects(app).snapshot()),
        Authorization::AlwaysAllow => {
            authz::rules_for(&authz::UserInfo::admin(), &namespace, &authz::RbacSnapshot::EMPTY)
        }
    };
    Ok(json_response(StatusCode::CREATED, &access_review::rules_answer(&body, &rules, error.as_deref())))
}

/// Creates a SelfSubjectReview: the request is authorized like any create (every
/// authenticated user may, through `system:basic-user`), and answered with who made it.
fn review_self(app: &App, req: &Request) -> ApiResult<Response> {
    let requester = review_requester(app, req, self_subject_review::GROUP, self_subject_review::RESOURCE)?;
    decode_body(req)?;
    Ok(json_response(StatusCode::CREATED, &self_subject_review::answer(&requester)))
}

/// Who creates a review, which is only ever answered, never stored: with RBAC, a user allowed
/// to `create` it; without, the token's user, or the admin for a request without one.
fn review_requester(app: &App, req: &Request, group: &str, resource: &str) -> ApiResult<authz::UserInfo> {
    if req.method != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let requester = match app.sim.config.authorization {
        Authorization::Rbac => {
            let create = RequestAttributes {
                verb: "create".to_owned(),
                api_group: group.to_owned(),
                resource: resource.to_owned(),
                path: req.path.clone(),
                is_resource_request: true,
                ..RequestAttributes::default()
            };
            check(app, req, &create, None)?;
            authenticate(app, req)?
        }
        Authorization::AlwaysAllow => authenticate(app, req).unwrap_or_else(|_| authz::UserInfo::admin()),
    };
    app.sim.counters.record("create", resource);
    Ok(requester)
}

/// What the configured authorizer says about `user` doing `attrs`.
fn decide(app: &App, user: &authz::UserInfo, attrs: &RequestAttributes) -> authz::Verdict {
    match app.sim.config.authorization {
        Authorization::Rbac => authz::evaluate(user, attrs, &rbac_objects(app).snapshot()),
        Authorization::AlwaysAllow => authz::Verdict { decision: authz::Decision::Allow, reason: None },
    }
}

/// The stored RBAC objects, copied out so that no lock is held while deciding.
fn rbac_objects(app: &App) -> RbacObjects {
    RbacObjects::load(&app.sim.lock())
}

/// Discovery, version and health endpoints. `Ok(None)` for resource paths.
fn non_resource(app: &App, req: &Request, segments: &[&str]) -> ApiResult<Option<Response>> {
    if !segments.is_empty() && !matches!(segments[0], "api" | "apis") {
        authorize_path(app, req)?;
    }
    let state = || app.sim.lock();
    let document = match segments {
        ["version"] => json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-kubesim", "gitCommit": "kubesim",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "n/a",
            "compiler": "rustc", "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
        ["healthz" | "readyz" | "livez", ..] => {
            return Ok(Some((StatusCode::OK, "ok").into_response()));
        }
        ["api"] => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": app_addr(req)}],
        }),
        ["api", "v1"] => state().registry.resource_list("", "v1"),
        ["apis"] => state().registry.group_list(),
        ["apis", group] => state().registry.group(group).ok_or_else(ApiError::no_such_resource)?,
        ["apis", group, version] => {
            let state = state();
            if !state.registry.group_version_served(group, version) {
                return Err(ApiError::no_such_resource());
            }
            state.registry.resource_list(group, version)
        }
        ["api" | "apis", ..] => return Ok(None),
        ["openapi", "v3", rest @ ..] => {
            crate::openapi::document(&state().registry, rest).ok_or_else(ApiError::no_such_resource)?
        }
        _ => return Err(ApiError::no_such_resource()),
    };
    Ok(Some(json_response(StatusCode::OK, &document)))
}

fn app_addr(req: &Request) -> String {
    req.header(header::HOST).to_owned()
}

/// Maps the path after `/api/v1` or `/apis/{group}/{version}` to a target. The second value
/// is true for the legacy `/watch/` path form.
fn resolve(app: &App, group: &str, version: &str, rest: &[&str]) -> ApiResult<(Target, bool)> {
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let registry = &app.sim.lock().registry;
    let lookup = |resource: &str| registry.get(group, version, resource);
    let target = match rest {
        ["namespaces", ns, resource, tail @ ..] if lookup(resource).is_some_and(|rt| rt.namespaced) => {
            let rt = lookup(resource).ok_or_else(ApiError::no_such_resource)?;
            match tail {
                [] => Target { rt, namespace: Some((*ns).into()), name: None, subresource: None },
                [name] => Target {
                    rt,
                    namespace: Some((*ns).into()),
                    name: Some((*name).into()),
                    subresource: None,
                },
                [name, sub] => subresource_target(rt, Some(ns), name, sub)?,
                _ => return Err(ApiError::no_such_resource()),
            }
        }
        [resource, tail @ ..] => {
            let rt = lookup(resource).ok_or_else(ApiError::no_such_resource)?;
            match tail {
                [] => Target { rt, namespace: None, name: None, subresource: None },
                [_, ..] if rt.namespaced => return Err(ApiError::no_such_resource()),
                [name] => Target { rt, namespace: None, name: Some((*name).into()), subresource: None },
                [name, sub] => subresource_target(rt, None, name, sub)?,
                _ => return Err(ApiError::no_such_resource()),
            }
        }
        [] => return Err(ApiError::no_such_resource()),
    };
    Ok((target, watch_path))
}

fn subresource_target(
    rt: Arc<crate::registry::ResourceType>,
    ns: Option<&&str>,
    name: &str,
    sub: &str,
) -> ApiResult<Target> {
    if !rt.subresources.iter().any(|s| s == sub) {
        return Err(ApiError::no_such_resource());
    }
    Ok(Target {
        rt,
        namespace: ns.map(|n| (*n).to_owned()),
        name: Some(name.into()),
        subresource: Some(sub.into()),
    })
}

fn verb_of(req: &Request, t: &Target, watch_path: bool) -> ApiResult<&'static str> {
    let named = t.name.is_some();
    let verb = match (&req.method, named) {
        (&Method::GET, true) if watch_path || req.flag("watch") => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watch_path || req.flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        (method, _) => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )));
        }
    };
    if t.subresource.is_some() && !matches!(verb, "get" | "update" | "patch") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    Ok(verb)
}

/// The error an injected fault answers with: the reason and message kube-apiserver sends
/// with that code, so clients classify it as they would a real one.
fn injected(status: u16, t: &Target) -> ApiError {
    let name = t.name.as_deref().unwrap_or_default();
    let (group, resource) = (t.rt.group.as_str(), t.rt.resource.as_str());
    match status {
        400 => ApiError::bad_request("injected by kubesim"),
        403 => {
            let message = format!(
                "{} \"{name}\" is forbidden: injected by kubesim",
                crate::error::qualified(group, resource)
            );
            ApiError::forbidden(group, resource, name, message)
        }
        404 => ApiError::not_found(group, resource, name),
        409 => ApiError::stale(group, resource, name),
        410 => ApiError::gone("injected by kubesim"),
        422 => ApiError::invalid(
            group,
            &t.rt.kind,
            name,
            format!("{} \"{name}\" is invalid: injected by kubesim", t.rt.kind),
            Vec::new(),
        ),
        429 => {
            let mut e = ApiError::new(429, "TooManyRequests", "Too many requests, please try again later.");
            e.retry_after = Some(1);
            e.with_details(crate::error::Details::default())
        }
        503 => {
            ApiError::new(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        }
        504 => {
            ApiError::new(504, "Timeout", "the server was unable to return a response in the time allotted")
        }
        other => ApiError::new(other, "InternalError", "Internal error occurred: injected by kubesim"),
    }
}

async fn dispatch(app: &App, req: &Request, t: &Target, verb: &str) -> ApiResult<Response> {
    let sim = &app.sim;
    match verb {
        "get" | "list" if let Some(table) = table_request(req) => {
            let found = if verb == "get" {
                api::get(&sim.lock(), t)?
            } else {
                api::list(&sim.lock(), t, &list_options(req, t)?)?
            };
            Ok(json_response(StatusCode::OK, &crate::table::render(&t.rt, &found, table)))
        }
        "get" => respond(req, StatusCode::OK, api::get(&sim.lock(), t)?),
        "list" => {
            let opts = list_options(req, t)?;
            if let Some(rv) = list_resource_version(req)? {
                watch::wait_until_fresh(sim, rv).await?;
            }
            let list = api::list(&sim.lock(), t, &opts)?;
            respond_list(req, list)
        }
        "watch" => watch::serve(sim.clone(), app.shutdown.clone(), t.clone(), watch_options(req, t)?).await,
        "create" => {
            let opts = write_options(app, req, t)?;
            let prepared = api::prepare_create(t, decode_body(req)?, &opts);
            let created = api::commit_create(&mut sim.lock(), t, prepared, &opts)?;
            respond(req, StatusCode::CREATED, created)
        }
        "update" => {
            let body = decode_body(req)?;
            let opts = write_options(app, req, t)?;
            let updated = api::update(&mut sim.lock(), t, body, &opts)?;
            respond(req, StatusCode::OK, updated)
        }
        "patch" => {
            let content_type = req.header(header::CONTENT_TYPE);
            let kind = PatchType::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(
                    content_type,
                    &[
                        "application/json-patch+json",
                        "application/merge-patch+json",
                        "application/apply-patch+yaml",
                        "application/strategic-merge-patch+json",
                    ],
                )
            })?;
            // Authenticating may consult RBAC, which takes the store's lock itself.
            let opts = write_options(app, req, t)?;
            let mut state = sim.lock();
            let existed = kind == PatchType::Apply && api::get(&state, t).is_ok();
            let patched = api::patch(&mut state, t, kind, &req.body, &opts)?;
            let code =
                if kind == PatchType::Apply && !existed { StatusCode::CREATED } else { StatusCode::OK };
            respond(req, code, patched)
        }
        "delete" => {
            let opts = delete_options(req)?;
            respond(req, StatusCode::OK, api::delete(&mut sim.lock(), t, &opts)?)
        }
        "deletecollection" => {
            let opts = delete_options(req)?;
            let list = list_options(req, t)?;
            respond(req, StatusCode::OK, api::delete_collection(&mut sim.lock(), t, &list, &opts)?)
        }
        _ => Err(ApiError::method_not_allowed("unsupported verb")),
    }
}

fn decode_body(req: &Request) -> ApiResult<Value> {
    let content_type = req.header(header::CONTENT_TYPE);
    let media = content_type.split(';').next().unwrap_or_default().trim();
    match media {
        "" | "application/json" | "*/*" => serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))),
        "application/yaml" => serde_yaml::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))),
        crate::protobuf::MEDIA_TYPE => Ok(crate::protobuf::decode(&req.body)?),
        other => Err(ApiError::unsupported_media_type(
            other,
            &["application/json", "application/yaml", crate::protobuf::MEDIA_TYPE],
        )),
    }
}

/// The options of a write. Under RBAC, a write of an RBAC object carries its requester, for
/// the privilege-escalation checks the API layer runs.
fn write_options(app: &App, req: &Request, t: &Target) -> ApiResult<WriteOptions> {
    let requester = if app.sim.config.authorization == Authorization::Rbac && crate::escalation::guards(t) {
        Some(authenticate(app, req)?)
    } else {
        None
    };
    Ok(WriteOptions { requester, ..request_write_options(req) })
}

fn request_write_options(req: &Request) -> WriteOptions {
    let is_apply = req.method == Method::PATCH
        && PatchType::from_content_type(req.header(header::CONTENT_TYPE)) == Some(PatchType::Apply);
    let field_manager = match req.param("fieldManager") {
        Some(manager) => manager.to_owned(),
        // An apply must name its manager (the API layer refuses it otherwise).
        None if is_apply => String::new(),
        // kube-apiserver names an unnamed manager after the client's user agent product.
        None => {
            req.header(header::USER_AGENT).split('/').next().unwrap_or_default().chars().take(128).collect()
        }
    };
    WriteOptions {
        dry_run: req.param("dryRun") == Some("All"),
        field_manager,
        force: req.flag("force"),
        strict: req.param("fieldValidation") == Some("Strict"),
        requester: None,
    }
}

fn delete_options(req: &Request) -> ApiResult<DeleteOptions> {
    // client-go (Helm, kubectl) sends DeleteOptions as protobuf for built-in kinds.
    let body: Value = if req.body.is_empty() { Value::Null } else { decode_body(req)? };
    let mut opts = DeleteOptions::from_body(&body);
    // kube-apiserver also reads DeleteOptions from the query (kubectl --raw, curl).
    let orphan_dependents = req.param("orphanDependents").map(|_| req.flag("orphanDependents"));
    let query =
        json!({"propagationPolicy": req.param("propagationPolicy"), "orphanDependents": orphan_dependents});
    if let Some(propagation) = DeleteOptions::from_body(&query).propagation {
        opts.propagation = Some(propagation);
    }
    if req.param("dryRun") == Some("All") {
        opts.dry_run = true;
    }
    Ok(opts)
}

fn selectors(req: &Request, t: &Target) -> ApiResult<(Option<LabelSelector>, Option<FieldSelector>)> {
    let labels = match req.param("labelSelector") {
        Some(s) => Some(LabelSelector::parse(s).map_err(ApiError::bad_request)?),
        None => None,
    };
    let fields = match req.param("fieldSelector") {
        Some(s) => {
            let parsed = FieldSelector::parse(s).map_err(ApiError::bad_request)?;
            parsed
                .check_supported(&t.rt.group, &t.rt.resource, t.rt.is_custom())
                .map_err(ApiError::bad_request)?;
            Some(parsed)
        }
        None => None,
    };
    Ok((labels, fields))
}

fn list_options(req: &Request, t: &Target) -> ApiResult<ListOptions> {
    let (label_selector, field_selector) = selectors(req, t)?;
    let limit = match req.param("limit") {
        Some(l) => {
            Some(l.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?)
        }
        None => None,
    }
    .filter(|l| *l > 0);
    Ok(ListOptions {
        label_selector,
        field_selector,
        limit,
        continue_token: req.param("continue").map(str::to_owned),
    })
}

/// The `resourceVersion` a request asks for; `0` and none mean "any".
fn requested_resource_version(req: &Request) -> ApiResult<Option<u64>> {
    match req.param("resourceVersion") {
        None | Some("0") | Some("") => Ok(None),
        Some(rv) => rv.parse::<u64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: \"{rv}\": must be a non-negative integer"
            ))
        }),
    }
}

/// The version a list must be at least as new as; a continued list carries its own.
fn list_resource_version(req: &Request) -> ApiResult<Option<u64>> {
    if req.param("continue").is_some() {
        return Ok(None);
    }
    requested_resource_version(req)
}

fn watch_options(req: &Request, t: &Target) -> ApiResult<watch::WatchOptions> {
    let (label_selector, field_selector) = selectors(req, t)?;
    let resource_version = requested_resource_version(req)?;
    let timeout = match req.param("timeoutSeconds") {
        Some(s) => {
            Duration::from_secs(s.parse().map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?)
        }
        None => Duration::from_secs(1800),
    };
    // A named watch (`/namespaces/ns/configmaps/x?watch=1`) is a watch with a name selector.
    let name = t.name.clone();
    Ok(watch::WatchOptions {
        list: ListOptions { label_selector, field_selector, limit: None, continue_token: None },
        name,
        resource_version,
        send_initial_events: req.flag("sendInitialEvents"),
        bookmarks: req.flag("allowWatchBookmarks"),
        timeout,
        metadata_only: req.wants_metadata_only(),
        table: table_request(req),
    })
}

/// `kubectl get` asks for rows and columns (`Accept: application/json;as=Table;…`).
fn table_request(req: &Request) -> Option<crate::table::TableRequest> {
    crate::table::TableRequest::from_request(req.header(header::ACCEPT), req.param("includeObject"))
}

fn authorize(app: &App, req: &Request, t: &Target, verb: &str) -> ApiResult<()> {
    if app.sim.config.authorization != Authorization::Rbac {
        return Ok(());
    }
    let is_namespace = t.rt.group.is_empty() && t.rt.resource == "namespaces";
    // RBAC `resourceNames` apply to a list or watch narrowed to one name by field selector.
    let selected_name = || {
        let fields = FieldSelector::parse(req.param("fieldSelector")?).ok()?;
        fields.required_value("metadata.name").map(str::to_owned)
    };
    let attrs = RequestAttributes {
        verb: verb.to_owned(),
        api_group: t.rt.group.clone(),
        resource: t.rt.resource.clone(),
        subresource: t.subresource.clone(),
        namespace: if is_namespace { t.name.clone() } else { t.namespace.clone() },
        name: t.name.clone().or_else(selected_name),
        path: req.path.clone(),
        is_resource_request: true,
    };
    check(app, req, &attrs, Some(t))?;
    if creates_by_apply(app, req, t, verb) {
        check(app, req, &RequestAttributes { verb: "create".to_owned(), ..attrs }, Some(t))?;
    }
    Ok(())
}

/// Whether this is a server-side apply of an object that does not exist yet. kube-apiserver
/// authorizes such a patch as a `create` as well, so `patch` alone cannot create objects.
fn creates_by_apply(app: &App, req: &Request, t: &Target, verb: &str) -> bool {
    let is_apply = PatchType::from_content_type(req.header(header::CONTENT_TYPE)) == Some(PatchType::Apply);
    if verb != "patch" || !is_apply || t.subresource.is_some() {
        return false;
    }
    let key = (t.namespace.clone().unwrap_or_default(), t.name.clone().unwrap_or_default());
    app.sim.lock().get(&t.rt.storage, &key).is_none()
}

fn authorize_path(app: &App, req: &Request) -> ApiResult<()> {
    if app.sim.config.authorization != Authorization::Rbac {
        return Ok(());
    }
    let attrs = RequestAttributes {
        verb: req.method.as_str().to_lowercase(),
        api_group: String::new(),
        resource: String::new(),
        subresource: None,
        namespace: None,
        name: None,
        path: req.path.clone(),
        is_resource_request: false,
    };
    check(app, req, &attrs, None)
}

/// Authenticates the bearer token and asks RBAC, answering 401 or 403 as kube-apiserver does.
fn check(app: &App, req: &Request, attrs: &RequestAttributes, t: Option<&Target>) -> ApiResult<()> {
    let user = authenticate(app, req)?;
    allowed(app, &user, attrs, t)
}

/// `Ok` if the authorizer allows `user` to do `attrs`, else kube-apiserver's 403.
fn allowed(
    app: &App,
    user: &authz::UserInfo,
    attrs: &RequestAttributes,
    t: Option<&Target>,
) -> ApiResult<()> {
    let verdict = decide(app, user, attrs);
    if matches!(verdict.decision, authz::Decision::Allow) {
        return Ok(());
    }
    let message = authz::forbidden_message_with_reason(user, attrs, verdict.reason.as_deref());
    Err(match t {
        Some(t) => {
            ApiError::forbidden(&t.rt.group, &t.rt.resource, t.name.as_deref().unwrap_or_default(), message)
        }
        None if attrs.is_resource_request => ApiError::forbidden(
            &attrs.api_group,
            &attrs.resource,
            attrs.name.as_deref().unwrap_or_default(),
            message,
        ),
        None => ApiError::new(403, "Forbidden", message).with_details(crate::error::Details::default()),
    })
}

/// The user a request acts as: the bearer token's, or whom it impersonates if that user may.
fn authenticate(app: &App, req: &Request) -> ApiResult<authz::UserInfo> {
    let token = req.header(header::AUTHORIZATION).strip_prefix("Bearer ").unwrap_or_default().trim();
    let user = authz::user_from_token(token).ok_or_else(ApiError::unauthorized)?;
    let Some(impersonation) = impersonation(req)? else { return Ok(user) };
    for attrs in impersonation.checks() {
        allowed(app, &user, &attrs, None)?;
    }
    Ok(impersonation.user_info())
}

/// The `Impersonate-User` and `Impersonate-Group` headers, if any.
fn impersonation(req: &Request) -> ApiResult<Option<authz::Impersonation>> {
    let text = |value: &header::HeaderValue| value.to_str().unwrap_or_default().to_owned();
    let groups: Vec<String> = req.headers.get_all("impersonate-group").iter().map(text).collect();
    let user = req.headers.get("impersonate-user").map(text).unwrap_or_default();
    if user.is_empty() {
        if groups.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::bad_request(format!(
            "requested impersonation of groups {groups:?} without impersonating a user"
        )));
    }
    Ok(Some(authz::Impersonation { user, groups }))
}

fn respond(req: &Request, code: StatusCode, object: Value) -> ApiResult<Response> {
    let object = if req.wants_metadata_only() && object["kind"] != "Status" {
        crate::convert::partial_metadata(&object)
    } else {
        object
    };
    Ok(json_response(code, &object))
}

fn respond_list(req: &Request, mut list: Value) -> ApiResult<Response> {
    if req.wants_metadata_only() {
        let items: Vec<Value> = list["items"]
            .as_array()
            .map(|i| i.iter().map(crate::convert::partial_metadata).collect())
            .unwrap_or_default();
        list = json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list["metadata"].clone(),
            "items": items,
        });
    }
    Ok(json_response(StatusCode::OK, &list))
}

pub fn json_response(code: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Wraps a stream of already-encoded chunks as a chunked JSON response.
pub fn streaming_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| ApiError::internal("could not build the watch response").into_response())
}
