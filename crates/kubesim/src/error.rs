//! API errors, rendered as the `Status` objects kube-apiserver sends, so that kube-rs and
//! kubectl decode them exactly as they would from a real cluster.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One field-level reason inside a `Status.details.causes` list.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusCause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// Which object an error is about, as kube-apiserver reports it in `Status.details`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    pub name: String,
    pub group: String,
    /// kube-apiserver puts the resource (plural) here for most errors, the Kind for `Invalid`.
    pub kind: String,
}

/// An error the API answers with. `code` and `reason` follow kube-apiserver's mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<Details>>,
    pub causes: Vec<StatusCause>,
    /// Seconds a client should wait before retrying (429 and some 5xx).
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, causes: Vec::new(), retry_after: None }
    }

    pub fn with_details(mut self, details: Details) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn with_causes(mut self, causes: Vec<StatusCause>) -> Self {
        self.causes = causes;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(group, resource)))
            .with_details(details(group, resource, name))
    }

    /// What kube-apiserver answers for a path it does not serve.
    pub fn no_such_resource() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(Details::default())
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(group, resource)))
            .with_details(details(group, resource, name))
    }

    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified(group, resource)),
        )
        .with_details(details(group, resource, name))
    }

    /// The 409 every stale write gets.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(group: &str, kind: &str, name: &str, message: String, causes: Vec<StatusCause>) -> Self {
        Self::new(422, "Invalid", message)
            .with_details(Details { name: name.into(), group: group.into(), kind: kind.into() })
            .with_causes(causes)
    }

    pub fn forbidden(group: &str, resource: &str, name: &str, message: String) -> Self {
        Self::new(403, "Forbidden", message).with_details(details(group, resource, name))
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
        .with_details(Details { kind: String::new(), name: String::new(), group: String::new() })
        .with_causes(vec![StatusCause {
            reason: "UnexpectedServerResponse".into(),
            message: content_type.into(),
            field: String::new(),
        }])
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }

    /// kube-apiserver's answer when a client asks for a resourceVersion its cache has not
    /// reached within a few seconds (a client resuming against a restored server).
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut error = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(Details::default())
        .with_causes(vec![StatusCause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        }]);
        error.retry_after = Some(1);
        error
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// Renders the error as a `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if !self.causes.is_empty() {
                let causes = self
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details.insert("causes".into(), Value::Array(causes));
            }
            if let Some(secs) = self.retry_after {
                details.insert("retryAfterSeconds".into(), secs.into());
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}

fn details(group: &str, resource: &str, name: &str) -> Details {
    Details { name: name.into(), group: group.into(), kind: resource.into() }
}

/// `configmaps` for the core group, `rolebindings.rbac.authorization.k8s.io` otherwise.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut response =
            (code, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(value) = axum::http::HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, value);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
