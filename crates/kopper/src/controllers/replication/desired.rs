//! What copies should exist and what to do about the objects that are there: pure functions
//! of rules, source objects, namespaces and existing copies, so every decision the engine
//! makes is unit-tested without a server.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::num::NonZeroU64;
use std::sync::{Arc, LazyLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::{ObjectMeta, Selector, SelectorExt};

use crate::patterns::glob_matches;
use crate::tenancy::{CREDENTIAL_SECRET_TYPES, Consent, DestinationPolicy, ProtectedNamespaces};

/// Label every copy carries, so kopper can watch its copies alone and never mistakes an
/// object someone else made for its own.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kopper";
/// Label naming the rule a copy belongs to (see [`RuleId::label_value`]).
pub const REPLICATED_BY_LABEL: &str = "kopper.dev/replicated-by";
/// The rule a copy belongs to, readable (the label holds a digest of it).
pub const RULE_ANNOTATION: &str = "kopper.dev/rule";
/// The uid of the rule object that made a copy: its cleanup deletes only copies naming it.
pub const RULE_UID_ANNOTATION: &str = "kopper.dev/rule-uid";
/// Names the ServiceAccount whose token a Secret holds: how a service-account token is
/// told from its metadata alone (see [`ObjectInfo::credential_type`]).
pub const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// Label of kopper's Bucket controller on the Secrets it writes. An object carrying it is the
/// Bucket controller's, whatever other labels it has (a tenant may add kopper's rule label
/// to it): were both controllers to claim one Secret, each would rewrite the other's, and
/// every round would cost an IAM access key.
pub const BUCKET_SECRET_LABEL: &str = "kopper.dev/bucket";
pub const SOURCE_NAMESPACE_ANNOTATION: &str = "kopper.dev/source-namespace";
pub const SOURCE_NAME_ANNOTATION: &str = "kopper.dev/source-name";
pub const SOURCE_UID_ANNOTATION: &str = "kopper.dev/source-uid";
/// The source's resourceVersion the copy was written from: a copy whose annotation matches
/// its source and that nobody edited since is known to be in sync without reading it.
pub const SOURCE_VERSION_ANNOTATION: &str = "kopper.dev/source-resource-version";

/// Annotations that describe the source object itself, not its content, and would mislead
/// anyone (or any tool) reading them on a copy.
const SOURCE_ONLY_ANNOTATIONS: [&str; 2] =
    ["kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision"];
/// Hex digits of the rule digest in [`REPLICATED_BY_LABEL`]: 240 bits, far past any collision
/// a tenant could search for.
const RULE_DIGEST_HEX: usize = 60;

/// The kinds of object the engine replicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 2] = [ObjectKind::ConfigMap, ObjectKind::Secret];
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        })
    }
}

/// The custom resources that front the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    ReplicationRule,
    ConfigMapSync,
}

/// Identifies one rule across both custom resources.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId {
    pub kind: RuleKind,
    pub name: String,
    /// Set for namespaced rules (ConfigMapSync).
    pub namespace: Option<String>,
}

impl RuleId {
    pub fn replication_rule(name: &str) -> Self {
        Self { kind: RuleKind::ReplicationRule, name: name.to_owned(), namespace: None }
    }

    pub fn config_map_sync(namespace: &str, name: &str) -> Self {
        Self { kind: RuleKind::ConfigMapSync, name: name.to_owned(), namespace: Some(namespace.to_owned()) }
    }

    /// The value of [`REPLICATED_BY_LABEL`]: a SHA-256 digest of the rule's full identity,
    /// so no rule, however its tenant names it, can share another's value (and so delete
    /// or take over its copies).
    pub fn label_value(&self) -> String {
        // Fields apart by NUL, which no name holds: distinct identities, distinct inputs.
        let identity =
            format!("{:?}\0{}\0{}", self.kind, self.namespace.as_deref().unwrap_or_default(), self.name);
        let digest = ring::digest::digest(&ring::digest::SHA256, identity.as_bytes());
        let hex: String = digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{}{}", self.label_prefix(), &hex[..RULE_DIGEST_HEX])
    }

    /// Tells the two kinds apart at a glance in `kubectl get -l`.
    fn label_prefix(&self) -> &'static str {
        match self.kind {
            RuleKind::ReplicationRule => "r-",
            RuleKind::ConfigMapSync => "s-",
        }
    }
}

/// The label value that marks a rule's copies, computed once per loop over copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleLabels {
    pub current: String,
}

impl RuleLabels {
    pub fn of(id: &RuleId) -> Self {
        Self { current: id.label_value() }
    }

    /// Whether `copy` carries this label.
    pub fn marks(&self, copy: &CopyState) -> bool {
        copy.made_by(&self.current)
    }

    /// Whether `label` is this value.
    pub fn is(&self, label: &str) -> bool {
        label == self.current
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.namespace) {
            (RuleKind::ReplicationRule, _) => write!(f, "ReplicationRule.{}", self.name),
            (RuleKind::ConfigMapSync, Some(namespace)) => {
                write!(f, "ConfigMapSync.{}.{namespace}", self.name)
            }
            (RuleKind::ConfigMapSync, None) => write!(f, "ConfigMapSync.{}", self.name),
        }
    }
}

/// One rule, whichever resource it came from, in the form the engine decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: RuleId,
    /// The uid of the rule object, marked on its copies.
    pub uid: String,
    pub kind: ObjectKind,
    pub sources: SourceMatch,
    pub targets: TargetMatch,
}

/// Which objects a rule copies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMatch {
    pub namespaces: Vec<String>,
    /// Only the object of this name (ConfigMapSync).
    pub name: Option<String>,
    /// Only objects whose labels match (ReplicationRule).
    pub selector: Option<Selector>,
    /// For Secrets: the credential types (see [`CREDENTIAL_SECRET_TYPES`]) this rule may
    /// copy; others of those types are never sources. `None` for ConfigMaps.
    pub credential_types: Option<Vec<String>>,
}

impl SourceMatch {
    /// Whether `object` is one of the sources. kopper's own copies never are, so one rule's
    /// copies cannot feed another rule and loop.
    pub fn matches(&self, object: &ObjectInfo) -> bool {
        !object.deleting
            && !object.is_kopper_made()
            && self.namespaces.contains(&object.namespace)
            && self.name.as_ref().is_none_or(|name| *name == object.name)
            && self.selector.as_ref().is_none_or(|selector| selector.matches(&object.labels))
            && object.credential_type().is_none_or(|kind| self.may_copy_credential(kind))
    }

    /// Whether a Secret of this type may be copied: any type that is not a credential of
    /// the cluster, and those the rule names.
    pub fn may_copy_secret_type(&self, secret_type: Option<&str>) -> bool {
        match secret_type {
            Some(kind) if CREDENTIAL_SECRET_TYPES.contains(&kind) => self.may_copy_credential(kind),
            _ => true,
        }
    }

    fn may_copy_credential(&self, kind: &str) -> bool {
        self.credential_types.as_ref().is_none_or(|allowed| allowed.iter().any(|a| a == kind))
    }
}

/// Which namespaces receive copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetMatch {
    /// The named namespaces and those the selector matches (ConfigMapSync, a tenant's), of
    /// those `policy` lets namespace `tenant` write into.
    Listed { names: BTreeSet<String>, selector: Option<Selector>, tenant: String, policy: DestinationPolicy },
    /// Every namespace the selector and the name patterns allow (ReplicationRule, an
    /// admin's). Protected namespaces only when `include` names them exactly.
    Matching {
        selector: Option<Selector>,
        include: Vec<String>,
        exclude: Vec<String>,
        protected: ProtectedNamespaces,
    },
}

/// What the engine knows of a namespace: its metadata, nothing more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// False once the namespace is being deleted: it gets no new copies.
    pub active: bool,
    /// Which tenants' resources it accepts copies from.
    pub consent: Consent,
}

impl NamespaceInfo {
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            active: meta.deletion_timestamp.is_none(),
            consent: Consent::from_annotations(meta.annotations.as_ref()),
        }
    }
}

impl Rule {
    /// Whether `namespace` receives this rule's copies.
    pub fn targets(&self, namespace: &NamespaceInfo) -> bool {
        if !namespace.active || self.sources.namespaces.contains(&namespace.name) {
            return false;
        }
        match &self.targets {
            TargetMatch::Listed { names, selector, tenant, policy } => {
                let wanted = names.contains(&namespace.name)
                    || selector.as_ref().is_some_and(|selector| selector.matches(&namespace.labels));
                wanted && policy.allows(tenant, &namespace.name, &namespace.consent)
            }
            TargetMatch::Matching { selector, include, exclude, protected } => {
                let name = namespace.name.as_str();
                let selected = selector.as_ref().is_none_or(|selector| selector.matches(&namespace.labels));
                let included = if protected.contains(name) {
                    include.iter().any(|pattern| pattern == name)
                } else {
                    include.is_empty() || include.iter().any(|pattern| glob_matches(pattern, name))
                };
                let excluded = exclude.iter().any(|pattern| glob_matches(pattern, name));
                selected && included && !excluded
            }
        }
    }

    /// The one source this rule names (`namespace/name`, a ConfigMapSync's), when it matched
    /// none: the rule cannot do what it asks for, unlike a selector that matches nothing yet.
    pub fn missing_named_source(&self, sources_matched: usize) -> Option<String> {
        match (&self.sources.name, self.sources.namespaces.as_slice()) {
            (Some(name), [namespace]) if sources_matched == 0 => Some(format!("{namespace}/{name}")),
            _ => None,
        }
    }

    /// The namespaces this rule names as destinations that it may not write into (not
    /// protected, no consent), whether or not they exist: telling them apart would tell a
    /// tenant which namespaces exist. Only a tenant's rule (ConfigMapSync) has any.
    pub fn refused_destinations(&self, namespaces: &BTreeMap<String, NamespaceInfo>) -> Vec<String> {
        let TargetMatch::Listed { names, tenant, policy, .. } = &self.targets else { return Vec::new() };
        names
            .iter()
            .filter(|name| !self.sources.namespaces.contains(name))
            .filter(|name| {
                let consent = namespaces.get(*name).map(|namespace| &namespace.consent);
                !policy.allows(tenant, name, consent.unwrap_or(&Consent::None))
            })
            .cloned()
            .collect()
    }

    /// The order in which rules win a copy they both want, where no tenant holds it (see
    /// [`World::owner_at`]): an admin's ReplicationRule before any tenant's ConfigMapSync,
    /// then by kind, name and namespace.
    fn precedence(&self) -> &RuleId {
        &self.id
    }
}

/// The metadata of a ConfigMap or Secret: what the engine watches for every object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

impl ObjectInfo {
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }

    /// The cluster credential type (see [`CREDENTIAL_SECRET_TYPES`]) a Secret is, told from
    /// its metadata alone (the watches hold no more), as the API server and Helm mark them.
    pub fn credential_type(&self) -> Option<&'static str> {
        if self.annotations.contains_key(SERVICE_ACCOUNT_NAME_ANNOTATION) {
            Some(CREDENTIAL_SECRET_TYPES[0])
        } else if self.name.starts_with("bootstrap-token-") {
            Some(CREDENTIAL_SECRET_TYPES[1])
        } else if self.name.starts_with("sh.helm.release.v1.")
            && self.labels.get("owner").is_some_and(|owner| owner == "helm")
        {
            Some(CREDENTIAL_SECRET_TYPES[2])
        } else {
            None
        }
    }

    /// Carries kopper's managed-by label: made by some part of kopper (a copy, a Bucket's
    /// Secret), so never a source.
    pub fn is_kopper_made(&self) -> bool {
        self.labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY_VALUE)
    }

    /// One of the replication engine's copies: kopper's managed-by label and a rule's
    /// [`REPLICATED_BY_LABEL`], and no other controller's mark ([`BUCKET_SECRET_LABEL`]).
    /// Only such an object may the engine update or delete.
    pub fn is_kopper_copy(&self) -> bool {
        self.is_kopper_made()
            && self.labels.contains_key(REPLICATED_BY_LABEL)
            && !self.labels.contains_key(BUCKET_SECRET_LABEL)
    }

    /// The rule label value this copy carries, if it is kopper's.
    pub fn replicated_by(&self) -> Option<&str> {
        self.is_kopper_copy().then(|| self.labels.get(REPLICATED_BY_LABEL).map(String::as_str)).flatten()
    }

    pub fn key(&self, kind: ObjectKind) -> CopyKey {
        CopyKey { kind, namespace: self.namespace.clone(), name: self.name.clone() }
    }
}

/// Where a copy lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKey {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for CopyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The content a copy takes from its source. Secrets keep their bytes in `binary_data`.
/// Its `Debug` form names the keys and never shows a value, so no log or error message
/// can carry a Secret's content.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Payload {
    pub data: BTreeMap<String, String>,
    pub binary_data: BTreeMap<String, ByteString>,
    /// A Secret's type; `Opaque` when the source has none, as the API server defaults it.
    pub secret_type: Option<String>,
    pub immutable: bool,
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payload")
            .field("data", &self.data.keys().collect::<Vec<_>>())
            .field("binary_data", &self.binary_data.keys().collect::<Vec<_>>())
            .field("secret_type", &self.secret_type)
            .field("immutable", &self.immutable)
            .finish()
    }
}

impl Payload {
    pub fn from_config_map(config_map: &ConfigMap) -> Self {
        Self::config_map(config_map.data.clone(), config_map.binary_data.clone(), config_map.immutable)
    }

    pub fn from_secret(secret: &Secret) -> Self {
        Self::secret(secret.data.clone(), secret.type_.clone(), secret.immutable)
    }

    /// A ConfigMap's content from its fields as the API server sends them. Sources and
    /// copies are both read through here (or [`Payload::secret`]), so the two can never
    /// disagree on a default and make every copy look changed.
    pub fn config_map(
        data: Option<BTreeMap<String, String>>,
        binary_data: Option<BTreeMap<String, ByteString>>,
        immutable: Option<bool>,
    ) -> Self {
        Self {
            data: data.unwrap_or_default(),
            binary_data: binary_data.unwrap_or_default(),
            secret_type: None,
            immutable: immutable.unwrap_or(false),
        }
    }

    /// A Secret's content from its fields as the API server sends them.
    pub fn secret(
        data: Option<BTreeMap<String, ByteString>>,
        type_: Option<String>,
        immutable: Option<bool>,
    ) -> Self {
        Self {
            data: BTreeMap::new(),
            binary_data: data.unwrap_or_default(),
            secret_type: Some(type_.unwrap_or_else(|| "Opaque".to_owned())),
            immutable: immutable.unwrap_or(false),
        }
    }
}

/// A source object with its content. Shared (`Arc`) by every copy made from it, so a
/// source replicated into thousands of namespaces is held once, not once per copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub info: Arc<ObjectInfo>,
    pub payload: Arc<Payload>,
}

impl Source {
    pub fn new(info: ObjectInfo, payload: Payload) -> Self {
        Self { info: Arc::new(info), payload: Arc::new(payload) }
    }
}

/// One copy that should exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCopy {
    pub key: CopyKey,
    pub rule: RuleId,
    pub source: Arc<ObjectInfo>,
    /// Every label and annotation kopper sets; nothing else is sent. The same for every copy
    /// of one source by one rule, so shared between them.
    pub labels: Arc<BTreeMap<String, String>>,
    pub annotations: Arc<BTreeMap<String, String>>,
    pub payload: Arc<Payload>,
    /// What the copy holds once written, as its watch sees it ([`CopyState`]): the marks of
    /// `labels` and `annotations`, and the digest of `payload`.
    pub marks: Arc<Marks>,
    pub content: u64,
}

/// What every copy of one source made by one rule has in common; built once per source, then
/// stamped into each target namespace with [`CopyTemplate::into_namespace`].
pub struct CopyTemplate<'a> {
    rule: &'a RuleId,
    kind: ObjectKind,
    source: &'a Source,
    labels: Arc<BTreeMap<String, String>>,
    annotations: Arc<BTreeMap<String, String>>,
    /// What a copy in sync carries, to compare with [`CopyState`].
    marks: Arc<Marks>,
    content: u64,
}

impl CopyTemplate<'_> {
    pub fn into_namespace(&self, namespace: &str) -> DesiredCopy {
        DesiredCopy {
            key: self.key(namespace),
            rule: self.rule.clone(),
            source: self.source.info.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            payload: self.source.payload.clone(),
            marks: self.marks.clone(),
            content: self.content,
        }
    }

    pub fn key(&self, namespace: &str) -> CopyKey {
        CopyKey { kind: self.kind, namespace: namespace.to_owned(), name: self.source.info.name.clone() }
    }
}

/// Builds the copy of `source` that `rule` puts into `namespace`: the source's content and
/// its own labels and annotations, without server-set metadata or kopper's marks, plus
/// marks naming the rule and the source version.
pub fn desired_copy(
    rule: &RuleId,
    rule_uid: &str,
    kind: ObjectKind,
    source: &Source,
    namespace: &str,
) -> DesiredCopy {
    copy_template(rule, rule_uid, kind, source).into_namespace(namespace)
}

/// The labels and annotations of `rule`'s copies of `source`: the source's own, without
/// server-set metadata or kopper's marks, plus marks naming the rule (and the uid of its
/// object) and the source version.
pub fn copy_template<'a>(
    rule: &'a RuleId,
    rule_uid: &str,
    kind: ObjectKind,
    source: &'a Source,
) -> CopyTemplate<'a> {
    let mut labels: BTreeMap<String, String> =
        source.info.labels.iter().filter(|(key, _)| is_user_key(key)).map(clone_pair).collect();
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
    labels.insert(REPLICATED_BY_LABEL.to_owned(), rule.label_value());
    let mut annotations: BTreeMap<String, String> = source
        .info
        .annotations
        .iter()
        .filter(|(key, _)| is_user_key(key) && !SOURCE_ONLY_ANNOTATIONS.contains(&key.as_str()))
        .map(clone_pair)
        .collect();
    annotations.insert(RULE_ANNOTATION.to_owned(), rule.to_string());
    annotations.insert(RULE_UID_ANNOTATION.to_owned(), rule_uid.to_owned());
    annotations.insert(SOURCE_NAMESPACE_ANNOTATION.to_owned(), source.info.namespace.clone());
    annotations.insert(SOURCE_NAME_ANNOTATION.to_owned(), source.info.name.clone());
    annotations.insert(SOURCE_UID_ANNOTATION.to_owned(), source.info.uid.clone());
    annotations.insert(SOURCE_VERSION_ANNOTATION.to_owned(), source.info.resource_version.clone());
    CopyTemplate {
        rule,
        kind,
        source,
        marks: Arc::new(Marks::new(&labels, &annotations)),
        content: source.payload.digest(),
        labels: Arc::new(labels),
        annotations: Arc::new(annotations),
    }
}

/// Keys kopper sets itself are never taken from the source.
fn is_user_key(key: &str) -> bool {
    key != MANAGED_BY_LABEL && !key.starts_with("kopper.dev/")
}

fn clone_pair((key, value): (&String, &String)) -> (String, String) {
    (key.clone(), value.clone())
}

/// The namespaces the rules of `kind` copy from.
pub fn source_namespaces(rules: &[Rule], kind: ObjectKind) -> BTreeSet<&str> {
    rules
        .iter()
        .filter(|rule| rule.kind == kind)
        .flat_map(|rule| rule.sources.namespaces.iter().map(String::as_str))
        .collect()
}

/// Everything the engine knows that more than one rule depends on: all rules, the
/// namespaces, and the objects that could be sources.
pub struct World<'a> {
    pub rules: &'a [Rule],
    pub namespaces: &'a BTreeMap<String, NamespaceInfo>,
    candidates: HashMap<(&'a str, &'a str), &'a ObjectInfo>,
}

impl<'a> World<'a> {
    /// `candidates` are the objects of one kind in the rules' source namespaces.
    pub fn new(
        rules: &'a [Rule],
        namespaces: &'a BTreeMap<String, NamespaceInfo>,
        candidates: &'a [ObjectInfo],
    ) -> Self {
        let candidates = candidates
            .iter()
            .map(|object| ((object.namespace.as_str(), object.name.as_str()), object))
            .collect();
        Self { rules, namespaces, candidates }
    }

    /// The sources `rule` copies, in a stable order.
    pub fn matched_sources(&self, rule: &Rule) -> Vec<&'a ObjectInfo> {
        let mut sources: Vec<&ObjectInfo> =
            self.candidates.values().copied().filter(|object| rule.sources.matches(object)).collect();
        sources.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        sources
    }

    /// The rule and source that own the copy at `key`, of all that want it, given the label
    /// of the rule whose copy is there now (`holder`, if a copy of kopper's is): see
    /// [`Self::owner_at`].
    pub fn owner(&self, key: &CopyKey, holder: Option<&str>) -> Option<(&'a Rule, &'a ObjectInfo)> {
        self.owner_at(key.kind, &key.namespace, &key.name, holder)
    }

    /// The rule and source that own the copy of `kind` named `name` in `namespace`, of all
    /// that want it. An admin's ReplicationRule wins over any tenant's ConfigMapSync, then
    /// rules go by [`Rule::precedence`] (kind, name, namespace) and then by the source's
    /// namespace; creation time plays no part, so a rule recreated by GitOps keeps its copies.
    ///
    /// One exception makes consent safe between tenants: while the tenant rule whose copy is
    /// there (`holder`, the [`REPLICATED_BY_LABEL`] on it) still wants it, no rule of another
    /// namespace's tenant takes it, whatever the names. A namespace that accepts copies from
    /// two tenants lets each add copies, never replace the other's. Once the holder no longer
    /// wants the copy (its rule, source or consent gone), the next rule in line takes it.
    pub fn owner_at(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
        holder: Option<&str>,
    ) -> Option<(&'a Rule, &'a ObjectInfo)> {
        let namespace = self.namespaces.get(namespace)?;
        // A source of that name first (a lookup), then the rule's targets (globs and
        // selectors): with many rules, few have a source of any one name.
        let contenders: Vec<(&'a Rule, &'a ObjectInfo)> = self
            .rules
            .iter()
            .filter(|rule| rule.kind == kind)
            .flat_map(|rule| {
                rule.sources.namespaces.iter().filter_map(move |source_namespace| {
                    let source = self.candidates.get(&(source_namespace.as_str(), name))?;
                    rule.sources.matches(source).then_some((rule, *source))
                })
            })
            .filter(|(rule, _)| rule.targets(namespace))
            .collect();
        let holding_tenant = holding_tenant(&contenders, holder);
        contenders
            .into_iter()
            .filter(|(rule, _)| match (holding_tenant, rule.id.namespace.as_deref()) {
                (Some(holding), Some(tenant)) => holding == tenant,
                _ => true,
            })
            .min_by(|(a, a_source), (b, b_source)| {
                (a.precedence(), &a_source.namespace).cmp(&(b.precedence(), &b_source.namespace))
            })
    }

    /// The target namespaces of `rule`, in name order.
    pub fn target_namespaces(&self, rule: &Rule) -> Vec<&'a str> {
        self.namespaces
            .values()
            .filter(|namespace| rule.targets(namespace))
            .map(|n| n.name.as_str())
            .collect()
    }
}

/// The namespace of the tenant rule (a ConfigMapSync) among `contenders` whose copy is
/// there now (`holder`, its [`REPLICATED_BY_LABEL`]), when tenants of more than one namespace
/// want the place: only then can it matter, so the digests are not computed otherwise.
fn holding_tenant<'a>(contenders: &[(&'a Rule, &'a ObjectInfo)], holder: Option<&str>) -> Option<&'a str> {
    let holder = holder?;
    let mut tenants = contenders.iter().filter_map(|(rule, _)| rule.id.namespace.as_deref());
    let first = tenants.next()?;
    if tenants.all(|tenant| tenant == first) {
        return None;
    }
    contenders
        .iter()
        .find(|(rule, _)| rule.id.namespace.is_some() && RuleLabels::of(&rule.id).is(holder))
        .and_then(|(rule, _)| rule.id.namespace.as_deref())
}

/// The digests and marks of copies live only in this process, so they are keyed with one
/// random key per process: nobody outside can craft content that collides.
static DIGEST_KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);

fn digest(value: &impl Hash) -> u64 {
    DIGEST_KEY.hash_one(value)
}

impl Payload {
    /// A digest of everything a copy takes from its source, so a copy is compared with its
    /// source without holding the copy's content.
    pub fn digest(&self) -> u64 {
        let binary: Vec<(&String, &[u8])> =
            self.binary_data.iter().map(|(key, value)| (key, value.0.as_slice())).collect();
        digest(&(&self.data, &binary, &self.secret_type, self.immutable))
    }
}

/// The labels and annotations of an object, as one digest per key and value (sorted), so
/// "every mark kopper sets is present" is answered without holding the strings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks(Box<[u64]>);

impl Marks {
    pub fn new(labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> Self {
        let labels = labels.iter().map(|(key, value)| mark_digest(LABEL, key, value));
        let annotations = annotations.iter().map(|(key, value)| mark_digest(ANNOTATION, key, value));
        let mut marks: Vec<u64> = labels.chain(annotations).collect();
        marks.sort_unstable();
        marks.dedup();
        Self(marks.into_boxed_slice())
    }

    /// Whether every mark in `wanted` is here; marks others added are not looked at.
    pub fn contains_all(&self, wanted: &Marks) -> bool {
        wanted.0.iter().all(|mark| self.0.binary_search(mark).is_ok())
    }
}

const LABEL: u8 = 0;
const ANNOTATION: u8 = 1;

fn mark_digest(place: u8, key: &str, value: &str) -> u64 {
    digest(&(place, key, value))
}

/// One of kopper's copies as the copies watch saw it, reduced to what a decision needs:
/// its content and marks as digests. Holding this instead of the object keeps kopper's
/// memory a small fraction of what it replicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyState {
    pub uid: Box<str>,
    /// The value of its [`REPLICATED_BY_LABEL`], if any.
    pub rule: Option<Arc<str>>,
    /// The uid of the rule object that made it ([`RULE_UID_ANNOTATION`]), if marked.
    pub rule_uid: Option<Box<str>>,
    pub marks: Marks,
    /// [`Payload::digest`] of its content.
    pub content: u64,
    pub immutable: bool,
    pub secret_type: Option<Arc<str>>,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// Its resourceVersion, when it carries no finalizers or owner references (which a
    /// rewrite must keep, so must read first); `None` otherwise, or when not known. Held as
    /// a number (8 bytes, not a string on the heap, for each of many thousand copies) when
    /// it is one, as the API server's are; a version that is not is left to the read.
    pub plain_version: Option<NonZeroU64>,
}

impl CopyState {
    /// The resourceVersion a write of this copy may be conditioned on, if known.
    pub fn seen_version(&self) -> Option<String> {
        self.plain_version.map(|version| version.to_string())
    }

    /// Whether the copy holds `content` (a [`Payload::digest`]) and every mark in `marks`;
    /// marks others added are not looked at.
    pub fn holds(&self, content: u64, marks: &Marks) -> bool {
        self.content == content && self.marks.contains_all(marks)
    }

    /// The state of a copy with this metadata and content.
    pub fn new(meta: &ObjectMeta, payload: &Payload) -> Self {
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        let uid = meta.uid.as_deref().unwrap_or_default();
        let plain = meta.finalizers.as_ref().is_none_or(Vec::is_empty)
            && meta.owner_references.as_ref().is_none_or(Vec::is_empty);
        let mut state = Self {
            plain_version: meta.resource_version.as_deref().filter(|_| plain).and_then(canonical_number),
            ..Self::of(uid, labels, annotations, meta.deletion_timestamp.is_some(), payload)
        };
        if has_controller_owner(meta) {
            state.rule = None;
        }
        state
    }

    /// The state of a copy known by its [`ObjectInfo`] and content.
    pub fn from_info(info: &ObjectInfo, payload: &Payload) -> Self {
        Self::of(&info.uid, &info.labels, &info.annotations, info.deleting, payload)
    }

    fn of(
        uid: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        deleting: bool,
        payload: &Payload,
    ) -> Self {
        Self {
            uid: uid.into(),
            // Another controller's object is no rule's copy, whatever labels it carries.
            rule: labels
                .get(REPLICATED_BY_LABEL)
                .filter(|_| !labels.contains_key(BUCKET_SECRET_LABEL))
                .map(|rule| Arc::from(rule.as_str())),
            rule_uid: annotations.get(RULE_UID_ANNOTATION).map(|uid| Box::from(uid.as_str())),
            marks: Marks::new(labels, annotations),
            content: payload.digest(),
            immutable: payload.immutable,
            secret_type: payload.secret_type.as_deref().map(Arc::from),
            deleting,
            plain_version: None,
        }
    }

    /// Whether this copy was made by the rule whose label value is `label`.
    pub fn made_by(&self, label: &str) -> bool {
        self.rule.as_deref() == Some(label)
    }

    /// Whether the rule object with uid `uid` may delete this copy: it names that uid, or
    /// none (made before kopper marked uids). A rule deleted and created again under the
    /// same name never deletes what its successor took over.
    pub fn deletable_by(&self, uid: &str) -> bool {
        self.rule_uid.as_deref().is_none_or(|own| own == uid)
    }
}

/// Whether `meta` names a controller owner: kopper never gives its copies one, so such an
/// object is that controller's to manage, and no rule's copy whatever labels it carries.
pub fn has_controller_owner(meta: &ObjectMeta) -> bool {
    meta.owner_references.iter().flatten().any(|owner| owner.controller == Some(true))
}

/// Whether the object `meta` describes is one of the engine's copies, as a fresh read shows
/// it: its marks ([`ObjectInfo::is_kopper_copy`]) and no controller owner.
pub fn is_copy(meta: &ObjectMeta) -> bool {
    ObjectInfo::from_meta(meta).is_kopper_copy() && !has_controller_owner(meta)
}

/// `version` as a number, if writing the number back gives `version` again (resourceVersions
/// are opaque: only one written exactly as the server wrote it may be sent back).
pub fn canonical_number(version: &str) -> Option<NonZeroU64> {
    version.parse().ok().filter(|number: &NonZeroU64| number.to_string() == version)
}

/// What is found where a copy belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// Nothing: kopper's watches cover this place and hold no object there.
    Nothing,
    /// No kopper copy, and no watch tells whether another object is there: the write
    /// checks first (see [`Change::Create`]).
    Unknown,
    /// An object kopper did not make.
    Unmanaged,
    Copy(&'a CopyState),
}

impl Found<'_> {
    /// The label of the rule whose copy is there, if a copy of kopper's is.
    pub fn holder(&self) -> Option<&str> {
        match self {
            Self::Copy(state) => state.rule.as_deref(),
            Self::Nothing | Self::Unknown | Self::Unmanaged => None,
        }
    }
}

/// An object where a copy belongs, owned (for callers that build a map of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Existing {
    Unmanaged,
    Copy(CopyState),
}

impl Existing {
    pub fn found(&self) -> Found<'_> {
        match self {
            Self::Unmanaged => Found::Unmanaged,
            Self::Copy(state) => Found::Copy(state),
        }
    }
}

/// Why a wanted copy is not written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConflictReason {
    /// An object of that name exists without kopper's mark.
    NotManagedByKopper,
    /// Another rule, or another source of this rule, wins the copy.
    ClaimedByOtherRule(String),
}

impl ConflictReason {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotManagedByKopper => "NotManagedByKopper",
            Self::ClaimedByOtherRule(_) => "ClaimedByOtherRule",
        }
    }

    pub fn message(&self, key: &CopyKey) -> String {
        match self {
            Self::NotManagedByKopper => {
                format!("{key} exists and was not created by kopper; it is left as it is")
            }
            Self::ClaimedByOtherRule(owner) => {
                format!("{key} is replicated by {owner}, which takes precedence")
            }
        }
    }
}

/// One step towards the desired state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Create a copy where kopper's watches show nothing.
    Create(DesiredCopy),
    /// Create a copy where no watch tells what is there: look first, and report a conflict
    /// instead if an object is there.
    CreateIfAbsent(DesiredCopy),
    /// Replace kopper's existing copy (uid `existing_uid`) with this content, on the
    /// condition that it is still that copy, unchanged since it was read. `seen_version` is
    /// the copy's resourceVersion as the watch saw it, when that is all the write needs (no
    /// finalizers or owners of others to keep): the write is then conditioned on it, with
    /// no read first.
    Update {
        existing_uid: String,
        seen_version: Option<String>,
        copy: DesiredCopy,
    },
    /// The existing copy cannot be changed in place (immutable, or a Secret of another type):
    /// delete it, then create it again. The delete is conditioned as [`Change::Delete`]'s.
    Replace {
        existing_uid: String,
        seen_version: Option<String>,
        copy: DesiredCopy,
    },
    /// A copy kopper made that nothing wants any more. Deleted only if it is still the
    /// object of uid `uid` and, when known, still at `seen_version`: a copy a tenant took
    /// over in place (kopper's label removed) since kopper's watch saw it is left alone.
    Delete {
        key: CopyKey,
        uid: String,
        seen_version: Option<String>,
    },
    Conflict {
        key: CopyKey,
        reason: ConflictReason,
    },
}

impl Change {
    /// The copy this change writes, if it writes one.
    pub fn copy(&self) -> Option<&DesiredCopy> {
        match self {
            Self::Create(copy)
            | Self::CreateIfAbsent(copy)
            | Self::Update { copy, .. }
            | Self::Replace { copy, .. } => Some(copy),
            Self::Delete { .. } | Self::Conflict { .. } => None,
        }
    }

    pub fn key(&self) -> &CopyKey {
        match self {
            Self::Create(copy)
            | Self::CreateIfAbsent(copy)
            | Self::Update { copy, .. }
            | Self::Replace { copy, .. } => &copy.key,
            Self::Delete { key, .. } | Self::Conflict { key, .. } => key,
        }
    }
}

/// What one rule should do now, and what is already right.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulePlan {
    pub changes: Vec<Change>,
    pub sources_matched: usize,
    /// Copies in place and identical to their source, and the namespaces they are in.
    pub in_sync: usize,
    pub in_sync_namespaces: BTreeSet<String>,
    /// Copies this rule should own.
    pub wanted: usize,
    /// Wanted copies that are being deleted (held by another controller's finalizer), to be
    /// made again once they are gone.
    pub being_deleted: usize,
    /// Rules that now own copies this rule made, and should be woken to take them over.
    pub hand_over: BTreeSet<RuleId>,
}

impl RulePlan {
    pub fn conflicts(&self) -> impl Iterator<Item = (&CopyKey, &ConflictReason)> {
        self.changes.iter().filter_map(|change| match change {
            Change::Conflict { key, reason } => Some((key, reason)),
            _ => None,
        })
    }

    /// Writes this plan makes (conflicts write nothing).
    pub fn writes(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|change| !matches!(change, Change::Conflict { .. }))
    }

    fn copy_in_sync(&mut self, namespace: &str) {
        self.in_sync += 1;
        if !self.in_sync_namespaces.contains(namespace) {
            self.in_sync_namespaces.insert(namespace.to_owned());
        }
    }
}

/// Everything one pass of a rule decides by, apart from what is found where its copies
/// belong: built once per pass, then asked a few namespaces at a time, so a pass over
/// thousands of namespaces never holds all its copies at once.
pub struct RulePass<'a> {
    pub rule: &'a Rule,
    world: &'a World<'a>,
    templates: Vec<CopyTemplate<'a>>,
    targets: Vec<&'a str>,
    target_set: HashSet<&'a str>,
    source_names: HashSet<&'a str>,
    pub sources_matched: usize,
}

impl<'a> RulePass<'a> {
    /// `sources` are the matched sources as read, by uid. A matched source that was not
    /// read is gone since the cache saw it; its event follows.
    pub fn new(rule: &'a Rule, world: &'a World<'a>, sources: &'a HashMap<String, Source>) -> Self {
        let matched = world.matched_sources(rule);
        let templates: Vec<CopyTemplate<'a>> = matched
            .iter()
            .filter_map(|info| sources.get(&info.uid))
            .filter(|source| rule.sources.may_copy_secret_type(source.payload.secret_type.as_deref()))
            .map(|source| copy_template(&rule.id, &rule.uid, rule.kind, source))
            .collect();
        let targets = world.target_namespaces(rule);
        Self {
            rule,
            world,
            target_set: targets.iter().copied().collect(),
            source_names: templates.iter().map(|template| template.source.info.name.as_str()).collect(),
            templates,
            targets,
            sources_matched: matched.len(),
        }
    }

    /// The namespaces that receive this rule's copies, in name order.
    pub fn targets(&self) -> &[&'a str] {
        &self.targets
    }

    /// Copies wanted in each target namespace.
    pub fn copies_per_namespace(&self) -> usize {
        self.templates.len()
    }

    /// Decides every copy this rule wants in `namespaces` (some of [`Self::targets`]),
    /// given what `found` says is where each belongs.
    pub fn plan_copies<'f>(
        &self,
        namespaces: &[&str],
        found: impl Fn(&str, &str) -> Found<'f>,
        plan: &mut RulePlan,
    ) {
        for namespace in namespaces {
            for template in &self.templates {
                let name = template.source.info.name.as_str();
                let found = found(namespace, name);
                match self.world.owner_at(self.rule.kind, namespace, name, found.holder()) {
                    Some((owner, owner_source))
                        if owner.id != self.rule.id || owner_source.uid != template.source.info.uid =>
                    {
                        let holder = if owner.id == self.rule.id {
                            format!("{} from {}/{}", owner.id, owner_source.namespace, owner_source.name)
                        } else {
                            owner.id.to_string()
                        };
                        let key = template.key(namespace);
                        let reason = ConflictReason::ClaimedByOtherRule(holder);
                        plan.changes.push(Change::Conflict { key, reason });
                    }
                    _ => {
                        plan.wanted += 1;
                        decide(template, namespace, found, plan);
                    }
                }
            }
        }
    }

    /// Copies this rule made (`own`) that it no longer wants: deleted, unless another rule
    /// wants them, in which case that rule is named so it can be woken to take them over.
    /// Copies in a namespace being deleted are left to go with it.
    pub fn stale_copies<'c>(
        &self,
        own: impl IntoIterator<Item = (&'c str, &'c str, &'c CopyState)>,
        plan: &mut RulePlan,
    ) {
        for (namespace, name, copy) in own {
            let active = self.world.namespaces.get(namespace).is_some_and(|namespace| namespace.active);
            if copy.deleting || !active || self.wants(namespace, name) {
                continue;
            }
            match self.world.owner_at(self.rule.kind, namespace, name, copy.rule.as_deref()) {
                // Another rule wants the place: it takes the copy over in its pass. This rule
                // may be the one "owning" it by metadata while none of its sources there may be
                // copied (a Secret whose type only its content tells); handing the copy to
                // itself would wake its own pass for ever, so such a copy is deleted.
                Some((owner, _)) if owner.id != self.rule.id => {
                    plan.hand_over.insert(owner.id.clone());
                }
                _ => plan.changes.push(Change::Delete {
                    key: CopyKey {
                        kind: self.rule.kind,
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                    },
                    uid: copy.uid.to_string(),
                    seen_version: copy.seen_version(),
                }),
            }
        }
    }

    /// Whether this rule wants a copy at this place (whether or not it wins it).
    fn wants(&self, namespace: &str, name: &str) -> bool {
        self.target_set.contains(namespace) && self.source_names.contains(name)
    }
}

/// Compares one copy this rule owns with what is where it belongs.
fn decide(template: &CopyTemplate<'_>, namespace: &str, found: Found<'_>, plan: &mut RulePlan) {
    let state = match found {
        Found::Nothing => return plan.changes.push(Change::Create(template.into_namespace(namespace))),
        Found::Unknown => {
            return plan.changes.push(Change::CreateIfAbsent(template.into_namespace(namespace)));
        }
        Found::Unmanaged => {
            let key = template.key(namespace);
            return plan.changes.push(Change::Conflict { key, reason: ConflictReason::NotManagedByKopper });
        }
        // Its deletion will be seen and the copy created again then.
        Found::Copy(state) if state.deleting => {
            plan.being_deleted += 1;
            return;
        }
        Found::Copy(state) => state,
    };
    if state.holds(template.content, &template.marks) {
        return plan.copy_in_sync(namespace);
    }
    let unchangeable = (state.immutable && state.content != template.content)
        || state.secret_type.as_deref() != template.source.payload.secret_type.as_deref();
    let copy = template.into_namespace(namespace);
    let existing_uid = state.uid.to_string();
    let seen_version = state.seen_version();
    if unchangeable {
        plan.changes.push(Change::Replace { existing_uid, seen_version, copy });
    } else {
        plan.changes.push(Change::Update { existing_uid, seen_version, copy });
    }
}

/// Decides everything `rule` must do in one go, given the world, its sources as read (by
/// uid) and what is where its copies belong (by key; kopper's copies there of this rule
/// are the copies it made). For `kopper plan` and tests; the engine asks a [`RulePass`]
/// a few namespaces at a time.
pub fn plan_rule(
    rule: &Rule,
    world: &World<'_>,
    sources: &HashMap<String, Source>,
    existing: &BTreeMap<CopyKey, Existing>,
) -> RulePlan {
    let pass = RulePass::new(rule, world, sources);
    let mut plan = RulePlan { sources_matched: pass.sources_matched, ..RulePlan::default() };
    let found = |namespace: &str, name: &str| {
        let key = CopyKey { kind: rule.kind, namespace: namespace.to_owned(), name: name.to_owned() };
        existing.get(&key).map_or(Found::Nothing, Existing::found)
    };
    pass.plan_copies(pass.targets(), found, &mut plan);
    pass.stale_copies(own_copies(&rule.id, &rule.uid, rule.kind, existing), &mut plan);
    plan
}

/// The copies of `kind` in `existing` that `rule` (whose object has uid `uid`) made.
pub fn own_copies<'c>(
    rule: &RuleId,
    uid: &'c str,
    kind: ObjectKind,
    existing: &'c BTreeMap<CopyKey, Existing>,
) -> impl Iterator<Item = (&'c str, &'c str, &'c CopyState)> + 'c {
    let labels = RuleLabels::of(rule);
    existing.iter().filter_map(move |(key, found)| match found {
        Existing::Copy(copy) if key.kind == kind && labels.marks(copy) && copy.deletable_by(uid) => {
            Some((key.namespace.as_str(), key.name.as_str(), copy))
        }
        _ => None,
    })
}

/// Every copy a deleted rule leaves behind (`own`, the copies it made): all are removed.
/// A rule that also wants one creates it again, with its own marks.
pub fn cleanup<'c>(
    kind: ObjectKind,
    own: impl IntoIterator<Item = (&'c str, &'c str, &'c CopyState)>,
) -> Vec<Change> {
    own.into_iter()
        .filter(|(_, _, copy)| !copy.deleting)
        .map(|(namespace, name, copy)| Change::Delete {
            key: CopyKey { kind, namespace: namespace.to_owned(), name: name.to_owned() },
            uid: copy.uid.to_string(),
            seen_version: copy.seen_version(),
        })
        .collect()
}

/// The rules an event on `object` concerns: those it is a source of, the one whose copy it
/// is, and those that want a copy where it is (so a conflict can clear when it goes away).
pub fn rules_affected_by<'a>(
    rules: &'a [Rule],
    kind: ObjectKind,
    object: &'a ObjectInfo,
    source_named: impl Fn(&Rule, &str) -> bool + 'a,
) -> impl Iterator<Item = &'a RuleId> + 'a {
    rules
        .iter()
        .filter(move |rule| rule.kind == kind)
        .filter(move |rule| {
            let replicated_by = object.replicated_by();
            rule.sources.matches(object)
                || replicated_by.is_some_and(|label| RuleLabels::of(&rule.id).is(label))
                || wants_copy_at(rule, &object.namespace, &object.name, &source_named)
        })
        .map(|rule| &rule.id)
}

/// Whether `rule` wants a copy named `name` in `namespace` (whether or not it wins it): an
/// object there, of whatever origin, may block or free that copy.
pub fn wants_copy_at(
    rule: &Rule,
    namespace: &str,
    name: &str,
    source_named: impl Fn(&Rule, &str) -> bool,
) -> bool {
    !rule.sources.namespaces.iter().any(|source| source == namespace) && source_named(rule, name)
}

#[cfg(test)]
mod tests;
