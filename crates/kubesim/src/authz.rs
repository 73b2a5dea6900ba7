//! Authentication by kubesim's bearer tokens and authorization as kube-apiserver's RBAC
//! authorizer decides it (`plugin/pkg/auth/authorizer/rbac`), used when kubesim runs with
//! `--authorization rbac`.
//!
//! Everything here is pure: the HTTP layer turns a request into [`RequestAttributes`],
//! hands over the RBAC objects it stores, and writes the 401/403 Status with the messages
//! built here, which match kube-apiserver's word for word so tests that assert on them
//! hold on a real cluster too.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::selector::LabelSelector;

/// The user the `admin` token (and every request when authentication is off) acts as.
pub const ADMIN_USER: &str = "kubesim-admin";
/// The group kube-apiserver lets through before consulting any authorizer.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group every authenticated user is in; the default discovery roles are bound to it.
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";

pub const ADMIN_TOKEN: &str = "admin";
const USER_TOKEN_PREFIX: &str = "user:";
const SERVICE_ACCOUNT_TOKEN_PREFIX: &str = "serviceaccount:";
const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Who a request is from, as an authenticator reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// kubesim's all-powerful user: the `admin` token, or any request when
    /// authentication is disabled.
    pub fn admin() -> Self {
        Self::authenticated(ADMIN_USER.to_string(), vec![SYSTEM_MASTERS.to_string()])
    }

    /// Adds `system:authenticated`, as kube-apiserver's authenticator chain does.
    fn authenticated(name: String, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|group| group == SYSTEM_AUTHENTICATED) {
            groups.push(SYSTEM_AUTHENTICATED.to_string());
        }
        Self { name, groups }
    }
}

/// Authenticates one of kubesim's bearer tokens; `None` means 401.
///
/// * `admin` is [`UserInfo::admin`];
/// * `user:<name>[:<group>,<group>...]` is that user in those groups (`%3A`, `%2C` and
///   `%25` escape `:`, `,` and `%`, which [`token_for_user`] uses for names that need it);
/// * `serviceaccount:<ns>:<name>` is `system:serviceaccount:<ns>:<name>` in
///   `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
pub fn user_from_token(token: &str) -> Option<UserInfo> {
    if token == ADMIN_TOKEN {
        return Some(UserInfo::admin());
    }
    if let Some(rest) = token.strip_prefix(USER_TOKEN_PREFIX) {
        let (name, groups) = rest.split_once(':').unwrap_or((rest, ""));
        let name = unescape_token_part(name);
        if name.is_empty() {
            return None;
        }
        let groups = groups.split(',').filter(|group| !group.is_empty()).map(unescape_token_part).collect();
        return Some(UserInfo::authenticated(name, groups));
    }
    let rest = token.strip_prefix(SERVICE_ACCOUNT_TOKEN_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    if namespace.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some(UserInfo::authenticated(
        format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"),
        vec!["system:serviceaccounts".to_string(), format!("system:serviceaccounts:{namespace}")],
    ))
}

/// The bearer token [`user_from_token`] maps to this user and these groups.
pub fn token_for_user(name: &str, groups: &[&str]) -> String {
    let groups: Vec<String> = groups.iter().map(|group| escape_token_part(group)).collect();
    if groups.is_empty() {
        format!("{USER_TOKEN_PREFIX}{}", escape_token_part(name))
    } else {
        format!("{USER_TOKEN_PREFIX}{}:{}", escape_token_part(name), groups.join(","))
    }
}

/// The bearer token of the service account `namespace/name`.
pub fn token_for_service_account(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_TOKEN_PREFIX}{namespace}:{name}")
}

fn escape_token_part(part: &str) -> String {
    part.replace('%', "%25").replace(':', "%3A").replace(',', "%2C")
}

fn unescape_token_part(part: &str) -> String {
    part.replace("%3A", ":").replace("%2C", ",").replace("%25", "%")
}

/// Whom a request asks to act as (`Impersonate-User`, `Impersonate-Group`), as `kubectl --as`
/// and kube-rs' `impersonate` send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impersonation {
    pub user: String,
    pub groups: Vec<String>,
}

impl Impersonation {
    /// What kube-apiserver authorizes before letting a request act as someone else:
    /// `impersonate` on the user (on the ServiceAccount, for a ServiceAccount's user name),
    /// then on each group.
    pub fn checks(&self) -> Vec<RequestAttributes> {
        let impersonate = |resource: &str, namespace: Option<&str>, name: &str| RequestAttributes {
            verb: "impersonate".to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: Some(name.to_owned()),
            is_resource_request: true,
            ..RequestAttributes::default()
        };
        let user = match service_account_of(&self.user) {
            Some((namespace, name)) => impersonate("serviceaccounts", Some(namespace), name),
            None => impersonate("users", None, &self.user),
        };
        let groups = self.groups.iter().map(|group| impersonate("groups", None, group));
        std::iter::once(user).chain(groups).collect()
    }

    /// The user the request then acts as: in the groups asked for (a ServiceAccount's own
    /// groups when none are), plus `system:authenticated` unless `system:authenticated` or
    /// `system:unauthenticated` was asked for.
    pub fn user_info(&self) -> UserInfo {
        let mut groups = self.groups.clone();
        if let (true, Some((namespace, _))) = (groups.is_empty(), service_account_of(&self.user)) {
            groups = vec!["system:serviceaccounts".to_owned(), format!("system:serviceaccounts:{namespace}")];
        }
        let explicit = groups.iter().any(|g| g == SYSTEM_AUTHENTICATED || g == "system:unauthenticated");
        if !explicit && self.user != "system:anonymous" {
            groups.push(SYSTEM_AUTHENTICATED.to_owned());
        }
        UserInfo { name: self.user.clone(), groups }
    }
}

/// `(namespace, name)` of a `system:serviceaccount:<namespace>:<name>` user name.
fn service_account_of(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SERVICE_ACCOUNT_USER_PREFIX)?.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty()).then_some((namespace, name))
}

/// The message of the 401 Status kube-apiserver sends for a missing or unknown token.
pub fn unauthorized_message() -> &'static str {
    "Unauthorized"
}

/// What is being asked, as kube-apiserver's `RequestInfo` describes a request.
///
/// The HTTP layer fills it the way kube-apiserver does: `verb` is the API verb (`get`,
/// `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`) for
/// resource requests and the lower-case HTTP method for others; a request on a namespace
/// object itself (`/api/v1/namespaces/x`) has `namespace` `x`; a `list`/`watch` with
/// `fieldSelector=metadata.name=x` has `name` `x`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestAttributes {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub path: String,
    pub is_resource_request: bool,
}

impl RequestAttributes {
    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    fn subresource(&self) -> &str {
        self.subresource.as_deref().unwrap_or_default()
    }

    /// `resource/subresource`, the form RBAC rules and messages use.
    fn combined_resource(&self) -> String {
        match self.subresource() {
            "" => self.resource.clone(),
            subresource => format!("{}/{subresource}", self.resource),
        }
    }
}

/// The RBAC objects in the store at the time of the request, as stored JSON.
#[derive(Debug, Clone, Copy)]
pub struct RbacSnapshot<'a> {
    pub roles: &'a [Value],
    pub role_bindings: &'a [Value],
    pub cluster_roles: &'a [Value],
    pub cluster_role_bindings: &'a [Value],
}

impl RbacSnapshot<'static> {
    /// No RBAC objects at all.
    pub const EMPTY: RbacSnapshot<'static> =
        RbacSnapshot { roles: &[], role_bindings: &[], cluster_roles: &[], cluster_role_bindings: &[] };
}

/// RBAC only ever allows; anything it does not allow is denied (403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

/// A decision and RBAC's explanation: for a denial, the roles that bindings name but that
/// are missing (`RBAC: role.rbac.authorization.k8s.io "x" not found`), which kube-apiserver
/// appends to the 403 message; for an allow, the binding that granted it (`RBAC: allowed by
/// RoleBinding "b/ns" of Role "r" to User "alice"`), which access reviews report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    pub reason: Option<String>,
}

/// Whether RBAC lets `user` do what `attrs` describe.
pub fn authorize(user: &UserInfo, attrs: &RequestAttributes, rbac: &RbacSnapshot) -> Decision {
    evaluate(user, attrs, rbac).decision
}

/// [`authorize`], with the reason a denial carries.
///
/// `system:masters` is allowed before RBAC is consulted. Otherwise every
/// ClusterRoleBinding, then every RoleBinding in the request's namespace, whose subjects
/// include the user is tried in name order until one grants the request.
pub fn evaluate(user: &UserInfo, attrs: &RequestAttributes, rbac: &RbacSnapshot) -> Verdict {
    if user.groups.iter().any(|group| group == SYSTEM_MASTERS) {
        return Verdict { decision: Decision::Allow, reason: None };
    }
    let mut errors = Vec::new();
    for (binding, binding_namespace) in bindings_in_scope(rbac, attrs.namespace()) {
        let Some(subject) = applying_subject(binding, user, binding_namespace) else {
            continue;
        };
        match role_reference_rules(rbac, binding.get("roleRef").unwrap_or(&Value::Null), binding_namespace) {
            Ok(rules) if rules.iter().any(|rule| rule_allows(attrs, rule)) => {
                let grant = describe_grant(binding, binding_namespace, subject);
                return Verdict {
                    decision: Decision::Allow,
                    reason: Some(format!("RBAC: allowed by {grant}")),
                };
            }
            Ok(_) => {}
            Err(error) => errors.push(error.authorizer_message()),
        }
    }
    let reason = (!errors.is_empty()).then(|| format!("RBAC: {}", aggregate(errors)));
    Verdict { decision: Decision::Deny, reason }
}

/// Every ClusterRoleBinding, then every RoleBinding in `namespace` (none if empty), each in
/// name order, with the namespace its roles apply in (empty for the cluster-wide ones).
fn bindings_in_scope<'v>(rbac: &RbacSnapshot<'v>, namespace: &'v str) -> Vec<(&'v Value, &'v str)> {
    let mut bindings: Vec<(&Value, &str)> =
        sorted_by_name(rbac.cluster_role_bindings.iter()).into_iter().map(|binding| (binding, "")).collect();
    if !namespace.is_empty() {
        let in_namespace = rbac.role_bindings.iter().filter(|binding| namespace_of(binding) == namespace);
        bindings.extend(sorted_by_name(in_namespace).into_iter().map(|binding| (binding, namespace)));
    }
    bindings
}

/// Everything `user` may do in `namespace`, as kube-apiserver's rule resolver lists it for a
/// SelfSubjectRulesReview (`kubectl auth can-i --list`): the rules of every binding that
/// applies, and the error for the roles those bindings name that are missing.
/// `system:masters` may do anything.
pub fn rules_for(user: &UserInfo, namespace: &str, rbac: &RbacSnapshot) -> (Vec<Value>, Option<String>) {
    let mut rules = Vec::new();
    if user.groups.iter().any(|group| group == SYSTEM_MASTERS) {
        rules.push(rule(&["*"], &["*"], &["*"]));
        rules.push(json!({"nonResourceURLs": ["*"], "verbs": ["*"]}));
    }
    let mut errors = Vec::new();
    for (binding, binding_namespace) in bindings_in_scope(rbac, namespace) {
        if applying_subject(binding, user, binding_namespace).is_none() {
            continue;
        }
        match role_reference_rules(rbac, binding.get("roleRef").unwrap_or(&Value::Null), binding_namespace) {
            Ok(granted) => rules.extend(granted),
            Err(error) => errors.push(error.authorizer_message()),
        }
    }
    (rules, (!errors.is_empty()).then(|| aggregate(errors)))
}

/// Why kube-apiserver refuses a write to a Role, ClusterRole or binding by someone who
/// could otherwise write it: its privilege-escalation checks
/// (`pkg/registry/rbac/*/policybased`), which keep anyone allowed to write RBAC objects from
/// granting more than they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The binding's role does not exist, so what it grants cannot be compared: kube-apiserver
    /// answers its registry's 404, `roles.rbac.authorization.k8s.io "x" not found`.
    RoleNotFound { resource: &'static str, name: String },
    /// A roleRef kind that is neither Role nor ClusterRole: the lookup fails before
    /// validation would, and kube-apiserver answers 500 with this message.
    UnsupportedKind(String),
    /// `ConfirmNoEscalation`'s reason, the text after `... is forbidden: ` in the 403.
    NotHeld(String),
}

/// Whether kube-apiserver lets `user` write a binding in `binding_namespace` (empty for a
/// ClusterRoleBinding) that grants `role_ref` (`BindingAuthorized`, then
/// `ConfirmNoEscalation`): a member of `system:masters`, anyone with `bind` on that role
/// (by name, so `resourceNames` count), or anyone already holding every permission the role
/// grants there. `None` allows the write.
pub fn binding_refusal(
    user: &UserInfo,
    role_ref: &Value,
    binding_namespace: &str,
    rbac: &RbacSnapshot,
) -> Option<Refusal> {
    if escalation_allowed(user) {
        return None;
    }
    let kind = str_at(role_ref, "/kind");
    let resource = match kind {
        "Role" => "roles",
        "ClusterRole" => "clusterroles",
        _ => {
            return Some(Refusal::UnsupportedKind(format!(
                "unsupported role reference kind: {}",
                go_quote(kind)
            )));
        }
    };
    let bind = RequestAttributes {
        verb: "bind".to_owned(),
        api_group: str_at(role_ref, "/apiGroup").to_owned(),
        resource: resource.to_owned(),
        namespace: (!binding_namespace.is_empty()).then(|| binding_namespace.to_owned()),
        name: Some(str_at(role_ref, "/name").to_owned()),
        is_resource_request: true,
        ..RequestAttributes::default()
    };
    if authorize(user, &bind, rbac) == Decision::Allow {
        return None;
    }
    match role_reference_rules(rbac, role_ref, binding_namespace) {
        Ok(rules) => confirm_no_escalation(user, binding_namespace, &rules, rbac).err().map(Refusal::NotHeld),
        Err(RoleRefError::NotFound { resource, name }) => Some(Refusal::RoleNotFound { resource, name }),
        Err(error @ RoleRefError::Unsupported(_)) => Some(Refusal::UnsupportedKind(error.to_string())),
    }
}

/// Whether kube-apiserver lets `user` write a Role (`resource` `roles`, in `namespace`) or
/// ClusterRole (`clusterroles`, `namespace` empty) with these `rules`: a member of
/// `system:masters`, anyone with `escalate` on it (`name` is the one in the request's URL,
/// none for a create by POST), or anyone already holding every rule. `None` allows the write.
pub fn role_refusal(
    user: &UserInfo,
    resource: &str,
    name: Option<&str>,
    namespace: &str,
    rules: &[Value],
    rbac: &RbacSnapshot,
) -> Option<Refusal> {
    if escalation_allowed(user) {
        return None;
    }
    let escalate = RequestAttributes {
        verb: "escalate".to_owned(),
        api_group: RBAC_GROUP.to_owned(),
        resource: resource.to_owned(),
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: name.map(str::to_owned),
        is_resource_request: true,
        ..RequestAttributes::default()
    };
    if authorize(user, &escalate, rbac) == Decision::Allow {
        return None;
    }
    confirm_no_escalation(user, namespace, rules, rbac).err().map(Refusal::NotHeld)
}

/// `EscalationAllowed`: `system:masters` may grant anything.
fn escalation_allowed(user: &UserInfo) -> bool {
    user.groups.iter().any(|group| group == SYSTEM_MASTERS)
}

/// `ConfirmNoEscalation`: every permission in `granted` must be covered by a rule `user`
/// holds in `namespace` (`Covers`). The error lists what is missing, one compacted rule per
/// line in sorted order, as kube-apiserver words it, and the roles its bindings name that
/// could not be found.
pub fn confirm_no_escalation(
    user: &UserInfo,
    namespace: &str,
    granted: &[Value],
    rbac: &RbacSnapshot,
) -> Result<(), String> {
    let mut owned = Vec::new();
    let mut errors = Vec::new();
    for (binding, binding_namespace) in bindings_in_scope(rbac, namespace) {
        if applying_subject(binding, user, binding_namespace).is_none() {
            continue;
        }
        match role_reference_rules(rbac, binding.get("roleRef").unwrap_or(&Value::Null), binding_namespace) {
            Ok(rules) => owned.extend(rules),
            Err(error) => errors.push(error.to_string()),
        }
    }
    let missing: Vec<Value> = granted
        .iter()
        .flat_map(breakdown_rule)
        .filter(|subrule| !owned.iter().any(|owner| rule_covers(owner, subrule)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let descriptions: BTreeSet<String> = compact_rules(missing).iter().map(compact_string).collect();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(user.groups.iter().map(String::as_str)),
        descriptions.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !errors.is_empty() {
        // Go prints the one aggregated error inside a slice.
        message.push_str(&format!("; resolution errors: [{}]", aggregate(errors)));
    }
    Err(message)
}

/// `BreakdownRule`: one rule per group, resource, verb and resource name, and per
/// non-resource URL and verb.
fn breakdown_rule(rule: &Value) -> Vec<Value> {
    let mut subrules = Vec::new();
    for group in strings(rule, "apiGroups") {
        for resource in strings(rule, "resources") {
            for verb in strings(rule, "verbs") {
                let mut names = strings(rule, "resourceNames").peekable();
                if names.peek().is_none() {
                    subrules.push(json!({"apiGroups": [group], "resources": [resource], "verbs": [verb]}));
                }
                for name in names {
                    subrules.push(json!({"apiGroups": [group], "resources": [resource], "verbs": [verb],
                                         "resourceNames": [name]}));
                }
            }
        }
    }
    for url in strings(rule, "nonResourceURLs") {
        for verb in strings(rule, "verbs") {
            subrules.push(json!({"nonResourceURLs": [url], "verbs": [verb]}));
        }
    }
    subrules
}

/// `ruleCovers`: whether `owner` allows everything the single-valued `subrule` does. A
/// wildcard in `subrule` is only covered by a wildcard.
fn rule_covers(owner: &Value, subrule: &Value) -> bool {
    let has = |key: &str, value: &str| strings(owner, key).any(|item| item == value);
    let has_all = |key: &str| strings(subrule, key).all(|item| has(key, item));
    let verbs = has("verbs", "*") || has_all("verbs");
    let groups = has("apiGroups", "*") || has_all("apiGroups");
    let resources = has("resources", "*")
        || strings(subrule, "resources").all(|resource| {
            has("resources", resource)
                || resource.split_once('/').is_some_and(|(_, sub)| has("resources", &format!("*/{sub}")))
        });
    let urls = strings(subrule, "nonResourceURLs").all(|path| {
        strings(owner, "nonResourceURLs").any(|owned| {
            owned == path || (owned.ends_with('*') && path.starts_with(owned.trim_end_matches('*')))
        })
    });
    let owner_names = strings(owner, "resourceNames").next().is_some();
    let names = if strings(subrule, "resourceNames").next().is_some() {
        !owner_names || has_all("resourceNames")
    } else {
        !owner_names
    };
    verbs && groups && resources && urls && names
}

/// `CompactRules`: the rules for one group and one resource, with nothing else, become one
/// rule with all their verbs.
fn compact_rules(rules: Vec<Value>) -> Vec<Value> {
    let mut compacted = Vec::new();
    let mut simple: Vec<((String, String), Value)> = Vec::new();
    for rule in rules {
        let is_simple = rule.as_object().is_some_and(|fields| fields.len() == 3)
            && rule["apiGroups"].as_array().is_some_and(|groups| groups.len() == 1)
            && rule["resources"].as_array().is_some_and(|resources| resources.len() == 1);
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        let key = (str_at(&rule, "/apiGroups/0").to_owned(), str_at(&rule, "/resources/0").to_owned());
        match simple.iter_mut().find(|(existing, _)| *existing == key) {
            Some((_, existing)) => {
                let verbs = rule["verbs"].as_array().cloned().unwrap_or_default();
                if let Some(existing_verbs) = existing["verbs"].as_array_mut() {
                    existing_verbs.extend(verbs);
                }
            }
            None => simple.push((key, rule)),
        }
    }
    compacted.extend(simple.into_iter().map(|(_, rule)| rule));
    compacted
}

/// `rbacv1helpers.CompactString`: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
fn compact_string(rule: &Value) -> String {
    let parts: Vec<String> = [
        ("APIGroups", "apiGroups"),
        ("Resources", "resources"),
        ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"),
        ("Verbs", "verbs"),
    ]
    .iter()
    .filter(|(_, key)| strings(rule, key).next().is_some())
    .map(|(label, key)| format!("{label}:{}", go_quote_list(strings(rule, key))))
    .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.map(go_quote).collect::<Vec<_>>().join(" "))
}

/// The message of the 403 Status kube-apiserver sends for a denied request, e.g.
/// `configmaps "x" is forbidden: User "alice" cannot get resource "configmaps" in API
/// group "" in the namespace "default"`.
pub fn forbidden_message(user: &UserInfo, attrs: &RequestAttributes) -> String {
    forbidden_message_with_reason(user, attrs, None)
}

/// [`forbidden_message`] with the authorizer's reason appended, as kube-apiserver does.
pub fn forbidden_message_with_reason(
    user: &UserInfo,
    attrs: &RequestAttributes,
    reason: Option<&str>,
) -> String {
    let mut detail = sanitize(&forbidden_detail(user, attrs));
    if let Some(reason) = reason.filter(|reason| !reason.is_empty()) {
        detail = format!("{detail}: {reason}");
    }
    if !attrs.is_resource_request || (attrs.resource.is_empty() && attrs.api_group.is_empty()) {
        return format!("forbidden: {detail}");
    }
    let qualified_resource = match attrs.api_group.as_str() {
        "" => attrs.resource.clone(),
        group => format!("{}.{group}", attrs.resource),
    };
    match attrs.name() {
        "" => format!("{qualified_resource} is forbidden: {detail}"),
        name => format!("{qualified_resource} {} is forbidden: {detail}", go_quote(name)),
    }
}

/// `responsewriters.forbiddenMessage`.
fn forbidden_detail(user: &UserInfo, attrs: &RequestAttributes) -> String {
    let user = go_quote(&user.name);
    if !attrs.is_resource_request {
        return format!("User {user} cannot {} path {}", attrs.verb, go_quote(&attrs.path));
    }
    let resource = go_quote(&attrs.combined_resource());
    let group = go_quote(&attrs.api_group);
    match attrs.namespace() {
        "" => format!(
            "User {user} cannot {} resource {resource} in API group {group} at the cluster scope",
            attrs.verb
        ),
        namespace => format!(
            "User {user} cannot {} resource {resource} in API group {group} in the namespace {}",
            attrs.verb,
            go_quote(namespace)
        ),
    }
}

/// kube-apiserver escapes these so the message is safe to show in HTML.
fn sanitize(message: &str) -> String {
    message.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Go's `%q` for the printable strings that reach these messages.
fn go_quote(value: &str) -> String {
    format!("{value:?}")
}

/// `utilerrors.NewAggregate(...).Error()`: one message bare, several in brackets.
fn aggregate(mut errors: Vec<String>) -> String {
    let mut seen = BTreeSet::new();
    errors.retain(|error| seen.insert(error.clone()));
    if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) }
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn name_of(object: &Value) -> &str {
    str_at(object, "/metadata/name")
}

fn namespace_of(object: &Value) -> &str {
    str_at(object, "/metadata/namespace")
}

fn sorted_by_name<'v>(objects: impl Iterator<Item = &'v Value>) -> Vec<&'v Value> {
    let mut objects: Vec<&Value> = objects.collect();
    objects.sort_by_key(|object| name_of(object));
    objects
}

fn strings<'v>(value: &'v Value, key: &str) -> impl Iterator<Item = &'v str> {
    value.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
}

/// The first of the binding's subjects that is `user`, if any.
fn applying_subject<'v>(binding: &'v Value, user: &UserInfo, namespace: &str) -> Option<&'v Value> {
    let mut subjects = binding.get("subjects").and_then(Value::as_array).into_iter().flatten();
    subjects.find(|subject| subject_applies_to(subject, user, namespace))
}

/// How kube-apiserver's RBAC authorizer names the grant that allowed a request
/// (`clusterRoleBindingDescriber`, `roleBindingDescriber`).
fn describe_grant(binding: &Value, binding_namespace: &str, subject: &Value) -> String {
    let role = format!("{} {}", str_at(binding, "/roleRef/kind"), go_quote(str_at(binding, "/roleRef/name")));
    let subject = describe_subject(subject, binding_namespace);
    match binding_namespace {
        "" => format!("ClusterRoleBinding {} of {role} to {subject}", go_quote(name_of(binding))),
        namespace => {
            format!(
                "RoleBinding {} of {role} to {subject}",
                go_quote(&format!("{}/{namespace}", name_of(binding)))
            )
        }
    }
}

/// `describeSubject`: a ServiceAccount as `name/namespace`, anyone else by name.
fn describe_subject(subject: &Value, binding_namespace: &str) -> String {
    let (kind, name) = (str_at(subject, "/kind"), str_at(subject, "/name"));
    if kind != "ServiceAccount" {
        return format!("{kind} {}", go_quote(name));
    }
    let namespace = match str_at(subject, "/namespace") {
        "" => binding_namespace,
        explicit => explicit,
    };
    format!("{kind} {}", go_quote(&format!("{name}/{namespace}")))
}

/// `rbac.appliesToUser`: a ServiceAccount subject without a namespace means the
/// binding's own namespace.
fn subject_applies_to(subject: &Value, user: &UserInfo, namespace: &str) -> bool {
    let name = str_at(subject, "/name");
    match str_at(subject, "/kind") {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|group| group == name),
        "ServiceAccount" => {
            let service_account_namespace = match str_at(subject, "/namespace") {
                "" => namespace,
                explicit => explicit,
            };
            !service_account_namespace.is_empty()
                && user.name == format!("{SERVICE_ACCOUNT_USER_PREFIX}{service_account_namespace}:{name}")
        }
        _ => false,
    }
}

/// The rules a binding's `roleRef` grants: a Role in the binding's namespace, or a
/// ClusterRole (whose rules then apply only in that namespace, for a RoleBinding).
fn role_reference_rules(
    rbac: &RbacSnapshot,
    role_ref: &Value,
    binding_namespace: &str,
) -> Result<Vec<Value>, RoleRefError> {
    let name = str_at(role_ref, "/name");
    let not_found = |resource| RoleRefError::NotFound { resource, name: name.to_owned() };
    match str_at(role_ref, "/kind") {
        "Role" => rbac
            .roles
            .iter()
            .find(|role| name_of(role) == name && namespace_of(role) == binding_namespace)
            .map(rules_of)
            .ok_or_else(|| not_found("roles")),
        "ClusterRole" => rbac
            .cluster_roles
            .iter()
            .find(|role| name_of(role) == name)
            .map(|role| effective_cluster_role_rules(role, rbac.cluster_roles, &mut BTreeSet::new()))
            .ok_or_else(|| not_found("clusterroles")),
        kind => Err(RoleRefError::Unsupported(kind.to_owned())),
    }
}

/// Why a `roleRef` grants nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RoleRefError {
    NotFound { resource: &'static str, name: String },
    Unsupported(String),
}

impl RoleRefError {
    /// How the RBAC authorizer words it: its informers name the resource in the singular
    /// (`role.rbac.authorization.k8s.io "x" not found`).
    fn authorizer_message(&self) -> String {
        match self {
            RoleRefError::NotFound { resource, name } => {
                format!("{}.{RBAC_GROUP} {} not found", resource.trim_end_matches('s'), go_quote(name))
            }
            RoleRefError::Unsupported(_) => self.to_string(),
        }
    }
}

impl std::fmt::Display for RoleRefError {
    /// How the RBAC registry words it, for the escalation checks: the plural resource, as any
    /// 404 of a get (`roles.rbac.authorization.k8s.io "x" not found`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoleRefError::NotFound { resource, name } => {
                write!(f, "{resource}.{RBAC_GROUP} {} not found", go_quote(name))
            }
            RoleRefError::Unsupported(kind) => {
                write!(f, "unsupported role reference kind: {}", go_quote(kind))
            }
        }
    }
}

fn rules_of(role: &Value) -> Vec<Value> {
    role.get("rules").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// The rules the ClusterRole aggregation controller would write into `cluster_role`:
/// those of every other ClusterRole whose labels match one of its
/// `aggregationRule.clusterRoleSelectors`, in name order, without duplicates. `None` when
/// the role is not aggregated. kubesim can store the result so the role reads back as on
/// a real cluster; authorization computes it itself, so it never depends on that.
pub fn aggregate_cluster_role_rules(cluster_role: &Value, cluster_roles: &[Value]) -> Option<Vec<Value>> {
    cluster_role.get("aggregationRule")?;
    Some(effective_cluster_role_rules(cluster_role, cluster_roles, &mut BTreeSet::new()))
}

/// A ClusterRole's rules, following aggregation through roles that are aggregated
/// themselves (`admin` gets `edit`'s rules, which get `view`'s).
fn effective_cluster_role_rules<'v>(
    cluster_role: &'v Value,
    cluster_roles: &'v [Value],
    visiting: &mut BTreeSet<&'v str>,
) -> Vec<Value> {
    let Some(aggregation) = cluster_role.get("aggregationRule") else {
        return rules_of(cluster_role);
    };
    visiting.insert(name_of(cluster_role));
    let mut rules: Vec<Value> = Vec::new();
    let selectors = aggregation.get("clusterRoleSelectors").and_then(Value::as_array).into_iter().flatten();
    for selector in selectors {
        let Ok(selector) = LabelSelector::from_label_selector_object(selector) else {
            continue;
        };
        for source in sorted_by_name(cluster_roles.iter()) {
            if visiting.contains(name_of(source)) || !selector.matches(labels_of(source)) {
                continue;
            }
            for rule in effective_cluster_role_rules(source, cluster_roles, visiting) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    visiting.remove(name_of(cluster_role));
    rules
}

fn labels_of(object: &Value) -> Option<&Map<String, Value>> {
    object.pointer("/metadata/labels").and_then(Value::as_object)
}

/// `rbac.RuleAllows`.
fn rule_allows(attrs: &RequestAttributes, rule: &Value) -> bool {
    let verb_matches = strings(rule, "verbs").any(|verb| verb == "*" || verb == attrs.verb);
    if !verb_matches {
        return false;
    }
    if !attrs.is_resource_request {
        return strings(rule, "nonResourceURLs").any(|url| non_resource_url_matches(url, &attrs.path));
    }
    let group_matches = strings(rule, "apiGroups").any(|group| group == "*" || group == attrs.api_group);
    let combined = attrs.combined_resource();
    let resource_matches =
        strings(rule, "resources").any(|resource| resource_matches(resource, &combined, attrs.subresource()));
    let mut names = strings(rule, "resourceNames").peekable();
    let name_matches = names.peek().is_none() || names.any(|name| name == attrs.name());
    group_matches && resource_matches && name_matches
}

/// `*`, an exact `resource` or `resource/subresource`, or `*/subresource`.
fn resource_matches(rule_resource: &str, combined: &str, subresource: &str) -> bool {
    rule_resource == "*"
        || rule_resource == combined
        || (!subresource.is_empty() && rule_resource.strip_prefix("*/") == Some(subresource))
}

/// `*`, an exact path, or a prefix ending in `*`.
fn non_resource_url_matches(rule_url: &str, path: &str) -> bool {
    rule_url == "*"
        || rule_url == path
        || (rule_url.ends_with('*') && path.starts_with(rule_url.trim_end_matches('*')))
}

/// The ClusterRoles kube-apiserver creates at start-up that kubesim seeds: `cluster-admin`,
/// the user-facing `admin`, `edit` and `view` (aggregated, with their rules already
/// aggregated as the controller would store them) and the aggregation sources they draw
/// on, and the discovery roles every authenticated user is bound to.
pub fn default_cluster_roles() -> Vec<Value> {
    let mut roles = vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), json!({"nonResourceURLs": ["*"], "verbs": ["*"]})],
        ),
        aggregated_cluster_role("admin", &[], "rbac.authorization.k8s.io/aggregate-to-admin"),
        aggregated_cluster_role(
            "edit",
            &["rbac.authorization.k8s.io/aggregate-to-admin"],
            "rbac.authorization.k8s.io/aggregate-to-edit",
        ),
        aggregated_cluster_role(
            "view",
            &["rbac.authorization.k8s.io/aggregate-to-edit"],
            "rbac.authorization.k8s.io/aggregate-to-view",
        ),
        cluster_role(
            "system:aggregate-to-admin",
            &["rbac.authorization.k8s.io/aggregate-to-admin"],
            aggregate_to_admin_rules(),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &["rbac.authorization.k8s.io/aggregate-to-edit"],
            aggregate_to_edit_rules(),
        ),
        cluster_role(
            "system:aggregate-to-view",
            &["rbac.authorization.k8s.io/aggregate-to-view"],
            aggregate_to_view_rules(),
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"]),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![json!({
                "nonResourceURLs": [
                    "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                    "/openapi/*", "/readyz", "/version", "/version/"
                ],
                "verbs": ["get"]
            })],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![json!({
                "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": ["get"]
            })],
        ),
    ];
    let aggregated: Vec<Option<Vec<Value>>> =
        roles.iter().map(|role| aggregate_cluster_role_rules(role, &roles)).collect();
    for (role, rules) in roles.iter_mut().zip(aggregated) {
        if let Some(rules) = rules {
            role["rules"] = Value::Array(rules);
        }
    }
    roles
}

/// The ClusterRoleBindings kube-apiserver creates at start-up that kubesim seeds:
/// `system:masters` is `cluster-admin`, and every authenticated user may use discovery
/// and the self-review APIs.
pub fn default_cluster_role_bindings() -> Vec<Value> {
    vec![
        cluster_role_binding("cluster-admin", "cluster-admin", &[SYSTEM_MASTERS]),
        cluster_role_binding("system:basic-user", "system:basic-user", &[SYSTEM_AUTHENTICATED]),
        cluster_role_binding("system:discovery", "system:discovery", &[SYSTEM_AUTHENTICATED]),
        cluster_role_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[SYSTEM_AUTHENTICATED, "system:unauthenticated"],
        ),
    ]
}

/// Metadata every bootstrap RBAC object carries.
fn bootstrap_metadata(name: &str, aggregate_to: &[&str]) -> Value {
    let mut labels = Map::new();
    labels.insert("kubernetes.io/bootstrapping".to_string(), json!("rbac-defaults"));
    for label in aggregate_to {
        labels.insert((*label).to_string(), json!("true"));
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    })
}

fn cluster_role(name: &str, aggregate_to: &[&str], rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": format!("{RBAC_GROUP}/v1"),
        "kind": "ClusterRole",
        "metadata": bootstrap_metadata(name, aggregate_to),
        "rules": rules
    })
}

fn aggregated_cluster_role(name: &str, aggregate_to: &[&str], aggregate_from: &str) -> Value {
    let mut role = cluster_role(name, aggregate_to, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]});
    role
}

fn cluster_role_binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> =
        groups.iter().map(|group| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": group})).collect();
    json!({
        "apiVersion": format!("{RBAC_GROUP}/v1"),
        "kind": "ClusterRoleBinding",
        "metadata": bootstrap_metadata(name, &[]),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects
    })
}

fn rule(api_groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": api_groups, "resources": resources, "verbs": verbs})
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

fn aggregate_to_admin_rules() -> Vec<Value> {
    vec![
        rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
        rule(&["rbac.authorization.k8s.io"], &["rolebindings", "roles"], READ_WRITE),
    ]
}

fn aggregate_to_edit_rules() -> Vec<Value> {
    let pod_access = ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy"];
    let workloads = [
        "daemonsets",
        "deployments",
        "deployments/rollback",
        "deployments/scale",
        "replicasets",
        "replicasets/scale",
        "statefulsets",
        "statefulsets/scale",
    ];
    vec![
        rule(&[""], &[&pod_access[..], &["secrets", "services/proxy"]].concat(), READ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(&[""], &[&["pods"], &pod_access[..]].concat(), WRITE),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(&["apps"], &workloads, WRITE),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
            WRITE,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
        rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
        rule(&["coordination.k8s.io"], &["leases"], READ_WRITE),
    ]
}

fn aggregate_to_view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"], READ),
        rule(&["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"], READ),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
            READ,
        ),
        rule(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"], READ),
        rule(&["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"], READ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserInfo {
        user_from_token("user:alice").unwrap()
    }

    fn resource_request(
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> RequestAttributes {
        RequestAttributes {
            verb: verb.to_string(),
            api_group: group.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            path: format!("/api/v1/{resource}"),
            is_resource_request: true,
            ..RequestAttributes::default()
        }
    }

    fn path_request(verb: &str, path: &str) -> RequestAttributes {
        RequestAttributes { verb: verb.to_string(), path: path.to_string(), ..RequestAttributes::default() }
    }

    fn role(namespace: &str, name: &str, rules: Vec<Value>) -> Value {
        json!({"metadata": {"name": name, "namespace": namespace}, "rules": rules})
    }

    fn plain_cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn binding(namespace: Option<&str>, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
        let mut metadata = json!({"name": name});
        if let Some(namespace) = namespace {
            metadata["namespace"] = json!(namespace);
        }
        json!({
            "metadata": metadata,
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
            "subjects": subjects
        })
    }

    fn user_subject(name: &str) -> Value {
        json!([{"kind": "User", "apiGroup": RBAC_GROUP, "name": name}])
    }

    #[derive(Default)]
    struct Objects {
        roles: Vec<Value>,
        role_bindings: Vec<Value>,
        cluster_roles: Vec<Value>,
        cluster_role_bindings: Vec<Value>,
    }

    impl Objects {
        fn decide(&self, user: &UserInfo, attrs: &RequestAttributes) -> Decision {
            authorize(user, attrs, &self.snapshot())
        }

        fn snapshot(&self) -> RbacSnapshot<'_> {
            RbacSnapshot {
                roles: &self.roles,
                role_bindings: &self.role_bindings,
                cluster_roles: &self.cluster_roles,
                cluster_role_bindings: &self.cluster_role_bindings,
            }
        }
    }

    fn read_configmaps() -> Value {
        rule(&[""], &["configmaps"], &["get", "list", "watch"])
    }

    #[test]
    fn admin_token_is_a_system_master() {
        let admin = user_from_token("admin").unwrap();
        assert_eq!(admin.name, ADMIN_USER);
        assert!(admin.groups.contains(&SYSTEM_MASTERS.to_string()));
        assert!(admin.groups.contains(&SYSTEM_AUTHENTICATED.to_string()));
    }

    #[test]
    fn user_token_carries_name_and_groups() {
        let user = user_from_token("user:alice:dev,ops").unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["dev", "ops", SYSTEM_AUTHENTICATED]);
    }

    #[test]
    fn user_token_round_trips_names_and_groups_with_colons() {
        let token = token_for_user("system:node:n1", &["system:nodes", "a,b"]);
        let user = user_from_token(&token).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, ["system:nodes", "a,b", SYSTEM_AUTHENTICATED]);
    }

    #[test]
    fn service_account_token_maps_to_service_account_user_and_groups() {
        let user = user_from_token(&token_for_service_account("ops", "kopper")).unwrap();
        assert_eq!(user.name, "system:serviceaccount:ops:kopper");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:ops", SYSTEM_AUTHENTICATED]
        );
    }

    #[test]
    fn unknown_or_malformed_tokens_are_not_authenticated() {
        for token in ["", "root", "user:", "serviceaccount:ns", "serviceaccount::sa", "serviceaccount:ns:"] {
            assert_eq!(user_from_token(token), None, "{token}");
        }
        assert_eq!(unauthorized_message(), "Unauthorized");
    }

    fn binder_objects(binder_rules: Vec<Value>) -> Objects {
        Objects {
            cluster_roles: vec![
                plain_cluster_role("editor", json!({}), vec![rule(&[""], &["configmaps"], &["*"])]),
                plain_cluster_role("binder", json!({}), binder_rules),
            ],
            cluster_role_bindings: vec![binding(
                None,
                "alice",
                "ClusterRole",
                "binder",
                user_subject("alice"),
            )],
            ..Objects::default()
        }
    }

    fn editor_ref() -> Value {
        json!({"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "editor"})
    }

    #[test]
    fn binding_a_role_needs_bind_on_it_or_all_its_permissions() {
        let write_bindings = rule(&[RBAC_GROUP], &["rolebindings"], &["create"]);
        let objects = binder_objects(vec![write_bindings.clone()]);
        assert!(binding_refusal(&alice(), &editor_ref(), "dev", &objects.snapshot()).is_some());

        let mut bind_editor = rule(&[RBAC_GROUP], &["clusterroles"], &["bind"]);
        bind_editor["resourceNames"] = json!(["editor"]);
        let objects = binder_objects(vec![write_bindings.clone(), bind_editor]);
        assert_eq!(binding_refusal(&alice(), &editor_ref(), "dev", &objects.snapshot()), None);

        let holds_editor = rule(&[""], &["configmaps"], &["*"]);
        let objects = binder_objects(vec![write_bindings, holds_editor]);
        assert_eq!(binding_refusal(&alice(), &editor_ref(), "dev", &objects.snapshot()), None);
        assert_eq!(
            binding_refusal(&UserInfo::admin(), &editor_ref(), "", &Objects::default().snapshot()),
            None
        );
    }

    #[test]
    fn holding_named_verbs_does_not_cover_a_wildcard() {
        let reads = rule(&[""], &["configmaps"], &["get", "list", "watch", "create", "update", "delete"]);
        let objects = binder_objects(vec![reads]);
        assert!(binding_refusal(&alice(), &editor_ref(), "dev", &objects.snapshot()).is_some());
    }

    #[test]
    fn system_masters_are_allowed_without_any_binding() {
        let attrs = resource_request("delete", "", "namespaces", None);
        assert_eq!(Objects::default().decide(&UserInfo::admin(), &attrs), Decision::Allow);
    }

    #[test]
    fn user_without_bindings_is_denied() {
        let attrs = resource_request("list", "", "configmaps", Some("default"));
        let verdict = evaluate(&alice(), &attrs, &Objects::default().snapshot());
        assert_eq!(verdict, Verdict { decision: Decision::Deny, reason: None });
    }

    #[test]
    fn rolebinding_grants_role_rules_in_its_namespace() {
        let objects = Objects {
            roles: vec![role("dev", "reader", vec![read_configmaps()])],
            role_bindings: vec![binding(Some("dev"), "alice-reads", "Role", "reader", user_subject("alice"))],
            ..Objects::default()
        };
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "configmaps", Some("dev"))),
            Decision::Allow
        );
        assert_eq!(
            objects.decide(&alice(), &resource_request("delete", "", "configmaps", Some("dev"))),
            Decision::Deny
        );
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "secrets", Some("dev"))),
            Decision::Deny
        );
    }

    #[test]
    fn rolebinding_to_clusterrole_only_grants_in_its_namespace() {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("reader", json!({}), vec![read_configmaps()])],
            role_bindings: vec![binding(
                Some("dev"),
                "alice-reads",
                "ClusterRole",
                "reader",
                user_subject("alice"),
            )],
            ..Objects::default()
        };
        assert_eq!(
            objects.decide(&alice(), &resource_request("get", "", "configmaps", Some("dev"))),
            Decision::Allow
        );
        assert_eq!(
            objects.decide(&alice(), &resource_request("get", "", "configmaps", Some("prod"))),
            Decision::Deny
        );
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "configmaps", None)),
            Decision::Deny
        );
    }

    #[test]
    fn clusterrolebinding_grants_everywhere_including_cluster_scope() {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("reader", json!({}), vec![read_configmaps()])],
            cluster_role_bindings: vec![binding(
                None,
                "alice-reads",
                "ClusterRole",
                "reader",
                user_subject("alice"),
            )],
            ..Objects::default()
        };
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "configmaps", Some("x"))),
            Decision::Allow
        );
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "configmaps", None)),
            Decision::Allow
        );
    }

    #[test]
    fn an_allow_names_the_binding_role_and_subject_that_granted_it() {
        let objects = Objects {
            roles: vec![role("dev", "reader", vec![read_configmaps()])],
            role_bindings: vec![
                binding(Some("dev"), "alice-reads", "Role", "reader", user_subject("alice")),
                binding(
                    Some("dev"),
                    "builder-reads",
                    "Role",
                    "reader",
                    json!([{"kind": "ServiceAccount", "name": "builder"}]),
                ),
            ],
            cluster_roles: default_cluster_roles(),
            cluster_role_bindings: default_cluster_role_bindings(),
        };
        let reason =
            |user: &UserInfo, attrs: RequestAttributes| evaluate(user, &attrs, &objects.snapshot()).reason;
        assert_eq!(
            reason(&alice(), resource_request("get", "", "configmaps", Some("dev"))).as_deref(),
            Some("RBAC: allowed by RoleBinding \"alice-reads/dev\" of Role \"reader\" to User \"alice\"")
        );
        let builder = user_from_token(&token_for_service_account("dev", "builder")).unwrap();
        assert_eq!(
            reason(&builder, resource_request("get", "", "configmaps", Some("dev"))).as_deref(),
            Some(
                "RBAC: allowed by RoleBinding \"builder-reads/dev\" of Role \"reader\" to ServiceAccount \
                 \"builder/dev\""
            )
        );
        assert_eq!(
            reason(&alice(), path_request("get", "/api")).as_deref(),
            Some(
                "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" \
                 to Group \"system:authenticated\""
            )
        );
    }

    #[test]
    fn impersonating_a_user_checks_the_user_and_each_group_and_adds_authenticated() {
        let impersonation = Impersonation { user: "bob".into(), groups: vec!["devs".into()] };
        let checks: Vec<(String, String)> = impersonation
            .checks()
            .into_iter()
            .map(|attrs| (attrs.resource, attrs.name.unwrap_or_default()))
            .collect();
        assert_eq!(checks, [("users".into(), "bob".into()), ("groups".into(), "devs".into())]);
        assert_eq!(
            impersonation.user_info(),
            UserInfo { name: "bob".into(), groups: vec!["devs".into(), SYSTEM_AUTHENTICATED.into()] }
        );
    }

    #[test]
    fn impersonating_a_service_account_checks_it_in_its_namespace_and_gives_its_groups() {
        let impersonation = Impersonation { user: "system:serviceaccount:ops:kopper".into(), groups: vec![] };
        let check = &impersonation.checks()[0];
        assert_eq!(
            (check.resource.as_str(), check.namespace.as_deref(), check.name.as_deref()),
            ("serviceaccounts", Some("ops"), Some("kopper"))
        );
        assert_eq!(
            impersonation.user_info(),
            user_from_token(&token_for_service_account("ops", "kopper")).unwrap()
        );
    }

    #[test]
    fn rules_for_lists_the_rules_of_every_applying_binding_and_missing_roles() {
        let objects = Objects {
            roles: vec![role("dev", "reader", vec![read_configmaps()])],
            role_bindings: vec![
                binding(Some("dev"), "alice-reads", "Role", "reader", user_subject("alice")),
                binding(Some("dev"), "alice-gone", "Role", "gone", user_subject("alice")),
                binding(Some("prod"), "alice-prod", "Role", "reader", user_subject("alice")),
            ],
            cluster_roles: default_cluster_roles(),
            cluster_role_bindings: default_cluster_role_bindings(),
        };
        let (rules, error) = rules_for(&alice(), "dev", &objects.snapshot());
        assert!(rules.contains(&read_configmaps()));
        assert!(rules.iter().any(|rule| strings(rule, "nonResourceURLs").any(|url| url == "/api")));
        assert_eq!(error.as_deref(), Some("role.rbac.authorization.k8s.io \"gone\" not found"));
        let (in_prod_only, _) = rules_for(&alice(), "other", &objects.snapshot());
        assert!(!in_prod_only.contains(&read_configmaps()));
    }

    #[test]
    fn role_in_another_namespace_is_not_used() {
        let objects = Objects {
            roles: vec![role("other", "reader", vec![read_configmaps()])],
            role_bindings: vec![binding(Some("dev"), "alice-reads", "Role", "reader", user_subject("alice"))],
            ..Objects::default()
        };
        let attrs = resource_request("get", "", "configmaps", Some("dev"));
        let verdict = evaluate(&alice(), &attrs, &objects.snapshot());
        assert_eq!(verdict.decision, Decision::Deny);
        assert_eq!(
            verdict.reason.as_deref(),
            Some("RBAC: role.rbac.authorization.k8s.io \"reader\" not found")
        );
    }

    #[test]
    fn missing_clusterrole_is_reported_in_the_reason() {
        let objects = Objects {
            cluster_role_bindings: vec![binding(None, "b", "ClusterRole", "gone", user_subject("alice"))],
            ..Objects::default()
        };
        let attrs = resource_request("get", "", "pods", Some("dev"));
        let verdict = evaluate(&alice(), &attrs, &objects.snapshot());
        assert_eq!(
            verdict.reason.as_deref(),
            Some("RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found")
        );
        assert_eq!(
            forbidden_message_with_reason(&alice(), &attrs, verdict.reason.as_deref()),
            "pods is forbidden: User \"alice\" cannot get resource \"pods\" in API group \"\" in the namespace \
             \"dev\": RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found"
        );
    }

    #[test]
    fn group_subjects_match_members() {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("reader", json!({}), vec![read_configmaps()])],
            role_bindings: vec![binding(
                Some("dev"),
                "devs-read",
                "ClusterRole",
                "reader",
                json!([{"kind": "Group", "apiGroup": RBAC_GROUP, "name": "developers"}]),
            )],
            ..Objects::default()
        };
        let attrs = resource_request("get", "", "configmaps", Some("dev"));
        assert_eq!(objects.decide(&user_from_token("user:bob:developers").unwrap(), &attrs), Decision::Allow);
        assert_eq!(objects.decide(&user_from_token("user:bob:testers").unwrap(), &attrs), Decision::Deny);
    }

    #[test]
    fn service_account_subject_defaults_to_the_binding_namespace() {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("reader", json!({}), vec![read_configmaps()])],
            role_bindings: vec![binding(
                Some("ops"),
                "sa-reads",
                "ClusterRole",
                "reader",
                json!([{"kind": "ServiceAccount", "name": "kopper"}]),
            )],
            ..Objects::default()
        };
        let attrs = resource_request("get", "", "configmaps", Some("ops"));
        let in_ops = user_from_token(&token_for_service_account("ops", "kopper")).unwrap();
        let in_dev = user_from_token(&token_for_service_account("dev", "kopper")).unwrap();
        assert_eq!(objects.decide(&in_ops, &attrs), Decision::Allow);
        assert_eq!(objects.decide(&in_dev, &attrs), Decision::Deny);
    }

    #[test]
    fn service_account_subject_in_clusterrolebinding_needs_a_namespace() {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("reader", json!({}), vec![read_configmaps()])],
            cluster_role_bindings: vec![
                binding(
                    None,
                    "a",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "ServiceAccount", "name": "kopper"}]),
                ),
                binding(
                    None,
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "ServiceAccount", "name": "other", "namespace": "ops"}]),
                ),
            ],
            ..Objects::default()
        };
        let attrs = resource_request("list", "", "configmaps", None);
        let kopper = user_from_token(&token_for_service_account("ops", "kopper")).unwrap();
        let other = user_from_token(&token_for_service_account("ops", "other")).unwrap();
        assert_eq!(objects.decide(&kopper, &attrs), Decision::Deny);
        assert_eq!(objects.decide(&other, &attrs), Decision::Allow);
    }

    fn decide_with_rule(rule: Value, attrs: &RequestAttributes) -> Decision {
        let objects = Objects {
            cluster_roles: vec![plain_cluster_role("r", json!({}), vec![rule])],
            cluster_role_bindings: vec![binding(None, "b", "ClusterRole", "r", user_subject("alice"))],
            ..Objects::default()
        };
        objects.decide(&alice(), attrs)
    }

    #[test]
    fn wildcards_match_any_verb_group_and_resource() {
        let attrs = resource_request("deletecollection", "example.com", "widgets", Some("x"));
        assert_eq!(decide_with_rule(rule(&["*"], &["*"], &["*"]), &attrs), Decision::Allow);
        assert_eq!(decide_with_rule(rule(&["example.com"], &["*"], &["*"]), &attrs), Decision::Allow);
        assert_eq!(decide_with_rule(rule(&[""], &["*"], &["*"]), &attrs), Decision::Deny);
    }

    #[test]
    fn subresources_need_their_own_rule() {
        let mut status = resource_request("update", "", "pods", Some("x"));
        status.subresource = Some("status".to_string());
        assert_eq!(decide_with_rule(rule(&[""], &["pods"], &["update"]), &status), Decision::Deny);
        assert_eq!(decide_with_rule(rule(&[""], &["pods/status"], &["update"]), &status), Decision::Allow);
        assert_eq!(decide_with_rule(rule(&[""], &["*/status"], &["update"]), &status), Decision::Allow);
        assert_eq!(decide_with_rule(rule(&[""], &["*/scale"], &["update"]), &status), Decision::Deny);
        let main = resource_request("update", "", "pods", Some("x"));
        assert_eq!(decide_with_rule(rule(&[""], &["*/status"], &["update"]), &main), Decision::Deny);
    }

    #[test]
    fn resource_names_restrict_requests_to_named_objects() {
        let named_rule = json!({
            "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["kopper"], "verbs": ["get", "update", "list", "create"]
        });
        let mut get = resource_request("get", "coordination.k8s.io", "leases", Some("x"));
        get.name = Some("kopper".to_string());
        assert_eq!(decide_with_rule(named_rule.clone(), &get), Decision::Allow);
        get.name = Some("other".to_string());
        assert_eq!(decide_with_rule(named_rule.clone(), &get), Decision::Deny);
        let list = resource_request("list", "coordination.k8s.io", "leases", Some("x"));
        assert_eq!(decide_with_rule(named_rule.clone(), &list), Decision::Deny);
        let create = resource_request("create", "coordination.k8s.io", "leases", Some("x"));
        assert_eq!(decide_with_rule(named_rule, &create), Decision::Deny);
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_trailing_star() {
        let discovery = json!({"nonResourceURLs": ["/api", "/apis/*"], "verbs": ["get"]});
        assert_eq!(decide_with_rule(discovery.clone(), &path_request("get", "/api")), Decision::Allow);
        assert_eq!(
            decide_with_rule(discovery.clone(), &path_request("get", "/apis/apps/v1")),
            Decision::Allow
        );
        assert_eq!(decide_with_rule(discovery.clone(), &path_request("get", "/api/v1")), Decision::Deny);
        assert_eq!(decide_with_rule(discovery, &path_request("post", "/api")), Decision::Deny);
    }

    #[test]
    fn resource_rules_never_grant_non_resource_paths() {
        assert_eq!(
            decide_with_rule(rule(&["*"], &["*"], &["*"]), &path_request("get", "/api")),
            Decision::Deny
        );
    }

    #[test]
    fn clusterrole_aggregates_rules_of_labelled_clusterroles() {
        let objects = Objects {
            cluster_roles: vec![
                json!({
                    "metadata": {"name": "monitoring"},
                    "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-monitoring": "true"}}]},
                    "rules": []
                }),
                plain_cluster_role(
                    "source",
                    json!({"aggregate-to-monitoring": "true"}),
                    vec![read_configmaps()],
                ),
            ],
            cluster_role_bindings: vec![binding(
                None,
                "b",
                "ClusterRole",
                "monitoring",
                user_subject("alice"),
            )],
            ..Objects::default()
        };
        assert_eq!(
            objects.decide(&alice(), &resource_request("get", "", "configmaps", Some("x"))),
            Decision::Allow
        );
        let rules = aggregate_cluster_role_rules(&objects.cluster_roles[0], &objects.cluster_roles).unwrap();
        assert_eq!(rules, vec![read_configmaps()]);
        assert_eq!(aggregate_cluster_role_rules(&objects.cluster_roles[1], &objects.cluster_roles), None);
    }

    #[test]
    fn default_edit_role_lets_namespace_editors_manage_configmaps_and_leases() {
        let objects = Objects {
            cluster_roles: default_cluster_roles(),
            role_bindings: vec![binding(Some("team"), "edit", "ClusterRole", "edit", user_subject("alice"))],
            ..Objects::default()
        };
        for (verb, group, resource) in [
            ("create", "", "configmaps"),
            ("watch", "", "configmaps"),
            ("patch", "", "secrets"),
            ("update", "coordination.k8s.io", "leases"),
            ("list", "", "pods"),
        ] {
            let attrs = resource_request(verb, group, resource, Some("team"));
            assert_eq!(objects.decide(&alice(), &attrs), Decision::Allow, "{verb} {resource}");
        }
        for (verb, group, resource) in
            [("create", "rbac.authorization.k8s.io", "roles"), ("delete", "", "namespaces")]
        {
            let attrs = resource_request(verb, group, resource, Some("team"));
            assert_eq!(objects.decide(&alice(), &attrs), Decision::Deny, "{verb} {resource}");
        }
    }

    #[test]
    fn default_admin_role_includes_edit_and_view_rules() {
        let roles = default_cluster_roles();
        let admin = roles.iter().find(|role| name_of(role) == "admin").unwrap();
        let rules = admin["rules"].as_array().unwrap();
        let grants = |resource: &str, verb: &str| {
            rules.iter().any(|rule| {
                strings(rule, "resources").any(|r| r == resource) && strings(rule, "verbs").any(|v| v == verb)
            })
        };
        assert!(grants("roles", "create"));
        assert!(grants("configmaps", "delete"));
        assert!(grants("namespaces", "get"));
    }

    #[test]
    fn default_bindings_let_every_authenticated_user_discover_apis() {
        let objects = Objects {
            cluster_roles: default_cluster_roles(),
            cluster_role_bindings: default_cluster_role_bindings(),
            ..Objects::default()
        };
        for path in ["/api", "/apis", "/apis/apps/v1", "/version", "/openapi/v2", "/openapi/v3/api/v1"] {
            assert_eq!(objects.decide(&alice(), &path_request("get", path)), Decision::Allow, "{path}");
        }
        assert_eq!(objects.decide(&alice(), &path_request("get", "/metrics")), Decision::Deny);
        assert_eq!(
            objects.decide(&alice(), &resource_request("list", "", "configmaps", Some("default"))),
            Decision::Deny
        );
    }

    #[test]
    fn namespaced_forbidden_message_matches_apiserver() {
        let attrs = resource_request("list", "", "configmaps", Some("default"));
        assert_eq!(
            forbidden_message(&alice(), &attrs),
            "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the \
             namespace \"default\""
        );
    }

    #[test]
    fn cluster_scoped_forbidden_message_names_the_group() {
        let attrs = resource_request("create", "rbac.authorization.k8s.io", "clusterroles", None);
        assert_eq!(
            forbidden_message(&alice(), &attrs),
            "clusterroles.rbac.authorization.k8s.io is forbidden: User \"alice\" cannot create resource \
             \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
        );
    }

    #[test]
    fn named_forbidden_message_quotes_the_object_and_subresource() {
        let mut attrs = resource_request("update", "", "pods", Some("default"));
        attrs.name = Some("web-0".to_string());
        attrs.subresource = Some("status".to_string());
        assert_eq!(
            forbidden_message(&alice(), &attrs),
            "pods \"web-0\" is forbidden: User \"alice\" cannot update resource \"pods/status\" in API group \"\" \
             in the namespace \"default\""
        );
    }

    #[test]
    fn non_resource_forbidden_message_names_the_path() {
        assert_eq!(
            forbidden_message(&alice(), &path_request("get", "/api")),
            "forbidden: User \"alice\" cannot get path \"/api\""
        );
    }

    #[test]
    fn service_account_forbidden_message_uses_the_full_user_name() {
        let user = user_from_token(&token_for_service_account("ops", "kopper")).unwrap();
        let attrs = resource_request("watch", "", "secrets", None);
        assert_eq!(
            forbidden_message(&user, &attrs),
            "secrets is forbidden: User \"system:serviceaccount:ops:kopper\" cannot watch resource \"secrets\" in \
             API group \"\" at the cluster scope"
        );
    }

    #[test]
    fn escalation_message_lists_each_missing_rule_compacted_and_sorted() {
        let objects = binder_objects(vec![rule(&[""], &["configmaps"], &["get"])]);
        let granted = vec![
            rule(&[""], &["configmaps", "secrets"], &["get", "list"]),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["get"]}),
        ];
        let user = user_from_token("user:alice:team").unwrap();
        assert_eq!(
            confirm_no_escalation(&user, "dev", &granted, &objects.snapshot()),
            Err("user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC \
                 permissions not currently held:\n\
                 {APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"list\"]}\n\
                 {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}\n\
                 {APIGroups:[\"apps\"], Resources:[\"deployments\"], ResourceNames:[\"web\"], Verbs:[\"get\"]}"
                .to_owned())
        );
    }

    #[test]
    fn escalation_message_names_the_roles_that_could_not_be_resolved() {
        let mut objects = binder_objects(vec![]);
        objects.cluster_role_bindings.push(binding(
            None,
            "gone",
            "ClusterRole",
            "gone",
            user_subject("alice"),
        ));
        let granted = vec![json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]})];
        let message = confirm_no_escalation(&alice(), "", &granted, &objects.snapshot()).unwrap_err();
        assert!(
            message.ends_with(
                "{NonResourceURLs:[\"/healthz\"], Verbs:[\"get\"]}; resolution errors: \
                 [clusterroles.rbac.authorization.k8s.io \"gone\" not found]"
            ),
            "{message}"
        );
    }

    #[test]
    fn owner_rules_cover_by_wildcard_subresource_wildcard_and_url_prefix() {
        let objects = binder_objects(vec![
            rule(&["*"], &["*/status"], &["get"]),
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a", "b"], "verbs": ["*"]}),
            json!({"nonResourceURLs": ["/metrics*"], "verbs": ["get"]}),
        ]);
        let granted = vec![
            rule(&["apps"], &["deployments/status"], &["get"]),
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["delete"]}),
            json!({"nonResourceURLs": ["/metrics/cadvisor"], "verbs": ["get"]}),
        ];
        assert_eq!(confirm_no_escalation(&alice(), "dev", &granted, &objects.snapshot()), Ok(()));
        let unnamed = vec![rule(&[""], &["secrets"], &["delete"])];
        assert!(
            confirm_no_escalation(&alice(), "dev", &unnamed, &objects.snapshot()).is_err(),
            "names limit"
        );
    }

    #[test]
    fn writing_a_role_needs_escalate_or_every_permission_it_grants() {
        let secrets = vec![rule(&[""], &["secrets"], &["get"])];
        let objects = binder_objects(vec![rule(&[RBAC_GROUP], &["roles"], &["create"])]);
        let refused = role_refusal(&alice(), "roles", None, "dev", &secrets, &objects.snapshot());
        assert!(matches!(refused, Some(Refusal::NotHeld(_))), "{refused:?}");
        let objects = binder_objects(vec![rule(&[RBAC_GROUP], &["roles"], &["create", "escalate"])]);
        assert_eq!(role_refusal(&alice(), "roles", None, "dev", &secrets, &objects.snapshot()), None);
        let objects = binder_objects(vec![rule(&[""], &["secrets"], &["get"])]);
        assert_eq!(role_refusal(&alice(), "roles", None, "dev", &secrets, &objects.snapshot()), None);
    }

    #[test]
    fn binding_a_missing_role_without_bind_is_not_found() {
        let objects = binder_objects(vec![]);
        let missing = json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "nope"});
        assert_eq!(
            binding_refusal(&alice(), &missing, "dev", &objects.snapshot()),
            Some(Refusal::RoleNotFound { resource: "roles", name: "nope".to_owned() })
        );
    }
}
