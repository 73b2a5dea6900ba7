//! What a copy carries of its source, on purpose: which keys of its data, which labels and
//! annotations, labels added, and a Secret's type. Pure and self-contained (it depends on no
//! other file of the engine), so the same shaping can serve any kind: labels and annotations
//! are shaped for every object, keys and the Secret type only for ConfigMaps and Secrets.

use std::collections::{BTreeMap, BTreeSet};

/// A tool whose ownership and tracking marks copies leave out unless the rule keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tool {
    Helm,
    ArgoCd,
    Flux,
    Kapp,
}

/// One mark a tool puts on the objects it manages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Any key that starts with this.
    Prefix(&'static str),
    /// This key, whatever its value.
    Key(&'static str),
    /// This key with this value.
    Pair(&'static str, &'static str),
}

/// The marks left out of copies by default, on labels and annotations alike, and why: each
/// tool would take a copy carrying them for an object it manages, in a namespace it never
/// wrote to. Helm: its release ownership (`meta.helm.sh/release-name`, …) and
/// `app.kubernetes.io/managed-by: Helm` (on a copy kopper's own managed-by label replaces it
/// anyway). Argo CD: its annotations and labels (its default tracking since 3.0 is the
/// `argocd.argoproj.io/tracking-id` annotation), and `app.kubernetes.io/instance`, its
/// tracking label before 3.0 and with label tracking (a copy carrying either is pruned by
/// Argo CD and made again by the replicator, for ever). Flux: the kustomize and helm controllers' ownership labels, by
/// which Flux garbage-collects. kapp: its app and association labels.
const TOOL_MARKS: [(Tool, Mark); 7] = [
    (Tool::Helm, Mark::Prefix("meta.helm.sh/")),
    (Tool::Helm, Mark::Pair("app.kubernetes.io/managed-by", "Helm")),
    (Tool::ArgoCd, Mark::Prefix("argocd.argoproj.io/")),
    (Tool::ArgoCd, Mark::Key("app.kubernetes.io/instance")),
    (Tool::Flux, Mark::Prefix("kustomize.toolkit.fluxcd.io/")),
    (Tool::Flux, Mark::Prefix("helm.toolkit.fluxcd.io/")),
    (Tool::Kapp, Mark::Prefix("kapp.k14s.io/")),
];

/// Labels by which a tool takes an object for a credential of its own, in whatever namespace
/// it lies: Helm lists its release records by `owner: helm` (secret and configmap drivers
/// alike), Argo CD takes a Secret labelled `argocd.argoproj.io/secret-type` for repository or
/// cluster credentials. A tenant's copies never carry them, whatever the rule keeps: a tenant
/// would plant a release or a repository in the namespaces it shares with.
const CREDENTIAL_MARKS: [Mark; 2] =
    [Mark::Pair("owner", "helm"), Mark::Key("argocd.argoproj.io/secret-type")];

/// Whether the label `key: value` is one of [`CREDENTIAL_MARKS`].
pub fn credential_mark(key: &str, value: &str) -> bool {
    CREDENTIAL_MARKS.iter().any(|mark| mark.matches(key, value))
}

impl Mark {
    fn matches(self, key: &str, value: &str) -> bool {
        match self {
            Mark::Prefix(prefix) => key.starts_with(prefix),
            Mark::Key(name) => key == name,
            Mark::Pair(name, mark_value) => key == name && value == mark_value,
        }
    }
}

/// The tool whose mark `key: value` is, if it is one of [`TOOL_MARKS`].
pub fn tool_mark(key: &str, value: &str) -> Option<Tool> {
    TOOL_MARKS.iter().find_map(|(tool, mark)| mark.matches(key, value).then_some(*tool))
}

/// Which labels (or annotations) of a source its copies carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkFilter {
    /// Only keys with one of these prefixes; empty: every key.
    pub include: Vec<String>,
    /// Never keys with one of these prefixes.
    pub exclude: Vec<String>,
    /// Tools whose marks are copied after all.
    pub keep_tools: BTreeSet<Tool>,
    /// Never the [`CREDENTIAL_MARKS`] (a tenant's rule), whatever `keep_tools` says.
    pub drop_credential_marks: bool,
}

impl MarkFilter {
    /// Whether a copy carries the source's `key: value`.
    pub fn copies(&self, key: &str, value: &str) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|prefix| key.starts_with(prefix));
        let excluded = self.exclude.iter().any(|prefix| key.starts_with(prefix));
        let tool_mark = tool_mark(key, value).is_some_and(|tool| !self.keep_tools.contains(&tool));
        let credential = self.drop_credential_marks && credential_mark(key, value);
        included && !excluded && !tool_mark && !credential
    }
}

/// How one rule shapes its copies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Only these keys of the data (ConfigMaps and Secrets); `None`: every key.
    pub keys: Option<BTreeSet<String>>,
    /// The type of the copies (Secrets); `None`: the source's.
    pub secret_type: Option<String>,
    pub labels: MarkFilter,
    pub annotations: MarkFilter,
    /// Labels every copy carries besides those copied, winning over a source's.
    pub extra_labels: BTreeMap<String, String>,
}

impl Shape {
    /// Whether the copy holds the data key `key`.
    pub fn keeps_key(&self, key: &str) -> bool {
        self.keys.as_ref().is_none_or(|keys| keys.contains(key))
    }

    /// The keys this rule lists that `present` (a source's data keys) lacks, in order.
    pub fn missing_keys<'a>(&'a self, present: &BTreeSet<&str>) -> Vec<&'a str> {
        self.keys.iter().flatten().map(String::as_str).filter(|key| !present.contains(key)).collect()
    }

    /// Whether the data may differ from the source's: keys left out or the type changed, so
    /// the copy must be checked against what its type requires.
    pub fn reshapes_data(&self) -> bool {
        self.keys.is_some() || self.secret_type.is_some()
    }

    /// The value of the annotation that records what this rule left out of a copy and added
    /// to it (`dropped_labels` and `dropped_annotations`: the source's keys the filters left
    /// out), so that a copy written under another shaping is told apart and rewritten (a
    /// label it no longer should carry is removed); `None` when nothing is left out or added,
    /// so copies made before rules could shape them stay as they are.
    pub fn marker(&self, dropped_labels: &[&str], dropped_annotations: &[&str]) -> Option<String> {
        if dropped_labels.is_empty() && dropped_annotations.is_empty() && self.extra_labels.is_empty() {
            return None;
        }
        // Lists apart by a byte no key holds, keys apart by another.
        let mut input = String::new();
        for list in [dropped_labels, dropped_annotations] {
            for key in list.iter() {
                input.push_str(key);
                input.push('\n');
            }
            input.push('\0');
        }
        for key in self.extra_labels.keys() {
            input.push_str(key);
            input.push('\n');
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
        Some(digest.as_ref()[..8].iter().map(|byte| format!("{byte:02x}")).collect())
    }
}

/// The keys a Secret of `secret_type` must hold that `keys` lacks, as the API server
/// requires them (`ValidateSecret`): a `kubernetes.io/tls` Secret needs `tls.crt` and
/// `tls.key`, an ssh-auth one `ssh-privatekey`, a basic-auth one `username` or `password`
/// (named together), a docker config its config key. Empty when the copy would be accepted.
pub fn keys_required_by(secret_type: &str, keys: &BTreeSet<&str>) -> Vec<&'static str> {
    let required: &[&'static str] = match secret_type {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/basic-auth" if !keys.contains("username") && !keys.contains("password") => {
            return vec!["username or password"];
        }
        _ => &[],
    };
    required.iter().copied().filter(|key| !keys.contains(key)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_argo_flux_and_kapp_marks_are_left_out_by_default_and_kept_when_asked() {
        let filter = MarkFilter::default();
        for (key, value) in [
            ("meta.helm.sh/release-name", "web"),
            ("app.kubernetes.io/managed-by", "Helm"),
            ("argocd.argoproj.io/tracking-id", "app:/ConfigMap:ns/x"),
            ("app.kubernetes.io/instance", "web"),
            ("kustomize.toolkit.fluxcd.io/name", "apps"),
            ("helm.toolkit.fluxcd.io/name", "web"),
            ("kapp.k14s.io/app", "123"),
        ] {
            assert!(!filter.copies(key, value), "{key} is left out");
        }
        for (key, value) in [("app.kubernetes.io/name", "web"), ("app.kubernetes.io/managed-by", "kustomize")]
        {
            assert!(filter.copies(key, value), "{key}: {value} is no tool's ownership mark");
        }
        let keep_argo = MarkFilter { keep_tools: BTreeSet::from([Tool::ArgoCd]), ..MarkFilter::default() };
        assert!(keep_argo.copies("app.kubernetes.io/instance", "web"));
        assert!(!keep_argo.copies("meta.helm.sh/release-name", "web"));
    }

    #[test]
    fn include_limits_and_exclude_wins() {
        let filter = MarkFilter {
            include: vec!["team.example.com/".into(), "app".into()],
            exclude: vec!["team.example.com/secret".into()],
            ..MarkFilter::default()
        };
        assert!(filter.copies("team.example.com/owner", "a"));
        assert!(filter.copies("app", "a"), "a whole key is its own prefix");
        assert!(!filter.copies("team.example.com/secret-ref", "a"));
        assert!(!filter.copies("other", "a"));
        assert!(
            !filter.copies("app.kubernetes.io/instance", "a"),
            "include does not bring back a tool's mark"
        );
    }

    #[test]
    fn listed_keys_a_source_lacks_are_named() {
        let shape = Shape { keys: Some(["ca.crt".into(), "extra".into()].into()), ..Shape::default() };
        assert!(shape.keeps_key("ca.crt") && !shape.keeps_key("tls.key"));
        assert_eq!(shape.missing_keys(&BTreeSet::from(["ca.crt", "tls.key"])), ["extra"]);
        assert!(Shape::default().missing_keys(&BTreeSet::new()).is_empty());
        assert!(Shape::default().keeps_key("anything"));
    }

    #[test]
    fn typed_secrets_need_the_keys_the_api_server_requires() {
        let keys = |list: &[&'static str]| list.iter().copied().collect::<BTreeSet<&str>>();
        assert_eq!(keys_required_by("kubernetes.io/tls", &keys(&["ca.crt"])), ["tls.crt", "tls.key"]);
        assert!(keys_required_by("kubernetes.io/tls", &keys(&["tls.crt", "tls.key"])).is_empty());
        assert!(keys_required_by("Opaque", &keys(&["ca.crt"])).is_empty());
        assert_eq!(keys_required_by("kubernetes.io/basic-auth", &keys(&[])), ["username or password"]);
        assert!(keys_required_by("kubernetes.io/basic-auth", &keys(&["password"])).is_empty());
        assert_eq!(keys_required_by("kubernetes.io/ssh-auth", &keys(&[])), ["ssh-privatekey"]);
        assert_eq!(keys_required_by("kubernetes.io/dockerconfigjson", &keys(&[])), [".dockerconfigjson"]);
    }

    #[test]
    fn the_marker_changes_with_what_is_left_out_or_added_and_is_absent_when_nothing_is() {
        let shape = Shape::default();
        assert_eq!(shape.marker(&[], &[]), None, "copies made before shaping stay in sync");
        let helm = shape.marker(&["meta.helm.sh/release-name"], &[]).unwrap();
        assert_eq!(helm.len(), 16);
        assert_ne!(Some(&helm), shape.marker(&[], &["meta.helm.sh/release-name"]).as_ref());
        assert_ne!(Some(&helm), shape.marker(&["meta.helm.sh/release-name", "x"], &[]).as_ref());
        let extra = Shape { extra_labels: [("team".into(), "a".into())].into(), ..Shape::default() };
        assert!(extra.marker(&[], &[]).is_some(), "an added label is recorded");
        assert_eq!(
            extra.marker(&[], &[]),
            Shape { extra_labels: [("team".into(), "b".into())].into(), ..Shape::default() }.marker(&[], &[]),
            "values are compared on the copy itself"
        );
    }
}
