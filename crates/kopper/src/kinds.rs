//! The kinds besides ConfigMap and Secret a cluster admin lets kopper replicate
//! (`--replicate-kinds`). Pure, unit-tested; the discovery
//! that resolves an entry to its resource is done once at start (and again for an entry not
//! served yet), by the replication engine.
//!
//! Which kinds kopper may copy is the admin's choice, made with the flag (and, in the chart,
//! the RBAC that goes with it): a ReplicationRule naming any other kind is refused, so
//! creating a rule never widens what kopper writes.
//!
//! Every such kind is copied only from protected namespaces, unless a rule says otherwise
//! (`allowUnprotectedSources`): there is no list of harmless kinds. A LimitRange or a
//! ResourceQuota (`pods: "0"`) shuts every target namespace down as surely as a NetworkPolicy
//! opens it, a Deployment or CronJob runs code there, a Service or EndpointSlice redirects
//! its traffic, and a custom kind means whatever its controller makes of it. Whoever writes
//! a source decides for every namespace it is copied into, so only those who may write in
//! protected namespaces decide by default.

use std::fmt;
use std::sync::OnceLock;

use kube::core::ApiResource;

/// kopper's own API group: its resources are never replicated (a copied rule would copy).
const OWN_GROUP: &str = "kopper.dev";

/// The shortest time between two discovery requests for one allowed kind not served yet,
/// while rules name it.
pub const REDISCOVERY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// The RBAC group, whose Roles and RoleBindings the API server checks for escalation.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// One `apiVersion/Kind` entry of `--replicate-kinds`, as given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindEntry {
    /// Empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl KindEntry {
    /// `networking.k8s.io/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// ConfigMap and Secret of the core group: always replicated, never listed.
    pub fn is_config_map_or_secret(&self) -> bool {
        self.group.is_empty() && self.version == "v1" && (self.kind == "ConfigMap" || self.kind == "Secret")
    }
}

impl fmt::Display for KindEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

/// Parses one `apiVersion/Kind` entry (`v1/LimitRange`, `networking.k8s.io/v1/NetworkPolicy`),
/// refusing what kopper can never replicate. The message names the flag and its variable.
pub fn parse_entry(text: &str) -> Result<KindEntry, String> {
    let text = text.trim();
    let refuse = |why: &str| {
        format!(
            "--replicate-kinds (KOPPER_REPLICATE_KINDS): `{text}` {why}; write each entry as apiVersion/Kind, \
             e.g. `networking.k8s.io/v1/NetworkPolicy` or `v1/LimitRange`, comma-separated"
        )
    };
    let parts: Vec<&str> = text.split('/').collect();
    let (group, version, kind) = match parts.as_slice() {
        [version, kind] => ("", *version, *kind),
        [group, version, kind] => (*group, *version, *kind),
        _ => return Err(refuse("is not apiVersion/Kind")),
    };
    let group_ok = group.is_empty()
        || (group.len() <= 253
            && group.contains('.')
            && group.split('.').all(|label| {
                !label.is_empty()
                    && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            }))
        || matches!(group, "apps" | "batch" | "policy" | "autoscaling" | "extensions");
    if !group_ok {
        return Err(refuse("has no valid API group (a DNS subdomain such as example.com)"));
    }
    let version_ok = version.starts_with('v')
        && version.len() <= 63
        && version[1..].starts_with(|c: char| c.is_ascii_digit())
        && version.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !version_ok {
        return Err(refuse("has no valid version (v1, v1beta1, ...)"));
    }
    let kind_ok = kind.len() <= 63
        && kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(refuse("has no valid kind (a capitalised name such as NetworkPolicy)"));
    }
    if group == OWN_GROUP || group.ends_with(".kopper.dev") {
        return Err(refuse("is one of kopper's own kinds, which are never replicated: remove it"));
    }
    Ok(KindEntry { group: group.to_owned(), version: version.to_owned(), kind: kind.to_owned() })
}

/// One element of the `--replicate-kinds` list: an entry, or nothing for a blank one (an
/// empty `KOPPER_REPLICATE_KINDS`, a trailing comma), which a generated manifest or a chart
/// template easily gives and which names no kind.
pub fn parse_listed(text: &str) -> Result<Option<KindEntry>, String> {
    if text.trim().is_empty() { Ok(None) } else { parse_entry(text).map(Some) }
}

/// One kind kopper may replicate: its entry and, once discovery found it served and
/// namespaced, its resource. Made once per configured kind at start and never freed, so a
/// copy's kind is a `Copy` reference (see `ObjectKind::Other` of the replication engine);
/// their number is bounded by the configuration.
pub struct AllowedKind {
    pub entry: KindEntry,
    resource: OnceLock<ApiResource>,
}

impl AllowedKind {
    /// The resource discovery found for it, if it did.
    pub fn resource(&self) -> Option<&ApiResource> {
        self.resource.get()
    }

    /// Records what discovery found (once: a kind served stays known).
    pub fn resolved(&self, resource: ApiResource) {
        let _ = self.resource.set(resource);
    }

    /// The resource's plural, once known.
    pub fn plural(&self) -> Option<&str> {
        self.resource().map(|resource| resource.plural.as_str())
    }
}

impl fmt::Debug for AllowedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.entry)
    }
}

// Two kinds are the same when their entries are: what `ObjectKind` compares and hashes.
impl PartialEq for AllowedKind {
    fn eq(&self, other: &Self) -> bool {
        self.entry == other.entry
    }
}
impl Eq for AllowedKind {}
impl std::hash::Hash for AllowedKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.entry.hash(state);
    }
}
impl PartialOrd for AllowedKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for AllowedKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.entry.cmp(&other.entry)
    }
}

/// The kinds `--replicate-kinds` allows, besides ConfigMap and Secret. Empty by default.
#[derive(Clone, Default)]
pub struct AllowedKinds(Vec<&'static AllowedKind>);

impl fmt::Debug for AllowedKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|kind| kind.entry.to_string())).finish()
    }
}

impl PartialEq for AllowedKinds {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl AllowedKinds {
    /// The kinds of `entries`, each once; ConfigMap and Secret, always allowed, are left out.
    /// Each is leaked: made once at start, it lives as long as the process.
    pub fn new(entries: impl IntoIterator<Item = KindEntry>) -> Self {
        let mut entries: Vec<KindEntry> =
            entries.into_iter().filter(|entry| !entry.is_config_map_or_secret()).collect();
        entries.sort();
        entries.dedup();
        Self(
            entries
                .into_iter()
                .map(|entry| &*Box::leak(Box::new(AllowedKind { entry, resource: OnceLock::new() })))
                .collect(),
        )
    }

    /// The allowed kind of `api_version` (`v1`, `group/version`) and `kind`, if allowed.
    pub fn find(&self, api_version: &str, kind: &str) -> Option<&'static AllowedKind> {
        self.0
            .iter()
            .copied()
            .find(|allowed| allowed.entry.api_version() == api_version && allowed.entry.kind == kind)
    }

    pub fn iter(&self) -> impl Iterator<Item = &'static AllowedKind> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_group_version_and_kind_and_the_core_group_has_none() {
        let policy = parse_entry("networking.k8s.io/v1/NetworkPolicy").unwrap();
        assert_eq!((policy.group.as_str(), policy.version.as_str()), ("networking.k8s.io", "v1"));
        assert_eq!(policy.api_version(), "networking.k8s.io/v1");
        let limits = parse_entry(" v1/LimitRange ").unwrap();
        assert_eq!((limits.group.as_str(), limits.api_version().as_str()), ("", "v1"));
        assert_eq!(
            parse_entry("example.com/v1alpha1/Widget").unwrap().to_string(),
            "example.com/v1alpha1/Widget"
        );
        assert_eq!(parse_entry("apps/v1/Deployment").unwrap().group, "apps");
    }

    #[test]
    fn malformed_entries_and_kopper_s_own_kinds_are_refused_naming_the_flag_and_the_fix() {
        for bad in [
            "NetworkPolicy",
            "networking.k8s.io/NetworkPolicy",
            "a/b/c/D",
            "v1/networkpolicy",
            "Example.com/v1/Widget",
            "example/v1/Widget",
            "example.com/1/Widget",
            "example.com/v1/",
            "kopper.dev/v1alpha1/ReplicationRule",
            "",
        ] {
            let message = parse_entry(bad).unwrap_err();
            assert!(
                message.contains("--replicate-kinds") && message.contains("KOPPER_REPLICATE_KINDS"),
                "{message}"
            );
            assert!(message.contains("apiVersion/Kind"), "{message}");
        }
        assert!(parse_entry("kopper.dev/v1alpha1/ReplicationRule").unwrap_err().contains("kopper's own"));
        assert_eq!(parse_listed(" "), Ok(None), "a blank element names no kind");
        assert!(parse_listed("v1/LimitRange").unwrap().is_some());
    }

    #[test]
    fn allowed_kinds_are_deduplicated_and_leave_config_maps_and_secrets_out() {
        let entries =
            ["v1/LimitRange", "v1/ConfigMap", "v1/LimitRange", "v1/Secret", "example.com/v1/Widget"]
                .map(|text| parse_entry(text).unwrap());
        let kinds = AllowedKinds::new(entries);
        assert_eq!(format!("{kinds:?}"), r#"["v1/LimitRange", "example.com/v1/Widget"]"#);
        let widget = kinds.find("example.com/v1", "Widget").unwrap();
        assert!(widget.resource().is_none());
        assert!(kinds.find("v1", "ConfigMap").is_none());
        assert!(kinds.find("example.com/v2", "Widget").is_none());
        widget.resolved(ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        });
        assert_eq!(kinds.find("example.com/v1", "Widget").unwrap().plural(), Some("widgets"));
    }
}
