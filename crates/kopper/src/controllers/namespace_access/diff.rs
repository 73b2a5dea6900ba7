//! What to change in one namespace to turn the bindings it has into the ones it should have.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;

use super::desired::{
    Desired, DesiredBinding, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICY_LABEL, Problem, ProblemKind,
};
use super::seen::{BindingState, SeenBinding};

/// One write against the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Create(DesiredBinding),
    /// Server-side apply brings subjects, labels and owner back to what the policy says.
    Update(DesiredBinding),
    /// `roleRef` cannot be changed in place: delete the binding kopper saw (by uid, so a
    /// binding someone recreated meanwhile is not touched), then create it anew.
    Replace {
        desired: DesiredBinding,
        uid: Option<String>,
    },
    /// No policy wants this managed binding any more.
    Delete {
        name: String,
        uid: Option<String>,
    },
}

impl Action {
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Create(_) => "create",
            Self::Update(_) => "apply",
            Self::Replace { .. } => "replace",
            Self::Delete { .. } => "delete",
        }
    }

    /// The policy the binding is written for; deletions serve no policy.
    pub fn policy(&self) -> Option<String> {
        match self {
            Self::Create(desired) | Self::Update(desired) | Self::Replace { desired, .. } => {
                Some(desired.policy.clone())
            }
            Self::Delete { .. } => None,
        }
    }

    pub fn binding_name(&self) -> &str {
        match self {
            Self::Create(desired) | Self::Update(desired) | Self::Replace { desired, .. } => {
                &desired.binding.name
            }
            Self::Delete { name, .. } => name,
        }
    }
}

/// The writes for one namespace, plus the bindings kopper must leave alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub conflicts: Vec<Problem>,
}

/// The policy a binding belongs to, if kopper manages it.
pub fn managing_policy(binding: &RoleBinding) -> Option<&str> {
    let labels = binding.labels();
    let managed = labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY_VALUE);
    labels.get(POLICY_LABEL).filter(|_| managed).map(String::as_str)
}

pub fn state_of(existing: Option<&RoleBinding>, desired: &DesiredBinding) -> BindingState {
    match existing.map(SeenBinding::of) {
        None => BindingState::Missing,
        Some(None) => BindingState::Foreign,
        Some(Some(seen)) => seen.state_for(desired),
    }
}

/// Compares the bindings a namespace has with those it should have.
pub fn plan(namespace: &str, desired: &Desired, existing: &[RoleBinding]) -> Plan {
    let by_name: BTreeMap<String, &RoleBinding> =
        existing.iter().map(|binding| (binding.name_any(), binding)).collect();
    let mut plan = Plan::default();
    for (name, wanted) in &desired.bindings {
        let current = by_name.get(name).copied();
        match state_of(current, wanted) {
            BindingState::Missing => plan.actions.push(Action::Create(wanted.clone())),
            BindingState::Stale => plan.actions.push(Action::Update(wanted.clone())),
            BindingState::WrongRole => plan
                .actions
                .push(Action::Replace { desired: wanted.clone(), uid: current.and_then(|b| b.uid()) }),
            BindingState::Foreign => plan.conflicts.push(foreign_conflict(namespace, wanted)),
            BindingState::Terminating | BindingState::UpToDate => {}
        }
    }
    for binding in existing {
        let name = binding.name_any();
        let Some(policy) = managing_policy(binding) else { continue };
        let unwanted = !desired.bindings.contains_key(&name) && !desired.held_policies.contains(policy);
        if unwanted && binding.metadata.deletion_timestamp.is_none() {
            plan.actions.push(Action::Delete { name, uid: binding.uid() });
        }
    }
    plan
}

/// The problem reported when a binding kopper did not make holds a name a policy wants.
pub fn foreign_conflict(namespace: &str, wanted: &DesiredBinding) -> Problem {
    Problem {
        policy: wanted.policy.clone(),
        namespace: namespace.to_owned(),
        name: wanted.binding.name.clone(),
        kind: ProblemKind::NotManagedByKopper,
        message: format!(
            "RoleBinding {namespace}/{} exists and was not created by kopper (no label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE})",
            wanted.binding.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::controllers::namespace_access::desired::{Policies, desired_bindings};
    use crate::controllers::namespace_access::template::NamespaceFacts;
    use crate::controllers::namespace_access::testing::policy;

    fn seed_desired(namespace: &str) -> Desired {
        let policies = Policies::compile([&policy("seed", 1)]);
        let labels = BTreeMap::new();
        desired_bindings(NamespaceFacts { name: namespace, labels: &labels, protected: false }, &policies)
    }

    /// What the API server returns after kopper applied the seed binding.
    fn applied(namespace: &str) -> RoleBinding {
        let mut binding =
            seed_desired(namespace).bindings.into_values().next().unwrap().to_role_binding(namespace);
        binding.metadata.uid = Some("rb-uid".into());
        binding
    }

    #[test]
    fn missing_binding_is_created() {
        let plan = plan("team-1", &seed_desired("team-1"), &[]);
        assert!(matches!(&plan.actions[..], [Action::Create(d)] if d.binding.name == "ad-kubernetes-team-1"));
    }

    #[test]
    fn up_to_date_binding_needs_no_write() {
        let plan = plan("team-1", &seed_desired("team-1"), &[applied("team-1")]);
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn server_defaulted_api_group_still_counts_as_up_to_date() {
        let mut binding = applied("team-1");
        binding.subjects.as_mut().unwrap()[0].api_group = None;
        assert_eq!(plan("team-1", &seed_desired("team-1"), &[binding]), Plan::default());
    }

    #[test]
    fn edited_subjects_are_restored() {
        let mut binding = applied("team-1");
        binding.subjects.as_mut().unwrap()[0].name = "intruders".into();
        let plan = plan("team-1", &seed_desired("team-1"), &[binding]);
        assert!(matches!(&plan.actions[..], [Action::Update(_)]));
    }

    #[test]
    fn removed_owner_reference_is_restored() {
        let mut binding = applied("team-1");
        binding.metadata.owner_references = None;
        let plan = plan("team-1", &seed_desired("team-1"), &[binding]);
        assert!(matches!(&plan.actions[..], [Action::Update(_)]));
    }

    #[test]
    fn changed_role_replaces_the_exact_binding_seen() {
        let mut binding = applied("team-1");
        binding.role_ref.name = "view".into();
        let plan = plan("team-1", &seed_desired("team-1"), &[binding]);
        assert!(matches!(&plan.actions[..], [Action::Replace { uid: Some(uid), .. }] if uid == "rb-uid"));
    }

    #[test]
    fn binding_made_by_someone_else_is_left_alone_and_reported() {
        let mut binding = applied("team-1");
        binding.metadata.labels = None;
        binding.role_ref.name = "admin".into();
        let plan = plan("team-1", &seed_desired("team-1"), &[binding]);
        assert!(plan.actions.is_empty());
        assert_eq!(plan.conflicts.len(), 1);
        assert_eq!(plan.conflicts[0].kind, ProblemKind::NotManagedByKopper);
        assert_eq!(plan.conflicts[0].policy, "seed");
        assert_eq!(plan.conflicts[0].name, "ad-kubernetes-team-1");
    }

    #[test]
    fn binding_no_longer_wanted_is_deleted() {
        let plan = plan("team-1", &Desired::default(), &[applied("team-1")]);
        assert_eq!(
            plan.actions,
            [Action::Delete { name: "ad-kubernetes-team-1".into(), uid: Some("rb-uid".into()) }]
        );
    }

    #[test]
    fn unmanaged_binding_is_never_deleted() {
        let mut binding = applied("team-1");
        binding.metadata.labels = Some([(MANAGED_BY_LABEL.to_owned(), "helm".to_owned())].into());
        assert!(plan("team-1", &Desired::default(), &[binding]).actions.is_empty());
    }

    #[test]
    fn bindings_of_an_invalid_policy_are_kept() {
        let mut desired = Desired::default();
        desired.held_policies.insert("seed".into());
        assert!(plan("team-1", &desired, &[applied("team-1")]).actions.is_empty());
    }

    #[test]
    fn binding_of_another_policy_is_taken_over_by_the_winner() {
        let mut binding = applied("team-1");
        binding.labels_mut().insert(POLICY_LABEL.into(), "other".into());
        let plan = plan("team-1", &seed_desired("team-1"), &[binding]);
        assert!(matches!(&plan.actions[..], [Action::Update(d)] if d.policy == "seed"));
    }

    #[test]
    fn terminating_binding_waits_for_its_deletion() {
        let mut binding = applied("team-1");
        binding.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(plan("team-1", &seed_desired("team-1"), &[binding.clone()]).actions.is_empty());
        assert!(plan("team-1", &Desired::default(), &[binding]).actions.is_empty());
    }
}
