//! Which RoleBindings should exist in one namespace, given every policy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt};

use super::policy::{CompiledPolicy, FieldError, RenderedBinding};
use super::template::NamespaceFacts;
use super::types::NamespaceAccess;
use crate::runtime::cache::same_objects;

/// Marks a binding as made by kopper. Without it, kopper never touches a binding.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kopper";
/// Names the policy a managed binding belongs to.
pub const POLICY_LABEL: &str = "kopper.dev/namespace-access";

/// Every policy, parsed, in precedence order (valid ones oldest first, then by name).
#[derive(Clone, Debug, Default)]
pub struct Policies {
    pub valid: Vec<CompiledPolicy>,
    /// Policies whose spec does not parse, with why. Their existing bindings are left as they
    /// are, so a typo in a policy does not revoke access everywhere at once.
    pub invalid: BTreeMap<String, Vec<FieldError>>,
}

impl Policies {
    pub fn compile<'a>(policies: impl IntoIterator<Item = &'a NamespaceAccess>) -> Self {
        let mut compiled = Self::default();
        for policy in policies {
            match CompiledPolicy::compile(policy) {
                Ok(valid) => compiled.valid.push(valid),
                Err(errors) => {
                    compiled.invalid.insert(policy.name_any(), errors);
                }
            }
        }
        compiled.valid.sort_by(|a, b| a.precedence_key().cmp(&b.precedence_key()));
        compiled
    }

    /// Policies as the cache holds them, including objects that could not be read at all:
    /// those are held like invalid ones, so one broken object changes nothing.
    pub fn from_store(policies: &[Arc<DeserializeGuard<NamespaceAccess>>]) -> Self {
        let mut compiled = Self::compile(policies.iter().filter_map(|policy| policy.0.as_ref().ok()));
        for unreadable in policies.iter().filter_map(|policy| policy.0.as_ref().err()) {
            let error = FieldError::new("object", format!("cannot be read: {}", unreadable.error));
            compiled.invalid.insert(unreadable.metadata.name.clone().unwrap_or_default(), vec![error]);
        }
        compiled
    }
}

/// [`Policies`] compiled once per change of the policy cache rather than once per namespace
/// pass: a start or a policy change passes over every namespace, each against the same
/// policies. The cache replaces an object's `Arc` whenever it changes, and the objects
/// compiled last are held here, so the same `Arc`s mean the same policies.
#[derive(Default)]
pub struct CompiledPolicies {
    last: std::sync::Mutex<Option<Compiled>>,
}

struct Compiled {
    from: Vec<Arc<CachedPolicy>>,
    policies: Arc<Policies>,
}

/// A policy as the cache holds it: read, or what could not be read of it.
type CachedPolicy = DeserializeGuard<NamespaceAccess>;

impl CompiledPolicies {
    /// `cached`, compiled; the same [`Policies`] as last time when the cache holds the same
    /// objects.
    pub fn of(&self, mut cached: Vec<Arc<CachedPolicy>>) -> Arc<Policies> {
        cached.sort_unstable_by_key(Arc::as_ptr);
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(compiled) = last.as_ref()
            && same_objects(&compiled.from, &cached)
        {
            return compiled.policies.clone();
        }
        let policies = Arc::new(Policies::from_store(&cached));
        *last = Some(Compiled { from: cached, policies: policies.clone() });
        policies
    }
}

/// A binding one policy should own in one namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredBinding {
    pub policy: String,
    pub policy_uid: String,
    pub binding: RenderedBinding,
}

/// Why a policy does not get a binding it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProblemKind {
    /// A RoleBinding of that name exists and kopper did not make it.
    NotManagedByKopper,
    /// An older policy (or one earlier by name) wants the same name in the namespace.
    ClaimedByOtherPolicy,
    /// Two bindings of the same policy render the same name.
    DuplicateName,
    /// A template renders something the API server would refuse.
    InvalidBinding,
    /// The API server refused the binding (for example kopper may not grant that role).
    Refused,
}

impl ProblemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotManagedByKopper => "NotManagedByKopper",
            Self::ClaimedByOtherPolicy => "ClaimedByOtherPolicy",
            Self::DuplicateName => "DuplicateName",
            Self::InvalidBinding => "InvalidBinding",
            Self::Refused => "Refused",
        }
    }

    /// Conflicts are about who owns a name; the rest are about what the policy renders.
    pub fn is_conflict(self) -> bool {
        matches!(self, Self::NotManagedByKopper | Self::ClaimedByOtherPolicy | Self::DuplicateName)
    }
}

/// A binding a policy asks for but does not get, in one namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    pub policy: String,
    pub namespace: String,
    /// The binding's name, or empty when even the name could not be rendered.
    pub name: String,
    pub kind: ProblemKind,
    pub message: String,
}

/// What one namespace should hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// Keyed by binding name.
    pub bindings: BTreeMap<String, DesiredBinding>,
    /// Policies whose managed bindings must be left alone (their spec is invalid).
    pub held_policies: BTreeSet<String>,
    pub problems: Vec<Problem>,
}

/// The bindings every selecting policy asks for in this namespace. When two policies want
/// the same name the one earlier in precedence order wins and the other gets a problem.
pub fn desired_bindings(namespace: NamespaceFacts<'_>, policies: &Policies) -> Desired {
    let mut desired =
        Desired { held_policies: policies.invalid.keys().cloned().collect(), ..Desired::default() };
    for policy in policies.valid.iter().filter(|policy| policy.selects(namespace)) {
        for template in &policy.bindings {
            let problem = |name: String, kind, message| Problem {
                policy: policy.name.clone(),
                namespace: namespace.name.to_owned(),
                name,
                kind,
                message,
            };
            let rendered = match template.render(namespace) {
                Ok(rendered) => rendered,
                Err(err) => {
                    let name = template.render_name(namespace).unwrap_or_default();
                    desired.problems.push(problem(name, ProblemKind::InvalidBinding, err.to_string()));
                    continue;
                }
            };
            match desired.bindings.get(&rendered.name) {
                Some(winner) if winner.policy == policy.name => {
                    let message = "another binding of this policy renders the same name".to_owned();
                    desired.problems.push(problem(rendered.name, ProblemKind::DuplicateName, message));
                }
                Some(winner) => {
                    let message = format!("claimed by policy {:?}, which takes precedence", winner.policy);
                    desired.problems.push(problem(rendered.name, ProblemKind::ClaimedByOtherPolicy, message));
                }
                None => {
                    desired.bindings.insert(
                        rendered.name.clone(),
                        DesiredBinding {
                            policy: policy.name.clone(),
                            policy_uid: policy.uid.clone(),
                            binding: rendered,
                        },
                    );
                }
            }
        }
    }
    desired
}

impl DesiredBinding {
    /// The object kopper applies: only the fields kopper owns, so server-side apply never
    /// claims anything else.
    pub fn to_role_binding(&self, namespace: &str) -> RoleBinding {
        let labels = [
            (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
            (POLICY_LABEL.to_owned(), self.policy.clone()),
        ];
        RoleBinding {
            metadata: ObjectMeta {
                name: Some(self.binding.name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(labels.into()),
                owner_references: Some(vec![self.owner_reference()]),
                ..ObjectMeta::default()
            },
            role_ref: self.binding.role_ref.clone(),
            subjects: Some(self.binding.subjects.clone()),
        }
    }

    /// Lets the garbage collector remove the binding when the policy is deleted, even while
    /// kopper is not running.
    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: NamespaceAccess::api_version(&()).into_owned(),
            kind: NamespaceAccess::kind(&()).into_owned(),
            name: self.policy.clone(),
            uid: self.policy_uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::controllers::namespace_access::testing::{broken_policy, policy, policy_yaml};

    fn facts<'a>(name: &'a str, labels: &'a BTreeMap<String, String>) -> NamespaceFacts<'a> {
        NamespaceFacts { name, labels, protected: false }
    }

    fn team_policy(name: &str, created: i64) -> NamespaceAccess {
        let mut policy = policy_yaml(
            name,
            r#"
namespaces: {include: ["team-*"]}
bindings:
- name: "ad-kubernetes-{namespace}"
  roleRef: {kind: ClusterRole, name: view}
  subjects: [{kind: Group, name: auditors}]
"#,
        );
        policy.metadata.creation_timestamp = crate::controllers::namespace_access::testing::at(created);
        policy
    }

    #[test]
    fn seed_policy_wants_one_binding_per_namespace() {
        let policies = Policies::compile([&policy("seed", 1)]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("team-1", &labels), &policies);
        assert_eq!(desired.bindings.keys().collect::<Vec<_>>(), ["ad-kubernetes-team-1"]);
        assert_eq!(desired.bindings["ad-kubernetes-team-1"].policy, "seed");
        assert!(desired.problems.is_empty());
    }

    #[test]
    fn unselected_namespace_wants_nothing() {
        let policies = Policies::compile([&team_policy("teams", 1)]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("billing", &labels), &policies);
        assert!(desired.bindings.is_empty());
        assert!(desired.problems.is_empty());
    }

    #[test]
    fn system_namespace_gets_nothing_from_the_seed_policy() {
        let policies = Policies::compile([&policy("seed", 1)]);
        let labels = BTreeMap::new();
        assert!(desired_bindings(facts("kube-system", &labels), &policies).bindings.is_empty());
    }

    #[test]
    fn older_policy_wins_a_shared_name_and_the_newer_gets_a_conflict() {
        let newer = team_policy("aaa-newer", 20);
        let older = policy("zzz-older", 10);
        let policies = Policies::compile([&newer, &older]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("team-1", &labels), &policies);
        assert_eq!(desired.bindings["ad-kubernetes-team-1"].policy, "zzz-older");
        assert_eq!(desired.problems.len(), 1);
        assert_eq!(desired.problems[0].policy, "aaa-newer");
        assert_eq!(desired.problems[0].kind, ProblemKind::ClaimedByOtherPolicy);
        assert!(desired.problems[0].message.contains("zzz-older"));
    }

    #[test]
    fn policies_of_the_same_age_are_ordered_by_name() {
        let policies = Policies::compile([&team_policy("beta", 5), &policy("alpha", 5)]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("team-1", &labels), &policies);
        assert_eq!(desired.bindings["ad-kubernetes-team-1"].policy, "alpha");
    }

    #[test]
    fn two_templates_rendering_one_name_report_a_duplicate() {
        let policy = policy_yaml(
            "dup",
            r#"
bindings:
- name: "x-{labels.a}"
  roleRef: {kind: ClusterRole, name: view}
  subjects: [{kind: Group, name: g1}]
- name: "x-{labels.b}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: g2}]
"#,
        );
        let policies = Policies::compile([&policy]);
        let labels = [("a".to_owned(), "same".to_owned()), ("b".to_owned(), "same".to_owned())].into();
        let desired = desired_bindings(facts("ns", &labels), &policies);
        assert_eq!(desired.bindings["x-same"].binding.role_ref.name, "view");
        assert_eq!(desired.problems[0].kind, ProblemKind::DuplicateName);
    }

    #[test]
    fn missing_label_skips_only_that_binding() {
        let policy = policy_yaml(
            "teams",
            r#"
bindings:
- name: "team-{labels.team}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: "{labels.team}"}]
- name: "auditors"
  roleRef: {kind: ClusterRole, name: view}
  subjects: [{kind: Group, name: auditors}]
"#,
        );
        let policies = Policies::compile([&policy]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("ns", &labels), &policies);
        assert_eq!(desired.bindings.keys().collect::<Vec<_>>(), ["auditors"]);
        assert_eq!(desired.problems.len(), 1);
        assert_eq!(desired.problems[0].kind, ProblemKind::InvalidBinding);
        assert!(desired.problems[0].message.starts_with("spec.bindings[0].name: "), "{:?}", desired.problems);
    }

    #[test]
    fn invalid_policy_is_held_not_applied() {
        let broken = broken_policy();
        let policies = Policies::compile([&broken]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("ns", &labels), &policies);
        assert!(desired.bindings.is_empty());
        assert!(desired.held_policies.contains("broken"));
    }

    #[test]
    fn applied_object_carries_labels_owner_and_only_owned_fields() {
        let policies = Policies::compile([&policy("seed", 1)]);
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("team-1", &labels), &policies);
        let object = desired.bindings["ad-kubernetes-team-1"].to_role_binding("team-1");
        let json = serde_json::to_value(&object).unwrap();
        assert_eq!(json["metadata"]["labels"][MANAGED_BY_LABEL], "kopper");
        assert_eq!(json["metadata"]["labels"][POLICY_LABEL], "seed");
        assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "NamespaceAccess");
        assert_eq!(json["metadata"]["ownerReferences"][0]["uid"], "uid-seed");
        let metadata_keys: Vec<_> = json["metadata"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(metadata_keys, ["labels", "name", "namespace", "ownerReferences"]);
    }

    #[test]
    fn seed_sample_gives_each_namespace_its_own_group_as_editors() {
        let sample: NamespaceAccess = serde_yaml::from_str(include_str!(
            "../../../../../config/samples/namespaceaccess-group-per-namespace.yaml"
        ))
        .unwrap();
        let mut sample = sample;
        sample.metadata.uid = Some("uid".into());
        let policies = Policies::compile([&sample]);
        let labels = BTreeMap::new();
        for namespace in ["team-1", "sandbox"] {
            let desired = desired_bindings(facts(namespace, &labels), &policies);
            let binding = &desired.bindings[&format!("ad-kubernetes-{namespace}")].binding;
            assert_eq!(
                (binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()),
                ("ClusterRole", "edit")
            );
            assert_eq!(binding.subjects[0].kind, "Group");
            assert_eq!(binding.subjects[0].name, format!("ad-kubernetes-{namespace}"));
        }
        assert!(desired_bindings(facts("kube-system", &labels), &policies).bindings.is_empty());
    }

    #[test]
    fn team_label_sample_uses_the_team_label_and_skips_production() {
        let mut sample: NamespaceAccess = serde_yaml::from_str(include_str!(
            "../../../../../config/samples/namespaceaccess-team-label.yaml"
        ))
        .unwrap();
        sample.metadata.uid = Some("uid".into());
        let policies = Policies::compile([&sample]);
        let labels = [("team".to_owned(), "blue".to_owned())].into();
        let desired = desired_bindings(facts("blue-dev", &labels), &policies);
        assert_eq!(desired.bindings.keys().collect::<Vec<_>>(), ["auditors-view", "team-blue-edit"]);
        assert_eq!(desired.bindings["team-blue-edit"].binding.subjects[0].name, "team-blue");
        assert!(desired_bindings(facts("blue-prod", &labels), &policies).bindings.is_empty());
        assert!(desired_bindings(facts("shared", &BTreeMap::new()), &policies).bindings.is_empty());
    }

    #[test]
    fn unreadable_policy_is_held_and_the_others_still_apply() {
        let unreadable: DeserializeGuard<NamespaceAccess> = serde_json::from_value(serde_json::json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "NamespaceAccess",
            "metadata": {"name": "broken"}, "spec": {"bindings": "not a list"},
        }))
        .unwrap();
        assert!(unreadable.0.is_err());
        let readable = DeserializeGuard(Ok(policy("seed", 1)));
        let policies = Policies::from_store(&[Arc::new(unreadable), Arc::new(readable)]);
        assert!(policies.invalid["broken"][0].message.starts_with("cannot be read"));
        let labels = BTreeMap::new();
        let desired = desired_bindings(facts("team-1", &labels), &policies);
        assert!(desired.held_policies.contains("broken"));
        assert!(desired.bindings.contains_key("ad-kubernetes-team-1"));
    }

    #[test]
    fn policies_are_compiled_again_only_when_the_cache_holds_other_objects() {
        let compiled = CompiledPolicies::default();
        let first = Arc::new(DeserializeGuard(Ok(policy("first", 1))));
        let second = Arc::new(DeserializeGuard(Ok(policy("second", 2))));
        let once = compiled.of(vec![first.clone(), second.clone()]);
        assert_eq!(once.valid.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["first", "second"]);
        assert!(Arc::ptr_eq(&once, &compiled.of(vec![second.clone(), first.clone()])), "in any order");

        let changed = Arc::new(DeserializeGuard(Ok(policy("second", 3))));
        let again = compiled.of(vec![first.clone(), changed]);
        assert!(!Arc::ptr_eq(&once, &again), "a changed object is another Arc");
        assert!(!Arc::ptr_eq(&again, &compiled.of(vec![first.clone()])), "one gone");
        assert!(compiled.of(Vec::new()).valid.is_empty());
    }
}
