//! What copies should exist and what to do about the objects that are there: pure functions
//! of rules, source objects, namespaces and existing copies, so every decision the engine
//! makes is unit-tested without a server.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::model::*;

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
