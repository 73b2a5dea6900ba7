//! What copies should exist and what to do about the objects that are there: pure functions
//! of rules, source objects, namespaces and existing copies, so every decision the engine
//! makes is unit-tested without a server.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::model::*;
use super::shape::{Shape, keys_required_by};
use super::types::DeletionPolicy;

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
    /// `labels` and `annotations`, the digest of `payload` and of its shaping marker.
    pub marks: Arc<Marks>,
    pub content: u64,
    pub shape: u64,
    /// Whether its rule keeps only some keys of the source's data or changes its type.
    pub reshaped: bool,
    /// For a kind the server renders on its own terms ([`ObjectKind::is_generic`]): the
    /// rendering digest of the copy in place, when its marks are right and only whether the
    /// server would render this content as it stands is unknown (no write of kopper's since
    /// a restart, say). The write is then a dry-run first, and made only if it would change
    /// something.
    pub rendering_check: Option<u64>,
}

/// What every copy of one source made by one rule has in common; built once per source, then
/// stamped into each target namespace with [`CopyTemplate::into_namespace`].
pub struct CopyTemplate<'a> {
    rule: &'a RuleId,
    kind: ObjectKind,
    source: &'a Source,
    labels: Arc<BTreeMap<String, String>>,
    annotations: Arc<BTreeMap<String, String>>,
    /// The source's content as the rule shapes it.
    payload: Arc<Payload>,
    /// What a copy in sync carries, to compare with [`CopyState`].
    marks: Arc<Marks>,
    content: u64,
    shape: u64,
    reshaped: bool,
    /// The marks a copy orphaned by another rule must carry to be taken over as it is:
    /// `marks` but those naming the rule.
    adoptable: Arc<Marks>,
}

impl CopyTemplate<'_> {
    pub fn into_namespace(&self, namespace: &str) -> DesiredCopy {
        DesiredCopy {
            key: self.key(namespace),
            rule: self.rule.clone(),
            source: self.source.info.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            payload: self.payload.clone(),
            marks: self.marks.clone(),
            content: self.content,
            shape: self.shape,
            reshaped: self.reshaped,
            rendering_check: None,
        }
    }

    pub fn key(&self, namespace: &str) -> CopyKey {
        CopyKey { kind: self.kind, namespace: namespace.to_owned(), name: self.source.info.name.clone() }
    }
}

/// Builds the copy of `source` that `rule` puts into `namespace`, shaped by default (see
/// [`copy_template`]).
pub fn desired_copy(
    rule: &RuleId,
    rule_uid: &str,
    kind: ObjectKind,
    source: &Source,
    namespace: &str,
) -> DesiredCopy {
    copy_template(rule, rule_uid, kind, source, &Shape::default()).into_namespace(namespace)
}

/// What every copy `rule` makes of `source` holds: the source's content as `shape` keeps it;
/// the source's labels and annotations that `shape` copies (never server-set metadata or
/// kopper's marks), the labels `shape` adds, and marks naming the rule (and the uid of its
/// object), the source and its version, and what `shape` left out.
pub fn copy_template<'a>(
    rule: &'a RuleId,
    rule_uid: &str,
    kind: ObjectKind,
    source: &'a Source,
    shape: &Shape,
) -> CopyTemplate<'a> {
    let (mut labels, dropped_labels) =
        shaped_marks(&source.info.labels, |key, value| is_user_key(key) && shape.labels.copies(key, value));
    labels.extend(shape.extra_labels.iter().filter(|(key, _)| is_user_key(key)).map(clone_pair));
    let (mut annotations, dropped_annotations) = shaped_marks(&source.info.annotations, |key, value| {
        is_user_key(key) && !SOURCE_ONLY_ANNOTATIONS.contains(&key) && shape.annotations.copies(key, value)
    });
    let marker = shape.marker(&dropped_labels, &dropped_annotations);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
    annotations.insert(SOURCE_NAMESPACE_ANNOTATION.to_owned(), source.info.namespace.clone());
    annotations.insert(SOURCE_NAME_ANNOTATION.to_owned(), source.info.name.clone());
    annotations.insert(SOURCE_UID_ANNOTATION.to_owned(), source.info.uid.clone());
    annotations.insert(SOURCE_VERSION_ANNOTATION.to_owned(), source.info.resource_version.clone());
    if let Some(marker) = &marker {
        annotations.insert(SHAPE_ANNOTATION.to_owned(), marker.clone());
    }
    let adoptable = Arc::new(Marks::new(&labels, &annotations));
    labels.insert(REPLICATED_BY_LABEL.to_owned(), rule.label_value());
    annotations.insert(RULE_ANNOTATION.to_owned(), rule.to_string());
    annotations.insert(RULE_UID_ANNOTATION.to_owned(), rule_uid.to_owned());
    let payload = if shape.reshapes_data() {
        Arc::new(shaped_payload(shape, kind, &source.payload))
    } else {
        source.payload.clone()
    };
    CopyTemplate {
        rule,
        kind,
        source,
        marks: Arc::new(Marks::new(&labels, &annotations)),
        content: payload.digest(),
        shape: shape_digest(marker.as_deref()),
        reshaped: shape.reshapes_data(),
        adoptable,
        payload,
        labels: Arc::new(labels),
        annotations: Arc::new(annotations),
    }
}

/// The entries of `marks` that `copies` keeps, and the keys it leaves out.
fn shaped_marks(
    marks: &BTreeMap<String, String>,
    copies: impl Fn(&str, &str) -> bool,
) -> (BTreeMap<String, String>, Vec<&str>) {
    let mut kept = BTreeMap::new();
    let mut dropped = Vec::new();
    for (key, value) in marks {
        if copies(key, value) {
            kept.insert(key.clone(), value.clone());
        } else if is_user_key(key) && !SOURCE_ONLY_ANNOTATIONS.contains(&key.as_str()) {
            dropped.push(key.as_str());
        }
    }
    (kept, dropped)
}

/// `payload` with only the keys `shape` keeps, as the type `shape` names (a Secret's).
pub fn shaped_payload(shape: &Shape, kind: ObjectKind, payload: &Payload) -> Payload {
    let keep = |key: &String| shape.keeps_key(key);
    Payload {
        data: payload.data.iter().filter(|(key, _)| keep(key)).map(clone_pair).collect(),
        binary_data: payload
            .binary_data
            .iter()
            .filter(|(key, _)| keep(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        secret_type: match kind {
            ObjectKind::Secret => shape.secret_type.clone().or_else(|| payload.secret_type.clone()),
            ObjectKind::ConfigMap | ObjectKind::Other(_) => payload.secret_type.clone(),
        },
        immutable: payload.immutable,
        fields: payload.fields.clone(),
    }
}

/// Why a source is copied otherwise than its rule asks, or not at all.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShapeProblem {
    /// The source (`namespace/name`) lacks keys the rule lists; its copies hold the others.
    KeysMissing { source: String, keys: Vec<String> },
    /// The source lacks every key the rule lists: an empty copy would serve no one, so the
    /// source is not copied and its copies are left as they are.
    NoListedKey { source: String, keys: Vec<String> },
    /// The copy's type requires keys the rule leaves out: the API server would refuse it, so
    /// the source is not copied and its copies are left as they are.
    TypeNeedsKeys { source: String, secret_type: String, keys: Vec<&'static str> },
    /// The source the rule names is a credential of the cluster
    /// ([`crate::tenancy::CREDENTIAL_SECRET_TYPES`]), which a tenant's rule never copies: no
    /// copy is written, and those made before it became one are removed.
    CredentialType { source: String, secret_type: String },
    /// The source the rule names was made by kopper (a copy another rule put there, or a
    /// Bucket's credentials): never a source, so what one tenant shared with another is not
    /// passed on. No copy is written.
    MadeByKopper { source: String },
    /// The ConfigMap the rule names is labelled `owner: helm`, which Helm's configmap driver
    /// takes for a release record in any namespace it lands in: a tenant's rule never copies
    /// one. No copy is written, and those made before are removed.
    HelmReleaseRecord { source: String },
}

impl ShapeProblem {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::KeysMissing { .. } | Self::NoListedKey { .. } => "SourceKeysMissing",
            Self::TypeNeedsKeys { .. } => "SecretTypeNeedsKeys",
            Self::CredentialType { .. } => "CredentialTypeRefused",
            Self::MadeByKopper { .. } => "SourceMadeByKopper",
            Self::HelmReleaseRecord { .. } => "HelmReleaseRefused",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::KeysMissing { source, keys } => format!(
                "{source} lacks {} listed in spec.keys; its copies hold the other listed keys",
                listed(keys)
            ),
            Self::NoListedKey { source, keys } => format!(
                "{source} holds none of the keys spec.keys lists ({}), so it is not copied; its copies are left \
                 as they are meanwhile",
                listed(keys)
            ),
            Self::TypeNeedsKeys { source, secret_type, keys } => format!(
                "{source} would be copied as a {secret_type} Secret without {}, which that type requires and \
                 spec.keys leaves out; set spec.secretType (Opaque, say) or list those keys in spec.keys. \
                 Its copies are left as they are meanwhile",
                listed(keys)
            ),
            Self::CredentialType { source, secret_type } if secret_type == HELM_RELEASE_TYPE => format!(
                "{source} is a Helm release record (type {secret_type}, or labelled owner=helm, by which Helm \
                 finds its records, whatever their type), which is never shared this way: Helm would take a copy \
                 for a release of the namespace it lands in; nothing is copied, and copies made before are removed"
            ),
            Self::CredentialType { source, secret_type } => format!(
                "{source} is a {secret_type} Secret, a credential of the cluster, which is never shared this \
                 way; nothing is copied, and copies made before are removed"
            ),
            Self::HelmReleaseRecord { source } => format!(
                "{source} is labelled owner=helm, by which Helm finds its release records: Helm would take a copy \
                 for a release of the namespace it lands in, so it is never shared this way; nothing is copied, \
                 and copies made before are removed. If it is no Helm release, remove that label from it"
            ),
            Self::MadeByKopper { source } => format!(
                "{source} was made by kopper (a copy shared with this namespace, or a Bucket's credentials), \
                 and kopper never copies what it made: share the original from the namespace that owns it"
            ),
        }
    }

    /// Whether the source is not copied at all.
    pub fn refuses_copy(&self) -> bool {
        !matches!(self, Self::KeysMissing { .. })
    }

    /// Whether the source is no source at all (rather than one copied otherwise): the rule
    /// names one that exists, but kopper never copies it.
    pub fn refuses_source(&self) -> bool {
        matches!(
            self,
            Self::CredentialType { .. } | Self::MadeByKopper { .. } | Self::HelmReleaseRecord { .. }
        )
    }
}

/// Why the one source `rule` names (a tenant's rule's) is no source, when it exists: it is
/// a credential of the cluster, or kopper made it (`made_by_kopper`: kopper's copies watch
/// holds an object there; the source watches leave such objects out). `candidate` is the
/// object of that name as the source watch holds it, `payload_type` its `type` as read
/// (known only for a source that matched by its metadata); `None` when no object is refused.
pub fn refused_named_source(
    rule: &Rule,
    candidate: Option<&ObjectInfo>,
    payload_type: Option<&str>,
    made_by_kopper: bool,
) -> Option<ShapeProblem> {
    let (Some(name), [namespace]) = (&rule.sources.name, rule.sources.namespaces.as_slice()) else {
        return None;
    };
    let source = format!("{namespace}/{name}");
    if made_by_kopper || candidate.is_some_and(ObjectInfo::is_kopper_made) {
        return Some(ShapeProblem::MadeByKopper { source });
    }
    let secret_type = candidate.and_then(ObjectInfo::credential_type).or(payload_type)?;
    if rule.sources.may_copy_secret_type(Some(secret_type)) {
        None
    } else if rule.kind == ObjectKind::ConfigMap {
        Some(ShapeProblem::HelmReleaseRecord { source })
    } else {
        Some(ShapeProblem::CredentialType { source, secret_type: secret_type.to_owned() })
    }
}

/// The Secret type of Helm's release records.
const HELM_RELEASE_TYPE: &str = crate::tenancy::CREDENTIAL_SECRET_TYPES[2];

/// Keys named in a status message and an Event: a few, and how many more (a rule may list
/// 256 keys of 253 characters).
const NAMED_KEYS: usize = 5;

/// `keys` for a message: the first [`NAMED_KEYS`], then a count of the others.
fn listed(keys: &[impl AsRef<str>]) -> String {
    let named: Vec<&str> = keys.iter().take(NAMED_KEYS).map(AsRef::as_ref).collect();
    match keys.len().saturating_sub(NAMED_KEYS) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// What is wrong with copying `source` as `shape` says: keys it lacks, and whether its copy
/// would lack keys its type requires (then it is not copied).
pub fn shape_problems_of(shape: &Shape, kind: ObjectKind, source: &Source) -> Vec<ShapeProblem> {
    let payload = &source.payload;
    let present: BTreeSet<&str> =
        payload.data.keys().chain(payload.binary_data.keys()).map(String::as_str).collect();
    let name = || format!("{}/{}", source.info.namespace, source.info.name);
    let mut problems = Vec::new();
    let missing = shape.missing_keys(&present);
    let listed = shape.keys.as_ref().map_or(0, BTreeSet::len);
    if listed > 0 && missing.len() == listed {
        let keys = missing.into_iter().map(str::to_owned).collect();
        return vec![ShapeProblem::NoListedKey { source: name(), keys }];
    }
    if !missing.is_empty() {
        problems.push(ShapeProblem::KeysMissing {
            source: name(),
            keys: missing.into_iter().map(str::to_owned).collect(),
        });
    }
    if kind == ObjectKind::Secret && shape.reshapes_data() {
        let kept: BTreeSet<&str> = present.into_iter().filter(|key| shape.keeps_key(key)).collect();
        let secret_type = shape.secret_type.as_deref().or(payload.secret_type.as_deref()).unwrap_or("Opaque");
        let required = keys_required_by(secret_type, &kept);
        if !required.is_empty() {
            problems.push(ShapeProblem::TypeNeedsKeys {
                source: name(),
                secret_type: secret_type.to_owned(),
                keys: required,
            });
        }
    }
    problems
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
    /// Rules not in force whose copies still hold their places (see [`Self::keeping`]).
    kept: Option<&'a KeptRules>,
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
        Self { rules, namespaces, candidates, kept: None }
    }

    /// This world, where the copies of the `kept` rules (not in force, keeping their copies
    /// as they are) hold their places as they would were their rules in force: no rule
    /// takes one from them that the kept rule would keep it from (see [`keeps_from`]).
    pub fn keeping(self, kept: &'a KeptRules) -> Self {
        Self { kept: Some(kept), ..self }
    }

    /// The kept rule whose copy is at a place (`holder`, its label) if it keeps the place
    /// from `contender`.
    fn kept_from(&self, holder: Option<&str>, contender: &RuleId) -> Option<&'a RuleId> {
        let kept = self.kept?.holding(holder?)?;
        keeps_from(kept, contender).then_some(kept)
    }

    /// The object of the name the rule names in its one source namespace (a tenant's
    /// rule's), matched or not.
    pub fn named_candidate(&self, rule: &Rule) -> Option<&'a ObjectInfo> {
        let (Some(name), [namespace]) = (&rule.sources.name, rule.sources.namespaces.as_slice()) else {
            return None;
        };
        self.candidates.get(&(namespace.as_str(), name.as_str())).copied()
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

/// Whether the rule `holder`, whose copy is at a place, would keep it from `contender` were
/// both in force (see [`World::owner_at`]): a tenant's rule keeps it from any other tenant's;
/// otherwise the first in precedence order keeps it.
fn keeps_from(holder: &RuleId, contender: &RuleId) -> bool {
    match (&holder.namespace, &contender.namespace) {
        (Some(holding), Some(tenant)) if holding != tenant => true,
        _ => holder < contender,
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
    /// A copy whose rule was deleted with `deletionPolicy: Orphan`
    /// ([`CopyState::orphan_source`]).
    Orphan(&'a CopyState),
}

impl Found<'_> {
    /// The label of the rule whose copy is there, if a copy of kopper's is.
    pub fn holder(&self) -> Option<&str> {
        match self {
            Self::Copy(state) => state.rule.as_deref(),
            Self::Nothing | Self::Unknown | Self::Unmanaged | Self::Orphan(_) => None,
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
            Self::Copy(state) if state.rule.is_some() => Found::Copy(state),
            Self::Copy(state) if state.orphan_source.is_some() => Found::Orphan(state),
            Self::Copy(_) => Found::Unmanaged,
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
    /// A copy of another source, orphaned by a rule deleted with `deletionPolicy: Orphan`.
    OrphanedCopy,
}

impl ConflictReason {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotManagedByKopper => "NotManagedByKopper",
            Self::ClaimedByOtherRule(_) => "ClaimedByOtherRule",
            Self::OrphanedCopy => "OrphanedCopy",
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
            Self::OrphanedCopy => format!(
                "{key} is a copy of another source, left by a rule deleted with deletionPolicy Orphan; it is \
                 left as it is (delete it to let this rule copy there)"
            ),
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
    /// Take over a copy orphaned by another rule that holds what this rule would write
    /// (`existing_uid`, at `seen_version` when known): one metadata patch that swaps the
    /// orphan's mark for this rule's, conditioned on the copy's resourceVersion. Its content
    /// and everything else on it are left as they are.
    Adopt {
        existing_uid: String,
        seen_version: Option<String>,
        copy: DesiredCopy,
    },
    /// A deleted rule's copy (with `deletionPolicy: Orphan`) left in place: one metadata
    /// patch that swaps the rule's label (`rule`, its value) for [`ORPHANED_LABEL`],
    /// conditioned on the copy's resourceVersion (`seen_version`, or as read).
    Orphan {
        key: CopyKey,
        uid: String,
        seen_version: Option<String>,
        rule: String,
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
            | Self::Replace { copy, .. }
            | Self::Adopt { copy, .. } => Some(copy),
            Self::Orphan { .. } | Self::Delete { .. } | Self::Conflict { .. } => None,
        }
    }

    pub fn key(&self) -> &CopyKey {
        match self {
            Self::Create(copy)
            | Self::CreateIfAbsent(copy)
            | Self::Update { copy, .. }
            | Self::Replace { copy, .. }
            | Self::Adopt { copy, .. } => &copy.key,
            Self::Orphan { key, .. } | Self::Delete { key, .. } | Self::Conflict { key, .. } => key,
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
    /// Sources copied otherwise than the rule asks, or not at all.
    pub shape_problems: Vec<ShapeProblem>,
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
    /// Sources copied otherwise than the rule asks, or not at all.
    pub shape_problems: Vec<ShapeProblem>,
}

impl<'a> RulePass<'a> {
    /// `sources` are the matched sources as read, by uid. A matched source that was not
    /// read is gone since the cache saw it; its event follows.
    pub fn new(rule: &'a Rule, world: &'a World<'a>, sources: &'a HashMap<String, Source>) -> Self {
        let matched = world.matched_sources(rule);
        let mut templates: Vec<CopyTemplate<'a>> = Vec::new();
        let mut source_names = HashSet::new();
        let mut shape_problems = Vec::new();
        let read = matched.iter().filter_map(|info| sources.get(&info.uid));
        let (copied, refused): (Vec<&Source>, Vec<&Source>) =
            read.partition(|source| rule.sources.may_copy_secret_type(source.payload.secret_type.as_deref()));
        // A credential told only by its `type` (its metadata did not show it) is no source
        // either: its copies go, as a source's that stopped matching.
        let named_candidate = world.named_candidate(rule);
        let refused_type = refused.first().and_then(|source| source.payload.secret_type.as_deref());
        if matched.is_empty() || refused_type.is_some() {
            shape_problems.extend(refused_named_source(rule, named_candidate, refused_type, false));
        }
        for source in copied {
            // A source its rule cannot copy as asked keeps the copies it has: they are still
            // wanted, not written.
            source_names.insert(source.info.name.as_str());
            let problems = shape_problems_of(&rule.shape, rule.kind, source);
            let refused = problems.iter().any(ShapeProblem::refuses_copy);
            shape_problems.extend(problems);
            if !refused {
                templates.push(copy_template(&rule.id, &rule.uid, rule.kind, source, &rule.shape));
            }
        }
        let targets = world.target_namespaces(rule);
        Self {
            rule,
            world,
            target_set: targets.iter().copied().collect(),
            source_names,
            templates,
            targets,
            sources_matched: matched.len(),
            shape_problems,
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
        renderings: &dyn Renderings,
        plan: &mut RulePlan,
    ) {
        for namespace in namespaces {
            for template in &self.templates {
                let name = template.source.info.name.as_str();
                let found = found(namespace, name);
                // The copy of a rule kept while not in force (a shape it cannot write) is
                // held, not another rule's to rewrite meanwhile.
                if let Some(kept) = self.world.kept_from(found.holder(), &self.rule.id) {
                    let key = template.key(namespace);
                    let reason = ConflictReason::ClaimedByOtherRule(kept.to_string());
                    plan.changes.push(Change::Conflict { key, reason });
                    continue;
                }
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
                        decide(template, namespace, found, renderings, plan);
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

/// Compares one copy this rule owns with what is where it belongs. A copy of a generic kind
/// is judged by what kopper wrote ([`Renderings`]): the server's rendering of it, never
/// equal to its source's content once the server fills in defaults.
fn decide(
    template: &CopyTemplate<'_>,
    namespace: &str,
    found: Found<'_>,
    renderings: &dyn Renderings,
    plan: &mut RulePlan,
) {
    let name = template.source.info.name.as_str();
    let judge = |state: &CopyState| {
        if !template.kind.is_generic() {
            return if state.content == template.content { Rendering::InSync } else { Rendering::Outdated };
        }
        renderings.judge(namespace, name, template.content, state.content)
    };
    let content_of = |state: &CopyState| match judge(state) {
        Rendering::InSync => state.content,
        // Anything but what is there.
        Rendering::Outdated | Rendering::Unknown => !state.content,
    };
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
        Found::Copy(state) | Found::Orphan(state) if state.deleting => {
            plan.being_deleted += 1;
            return;
        }
        // Left by a rule of a kind this one outranks, of another source: replaced as any of
        // this rule's copies would be.
        Found::Orphan(state)
            if !state.orphan_of(&template.source.info.uid) && !state.outranked_by(template.rule.kind) =>
        {
            let key = template.key(namespace);
            return plan.changes.push(Change::Conflict { key, reason: ConflictReason::OrphanedCopy });
        }
        // Left by a rule that copied this very source here: taken over as it is when it holds
        // what this rule would write, apart from the rule's own marks.
        Found::Orphan(state)
            if state.orphan_of(&template.source.info.uid)
                && state.holds(content_of(state), template.shape, &template.adoptable) =>
        {
            let existing_uid = state.uid.to_string();
            let seen_version = state.seen_version();
            let copy = template.into_namespace(namespace);
            return plan.changes.push(Change::Adopt { existing_uid, seen_version, copy });
        }
        Found::Copy(state) | Found::Orphan(state) => state,
    };
    let rendering = judge(state);
    if rendering == Rendering::InSync && state.holds(state.content, template.shape, &template.marks) {
        return plan.copy_in_sync(namespace);
    }
    let unchangeable = (state.immutable && state.content != template.content)
        || state.secret_type.as_deref() != template.payload.secret_type.as_deref();
    let mut copy = template.into_namespace(namespace);
    if rendering == Rendering::Unknown
        && state.shape == template.shape
        && state.marks.contains_all(&template.marks)
    {
        copy.rendering_check = Some(state.content);
    }
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
    plan_rule_with(rule, world, sources, existing, &NoRenderings)
}

/// [`plan_rule`], knowing how the server rendered copies of generic kinds.
pub fn plan_rule_with(
    rule: &Rule,
    world: &World<'_>,
    sources: &HashMap<String, Source>,
    existing: &BTreeMap<CopyKey, Existing>,
    renderings: &dyn Renderings,
) -> RulePlan {
    let pass = RulePass::new(rule, world, sources);
    let mut plan = RulePlan {
        sources_matched: pass.sources_matched,
        shape_problems: pass.shape_problems.clone(),
        ..RulePlan::default()
    };
    let found = |namespace: &str, name: &str| {
        let key = CopyKey { kind: rule.kind, namespace: namespace.to_owned(), name: name.to_owned() };
        existing.get(&key).map_or(Found::Nothing, Existing::found)
    };
    pass.plan_copies(pass.targets(), found, renderings, &mut plan);
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

/// What becomes of every copy a deleted rule leaves behind (`own`, the copies it made; the
/// rule's label value is `rule`), as its `policy` says: deleted ([`cleanup`]) or left in
/// place as orphans for a rule that copies the same source there to take over.
pub fn on_rule_deleted<'c>(
    kind: ObjectKind,
    rule: &str,
    policy: DeletionPolicy,
    own: impl IntoIterator<Item = (&'c str, &'c str, &'c CopyState)>,
) -> Vec<Change> {
    match policy {
        DeletionPolicy::Delete => cleanup(kind, own),
        DeletionPolicy::Orphan => own
            .into_iter()
            .filter(|(_, _, copy)| !copy.deleting)
            .map(|(namespace, name, copy)| Change::Orphan {
                key: CopyKey { kind, namespace: namespace.to_owned(), name: name.to_owned() },
                uid: copy.uid.to_string(),
                seen_version: copy.seen_version(),
                rule: rule.to_owned(),
            })
            .collect(),
    }
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

/// Deletions of the copies (of `copies`, copies of `kind`) a tenant's sync (ConfigMapSync, SecretSync) made
/// under a consent that is gone: in namespaces that no longer accept copies from its tenant,
/// or have been protected since, as `policy` judges `namespaces` now. Those of the orphans
/// tenants' syncs left, and of tenants' syncs not in force that keep their copies (`kept`):
/// a refusal keeps a copy whose destination is no longer named or selected, but not one its
/// tenant may no longer write. The copies of rules in force are their passes' to delete. A
/// namespace being deleted takes its copies with it.
pub fn copies_without_consent<'c>(
    kind: ObjectKind,
    copies: impl IntoIterator<Item = (&'c str, &'c str, &'c CopyState)>,
    namespaces: &BTreeMap<String, NamespaceInfo>,
    policy: &crate::tenancy::DestinationPolicy,
    kept: &KeptRules,
) -> Vec<Change> {
    cleanup(
        kind,
        copies.into_iter().filter(|(namespace, _, copy)| {
            namespaces.get(*namespace).is_some_and(|info| {
                let allowed = |tenant: &str| policy.allows(tenant, namespace, &info.consent);
                info.active
                    && (copy.orphaned_without_consent(allowed)
                        || kept.tenant_of(copy).is_some_and(|tenant| !allowed(tenant)))
            })
        }),
    )
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
