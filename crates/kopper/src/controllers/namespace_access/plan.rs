//! `kopper plan` for NamespaceAccess: per policy, the RoleBinding writes the controller would
//! make in every namespace and the bindings it would report instead, from the same decisions
//! ([`desired_bindings`], [`diff::plan`]) the controller makes, without writing anything.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;

use super::desired::{Policies, Problem, desired_bindings};
use super::diff::{self, Action, managing_policy};
use super::template::NamespaceFacts;
use super::types::NamespaceAccess;
use crate::tenancy::ProtectedNamespaces;

/// What one policy would change, or why it is refused as a whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyPlan {
    pub policy: String,
    /// Why the policy's spec cannot be used (its bindings are then left as they are).
    pub refused: Option<String>,
    /// Writes, each with the namespace it happens in.
    pub actions: Vec<(String, Action)>,
    /// Bindings the policy asks for but would not get.
    pub problems: Vec<Problem>,
}

/// Plans every policy against every namespace and the RoleBindings they hold. Policies that
/// are gone but still have managed bindings appear too: those bindings would be deleted.
pub fn plan_policies(
    policies: &[NamespaceAccess],
    namespaces: &[Namespace],
    bindings: &[RoleBinding],
    protected: &ProtectedNamespaces,
) -> Vec<PolicyPlan> {
    let compiled = Policies::compile(policies);
    let mut plans: BTreeMap<String, PolicyPlan> = policies
        .iter()
        .map(|policy| {
            let name = policy.name_any();
            (name.clone(), PolicyPlan { policy: name, ..PolicyPlan::default() })
        })
        .collect();
    for (name, errors) in &compiled.invalid {
        let reasons: Vec<String> = errors.iter().map(ToString::to_string).collect();
        plan_of(&mut plans, name).refused = Some(reasons.join("; "));
    }
    let mut by_namespace: BTreeMap<String, Vec<RoleBinding>> = BTreeMap::new();
    for binding in bindings {
        by_namespace.entry(binding.namespace().unwrap_or_default()).or_default().push(binding.clone());
    }
    for namespace in namespaces.iter().filter(|namespace| namespace.metadata.deletion_timestamp.is_none()) {
        let name = namespace.name_any();
        let facts =
            NamespaceFacts { name: &name, labels: namespace.labels(), protected: protected.contains(&name) };
        let existing = by_namespace.get(&name).map(Vec::as_slice).unwrap_or_default();
        let desired = desired_bindings(facts, &compiled);
        let plan = diff::plan(&name, &desired, existing);
        for problem in desired.problems.into_iter().chain(plan.conflicts) {
            plan_of(&mut plans, &problem.policy.clone()).problems.push(problem);
        }
        for action in plan.actions {
            let policy = action.policy().or_else(|| owner_of_deleted(&action, existing)).unwrap_or_default();
            plan_of(&mut plans, &policy).actions.push((name.clone(), action));
        }
    }
    plans.into_values().collect()
}

fn plan_of<'a>(plans: &'a mut BTreeMap<String, PolicyPlan>, policy: &str) -> &'a mut PolicyPlan {
    plans
        .entry(policy.to_owned())
        .or_insert_with(|| PolicyPlan { policy: policy.to_owned(), ..PolicyPlan::default() })
}

/// The policy a binding about to be deleted was made for, from its label.
fn owner_of_deleted(action: &Action, existing: &[RoleBinding]) -> Option<String> {
    let Action::Delete { name, .. } = action else { return None };
    let binding = existing.iter().find(|binding| binding.name_any() == *name)?;
    managing_policy(binding).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::namespace_access::desired::ProblemKind;
    use crate::controllers::namespace_access::testing::{namespace, policy, policy_yaml};

    #[test]
    fn each_selected_namespace_gets_a_create_under_its_policy() {
        let policies = [policy("seed", 1)];
        let namespaces = [namespace("team-1", &[]), namespace("team-2", &[]), namespace("kube-system", &[])];
        let plans = plan_policies(&policies, &namespaces, &[], &ProtectedNamespaces::default());
        assert_eq!(plans.len(), 1);
        let created: Vec<(&str, &str)> =
            plans[0].actions.iter().map(|(namespace, action)| (namespace.as_str(), action.verb())).collect();
        assert_eq!(created, [("team-1", "create"), ("team-2", "create")]);
        assert_eq!(plans[0].refused, None);
    }

    const BROKEN_SPEC: &str = r#"
bindings:
- name: "x-{bogus}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: g}]
"#;

    #[test]
    fn a_foreign_binding_is_a_problem_and_an_invalid_policy_is_refused() {
        let policies = [policy("seed", 1), policy_yaml("broken", BROKEN_SPEC)];
        let mut foreign = RoleBinding::default();
        foreign.metadata.name = Some("ad-kubernetes-team-1".into());
        foreign.metadata.namespace = Some("team-1".into());
        let plans = plan_policies(
            &policies,
            &[namespace("team-1", &[])],
            &[foreign],
            &ProtectedNamespaces::default(),
        );
        let broken = plans.iter().find(|plan| plan.policy == "broken").unwrap();
        assert!(broken.refused.is_some(), "{broken:?}");
        let seed = plans.iter().find(|plan| plan.policy == "seed").unwrap();
        assert_eq!(seed.problems.len(), 1, "{seed:?}");
        assert_eq!(seed.problems[0].kind, ProblemKind::NotManagedByKopper);
        assert!(seed.actions.is_empty());
    }
}
