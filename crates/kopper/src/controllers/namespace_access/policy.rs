//! A NamespaceAccess checked and parsed once, then rendered per namespace.
//!
//! Errors carry the path of the field at fault (`spec.bindings[0].subjects[1].name`) so the
//! status condition tells the user exactly what to fix.

use k8s_openapi::api::rbac::v1::{RoleRef, Subject};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::matching::NamespaceMatcher;
use super::names;
use super::template::{NamespaceFacts, Template};
use super::types::{NamespaceAccess, RoleKind, SubjectKind};

pub const RBAC_API_GROUP: &str = "rbac.authorization.k8s.io";

/// A problem with one field of a policy, possibly only in one namespace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// A policy whose spec parsed cleanly.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    pub name: String,
    pub uid: String,
    /// Creation time; the older policy wins a binding name both want.
    pub created: Option<Timestamp>,
    matcher: NamespaceMatcher,
    pub bindings: Vec<CompiledBinding>,
}

#[derive(Clone, Debug)]
pub struct CompiledBinding {
    /// Position in `spec.bindings`, for field paths.
    index: usize,
    name: Template,
    role_kind: RoleKind,
    role_name: Template,
    subjects: Vec<CompiledSubject>,
}

#[derive(Clone, Debug)]
struct CompiledSubject {
    kind: SubjectKind,
    name: Template,
    namespace: Option<Template>,
}

/// One binding as it should look in one namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedBinding {
    pub name: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

impl CompiledPolicy {
    pub fn compile(policy: &NamespaceAccess) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let name = policy.name_any();
        // The policy name is written into a label on every binding it manages.
        if let Err(message) = names::check_label_value(&name) {
            errors.push(FieldError::new("metadata.name", format!("{message} (it is used as a label value)")));
        }
        let uid = policy.uid().unwrap_or_else(|| {
            errors.push(FieldError::new("metadata.uid", "is not set; the policy has not been stored yet"));
            String::new()
        });
        let matcher = NamespaceMatcher::new(&policy.spec.namespaces)
            .map_err(|err| errors.push(FieldError::new("spec.namespaces.selector", err.to_string())))
            .ok();
        let bindings: Vec<CompiledBinding> = policy
            .spec
            .bindings
            .iter()
            .enumerate()
            .filter_map(|(index, binding)| compile_binding(index, binding).map_err(|e| errors.extend(e)).ok())
            .collect();
        match matcher {
            Some(matcher) if errors.is_empty() => Ok(Self {
                name,
                uid,
                created: policy.creation_timestamp().map(|time| time.0),
                matcher,
                bindings,
            }),
            _ => Err(errors),
        }
    }

    pub fn selects(&self, namespace: NamespaceFacts<'_>) -> bool {
        self.matcher.matches(namespace)
    }

    /// Deterministic precedence between policies: oldest first, then by name.
    pub fn precedence_key(&self) -> (bool, Option<Timestamp>, &str) {
        (self.created.is_none(), self.created, &self.name)
    }
}

fn compile_binding(
    index: usize,
    binding: &super::types::BindingTemplate,
) -> Result<CompiledBinding, Vec<FieldError>> {
    let field = format!("spec.bindings[{index}]");
    let mut errors = Vec::new();
    let name = parse_into(&mut errors, format!("{field}.name"), &binding.name);
    let role_name = parse_into(&mut errors, format!("{field}.roleRef.name"), &binding.role_ref.name);
    let mut subjects = Vec::new();
    for (position, subject) in binding.subjects.iter().enumerate() {
        let subject_field = format!("{field}.subjects[{position}]");
        let subject_name = parse_into(&mut errors, format!("{subject_field}.name"), &subject.name);
        let namespace = match (&subject.namespace, subject.kind) {
            (None, _) => Some(None),
            (Some(namespace), SubjectKind::ServiceAccount) => {
                parse_into(&mut errors, format!("{subject_field}.namespace"), namespace).map(Some)
            }
            (Some(_), _) => {
                errors.push(FieldError::new(
                    format!("{subject_field}.namespace"),
                    "is only allowed for ServiceAccount subjects",
                ));
                None
            }
        };
        if let (Some(name), Some(namespace)) = (subject_name, namespace) {
            subjects.push(CompiledSubject { kind: subject.kind, name, namespace });
        }
    }
    match (name, role_name) {
        (Some(name), Some(role_name)) if errors.is_empty() => {
            Ok(CompiledBinding { index, name, role_kind: binding.role_ref.kind, role_name, subjects })
        }
        _ => Err(errors),
    }
}

/// Parses one template, collecting its error under `field`.
fn parse_into(errors: &mut Vec<FieldError>, field: String, source: &str) -> Option<Template> {
    Template::parse(source).map_err(|err| errors.push(FieldError::new(field, err.to_string()))).ok()
}

impl CompiledBinding {
    /// The binding's name in this namespace, checked against the API server's rules.
    pub fn render_name(&self, namespace: NamespaceFacts<'_>) -> Result<String, FieldError> {
        let field = format!("spec.bindings[{}].name", self.index);
        render_checked(&self.name, namespace, &field, names::check_rbac_name)
    }

    /// The whole binding in this namespace. Every rendered value is checked, so a bad value
    /// is reported with its field instead of being refused by the API server.
    pub fn render(&self, namespace: NamespaceFacts<'_>) -> Result<RenderedBinding, FieldError> {
        let name = self.render_name(namespace)?;
        let role_field = format!("spec.bindings[{}].roleRef.name", self.index);
        let role_name = render_checked(&self.role_name, namespace, &role_field, names::check_rbac_name)?;
        let kind = match self.role_kind {
            RoleKind::ClusterRole => "ClusterRole",
            RoleKind::Role => "Role",
        };
        let role_ref = RoleRef { api_group: Some(RBAC_API_GROUP.into()), kind: kind.into(), name: role_name };
        let subjects = self
            .subjects
            .iter()
            .enumerate()
            .map(|(position, subject)| {
                let field = format!("spec.bindings[{}].subjects[{position}]", self.index);
                subject.render(namespace, &field)
            })
            .collect::<Result<_, _>>()?;
        Ok(RenderedBinding { name, role_ref, subjects })
    }
}

impl CompiledSubject {
    fn render(&self, namespace: NamespaceFacts<'_>, field: &str) -> Result<Subject, FieldError> {
        let name_field = format!("{field}.name");
        match self.kind {
            SubjectKind::Group | SubjectKind::User => {
                let name = render_checked(&self.name, namespace, &name_field, check_not_empty)?;
                let kind = if self.kind == SubjectKind::Group { "Group" } else { "User" };
                Ok(Subject {
                    api_group: Some(RBAC_API_GROUP.into()),
                    kind: kind.into(),
                    name,
                    namespace: None,
                })
            }
            SubjectKind::ServiceAccount => {
                let name = render_checked(&self.name, namespace, &name_field, names::check_dns_subdomain)?;
                let sa_namespace = match &self.namespace {
                    Some(template) => render_checked(
                        template,
                        namespace,
                        &format!("{field}.namespace"),
                        names::check_dns_label,
                    )?,
                    None => namespace.name.to_owned(),
                };
                Ok(Subject {
                    api_group: None,
                    kind: "ServiceAccount".into(),
                    name,
                    namespace: Some(sa_namespace),
                })
            }
        }
    }
}

fn check_not_empty(value: &str) -> Result<(), String> {
    if value.is_empty() { Err("must not be empty".into()) } else { Ok(()) }
}

fn render_checked(
    template: &Template,
    namespace: NamespaceFacts<'_>,
    field: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<String, FieldError> {
    let rendered = template.render(namespace).map_err(|err| FieldError::new(field, err.to_string()))?;
    check(&rendered).map_err(|message| {
        FieldError::new(
            field,
            format!("renders {rendered:?} in namespace {:?}, which {message}", namespace.name),
        )
    })?;
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::controllers::namespace_access::testing::{policy, policy_yaml};

    fn facts<'a>(name: &'a str, labels: &'a BTreeMap<String, String>) -> NamespaceFacts<'a> {
        NamespaceFacts { name, labels, protected: false }
    }

    #[test]
    fn seed_policy_renders_the_seed_binding() {
        let compiled = CompiledPolicy::compile(&policy("seed", 1)).unwrap();
        let labels = BTreeMap::new();
        let rendered = compiled.bindings[0].render(facts("team-1", &labels)).unwrap();
        assert_eq!(rendered.name, "ad-kubernetes-team-1");
        assert_eq!(rendered.role_ref.kind, "ClusterRole");
        assert_eq!(rendered.role_ref.name, "edit");
        assert_eq!(rendered.subjects.len(), 1);
        assert_eq!(rendered.subjects[0].kind, "Group");
        assert_eq!(rendered.subjects[0].name, "ad-kubernetes-team-1");
        assert_eq!(rendered.subjects[0].api_group.as_deref(), Some(RBAC_API_GROUP));
    }

    #[test]
    fn service_account_defaults_to_the_bindings_namespace() {
        let compiled = CompiledPolicy::compile(&policy_yaml(
            "ci",
            r#"
bindings:
- name: ci
  roleRef: {kind: Role, name: deployer}
  subjects:
  - {kind: ServiceAccount, name: builder}
  - {kind: ServiceAccount, name: "runner-{labels.team}", namespace: "ci-{labels.team}"}
"#,
        ))
        .unwrap();
        let labels = [("team".to_owned(), "blue".to_owned())].into();
        let rendered = compiled.bindings[0].render(facts("app", &labels)).unwrap();
        assert_eq!(rendered.role_ref.kind, "Role");
        assert_eq!(rendered.subjects[0].namespace.as_deref(), Some("app"));
        assert_eq!(rendered.subjects[0].api_group, None);
        assert_eq!(rendered.subjects[1].name, "runner-blue");
        assert_eq!(rendered.subjects[1].namespace.as_deref(), Some("ci-blue"));
    }

    #[test]
    fn template_syntax_error_names_the_field() {
        let errors = CompiledPolicy::compile(&policy_yaml(
            "bad",
            r#"
bindings:
- name: ok-{namespace}
  roleRef: {kind: ClusterRole, name: edit}
  subjects:
  - {kind: Group, name: "team-{label.team}"}
"#,
        ))
        .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.bindings[0].subjects[0].name");
        assert!(errors[0].message.contains("unknown placeholder {label.team}"), "{}", errors[0]);
    }

    #[test]
    fn namespace_on_a_group_subject_is_rejected() {
        let errors = CompiledPolicy::compile(&policy_yaml(
            "bad",
            r#"
bindings:
- name: x
  roleRef: {kind: ClusterRole, name: edit}
  subjects:
  - {kind: Group, name: devs, namespace: other}
"#,
        ))
        .unwrap_err();
        assert_eq!(errors[0].field, "spec.bindings[0].subjects[0].namespace");
    }

    #[test]
    fn policy_name_too_long_for_a_label_is_rejected() {
        let errors = CompiledPolicy::compile(&policy(&"p".repeat(64), 1)).unwrap_err();
        assert_eq!(errors[0].field, "metadata.name");
    }

    #[test]
    fn rendered_invalid_binding_name_names_field_and_namespace() {
        let compiled = CompiledPolicy::compile(&policy_yaml(
            "bad",
            r#"
bindings:
- name: "team-{labels.team}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects:
  - {kind: Group, name: devs}
"#,
        ))
        .unwrap();
        let labels = [("team".to_owned(), "a/b".to_owned())].into();
        let err = compiled.bindings[0].render(facts("ns1", &labels)).unwrap_err();
        assert_eq!(err.field, "spec.bindings[0].name");
        assert!(err.message.contains(r#"renders "team-a/b" in namespace "ns1""#), "{err}");
    }

    #[test]
    fn service_account_name_that_is_not_a_dns_subdomain_cannot_be_bound() {
        let compiled = CompiledPolicy::compile(&policy_yaml(
            "bad",
            r#"
bindings:
- name: x
  roleRef: {kind: ClusterRole, name: view}
  subjects:
  - {kind: ServiceAccount, name: "{labels.owner}"}
"#,
        ))
        .unwrap();
        let labels = [("owner".to_owned(), "Ann".to_owned())].into();
        let err = compiled.bindings[0].render(facts("ns1", &labels)).unwrap_err();
        assert_eq!(err.field, "spec.bindings[0].subjects[0].name");
    }

    #[test]
    fn empty_label_value_cannot_name_a_group() {
        let compiled = CompiledPolicy::compile(&policy_yaml(
            "p",
            r#"
bindings:
- name: x
  roleRef: {kind: ClusterRole, name: view}
  subjects:
  - {kind: Group, name: "{labels.team}"}
"#,
        ))
        .unwrap();
        let labels = [("team".to_owned(), String::new())].into();
        let err = compiled.bindings[0].render(facts("ns1", &labels)).unwrap_err();
        assert!(err.message.contains("must not be empty"), "{err}");
    }

    #[test]
    fn older_policy_takes_precedence_then_name_breaks_ties() {
        let older = CompiledPolicy::compile(&policy("zeta", 1)).unwrap();
        let newer = CompiledPolicy::compile(&policy("alpha", 2)).unwrap();
        let same_age = CompiledPolicy::compile(&policy("beta", 2)).unwrap();
        assert!(older.precedence_key() < newer.precedence_key());
        assert!(newer.precedence_key() < same_age.precedence_key());
    }
}
