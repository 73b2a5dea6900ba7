//! A policy's status, derived from the caches alone, and the Events its changes deserve.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::desired::ProblemKind;
use super::desired::{Policies, Problem, desired_bindings};
use super::policy::FieldError;
use super::seen::{BindingState, Bindings};
use super::template::NamespaceFacts;
use super::types::{BindingConflict, NamespaceAccessStatus};
use crate::runtime::namespaces::NamespaceMeta;

/// Conflicts listed in status; the count covers the rest.
pub const MAX_LISTED_CONFLICTS: usize = 20;
const READY: &str = "Ready";

/// Everything kopper knows about the cluster, as the caches hold it.
pub struct Observed<'a> {
    pub policies: &'a Policies,
    pub namespaces: &'a [Arc<NamespaceMeta>],
    /// kopper's RoleBindings, keyed by (namespace, name).
    pub bindings: &'a Bindings,
    /// What the binding controller found in its last pass of each namespace: bindings the
    /// API server refused, and bindings someone else made under a name a policy wants.
    pub found: &'a [Problem],
    pub protected: &'a crate::tenancy::ProtectedNamespaces,
}

/// How far one policy is from what it asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub matched_namespaces: usize,
    pub desired: usize,
    pub ready: usize,
    pub conflicts: Vec<Problem>,
    pub invalid: Vec<Problem>,
    pub refused: Vec<Problem>,
}

/// Either the policy's spec is broken, or how far it got.
pub type Outcome = Result<Report, Vec<FieldError>>;

/// One policy's outcome.
pub fn report_for(policy: &str, observed: &Observed<'_>) -> Outcome {
    reports(observed).remove(policy).unwrap_or_else(|| Ok(Report::default()))
}

/// Every policy's outcome, from one pass over the namespaces: each namespace's wanted
/// bindings are rendered once for all the policies that select it. Policies with no entry
/// select nothing and ask for nothing.
pub fn reports(observed: &Observed<'_>) -> BTreeMap<String, Outcome> {
    let mut reports: BTreeMap<String, Outcome> =
        observed.policies.invalid.iter().map(|(name, errors)| (name.clone(), Err(errors.clone()))).collect();
    for compiled in &observed.policies.valid {
        reports.entry(compiled.name.clone()).or_insert_with(|| Ok(Report::default()));
    }
    // (policy, namespace) of each namespace a policy selects.
    let mut matched: BTreeSet<(&str, &str)> = BTreeSet::new();
    for namespace in observed.namespaces.iter().filter(|ns| ns.metadata.deletion_timestamp.is_none()) {
        let name = namespace.metadata.name.as_deref().unwrap_or_default();
        let facts =
            NamespaceFacts { name, labels: namespace.labels(), protected: observed.protected.contains(name) };
        let selecting: Vec<&str> = observed
            .policies
            .valid
            .iter()
            .filter(|compiled| compiled.selects(facts))
            .map(|compiled| compiled.name.as_str())
            .collect();
        if selecting.is_empty() {
            continue;
        }
        let desired = desired_bindings(facts, observed.policies);
        for policy in selecting {
            let Some(Ok(report)) = reports.get_mut(policy) else { continue };
            report.matched_namespaces += 1;
            matched.insert((policy, name));
            for problem in desired.problems.iter().filter(|problem| problem.policy == policy) {
                if problem.kind.is_conflict() {
                    report.conflicts.push(problem.clone());
                } else {
                    report.invalid.push(problem.clone());
                }
            }
            for wanted in desired.bindings.values().filter(|wanted| wanted.policy == policy) {
                report.desired += 1;
                let existing = observed.bindings.get(name, &wanted.binding.name);
                if existing.is_some_and(|seen| seen.state_for(wanted) == BindingState::UpToDate) {
                    report.ready += 1;
                }
            }
        }
    }
    // What was found in namespaces the policy no longer selects is history.
    for problem in observed.found {
        if !matched.contains(&(problem.policy.as_str(), problem.namespace.as_str())) {
            continue;
        }
        let Some(Ok(report)) = reports.get_mut(&problem.policy) else { continue };
        match problem.kind {
            ProblemKind::Refused => report.refused.push(problem.clone()),
            _ => report.conflicts.push(problem.clone()),
        }
    }
    for report in reports.values_mut().filter_map(|outcome| outcome.as_mut().ok()) {
        report.conflicts.sort();
        report.invalid.sort();
    }
    reports
}

/// The status to write. Keeps `lastTransitionTime` while `Ready` keeps its value, so an
/// unchanged situation yields an identical status and no write.
pub fn next_status(
    previous: Option<&NamespaceAccessStatus>,
    generation: Option<i64>,
    outcome: &Outcome,
    now: Timestamp,
) -> NamespaceAccessStatus {
    let (status, reason, message) = ready_condition(outcome);
    let last_transition_time = previous
        .and_then(|previous| previous.conditions.iter().find(|c| c.type_ == READY))
        .filter(|condition| condition.status == status)
        .map(|condition| condition.last_transition_time.clone())
        .unwrap_or(Time(now));
    let condition = Condition {
        type_: READY.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time,
    };
    let report = outcome.as_ref().ok();
    let conflicts = report.map(|report| report.conflicts.as_slice()).unwrap_or_default();
    NamespaceAccessStatus {
        observed_generation: generation,
        matched_namespaces: saturating_i32(report.map_or(0, |r| r.matched_namespaces)),
        bindings_desired: saturating_i32(report.map_or(0, |r| r.desired)),
        bindings_ready: saturating_i32(report.map_or(0, |r| r.ready)),
        conflicts: conflicts.iter().take(MAX_LISTED_CONFLICTS).map(to_conflict).collect(),
        conflict_count: saturating_i32(conflicts.len()),
        conditions: vec![condition],
    }
}

fn ready_condition(outcome: &Outcome) -> (&'static str, &'static str, String) {
    let report = match outcome {
        Err(errors) => {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return ("False", "InvalidSpec", format!("the policy is not applied: {}", list.join("; ")));
        }
        Ok(report) => report,
    };
    let progress = format!(
        "{} of {} bindings ready in {} namespaces",
        report.ready, report.desired, report.matched_namespaces
    );
    if let Some(message) = summarize("bindings cannot be rendered", &report.invalid) {
        ("False", "InvalidBinding", message)
    } else if let Some(message) = summarize("bindings were refused by the API server", &report.refused) {
        ("False", "Refused", message)
    } else if let Some(message) = summarize("bindings are held by someone else", &report.conflicts) {
        ("False", "Conflict", message)
    } else if report.ready < report.desired {
        ("False", "Progressing", progress)
    } else {
        ("True", "BindingsReady", progress)
    }
}

fn summarize(what: &str, problems: &[Problem]) -> Option<String> {
    let first = problems.first()?;
    let location = if first.name.is_empty() {
        format!("namespace {}", first.namespace)
    } else {
        format!("{}/{}", first.namespace, first.name)
    };
    Some(format!("{} {what}; first: {location}: {}", problems.len(), first.message))
}

fn to_conflict(problem: &Problem) -> BindingConflict {
    BindingConflict {
        namespace: problem.namespace.clone(),
        name: problem.name.clone(),
        reason: problem.kind.as_str().into(),
        message: problem.message.clone(),
    }
}

fn saturating_i32(count: usize) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// An Event to publish on the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// Events for what changed between two statuses: a failure reason appearing, new
/// conflicts, or the policy becoming ready. Nothing when nothing changed.
pub fn notices(previous: Option<&NamespaceAccessStatus>, next: &NamespaceAccessStatus) -> Vec<Notice> {
    let mut notices = Vec::new();
    let ready = |status: Option<&NamespaceAccessStatus>| {
        status.and_then(|status| status.conditions.iter().find(|c| c.type_ == READY)).cloned()
    };
    let (before, after) = (ready(previous), ready(Some(next)));
    if let Some(after) = &after {
        let changed = before.as_ref().is_none_or(|before| before.reason != after.reason);
        let failure = matches!(after.reason.as_str(), "InvalidSpec" | "InvalidBinding" | "Refused");
        if changed && failure {
            notices.push(Notice { warning: true, reason: after.reason.clone(), note: after.message.clone() });
        }
        let was_ready = before.as_ref().is_some_and(|before| before.status == "True");
        if after.status == "True" && !was_ready {
            notices.push(Notice {
                warning: false,
                reason: "BindingsReady".into(),
                note: "every binding this policy asks for is in place".into(),
            });
        }
    }
    let known: BTreeSet<(&str, &str)> = previous
        .map(|previous| previous.conflicts.iter().map(|c| (c.namespace.as_str(), c.name.as_str())).collect())
        .unwrap_or_default();
    let fresh: Vec<&BindingConflict> =
        next.conflicts.iter().filter(|c| !known.contains(&(c.namespace.as_str(), c.name.as_str()))).collect();
    if let Some(first) = fresh.first() {
        notices.push(Notice {
            warning: true,
            reason: "BindingConflict".into(),
            note: format!(
                "{} new conflicts; first: {}/{} ({}): {}",
                fresh.len(),
                first.namespace,
                first.name,
                first.reason,
                first.message
            ),
        });
    }
    notices
}

#[cfg(test)]
mod tests {
    use kube::core::PartialObjectMetaExt;

    use super::*;
    use crate::controllers::namespace_access::seen::SeenBinding;
    use crate::controllers::namespace_access::testing::{broken_policy, namespace, policy, policy_yaml};

    struct World {
        policies: Policies,
        namespaces: Vec<Arc<NamespaceMeta>>,
        bindings: Bindings,
        found: Vec<Problem>,
        protected: crate::tenancy::ProtectedNamespaces,
    }

    impl World {
        fn new(
            policies: &[&crate::controllers::namespace_access::NamespaceAccess],
            namespaces: &[&str],
        ) -> Self {
            Self {
                policies: Policies::compile(policies.iter().copied()),
                namespaces: namespaces
                    .iter()
                    .map(|name| Arc::new(namespace(name, &[]).metadata.into_response_partial()))
                    .collect(),
                bindings: Bindings::new(),
                found: Vec::new(),
                protected: crate::tenancy::ProtectedNamespaces::default(),
            }
        }

        /// Puts in place what kopper would apply for every namespace.
        fn converge(&mut self) {
            for namespace in &self.namespaces {
                let name = namespace.name_any();
                let facts = NamespaceFacts { name: &name, labels: namespace.labels(), protected: false };
                for (binding, wanted) in desired_bindings(facts, &self.policies).bindings {
                    let seen = SeenBinding::of(&wanted.to_role_binding(&name)).unwrap();
                    self.bindings.insert(&name, &binding, seen);
                }
            }
        }

        fn observed(&self) -> Observed<'_> {
            Observed {
                policies: &self.policies,
                namespaces: &self.namespaces,
                bindings: &self.bindings,
                found: &self.found,
                protected: &self.protected,
            }
        }

        fn report(&self, policy: &str) -> Outcome {
            report_for(policy, &self.observed())
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000).unwrap()
    }

    fn ready_reason(status: &NamespaceAccessStatus) -> (&str, &str) {
        (status.conditions[0].status.as_str(), status.conditions[0].reason.as_str())
    }

    #[test]
    fn converged_policy_is_ready_with_counts() {
        let mut world = World::new(&[&policy("seed", 1)], &["a", "b", "kube-system"]);
        world.converge();
        let status = next_status(None, Some(3), &world.report("seed"), now());
        assert_eq!((status.matched_namespaces, status.bindings_desired, status.bindings_ready), (2, 2, 2));
        assert_eq!(ready_reason(&status), ("True", "BindingsReady"));
        assert_eq!(status.conditions[0].observed_generation, Some(3));
        assert_eq!(status.observed_generation, Some(3));
    }

    #[test]
    fn missing_bindings_are_progressing() {
        let world = World::new(&[&policy("seed", 1)], &["a"]);
        let status = next_status(None, Some(1), &world.report("seed"), now());
        assert_eq!(ready_reason(&status), ("False", "Progressing"));
        assert_eq!(status.conditions[0].message, "0 of 1 bindings ready in 1 namespaces");
    }

    #[test]
    fn foreign_binding_is_listed_as_a_conflict() {
        let mut world = World::new(&[&policy("seed", 1)], &["a", "b"]);
        world.converge();
        // As the binding controller finds a binding kopper did not make under a wanted name.
        world.bindings.remove("a", "ad-kubernetes-a");
        let facts = NamespaceFacts { name: "a", labels: &Default::default(), protected: false };
        let wanted = &desired_bindings(facts, &world.policies).bindings["ad-kubernetes-a"];
        world.found.push(crate::controllers::namespace_access::diff::foreign_conflict("a", wanted));
        let status = next_status(None, Some(1), &world.report("seed"), now());
        assert_eq!(ready_reason(&status), ("False", "Conflict"));
        assert_eq!(status.conflict_count, 1);
        assert_eq!(status.conflicts[0].namespace, "a");
        assert_eq!(status.conflicts[0].name, "ad-kubernetes-a");
        assert_eq!(status.conflicts[0].reason, "NotManagedByKopper");
        assert_eq!(status.bindings_ready, 1);
    }

    #[test]
    fn losing_policy_reports_the_winner() {
        let mut world = World::new(&[&policy("first", 1), &policy("second", 2)], &["a"]);
        world.converge();
        let status = next_status(None, Some(1), &world.report("second"), now());
        assert_eq!(status.conflicts[0].reason, "ClaimedByOtherPolicy");
        assert!(status.conflicts[0].message.contains("first"));
        let winner = next_status(None, Some(1), &world.report("first"), now());
        assert_eq!(ready_reason(&winner), ("True", "BindingsReady"));
    }

    #[test]
    fn one_pass_reports_each_policy_with_its_own_counts_and_conflicts() {
        let broken = broken_policy();
        let mut world = World::new(&[&policy("first", 1), &policy("second", 2), &broken], &["a", "b"]);
        world.converge();
        world.bindings.remove("b", "ad-kubernetes-b");
        let observed = world.observed();
        let all = reports(&observed);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["broken", "first", "second"]);
        assert!(all["broken"].is_err());
        let first = all["first"].as_ref().unwrap();
        assert_eq!((first.matched_namespaces, first.desired, first.ready), (2, 2, 1));
        let second = all["second"].as_ref().unwrap();
        assert_eq!((second.matched_namespaces, second.desired, second.conflicts.len()), (2, 0, 2));
        assert!(second.conflicts.iter().all(|conflict| conflict.kind == ProblemKind::ClaimedByOtherPolicy));
        assert_eq!(report_for("nobody", &observed), Ok(Report::default()), "a policy kopper does not know");
    }

    #[test]
    fn conflict_list_is_bounded_but_counted() {
        let names: Vec<String> = (0..30).map(|i| format!("ns-{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let world = World::new(&[&policy("first", 1), &policy("second", 2)], &refs);
        let status = next_status(None, Some(1), &world.report("second"), now());
        assert_eq!(status.conflicts.len(), MAX_LISTED_CONFLICTS);
        assert_eq!(status.conflict_count, 30);
    }

    #[test]
    fn invalid_spec_names_the_field() {
        let broken = broken_policy();
        let world = World::new(&[&broken], &["a"]);
        let status = next_status(None, Some(2), &world.report("broken"), now());
        assert_eq!(ready_reason(&status), ("False", "InvalidSpec"));
        assert!(status.conditions[0].message.contains("spec.bindings[0].name"), "{:?}", status.conditions);
    }

    #[test]
    fn unrenderable_binding_is_reported_with_field_and_namespace() {
        let teams = policy_yaml(
            "teams",
            r#"
bindings:
- name: "team-{labels.team}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: g}]
"#,
        );
        let world = World::new(&[&teams], &["a"]);
        let status = next_status(None, Some(1), &world.report("teams"), now());
        assert_eq!(ready_reason(&status), ("False", "InvalidBinding"));
        let message = &status.conditions[0].message;
        assert!(message.contains(r#"spec.bindings[0].name: namespace "a" has no label "team""#), "{message}");
    }

    #[test]
    fn refused_binding_is_reported() {
        let mut world = World::new(&[&policy("seed", 1)], &["a"]);
        world.found.push(Problem {
            policy: "seed".into(),
            namespace: "a".into(),
            name: "ad-kubernetes-a".into(),
            kind: ProblemKind::Refused,
            message: "forbidden: attempt to grant extra privileges".into(),
        });
        let status = next_status(None, Some(1), &world.report("seed"), now());
        assert_eq!(ready_reason(&status), ("False", "Refused"));
        assert!(status.conditions[0].message.contains("forbidden"));
    }

    #[test]
    fn unchanged_situation_yields_an_identical_status() {
        let mut world = World::new(&[&policy("seed", 1)], &["a"]);
        world.converge();
        let first = next_status(None, Some(1), &world.report("seed"), now());
        let later = Timestamp::from_second(5_000).unwrap();
        let second = next_status(Some(&first), Some(1), &world.report("seed"), later);
        assert_eq!(first, second);
        assert!(notices(Some(&first), &second).is_empty());
    }

    #[test]
    fn transition_time_moves_only_when_ready_flips() {
        let mut world = World::new(&[&policy("seed", 1)], &["a"]);
        let progressing = next_status(None, Some(1), &world.report("seed"), now());
        world.converge();
        let later = Timestamp::from_second(5_000).unwrap();
        let ready = next_status(Some(&progressing), Some(1), &world.report("seed"), later);
        assert_eq!(ready.conditions[0].last_transition_time, Time(later));
    }

    #[test]
    fn becoming_ready_is_announced_once() {
        let mut world = World::new(&[&policy("seed", 1)], &["a"]);
        let progressing = next_status(None, Some(1), &world.report("seed"), now());
        assert!(notices(None, &progressing).is_empty());
        world.converge();
        let ready = next_status(Some(&progressing), Some(1), &world.report("seed"), now());
        let events = notices(Some(&progressing), &ready);
        assert_eq!(events.len(), 1);
        assert!(!events[0].warning);
        assert_eq!(events[0].reason, "BindingsReady");
    }

    #[test]
    fn new_conflict_raises_one_warning() {
        let world = World::new(&[&policy("first", 1), &policy("second", 2)], &["a"]);
        let status = next_status(None, Some(1), &world.report("second"), now());
        let events = notices(None, &status);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning);
        assert_eq!(events[0].reason, "BindingConflict");
        assert!(notices(Some(&status), &status).is_empty());
    }
}
