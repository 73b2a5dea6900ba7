//! Builders for unit tests: policies from short YAML specs, namespaces and bindings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::types::{NamespaceAccess, NamespaceAccessSpec};

/// The seed's behaviour: every namespace gets `ad-kubernetes-<ns>` for Group
/// `ad-kubernetes-<ns>` on ClusterRole `edit`.
pub const SEED_SPEC: &str = r#"
bindings:
- name: "ad-kubernetes-{namespace}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: "ad-kubernetes-{namespace}"}]
"#;

pub fn at(seconds: i64) -> Option<Time> {
    Some(Time(Timestamp::from_second(seconds).unwrap()))
}

/// The seed policy, created `created` seconds after the epoch.
pub fn policy(name: &str, created: i64) -> NamespaceAccess {
    let mut policy = policy_yaml(name, SEED_SPEC);
    policy.metadata.creation_timestamp = at(created);
    policy
}

/// A policy named "broken" whose binding name uses a placeholder that does not exist.
pub fn broken_policy() -> NamespaceAccess {
    policy_yaml(
        "broken",
        r#"
bindings:
- name: "x-{nope}"
  roleRef: {kind: ClusterRole, name: edit}
  subjects: [{kind: Group, name: g}]
"#,
    )
}

pub fn policy_yaml(name: &str, spec: &str) -> NamespaceAccess {
    let spec: NamespaceAccessSpec = serde_yaml::from_str(spec).unwrap();
    let mut policy = NamespaceAccess::new(name, spec);
    policy.metadata.uid = Some(format!("uid-{name}"));
    policy.metadata.creation_timestamp = at(1);
    policy.metadata.generation = Some(1);
    policy
}

pub fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let labels: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Namespace {
        metadata: ObjectMeta { name: Some(name.to_owned()), labels: Some(labels), ..ObjectMeta::default() },
        ..Namespace::default()
    }
}
