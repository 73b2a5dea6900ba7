//! The front doors of the engine: how a ReplicationRule, a ConfigMapSync and a SecretSync
//! become a [`Rule`], and how the engine's findings become each one's status. Pure,
//! unit-tested.

use std::collections::BTreeSet;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::{ObjectMeta, Selector};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::apply::{Applied, EscalationRefused};
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use super::desired::{ConflictReason, RulePlan, ShapeProblem};
use super::model::{MANAGED_BY_LABEL, ObjectKind, Rule, RuleId, RuleKind, SourceMatch, TargetMatch};
use super::shape::{MarkFilter, Shape, Tool};
use crate::controllers::replication::types::{ConfigMapSync, SecretSync, TenantSyncStatus};
use crate::controllers::replication::types::{
    CopyConflict, CopyShaping, DeletionPolicy, ReplicationRule, ReplicationRuleSpec, ReplicationRuleStatus,
    ToolMarks,
};
use crate::kinds::AllowedKind;
use crate::runtime::Settings;

/// Conflicts listed in status; the count covers the rest.
pub const MAX_LISTED_CONFLICTS: usize = 20;
/// Synced namespaces a ConfigMapSync lists (a selector may match thousands); the count
/// covers the rest.
pub const MAX_LISTED_NAMESPACES: usize = 100;
const READY: &str = "Ready";

/// Refusals that leave a rule's copies as they are: a shape kopper cannot write (a typo in
/// an edit must not empty every namespace), a kind kopper does not replicate now
/// (`KindNotAllowed`: the flag changed; `KindNotServed`: its CRD is gone or not yet
/// installed), whose copies kopper no longer watches and so could not delete safely, and a
/// source namespace no longer protected (`SourceNotProtected`: a typo in
/// `--protected-namespaces` or a rule's edit). Deleting copies because a flag, a CRD or a
/// protection was missing for a moment would leave every namespace without its default-deny
/// NetworkPolicy, say, opening the network cluster-wide until all are back.
const KEEPING_REFUSALS: [&str; 4] = ["InvalidShape", "KindNotAllowed", "KindNotServed", "SourceNotProtected"];

/// Why a rule's spec is not acted on. Permanent: it waits for the spec to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    /// Whether the rule loses the copies it made. A spec asking for a shape kopper cannot
    /// write (`InvalidShape`) revokes nothing: its copies stay as they are, not updated,
    /// until the spec is fixed, whatever its `deletionPolicy` (a typo in an edit must not
    /// empty every namespace). Any other refusal (a source kopper no longer lets the rule
    /// read, say) revokes what the rule was allowed before.
    pub fn revokes_copies(&self) -> bool {
        !KEEPING_REFUSALS.contains(&self.reason)
    }
}

/// What the engine found for one rule, for its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub sources_matched: usize,
    pub wanted: usize,
    /// Namespaces holding an up-to-date copy.
    pub synced_namespaces: BTreeSet<String>,
    pub copies_in_sync: usize,
    /// Wanted copies being deleted, held by another controller's finalizer.
    pub copies_being_deleted: usize,
    pub conflicts: Vec<CopyConflict>,
    /// Whether this pass wrote or deleted any copy.
    pub wrote: bool,
    /// Copies that could not be written this pass (they are retried).
    pub failed: usize,
    /// Destinations named in a tenant's spec that it may not write into.
    pub refused_destinations: Vec<String>,
    /// The namespace the rule lives in (a ConfigMapSync's), which destinations consent to.
    pub own_namespace: Option<String>,
    /// Conflicts left out of `conflicts`, and synced namespaces left out of
    /// `synced_namespaces`, because their namespace is not one the rule's owner named (see
    /// [`RuleObject::redact`]). They are counted, not named.
    pub hidden_conflicts: usize,
    pub hidden_synced: usize,
    /// The one source a rule names (`namespace/name`, a ConfigMapSync's), when it does not
    /// exist: the rule cannot do what it asks for, unlike a selector that matches nothing yet.
    pub missing_source: Option<String>,
    /// Sources copied otherwise than the rule asks (keys they lack), or not at all (their
    /// copies would lack keys their type requires).
    pub shape_problems: Vec<ShapeProblem>,
    /// Copies the API server refused as a privilege escalation.
    pub escalations: Vec<EscalationRefused>,
}

impl Findings {
    /// Adds one batch of a pass: `plan`, once `applied` tells which of its writes were made.
    pub fn add(&mut self, plan: &RulePlan, applied: &Applied) {
        self.wanted += plan.wanted;
        self.copies_in_sync += plan.in_sync + applied.written.len() + applied.verified.len();
        self.copies_being_deleted += plan.being_deleted;
        self.synced_namespaces.extend(plan.in_sync_namespaces.iter().cloned());
        self.synced_namespaces.extend(applied.written.iter().map(|key| key.namespace.clone()));
        self.synced_namespaces.extend(applied.verified.iter().map(|key| key.namespace.clone()));
        self.escalations.extend(applied.escalations.iter().cloned());
        let found_unmanaged = applied.unmanaged.iter().map(|key| (key, &ConflictReason::NotManagedByKopper));
        self.conflicts.extend(plan.conflicts().chain(found_unmanaged).map(|(key, reason)| CopyConflict {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            reason: reason.reason().to_owned(),
            message: reason.message(key),
        }));
        self.wrote |= !applied.written.is_empty() || applied.deleted > 0;
        self.failed += applied.failed.len();
    }

    /// The shape problem the Ready condition names: a source not copied at all first.
    fn shape_problem(&self) -> Option<&ShapeProblem> {
        self.shape_problems.iter().find(|problem| problem.refuses_copy()).or(self.shape_problems.first())
    }

    /// The `Ready` condition's status, reason and message.
    pub(super) fn readiness(&self) -> (&'static str, &'static str, String) {
        if let Some(first) = self.escalations.first() {
            let more = match self.escalations.len() - 1 {
                0 => String::new(),
                more => format!(" ({more} more like it)"),
            };
            (
                "False",
                "EscalationRefused",
                format!(
                    "the API server refused {} as a privilege escalation{more}: kopper may only write a Role \
                     granting what it holds itself, and a RoleBinding to a role it holds or may bind; grant \
                     kopper those rights (or `bind` on the role), or change the source. Tried again in \
                     minutes. The server said: {}",
                    first.key, first.reason
                ),
            )
        } else if self.failed > 0 {
            ("False", "WriteFailed", format!("{} could not be written; retrying", copies(self.failed)))
        } else if !self.conflicts.is_empty() || self.hidden_conflicts > 0 {
            let count = self.conflicts.len() + self.hidden_conflicts;
            let verb = if count == 1 { "is" } else { "are" };
            ("False", "Conflict", format!("{} {verb} not written: the place is taken", copies(count)))
        } else if !self.refused_destinations.is_empty() {
            (
                "False",
                "DestinationRefused",
                refused_destinations_message(&self.refused_destinations, self.own_namespace.as_deref()),
            )
        } else if let Some(problem) = self.shape_problem() {
            let more = self.shape_problems.len() - 1;
            let message = match more {
                0 => problem.message(),
                more => format!("{} ({more} more like it)", problem.message()),
            };
            ("False", problem.reason(), message)
        } else if let Some(source) = &self.missing_source {
            (
                "False",
                "SourceNotFound",
                format!("the source {source} does not exist; it is copied as soon as it is created"),
            )
        } else if self.sources_matched == 0 {
            ("True", "NoSources", "no source object matches the selector".to_owned())
        } else if self.copies_in_sync < self.wanted
            && self.copies_being_deleted >= self.wanted - self.copies_in_sync
        {
            // Nothing kopper can do until another controller lets go of its copies.
            (
                "False",
                "CopyBeingDeleted",
                format!(
                    "{} being deleted, held by another controller's finalizer; each is made again once it \
                     is gone",
                    copies(self.copies_being_deleted)
                ),
            )
        } else if self.copies_in_sync < self.wanted {
            // A write that met another writer, or a copy deleted while it was updated: the
            // pass that follows writes it, and status says so meanwhile.
            (
                "False",
                "Progressing",
                format!(
                    "{} of {} in sync; the rest are being written",
                    self.copies_in_sync,
                    copies(self.wanted)
                ),
            )
        } else {
            ("True", "Synced", format!("{} in sync", copies(self.copies_in_sync)))
        }
    }
}

/// A custom resource that asks the engine for copies.
pub trait RuleObject:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The identity of the rule an object with this metadata is, readable or not.
    fn id_of(meta: &ObjectMeta) -> RuleId;
    fn rule_id(&self) -> RuleId {
        Self::id_of(self.meta())
    }
    /// The API to write this object's status through.
    fn api(&self, client: Client) -> Api<Self>;
    /// The reason of the current `Ready` condition.
    fn ready_reason(&self) -> Option<String>;
    /// The rule this object asks for, or why it is refused.
    fn to_rule(&self, settings: &Settings) -> Result<Rule, Refusal>;
    /// What becomes of its copies when it is deleted.
    fn deletion_policy(&self) -> DeletionPolicy;
    /// The kind besides ConfigMap and Secret it copies, if the admin allows it (only a
    /// ReplicationRule copies other kinds).
    fn allowed_kind(&self, _settings: &Settings) -> Option<&'static AllowedKind> {
        None
    }
    /// A Warning to give as this object is deleted while kopper cannot see its copies to
    /// remove them (see [`copies_left_behind`]); none for ConfigMaps and Secrets, always seen.
    fn copies_left_behind(&self, _settings: &Settings) -> Option<String> {
        None
    }
    /// The status to write after a pass, given what the engine found (or why the spec is
    /// refused); `None` when the current status already says it.
    fn next_status(&self, outcome: &Result<Findings, Refusal>, now: Timestamp) -> Option<serde_json::Value>;
    /// Conflicts the current status reports, so Events go out only for new ones.
    fn reported_conflicts(&self) -> Vec<CopyConflict>;
    /// What of `findings` the object's owner may see, for its status and Events.
    fn redact(&self, findings: Findings) -> Findings {
        findings
    }
}

impl RuleObject for ReplicationRule {
    fn id_of(meta: &ObjectMeta) -> RuleId {
        RuleId::replication_rule(meta.name.as_deref().unwrap_or_default())
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::all(client)
    }

    fn ready_reason(&self) -> Option<String> {
        ready_reason(self.status.as_ref().map(|status| status.conditions.as_slice()))
    }

    fn to_rule(&self, settings: &Settings) -> Result<Rule, Refusal> {
        let spec = &self.spec;
        let kind = replicated_kind(spec, settings)?;
        if kind != ObjectKind::Secret && spec.secret_type.is_some() {
            return Err(Refusal {
                reason: "InvalidShape",
                message: "spec.secretType applies to kind Secret only; remove it".to_owned(),
            });
        }
        refuse_credential_secret_type(spec.secret_type.as_deref())?;
        let shape = shape(&spec.shaping, spec.secret_type.as_deref(), Author::Admin)?;
        Ok(Rule {
            id: self.rule_id(),
            uid: self.meta().uid.clone().unwrap_or_default(),
            kind,
            shape,
            deletion_policy: spec.shaping.deletion_policy,
            sources: SourceMatch {
                namespaces: spec.namespaces.clone(),
                name: None,
                selector: Some(selector(&spec.selector, "selector")?),
                credential_types: (kind == ObjectKind::Secret)
                    .then(|| spec.credential_types.iter().map(|kind| kind.as_str().to_owned()).collect()),
            },
            targets: TargetMatch::Matching {
                protected: settings.destinations.protected.clone(),
                selector: spec
                    .namespace_selector
                    .as_ref()
                    .map(|s| selector(s, "namespaceSelector"))
                    .transpose()?,
                include: spec.include_namespaces.clone(),
                exclude: spec.exclude_namespaces.clone(),
            },
        })
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.shaping.deletion_policy
    }

    fn allowed_kind(&self, settings: &Settings) -> Option<&'static AllowedKind> {
        settings.replicate_kinds.find(self.spec.api_version(), &self.spec.kind)
    }

    fn copies_left_behind(&self, settings: &Settings) -> Option<String> {
        let (api_version, kind) = (self.spec.api_version(), self.spec.kind.as_str());
        if matches!((api_version, kind), ("v1", "ConfigMap" | "Secret")) {
            return None;
        }
        copies_left_behind(api_version, kind, &self.rule_id(), self.allowed_kind(settings))
    }

    fn next_status(&self, outcome: &Result<Findings, Refusal>, now: Timestamp) -> Option<serde_json::Value> {
        let old = self.status.clone().unwrap_or_default();
        let generation = self.meta().generation;
        let mut new = ReplicationRuleStatus {
            observed_generation: generation,
            conditions: vec![ready_condition(&old.conditions, outcome, generation, now)],
            ..old.clone()
        };
        if let Ok(findings) = outcome {
            new.sources_matched = count(findings.sources_matched);
            new.copies_in_sync = count(findings.copies_in_sync);
            new.conflict_count = count(findings.conflicts.len());
            new.conflicts = findings.conflicts.iter().take(MAX_LISTED_CONFLICTS).cloned().collect();
            new.last_sync_time = sync_time(old.last_sync_time.as_ref(), findings, now);
        }
        (new != old).then(|| serde_json::json!({ "status": new }))
    }

    fn reported_conflicts(&self) -> Vec<CopyConflict> {
        self.status.as_ref().map(|status| status.conflicts.clone()).unwrap_or_default()
    }
}

impl RuleObject for ConfigMapSync {
    fn id_of(meta: &ObjectMeta) -> RuleId {
        RuleId::config_map_sync(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }

    fn ready_reason(&self) -> Option<String> {
        ready_reason(self.status.as_ref().map(|status| status.conditions.as_slice()))
    }

    fn to_rule(&self, settings: &Settings) -> Result<Rule, Refusal> {
        let shape = shape(&self.spec.shaping, None, Author::Tenant)?;
        self.share().to_rule(self, settings, shape, Some(config_map_credential_types()))
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.shaping.deletion_policy
    }

    fn next_status(&self, outcome: &Result<Findings, Refusal>, now: Timestamp) -> Option<serde_json::Value> {
        tenant_next_status(self.status.as_ref(), self.meta().generation, outcome, now)
    }

    fn reported_conflicts(&self) -> Vec<CopyConflict> {
        self.status.as_ref().map(|status| status.conflicts.clone()).unwrap_or_default()
    }

    fn redact(&self, findings: Findings) -> Findings {
        self.share().redact(&self.namespace().unwrap_or_default(), findings)
    }
}

/// The credential types a ConfigMapSync may copy: every one but Helm's release records. A
/// ConfigMap is no token, whatever its name or annotations, but Helm's configmap driver takes
/// any ConfigMap labelled `owner: helm` for a release record (see
/// [`ObjectInfo::credential_type`](super::model::ObjectInfo::credential_type)).
fn config_map_credential_types() -> Vec<String> {
    let [token, bootstrap, _helm] = crate::tenancy::CREDENTIAL_SECRET_TYPES;
    vec![token.to_owned(), bootstrap.to_owned()]
}

impl ConfigMapSync {
    fn share(&self) -> TenantShare<'_> {
        let spec = &self.spec;
        TenantShare {
            resource: RuleKind::ConfigMapSync,
            kind: ObjectKind::ConfigMap,
            source_namespace: &spec.source_namespace,
            source_name: &spec.config_map_name,
            destination_namespace: spec.destination_namespace.as_deref(),
            destination_namespaces: &spec.destination_namespaces,
            destination_selector: spec.destination_selector.as_ref(),
            deletion_policy: spec.shaping.deletion_policy,
        }
    }
}

impl RuleObject for SecretSync {
    fn id_of(meta: &ObjectMeta) -> RuleId {
        RuleId::secret_sync(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }

    fn ready_reason(&self) -> Option<String> {
        ready_reason(self.status.as_ref().map(|status| status.conditions.as_slice()))
    }

    /// A SecretSync copies no credential of the cluster, whatever it names: the source is
    /// refused (see [`refused_named_source`](super::desired::refused_named_source)), and its
    /// copies cannot be written as one.
    fn to_rule(&self, settings: &Settings) -> Result<Rule, Refusal> {
        let secret_type = self.spec.secret_type.as_deref();
        refuse_credential_secret_type(secret_type)?;
        let shape = shape(&self.spec.shaping, secret_type, Author::Tenant)?;
        self.share().to_rule(self, settings, shape, Some(Vec::new()))
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.shaping.deletion_policy
    }

    fn next_status(&self, outcome: &Result<Findings, Refusal>, now: Timestamp) -> Option<serde_json::Value> {
        tenant_next_status(self.status.as_ref(), self.meta().generation, outcome, now)
    }

    fn reported_conflicts(&self) -> Vec<CopyConflict> {
        self.status.as_ref().map(|status| status.conflicts.clone()).unwrap_or_default()
    }

    fn redact(&self, findings: Findings) -> Findings {
        self.share().redact(&self.namespace().unwrap_or_default(), findings)
    }
}

impl SecretSync {
    fn share(&self) -> TenantShare<'_> {
        let spec = &self.spec;
        TenantShare {
            resource: RuleKind::SecretSync,
            kind: ObjectKind::Secret,
            source_namespace: &spec.source_namespace,
            source_name: &spec.secret_name,
            destination_namespace: spec.destination_namespace.as_deref(),
            destination_namespaces: &spec.destination_namespaces,
            destination_selector: spec.destination_selector.as_ref(),
            deletion_policy: spec.shaping.deletion_policy,
        }
    }
}

/// What a tenant's sync (ConfigMapSync, SecretSync) asks for: one source, copied into
/// destinations named or selected, each only with its owner's consent.
struct TenantShare<'a> {
    resource: RuleKind,
    kind: ObjectKind,
    source_namespace: &'a str,
    source_name: &'a str,
    destination_namespace: Option<&'a str>,
    destination_namespaces: &'a [String],
    destination_selector: Option<&'a LabelSelector>,
    deletion_policy: DeletionPolicy,
}

impl TenantShare<'_> {
    /// The rule `object` asks for. `credential_types`: the credential types it may copy (see
    /// [`SourceMatch::credential_types`]).
    fn to_rule(
        &self,
        object: &impl RuleObject,
        settings: &Settings,
        shape: Arc<Shape>,
        credential_types: Option<Vec<String>>,
    ) -> Result<Rule, Refusal> {
        let own_namespace = object.namespace().unwrap_or_default();
        self.refuse_foreign_source(&own_namespace, settings)?;
        let names: BTreeSet<String> = self
            .destination_namespace
            .into_iter()
            .chain(self.destination_namespaces.iter().map(String::as_str))
            .map(str::to_owned)
            .collect();
        if names.is_empty() && self.destination_selector.is_none() {
            return Err(Refusal {
                reason: "NoDestination",
                message: "set destinationNamespace, destinationNamespaces or destinationSelector".to_owned(),
            });
        }
        Ok(Rule {
            id: object.rule_id(),
            uid: object.meta().uid.clone().unwrap_or_default(),
            kind: self.kind,
            shape,
            deletion_policy: self.deletion_policy,
            sources: SourceMatch {
                namespaces: vec![self.source_namespace.to_owned()],
                name: Some(self.source_name.to_owned()),
                selector: None,
                credential_types,
            },
            targets: TargetMatch::Listed {
                tenant: own_namespace,
                policy: settings.destinations.clone(),
                names,
                selector: self
                    .destination_selector
                    .map(|s| selector(s, "destinationSelector"))
                    .transpose()?,
            },
        })
    }

    /// Refuses a source outside the rule's own namespace, unless it is one a tenant's rule
    /// may read: a SecretSync never reads another namespace's Secrets (whoever may create
    /// one in a namespace reads no Secret there through it), and a ConfigMapSync reads
    /// another namespace only when kopper runs with `--allow-cross-namespace-sources`, and
    /// never a protected one (kube-system, kopper's own, those the admin lists), flag or not.
    fn refuse_foreign_source(&self, own_namespace: &str, settings: &Settings) -> Result<(), Refusal> {
        let source = self.source_namespace;
        if source == own_namespace {
            return Ok(());
        }
        let resource = self.resource.as_str();
        let message = if self.kind == ObjectKind::Secret {
            format!(
                "sourceNamespace {source:?} is not this {resource}'s namespace {own_namespace:?}: a {resource} \
                 never reads another namespace's Secrets, whatever kopper's flags; the owner of {source:?} can \
                 create the {resource} there"
            )
        } else if settings.destinations.protected.contains(source) {
            format!(
                "sourceNamespace {source:?} is a protected namespace, which no {resource} reads from, even with \
                 --allow-cross-namespace-sources; copy from this {resource}'s namespace {own_namespace:?}"
            )
        } else if !settings.allow_cross_namespace_sources {
            format!(
                "sourceNamespace {source:?} is not this {resource}'s namespace {own_namespace:?}; kopper copies \
                 from other namespaces only when started with --allow-cross-namespace-sources"
            )
        } else {
            return Ok(());
        };
        Err(Refusal { reason: "CrossNamespaceSourceDenied", message })
    }

    /// A tenant sees only namespaces they named (and their own): no other namespace's name,
    /// no sign of which objects exist there, no other rule's name.
    fn redact(&self, own: &str, mut findings: Findings) -> Findings {
        let named = |namespace: &str| {
            namespace == own
                || self.destination_namespace == Some(namespace)
                || self.destination_namespaces.iter().any(|name| name == namespace)
        };
        let synced = findings.synced_namespaces.len();
        findings.synced_namespaces.retain(|namespace| named(namespace));
        findings.hidden_synced += synced - findings.synced_namespaces.len();
        let (visible, hidden): (Vec<CopyConflict>, Vec<CopyConflict>) =
            std::mem::take(&mut findings.conflicts).into_iter().partition(|c| named(&c.namespace));
        findings.hidden_conflicts += hidden.len();
        let kind = self.kind;
        findings.conflicts = visible
            .into_iter()
            .map(|conflict| CopyConflict {
                reason: "DestinationOccupied".to_owned(),
                message: format!(
                    "the copy in {} is not written: the name is taken there (by a {kind} kopper did not make, \
                     or by another rule's copy, which keeps it); the namespace's owner can tell which",
                    conflict.namespace
                ),
                ..conflict
            })
            .collect();
        findings
    }
}

/// The status of a tenant's sync after a pass (`None` when `old` already says it): what it
/// found, or nothing but the refusal when its spec is refused.
fn tenant_next_status(
    old: Option<&TenantSyncStatus>,
    generation: Option<i64>,
    outcome: &Result<Findings, Refusal>,
    now: Timestamp,
) -> Option<serde_json::Value> {
    let old = old.cloned().unwrap_or_default();
    let mut new = TenantSyncStatus {
        observed_generation: generation,
        conditions: vec![ready_condition(&old.conditions, outcome, generation, now)],
        ..old.clone()
    };
    match outcome {
        Ok(findings) => {
            new.synced_namespaces =
                findings.synced_namespaces.iter().take(MAX_LISTED_NAMESPACES).cloned().collect();
            new.synced_count = count(findings.synced_namespaces.len() + findings.hidden_synced);
            new.conflicts = findings.conflicts.iter().take(MAX_LISTED_CONFLICTS).cloned().collect();
            new.refused_destinations = findings.refused_destinations.clone();
            new.last_sync_time = sync_time(old.last_sync_time.as_ref(), findings, now);
        }
        Err(_) => {
            new.synced_namespaces.clear();
            new.synced_count = 0;
            new.conflicts.clear();
            new.refused_destinations.clear();
        }
    }
    (new != old).then(|| serde_json::json!({ "status": new }))
}

/// The kind a ReplicationRule copies, or why it may not: ConfigMap and Secret always; another
/// kind only if the admin allows it (`--replicate-kinds`) and the API server serves it, and
/// only from protected namespaces, unless the rule says otherwise (see [`crate::kinds`]:
/// whoever writes a source decides for every namespace it is copied into, whatever its kind). Fields that shape data apply to ConfigMaps and Secrets only (the
/// schema says so with CEL, which not every API server runs).
fn replicated_kind(spec: &ReplicationRuleSpec, settings: &Settings) -> Result<ObjectKind, Refusal> {
    let api_version = spec.api_version();
    match (api_version, spec.kind.as_str()) {
        ("v1", "ConfigMap") => return Ok(ObjectKind::ConfigMap),
        ("v1", "Secret") => return Ok(ObjectKind::Secret),
        _ => {}
    }
    let named = format!("{api_version}/{}", spec.kind);
    let shaping =
        [("keys", !spec.shaping.keys.is_empty()), ("credentialTypes", !spec.credential_types.is_empty())];
    if let Some((field, _)) = shaping.iter().find(|(_, set)| *set) {
        return Err(Refusal {
            reason: "InvalidShape",
            message: format!(
                "spec.{field} applies to kind ConfigMap or Secret (apiVersion v1) only; remove it: a {named} is \
                 copied whole"
            ),
        });
    }
    let Some(allowed) = settings.replicate_kinds.find(api_version, &spec.kind) else {
        return Err(Refusal {
            reason: "KindNotAllowed",
            message: format!(
                "kopper does not replicate {named}: the cluster admin allows kinds besides ConfigMap and Secret \
                 with --replicate-kinds (KOPPER_REPLICATE_KINDS; chart value replication.extraKinds, which also \
                 grants kopper the RBAC for them), e.g. {named}. Existing copies are left as they are"
            ),
        });
    };
    if allowed.resource().is_none() {
        return Err(Refusal {
            reason: "KindNotServed",
            message: format!(
                "the API server does not serve {named} as a namespaced kind: install the CustomResourceDefinition \
                 that defines it (or correct spec.apiVersion and spec.kind); kopper looks again every \
                 {}s. Existing copies are left as they are",
                crate::kinds::REDISCOVERY_INTERVAL.as_secs()
            ),
        });
    }
    if !spec.allow_unprotected_sources {
        let protected = &settings.destinations.protected;
        if let Some(namespace) = spec.namespaces.iter().find(|namespace| !protected.contains(namespace)) {
            return Err(Refusal {
                reason: "SourceNotProtected",
                message: format!(
                    "{named} decides what every namespace it is copied into allows or runs, so its sources \
                     must be in protected namespaces, which tenants cannot write to; spec.namespaces names \
                     {namespace:?}, which is not protected: move the source to a protected namespace \
                     (kopper's own, or one listed in --protected-namespaces), or set \
                     spec.allowUnprotectedSources: true if whoever can write in {namespace:?} may decide \
                     this for every namespace. Existing copies are left as they are"
                ),
            });
        }
    }
    Ok(ObjectKind::Other(allowed))
}

/// What to tell the admin deleting the rule `id` copying `api_version`/`kind` (of another
/// kind than ConfigMap and Secret) when kopper does not watch that kind (`allowed`: not in
/// `--replicate-kinds` now, or found but not served): kopper cannot find its copies, which stay,
/// labelled as the rule's, so the Warning gives the command that deletes them. `None` when
/// kopper watches the kind and removes them itself.
pub fn copies_left_behind(
    api_version: &str,
    kind: &str,
    id: &super::model::RuleId,
    allowed: Option<&AllowedKind>,
) -> Option<String> {
    if allowed.is_some_and(|allowed| allowed.resource().is_some()) {
        return None;
    }
    let resource = match api_version.split_once('/') {
        Some((group, version)) => format!("{}.{version}.{group}", kind.to_lowercase()),
        None => kind.to_lowercase(),
    };
    let selector = format!(
        "{MANAGED_BY_LABEL}={},{}={}",
        super::model::MANAGED_BY_VALUE,
        super::model::REPLICATED_BY_LABEL,
        id.label_value()
    );
    Some(format!(
        "kopper does not watch {api_version}/{kind} (not in --replicate-kinds / KOPPER_REPLICATE_KINDS, or not \
         served), so this rule's copies of it are left in place: delete them with \
         `kubectl delete {resource} -A -l {selector}`. Delete the rules copying a kind before removing it \
         from --replicate-kinds (chart value replication.extraKinds)"
    ))
}

/// A `secretType` naming a credential type of the cluster, which kopper never writes from
/// another type; the schema refuses it first where CEL runs.
fn refuse_credential_secret_type(secret_type: Option<&str>) -> Result<(), Refusal> {
    match secret_type.filter(|kind| crate::tenancy::CREDENTIAL_SECRET_TYPES.contains(kind)) {
        Some(credential) => Err(Refusal {
            reason: "InvalidShape",
            message: format!(
                "spec.secretType {credential} is a credential type of the cluster, which kopper never writes \
                 from another type; remove it"
            ),
        }),
        None => Ok(()),
    }
}

/// Label keys as Kubernetes accepts them (see [`crate::crds::LABEL_KEY_PATTERN`]); the
/// prefix's length is checked apart ([`MAX_LABEL_PREFIX_LENGTH`]).
static LABEL_KEY: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(crate::crds::LABEL_KEY_PATTERN).expect("a valid pattern"));
/// Label values as Kubernetes accepts them.
static LABEL_VALUE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(crate::crds::LABEL_VALUE_PATTERN).expect("a valid pattern"));
/// Longest prefix of a label key: a DNS subdomain.
const MAX_LABEL_PREFIX_LENGTH: usize = 253;
/// Characters of a key or value a status message quotes: a key may be as long as the request
/// (no CEL limit before kube-apiserver 1.25, nor in kubesim), and the message goes into the
/// status and an Event, which the API server would refuse past its size limits.
const QUOTED_CHARS: usize = 64;

/// Whose rule a spec is: a cluster admin's (ReplicationRule) or a tenant's (ConfigMapSync,
/// SecretSync), whose copies never carry the marks by which a tool takes an object for a
/// credential of its own (see [`shape::credential_mark`](super::shape::credential_mark)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Author {
    Admin,
    Tenant,
}

/// How a rule's spec shapes its copies. The schema bounds every field; what it checks only
/// with CEL (kube-apiserver 1.25+; not kubesim) is checked again here: the added labels are
/// valid and none is one of kopper's own marks, nor, for a tenant, a tool's credential mark.
fn shape(shaping: &CopyShaping, secret_type: Option<&str>, author: Author) -> Result<Arc<Shape>, Refusal> {
    let CopyShaping { keys, copy_labels: labels, copy_annotations: annotations, keep_tool_marks, .. } =
        shaping;
    let (labels, annotations) = (labels.as_ref(), annotations.as_ref());
    let empty = BTreeMap::new();
    let extra_labels = labels.map_or(&empty, |labels| &labels.add);
    if let Some(key) =
        extra_labels.keys().find(|key| key.starts_with("kopper.dev/") || *key == MANAGED_BY_LABEL)
    {
        return Err(Refusal {
            reason: "InvalidShape",
            message: format!(
                "spec.copyLabels.add: {} is one of kopper's own labels (kopper.dev/*, {MANAGED_BY_LABEL}), \
                 which kopper sets on every copy; remove it",
                quoted(key)
            ),
        });
    }
    if author == Author::Tenant {
        refuse_tool_credential_labels(extra_labels)?;
    }
    let mut invalid =
        extra_labels.iter().filter_map(|(key, value)| label_problem(key, value).map(|why| (key, value, why)));
    if let Some((key, value, (why, fix))) = invalid.next() {
        let more = match invalid.count() {
            0 => String::new(),
            more => format!(" ({more} more like it)"),
        };
        return Err(Refusal {
            reason: "InvalidShape",
            message: format!(
                "spec.copyLabels.add: {}: {} is not a valid Kubernetes label: {why}; {fix}{more}",
                quoted(key),
                quoted(value)
            ),
        });
    }
    let keep_tools = keep_tool_marks
        .iter()
        .map(|tool| match tool {
            ToolMarks::Helm => Tool::Helm,
            ToolMarks::ArgoCD => Tool::ArgoCd,
            ToolMarks::Flux => Tool::Flux,
            ToolMarks::Kapp => Tool::Kapp,
        })
        .collect::<BTreeSet<Tool>>();
    let filter = |include: &[String], exclude: &[String]| MarkFilter {
        include: include.to_vec(),
        exclude: exclude.to_vec(),
        keep_tools: keep_tools.clone(),
        drop_credential_marks: author == Author::Tenant,
    };
    Ok(Arc::new(Shape {
        keys: (!keys.is_empty()).then(|| keys.iter().cloned().collect()),
        secret_type: secret_type.map(str::to_owned),
        labels: labels.map_or_else(
            || filter(&[], &[]),
            |labels| filter(&labels.copied.include, &labels.copied.exclude),
        ),
        annotations: annotations.map_or_else(
            || filter(&[], &[]),
            |annotations| filter(&annotations.include, &annotations.exclude),
        ),
        extra_labels: extra_labels.clone(),
    }))
}

/// Refuses labels a tenant's rule would add by which a tool takes a copy for a credential of
/// its own: `owner: helm` (Helm's release records) and any `argocd.argoproj.io/*` key (Argo
/// CD's repository and cluster credentials, its tracking).
fn refuse_tool_credential_labels(extra_labels: &BTreeMap<String, String>) -> Result<(), Refusal> {
    let tool_label = extra_labels.iter().find(|(key, value)| {
        key.starts_with("argocd.argoproj.io/")
            || (key.as_str(), value.as_str()) == super::model::HELM_OWNER_LABEL
    });
    match tool_label {
        Some((key, value)) => Err(Refusal {
            reason: "InvalidShape",
            message: format!(
                "spec.copyLabels.add: {}: {} would make Helm or Argo CD take the copies for their own \
                 records (owner=helm: a Helm release; argocd.argoproj.io/*: Argo CD credentials or tracking) \
                 in the namespaces they land in; a tenant's rule never adds it: remove it",
                quoted(key),
                quoted(value)
            ),
        }),
        None => Ok(()),
    }
}

/// What makes `key: value` a label the API server refuses, as apimachinery's
/// `IsQualifiedName` (an optional DNS-subdomain prefix of at most 253 characters and `/`,
/// then a name of at most 63) and `IsValidLabelValue` judge it: the rule broken and the fix
/// a status message ends with; `None` if nothing does.
fn label_problem(key: &str, value: &str) -> Option<(&'static str, &'static str)> {
    let prefix_length = key.rsplit_once('/').map_or(0, |(prefix, _)| prefix.len());
    if key.len() > crate::crds::MAX_LABEL_KEY_LENGTH || prefix_length > MAX_LABEL_PREFIX_LENGTH {
        Some(("a key's prefix has at most 253 characters and its name at most 63", "shorten the key"))
    } else if !LABEL_KEY.is_match(key) {
        Some((
            "a key is a name of letters, digits, '-', '_' and '.', alphanumeric at both ends, at most 63 \
             characters, optionally after a DNS-subdomain prefix and '/'",
            "rename the key, e.g. `team` or `example.com/team`",
        ))
    } else if value.len() > crate::crds::MAX_LABEL_VALUE_LENGTH || !LABEL_VALUE.is_match(value) {
        Some((
            "a value is empty or at most 63 letters, digits, '-', '_' and '.', alphanumeric at both ends",
            "change the value, e.g. `platform-ca`",
        ))
    } else {
        None
    }
}

/// `text` for a message: whole if short, else its first [`QUOTED_CHARS`] characters and its
/// length.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}... ({} characters)", &text[..end], text.chars().count()),
    }
}

fn selector(selector: &LabelSelector, field: &str) -> Result<Selector, Refusal> {
    Selector::try_from(selector.clone())
        .map_err(|error| Refusal { reason: "InvalidSelector", message: format!("{field}: {error}") })
}

/// Why named destinations get no copy, and how each one's owner can consent; `from`: the
/// namespace the copies come from (the rule's own). For status and `kopper plan`.
pub fn refused_destinations_message(destinations: &[String], from: Option<&str>) -> String {
    let verb = if destinations.len() == 1 { "does" } else { "do" };
    let (source, value) = match from {
        Some(namespace) => (format!("namespace {namespace}"), namespace),
        None => ("this namespace".to_owned(), "<this namespace>"),
    };
    let owners = if destinations.len() == 1 { "its owner" } else { "the owner of each" };
    format!(
        "{} {verb} not accept copies from {source}: {owners} can accept them with the annotation {}={value}",
        destinations.join(", "),
        crate::tenancy::ACCEPT_REPLICATION_FROM
    )
}

/// `1 copy`, `2 copies`.
fn copies(n: usize) -> String {
    if n == 1 { "1 copy".to_owned() } else { format!("{n} copies") }
}

fn ready_reason(conditions: Option<&[Condition]>) -> Option<String> {
    conditions?.iter().find(|condition| condition.type_ == READY).map(|condition| condition.reason.clone())
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The last sync time moves only when copies were written, so a pass that changes nothing
/// writes no status and wakes nothing.
fn sync_time(old: Option<&Time>, findings: &Findings, now: Timestamp) -> Option<Time> {
    if findings.wrote || old.is_none() { Some(Time(now)) } else { old.cloned() }
}

/// The `Ready` condition, keeping its transition time while its status stays the same.
fn ready_condition(
    old: &[Condition],
    outcome: &Result<Findings, Refusal>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let (status, reason, message) = match outcome {
        Ok(findings) => findings.readiness(),
        Err(refusal) => ("False", refusal.reason, refusal.message.clone()),
    };
    let previous = old.iter().find(|condition| condition.type_ == READY);
    let last_transition_time = previous
        .filter(|condition| condition.status == status)
        .map(|condition| condition.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: READY.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::replication::desired::refused_named_source;
    use crate::controllers::replication::model::ObjectInfo;
    use crate::controllers::replication::types::ConfigMapSyncSpec;
    use serde_json::json;

    fn sync(own_namespace: &str, source_namespace: &str) -> ConfigMapSync {
        let mut sync = ConfigMapSync::new(
            "s",
            ConfigMapSyncSpec {
                source_namespace: source_namespace.into(),
                destination_namespace: Some("dest".into()),
                destination_namespaces: vec![],
                destination_selector: None,
                config_map_name: "cfg".into(),
                shaping: CopyShaping::default(),
            },
        );
        sync.metadata.namespace = Some(own_namespace.into());
        sync.metadata.generation = Some(3);
        sync
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000).unwrap()
    }

    #[test]
    fn cross_namespace_source_is_refused_by_default_and_names_the_flag() {
        let refusal = sync("tenant", "other").to_rule(&Settings::default()).unwrap_err();
        assert_eq!(refusal.reason, "CrossNamespaceSourceDenied");
        assert!(refusal.message.contains("--allow-cross-namespace-sources"));
        let allowed = Settings { allow_cross_namespace_sources: true, ..Settings::default() };
        assert!(sync("tenant", "other").to_rule(&allowed).is_ok());
        assert!(sync("tenant", "tenant").to_rule(&Settings::default()).is_ok());
    }

    /// With the flag on, a tenant still reads no protected namespace: kube-system, kopper's
    /// own (its credentials), those the admin lists.
    #[test]
    fn a_protected_source_namespace_is_refused_even_with_the_flag() {
        let allowed = Settings {
            allow_cross_namespace_sources: true,
            destinations: crate::tenancy::DestinationPolicy {
                protected: crate::tenancy::ProtectedNamespaces::new(
                    Some("kopper-system"),
                    &["cert-manager".into()],
                ),
                allow_unconsented: false,
            },
            ..Settings::default()
        };
        for protected in ["kube-system", "kopper-system", "cert-manager"] {
            let refusal = sync("tenant", protected).to_rule(&allowed).unwrap_err();
            assert_eq!(refusal.reason, "CrossNamespaceSourceDenied", "{protected}");
            assert!(refusal.message.contains("protected namespace"), "{}", refusal.message);
        }
        assert!(sync("tenant", "other").to_rule(&allowed).is_ok());
        assert!(sync("kopper-system", "kopper-system").to_rule(&allowed).is_ok(), "its own namespace");
    }

    #[test]
    fn refusal_is_written_as_ready_false_with_observed_generation() {
        let object = sync("tenant", "other");
        let outcome = object.to_rule(&Settings::default()).map(|_| Findings::default());
        let status = object.next_status(&outcome, now()).unwrap();
        let condition = &status["status"]["conditions"][0];
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "CrossNamespaceSourceDenied");
        assert_eq!(condition["observedGeneration"], 3);
    }

    #[test]
    fn status_is_not_rewritten_when_nothing_changed() {
        let mut object = sync("tenant", "tenant");
        let findings =
            Ok(Findings { sources_matched: 1, wanted: 1, copies_in_sync: 1, ..Findings::default() });
        let first = object.next_status(&findings, now()).unwrap();
        object.status = Some(serde_json::from_value(first["status"].clone()).unwrap());
        let later = Timestamp::from_second(2_000).unwrap();
        assert_eq!(object.next_status(&findings, later), None);
    }

    #[test]
    fn conflicts_make_the_rule_not_ready_and_are_bounded() {
        let rule: ReplicationRule = serde_yaml::from_str(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r}\n\
             spec: {kind: Secret, namespaces: [src], selector: {matchLabels: {a: b}}}",
        )
        .unwrap();
        let conflicts = (0..30)
            .map(|i| CopyConflict {
                namespace: format!("ns{i:02}"),
                name: "x".into(),
                reason: "NotManagedByKopper".into(),
                message: String::new(),
            })
            .collect();
        let findings = Ok(Findings { sources_matched: 1, wanted: 30, conflicts, ..Findings::default() });
        let status = rule.next_status(&findings, now()).unwrap();
        assert_eq!(status["status"]["conflicts"].as_array().unwrap().len(), MAX_LISTED_CONFLICTS);
        assert_eq!(status["status"]["conflictCount"], 30);
        assert_eq!(status["status"]["conditions"][0]["status"], "False");
        assert_eq!(rule.to_rule(&Settings::default()).unwrap().kind, ObjectKind::Secret);
    }

    #[test]
    fn copies_still_being_written_make_the_rule_not_ready_yet() {
        let object = sync("tenant", "tenant");
        let findings =
            Ok(Findings { sources_matched: 1, wanted: 3, copies_in_sync: 2, ..Findings::default() });
        let status = object.next_status(&findings, now()).unwrap();
        let condition = &status["status"]["conditions"][0];
        assert_eq!((&condition["status"], &condition["reason"]), (&json!("False"), &json!("Progressing")));
        assert_eq!(condition["message"], "2 of 3 copies in sync; the rest are being written");
    }

    #[test]
    fn copies_held_in_deletion_by_others_are_named_as_such_not_as_being_written() {
        let object = sync("tenant", "tenant");
        let findings = Ok(Findings {
            sources_matched: 1,
            wanted: 3,
            copies_in_sync: 2,
            copies_being_deleted: 1,
            ..Findings::default()
        });
        let status = object.next_status(&findings, now()).unwrap();
        let condition = &status["status"]["conditions"][0];
        assert_eq!(
            (&condition["status"], &condition["reason"]),
            (&json!("False"), &json!("CopyBeingDeleted"))
        );
        assert!(condition["message"].as_str().unwrap().contains("finalizer"), "{condition}");
    }

    #[test]
    fn refused_destinations_are_named_with_the_annotation_that_accepts_copies_from_here() {
        let one = refused_destinations_message(&["plain-ns".to_owned()], Some("team-c"));
        assert_eq!(
            one,
            "plain-ns does not accept copies from namespace team-c: its owner can accept them with the \
             annotation kopper.dev/accept-replication-from=team-c"
        );
        let two = refused_destinations_message(&["a".to_owned(), "b".to_owned()], None);
        assert!(two.starts_with("a, b do not accept copies from this namespace: the owner of each"), "{two}");
    }

    /// A rule for `kind` (`apiVersion/Kind`) from `namespaces`, with `extra` spec fields.
    fn kind_rule(api_version: &str, kind: &str, namespaces: &str, extra: &str) -> ReplicationRule {
        serde_yaml::from_str(&format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: r}}\nspec: {{apiVersion: \
             {api_version}, kind: {kind}, namespaces: {namespaces}, selector: {{matchLabels: {{a: b}}}}{extra}}}"
        ))
        .unwrap()
    }

    /// Settings allowing `entries`, kopper's own namespace `platform`; every entry served.
    fn allowing(entries: &[&str]) -> Settings {
        let kinds =
            crate::kinds::AllowedKinds::new(entries.iter().map(|e| crate::kinds::parse_entry(e).unwrap()));
        for kind in kinds.iter() {
            if !kind.entry.kind.starts_with("Unserved") {
                let entry = &kind.entry;
                kind.resolved(kube::core::ApiResource {
                    group: entry.group.clone(),
                    version: entry.version.clone(),
                    api_version: entry.api_version(),
                    kind: entry.kind.clone(),
                    plural: format!("{}s", entry.kind.to_lowercase()),
                });
            }
        }
        let destinations = crate::tenancy::DestinationPolicy {
            protected: crate::tenancy::ProtectedNamespaces::new(Some("platform"), &[]),
            ..Default::default()
        };
        Settings { replicate_kinds: kinds, destinations, ..Settings::default() }
    }

    #[test]
    fn a_rule_deleted_while_its_kind_is_not_watched_names_the_command_that_deletes_its_copies() {
        let settings = allowing(&["networking.k8s.io/v1/NetworkPolicy", "example.com/v1/UnservedGadget"]);
        let left = |api_version: &str, kind: &str| {
            kind_rule(api_version, kind, "[platform]", "").copies_left_behind(&settings)
        };
        let removed = left("v1", "LimitRange").expect("LimitRange is no longer allowed");
        let selector = "-l app.kubernetes.io/managed-by=kopper,kopper.dev/replicated-by=";
        assert!(removed.contains(&format!("kubectl delete limitrange -A {selector}")), "{removed}");
        assert!(removed.contains("--replicate-kinds") && removed.contains("before removing"), "{removed}");
        let unserved = left("example.com/v1", "UnservedGadget").expect("not served: not watched");
        assert!(unserved.contains("kubectl delete unservedgadget.v1.example.com -A"), "{unserved}");
        assert_eq!(left("networking.k8s.io/v1", "NetworkPolicy"), None, "watched: kopper deletes them");
        assert_eq!(left("v1", "ConfigMap"), None, "always watched");
    }

    #[test]
    fn another_kind_is_copied_only_when_allowed_served_and_only_from_protected_sources() {
        let settings = allowing(&[
            "networking.k8s.io/v1/NetworkPolicy",
            "v1/LimitRange",
            "v1/ResourceQuota",
            "apps/v1/Deployment",
            "example.com/v1/UnservedGadget",
        ]);
        let refusal = |rule: ReplicationRule| rule.to_rule(&settings).unwrap_err();

        let not_allowed = refusal(kind_rule("v1", "PodTemplate", "[platform]", ""));
        assert_eq!(not_allowed.reason, "KindNotAllowed");
        for named in
            ["--replicate-kinds", "KOPPER_REPLICATE_KINDS", "replication.extraKinds", "v1/PodTemplate"]
        {
            assert!(not_allowed.message.contains(named), "{named}: {}", not_allowed.message);
        }
        let not_served = refusal(kind_rule("example.com/v1", "UnservedGadget", "[platform]", ""));
        assert_eq!(not_served.reason, "KindNotServed");
        assert!(not_served.message.contains("CustomResourceDefinition"), "{}", not_served.message);
        for message in [&not_allowed.message, &not_served.message] {
            assert!(!message.contains("  "), "one space between words: {message}");
        }
        assert!(!not_allowed.revokes_copies() && !not_served.revokes_copies(), "copies are kept");

        let unprotected =
            refusal(kind_rule("networking.k8s.io/v1", "NetworkPolicy", "[platform, team-a]", ""));
        assert_eq!(unprotected.reason, "SourceNotProtected");
        assert!(
            unprotected.message.contains("\"team-a\"")
                && unprotected.message.contains("spec.allowUnprotectedSources")
        );
        assert!(!unprotected.revokes_copies(), "a protection missing for a moment empties no namespace");

        let rule =
            kind_rule("networking.k8s.io/v1", "NetworkPolicy", "[team-a]", ", allowUnprotectedSources: true");
        assert!(rule.to_rule(&settings).unwrap().kind.is_generic(), "the admin said so");
        let rule = kind_rule("networking.k8s.io/v1", "NetworkPolicy", "[platform]", "");
        assert_eq!(rule.to_rule(&settings).unwrap().kind.to_string(), "NetworkPolicy");
        for (api_version, kind) in [("v1", "LimitRange"), ("v1", "ResourceQuota"), ("apps/v1", "Deployment")]
        {
            let unprotected = refusal(kind_rule(api_version, kind, "[team-a]", ""));
            assert_eq!(unprotected.reason, "SourceNotProtected", "{kind}: no kind is harmless");
        }
        let limits = kind_rule("v1", "LimitRange", "[platform]", "").to_rule(&settings).unwrap();
        assert!(limits.kind.is_generic());
        assert_eq!(limits.sources.credential_types, None);

        for (field, extra) in
            [("keys", ", keys: [a]"), ("credentialTypes", ", credentialTypes: [helm.sh/release.v1]")]
        {
            let shaped = refusal(kind_rule("v1", "LimitRange", "[platform]", extra));
            assert_eq!(shaped.reason, "InvalidShape", "{field}");
            assert!(shaped.message.contains(&format!("spec.{field}")), "{}", shaped.message);
        }
        let typed = refusal(kind_rule("v1", "LimitRange", "[platform]", ", secretType: Opaque"));
        assert!(typed.message.contains("spec.secretType"), "{}", typed.message);

        let config_maps = kind_rule("v1", "ConfigMap", "[team-a]", "").to_rule(&Settings::default()).unwrap();
        assert_eq!(config_maps.kind, ObjectKind::ConfigMap, "always allowed, from anywhere, as before");
    }

    #[test]
    fn a_refused_escalation_is_the_ready_condition_naming_the_copy_and_the_server_s_reason() {
        let key = crate::controllers::replication::model::CopyKey {
            kind: ObjectKind::ConfigMap,
            namespace: "team-a".into(),
            name: "exec".into(),
        };
        let findings = Findings {
            escalations: vec![EscalationRefused {
                key,
                reason: "attempting to grant RBAC permissions".into(),
            }],
            failed: 1,
            ..Findings::default()
        };
        let (status, reason, message) = findings.readiness();
        assert_eq!((status, reason), ("False", "EscalationRefused"));
        assert!(message.contains("team-a/exec") && message.contains("attempting to grant"), "{message}");
    }

    #[test]
    fn a_shape_that_would_override_kopper_s_marks_or_write_a_credential_type_is_refused() {
        let rule_with = |spec: &str| -> ReplicationRule {
            serde_yaml::from_str(&format!(
                "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: r}}\nspec: {{namespaces: \
                 [src], selector: {{matchLabels: {{a: b}}}}, {spec}}}"
            ))
            .unwrap()
        };
        let refused = |spec: &str| rule_with(spec).to_rule(&Settings::default()).unwrap_err();
        for spec in [
            "kind: Secret, copyLabels: {add: {kopper.dev/replicated-by: r-1}}",
            "kind: Secret, copyLabels: {add: {app.kubernetes.io/managed-by: me}}",
            "kind: Secret, copyLabels: {add: {'not a key': x}}",
            "kind: ConfigMap, secretType: Opaque",
            "kind: Secret, secretType: kubernetes.io/service-account-token",
        ] {
            let refusal = refused(spec);
            assert_eq!(refusal.reason, "InvalidShape", "{spec}");
            assert!(refusal.message.contains("spec."), "names the field: {}", refusal.message);
        }
        let rule = rule_with(
            "kind: Secret, keys: [ca.crt], secretType: Opaque, copyLabels: {exclude: [x/], add: {team: a}}, \
             copyAnnotations: {include: [docs/]}, keepToolMarks: [ArgoCD], deletionPolicy: Orphan",
        );
        let shaped = rule.to_rule(&Settings::default()).unwrap();
        assert_eq!(shaped.shape.keys, Some(["ca.crt".to_owned()].into()));
        assert_eq!(shaped.shape.secret_type.as_deref(), Some("Opaque"));
        assert_eq!(shaped.shape.extra_labels["team"], "a");
        assert!(shaped.shape.labels.keep_tools.contains(&Tool::ArgoCd));
        assert_eq!(shaped.shape.annotations.include, ["docs/"]);
        assert_eq!(shaped.deletion_policy, DeletionPolicy::Orphan);
    }

    fn rule_adding_labels(add: &BTreeMap<String, String>) -> ReplicationRule {
        let spec = json!({"kind": "ConfigMap", "namespaces": ["src"], "selector": {"matchLabels": {"a": "b"}},
                          "copyLabels": {"add": add}});
        serde_json::from_value(json!({"apiVersion": "kopper.dev/v1alpha1", "kind": "ReplicationRule",
                                      "metadata": {"name": "r"}, "spec": spec}))
        .unwrap()
    }

    #[test]
    fn added_labels_are_judged_as_the_api_server_judges_label_keys_and_values() {
        let a = |n: usize| "a".repeat(n);
        for (key, value) in [
            (format!("{}/x", a(253)), "y".to_owned()),
            (format!("{}.example.com/{}", a(63), a(63)), String::new()),
            (a(63), a(63)),
            ("example.com/Team_1.x".to_owned(), "A-b_c.9".to_owned()),
        ] {
            assert_eq!(label_problem(&key, &value), None, "{key}: {value}");
        }
        for (key, value) in [
            (format!("{}/x", a(254)), "y".to_owned()),
            (format!("{}/x", a(260)), "y".to_owned()),
            (a(64), "y".to_owned()),
            (format!("example.com/{}", a(64)), "y".to_owned()),
            ("example.com/".to_owned(), "y".to_owned()),
            ("/x".to_owned(), "y".to_owned()),
            ("a/b/c".to_owned(), "y".to_owned()),
            ("Example.com/x".to_owned(), "y".to_owned()),
            ("x".to_owned(), a(64)),
            ("x".to_owned(), "-y".to_owned()),
            ("x".to_owned(), "a b".to_owned()),
        ] {
            assert!(label_problem(&key, &value).is_some(), "{key}: {value}");
        }
        let prefix_too_long = BTreeMap::from([(format!("{}/x", a(260)), "y".to_owned())]);
        let refusal = rule_adding_labels(&prefix_too_long).to_rule(&Settings::default()).unwrap_err();
        assert_eq!(refusal.reason, "InvalidShape");
        assert!(refusal.message.contains("253"), "{}", refusal.message);
    }

    #[test]
    fn an_invalid_label_message_names_the_part_the_rule_and_the_fix() {
        for (key, value, rule, fix) in [
            (
                "bad key",
                "x",
                "a key is a name of letters",
                "; rename the key, e.g. `team` or `example.com/team`",
            ),
            ("team", "-x", "a value is empty or at most 63", "; change the value, e.g. `platform-ca`"),
        ] {
            let labels = BTreeMap::from([(key.to_owned(), value.to_owned())]);
            let message = rule_adding_labels(&labels).to_rule(&Settings::default()).unwrap_err().message;
            assert!(
                message.starts_with(&format!("spec.copyLabels.add: {key}: {value} is not a valid")),
                "{message}"
            );
            assert!(message.contains(rule) && message.ends_with(fix), "{message}");
        }
        let long = BTreeMap::from([(format!("{}/x", "a".repeat(260)), "y".to_owned())]);
        let message = rule_adding_labels(&long).to_rule(&Settings::default()).unwrap_err().message;
        assert!(message.ends_with("at most 63; shorten the key"), "{message}");
    }

    #[test]
    fn an_invalid_shape_message_quotes_a_huge_key_in_part_and_counts_the_others() {
        let huge = "a".repeat(10_000);
        let invalid = BTreeMap::from([
            (format!("{huge}!"), "x".to_owned()),
            ("ok".to_owned(), "fine".to_owned()),
            ("bad key".to_owned(), "x".to_owned()),
        ]);
        let refusal = rule_adding_labels(&invalid).to_rule(&Settings::default()).unwrap_err();
        assert_eq!(refusal.reason, "InvalidShape");
        assert!(refusal.message.len() < 1024, "{} bytes: {}", refusal.message.len(), refusal.message);
        assert!(refusal.message.contains("(10001 characters)"), "{}", refusal.message);
        assert!(refusal.message.ends_with("(1 more like it)"), "{}", refusal.message);
        let own = BTreeMap::from([(format!("kopper.dev/{huge}"), "x".to_owned())]);
        let refusal = rule_adding_labels(&own).to_rule(&Settings::default()).unwrap_err();
        assert!(refusal.message.len() < 1024, "{} bytes", refusal.message.len());
        assert!(refusal.message.contains("kopper's own labels"), "{}", refusal.message);
        let long_value = BTreeMap::from([("team".to_owned(), "v".repeat(10_000))]);
        let refusal = rule_adding_labels(&long_value).to_rule(&Settings::default()).unwrap_err();
        assert!(refusal.message.len() < 1024, "{} bytes", refusal.message.len());
    }

    #[test]
    fn a_source_copied_otherwise_than_asked_makes_the_rule_not_ready_and_names_the_fix() {
        let problem = ShapeProblem::TypeNeedsKeys {
            source: "src/tls".into(),
            secret_type: "kubernetes.io/tls".into(),
            keys: vec!["tls.crt", "tls.key"],
        };
        let missing = ShapeProblem::KeysMissing { source: "src/tls".into(), keys: vec!["x".into()] };
        let findings = Findings {
            sources_matched: 1,
            wanted: 1,
            copies_in_sync: 1,
            shape_problems: vec![missing, problem],
            ..Findings::default()
        };
        let (status, reason, message) = findings.readiness();
        assert_eq!(
            (status, reason),
            ("False", "SecretTypeNeedsKeys"),
            "a source not copied at all comes first"
        );
        assert!(message.contains("spec.secretType") && message.ends_with("(1 more like it)"), "{message}");
    }

    fn secret_sync(spec: &str) -> SecretSync {
        let mut sync: SecretSync = serde_yaml::from_str(&format!(
            "apiVersion: kopper.dev/v1alpha1\nkind: SecretSync\nmetadata: {{name: share, namespace: shop, uid: u1}}\n\
             spec: {{sourceNamespace: shop, secretName: shop-ca, destinationNamespaces: [payments], {spec}}}"
        ))
        .unwrap();
        sync.metadata.generation = Some(2);
        sync
    }

    #[test]
    fn a_secret_sync_reads_into_a_tenant_s_secret_rule_that_copies_no_credential() {
        let rule = secret_sync("keys: [ca.crt], secretType: Opaque, deletionPolicy: Orphan")
            .to_rule(&Settings::default())
            .unwrap();
        assert_eq!(rule.id, RuleId::secret_sync("shop", "share"));
        assert_eq!((rule.kind, rule.uid.as_str()), (ObjectKind::Secret, "u1"));
        assert_eq!(rule.sources.namespaces, ["shop"]);
        assert_eq!(rule.sources.name.as_deref(), Some("shop-ca"));
        assert_eq!(rule.sources.credential_types, Some(Vec::new()), "no credential type, ever");
        assert!(!rule.sources.may_copy_secret_type(Some("kubernetes.io/service-account-token")));
        assert!(rule.sources.may_copy_secret_type(Some("kubernetes.io/dockerconfigjson")));
        assert_eq!(rule.shape.keys, Some(["ca.crt".to_owned()].into()));
        assert_eq!(rule.shape.secret_type.as_deref(), Some("Opaque"));
        assert_eq!(rule.deletion_policy, DeletionPolicy::Orphan);
        let TargetMatch::Listed { tenant, names, .. } = &rule.targets else { panic!("{:?}", rule.targets) };
        assert_eq!(
            (tenant.as_str(), names.iter().map(String::as_str).collect::<Vec<_>>()),
            ("shop", vec!["payments"])
        );
    }

    #[test]
    fn a_secret_sync_is_refused_a_foreign_source_a_credential_type_and_no_destination() {
        let mut foreign = secret_sync("");
        foreign.spec.source_namespace = "other".into();
        let foreign = foreign.to_rule(&Settings::default()).unwrap_err();
        assert_eq!(foreign.reason, "CrossNamespaceSourceDenied");
        assert!(foreign.message.contains("this SecretSync's namespace"), "{}", foreign.message);
        let mut flagged = secret_sync("");
        flagged.spec.source_namespace = "other".into();
        let flag = Settings { allow_cross_namespace_sources: true, ..Settings::default() };
        let flagged = flagged.to_rule(&flag).unwrap_err();
        assert_eq!(flagged.reason, "CrossNamespaceSourceDenied", "a SecretSync reads its own namespace only");
        assert!(flagged.message.contains("never reads another namespace's Secrets"), "{}", flagged.message);
        assert!(flagged.message.contains("the owner of \"other\" can create the SecretSync there"));
        let credential =
            secret_sync("secretType: bootstrap.kubernetes.io/token").to_rule(&Settings::default());
        assert_eq!(credential.unwrap_err().reason, "InvalidShape");
        let mut nowhere = secret_sync("");
        nowhere.spec.destination_namespaces.clear();
        assert_eq!(nowhere.to_rule(&Settings::default()).unwrap_err().reason, "NoDestination");
    }

    fn object(namespace: &str, name: &str, labels: &[(&str, &str)]) -> ObjectInfo {
        ObjectInfo {
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("{namespace}-{name}"),
            labels: labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect(),
            ..ObjectInfo::default()
        }
    }

    /// Helm takes any object labelled owner=helm for a release record, whatever its name or
    /// type: no tenant's rule copies one; an admin's Secret rule only naming the type.
    #[test]
    fn an_object_labelled_owner_helm_is_a_helm_release_record_no_tenant_shares() {
        let helm = [("owner", "helm"), ("name", "web"), ("status", "deployed"), ("version", "1")];
        let secret = secret_sync("").to_rule(&Settings::default()).unwrap();
        assert!(!secret.sources.matches(&object("shop", "shop-ca", &helm)), "an Opaque Secret so labelled");
        assert!(secret.sources.matches(&object("shop", "shop-ca", &[("owner", "team-a")])));
        let problem =
            refused_named_source(&secret, Some(&object("shop", "shop-ca", &helm)), None, false).unwrap();
        assert_eq!(problem.reason(), "CredentialTypeRefused");
        assert!(problem.message().contains("labelled owner=helm"), "{}", problem.message());

        let config_map = sync("tenant", "tenant").to_rule(&Settings::default()).unwrap();
        assert!(!config_map.sources.matches(&object("tenant", "cfg", &helm)), "Helm's configmap driver");
        let problem = refused_named_source(&config_map, Some(&object("tenant", "cfg", &helm)), None, false);
        assert_eq!(problem.as_ref().map(ShapeProblem::reason), Some("HelmReleaseRefused"));
        let token_like = object("tenant", "cfg", &[]);
        assert!(config_map.sources.matches(&token_like), "a ConfigMap is no token");
        let bootstrap_named = object("tenant", "bootstrap-token-x", &[]);
        let mut named = config_map.clone();
        named.sources.name = Some("bootstrap-token-x".into());
        assert!(named.sources.matches(&bootstrap_named), "nor a bootstrap token, whatever its name");

        let admin = |credential_types: &str| -> Rule {
            serde_yaml::from_str::<ReplicationRule>(&format!(
                "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: r}}\nspec: {{kind: \
                 Secret, namespaces: [src], selector: {{matchLabels: {{owner: helm}}}}, {credential_types}}}"
            ))
            .unwrap()
            .to_rule(&Settings::default())
            .unwrap()
        };
        assert!(!admin("").sources.matches(&object("src", "web", &helm)));
        assert!(admin("credentialTypes: [helm.sh/release.v1]").sources.matches(&object("src", "web", &helm)));
    }

    /// A tenant's rule adds no label by which Helm or Argo CD would take its copies for their
    /// own records, and its copies carry none of the source's, whatever it keeps.
    #[test]
    fn a_tenant_s_copies_carry_no_tool_credential_label() {
        for add in
            ["{owner: helm}", "{argocd.argoproj.io/secret-type: repository}", "{argocd.argoproj.io/x: y}"]
        {
            let refusal = secret_sync(&format!("copyLabels: {{add: {add}}}")).to_rule(&Settings::default());
            let refusal = refusal.unwrap_err();
            assert_eq!(refusal.reason, "InvalidShape", "{add}");
            assert!(refusal.message.starts_with("spec.copyLabels.add: "), "{}", refusal.message);
            assert!(refusal.message.contains("remove it"), "{}", refusal.message);
            let mut config_map = sync("tenant", "tenant");
            config_map.spec.shaping = serde_yaml::from_str(&format!("copyLabels: {{add: {add}}}")).unwrap();
            assert_eq!(config_map.to_rule(&Settings::default()).unwrap_err().reason, "InvalidShape", "{add}");
        }
        assert!(secret_sync("copyLabels: {add: {owner: team-a}}").to_rule(&Settings::default()).is_ok());
        let admin = rule_adding_labels(&[("owner".to_owned(), "helm".to_owned())].into());
        assert!(admin.to_rule(&Settings::default()).is_ok(), "an admin's rule may");

        let tenant = secret_sync("keepToolMarks: [Helm, ArgoCD]").to_rule(&Settings::default()).unwrap();
        assert!(!tenant.shape.labels.copies("argocd.argoproj.io/secret-type", "repository"));
        assert!(!tenant.shape.labels.copies("owner", "helm"));
        assert!(tenant.shape.labels.copies("argocd.argoproj.io/instance", "web"), "other marks as kept");
        assert!(tenant.shape.labels.copies("owner", "team-a"));
        let admin = rule_adding_labels(&BTreeMap::new()).to_rule(&Settings::default()).unwrap();
        assert!(admin.shape.labels.copies("owner", "helm"));
    }

    #[test]
    fn a_secret_sync_s_status_names_only_the_namespaces_it_named() {
        let sync = secret_sync("destinationSelector: {}");
        let conflict = |namespace: &str| CopyConflict {
            namespace: namespace.into(),
            name: "shop-ca".into(),
            reason: "ClaimedByOtherRule".into(),
            message: "SecretSync.x.elsewhere holds it".into(),
        };
        let findings = sync.redact(Findings {
            sources_matched: 1,
            wanted: 3,
            copies_in_sync: 1,
            synced_namespaces: ["selected".to_owned()].into(),
            conflicts: vec![conflict("payments"), conflict("hidden")],
            ..Findings::default()
        });
        let status = sync.next_status(&Ok(findings), now()).unwrap()["status"].clone();
        let text = status.to_string();
        assert!(
            !text.contains("selected") && !text.contains("hidden") && !text.contains("elsewhere"),
            "{text}"
        );
        assert_eq!(status["syncedCount"], 1);
        assert_eq!(status["conflicts"][0]["reason"], "DestinationOccupied");
        assert!(
            status["conflicts"][0]["message"].as_str().unwrap().contains("by a Secret kopper did not make")
        );
        assert_eq!(status["conditions"][0]["reason"], "Conflict");
        assert_eq!(status["conditions"][0]["message"], "2 copies are not written: the place is taken");
    }

    #[test]
    fn a_refused_source_is_named_before_a_missing_one() {
        let problem = ShapeProblem::CredentialType {
            source: "shop/token".into(),
            secret_type: "kubernetes.io/service-account-token".into(),
        };
        let findings = Findings {
            missing_source: Some("shop/token".into()),
            shape_problems: vec![problem],
            ..Findings::default()
        };
        let (status, reason, message) = findings.readiness();
        assert_eq!((status, reason), ("False", "CredentialTypeRefused"));
        assert!(message.contains("kubernetes.io/service-account-token"), "{message}");
    }

    #[test]
    fn invalid_selector_is_refused() {
        let rule: ReplicationRule = serde_yaml::from_str(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r}\nspec: {kind: ConfigMap, \
             namespaces: [src], selector: {matchExpressions: [{key: a, operator: Bogus}]}}",
        )
        .unwrap();
        assert_eq!(rule.to_rule(&Settings::default()).unwrap_err().reason, "InvalidSelector");
    }

    /// Of what kopper refuses as `InvalidShape` (and checks again, for servers without CEL),
    /// the schema refuses first on kube-apiserver 1.25+ what CEL's cost budget allows.
    #[test]
    fn schema_refuses_what_kopper_would_refuse_as_an_invalid_shape() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(ReplicationRule::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let rules = spec["x-kubernetes-validations"].to_string();
        assert!(rules.contains("!has(self.secretType) || (self.kind == 'Secret'"), "{rules}");
        let credential = spec["properties"]["secretType"]["x-kubernetes-validations"].to_string();
        for kind in crate::tenancy::CREDENTIAL_SECRET_TYPES {
            assert!(credential.contains(&format!("'{kind}'")), "{credential}");
        }
        let add =
            spec["properties"]["copyLabels"]["properties"]["add"]["x-kubernetes-validations"].to_string();
        assert!(add.contains("!key.startsWith('kopper.dev/')"), "{add}");
        // A key's syntax is kopper's check alone: CEL sizes a map key by the largest request,
        // so a regular expression over 32 of them would exceed kube-apiserver's cost budget for
        // one rule and the CRD would be refused.
        assert!(!add.contains("matches("), "{add}");
    }
}
