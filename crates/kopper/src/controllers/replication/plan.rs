//! `kopper plan` for ReplicationRule, ConfigMapSync and SecretSync: what the rules would create, update
//! and delete, from the same decision the engine makes, without writing anything.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};

use super::desired::{self, Change, Existing, ShapeProblem, World, plan_rule};
use super::model::{
    CopyKey, CopyState, NamespaceInfo, ObjectInfo, ObjectKind, Payload, Rule, RuleId, Source,
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
}

impl ClusterObjects {
    pub fn new(namespaces: &[Namespace], config_maps: &[ConfigMap], secrets: &[Secret]) -> Self {
        let namespaces = namespaces
            .iter()
            .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect();
        let config_maps = config_maps
            .iter()
            .map(|object| {
                Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_config_map(object))
            })
            .collect();
        let secrets = secrets
            .iter()
            .map(|object| Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_secret(object)))
            .collect();
        Self { namespaces, config_maps, secrets }
    }
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
    let mut refused = Vec::new();
    let mut rules = Vec::new();
    for object in replication_rules {
        collect(object, settings, &mut rules, &mut refused);
    }
    for object in config_map_syncs {
        collect(object, settings, &mut rules, &mut refused);
    }
    for object in secret_syncs {
        collect(object, settings, &mut rules, &mut refused);
    }
    let mut plans: Vec<RulePlan> = refused
        .into_iter()
        .map(|(id, refusal)| RulePlan { id, refused: Some(refusal), changes: Vec::new(), unmet: Vec::new() })
        .collect();
    for rule in &rules {
        let objects = match rule.kind {
            ObjectKind::ConfigMap => &cluster.config_maps,
            ObjectKind::Secret => &cluster.secrets,
        };
        let plan = plan_one(rule, &rules, &cluster.namespaces, objects);
        let refused_source = plan.shape_problems.iter().any(ShapeProblem::refuses_source);
        let mut unmet = unmet(rule, &cluster.namespaces, plan.sources_matched, refused_source);
        unmet.extend(plan.shape_problems.iter().map(ShapeProblem::message));
        let changes = plan.changes;
        plans.push(RulePlan { id: rule.id.clone(), refused: None, changes, unmet });
    }
    plans.sort_by(|a, b| a.id.cmp(&b.id));
    plans
}

fn collect<R: RuleObject>(
    object: &R,
    settings: &Settings,
    rules: &mut Vec<Rule>,
    refused: &mut Vec<(RuleId, String)>,
) {
    if object.meta().deletion_timestamp.is_some() {
        return;
    }
    match object.to_rule(settings) {
        Ok(rule) => rules.push(rule),
        Err(refusal) => refused.push((object.rule_id(), refusal.to_string())),
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

/// What `rule` would do, with every object's content at hand.
fn plan_one(
    rule: &Rule,
    rules: &[Rule],
    namespaces: &BTreeMap<String, NamespaceInfo>,
    objects: &[Source],
) -> desired::RulePlan {
    let infos: Vec<ObjectInfo> = objects.iter().map(|object| (*object.info).clone()).collect();
    let world = World::new(rules, namespaces, &infos);
    let sources: HashMap<String, Source> = world
        .matched_sources(rule)
        .into_iter()
        .filter_map(|info| objects.iter().find(|object| object.info.uid == info.uid))
        .map(|source| (source.info.uid.clone(), source.clone()))
        .collect();
    let existing: BTreeMap<CopyKey, Existing> = objects
        .iter()
        .map(|object| {
            let state = CopyState::from_info(&object.info, &object.payload);
            // A copy orphaned from its rule, as well as a rule's copy (see `Existing::found`).
            let existing = if object.info.is_kopper_copy() || state.orphan_source.is_some() {
                Existing::Copy(state)
            } else {
                Existing::Unmanaged
            };
            (object.info.key(rule.kind), existing)
        })
        .collect();
    plan_rule(rule, &world, &sources, &existing)
}

#[cfg(test)]
mod tests {
    use super::*;

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
