use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::core::{ObjectMeta, Selector};

use crate::controllers::replication::shape::MarkFilter;
use crate::tenancy::{Consent, DestinationPolicy, ProtectedNamespaces};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn namespaces(names: &[&str]) -> BTreeMap<String, NamespaceInfo> {
    names
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                NamespaceInfo {
                    name: (*name).to_owned(),
                    labels: BTreeMap::new(),
                    active: true,
                    consent: Consent::None,
                },
            )
        })
        .collect()
}

fn source(namespace: &str, name: &str, uid: &str, version: &str) -> ObjectInfo {
    ObjectInfo {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        resource_version: version.to_owned(),
        labels: labels(&[("copy", "yes")]),
        annotations: BTreeMap::new(),
        deleting: false,
    }
}

fn payload(value: &str) -> Payload {
    Payload { data: labels(&[("key", value)]), ..Payload::default() }
}

/// The uid of every rule object in these tests.
const RULE_UID: &str = "uid";

/// A ReplicationRule copying ConfigMaps labelled `copy: yes` from `src`. Rules are ordered by
/// identity, never by age: `_age` only documents the scenario.
fn rule(name: &str, _age: i64) -> Rule {
    Rule {
        id: RuleId::replication_rule(name),
        uid: RULE_UID.to_owned(),
        kind: ObjectKind::ConfigMap,
        shape: Default::default(),
        deletion_policy: Default::default(),
        sources: SourceMatch {
            namespaces: vec!["src".to_owned()],
            name: None,
            selector: Some(Selector::from_iter([("copy", "yes")])),
            credential_types: None,
        },
        targets: TargetMatch::Matching {
            selector: None,
            include: vec![],
            exclude: vec![],
            protected: ProtectedNamespaces::default(),
        },
    }
}

fn payloads(sources: &[&ObjectInfo], value: &str) -> HashMap<String, Source> {
    sources.iter().map(|source| (source.uid.clone(), read(source, payload(value)))).collect()
}

fn read(info: &ObjectInfo, payload: Payload) -> Source {
    Source::new(info.clone(), payload)
}

/// The object kopper would have written for `copy`, as its watch sees it.
fn written(copy: &DesiredCopy) -> Existing {
    written_as(copy, |_, _| {})
}

/// The object kopper would have written for `copy`, then changed by `edit`.
fn written_as(copy: &DesiredCopy, edit: impl FnOnce(&mut ObjectInfo, &mut Payload)) -> Existing {
    let mut info = ObjectInfo {
        namespace: copy.key.namespace.clone(),
        name: copy.key.name.clone(),
        uid: format!("copy-{}", copy.key.namespace),
        resource_version: "7".to_owned(),
        labels: (*copy.labels).clone(),
        annotations: (*copy.annotations).clone(),
        deleting: false,
    };
    let mut payload = (*copy.payload).clone();
    edit(&mut info, &mut payload);
    Existing::Copy(CopyState::from_info(&info, &payload))
}

fn key(namespace: &str, name: &str) -> CopyKey {
    CopyKey { kind: ObjectKind::ConfigMap, namespace: namespace.to_owned(), name: name.to_owned() }
}

fn creates(plan: &RulePlan) -> Vec<&CopyKey> {
    plan.changes.iter().filter(|c| matches!(c, Change::Create(_))).map(Change::key).collect()
}

/// Plans `rule` with all copies created earlier written exactly as desired.
fn plan_after_first_pass(
    rules: &[Rule],
    ns: &BTreeMap<String, NamespaceInfo>,
    objects: &[ObjectInfo],
) -> RulePlan {
    let world = World::new(rules, ns, objects);
    let first =
        plan_rule(&rules[0], &world, &payloads(&objects.iter().collect::<Vec<_>>(), "v1"), &BTreeMap::new());
    let existing: BTreeMap<CopyKey, Existing> = first
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::Create(copy) => Some((copy.key.clone(), written(copy))),
            _ => None,
        })
        .collect();
    plan_rule(&rules[0], &world, &payloads(&objects.iter().collect::<Vec<_>>(), "v1"), &existing)
}

#[test]
fn copies_go_to_every_active_namespace_but_the_source_and_system_ones() {
    let rules = [rule("r", 1)];
    let mut ns = namespaces(&["src", "a", "b", "kube-system", "kube-public", "kube-node-lease"]);
    ns.insert(
        "gone".into(),
        NamespaceInfo { name: "gone".into(), labels: BTreeMap::new(), active: false, consent: Consent::None },
    );
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v1"), &BTreeMap::new());
    assert_eq!(creates(&plan), vec![&key("a", "cfg"), &key("b", "cfg")]);
    assert_eq!(plan.sources_matched, 1);
}

#[test]
fn include_and_exclude_patterns_and_namespace_selector_narrow_the_targets() {
    let mut r = rule("r", 1);
    r.targets = TargetMatch::Matching {
        selector: Some(Selector::from_iter([("team", "x")])),
        include: vec!["team-*".into(), "kube-system".into()],
        exclude: vec!["*-tmp".into()],
        protected: ProtectedNamespaces::default(),
    };
    let team = |name: &str| NamespaceInfo {
        name: name.into(),
        labels: labels(&[("team", "x")]),
        active: true,
        consent: Consent::None,
    };
    assert!(r.targets(&team("team-a")));
    assert!(r.targets(&team("kube-system")), "system namespaces are targeted when included by name");
    assert!(!r.targets(&team("team-a-tmp")));
    assert!(!r.targets(&team("other")));
    assert!(!r.targets(&NamespaceInfo {
        name: "team-b".into(),
        labels: BTreeMap::new(),
        active: true,
        consent: Consent::None
    }));
}

#[test]
fn listed_targets_take_named_and_selected_namespaces() {
    let r = Rule {
        targets: TargetMatch::Listed {
            names: ["dest".to_owned()].into(),
            selector: Some(Selector::from_iter([("sync", "on")])),
            tenant: "src".into(),
            policy: DestinationPolicy { allow_unconsented: true, ..DestinationPolicy::default() },
        },
        ..rule("r", 1)
    };
    let ns = |name: &str, l: &[(&str, &str)]| NamespaceInfo {
        name: name.into(),
        labels: labels(l),
        active: true,
        consent: Consent::None,
    };
    assert!(r.targets(&ns("dest", &[])));
    assert!(r.targets(&ns("labelled", &[("sync", "on")])));
    assert!(!r.targets(&ns("other", &[])));
    assert!(!r.targets(&ns("src", &[("sync", "on")])), "never into the source namespace");
}

#[test]
fn copy_is_not_written_when_identical() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a", "b"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let plan = plan_after_first_pass(&rules, &ns, &objects);
    assert_eq!(plan.writes().count(), 0, "{:?}", plan.changes);
    assert_eq!(plan.in_sync, 2);
    assert_eq!(plan.in_sync_namespaces, ["a".to_owned(), "b".to_owned()].into());
}

#[test]
fn copy_state_tells_content_and_marks_apart_by_digest() {
    let info = source("a", "cfg", "u1", "1");
    let state = CopyState::from_info(&info, &payload("v1"));
    assert_eq!(state, CopyState::from_info(&info, &payload("v1")));
    assert_ne!(state.content, CopyState::from_info(&info, &payload("v2")).content);
    let wanted = Marks::new(&labels(&[("copy", "yes")]), &BTreeMap::new());
    assert!(state.marks.contains_all(&wanted));
    let as_annotation = Marks::new(&BTreeMap::new(), &labels(&[("copy", "yes")]));
    assert!(!state.marks.contains_all(&as_annotation), "a label is not an annotation");
    let other_value = Marks::new(&labels(&[("copy", "no")]), &BTreeMap::new());
    assert!(!state.marks.contains_all(&other_value));
}

#[test]
fn source_change_updates_the_copy() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let old = source("src", "cfg", "u1", "1");
    let copy = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(old.clone(), payload("v1")),
        "a",
    );
    let objects = [source("src", "cfg", "u1", "2")];
    let world = World::new(&rules, &ns, &objects);
    let existing = [(copy.key.clone(), written(&copy))].into();
    let plan = plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v2"), &existing);
    match plan.changes.as_slice() {
        [Change::Update { copy: updated, .. }] => {
            assert_eq!(*updated.payload, payload("v2"));
            assert_eq!(updated.annotations[SOURCE_VERSION_ANNOTATION], "2");
        }
        other => panic!("expected one update, got {other:?}"),
    }
}

#[test]
fn edited_copy_is_restored() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let copy = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(objects[0].clone(), payload("v1")),
        "a",
    );
    let edited = written_as(&copy, |_, content| *content = payload("hand-edited"));
    let plan =
        plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v1"), &[(copy.key.clone(), edited)].into());
    assert!(matches!(plan.changes.as_slice(), [Change::Update { copy: _, .. }]), "{:?}", plan.changes);
}

#[test]
fn labels_others_added_to_a_copy_do_not_cause_writes() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let copy = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(objects[0].clone(), payload("v1")),
        "a",
    );
    let existing = written_as(&copy, |info, _| {
        info.labels.insert("added-by".into(), "someone".into());
    });
    let plan =
        plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v1"), &[(copy.key.clone(), existing)].into());
    assert_eq!(plan.writes().count(), 0);
}

#[test]
fn unmanaged_object_is_reported_not_overwritten() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(
        &rules[0],
        &world,
        &payloads(&[&objects[0]], "v1"),
        &[(key("a", "cfg"), Existing::Unmanaged)].into(),
    );
    assert_eq!(
        plan.changes,
        vec![Change::Conflict { key: key("a", "cfg"), reason: ConflictReason::NotManagedByKopper }]
    );
}

#[test]
fn first_rule_by_name_wins_a_contested_copy_whatever_its_age() {
    let rules = [rule("young", 20), rule("old", 10)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let p = payloads(&[&objects[0]], "v1");
    let young = plan_rule(&rules[0], &world, &p, &BTreeMap::new());
    let old = plan_rule(&rules[1], &world, &p, &BTreeMap::new());
    assert_eq!(creates(&old), vec![&key("a", "cfg")]);
    assert_eq!(
        young.changes,
        vec![Change::Conflict {
            key: key("a", "cfg"),
            reason: ConflictReason::ClaimedByOtherRule(RuleId::replication_rule("old").to_string())
        }]
    );
}

#[test]
fn rules_are_ordered_by_name() {
    let rules = [rule("b", 10), rule("a", 10)];
    let ns = namespaces(&["src", "x"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let (owner, _) = world.owner(&key("x", "cfg"), None).unwrap();
    assert_eq!(owner.id.name, "a");
}

#[test]
fn winning_rule_adopts_a_copy_the_losing_rule_wrote() {
    let rules = [rule("old", 10), rule("young", 20)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let theirs = desired_copy(
        &rules[1].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(objects[0].clone(), payload("v1")),
        "a",
    );
    let existing = [(theirs.key.clone(), written(&theirs))].into();
    let plan = plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v1"), &existing);
    match plan.changes.as_slice() {
        [Change::Update { copy, .. }] => {
            assert_eq!(copy.labels[REPLICATED_BY_LABEL], RuleId::replication_rule("old").label_value())
        }
        other => panic!("expected adoption, got {other:?}"),
    }
}

#[test]
fn server_set_metadata_is_not_copied() {
    let mut info = source("src", "cfg", "u1", "42");
    info.labels.insert(MANAGED_BY_LABEL.into(), "Helm".into());
    info.labels.insert("kopper.dev/replicated-by".into(), "forged".into());
    info.annotations = labels(&[
        ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ("kopper.dev/source-uid", "forged"),
        ("team", "payments"),
    ]);
    let copy = desired_copy(
        &RuleId::replication_rule("r"),
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(info, payload("v")),
        "a",
    );
    assert_eq!(
        *copy.labels,
        labels(&[
            ("copy", "yes"),
            (MANAGED_BY_LABEL, "kopper"),
            (REPLICATED_BY_LABEL, &RuleId::replication_rule("r").label_value())
        ])
    );
    assert_eq!(
        *copy.annotations,
        labels(&[
            ("team", "payments"),
            (RULE_ANNOTATION, "ReplicationRule.r"),
            (RULE_UID_ANNOTATION, RULE_UID),
            (SOURCE_NAMESPACE_ANNOTATION, "src"),
            (SOURCE_NAME_ANNOTATION, "cfg"),
            (SOURCE_UID_ANNOTATION, "u1"),
            (SOURCE_VERSION_ANNOTATION, "42"),
        ])
    );
}

#[test]
fn copies_are_never_sources() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let mut copy_in_source_namespace = source("src", "other", "u2", "1");
    copy_in_source_namespace.labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    let objects = [source("src", "cfg", "u1", "1"), copy_in_source_namespace];
    let world = World::new(&rules, &ns, &objects);
    assert_eq!(world.matched_sources(&rules[0]).len(), 1);
}

#[test]
fn copy_is_deleted_when_its_source_stops_matching() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let mut unlabelled = source("src", "cfg", "u1", "2");
    unlabelled.labels.clear();
    let old = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(source("src", "cfg", "u1", "1"), payload("v1")),
        "a",
    );
    let existing = [(old.key.clone(), written(&old))].into();
    let objects = [unlabelled];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(&rules[0], &world, &HashMap::new(), &existing);
    assert_eq!(
        plan.changes,
        vec![Change::Delete { key: key("a", "cfg"), uid: "copy-a".into(), seen_version: None }]
    );
}

#[test]
fn copies_in_a_terminating_namespace_are_left_to_go_with_it() {
    let rules = [rule("r", 1)];
    let mut ns = namespaces(&["src"]);
    ns.insert(
        "a".into(),
        NamespaceInfo { name: "a".into(), labels: BTreeMap::new(), active: false, consent: Consent::None },
    );
    let objects = [source("src", "cfg", "u1", "1")];
    let copy = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(objects[0].clone(), payload("v1")),
        "a",
    );
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(
        &rules[0],
        &world,
        &payloads(&[&objects[0]], "v1"),
        &[(copy.key.clone(), written(&copy))].into(),
    );
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
}

#[test]
fn unwanted_copy_another_rule_wants_is_handed_over_not_deleted() {
    let mut narrow = rule("first", 1);
    narrow.targets = TargetMatch::Matching {
        selector: None,
        include: vec![],
        exclude: vec!["a".into()],
        protected: ProtectedNamespaces::default(),
    };
    let rules = [narrow, rule("second", 2)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let copy = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(objects[0].clone(), payload("v1")),
        "a",
    );
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(
        &rules[0],
        &world,
        &payloads(&[&objects[0]], "v1"),
        &[(copy.key.clone(), written(&copy))].into(),
    );
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    assert_eq!(plan.hand_over, [RuleId::replication_rule("second")].into());
}

#[test]
fn immutable_copy_is_replaced_when_the_source_is_replaced() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let immutable = |value: &str| Payload { immutable: true, ..payload(value) };
    let old = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(source("src", "cfg", "u1", "1"), immutable("v1")),
        "a",
    );
    let objects = [source("src", "cfg", "u2", "5")];
    let world = World::new(&rules, &ns, &objects);
    let new_payloads = [("u2".to_owned(), read(&objects[0], immutable("v2")))].into();
    let plan = plan_rule(&rules[0], &world, &new_payloads, &[(old.key.clone(), written(&old))].into());
    match plan.changes.as_slice() {
        [Change::Replace { existing_uid, copy, .. }] => {
            assert_eq!(existing_uid, "copy-a");
            assert!(copy.payload.immutable);
        }
        other => panic!("expected a replacement, got {other:?}"),
    }
}

#[test]
fn secret_type_change_replaces_the_copy() {
    let mut r = rule("r", 1);
    r.kind = ObjectKind::Secret;
    let rules = [r];
    let ns = namespaces(&["src", "a"]);
    let typed = |t: &str| Payload { secret_type: Some(t.into()), ..payload("v") };
    let objects = [source("src", "tls", "u1", "2")];
    let mut old = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::Secret,
        &Source::new(source("src", "tls", "u1", "1"), typed("Opaque")),
        "a",
    );
    old.key.kind = ObjectKind::Secret;
    let world = World::new(&rules, &ns, &objects);
    let p = [("u1".to_owned(), read(&objects[0], typed("kubernetes.io/tls")))].into();
    let plan = plan_rule(&rules[0], &world, &p, &[(old.key.clone(), written(&old))].into());
    assert!(matches!(plan.changes.as_slice(), [Change::Replace { .. }]), "{:?}", plan.changes);
}

#[test]
fn secret_payload_keeps_type_and_defaults_to_opaque() {
    let secret = Secret { type_: None, ..Secret::default() };
    assert_eq!(Payload::from_secret(&secret).secret_type.as_deref(), Some("Opaque"));
    let tls = Secret { type_: Some("kubernetes.io/tls".into()), ..Secret::default() };
    assert_eq!(Payload::from_secret(&tls).secret_type.as_deref(), Some("kubernetes.io/tls"));
}

#[test]
fn two_sources_with_one_name_report_the_loser() {
    let mut r = rule("r", 1);
    r.sources.namespaces = vec!["src".into(), "src2".into()];
    let rules = [r];
    let ns = namespaces(&["src", "src2", "a"]);
    let objects = [source("src", "cfg", "u1", "1"), source("src2", "cfg", "u2", "1")];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(&rules[0], &world, &payloads(&[&objects[0], &objects[1]], "v"), &BTreeMap::new());
    assert_eq!(creates(&plan), vec![&key("a", "cfg")]);
    assert_eq!(plan.conflicts().count(), 1);
}

#[test]
fn cleanup_deletes_only_the_rules_own_copies() {
    let rule_id = RuleId::replication_rule("r");
    let mine = desired_copy(
        &rule_id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(source("src", "cfg", "u1", "1"), payload("v")),
        "a",
    );
    let other = desired_copy(
        &RuleId::replication_rule("other"),
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(source("src", "cfg", "u1", "1"), payload("v")),
        "b",
    );
    let existing: BTreeMap<CopyKey, Existing> = [
        (mine.key.clone(), written(&mine)),
        (other.key.clone(), written(&other)),
        (key("c", "cfg"), Existing::Unmanaged),
    ]
    .into();
    let changes =
        cleanup(ObjectKind::ConfigMap, own_copies(&rule_id, RULE_UID, ObjectKind::ConfigMap, &existing));
    assert_eq!(
        changes,
        vec![Change::Delete { key: key("a", "cfg"), uid: "copy-a".into(), seen_version: None }]
    );
}

#[test]
fn long_rule_names_give_distinct_valid_label_values() {
    let a = RuleId::config_map_sync(&"n".repeat(63), &"a".repeat(200));
    let b = RuleId::config_map_sync(&"n".repeat(63), &format!("{}b", "a".repeat(199)));
    assert!(a.label_value().len() <= 63);
    assert_ne!(a.label_value(), b.label_value());
}

#[test]
fn rule_label_is_a_digest_of_the_whole_identity_so_truncation_cannot_collide() {
    // A tenant who can name a namespace and a rule must not be able to craft another
    // rule's value: a digest of the full identity, not a cut of it.
    let victim = RuleId::config_map_sync("team-a", "ca-bundle");
    let value = victim.label_value();
    assert_eq!(value.len(), 62);
    assert!(value.starts_with("s-") && value[2..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(value, RuleId::config_map_sync("team-a.ca-bundle", "").label_value());
    assert_ne!(value, RuleId::replication_rule("ca-bundle").label_value());
    assert_eq!(value, RuleId::config_map_sync("team-a", "ca-bundle").label_value(), "stable");
    assert!(RuleLabels::of(&victim).is(&value));
}

#[test]
fn events_wake_the_rules_they_concern() {
    let rules = [rule("r", 1), rule("unrelated", 1)];
    let mut rules = rules.to_vec();
    rules[1].sources.namespaces = vec!["elsewhere".into()];
    let no_sources = |_: &Rule, _: &str| false;
    let src = source("src", "cfg", "u1", "1");
    let woken: Vec<_> = rules_affected_by(&rules, ObjectKind::ConfigMap, &src, no_sources).collect();
    assert_eq!(woken, vec![&rules[0].id]);
    let copy = desired_copy(
        &rules[1].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &Source::new(src.clone(), payload("v")),
        "a",
    );
    let copy = ObjectInfo {
        namespace: "a".into(),
        labels: (*copy.labels).clone(),
        annotations: (*copy.annotations).clone(),
        ..ObjectInfo::default()
    };
    let woken: Vec<_> = rules_affected_by(&rules, ObjectKind::ConfigMap, &copy, no_sources).collect();
    assert_eq!(woken, vec![&rules[1].id]);
    let blocker = ObjectInfo { namespace: "a".into(), name: "cfg".into(), ..ObjectInfo::default() };
    let named = |rule: &Rule, name: &str| rule.id.name == "r" && name == "cfg";
    let woken: Vec<_> = rules_affected_by(&rules, ObjectKind::ConfigMap, &blocker, named).collect();
    assert_eq!(woken, vec![&rules[0].id]);
    assert_eq!(rules_affected_by(&rules, ObjectKind::Secret, &src, no_sources).count(), 0);
}

#[test]
fn a_pass_decided_in_batches_decides_as_one_in_a_go() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a", "b", "c", "d"]);
    let objects = [source("src", "one", "u1", "1"), source("src", "two", "u2", "1")];
    let world = World::new(&rules, &ns, &objects);
    let sources = payloads(&objects.iter().collect::<Vec<_>>(), "v1");
    let stale = desired_copy(
        &rules[0].id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &read(&source("src", "gone", "u3", "1"), payload("v")),
        "a",
    );
    let kept =
        desired_copy(&rules[0].id, RULE_UID, ObjectKind::ConfigMap, &read(&objects[0], payload("v1")), "b");
    let existing: BTreeMap<CopyKey, Existing> =
        [(stale.key.clone(), written(&stale)), (kept.key.clone(), written(&kept))].into();
    let whole = plan_rule(&rules[0], &world, &sources, &existing);

    let pass = RulePass::new(&rules[0], &world, &sources);
    let found = |namespace: &str, name: &str| {
        existing.get(&key(namespace, name)).map_or(Found::Nothing, Existing::found)
    };
    let mut batched = RulePlan { sources_matched: pass.sources_matched, ..RulePlan::default() };
    for batch in pass.targets().chunks(1) {
        pass.plan_copies(batch, found, &NoRenderings, &mut batched);
    }
    pass.stale_copies(own_copies(&rules[0].id, RULE_UID, ObjectKind::ConfigMap, &existing), &mut batched);
    assert_eq!(batched, whole);
    assert_eq!((whole.in_sync, whole.wanted, creates(&whole).len()), (1, 8, 7));
    assert!(whole.changes.contains(&Change::Delete {
        key: key("a", "gone"),
        uid: "copy-a".into(),
        seen_version: None
    }));
}

#[test]
fn payload_debug_names_keys_and_never_shows_values() {
    let payload = Payload {
        binary_data: [("password".to_owned(), ByteString(b"hunter2".to_vec()))].into(),
        secret_type: Some("Opaque".into()),
        ..Payload::default()
    };
    let shown = format!("{payload:?}");
    assert!(shown.contains("password"), "{shown}");
    assert!(!shown.contains("hunter2") && !shown.contains("104, 117"), "{shown}");
}

/// A ConfigMapSync in `tenant` copying `cfg` to the named namespaces and those labelled
/// `sync: on`, under the default (multi-tenant) policy.
fn tenant_sync(tenant: &str, names: &[&str]) -> Rule {
    Rule {
        id: RuleId::config_map_sync(tenant, "sync"),
        uid: RULE_UID.to_owned(),
        kind: ObjectKind::ConfigMap,
        shape: Default::default(),
        deletion_policy: Default::default(),
        sources: SourceMatch {
            namespaces: vec![tenant.to_owned()],
            name: Some("cfg".into()),
            selector: None,
            credential_types: None,
        },
        targets: TargetMatch::Listed {
            names: names.iter().map(|name| (*name).to_owned()).collect(),
            selector: Some(Selector::from_iter([("sync", "on")])),
            tenant: tenant.to_owned(),
            policy: DestinationPolicy {
                protected: ProtectedNamespaces::new(Some("kopper-system"), &[]),
                allow_unconsented: false,
            },
        },
    }
}

fn namespace_accepting(name: &str, accepts: &str, labelled: bool) -> NamespaceInfo {
    let annotations = [(crate::tenancy::ACCEPT_REPLICATION_FROM.to_owned(), accepts.to_owned())].into();
    NamespaceInfo {
        name: name.into(),
        labels: if labelled { labels(&[("sync", "on")]) } else { BTreeMap::new() },
        active: true,
        consent: Consent::from_annotations(Some(&annotations)),
    }
}

#[test]
fn a_tenant_sync_writes_only_where_the_destination_consents_and_never_into_protected_ones() {
    let sync = tenant_sync("tenant-a", &["tenant-b", "tenant-c", "kube-system", "kopper-system"]);
    assert!(sync.targets(&namespace_accepting("tenant-b", "tenant-a", false)));
    assert!(!sync.targets(&namespace_accepting("tenant-c", "tenant-x", false)), "consent names another");
    assert!(!sync.targets(&namespace_accepting("kube-system", "*", true)), "protected despite consent");
    assert!(!sync.targets(&namespace_accepting("kopper-system", "*", false)));
    assert!(sync.targets(&namespace_accepting("labelled", "*", true)), "selected and consenting");
    let unconsenting_labelled =
        NamespaceInfo { consent: Consent::None, ..namespace_accepting("l", "", true) };
    assert!(!sync.targets(&unconsenting_labelled), "a selector reaches only consenting namespaces");
}

#[test]
fn refused_destinations_name_only_what_the_tenant_wrote_whether_or_not_it_exists() {
    let sync = tenant_sync("tenant-a", &["tenant-b", "tenant-c", "missing", "kube-system"]);
    let ns: BTreeMap<String, NamespaceInfo> = [
        namespace_accepting("tenant-b", "tenant-a", false),
        namespace_accepting("tenant-c", "", false),
        namespace_accepting("selected-but-unconsenting", "", true),
        namespace_accepting("kube-system", "*", false),
    ]
    .into_iter()
    .map(|namespace| (namespace.name.clone(), namespace))
    .collect();
    assert_eq!(sync.refused_destinations(&ns), ["kube-system", "missing", "tenant-c"]);
}

#[test]
fn a_cluster_rule_reaches_protected_namespaces_only_by_their_exact_name() {
    let protected = ProtectedNamespaces::new(Some("kopper-system"), &["platform".to_owned()]);
    let with_include = |include: &[&str]| Rule {
        targets: TargetMatch::Matching {
            selector: None,
            include: include.iter().map(|pattern| (*pattern).to_owned()).collect(),
            exclude: vec![],
            protected: protected.clone(),
        },
        ..rule("r", 1)
    };
    let ns = |name: &str| NamespaceInfo { name: name.into(), active: true, ..NamespaceInfo::default() };
    for name in ["kube-system", "kube-public", "kube-node-lease", "kopper-system", "platform"] {
        assert!(!with_include(&[]).targets(&ns(name)), "{name} is not reached by default");
        assert!(!with_include(&["*"]).targets(&ns(name)), "{name} is not reached through a glob");
        assert!(with_include(&[name]).targets(&ns(name)), "{name} is reached when named");
    }
    assert!(!with_include(&["kube-*"]).targets(&ns("kube-system")));
    assert!(with_include(&[]).targets(&ns("tenant-a")));
}

#[test]
fn an_admin_rule_wins_over_a_tenant_sync_whatever_their_names_or_ages() {
    let admin = Rule { id: RuleId::replication_rule("zz-trusted-ca"), ..rule("zz-trusted-ca", 100) };
    let mut squatter = tenant_sync("src", &["tenant-b"]);
    squatter.sources.name = None;
    squatter.sources.selector = Some(Selector::from_iter([("copy", "yes")]));
    let rules = [squatter, admin];
    let ns: BTreeMap<String, NamespaceInfo> =
        [namespace_accepting("tenant-b", "*", false), namespace_accepting("src", "", false)]
            .into_iter()
            .map(|namespace| (namespace.name.clone(), namespace))
            .collect();
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let (owner, _) = world.owner(&key("tenant-b", "cfg"), None).unwrap();
    assert_eq!(owner.id, RuleId::replication_rule("zz-trusted-ca"));
}

#[test]
fn cluster_credential_secrets_are_copied_only_when_the_rule_names_their_type() {
    let mut broad = rule("r", 1);
    broad.kind = ObjectKind::Secret;
    broad.sources.selector = Some(Selector::default());
    broad.sources.credential_types = Some(vec![]);
    let mut token = source("src", "builder-token", "u1", "1");
    token.annotations.insert("kubernetes.io/service-account.name".into(), "builder".into());
    let mut release = source("src", "sh.helm.release.v1.app.v1", "u2", "1");
    release.labels.insert("owner".into(), "helm".into());
    let bootstrap = source("src", "bootstrap-token-abcdef", "u3", "1");
    let plain = source("src", "tls", "u4", "1");
    for credential in [&token, &release, &bootstrap] {
        assert!(!broad.sources.matches(credential), "{}", credential.name);
    }
    assert!(broad.sources.matches(&plain));
    assert!(!broad.sources.may_copy_secret_type(Some("kubernetes.io/service-account-token")));
    assert!(broad.sources.may_copy_secret_type(Some("kubernetes.io/tls")));
    broad.sources.credential_types = Some(vec!["kubernetes.io/service-account-token".into()]);
    assert!(broad.sources.matches(&token));
    assert!(!broad.sources.matches(&release));
    assert!(broad.sources.may_copy_secret_type(Some("kubernetes.io/service-account-token")));
}

#[test]
fn cleanup_leaves_copies_that_name_another_rule_object() {
    let id = RuleId::replication_rule("r");
    let info = |uid: &str| ObjectInfo {
        namespace: "a".into(),
        name: "cfg".into(),
        uid: format!("copy-{uid}"),
        labels: labels(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE), (REPLICATED_BY_LABEL, &id.label_value())]),
        annotations: labels(&[(RULE_UID_ANNOTATION, uid)]),
        ..ObjectInfo::default()
    };
    let mine = CopyState::from_info(&info(RULE_UID), &Payload::default());
    let successor = CopyState::from_info(&info("successor"), &Payload::default());
    assert!(mine.deletable_by(RULE_UID));
    assert!(!successor.deletable_by(RULE_UID));
    let unmarked = CopyState::from_info(&ObjectInfo::default(), &Payload::default());
    assert!(unmarked.deletable_by(RULE_UID), "copies made before uids were marked");
}

#[test]
fn a_copy_is_rewritten_at_the_version_its_watch_saw_only_when_nothing_else_must_be_kept() {
    let meta = |version: &str, finalizers: Option<Vec<String>>| ObjectMeta {
        uid: Some("copy-uid".into()),
        resource_version: Some(version.into()),
        finalizers,
        ..ObjectMeta::default()
    };
    let seen = |meta: &ObjectMeta| CopyState::new(meta, &Payload::default()).plain_version.map(|v| v.get());
    assert_eq!(seen(&meta("42", None)), Some(42));
    assert_eq!(
        seen(&meta("42", Some(vec!["example.com/hold".into()]))),
        None,
        "a finalizer must be read and kept"
    );
    let mut owned = meta("42", None);
    owned.owner_references = Some(vec![Default::default()]);
    assert_eq!(seen(&owned), None, "an owner must be read and kept");
    for opaque in ["007", "+7", "0", "abc", ""] {
        assert_eq!(seen(&meta(opaque, None)), None, "{opaque:?} would not be sent back as it came");
    }
}

/// A ConfigMapSync named `name` in `tenant` copying its `cfg` into `tenant-c`, and the
/// namespaces of that scene: `tenant-c` accepts copies from any tenant.
fn sync_into_tenant_c(tenant: &str, name: &str) -> Rule {
    Rule { id: RuleId::config_map_sync(tenant, name), ..tenant_sync(tenant, &["tenant-c"]) }
}

fn two_tenants_and_a_shared_destination() -> BTreeMap<String, NamespaceInfo> {
    [
        namespace_accepting("tenant-a", "", false),
        namespace_accepting("tenant-b", "", false),
        namespace_accepting("tenant-c", "*", false),
    ]
    .into_iter()
    .map(|namespace| (namespace.name.clone(), namespace))
    .collect()
}

/// The copy `rule` would have written of `source` into `tenant-c`.
fn copy_in_tenant_c(rule: &Rule, source: &ObjectInfo) -> (CopyKey, Existing) {
    let copy =
        desired_copy(&rule.id, RULE_UID, ObjectKind::ConfigMap, &read(source, payload("b")), "tenant-c");
    (copy.key.clone(), written(&copy))
}

#[test]
fn a_tenant_cannot_take_over_another_tenants_copy_by_naming_its_rule_to_sort_first() {
    let attacker = sync_into_tenant_c("tenant-a", "0");
    let holder = sync_into_tenant_c("tenant-b", "sync");
    let rules = [attacker.clone(), holder.clone()];
    let ns = two_tenants_and_a_shared_destination();
    let objects = [source("tenant-a", "cfg", "ua", "1"), source("tenant-b", "cfg", "ub", "1")];
    let world = World::new(&rules, &ns, &objects);
    let sources: HashMap<String, Source> = [read(&objects[0], payload("a")), read(&objects[1], payload("b"))]
        .into_iter()
        .map(|source| (source.info.uid.clone(), source))
        .collect();
    let existing: BTreeMap<CopyKey, Existing> = [copy_in_tenant_c(&holder, &objects[1])].into();

    let attack = plan_rule(&attacker, &world, &sources, &existing);
    assert!(attack.writes().next().is_none(), "nothing written over tenant-b's copy: {attack:?}");
    assert!(
        matches!(attack.conflicts().next(), Some((key, ConflictReason::ClaimedByOtherRule(_))) if *key == key_c()),
        "the newcomer reports the place taken: {attack:?}"
    );
    let kept = plan_rule(&holder, &world, &sources, &existing);
    assert_eq!((kept.changes.len(), kept.in_sync), (0, 1), "tenant-b's copy stays its own: {kept:?}");
}

fn key_c() -> CopyKey {
    key("tenant-c", "cfg")
}

/// Which rule owns `tenant-c/cfg` among `rules`, each tenant's `cfg` a source, when the copy
/// there is `holder`'s (if any).
fn owner_in_tenant_c(rules: &[Rule], holder: Option<&RuleId>) -> RuleId {
    let mut ns = two_tenants_and_a_shared_destination();
    ns.insert("src".into(), namespace_accepting("src", "", false));
    let objects = [
        source("tenant-a", "cfg", "ua", "1"),
        source("tenant-b", "cfg", "ub", "1"),
        source("src", "cfg", "us", "1"),
    ];
    let world = World::new(rules, &ns, &objects);
    let holder = holder.map(RuleId::label_value);
    world.owner(&key_c(), holder.as_deref()).unwrap().0.id.clone()
}

#[test]
fn where_no_tenant_holds_the_place_the_first_rule_by_name_wins_it() {
    let rules = [sync_into_tenant_c("tenant-b", "sync"), sync_into_tenant_c("tenant-a", "0")];
    assert_eq!(owner_in_tenant_c(&rules, None), RuleId::config_map_sync("tenant-a", "0"));
}

#[test]
fn the_next_tenant_in_line_takes_the_place_once_the_holder_no_longer_wants_it() {
    let gone = sync_into_tenant_c("tenant-b", "sync");
    let next = sync_into_tenant_c("tenant-a", "0");
    assert_eq!(owner_in_tenant_c(std::slice::from_ref(&next), Some(&gone.id)), next.id);
}

#[test]
fn an_admin_rule_still_wins_a_place_a_tenant_holds() {
    let admin = Rule {
        id: RuleId::replication_rule("zz-admin"),
        targets: rule("zz-admin", 0).targets,
        ..sync_into_tenant_c("src", "admin")
    };
    let holder = sync_into_tenant_c("tenant-b", "sync");
    assert_eq!(owner_in_tenant_c(&[holder.clone(), admin.clone()], Some(&holder.id)), admin.id);
}

#[test]
fn rules_of_one_tenant_still_go_by_name_whichever_holds_the_place() {
    let first = sync_into_tenant_c("tenant-b", "a-first");
    let holder = sync_into_tenant_c("tenant-b", "z-holder");
    let rules = [holder.clone(), first.clone(), sync_into_tenant_c("tenant-a", "0")];
    assert_eq!(
        owner_in_tenant_c(&rules, Some(&holder.id)),
        first.id,
        "the holder's own tenant decides among its rules"
    );
}

#[test]
fn an_object_with_kopper_s_managed_by_label_alone_is_no_copy_of_the_engine_s() {
    let mut bucket_secret = source("tenant-b", "app-s3", "u1", "1");
    bucket_secret.labels = labels(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE), ("kopper.dev/bucket", "app")]);
    assert!(!bucket_secret.is_kopper_copy(), "the engine may not rewrite or delete a Bucket's Secret");
    assert!(bucket_secret.is_kopper_made());
    assert!(!rule("r", 0).sources.matches(&ObjectInfo { namespace: "src".into(), ..bucket_secret }));
}

#[test]
fn an_object_another_controller_claims_is_no_rule_s_copy_whatever_its_labels() {
    let rule = rule("r", 0);
    let copy = desired_copy(
        &rule.id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &read(&source("src", "cfg", "u", "1"), payload("v")),
        "a",
    );
    let meta = |labels: BTreeMap<String, String>, owner: bool| ObjectMeta {
        uid: Some("x".into()),
        labels: Some(labels),
        owner_references: owner.then(|| {
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                controller: Some(true),
                ..Default::default()
            }]
        }),
        ..ObjectMeta::default()
    };
    let copy_labels = (*copy.labels).clone();
    assert!(CopyState::new(&meta(copy_labels.clone(), false), &copy.payload).made_by(&rule.id.label_value()));
    assert_eq!(
        CopyState::new(&meta(copy_labels.clone(), true), &copy.payload).rule,
        None,
        "a controller owner"
    );
    let mut bucket_labels = copy_labels;
    bucket_labels.insert(BUCKET_SECRET_LABEL.into(), "app".into());
    assert_eq!(
        CopyState::new(&meta(bucket_labels.clone(), false), &copy.payload).rule,
        None,
        "a Bucket's Secret"
    );
    let info = ObjectInfo { labels: bucket_labels, ..source("a", "cfg", "x", "1") };
    assert!(!info.is_kopper_copy());
}

#[test]
fn a_copy_whose_only_owner_is_its_own_rule_that_cannot_copy_the_source_is_deleted_not_handed_over() {
    // The source's metadata says nothing of its type, so the rule "wants" the place; its
    // content is a Helm release record, which the rule may not copy.
    let mut broad = rule("r", 0);
    broad.kind = ObjectKind::Secret;
    broad.sources.credential_types = Some(vec![]);
    let rules = [broad.clone()];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "2")];
    let world = World::new(&rules, &ns, &objects);
    let release = Payload { secret_type: Some("helm.sh/release.v1".into()), ..payload("v") };
    let sources: HashMap<String, Source> = [("u1".to_owned(), read(&objects[0], release))].into();
    let before = Payload { secret_type: Some("Opaque".into()), ..payload("v") };
    let old = desired_copy(&broad.id, RULE_UID, ObjectKind::Secret, &read(&objects[0], before), "a");
    let existing = [(old.key.clone(), written(&old))].into();
    let plan = plan_rule(&broad, &world, &sources, &existing);
    assert!(plan.hand_over.is_empty(), "no hand-over to itself: {plan:?}");
    assert!(matches!(plan.changes.as_slice(), [Change::Delete { key, .. }] if *key == old.key), "{plan:?}");
}

/// `rule` with `shape`.
fn shaped(rule: Rule, shape: Shape) -> Rule {
    Rule { shape: Arc::new(shape), ..rule }
}

/// The copy kopper would have written for `copy`, orphaned from its rule afterwards.
fn orphaned(copy: &DesiredCopy) -> Existing {
    written_as(copy, |info, _| {
        info.labels.remove(REPLICATED_BY_LABEL);
        info.labels.insert(ORPHANED_LABEL.into(), "true".into());
    })
}

/// A `kubernetes.io/tls` Secret source in `src` holding `ca.crt`, `tls.crt` and `tls.key`.
fn tls_source() -> (ObjectInfo, Payload) {
    let bytes = |value: &str| ByteString(value.as_bytes().to_vec());
    let payload = Payload {
        binary_data: [("ca.crt", "ca"), ("tls.crt", "cert"), ("tls.key", "key")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), bytes(value)))
            .collect(),
        secret_type: Some("kubernetes.io/tls".into()),
        ..Payload::default()
    };
    (source("src", "tls", "u-tls", "1"), payload)
}

fn secret_rule(shape: Shape) -> Rule {
    let mut rule = shaped(rule("ca", 1), shape);
    rule.kind = ObjectKind::Secret;
    rule.sources.credential_types = Some(Vec::new());
    rule
}

#[test]
fn a_tls_secret_s_ca_certificate_alone_is_written_as_the_type_the_rule_names() {
    let rule = secret_rule(Shape {
        keys: Some(["ca.crt".to_owned()].into()),
        secret_type: Some("Opaque".into()),
        ..Shape::default()
    });
    let (info, content) = tls_source();
    let ns = namespaces(&["src", "a"]);
    let objects = [info.clone()];
    let rules = [rule.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = [(info.uid.clone(), read(&info, content))].into();
    let plan = plan_rule(&rule, &world, &sources, &BTreeMap::new());
    let [Change::Create(copy)] = plan.changes.as_slice() else { panic!("{:?}", plan.changes) };
    assert_eq!(copy.payload.binary_data.keys().collect::<Vec<_>>(), ["ca.crt"]);
    assert_eq!(copy.payload.secret_type.as_deref(), Some("Opaque"));
    assert!(plan.shape_problems.is_empty());

    // Written as planned, it is in sync: the digest judges the shaped content.
    let existing = [(copy.key.clone(), written(copy))].into();
    let again = plan_rule(&rule, &world, &sources, &existing);
    assert_eq!((again.writes().count(), again.in_sync), (0, 1));
}

#[test]
fn keys_a_typed_secret_needs_left_out_without_a_type_are_reported_and_its_copies_kept() {
    let rule = secret_rule(Shape {
        keys: Some(["ca.crt".to_owned(), "extra".to_owned()].into()),
        ..Shape::default()
    });
    let (info, content) = tls_source();
    let ns = namespaces(&["src", "a"]);
    let objects = [info.clone()];
    let rules = [rule.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = [(info.uid.clone(), read(&info, content.clone()))].into();
    // A copy of the whole Secret, written before the rule narrowed its keys.
    let full =
        copy_template(&rule.id, RULE_UID, ObjectKind::Secret, &read(&info, content), &Shape::default())
            .into_namespace("a");
    let existing = [(full.key.clone(), written(&full))].into();
    let plan = plan_rule(&rule, &world, &sources, &existing);
    assert_eq!(plan.writes().count(), 0, "neither written (the API server would refuse it) nor deleted");
    let reasons: Vec<&str> = plan.shape_problems.iter().map(ShapeProblem::reason).collect();
    assert_eq!(reasons, ["SourceKeysMissing", "SecretTypeNeedsKeys"]);
    let message = plan.shape_problems[1].message();
    assert!(message.contains("tls.crt, tls.key") && message.contains("spec.secretType"), "{message}");
    assert!(plan.shape_problems[0].message().contains("src/tls lacks extra"));
}

#[test]
fn tool_marks_are_left_out_of_copies_and_a_change_of_shaping_rewrites_what_kopper_wrote() {
    let mut info = source("src", "cfg", "u1", "1");
    info.labels.insert("app.kubernetes.io/instance".into(), "web".into());
    info.labels.insert("internal.example.com/cost".into(), "42".into());
    info.annotations.insert("meta.helm.sh/release-name".into(), "web".into());
    info.annotations.insert("notes".into(), "hi".into());
    let ns = namespaces(&["src", "a"]);
    let objects = [info.clone()];
    let by_default = rule("r", 1);
    let rules = [by_default.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = payloads(&[&info], "v1");
    let plan = plan_rule(&by_default, &world, &sources, &BTreeMap::new());
    let [Change::Create(copy)] = plan.changes.as_slice() else { panic!("{:?}", plan.changes) };
    assert!(!copy.labels.contains_key("app.kubernetes.io/instance"));
    assert!(!copy.annotations.contains_key("meta.helm.sh/release-name"));
    assert_eq!(copy.labels["internal.example.com/cost"], "42");
    assert!(copy.annotations.contains_key(SHAPE_ANNOTATION), "what was left out is recorded");
    let existing: BTreeMap<CopyKey, Existing> = [(copy.key.clone(), written(copy))].into();
    assert_eq!(plan_rule(&by_default, &world, &sources, &existing).writes().count(), 0);

    // Excluding a label kopper wrote: the copy carries every mark still wanted, and is
    // rewritten all the same, so the excluded label goes.
    let narrower = shaped(
        rule("r", 1),
        Shape {
            labels: MarkFilter { exclude: vec!["internal.example.com/".into()], ..MarkFilter::default() },
            ..Shape::default()
        },
    );
    let rules = [narrower.clone()];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(&narrower, &world, &sources, &existing);
    let [Change::Update { copy: rewritten, .. }] = plan.changes.as_slice() else {
        panic!("{:?}", plan.changes)
    };
    assert!(!rewritten.labels.contains_key("internal.example.com/cost"));

    // Added labels go onto the copy; kopper's own marks cannot be overridden by them.
    let extra = shaped(
        rule("r", 1),
        Shape {
            extra_labels: [
                ("team".to_owned(), "a".to_owned()),
                (MANAGED_BY_LABEL.to_owned(), "me".to_owned()),
            ]
            .into(),
            ..Shape::default()
        },
    );
    let copy =
        copy_template(&extra.id, RULE_UID, ObjectKind::ConfigMap, &read(&info, payload("v1")), &extra.shape)
            .into_namespace("a");
    assert_eq!(
        (copy.labels["team"].as_str(), copy.labels[MANAGED_BY_LABEL].as_str()),
        ("a", MANAGED_BY_VALUE)
    );
}

#[test]
fn copies_made_before_rules_could_shape_them_stay_in_sync_when_nothing_is_left_out() {
    let rules = [rule("r", 1)];
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let world = World::new(&rules, &ns, &objects);
    let copy =
        desired_copy(&rules[0].id, RULE_UID, ObjectKind::ConfigMap, &read(&objects[0], payload("v1")), "a");
    assert!(!copy.annotations.contains_key(SHAPE_ANNOTATION));
    let existing = [(copy.key.clone(), written(&copy))].into();
    assert_eq!(plan_rule(&rules[0], &world, &payloads(&[&objects[0]], "v1"), &existing).writes().count(), 0);
}

#[test]
fn a_deleted_rule_s_copies_are_orphaned_or_deleted_as_its_policy_says() {
    let rules = [rule("r", 1)];
    let objects = [source("src", "cfg", "u1", "1")];
    let copy =
        desired_copy(&rules[0].id, RULE_UID, ObjectKind::ConfigMap, &read(&objects[0], payload("v1")), "a");
    let Existing::Copy(state) = written(&copy) else { unreachable!() };
    let own = || [("a", "cfg", &state)];
    let label = rules[0].id.label_value();
    assert!(matches!(
        on_rule_deleted(ObjectKind::ConfigMap, &label, DeletionPolicy::Delete, own()).as_slice(),
        [Change::Delete { .. }]
    ));
    match on_rule_deleted(ObjectKind::ConfigMap, &label, DeletionPolicy::Orphan, own()).as_slice() {
        [Change::Orphan { key, uid, rule, .. }] => {
            assert_eq!(
                (key.namespace.as_str(), uid.as_str(), rule.as_str()),
                ("a", "copy-a", label.as_str())
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_orphan_of_the_same_source_is_taken_over_with_a_metadata_patch_and_others_are_left_alone() {
    let old = rule("old", 1);
    let successor = rule("new", 1);
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let rules = [successor.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = payloads(&[&objects[0]], "v1");
    let left =
        desired_copy(&old.id, "old-uid", ObjectKind::ConfigMap, &read(&objects[0], payload("v1")), "a");
    let existing = [(left.key.clone(), orphaned(&left))].into();
    let plan = plan_rule(&successor, &world, &sources, &existing);
    match plan.changes.as_slice() {
        [Change::Adopt { existing_uid, copy, .. }] => {
            assert_eq!(existing_uid, "copy-a");
            assert_eq!(copy.labels[REPLICATED_BY_LABEL], successor.id.label_value());
        }
        other => panic!("expected a takeover, got {other:?}"),
    }

    // The source changed since: taken over by an update, never deleted.
    let plan = plan_rule(&successor, &world, &payloads(&[&objects[0]], "v2"), &existing);
    assert!(matches!(plan.changes.as_slice(), [Change::Update { .. }]), "{:?}", plan.changes);

    // An orphan of another source (same name) is left as it is and reported.
    let other = source("elsewhere", "cfg", "u-other", "1");
    let foreign = desired_copy(&old.id, "old-uid", ObjectKind::ConfigMap, &read(&other, payload("v1")), "a");
    let existing = [(foreign.key.clone(), orphaned(&foreign))].into();
    let plan = plan_rule(&successor, &world, &sources, &existing);
    match plan.changes.as_slice() {
        [Change::Conflict { reason: ConflictReason::OrphanedCopy, .. }] => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Nor does a rule count an orphan among its own copies to delete.
    assert_eq!(own_copies(&old.id, "old-uid", ObjectKind::ConfigMap, &existing).count(), 0);
}

#[test]
fn orphan_marks_on_another_controller_s_object_make_no_orphan() {
    let meta = |labels: &[(&str, &str)]| ObjectMeta {
        labels: Some(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
        annotations: Some([(SOURCE_UID_ANNOTATION.to_owned(), "u1".to_owned())].into()),
        ..ObjectMeta::default()
    };
    let orphan = [(MANAGED_BY_LABEL, MANAGED_BY_VALUE), (ORPHANED_LABEL, "true")];
    assert!(is_orphan_of(&meta(&orphan), "u1"));
    assert!(!is_orphan_of(&meta(&orphan), "u2"), "another source's orphan");
    assert!(!is_orphan_of(&meta(&[(ORPHANED_LABEL, "true")]), "u1"), "not made by kopper");
    let bucket = [orphan[0], orphan[1], (BUCKET_SECRET_LABEL, "b")];
    assert!(!is_orphan_of(&meta(&bucket), "u1"), "a Bucket's Secret");
    let mut owned = meta(&orphan);
    owned.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        controller: Some(true),
        ..Default::default()
    }]);
    assert!(!is_orphan_of(&owned, "u1"), "another controller's object");
}

#[test]
fn an_orphan_a_config_map_sync_left_ranks_as_one_an_admin_rule_replaces_it_another_sync_does_not() {
    let admin = rule("new", 1);
    let ns = namespaces(&["src", "a"]);
    let objects = [source("src", "cfg", "u1", "1")];
    let rules = [admin.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = payloads(&[&objects[0]], "v1");
    let tenants = source("tenant-a", "cfg", "u-tenant", "1");
    let sync = RuleId::config_map_sync("tenant-a", "share.v1");
    let left = desired_copy(&sync, "sync-uid", ObjectKind::ConfigMap, &read(&tenants, payload("v1")), "a");
    let existing = [(left.key.clone(), orphaned(&left))].into();

    let plan = plan_rule(&admin, &world, &sources, &existing);
    match plan.changes.as_slice() {
        [Change::Update { existing_uid, copy, .. }] => {
            assert_eq!(existing_uid, "copy-a");
            assert_eq!(copy.source.uid, "u1", "the admin's source, not the tenant's");
        }
        other => panic!("expected the orphan rewritten, got {other:?}"),
    }

    // A ConfigMapSync outranks no orphan of another source, whoever left it.
    let other_sync = Rule { id: RuleId::config_map_sync("tenant-c", "0"), ..admin.clone() };
    let rules = [other_sync.clone()];
    let world = World::new(&rules, &ns, &objects);
    let plan = plan_rule(&other_sync, &world, &sources, &existing);
    assert!(
        matches!(plan.changes.as_slice(), [Change::Conflict { reason: ConflictReason::OrphanedCopy, .. }]),
        "{:?}",
        plan.changes
    );
}

#[test]
fn a_sync_s_orphans_go_where_consent_is_withdrawn_or_the_namespace_is_protected() {
    let tenants = source("tenant-a", "cfg", "u-tenant", "1");
    let sync = RuleId::config_map_sync("tenant-a", "share");
    let state = |namespace: &str, rule: &RuleId| {
        let copy =
            desired_copy(rule, "uid", ObjectKind::ConfigMap, &read(&tenants, payload("v1")), namespace);
        match orphaned(&copy) {
            Existing::Copy(state) => CopyState { uid: format!("copy-{namespace}").into(), ..state },
            Existing::Unmanaged => unreachable!("an orphan is kopper's"),
        }
    };
    let consenting = state("consenting", &sync);
    let withdrawn = state("withdrawn", &sync);
    let protected = state("kopper-system", &sync);
    let own = state("tenant-a", &sync);
    let admins = state("withdrawn-too", &RuleId::replication_rule("admin"));
    let ns: BTreeMap<String, NamespaceInfo> = [
        namespace_accepting("consenting", "tenant-a", false),
        namespace_accepting("withdrawn", "tenant-x", false),
        namespace_accepting("kopper-system", "*", false),
        namespace_accepting("tenant-a", "", false),
        namespace_accepting("withdrawn-too", "", false),
    ]
    .into_iter()
    .map(|info| (info.name.clone(), info))
    .collect();
    let policy = DestinationPolicy {
        protected: ProtectedNamespaces::new(Some("kopper-system"), &[]),
        allow_unconsented: false,
    };
    let copies = [
        ("consenting", "cfg", &consenting),
        ("withdrawn", "cfg", &withdrawn),
        ("kopper-system", "cfg", &protected),
        ("tenant-a", "cfg", &own),
        ("withdrawn-too", "cfg", &admins),
        ("gone", "cfg", &withdrawn),
    ];
    let deleted: Vec<String> =
        copies_without_consent(ObjectKind::ConfigMap, copies, &ns, &policy, &KeptRules::default())
            .iter()
            .map(|change| change.key().namespace.clone())
            .collect();
    assert_eq!(deleted, ["withdrawn", "kopper-system"], "a ReplicationRule's orphan is no tenant's");
}

#[test]
fn a_kept_sync_s_copies_go_where_its_tenant_may_no_longer_write_and_stay_elsewhere() {
    let tenants = source("tenant-a", "cfg", "u-tenant", "1");
    let kept_sync = RuleId::config_map_sync("tenant-a", "broken");
    let in_force = RuleId::config_map_sync("tenant-a", "fine");
    let kept_admin = RuleId::replication_rule("broken-admin");
    let state = |namespace: &str, rule: &RuleId| {
        let copy =
            desired_copy(rule, "uid", ObjectKind::ConfigMap, &read(&tenants, payload("v1")), namespace);
        match written(&copy) {
            Existing::Copy(state) => CopyState { uid: format!("{namespace}/{}", rule.name).into(), ..state },
            Existing::Unmanaged => unreachable!("a rule's copy is kopper's"),
        }
    };
    let ns: BTreeMap<String, NamespaceInfo> = [
        namespace_accepting("consenting", "tenant-a", false),
        namespace_accepting("withdrawn", "tenant-x", false),
        namespace_accepting("kopper-system", "*", false),
    ]
    .into_iter()
    .map(|info| (info.name.clone(), info))
    .collect();
    let policy = DestinationPolicy {
        protected: ProtectedNamespaces::new(Some("kopper-system"), &[]),
        allow_unconsented: false,
    };
    let copies = [
        ("consenting", state("consenting", &kept_sync)),
        ("withdrawn", state("withdrawn", &kept_sync)),
        ("kopper-system", state("kopper-system", &kept_sync)),
        ("withdrawn", state("withdrawn", &in_force)),
        ("withdrawn", state("withdrawn", &kept_admin)),
    ];
    let kept = KeptRules::new([kept_sync, kept_admin]);
    let deleted: Vec<String> = copies_without_consent(
        ObjectKind::ConfigMap,
        copies.iter().map(|(namespace, copy)| (*namespace, "cfg", copy)),
        &ns,
        &policy,
        &kept,
    )
    .iter()
    .map(|change| match change {
        Change::Delete { uid, .. } => uid.clone(),
        other => panic!("only deletions, got {other:?}"),
    })
    .collect();
    assert_eq!(
        deleted,
        ["withdrawn/broken", "kopper-system/broken"],
        "only the kept sync's copies where its tenant lost the right to write: a sync in force is its \
         pass's, an admin's rule needs no consent"
    );
}

#[test]
fn a_copy_of_a_rule_kept_while_refused_holds_its_place_as_its_rule_would() {
    let ns = two_tenants_and_a_shared_destination();
    let objects = [source("tenant-a", "cfg", "ua", "1"), source("tenant-b", "cfg", "ub", "1")];
    let sources: HashMap<String, Source> = [read(&objects[0], payload("a")), read(&objects[1], payload("b"))]
        .into_iter()
        .map(|source| (source.info.uid.clone(), source))
        .collect();
    // alice's rule holds the place, then is refused for its shape: no longer in force.
    let alices = sync_into_tenant_c("tenant-a", "share");
    let existing: BTreeMap<CopyKey, Existing> = [copy_in_tenant_c(&alices, &objects[0])].into();
    let kept = KeptRules::new([alices.id.clone()]);
    let plan_of = |rule: &Rule, keeping: bool| {
        let rules = [rule.clone()];
        let world = World::new(&rules, &ns, &objects);
        let world = if keeping { world.keeping(&kept) } else { world };
        plan_rule(rule, &world, &sources, &existing)
    };
    let bobs = sync_into_tenant_c("tenant-b", "0");
    assert!(
        matches!(plan_of(&bobs, false).changes.as_slice(), [Change::Update { .. }]),
        "without the kept rule, bob's rule would rewrite alice's copy"
    );
    let held = plan_of(&bobs, true);
    assert!(held.writes().next().is_none(), "alice's copy is not rewritten: {held:?}");
    assert!(
        matches!(held.conflicts().next(), Some((key, ConflictReason::ClaimedByOtherRule(_))) if *key == key_c()),
        "{held:?}"
    );
    // Her own tenant's rule sorting after hers waits too; one sorting first, or the admin's,
    // takes the place as it would from her rule in force.
    let later = sync_into_tenant_c("tenant-a", "z-later");
    assert!(plan_of(&later, true).writes().next().is_none());
    let first = sync_into_tenant_c("tenant-a", "a-first");
    assert!(matches!(plan_of(&first, true).changes.as_slice(), [Change::Update { .. }]));
    let admin = Rule {
        id: RuleId::replication_rule("zz-admin"),
        targets: rule("zz-admin", 0).targets,
        ..sync_into_tenant_c("tenant-b", "admin")
    };
    let admins = plan_of(&admin, true);
    assert!(
        admins
            .changes
            .iter()
            .any(|change| matches!(change, Change::Update { copy, .. } if copy.key == key_c())),
        "{admins:?}"
    );
}

#[test]
fn a_source_holding_none_of_the_listed_keys_is_not_copied_and_its_copies_are_kept() {
    let keys: BTreeSet<String> = (0..256).map(|n| format!("key-{n:03}")).collect();
    let rule = shaped(rule("r", 1), Shape { keys: Some(keys), ..Shape::default() });
    let info = source("src", "cfg", "u1", "1");
    let ns = namespaces(&["src", "a", "b"]);
    let objects = [info.clone()];
    let rules = [rule.clone()];
    let world = World::new(&rules, &ns, &objects);
    let sources = payloads(&[&objects[0]], "v1");
    // A copy of the whole ConfigMap, written before the rule listed its keys; none in b.
    let full = copy_template(
        &rule.id,
        RULE_UID,
        ObjectKind::ConfigMap,
        &read(&info, payload("v1")),
        &Shape::default(),
    )
    .into_namespace("a");
    let existing = [(full.key.clone(), written(&full))].into();

    let plan = plan_rule(&rule, &world, &sources, &existing);

    assert_eq!(plan.writes().count(), 0, "no empty copy written, none deleted: {:?}", plan.changes);
    let [problem] = plan.shape_problems.as_slice() else { panic!("{:?}", plan.shape_problems) };
    assert_eq!(problem.reason(), "SourceKeysMissing");
    let message = problem.message();
    assert!(
        message.contains("src/cfg holds none of the keys") && message.contains("not copied"),
        "{message}"
    );
    assert!(message.contains("key-000, key-001, key-002, key-003, key-004 and 251 more"), "{message}");
    assert!(message.len() < 300, "a bounded message: {} characters", message.len());
}

/// A SecretSync in `tenant` sharing the Secret `cfg` with `dest`, which accepts it.
fn secret_share(tenant: &str) -> Rule {
    let mut rule = tenant_sync(tenant, &["dest"]);
    rule.id = RuleId::secret_sync(tenant, "share");
    rule.kind = ObjectKind::Secret;
    rule.sources.credential_types = Some(Vec::new());
    rule
}

#[test]
fn a_tenant_s_named_credential_or_kopper_made_source_is_refused_by_name() {
    let share = secret_share("tenant-a");
    let mut token = source("tenant-a", "cfg", "u1", "1");
    token.annotations = labels(&[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder")]);
    let problem = refused_named_source(&share, Some(&token), None, false).unwrap();
    assert_eq!(problem.reason(), "CredentialTypeRefused");
    assert!(problem.message().contains("tenant-a/cfg is a kubernetes.io/service-account-token Secret"));
    assert!(problem.refuses_source() && problem.refuses_copy());

    let plain = source("tenant-a", "cfg", "u1", "1");
    let by_type = refused_named_source(&share, Some(&plain), Some("helm.sh/release.v1"), false).unwrap();
    assert!(by_type.message().contains("helm.sh/release.v1"), "told by its type alone");
    assert_eq!(
        refused_named_source(&share, Some(&plain), Some("kubernetes.io/dockerconfigjson"), false),
        None
    );
    assert_eq!(refused_named_source(&share, Some(&plain), None, false), None);
    assert_eq!(refused_named_source(&share, None, None, false), None, "a missing source is no refusal");

    let mut copy = plain.clone();
    copy.labels = labels(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE), (REPLICATED_BY_LABEL, "ss-x")]);
    for (candidate, made_by_kopper) in [(Some(&copy), false), (None, true)] {
        let problem = refused_named_source(&share, candidate, None, made_by_kopper).unwrap();
        assert_eq!(problem.reason(), "SourceMadeByKopper");
        assert!(problem.message().contains("tenant-a/cfg"), "{}", problem.message());
    }
    // An admin's rule, which names no one source, is never refused this way: a broad rule
    // skips credentials silently, and copies only those its `credentialTypes` names.
    let mut admin = rule("r", 1);
    admin.kind = ObjectKind::Secret;
    assert_eq!(refused_named_source(&admin, Some(&token), None, true), None);
}

/// A shared Secret whose content turns out to be a credential (a Helm release record made
/// under the shared name) is reported, and its copies go as a source's that stopped matching.
#[test]
fn a_shared_secret_of_a_credential_type_is_reported_and_loses_its_copies() {
    let share = secret_share("tenant-a");
    let info = source("tenant-a", "cfg", "u1", "1");
    let mut ns = namespaces(&["tenant-a"]);
    ns.insert("dest".into(), namespace_accepting("dest", "tenant-a", false));
    let objects = [info.clone()];
    let rules = [share.clone()];
    let world = World::new(&rules, &ns, &objects);
    let opaque = Payload { secret_type: Some("Opaque".into()), ..payload("v") };
    let first =
        plan_rule(&share, &world, &[(info.uid.clone(), read(&info, opaque))].into(), &BTreeMap::new());
    let Some(Change::Create(copy)) = first.changes.first() else { panic!("{:?}", first.changes) };
    let existing = [(copy.key.clone(), written(copy))].into();

    let release = Payload { secret_type: Some("helm.sh/release.v1".into()), ..payload("v") };
    let plan = plan_rule(&share, &world, &[(info.uid.clone(), read(&info, release))].into(), &existing);
    let reasons: Vec<&str> = plan.shape_problems.iter().map(ShapeProblem::reason).collect();
    assert_eq!(reasons, ["CredentialTypeRefused"]);
    assert!(
        matches!(plan.changes.as_slice(), [Change::Delete { key, .. }] if key.namespace == "dest"),
        "{:?}",
        plan.changes
    );
}

#[test]
fn a_secret_sync_orphan_ranks_as_a_tenant_s_and_goes_with_its_consent() {
    let id = RuleId::secret_sync("tenant-a", "share.v1");
    assert_eq!(id.to_string(), "SecretSync.share.v1.tenant-a");
    assert!(id.label_value().starts_with("ss-") && id.label_value().len() <= 63);
    assert_ne!(id.label_value(), RuleId::config_map_sync("tenant-a", "share.v1").label_value());
    let orphan = labels(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE), (ORPHANED_LABEL, "true")]);
    let annotations = labels(&[(RULE_ANNOTATION, &id.to_string()), (SOURCE_UID_ANNOTATION, "u1")]);
    let info = ObjectInfo { labels: orphan, annotations, ..source("dest", "cfg", "c1", "1") };
    let state = CopyState::from_info(&info, &Payload::default());
    assert_eq!(state.orphan_tenant.as_deref(), Some("tenant-a"));
    assert!(state.outranked_by(RuleKind::ReplicationRule) && !state.outranked_by(RuleKind::SecretSync));
}

/// A kind the admin allows, as the tests' rules copy it.
fn widget_kind() -> ObjectKind {
    let kinds =
        crate::kinds::AllowedKinds::new([crate::kinds::parse_entry("example.com/v1/Widget").unwrap()]);
    let widget = kinds.find("example.com/v1", "Widget").unwrap();
    ObjectKind::Other(widget)
}

/// Renderings as a map from (namespace, desired) to what is known.
struct Known(Vec<(&'static str, u64, u64, Rendering)>);

impl Renderings for Known {
    fn judge(&self, namespace: &str, _: &str, desired: u64, in_place: u64) -> Rendering {
        self.0
            .iter()
            .find(|(at, wanted, rendered, _)| *at == namespace && *wanted == desired && *rendered == in_place)
            .map_or(Rendering::Unknown, |(_, _, _, judged)| *judged)
    }
}

/// A copy of a kind the server fills in is judged by what kopper wrote, never by its content
/// against the source's: in sync as kopper's write was rendered; otherwise a dry-run checks a
/// copy whose marks are right; a copy kopper wrote of other content, or with wrong marks, is
/// written.
#[test]
fn a_generic_copy_is_judged_by_its_rendering_not_by_its_content() {
    let kind = widget_kind();
    let mut rule = rule("widgets", 0);
    rule.kind = kind;
    let rules = [rule];
    let objects = [source("src", "w", "s1", "1")];
    let ns = namespaces(&["src", "a", "b", "c", "d"]);
    let world = World::new(&rules, &ns, &objects);
    let fields = Payload::generic([("spec".to_owned(), serde_json::json!({"color": "blue"}))]);
    let sources: HashMap<String, Source> = [("s1".to_owned(), read(&objects[0], fields.clone()))].into();
    let first = plan_rule(&rules[0], &world, &sources, &BTreeMap::new());
    let Some(Change::Create(template)) = first.changes.first() else { panic!("{:?}", first.changes) };
    // As the server renders it: with a default filled in.
    let rendered = |copy: &DesiredCopy, namespace: &str| {
        let mut copy = copy.clone();
        copy.key.namespace = namespace.to_owned();
        written_as(&copy, |_, payload| {
            payload.fields.insert("spec".to_owned(), serde_json::json!({"color": "blue", "size": 3}));
        })
    };
    let Existing::Copy(state) = rendered(template, "a") else { unreachable!() };
    let in_place = state.content;
    let existing: BTreeMap<CopyKey, Existing> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|namespace| {
            let key = CopyKey { kind, namespace: namespace.to_owned(), name: "w".to_owned() };
            let copy = if namespace == "d" {
                written_as(template, |info, payload| {
                    info.namespace = "d".into();
                    info.annotations.remove(SOURCE_VERSION_ANNOTATION);
                    payload.fields.insert("spec".to_owned(), serde_json::json!({"color": "blue", "size": 3}));
                })
            } else {
                rendered(template, namespace)
            };
            (key, copy)
        })
        .collect();
    let known = Known(vec![
        ("a", template.content, in_place, Rendering::InSync),
        ("b", template.content, in_place, Rendering::Outdated),
    ]);
    let plan = plan_rule_with(&rules[0], &world, &sources, &existing, &known);
    assert_eq!(plan.in_sync_namespaces, BTreeSet::from(["a".to_owned()]), "{:?}", plan.changes);
    let update_in = |namespace: &str| {
        plan.changes.iter().find_map(|change| match change {
            Change::Update { copy, .. } if copy.key.namespace == namespace => Some(copy.rendering_check),
            _ => None,
        })
    };
    assert_eq!(update_in("b"), Some(None), "as kopper left it, of other content: written");
    assert_eq!(update_in("c"), Some(Some(in_place)), "nothing known: a dry-run first");
    assert_eq!(update_in("d"), Some(None), "one of kopper's marks gone: written, no dry-run needed");
}
