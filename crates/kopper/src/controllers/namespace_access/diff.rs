//! What to change in one namespace to turn the bindings it has into the ones it should have.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;

use super::desired::{
    Desired, DesiredBinding, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICY_LABEL, Problem, ProblemKind,
};
use super::seen::{BindingState, Bindings, NameDigest, SeenBinding};

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

/// The bindings to create in `namespace`, judged from kopper's index of its own bindings
/// alone, without reading the namespace: `Some` (possibly empty) when every binding a policy
/// wants is either up to date there or absent from it, and it holds none that no policy
/// wants. `None` when a binding must be updated, replaced or deleted: those writes need what
/// only a fresh read gives (the uid to delete exactly the binding seen), so [`plan`] decides.
///
/// An absent binding may still exist: made by someone else under that name (the index holds
/// only kopper's), or by kopper a moment ago (its watch event not yet in). Its create then
/// fails with 409, never overwriting anything, and the caller falls back to [`plan`].
pub fn creates_from_index(
    namespace: &str,
    desired: &Desired,
    index: &Bindings,
) -> Option<Vec<DesiredBinding>> {
    let mut creates = Vec::new();
    for (name, wanted) in &desired.bindings {
        match index.get(namespace, name).map(|seen| seen.state_for(wanted)) {
            None => creates.push(wanted.clone()),
            Some(BindingState::UpToDate | BindingState::Terminating) => {}
            Some(_) => return None,
        }
    }
    let wanted: Vec<NameDigest> = desired.bindings.keys().map(|name| NameDigest::of(name)).collect();
    let unwanted = index.in_namespace(namespace).any(|(name, seen)| {
        !wanted.contains(&name)
            && !desired.held_policies.iter().any(|held| seen.serves(held))
            && !seen.is_terminating()
    });
    (!unwanted).then_some(creates)
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

    fn index_of(bindings: &[RoleBinding]) -> Bindings {
        let mut index = Bindings::new();
        for binding in bindings {
            let seen = SeenBinding::of(binding).unwrap();
            index.insert(binding.metadata.namespace.as_deref().unwrap(), &binding.name_any(), seen);
        }
        index
    }

    #[test]
    fn the_index_alone_decides_creates_and_a_namespace_in_sync_needs_no_read() {
        let desired = seed_desired("team-1");
        let creates = creates_from_index("team-1", &desired, &Bindings::new()).unwrap();
        assert_eq!(
            creates.iter().map(|d| d.binding.name.as_str()).collect::<Vec<_>>(),
            ["ad-kubernetes-team-1"]
        );
        let index = index_of(&[applied("team-1")]);
        assert_eq!(creates_from_index("team-1", &desired, &index), Some(Vec::new()));
        assert_eq!(
            creates_from_index("team-2", &seed_desired("team-2"), &index).map(|c| c.len()),
            Some(1),
            "another namespace's binding is not this one's"
        );
    }

    #[test]
    fn updates_replacements_and_deletions_are_left_to_a_fresh_read() {
        let desired = seed_desired("team-1");
        let mut edited = applied("team-1");
        edited.subjects.as_mut().unwrap()[0].name = "intruders".into();
        assert_eq!(creates_from_index("team-1", &desired, &index_of(&[edited])), None);
        let mut other_role = applied("team-1");
        other_role.role_ref.name = "view".into();
        assert_eq!(creates_from_index("team-1", &desired, &index_of(&[other_role])), None);
        let index = index_of(&[applied("team-1")]);
        assert_eq!(creates_from_index("team-1", &Desired::default(), &index), None, "no longer wanted");
        let mut held = Desired::default();
        held.held_policies.insert("seed".into());
        assert_eq!(
            creates_from_index("team-1", &held, &index),
            Some(Vec::new()),
            "an invalid policy's are kept"
        );
    }

    #[test]
    fn terminating_binding_waits_for_its_deletion() {
        let mut binding = applied("team-1");
        binding.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(plan("team-1", &seed_desired("team-1"), &[binding.clone()]).actions.is_empty());
        assert!(plan("team-1", &Desired::default(), &[binding]).actions.is_empty());
    }
}
