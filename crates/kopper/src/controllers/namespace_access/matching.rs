//! Which namespaces a policy selects.

use kube::core::{Selector, SelectorExt};

use super::template::NamespaceFacts;
use super::types::NamespaceSelection;
use crate::patterns::glob_matches;

/// Namespaces that hold cluster machinery or shared workloads. Granting a team edit rights
/// there by accident is dangerous, so a policy selects them, and kopper's protected
/// namespaces, only when it names one exactly. `default` is here too: bindings there give
/// power over the workloads every team shares.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "default"];

/// A [`NamespaceSelection`] ready to test namespaces against.
#[derive(Clone, Debug)]
pub struct NamespaceMatcher {
    selector: Option<Selector>,
    include: Vec<String>,
    exclude: Vec<String>,
}

/// The selection cannot be turned into a matcher.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct SelectorError(String);

impl NamespaceMatcher {
    pub fn new(selection: &NamespaceSelection) -> Result<Self, SelectorError> {
        let selector = selection
            .selector
            .clone()
            .map(Selector::try_from)
            .transpose()
            .map_err(|err| SelectorError(err.to_string()))?;
        Ok(Self { selector, include: selection.include.clone(), exclude: selection.exclude.clone() })
    }

    pub fn matches(&self, namespace: NamespaceFacts<'_>) -> bool {
        let name = namespace.name;
        let selected_by_labels =
            self.selector.as_ref().is_none_or(|selector| selector.matches(namespace.labels));
        selected_by_labels
            && self.included(name, namespace.protected)
            && !self.exclude.iter().any(|pattern| glob_matches(pattern, name))
    }

    fn included(&self, name: &str, protected: bool) -> bool {
        if protected || SYSTEM_NAMESPACES.contains(&name) {
            return self.include.iter().any(|pattern| pattern == name);
        }
        self.include.is_empty() || self.include.iter().any(|pattern| glob_matches(pattern, name))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    fn selection(include: &[&str], exclude: &[&str]) -> NamespaceSelection {
        NamespaceSelection {
            selector: None,
            include: include.iter().map(|s| (*s).to_owned()).collect(),
            exclude: exclude.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn matches(selection: &NamespaceSelection, name: &str, labels: &[(&str, &str)]) -> bool {
        let labels: BTreeMap<String, String> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        NamespaceMatcher::new(selection).unwrap().matches(NamespaceFacts {
            name,
            labels: &labels,
            protected: false,
        })
    }

    #[test]
    fn glob_without_wildcards_is_an_exact_match() {
        assert!(glob_matches("team-1", "team-1"));
        assert!(!glob_matches("team-1", "team-10"));
    }

    #[test]
    fn empty_selection_matches_every_ordinary_namespace() {
        assert!(matches(&NamespaceSelection::default(), "team-1", &[]));
    }

    #[test]
    fn system_namespaces_are_skipped_by_default_and_by_wildcards() {
        for system in SYSTEM_NAMESPACES {
            assert!(!matches(&NamespaceSelection::default(), system, &[]), "{system}");
            assert!(!matches(&selection(&["*"], &[]), system, &[]), "{system}");
        }
        assert!(!matches(&selection(&["kube-*"], &[]), "kube-system", &[]));
    }

    #[test]
    fn kopper_protected_namespaces_are_selected_only_when_named_exactly() {
        let no_labels = BTreeMap::new();
        let facts = |name| NamespaceFacts { name, labels: &no_labels, protected: true };
        let matcher = |include: &[&str]| NamespaceMatcher::new(&selection(include, &[])).unwrap();
        assert!(!matcher(&[]).matches(facts("kopper-system")));
        assert!(!matcher(&["kopper-*"]).matches(facts("kopper-system")));
        assert!(matcher(&["kopper-system"]).matches(facts("kopper-system")));
    }

    #[test]
    fn system_namespace_is_selected_when_named_exactly() {
        assert!(matches(&selection(&["kube-system"], &[]), "kube-system", &[]));
        assert!(matches(&selection(&["default"], &[]), "default", &[]));
    }

    #[test]
    fn include_restricts_to_matching_names() {
        let only_teams = selection(&["team-*", "sandbox"], &[]);
        assert!(matches(&only_teams, "team-1", &[]));
        assert!(matches(&only_teams, "sandbox", &[]));
        assert!(!matches(&only_teams, "billing", &[]));
    }

    #[test]
    fn exclude_wins_over_include() {
        let teams_but_not_prod = selection(&["team-*"], &["*-prod"]);
        assert!(matches(&teams_but_not_prod, "team-dev", &[]));
        assert!(!matches(&teams_but_not_prod, "team-prod", &[]));
    }

    #[test]
    fn label_selector_must_match_as_well_as_names() {
        let mut by_label = selection(&["team-*"], &[]);
        by_label.selector = Some(LabelSelector {
            match_labels: Some([("tenant".to_owned(), "yes".to_owned())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "Exists".into(),
                values: None,
            }]),
        });
        assert!(matches(&by_label, "team-1", &[("tenant", "yes"), ("team", "blue")]));
        assert!(!matches(&by_label, "team-1", &[("tenant", "yes")]));
        assert!(!matches(&by_label, "team-1", &[("team", "blue")]));
        assert!(!matches(&by_label, "other", &[("tenant", "yes"), ("team", "blue")]));
    }

    #[test]
    fn invalid_selector_operator_is_an_error() {
        let bad = NamespaceSelection {
            selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "team".into(),
                    operator: "Near".into(),
                    values: None,
                }]),
            }),
            ..NamespaceSelection::default()
        };
        assert!(NamespaceMatcher::new(&bad).is_err());
    }
}
