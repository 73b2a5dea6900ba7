//! `kopper plan`: what the rules would create, update and delete in the cluster now, from
//! the same decision the controllers make, without writing anything.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::ListParams;
use kube::{Api, Client};

use super::desired::{
    Change, CopyKey, CopyState, Existing, NamespaceInfo, ObjectInfo, ObjectKind, Payload, Rule, RuleId,
    Source, World, plan_rule,
};
use super::rules::RuleObject;
use crate::controllers::config_map_sync::types::ConfigMapSync;
use crate::controllers::replication_rule::types::ReplicationRule;
use crate::runtime::Settings;

/// Lists the rules, namespaces, ConfigMaps and Secrets once and prints, per rule, every
/// change the controllers would make and every conflict they would report.
pub async fn plan(client: &Client, settings: &Settings) -> anyhow::Result<String> {
    let mut refused = Vec::new();
    let mut rules = Vec::new();
    for object in list_rules::<ReplicationRule>(client).await? {
        collect(&object, settings, &mut rules, &mut refused);
    }
    for object in list_rules::<ConfigMapSync>(client).await? {
        collect(&object, settings, &mut rules, &mut refused);
    }
    let namespaces: BTreeMap<String, NamespaceInfo> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|namespace| NamespaceInfo::from_meta(&namespace.metadata))
        .map(|namespace| (namespace.name.clone(), namespace))
        .collect();
    let config_maps: Vec<Source> = Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|object| Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_config_map(object)))
        .collect();
    let secrets: Vec<Source> = Api::<Secret>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|object| Source::new(ObjectInfo::from_meta(&object.metadata), Payload::from_secret(object)))
        .collect();
    let mut out = String::new();
    for (id, refusal) in &refused {
        let _ = writeln!(out, "{id}: refused: {refusal}");
    }
    let mut totals = Totals::default();
    for rule in &rules {
        let objects = match rule.kind {
            ObjectKind::ConfigMap => &config_maps,
            ObjectKind::Secret => &secrets,
        };
        let changes = plan_one(rule, &rules, &namespaces, objects);
        render(&mut out, &rule.id, &changes, &mut totals);
    }
    let _ = writeln!(
        out,
        "Plan: {} to create, {} to update, {} to replace, {} to delete, {} conflicts.",
        totals.create, totals.update, totals.replace, totals.delete, totals.conflict
    );
    Ok(out)
}

async fn list_rules<R: RuleObject>(client: &Client) -> anyhow::Result<Vec<R>> {
    match Api::<R>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        // The CRD is not installed: there are no rules of that kind.
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Vec::new()),
        Err(error) => Err(error.into()),
    }
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

/// The changes `rule` would make, with every object's content at hand.
fn plan_one(
    rule: &Rule,
    rules: &[Rule],
    namespaces: &BTreeMap<String, NamespaceInfo>,
    objects: &[Source],
) -> Vec<Change> {
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
            let existing = if object.info.is_kopper_copy() {
                Existing::Copy(CopyState::from_info(&object.info, &object.payload))
            } else {
                Existing::Unmanaged
            };
            (object.info.key(rule.kind), existing)
        })
        .collect();
    plan_rule(rule, &world, &sources, &existing).changes
}

#[derive(Default)]
struct Totals {
    create: usize,
    update: usize,
    replace: usize,
    delete: usize,
    conflict: usize,
}

fn render(out: &mut String, rule: &RuleId, changes: &[Change], totals: &mut Totals) {
    let _ = writeln!(out, "{rule}:");
    if changes.is_empty() {
        let _ = writeln!(out, "  no changes");
    }
    for change in changes {
        let line = match change {
            Change::Create(copy) | Change::CreateIfAbsent(copy) => {
                totals.create += 1;
                format!("  + create  {} (from {}/{})", copy.key, copy.source.namespace, copy.source.name)
            }
            Change::Update { copy, .. } => {
                totals.update += 1;
                format!("  ~ update  {} (from {}/{})", copy.key, copy.source.namespace, copy.source.name)
            }
            Change::Replace { copy, .. } => {
                totals.replace += 1;
                format!("  ± replace {} (immutable or type changed)", copy.key)
            }
            Change::Delete { key, .. } => {
                totals.delete += 1;
                format!("  - delete  {key}")
            }
            Change::Conflict { key, reason } => {
                totals.conflict += 1;
                format!("  ! conflict {}: {}", key, reason.message(key))
            }
        };
        let _ = writeln!(out, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::replication::desired::{DesiredCopy, RuleId, desired_copy};

    #[test]
    fn plan_lists_each_change_and_totals() {
        let rule = RuleId::replication_rule("r");
        let info = ObjectInfo { namespace: "src".into(), name: "cfg".into(), ..ObjectInfo::default() };
        let copy: DesiredCopy =
            desired_copy(&rule, "uid", ObjectKind::ConfigMap, &Source::new(info, Payload::default()), "a");
        let changes = vec![
            Change::Create(copy.clone()),
            Change::Delete { key: copy.key.clone(), uid: "u".into() },
            Change::Conflict {
                key: copy.key.clone(),
                reason: crate::controllers::replication::desired::ConflictReason::NotManagedByKopper,
            },
        ];
        let mut out = String::new();
        let mut totals = Totals::default();
        render(&mut out, &rule, &changes, &mut totals);
        assert!(out.contains("+ create  ConfigMap a/cfg (from src/cfg)"), "{out}");
        assert!(out.contains("- delete  ConfigMap a/cfg"), "{out}");
        assert!(out.contains("! conflict ConfigMap a/cfg"), "{out}");
        assert_eq!((totals.create, totals.delete, totals.conflict), (1, 1, 1));
    }
}
