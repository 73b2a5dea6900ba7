//! `kopper plan` for ReplicationRule, ConfigMapSync and SecretSync: what the rules would create, update
//! and delete, from the same decision the engine makes, without writing anything.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};

use kube::core::ObjectMeta;

use super::desired::{self, Change, Existing, ShapeProblem, World, plan_rule};
use super::model::{
    CopyKey, CopyState, KeptRules, NamespaceInfo, ObjectInfo, ObjectKind, Payload, Rule, RuleId, Source,
    is_copy,
};
use super::rules::{RuleObject, refused_destinations_message};
use crate::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};
use crate::runtime::Settings;

/// What the replication engine decides from: every namespace, ConfigMap and Secret.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    pub config_maps: Vec<Source>,
    pub secrets: Vec<Source>,
    /// The objects of the other kinds the rules copy (see [`ClusterObjects::add_kind`]).
    pub others: BTreeMap<ObjectKind, Vec<Source>>,
    /// Every object where a copy may belong, as the engine judges it.
    pub existing: BTreeMap<CopyKey, Existing>,
}

impl ClusterObjects {
    pub fn new(namespaces: &[Namespace], config_maps: &[ConfigMap], secrets: &[Secret]) -> Self {
        let namespaces = namespaces
            .iter()
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect();
        let config_maps: Vec<(&ObjectMeta, Payload)> =
            config_maps.iter().map(|object| (&object.metadata, Payload::from_config_map(object))).collect();
        let secrets: Vec<(&ObjectMeta, Payload)> =
            secrets.iter().map(|object| (&object.metadata, Payload::from_secret(object))).collect();
        let existing = [(ObjectKind::ConfigMap, &config_maps), (ObjectKind::Secret, &secrets)]
            .into_iter()
            .flat_map(|(kind, objects)| {
                objects.iter().map(move |(meta, payload)| {
                    (ObjectInfo::from_meta(meta).key(kind), as_the_engine_finds(meta, payload))
                })
            })
            .collect();
        let sources = |objects: Vec<(&ObjectMeta, Payload)>| -> Vec<Source> {
            objects
                .into_iter()
                .map(|(meta, payload)| Source::new(ObjectInfo::from_meta(meta), payload))
                .collect()
        };
        Self {
            namespaces,
            config_maps: sources(config_maps),
            secrets: sources(secrets),
            others: BTreeMap::new(),
            existing,
        }
    }

    /// Adds the objects of `kind`, a kind besides ConfigMap and Secret, as the API server
    /// sends them: their metadata and their top-level fields.
    pub fn add_kind(
        &mut self,
        kind: ObjectKind,
        objects: &[(ObjectMeta, serde_json::Map<String, serde_json::Value>)],
    ) {
        let mut sources = Vec::new();
        for (meta, fields) in objects {
            let payload = Payload::generic(fields.clone());
            self.existing.insert(ObjectInfo::from_meta(meta).key(kind), as_the_engine_finds(meta, &payload));
            sources.push(Source::new(ObjectInfo::from_meta(meta), payload));
        }
        self.others.insert(kind, sources);
    }
}

/// An object where a copy may belong, as the engine judges it: kopper's copy (a rule's, or
/// an orphan) only when its marks say so and no other controller owns it, as in the
/// engine's copies cache ([`CopyState::new`], [`is_copy`]); otherwise not kopper's.
fn as_the_engine_finds(meta: &ObjectMeta, payload: &Payload) -> Existing {
    let state = CopyState::new(meta, payload);
    if is_copy(meta) || state.orphan_source.is_some() { Existing::Copy(state) } else { Existing::Unmanaged }
}

/// What one rule would change, or why it is refused.
#[derive(Clone, Debug)]
pub struct RulePlan {
    pub id: RuleId,
    pub refused: Option<String>,
    pub changes: Vec<Change>,
    /// What the rule asks for and would not get, besides conflicts (its status says the
    /// same): destinations that do not accept its copies, the one source it names missing.
    pub unmet: Vec<String>,
}

/// Every change the rules would make and every conflict they would report, decided as the
/// engine decides (all rules at once, so rules that want the same copy see each other).
pub fn plan_rules(
    replication_rules: &[ReplicationRule],
    config_map_syncs: &[ConfigMapSync],
    secret_syncs: &[SecretSync],
    settings: &Settings,
    cluster: &ClusterObjects,
) -> Vec<RulePlan> {
    let (mut rules, mut refused, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for object in replication_rules {
        collect(object, settings, &mut rules, &mut refused, &mut kept);
    }
    for object in config_map_syncs {
        collect(object, settings, &mut rules, &mut refused, &mut kept);
    }
    for object in secret_syncs {
        collect(object, settings, &mut rules, &mut refused, &mut kept);
    }
    let kept = KeptRules::new(kept);
    let mut plans: Vec<RulePlan> = refused
        .into_iter()
        .map(|(id, refusal)| RulePlan { id, refused: Some(refusal), changes: Vec::new(), unmet: Vec::new() })
        .collect();
    for rule in &rules {
        let objects = match rule.kind {
            ObjectKind::ConfigMap => &cluster.config_maps,
            ObjectKind::Secret => &cluster.secrets,
            ObjectKind::Other(_) => cluster.others.get(&rule.kind).map_or(&[][..], Vec::as_slice),
        };
        let mut plan = plan_one(rule, &rules, &kept, cluster, objects);
        // A copy of another kind whose marks are right, and whose content only a dry-run of
        // its write can judge (the server defaults fields), is taken as in sync: plan writes
        // nothing, not even a dry-run.
        plan.changes.retain(
            |change| !matches!(change, Change::Update { copy, .. } if copy.rendering_check.is_some()),
        );
        let refused_source = plan.shape_problems.iter().any(ShapeProblem::refuses_source);
        let mut unmet = unmet(rule, &cluster.namespaces, plan.sources_matched, refused_source);
        unmet.extend(plan.shape_problems.iter().map(ShapeProblem::message));
        let changes = plan.changes;
        plans.push(RulePlan { id: rule.id.clone(), refused: None, changes, unmet });
    }
    plans.sort_by(|a, b| a.id.cmp(&b.id));
    plans
}

/// Sorts `object` into the `rules` in force or the `refused`, and those of these that keep
/// their copies into `kept`, as the engine does.
fn collect<R: RuleObject>(
    object: &R,
    settings: &Settings,
    rules: &mut Vec<Rule>,
    refused: &mut Vec<(RuleId, String)>,
    kept: &mut Vec<RuleId>,
) {
    if object.meta().deletion_timestamp.is_some() {
        return;
    }
    match object.to_rule(settings) {
        Ok(rule) => rules.push(rule),
        Err(refusal) => {
            if !refusal.revokes_copies() {
                kept.push(object.rule_id());
            }
            refused.push((object.rule_id(), refusal.to_string()));
        }
    }
}

/// What `rule` asks for and would not get besides conflicts, as its status would say it.
/// `refused_source`: the source it names exists but is refused (its problem says why).
fn unmet(
    rule: &Rule,
    namespaces: &BTreeMap<String, NamespaceInfo>,
    sources_matched: usize,
    refused_source: bool,
) -> Vec<String> {
    let mut unmet = Vec::new();
    let refused = rule.refused_destinations(namespaces);
    if !refused.is_empty() {
        unmet.push(refused_destinations_message(&refused, rule.id.namespace.as_deref()));
    }
    if let Some(source) = rule.missing_named_source(sources_matched).filter(|_| !refused_source) {
        unmet.push(format!("the source {source} does not exist"));
    }
    unmet
}

/// What `rule` would do among the `rules` in force and the copies the `kept` rules hold,
/// with every object's content at hand (`objects`, those of its kind).
fn plan_one(
    rule: &Rule,
    rules: &[Rule],
    kept: &KeptRules,
    cluster: &ClusterObjects,
    objects: &[Source],
) -> desired::RulePlan {
    let infos: Vec<ObjectInfo> = objects.iter().map(|object| (*object.info).clone()).collect();
    let world = World::new(rules, &cluster.namespaces, &infos).keeping(kept);
    let sources: HashMap<String, Source> = world
        .matched_sources(rule)
        .into_iter()
        .filter_map(|info| objects.iter().find(|object| object.info.uid == info.uid))
        .map(|source| (source.info.uid.clone(), source.clone()))
        .collect();
    plan_rule(rule, &world, &sources, &cluster.existing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::replication::desired::ConflictReason;
    use crate::controllers::replication::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, REPLICATED_BY_LABEL};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use serde_json::json;

    fn namespace(name: &str) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    }

    #[test]
    fn plan_takes_an_object_another_controller_owns_for_no_copy_whatever_its_labels() {
        let rule: ReplicationRule = serde_yaml::from_str(
            "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r, uid: u1}\n\
             spec: {kind: ConfigMap, namespaces: [src], selector: {matchLabels: {copy: 'yes'}}}",
        )
        .unwrap();
        let source: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "cfg", "namespace": "src", "uid": "s1", "labels": {"copy": "yes"}},
            "data": {"key": "v"},
        }))
        .unwrap();
        // Marked as r's copy, but owned by another controller: the engine leaves it alone.
        let label = RuleId::replication_rule("r").label_value();
        let owned: ConfigMap = serde_json::from_value(json!({
            "metadata": {
                "name": "cfg", "namespace": "a", "uid": "o1", "resourceVersion": "5",
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, REPLICATED_BY_LABEL: label},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "d1",
                                     "controller": true}],
            },
            "data": {"key": "other"},
        }))
        .unwrap();
        let cluster = ClusterObjects::new(&[namespace("src"), namespace("a")], &[source, owned], &[]);

        let plans = plan_rules(&[rule], &[], &[], &Settings::default(), &cluster);

        let [plan] = plans.as_slice() else { panic!("{plans:?}") };
        assert!(
            matches!(
                plan.changes.as_slice(),
                [Change::Conflict { key, reason: ConflictReason::NotManagedByKopper }] if key.namespace == "a"
            ),
            "reported as taken, as the engine reports it, not rewritten: {:?}",
            plan.changes
        );
    }

    /// `kopper plan` decides for an allowed kind as the engine does: a copy to create where
    /// there is none; none where kopper's copy carries its marks (only a dry-run, which plan
    /// never sends, could judge its content against the server's defaults); and a rule for a
    /// kind not allowed refused by name.
    #[test]
    fn plan_covers_kinds_the_admin_allows() {
        let kinds = crate::kinds::AllowedKinds::new([crate::kinds::parse_entry(
            "networking.k8s.io/v1/NetworkPolicy",
        )
        .unwrap()]);
        let allowed = kinds.iter().next().unwrap();
        allowed
            .resolved(kube::core::ApiResource::erase::<k8s_openapi::api::networking::v1::NetworkPolicy>(&()));
        let settings = Settings { replicate_kinds: kinds, ..Settings::default() };
        let rule = |kind: &str| -> ReplicationRule {
            serde_yaml::from_str(&format!(
                "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: {}, uid: u1}}\n\
                 spec: {{apiVersion: networking.k8s.io/v1, kind: {kind}, namespaces: [kube-system], \
                 selector: {{matchLabels: {{copy: 'yes'}}}}}}",
                kind.to_lowercase()
            ))
            .unwrap()
        };
        let source = json!({
            "metadata": {"name": "deny", "namespace": "kube-system", "uid": "s1", "resourceVersion": "3",
                         "labels": {"copy": "yes"}},
            "spec": {"podSelector": {}},
        });
        let mut cluster =
            ClusterObjects::new(&[namespace("kube-system"), namespace("a"), namespace("b")], &[], &[]);
        let objects =
            |extra: Vec<serde_json::Value>| -> Vec<(ObjectMeta, serde_json::Map<String, serde_json::Value>)> {
                std::iter::once(source.clone())
                    .chain(extra)
                    .map(|object| {
                        let meta: ObjectMeta = serde_json::from_value(object["metadata"].clone()).unwrap();
                        (meta, object.as_object().unwrap().clone())
                    })
                    .collect()
            };
        let kind = ObjectKind::Other(allowed);
        cluster.add_kind(kind, &objects(Vec::new()));
        let plans = plan_rules(&[rule("NetworkPolicy")], &[], &[], &settings, &cluster);
        let creates: Vec<&str> = plans[0]
            .changes
            .iter()
            .filter_map(|change| match change {
                Change::Create(copy) => Some(copy.key.namespace.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(creates, ["a", "b"], "{:?}", plans[0].changes);

        // kopper's copies in place, as the server renders them (policyTypes filled in).
        let copies: Vec<serde_json::Value> = plans[0]
            .changes
            .iter()
            .filter_map(Change::copy)
            .map(|copy| {
                json!({
                    "metadata": {"name": "deny", "namespace": copy.key.namespace, "uid": format!("c-{}", copy.key.namespace),
                                 "resourceVersion": "9", "labels": *copy.labels, "annotations": *copy.annotations},
                    "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
                })
            })
            .collect();
        let mut cluster =
            ClusterObjects::new(&[namespace("kube-system"), namespace("a"), namespace("b")], &[], &[]);
        cluster.add_kind(kind, &objects(copies));
        let plans = plan_rules(&[rule("NetworkPolicy"), rule("Ingress")], &[], &[], &settings, &cluster);
        let policy = plans.iter().find(|plan| plan.id.name == "networkpolicy").unwrap();
        assert!(policy.changes.is_empty() && policy.refused.is_none(), "{policy:?}");
        let ingress = plans.iter().find(|plan| plan.id.name == "ingress").unwrap();
        assert!(
            ingress.refused.as_deref().is_some_and(|why| why.starts_with("KindNotAllowed")),
            "{ingress:?}"
        );
    }

    fn secret(name: &str, extra: serde_json::Value) -> Secret {
        let mut object = serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
            "data": {"k": "dg=="},
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            object[key] = value.clone();
        }
        serde_json::from_value(object).unwrap()
    }

    fn share(name: &str, secret_name: &str) -> SecretSync {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "SecretSync",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
            "spec": {"sourceNamespace": "shop", "secretName": secret_name, "destinationNamespace": "payments"},
        }))
        .unwrap()
    }

    /// `kopper plan` shows a SecretSync's copy, and says why one of a credential writes none.
    #[test]
    fn plan_shows_a_secret_sync_s_copy_and_refuses_a_service_account_token() {
        let namespaces: Vec<Namespace> = serde_json::from_value(serde_json::json!([
            {"metadata": {"name": "shop"}},
            {"metadata": {"name": "payments", "annotations": {"kopper.dev/accept-replication-from": "shop"}}},
        ]))
        .unwrap();
        let token = serde_json::json!({
            "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "token", "namespace": "shop", "uid": "uid-token",
                         "annotations": {"kubernetes.io/service-account.name": "default"}},
        });
        let secrets = [secret("plain", serde_json::json!({})), secret("token", token)];
        let cluster = ClusterObjects::new(&namespaces, &[], &secrets);
        let syncs = [share("plain", "plain"), share("token", "token")];
        let plans = plan_rules(&[], &[], &syncs, &Settings::default(), &cluster);
        let plain = plans.iter().find(|plan| plan.id.name == "plain").unwrap();
        assert!(
            matches!(plain.changes.as_slice(), [Change::Create(copy)] if copy.key.namespace == "payments"),
            "{:?}",
            plain.changes
        );
        let token = plans.iter().find(|plan| plan.id.name == "token").unwrap();
        assert!(token.changes.is_empty(), "{:?}", token.changes);
        assert_eq!(token.unmet.len(), 1, "the refusal, not a missing source: {:?}", token.unmet);
        assert!(token.unmet[0].contains("kubernetes.io/service-account-token"), "{:?}", token.unmet);
    }
}
