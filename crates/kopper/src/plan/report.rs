//! What `kopper plan` found, as lines for people or JSON for scripts, and the exit status a
//! CI pipeline gates on.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::controllers::namespace_access::diff::Action;
use crate::controllers::namespace_access::plan::PolicyPlan;
use crate::controllers::replication::desired::{Change, DesiredCopy};
use crate::controllers::replication::model::{MANAGED_BY_LABEL, RuleId, RuleKind};
use crate::controllers::replication::plan::RulePlan;

/// The exit status when the plan finds conflicts, refused rules or rules that would not get
/// what they ask for (1 is an error, 2 a bad flag), so that a pipeline can tell "this would
/// not work" from "plan could not run".
pub const FINDINGS_EXIT_CODE: u8 = 3;

/// Which rules' findings decide the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Every rule planned (plain `kopper plan`).
    All,
    /// Only the rules read from files (`kopper plan -f`).
    FileRules,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub rules: Vec<RuleReport>,
    pub summary: Summary,
}

/// One rule (ReplicationRule, ConfigMapSync or NamespaceAccess) and what it would do.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The file the rule was read from; absent for rules read from the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Why the rule cannot be used at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    pub changes: Vec<ChangeReport>,
    /// What the rule asks for and would not get, besides conflicts: destinations that do
    /// not accept its copies, a source it names that does not exist.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmet: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Create,
    Update,
    Replace,
    Delete,
    /// Take over, with one metadata patch, a copy another rule left (`deletionPolicy: Orphan`).
    Adopt,
    /// Leave a copy in place for another rule to take over (a rule deleted with
    /// `deletionPolicy: Orphan`).
    Orphan,
    /// Not a write: the rule asks for an object it would not get.
    Conflict,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChangeReport {
    pub action: Verb,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `namespace/name` of the object a copy is made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why a conflict is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the copy written holds, as its rule shapes it; absent for deletions and conflicts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shaped: Option<Shaped>,
}

/// What a copy holds of its source, as its rule shapes it (never a value of its data).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shaped {
    /// The keys of its data.
    pub keys: Vec<String>,
    /// A Secret's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// Its labels, kopper's own marks left out.
    pub labels: BTreeMap<String, String>,
    /// Label and annotation keys of the source the copy does not carry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Whether the rule keeps only some keys or changes the type.
    #[serde(skip)]
    pub reshaped: bool,
}

impl Shaped {
    fn of(copy: &DesiredCopy) -> Self {
        let payload = &copy.payload;
        let keys: Vec<String> = payload.data.keys().chain(payload.binary_data.keys()).cloned().collect();
        let own = |key: &str| key == MANAGED_BY_LABEL || key.starts_with("kopper.dev/");
        let left_out = (copy.source.labels.keys().filter(|key| !copy.labels.contains_key(*key)))
            .chain(copy.source.annotations.keys().filter(|key| !copy.annotations.contains_key(*key)))
            .filter(|key| !own(key))
            .cloned()
            .collect();
        Self {
            reshaped: copy.reshaped,
            keys,
            secret_type: payload.secret_type.clone(),
            labels: copy
                .labels
                .iter()
                .filter(|(key, _)| !own(key))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            left_out,
        }
    }

    /// What the text report says of it: the keys and type when the rule reshapes the data,
    /// and what it leaves out.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.reshaped {
            parts.push(format!("keys: {}", self.keys.join(", ")));
            if let Some(secret_type) = &self.secret_type {
                parts.push(format!("type: {secret_type}"));
            }
        }
        if !self.left_out.is_empty() {
            parts.push(format!("left out: {}", self.left_out.join(", ")));
        }
        if parts.is_empty() { String::new() } else { format!("; {}", parts.join("; ")) }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub create: usize,
    pub update: usize,
    pub replace: usize,
    pub delete: usize,
    pub adopt: usize,
    pub orphan: usize,
    pub conflicts: usize,
    pub refused: usize,
    /// Rules that would not get all they ask for, besides conflicts.
    pub unmet: usize,
}

impl Report {
    /// Adds a rule and counts its changes.
    pub fn push(&mut self, rule: RuleReport) {
        for change in &rule.changes {
            match change.action {
                Verb::Create => self.summary.create += 1,
                Verb::Update => self.summary.update += 1,
                Verb::Replace => self.summary.replace += 1,
                Verb::Delete => self.summary.delete += 1,
                Verb::Adopt => self.summary.adopt += 1,
                Verb::Orphan => self.summary.orphan += 1,
                Verb::Conflict => self.summary.conflicts += 1,
            }
        }
        if rule.refused.is_some() {
            self.summary.refused += 1;
        }
        if !rule.unmet.is_empty() {
            self.summary.unmet += 1;
        }
        self.rules.push(rule);
    }

    /// Whether a pipeline should stop: some rule `gate` covers would not get what it asks for.
    pub fn has_findings(&self, gate: Gate) -> bool {
        self.rules.iter().filter(|rule| gate == Gate::All || rule.file.is_some()).any(|rule| {
            rule.refused.is_some()
                || !rule.unmet.is_empty()
                || rule.changes.iter().any(|change| change.action == Verb::Conflict)
        })
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for rule in &self.rules {
            render_rule(&mut out, rule);
        }
        let s = &self.summary;
        let adopt = if s.adopt > 0 { format!(", {} to take over", s.adopt) } else { String::new() };
        let _ = writeln!(
            out,
            "Plan: {} to create, {} to update, {} to replace, {} to delete{adopt}, {}, {}{}.",
            s.create,
            s.update,
            s.replace,
            s.delete,
            counted(s.conflicts, "conflict", "conflicts"),
            counted(s.refused, "refused rule", "refused rules"),
            if s.unmet > 0 {
                format!(", {}", counted(s.unmet, "rule unmet", "rules unmet"))
            } else {
                String::new()
            },
        );
        out
    }
}

fn counted(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn render_rule(out: &mut String, rule: &RuleReport) {
    let name = match &rule.namespace {
        Some(namespace) => format!("{namespace}/{}", rule.name),
        None => rule.name.clone(),
    };
    let file = rule.file.as_ref().map(|file| format!(" (from {})", file.display())).unwrap_or_default();
    let _ = write!(out, "{} {name}{file}:", rule.kind);
    if let Some(refused) = &rule.refused {
        let _ = writeln!(out, " refused: {refused}");
        return;
    }
    let _ = writeln!(out);
    for unmet in &rule.unmet {
        let _ = writeln!(out, "  ! unmet: {unmet}");
    }
    if rule.changes.is_empty() {
        let _ = writeln!(out, "  no changes");
    }
    for change in &rule.changes {
        let target = format!("{} {}/{}", change.kind, change.namespace, change.name);
        let from = change.source.as_ref().map(|source| format!(" (from {source})")).unwrap_or_default();
        let shaped = change.shaped.as_ref().map(Shaped::describe).unwrap_or_default();
        let line = match change.action {
            Verb::Create => format!("  + create  {target}{from}{shaped}"),
            Verb::Update => format!("  ~ update  {target}{from}{shaped}"),
            Verb::Replace => format!("  ± replace {target}{from}{shaped}"),
            Verb::Adopt => format!("  ~ take over {target}{from}{shaped}"),
            Verb::Orphan => format!("  · orphan  {target}"),
            Verb::Delete => format!("  - delete  {target}"),
            Verb::Conflict => {
                format!("  ! conflict {target}: {}", change.reason.as_deref().unwrap_or_default())
            }
        };
        let _ = writeln!(out, "{line}");
    }
}

/// The custom resource kind behind a replication rule.
pub fn rule_kind(kind: &RuleKind) -> &'static str {
    kind.as_str()
}

/// A ReplicationRule's, ConfigMapSync's or SecretSync's plan.
pub fn replication_rule(plan: &RulePlan, file: Option<PathBuf>) -> RuleReport {
    let RuleId { kind, name, namespace } = &plan.id;
    RuleReport {
        kind: rule_kind(kind),
        namespace: namespace.clone(),
        name: name.clone(),
        file,
        refused: plan.refused.clone(),
        changes: plan.changes.iter().map(copy_change).collect(),
        unmet: plan.unmet.clone(),
    }
}

fn copy_change(change: &Change) -> ChangeReport {
    let (action, key, source, reason) = match change {
        Change::Create(copy) | Change::CreateIfAbsent(copy) => (Verb::Create, &copy.key, Some(copy), None),
        Change::Update { copy, .. } => (Verb::Update, &copy.key, Some(copy), None),
        Change::Replace { copy, .. } => (Verb::Replace, &copy.key, Some(copy), None),
        Change::Adopt { copy, .. } => (Verb::Adopt, &copy.key, Some(copy), None),
        Change::Orphan { key, .. } => (Verb::Orphan, key, None, None),
        Change::Delete { key, .. } => (Verb::Delete, key, None, None),
        Change::Conflict { key, reason } => (Verb::Conflict, key, None, Some(reason.message(key))),
    };
    ChangeReport {
        action,
        kind: key.kind.to_string(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        source: source.map(|copy| format!("{}/{}", copy.source.namespace, copy.source.name)),
        reason,
        shaped: source.map(Shaped::of),
    }
}

/// A NamespaceAccess policy's plan.
pub fn namespace_access(plan: &PolicyPlan, file: Option<PathBuf>) -> RuleReport {
    let writes = plan.actions.iter().map(|(namespace, action)| ChangeReport {
        action: match action {
            Action::Create(_) => Verb::Create,
            Action::Update(_) => Verb::Update,
            Action::Replace { .. } => Verb::Replace,
            Action::Delete { .. } => Verb::Delete,
        },
        kind: "RoleBinding".into(),
        namespace: namespace.clone(),
        name: action.binding_name().to_owned(),
        source: None,
        reason: None,
        shaped: None,
    });
    let problems = plan.problems.iter().map(|problem| ChangeReport {
        action: Verb::Conflict,
        kind: "RoleBinding".into(),
        namespace: problem.namespace.clone(),
        name: problem.name.clone(),
        source: None,
        reason: Some(format!("{}: {}", problem.kind.as_str(), problem.message)),
        shaped: None,
    });
    RuleReport {
        kind: "NamespaceAccess",
        namespace: None,
        name: plan.policy.clone(),
        file,
        refused: plan.refused.clone(),
        changes: writes.chain(problems).collect(),
        unmet: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(action: Verb, name: &str) -> ChangeReport {
        ChangeReport {
            action,
            kind: "ConfigMap".into(),
            namespace: "a".into(),
            name: name.into(),
            source: (action != Verb::Conflict).then(|| "src/cfg".into()),
            reason: (action == Verb::Conflict).then(|| "not kopper's".into()),
            shaped: None,
        }
    }

    fn rule(changes: Vec<ChangeReport>, refused: Option<&str>) -> RuleReport {
        RuleReport {
            kind: "ReplicationRule",
            namespace: None,
            name: "r".into(),
            file: None,
            refused: refused.map(str::to_owned),
            changes,
            unmet: Vec::new(),
        }
    }

    #[test]
    fn a_rule_that_would_not_get_all_it_asks_for_is_a_finding_and_says_why() {
        let mut report = Report::default();
        let mut unmet = rule(Vec::new(), None);
        unmet.unmet.push("the source team-c/cfg does not exist".into());
        report.push(unmet);
        assert!(report.has_findings(Gate::All));
        let text = report.to_text();
        assert!(text.contains("  ! unmet: the source team-c/cfg does not exist"), "{text}");
        assert!(text.ends_with("0 refused rules, 1 rule unmet.\n"), "{text}");
    }

    #[test]
    fn text_lists_each_change_and_totals() {
        let mut report = Report::default();
        report.push(rule(vec![change(Verb::Create, "cfg"), change(Verb::Conflict, "taken")], None));
        let out = report.to_text();
        assert!(out.contains("ReplicationRule r:\n  + create  ConfigMap a/cfg (from src/cfg)"), "{out}");
        assert!(out.contains("  ! conflict ConfigMap a/taken: not kopper's"), "{out}");
        assert!(out.ends_with(
            "1 to create, 0 to update, 0 to replace, 0 to delete, 1 conflict, 0 refused rules.\n"
        ));
        assert!(report.has_findings(Gate::All));
        assert!(!report.has_findings(Gate::FileRules), "a cluster rule's conflict does not gate files");
    }

    #[test]
    fn only_conflicts_and_refusals_are_findings() {
        let mut clean = Report::default();
        clean.push(rule(vec![change(Verb::Create, "cfg"), change(Verb::Delete, "old")], None));
        assert!(!clean.has_findings(Gate::All));
        let mut refused = Report::default();
        refused.push(rule(Vec::new(), Some("spec.selector: bad")));
        assert!(refused.has_findings(Gate::All));
        assert!(refused.to_text().contains("ReplicationRule r: refused: spec.selector: bad"));
    }

    #[test]
    fn json_names_every_field_a_script_reads() {
        let mut report = Report::default();
        report.push(rule(vec![change(Verb::Create, "cfg")], None));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rules"][0]["kind"], "ReplicationRule");
        assert_eq!(json["rules"][0]["changes"][0]["action"], "create");
        assert_eq!(json["rules"][0]["changes"][0]["source"], "src/cfg");
        assert_eq!(json["summary"]["create"], 1);
        assert_eq!(json["summary"]["conflicts"], 0);
    }
}
