//! What the replication engine works with: the identities of rules, objects and copies,
//! the labels and annotations that mark a copy, and a copy reduced to digests. Every other
//! file of the engine builds on these; they depend on nothing of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::num::NonZeroU64;
use std::sync::{Arc, LazyLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::{ApiResource, ObjectMeta, Selector, SelectorExt};
use serde_json::Value;

use super::shape::Shape;
use super::types::DeletionPolicy;
use crate::kinds::AllowedKind;
use crate::patterns::glob_matches;
use crate::tenancy::{CREDENTIAL_SECRET_TYPES, Consent, DestinationPolicy, ProtectedNamespaces};

/// The controller name in kopper's field manager (`kopper/replication`): one engine writes
/// the copies of both kinds of rule.
pub const FIELD_MANAGER_NAME: &str = "replication";
/// The controller that runs ReplicationRules' passes, as metrics and logs name it.
pub const RULE_CONTROLLER: &str = "replication-rule";
/// The controller that runs ConfigMapSyncs' passes, as metrics and logs name it.
pub const SYNC_CONTROLLER: &str = "config-map-sync";
/// The controller that runs SecretSyncs' passes, as metrics and logs name it.
pub const SECRET_SYNC_CONTROLLER: &str = "secret-sync";

/// The controller that runs the passes of rules of `kind`, as metrics name it.
pub fn controller_of(kind: RuleKind) -> &'static str {
    match kind {
        RuleKind::ReplicationRule => RULE_CONTROLLER,
        RuleKind::ConfigMapSync => SYNC_CONTROLLER,
        RuleKind::SecretSync => SECRET_SYNC_CONTROLLER,
    }
}

/// Holds a rule until its copies are removed.
pub const FINALIZER: &str = "kopper.dev/replication";

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
/// The label (key, value) by which Helm's secret and configmap drivers find release records.
pub const HELM_OWNER_LABEL: (&str, &str) = ("owner", "helm");
/// Label of kopper's Bucket controller on the Secrets it writes. An object carrying it is the
/// Bucket controller's, whatever other labels it has (a tenant may add kopper's rule label
/// to it): were both controllers to claim one Secret, each would rewrite the other's, and
/// every round would cost an IAM access key.
pub const BUCKET_SECRET_LABEL: &str = "kopper.dev/bucket";
pub const SOURCE_NAMESPACE_ANNOTATION: &str = "kopper.dev/source-namespace";
pub const SOURCE_NAME_ANNOTATION: &str = "kopper.dev/source-name";
pub const SOURCE_UID_ANNOTATION: &str = "kopper.dev/source-uid";
/// Marks a copy whose rule was deleted with `deletionPolicy: Orphan`, in place of the rule's
/// [`REPLICATED_BY_LABEL`]: no rule deletes or updates it; a rule copying the same source
/// (its [`SOURCE_UID_ANNOTATION`]) into its place takes it over.
pub const ORPHANED_LABEL: &str = "kopper.dev/orphaned";
/// What the rule left out of a copy and added to it, as a digest (see
/// [`Shape::marker`](super::shape::Shape::marker)); absent when nothing was.
pub const SHAPE_ANNOTATION: &str = "kopper.dev/shape";
/// The source's resourceVersion the copy was written from: a copy whose annotation matches
/// its source and that nobody edited since is known to be in sync without reading it.
pub const SOURCE_VERSION_ANNOTATION: &str = "kopper.dev/source-resource-version";

/// Annotations that describe the source object itself, not its content, and would mislead
/// anyone (or any tool) reading them on a copy.
pub const SOURCE_ONLY_ANNOTATIONS: [&str; 2] =
    ["kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision"];
/// Hex digits of the rule digest in [`REPLICATED_BY_LABEL`]: 240 bits, far past any collision
/// a tenant could search for.
const RULE_DIGEST_HEX: usize = 60;

/// The kinds of object the engine replicates: ConfigMaps and Secrets, always, and the kinds
/// the admin allows with `--replicate-kinds` ([`AllowedKind`], made once per configured kind
/// at start and never freed, so this stays `Copy` and cheap to compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
    /// Any other namespaced kind the admin allows: copied whole, but for its identity and
    /// what the server owns (see [`Payload::generic`]).
    Other(&'static AllowedKind),
}

impl ObjectKind {
    /// The kinds always replicated, whatever the flags say.
    pub const ALL: [ObjectKind; 2] = [ObjectKind::ConfigMap, ObjectKind::Secret];

    /// Whether copies of this kind are judged by what kopper wrote rather than by content
    /// (see [`Renderings`]): the API server fills in and defaults fields of such kinds.
    pub fn is_generic(self) -> bool {
        matches!(self, Self::Other(_))
    }

    /// The resource this kind is served as, if known (an allowed kind, once discovery found it).
    pub fn api_resource(self) -> Option<ApiResource> {
        match self {
            Self::ConfigMap => Some(ApiResource::erase::<ConfigMap>(&())),
            Self::Secret => Some(ApiResource::erase::<Secret>(&())),
            Self::Other(kind) => kind.resource().cloned(),
        }
    }

    /// Whether this kind is one of the API group `group`, kind `kind`.
    pub fn is(self, group: &str, kind: &str) -> bool {
        matches!(self, Self::Other(allowed) if allowed.entry.group == group && allowed.entry.kind == kind)
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
            Self::Other(kind) => &kind.entry.kind,
        })
    }
}

/// The custom resources that front the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleKind {
    ReplicationRule,
    ConfigMapSync,
    SecretSync,
}

impl RuleKind {
    /// The resource's kind, as `kubectl` and a copy's [`RULE_ANNOTATION`] name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplicationRule => "ReplicationRule",
            Self::ConfigMapSync => "ConfigMapSync",
            Self::SecretSync => "SecretSync",
        }
    }
}

/// Identifies one rule across both custom resources.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId {
    pub kind: RuleKind,
    pub name: String,
    /// Set for namespaced rules (a tenant's: ConfigMapSync, SecretSync).
    pub namespace: Option<String>,
}

impl RuleId {
    pub fn replication_rule(name: &str) -> Self {
        Self { kind: RuleKind::ReplicationRule, name: name.to_owned(), namespace: None }
    }

    pub fn config_map_sync(namespace: &str, name: &str) -> Self {
        Self { kind: RuleKind::ConfigMapSync, name: name.to_owned(), namespace: Some(namespace.to_owned()) }
    }

    pub fn secret_sync(namespace: &str, name: &str) -> Self {
        Self { kind: RuleKind::SecretSync, name: name.to_owned(), namespace: Some(namespace.to_owned()) }
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
            RuleKind::SecretSync => "ss-",
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

/// Rules whose objects exist, not being deleted, that are not in force but keep their copies
/// as they are: refused only for a shape kopper cannot write, or unreadable. By the label
/// value that marks their copies. Such a copy still holds its place against the rules the
/// kept rule would keep it from, and goes where the rule's tenant may no longer write (see
/// [`World::keeping`](super::desired::World::keeping) and
/// [`copies_without_consent`](super::desired::copies_without_consent)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptRules(std::collections::HashMap<String, RuleId>);

impl KeptRules {
    pub fn new(ids: impl IntoIterator<Item = RuleId>) -> Self {
        Self(ids.into_iter().map(|id| (id.label_value(), id)).collect())
    }

    /// The kept rule whose copies carry the label value `label`, if any.
    pub fn holding(&self, label: &str) -> Option<&RuleId> {
        self.0.get(label)
    }

    /// The namespace of the tenant whose kept rule made `copy`, if one did.
    pub fn tenant_of(&self, copy: &CopyState) -> Option<&str> {
        self.holding(copy.rule.as_deref()?)?.namespace.as_deref()
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.namespace) {
            (kind, Some(namespace)) => write!(f, "{}.{}.{namespace}", kind.as_str(), self.name),
            (kind, None) => write!(f, "{}.{}", kind.as_str(), self.name),
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
    /// What the copies carry of their sources.
    pub shape: Arc<Shape>,
    /// What becomes of the copies when the rule object is deleted.
    pub deletion_policy: DeletionPolicy,
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
    /// copy; others of those types are never sources. `None`: any (an admin's rule for
    /// ConfigMaps).
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
    /// [`World::owner_at`](super::desired::World::owner_at)): an admin's ReplicationRule
    /// before any tenant's ConfigMapSync, then by kind, name and namespace.
    pub fn precedence(&self) -> &RuleId {
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

    /// The cluster credential type (see [`CREDENTIAL_SECRET_TYPES`]) an object is, told from
    /// its metadata alone (the watches hold no more), as the API server and Helm mark them.
    /// Helm finds its release records by their labels, not their type or name (its secret
    /// and configmap drivers list `owner=helm`), so any object labelled `owner: helm`, a
    /// ConfigMap too, counts as a release record: a copy of it would be taken by `helm` in
    /// the destination for a release installed there.
    pub fn credential_type(&self) -> Option<&'static str> {
        if self.is_helm_release_record() {
            Some(CREDENTIAL_SECRET_TYPES[2])
        } else if self.annotations.contains_key(SERVICE_ACCOUNT_NAME_ANNOTATION) {
            Some(CREDENTIAL_SECRET_TYPES[0])
        } else if self.name.starts_with("bootstrap-token-") {
            Some(CREDENTIAL_SECRET_TYPES[1])
        } else {
            None
        }
    }

    /// Carries the label by which Helm lists its release records ([`HELM_OWNER_LABEL`]).
    pub fn is_helm_release_record(&self) -> bool {
        self.labels.get(HELM_OWNER_LABEL.0).is_some_and(|owner| owner == HELM_OWNER_LABEL.1)
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

/// The content a copy takes from its source. Secrets keep their bytes in `binary_data`;
/// any other kind its top-level fields in `fields`. Its `Debug` form names the keys and never
/// shows a value, so no log or error message can carry a Secret's content.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Payload {
    pub data: BTreeMap<String, String>,
    pub binary_data: BTreeMap<String, ByteString>,
    /// A Secret's type; `Opaque` when the source has none, as the API server defaults it.
    pub secret_type: Option<String>,
    pub immutable: bool,
    /// Of a kind other than ConfigMap and Secret: every top-level field but `apiVersion`,
    /// `kind`, `metadata` and `status` (see [`Payload::generic`]).
    pub fields: BTreeMap<String, Value>,
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payload")
            .field("data", &self.data.keys().collect::<Vec<_>>())
            .field("binary_data", &self.binary_data.keys().collect::<Vec<_>>())
            .field("secret_type", &self.secret_type)
            .field("immutable", &self.immutable)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Top-level fields of an object that are not its content: its identity and what the server
/// owns. Labels and annotations reach a copy through its rule's shaping, not as content.
const NOT_CONTENT: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];

/// An object of a generic kind as kopper decodes it from the wire: its metadata as `M`
/// (a struct naming only the fields kopper reads, so `managedFields` is skipped unread) and
/// its content fields (see [`Payload::generic`]). What is not content (`apiVersion`, `kind`,
/// `status`) is skipped unread too. Decoding a whole object instead (a `DynamicObject`, or a
/// JSON map) builds a tree per field manager on every event and every write's answer: in a
/// fan-out to 10,000 NetworkPolicies that was most of kopper's own cost.
pub struct GenericWire<M> {
    pub metadata: M,
    pub content: Payload,
}

impl<'de, M: serde::Deserialize<'de> + Default> serde::Deserialize<'de> for GenericWire<M> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<M>(std::marker::PhantomData<M>);

        impl<'de, M: serde::Deserialize<'de> + Default> serde::de::Visitor<'de> for Fields<M> {
            type Value = GenericWire<M>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut metadata = None;
                let mut fields = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" {
                        metadata = Some(map.next_value::<M>()?);
                    } else if NOT_CONTENT.contains(&key.as_str()) {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        let value = map.next_value::<Value>()?;
                        fields.insert(key, value);
                    }
                }
                let content = Payload { fields, ..Payload::default() };
                Ok(GenericWire { metadata: metadata.unwrap_or_default(), content })
            }
        }

        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

impl Payload {
    /// The content of an object of a kind other than ConfigMap and Secret, from its
    /// top-level fields as the API server sends them: all of them but `apiVersion`, `kind`,
    /// `metadata` and `status`.
    /// Sources and copies (as watched, or as a write's answer) are read through here alike.
    pub fn generic(fields: impl IntoIterator<Item = (String, Value)>) -> Self {
        Self {
            fields: fields.into_iter().filter(|(key, _)| !NOT_CONTENT.contains(&key.as_str())).collect(),
            ..Self::default()
        }
    }

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
            fields: BTreeMap::new(),
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
            fields: BTreeMap::new(),
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
        let fields = CanonicalJson(&self.fields);
        digest(&(&self.data, &binary, &self.secret_type, self.immutable, fields))
    }
}

/// JSON content hashed the same whatever order its objects' keys came in (serde_json may
/// keep insertion order), so a copy as watched and as a write's answer give one digest.
struct CanonicalJson<'a>(&'a BTreeMap<String, Value>);

impl Hash for CanonicalJson<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for (key, value) in self.0 {
            key.hash(state);
            hash_value(value, state);
        }
    }
}

fn hash_value<H: std::hash::Hasher>(value: &Value, state: &mut H) {
    match value {
        Value::Null => 0u8.hash(state),
        Value::Bool(flag) => (1u8, flag).hash(state),
        Value::Number(number) => (2u8, number.to_string()).hash(state),
        Value::String(text) => (3u8, text).hash(state),
        Value::Array(items) => {
            (4u8, items.len()).hash(state);
            items.iter().for_each(|item| hash_value(item, state));
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(state);
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            for (key, value) in entries {
                key.hash(state);
                hash_value(value, state);
            }
        }
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
    /// [`shape_digest`] of its [`SHAPE_ANNOTATION`].
    pub shape: u64,
    /// A digest of the uid of its source ([`SOURCE_UID_ANNOTATION`]) when it is a copy
    /// orphaned from its rule ([`ORPHANED_LABEL`], kopper's managed-by label, no rule's label,
    /// no other controller's mark): no rule's to delete, but a rule copying that source takes
    /// it over. A digest, as every copy holds the field.
    pub orphan_source: Option<NonZeroU64>,
    /// For such an orphan left by a tenant's rule, a ConfigMapSync or a SecretSync (as its
    /// [`RULE_ANNOTATION`] says), the
    /// tenant's namespace, whose consent it was made under: an orphan ranks no higher than
    /// the kind of rule that left it ([`CopyState::outranked_by`]), and goes when that
    /// consent does ([`CopyState::orphaned_without_consent`]).
    pub orphan_tenant: Option<Arc<str>>,
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

    /// Whether the copy holds `content` (a [`Payload::digest`]), was shaped as `shape` says
    /// (a [`shape_digest`]) and carries every mark in `marks`; marks others added are not
    /// looked at.
    pub fn holds(&self, content: u64, shape: u64, marks: &Marks) -> bool {
        self.content == content && self.shape == shape && self.marks.contains_all(marks)
    }

    /// Whether this is a copy orphaned from its rule, made from the source of uid `source`.
    pub fn orphan_of(&self, source: &str) -> bool {
        self.orphan_source == Some(source_digest(source))
    }

    /// Whether a rule of `kind` writing its own copy here replaces this orphan of another
    /// source: an orphan ranks as the kind of rule that left it, so the admin's
    /// ReplicationRule replaces what a tenant's ConfigMapSync or SecretSync left, never the other way.
    pub fn outranked_by(&self, kind: RuleKind) -> bool {
        self.orphan_tenant.is_some() && kind == RuleKind::ReplicationRule
    }

    /// Whether this is an orphan a tenant's rule left in `namespace` that kopper would no
    /// longer copy into there from that tenant (`allowed`: whether the destination policy
    /// lets the tenant named write into the namespace now): kopper's copy made under a
    /// consent that is gone (withdrawn, or the namespace protected since).
    pub fn orphaned_without_consent(&self, allowed: impl FnOnce(&str) -> bool) -> bool {
        self.orphan_tenant.as_deref().is_some_and(|tenant| !allowed(tenant))
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
            state.orphan_source = None;
            state.orphan_tenant = None;
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
        // Another controller's object is no rule's copy, whatever labels it carries.
        let bucket = labels.contains_key(BUCKET_SECRET_LABEL);
        let orphan = !bucket
            && !labels.contains_key(REPLICATED_BY_LABEL)
            && labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY_VALUE)
            && labels.get(ORPHANED_LABEL).is_some_and(|value| value == "true");
        Self {
            uid: uid.into(),
            rule: labels.get(REPLICATED_BY_LABEL).filter(|_| !bucket).map(|rule| Arc::from(rule.as_str())),
            shape: shape_digest(annotations.get(SHAPE_ANNOTATION).map(String::as_str)),
            orphan_source: annotations
                .get(SOURCE_UID_ANNOTATION)
                .filter(|_| orphan)
                .map(|uid| source_digest(uid)),
            orphan_tenant: annotations
                .get(RULE_ANNOTATION)
                .filter(|_| orphan)
                .and_then(|rule| tenant_rule_namespace(rule))
                .map(Arc::from),
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

/// The namespace of the tenant's rule a [`RULE_ANNOTATION`] names (`ConfigMapSync.<name>.
/// <namespace>` or `SecretSync.<name>.<namespace>`: a namespace holds no dot), if it names
/// one.
fn tenant_rule_namespace(rule: &str) -> Option<&str> {
    let (_, namespace) = [RuleKind::ConfigMapSync, RuleKind::SecretSync]
        .into_iter()
        .find_map(|kind| rule.strip_prefix(kind.as_str())?.strip_prefix('.'))?
        .rsplit_once('.')?;
    (!namespace.is_empty()).then_some(namespace)
}

/// A digest of a source's uid, never zero.
fn source_digest(uid: &str) -> NonZeroU64 {
    NonZeroU64::new(digest(&(SOURCE_UID_ANNOTATION, uid))).unwrap_or(NonZeroU64::MIN)
}

/// A digest of a copy's [`SHAPE_ANNOTATION`] value (`None`: absent), to compare the shaping a
/// copy was written with against a rule's without holding the string.
pub fn shape_digest(marker: Option<&str>) -> u64 {
    digest(&marker)
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

/// Whether the object `meta` describes, as a fresh read shows it, is a copy orphaned from
/// its rule and made from the source of uid `source` (see [`CopyState::orphan_source`]).
pub fn is_orphan_of(meta: &ObjectMeta, source: &str) -> bool {
    CopyState::new(meta, &Payload::default()).orphan_of(source)
}

/// Whether the object `meta` describes, as a fresh read shows it, is a copy orphaned from
/// its rule that a rule of `kind` copying the source of uid `source` may write over: an
/// orphan of that source, or one left by a rule of a kind `kind` outranks.
pub fn is_orphan_for(meta: &ObjectMeta, source: &str, kind: RuleKind) -> bool {
    let state = CopyState::new(meta, &Payload::default());
    state.orphan_of(source) || (state.orphan_source.is_some() && state.outranked_by(kind))
}

/// `version` as a number, if writing the number back gives `version` again (resourceVersions
/// are opaque: only one written exactly as the server wrote it may be sent back).
pub fn canonical_number(version: &str) -> Option<NonZeroU64> {
    version.parse().ok().filter(|number: &NonZeroU64| number.to_string() == version)
}

/// How the API server rendered kopper's writes of copies of generic kinds
/// ([`ObjectKind::is_generic`]), which it fills in and defaults: a copy is judged by what
/// kopper wrote, never by comparing the server's rendering with the source.
pub trait Renderings {
    /// What the copy at `namespace/name`, whose rendering (as watched) has digest `in_place`,
    /// is to content of digest `desired`.
    fn judge(&self, namespace: &str, name: &str, desired: u64, in_place: u64) -> Rendering;
}

/// What kopper knows of a copy of a generic kind against the content it wants there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rendering {
    /// It is what kopper's write of that content was rendered as (there or elsewhere).
    InSync,
    /// It is as kopper's last write left it, of other content: to be written.
    Outdated,
    /// Nothing known (no write since a restart), or changed by someone since: a dry-run of
    /// the write tells whether it would change anything.
    Unknown,
}

/// Knows no rendering: every copy of a generic kind is checked with a dry-run.
pub struct NoRenderings;

impl Renderings for NoRenderings {
    fn judge(&self, _: &str, _: &str, _: u64, _: u64) -> Rendering {
        Rendering::Unknown
    }
}

/// What one scoped watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Every object of the kind in one namespace.
    Namespace(String),
    /// Every object of the kind with one name, in any namespace.
    Name(String),
    /// Every object of the kind.
    Cluster,
}
