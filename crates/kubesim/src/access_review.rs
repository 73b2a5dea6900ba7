//! SelfSubjectAccessReview and SubjectAccessReview (`authorization.k8s.io/v1`): a client asks
//! whether a request would be allowed, and the answer comes from the same authorizer that
//! decides real requests, so `kubectl auth can-i` and a controller's own permission checks
//! tell the truth about what kubesim will then do.
//!
//! Nothing is stored: as in kube-apiserver, a review is only ever created, and the response
//! is the review sent, with `status` filled in.

use serde_json::{Value, json};

use crate::authz::{Decision, RequestAttributes, UserInfo, Verdict};
use crate::error::{ApiError, ApiResult, StatusCause};
use crate::validation::{Cause, invalid_message, qualified_kind};

pub const GROUP: &str = "authorization.k8s.io";
pub const VERSION: &str = "v1";

/// The two reviews kubesim answers; both are cluster-scoped and create-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewKind {
    /// "May I ...?": about the requester, open to every authenticated user.
    SelfSubject,
    /// "May this user ...?": about anyone, so it needs `create subjectaccessreviews` itself.
    Subject,
}

impl ReviewKind {
    pub const ALL: [ReviewKind; 2] = [ReviewKind::SelfSubject, ReviewKind::Subject];

    pub fn from_resource(resource: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.resource() == resource)
    }

    pub fn resource(self) -> &'static str {
        match self {
            ReviewKind::SelfSubject => "selfsubjectaccessreviews",
            ReviewKind::Subject => "subjectaccessreviews",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            ReviewKind::SelfSubject => "SelfSubjectAccessReview",
            ReviewKind::Subject => "SubjectAccessReview",
        }
    }
}

/// The entries `/apis/authorization.k8s.io/v1` lists for the reviews, as kube-apiserver
/// does: create is their only verb.
pub fn discovery_resources() -> Vec<Value> {
    let kinds = ReviewKind::ALL.into_iter().map(|kind| (kind.resource(), kind.kind()));
    kinds
        .chain([(RULES_RESOURCE, "SelfSubjectRulesReview")])
        .map(|(resource, kind)| {
            json!({
                "name": resource,
                "singularName": kind.to_lowercase(),
                "namespaced": false,
                "kind": kind,
                "verbs": ["create"],
            })
        })
        .collect()
}

/// SelfSubjectRulesReview (`kubectl auth can-i --list`): everything the requester may do in
/// one namespace.
pub const RULES_RESOURCE: &str = "selfsubjectrulesreviews";

/// The namespace a SelfSubjectRulesReview asks about; kube-apiserver refuses one without.
pub fn rules_namespace(body: &Value) -> ApiResult<String> {
    match body.pointer("/spec/namespace").and_then(Value::as_str).unwrap_or_default() {
        "" => Err(ApiError::bad_request("no namespace on request")),
        namespace => Ok(namespace.to_owned()),
    }
}

/// The SelfSubjectRulesReview kube-apiserver returns: the rules split into resource and
/// non-resource rules, and, when some role could not be read, `incomplete` with the error.
pub fn rules_answer(body: &Value, rules: &[Value], error: Option<&str>) -> Value {
    let pick = |rule: &Value, keys: &[&str]| -> Value {
        let mut picked = serde_json::Map::new();
        for key in keys {
            if let Some(values) = rule.get(*key).and_then(Value::as_array).filter(|v| !v.is_empty()) {
                picked.insert((*key).to_owned(), Value::Array(values.clone()));
            }
        }
        Value::Object(picked)
    };
    let has =
        |rule: &Value, key: &str| rule.get(key).and_then(Value::as_array).is_some_and(|v| !v.is_empty());
    let resource_rules: Vec<Value> = rules
        .iter()
        .filter(|rule| has(rule, "resources"))
        .map(|rule| pick(rule, &["verbs", "apiGroups", "resources", "resourceNames"]))
        .collect();
    let non_resource_rules: Vec<Value> = rules
        .iter()
        .filter(|rule| has(rule, "nonResourceURLs"))
        .map(|rule| pick(rule, &["verbs", "nonResourceURLs"]))
        .collect();
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": error.is_some(),
    });
    if let Some(error) = error {
        status["evaluationError"] = json!(error);
    }
    json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

/// Who a review asks about and what it asks, read from its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub user: UserInfo,
    pub attrs: RequestAttributes,
}

/// Reads and validates a review. A SelfSubjectAccessReview asks about `requester`; a
/// SubjectAccessReview about `spec.user` in exactly `spec.groups` (kube-apiserver adds no
/// `system:authenticated` there, so neither does kubesim).
pub fn question(kind: ReviewKind, body: &Value, requester: &UserInfo) -> ApiResult<Question> {
    let spec = body.get("spec").unwrap_or(&Value::Null);
    let causes = validate(kind, spec);
    if !causes.is_empty() {
        return Err(invalid(kind, causes));
    }
    let user = match kind {
        ReviewKind::SelfSubject => requester.clone(),
        ReviewKind::Subject => UserInfo {
            name: text(spec, "user").to_owned(),
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        },
    };
    Ok(Question { user, attrs: attributes(spec) })
}

/// The review as kube-apiserver returns it: what was sent, with `status` from the verdict.
/// RBAC never denies outright, it only fails to allow, so `denied` is never set.
pub fn answer(kind: ReviewKind, body: &Value, verdict: &Verdict) -> Value {
    let mut status = json!({"allowed": verdict.decision == Decision::Allow});
    if let Some(reason) = verdict.reason.as_deref().filter(|reason| !reason.is_empty()) {
        status["reason"] = json!(reason);
    }
    json!({
        "kind": kind.kind(),
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

/// `ValidateSelfSubjectAccessReviewSpec` and `ValidateSubjectAccessReviewSpec`.
fn validate(kind: ReviewKind, spec: &Value) -> Vec<Cause> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let mut causes = Vec::new();
    match (resource, non_resource) {
        (Some(_), Some(non_resource)) => causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.nonResourceAttributes".to_owned(),
            message: format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                go_struct(non_resource)
            ),
        }),
        // Go renders the nil pointer kube-apiserver reports here as the string "null".
        (None, None) => causes.push(Cause::invalid_str(
            "spec.resourceAttributes",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    let no_groups = spec.get("groups").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if kind == ReviewKind::Subject && text(spec, "user").is_empty() && no_groups {
        causes.push(Cause::invalid_str("spec.user", "", "at least one of user or group must be specified"));
    }
    causes
}

/// Go's `%#v` of the internal `NonResourceAttributes` struct, as `field.Invalid` prints it.
fn go_struct(non_resource: &Value) -> String {
    format!(
        "authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}",
        text(non_resource, "path"),
        text(non_resource, "verb")
    )
}

fn invalid(kind: ReviewKind, causes: Vec<Cause>) -> ApiError {
    let message = invalid_message(&qualified_kind(GROUP, kind.kind()), "", &causes);
    let causes = causes
        .into_iter()
        .map(|cause| StatusCause {
            reason: cause.reason.to_owned(),
            message: cause.message,
            field: cause.field,
        })
        .collect();
    ApiError::invalid(GROUP, kind.kind(), "", message, causes)
}

/// `ResourceAttributesFrom` / `NonResourceAttributesFrom`: the review's attributes as the
/// authorizer sees a request.
fn attributes(spec: &Value) -> RequestAttributes {
    let optional = |value: &str| (!value.is_empty()).then(|| value.to_owned());
    match spec.get("resourceAttributes").filter(|v| !v.is_null()) {
        Some(resource) => RequestAttributes {
            verb: text(resource, "verb").to_owned(),
            api_group: text(resource, "group").to_owned(),
            resource: text(resource, "resource").to_owned(),
            subresource: optional(text(resource, "subresource")),
            namespace: optional(text(resource, "namespace")),
            name: optional(text(resource, "name")),
            path: String::new(),
            is_resource_request: true,
        },
        None => {
            let non_resource = spec.get("nonResourceAttributes").unwrap_or(&Value::Null);
            RequestAttributes {
                verb: text(non_resource, "verb").to_owned(),
                path: text(non_resource, "path").to_owned(),
                is_resource_request: false,
                ..RequestAttributes::default()
            }
        }
    }
}

fn text<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        UserInfo { name: "alice".into(), groups: vec!["system:authenticated".into()] }
    }

    #[test]
    fn self_review_asks_about_the_requester_with_every_resource_attribute() {
        let body = json!({"spec": {"resourceAttributes": {
            "namespace": "dev", "verb": "update", "group": "apps", "resource": "deployments",
            "subresource": "scale", "name": "web"
        }}});
        let question = question(ReviewKind::SelfSubject, &body, &alice()).unwrap();
        assert_eq!(question.user, alice());
        assert_eq!(
            question.attrs,
            RequestAttributes {
                verb: "update".into(),
                api_group: "apps".into(),
                resource: "deployments".into(),
                subresource: Some("scale".into()),
                namespace: Some("dev".into()),
                name: Some("web".into()),
                path: String::new(),
                is_resource_request: true,
            }
        );
    }

    #[test]
    fn subject_review_asks_about_the_named_user_in_exactly_the_named_groups() {
        let body = json!({"spec": {
            "user": "bob", "groups": ["devs"],
            "nonResourceAttributes": {"path": "/healthz", "verb": "get"}
        }});
        let question = question(ReviewKind::Subject, &body, &alice()).unwrap();
        assert_eq!(question.user, UserInfo { name: "bob".into(), groups: vec!["devs".into()] });
        assert!(!question.attrs.is_resource_request);
        assert_eq!((question.attrs.verb.as_str(), question.attrs.path.as_str()), ("get", "/healthz"));
    }

    #[test]
    fn a_review_without_attributes_is_invalid_with_apiservers_message() {
        let error = question(ReviewKind::SelfSubject, &json!({"spec": {}}), &alice()).unwrap_err();
        assert_eq!(error.code, 422);
        assert_eq!(
            error.message,
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid \
             value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
    }

    #[test]
    fn a_subject_review_must_name_a_user_or_group_and_only_one_kind_of_attributes() {
        let body = json!({"spec": {
            "resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get", "path": "/"}
        }});
        let error = question(ReviewKind::Subject, &body, &alice()).unwrap_err();
        let fields: Vec<&str> = error.causes.iter().map(|cause| cause.field.as_str()).collect();
        assert_eq!(fields, ["spec.nonResourceAttributes", "spec.user"]);
    }

    #[test]
    fn the_answer_echoes_the_spec_and_carries_the_reason() {
        let body = json!({"spec": {"nonResourceAttributes": {"path": "/api", "verb": "get"}}});
        let verdict = Verdict { decision: Decision::Allow, reason: Some("RBAC: allowed by x".into()) };
        let answer = answer(ReviewKind::SelfSubject, &body, &verdict);
        assert_eq!(answer["kind"], "SelfSubjectAccessReview");
        assert_eq!(answer["spec"], body["spec"]);
        assert_eq!(answer["status"], json!({"allowed": true, "reason": "RBAC: allowed by x"}));
        let denied = Verdict { decision: Decision::Deny, reason: None };
        assert_eq!(answer_status(&body, &denied), json!({"allowed": false}));
    }

    #[test]
    fn a_rules_review_splits_resource_and_non_resource_rules_and_reports_missing_roles() {
        let body = json!({"spec": {"namespace": "dev"}});
        let rules = [
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": []}),
            json!({"nonResourceURLs": ["/api"], "verbs": ["get"]}),
        ];
        let answer = rules_answer(&body, &rules, Some("role.rbac.authorization.k8s.io \"gone\" not found"));
        assert_eq!(
            answer["status"],
            json!({
                "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api"]}],
                "incomplete": true,
                "evaluationError": "role.rbac.authorization.k8s.io \"gone\" not found",
            })
        );
        assert_eq!(rules_namespace(&json!({"spec": {}})).unwrap_err().code, 400);
    }

    fn answer_status(body: &Value, verdict: &Verdict) -> Value {
        answer(ReviewKind::Subject, body, verdict)["status"].clone()
    }
}
