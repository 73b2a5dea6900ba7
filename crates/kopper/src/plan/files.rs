//! Rules read from files for `kopper plan -f`: the same YAML `kubectl apply -f` takes.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::controllers::namespace_access::NamespaceAccess;
use crate::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};

/// A rule's identity across files and the cluster: kind, namespace (namespaced kinds) and name.
pub type RuleKey = (String, Option<String>, String);

/// The kopper rules found in the files, and where each came from.
#[derive(Debug, Default)]
pub struct FileRules {
    pub replication_rules: Vec<ReplicationRule>,
    pub config_map_syncs: Vec<ConfigMapSync>,
    pub secret_syncs: Vec<SecretSync>,
    pub namespace_accesses: Vec<NamespaceAccess>,
    pub origins: BTreeMap<RuleKey, PathBuf>,
    /// Namespaces and ConfigMaps in the files, planned as if applied with the rules: the
    /// namespace that accepts a ConfigMapSync's copies, or its source, often comes with it.
    pub namespaces: Vec<Namespace>,
    pub config_maps: Vec<ConfigMap>,
    /// Other documents, which plan leaves out, by kind.
    pub skipped: Vec<String>,
}

/// The key of any object, file or cluster.
pub fn key_of<K: Resource<DynamicType = ()>>(object: &K) -> RuleKey {
    let meta = object.meta();
    (K::kind(&()).into_owned(), meta.namespace.clone(), meta.name.clone().unwrap_or_default())
}

impl FileRules {
    /// The Namespaces and ConfigMaps planned as if applied, for people to see what plan
    /// took from the files besides rules.
    pub fn taken_as_applied(&self) -> Vec<String> {
        let namespaces =
            self.namespaces.iter().map(|namespace| format!("Namespace {}", namespace.name_any()));
        let config_maps = self.config_maps.iter().map(|config_map| {
            format!("ConfigMap {}/{}", config_map.namespace().unwrap_or_default(), config_map.name_any())
        });
        namespaces.chain(config_maps).collect()
    }

    /// Reads every file (`-` is standard input). Namespaced rules without a namespace get
    /// `default_namespace`, as with kubectl.
    pub fn read(paths: &[PathBuf], default_namespace: &str) -> anyhow::Result<Self> {
        let mut rules = Self::default();
        for path in paths {
            let text = read_text(path)?;
            rules
                .add(&text, path, default_namespace)
                .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
        }
        Ok(rules)
    }

    fn add(&mut self, text: &str, path: &Path, default_namespace: &str) -> Result<(), String> {
        let documents = crate::samples::documents(text).map_err(|error| format!("not YAML: {error}"))?;
        for (index, document) in documents.into_iter().enumerate() {
            let at = |problem: String| format!("document {}: {problem}", index + 1);
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            let is_kopper = document["apiVersion"].as_str().is_some_and(|api| api.starts_with("kopper.dev/"));
            match (is_kopper, kind.as_str()) {
                (true, "ReplicationRule") => {
                    let rule: ReplicationRule = typed(document, None).map_err(at)?;
                    self.origin(&rule, path)?;
                    self.replication_rules.push(rule);
                }
                (true, "ConfigMapSync") => {
                    let sync: ConfigMapSync = typed(document, Some(default_namespace)).map_err(at)?;
                    self.origin(&sync, path)?;
                    self.config_map_syncs.push(sync);
                }
                (true, "SecretSync") => {
                    let sync: SecretSync = typed(document, Some(default_namespace)).map_err(at)?;
                    self.origin(&sync, path)?;
                    self.secret_syncs.push(sync);
                }
                (true, "NamespaceAccess") => {
                    let policy: NamespaceAccess = typed(document, None).map_err(at)?;
                    self.origin(&policy, path)?;
                    self.namespace_accesses.push(policy);
                }
                // A kopper kind plan does not cover (Bucket, BucketClass, BucketAccess) is
                // skipped like any other kind.
                (true, "Bucket" | "BucketClass" | "BucketAccess") => self.skipped.push(kind.clone()),
                (true, other) => {
                    return Err(at(format!("kopper.dev has no kind {other:?} that plan covers")));
                }
                (false, "Namespace") if document["apiVersion"] == "v1" => {
                    self.namespaces.push(typed(document, None).map_err(at)?);
                }
                (false, "ConfigMap") if document["apiVersion"] == "v1" => {
                    self.config_maps.push(typed(document, Some(default_namespace)).map_err(at)?);
                }
                (false, other) => {
                    self.skipped.push(if other.is_empty() { "(no kind)".into() } else { other.into() })
                }
            }
        }
        Ok(())
    }

    /// Records where a rule came from; the same rule twice is a mistake worth stopping on.
    fn origin<K: Resource<DynamicType = ()>>(&mut self, object: &K, path: &Path) -> Result<(), String> {
        let key = key_of(object);
        if let Some(first) = self.origins.insert(key.clone(), path.to_owned()) {
            let (kind, namespace, name) = key;
            let namespace = namespace.map(|namespace| format!("{namespace}/")).unwrap_or_default();
            return Err(format!("{kind} {namespace}{name} is given twice (also in {})", first.display()));
        }
        Ok(())
    }
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))
}

/// The document as a typed object, named in the error when it does not fit the kind.
fn typed<K: DeserializeOwned + Resource<DynamicType = ()>>(
    mut document: Value,
    default_namespace: Option<&str>,
) -> Result<K, String> {
    let name = document["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    if name.is_empty() {
        return Err(format!("{} without metadata.name", K::kind(&())));
    }
    match default_namespace {
        Some(namespace) if document["metadata"]["namespace"].is_null() => {
            document["metadata"]["namespace"] = Value::from(namespace);
        }
        Some(_) => {}
        // The API server ignores a namespace on a cluster-scoped kind (kustomize adds one to
        // kinds it does not know): so does plan, or the rule would not replace its namesake.
        None => {
            if let Some(metadata) = document["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
        }
    }
    let kind = K::kind(&());
    if let Some(unknown) = unknown_fields(&kind, &document).first() {
        let explain = format!("{}.spec", kind.to_lowercase());
        return Err(format!(
            "{kind} {name}: unknown field {unknown} (the API server would drop or refuse it; `kubectl explain {explain}` lists the fields)"
        ));
    }
    match serde_path_to_error::deserialize::<_, K>(&document) {
        Ok(object) => Ok(object),
        Err(error) => {
            let message = error.inner().to_string();
            let mut path: Vec<Step> = error.path().iter().filter_map(Step::of).collect();
            narrow::<K>(&document, &mut path, &message);
            Err(match path.is_empty() {
                true => format!("{kind} {name}: {message}"),
                false => format!("{kind} {name}: {}: {message}", dotted(&path)),
            })
        }
    }
}

/// One step of a field path: a field's name or a list item's index.
#[derive(Clone)]
enum Step {
    Field(String),
    Item(usize),
}

impl Step {
    fn of(segment: &serde_path_to_error::Segment) -> Option<Self> {
        match segment {
            serde_path_to_error::Segment::Map { key } => Some(Self::Field(key.clone())),
            serde_path_to_error::Segment::Seq { index } => Some(Self::Item(*index)),
            _ => None,
        }
    }
}

fn dotted(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Field(name) if text.is_empty() => text.push_str(name),
            Step::Field(name) => text.push_str(&format!(".{name}")),
            Step::Item(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

fn at_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |value, step| match step {
        Step::Field(name) => value.get_mut(name.as_str()),
        Step::Item(index) => value.get_mut(*index),
    })
}

/// serde loses the path inside a `#[serde(flatten)]` struct (the copy-shaping fields of a
/// spec): it reports the error at `spec`. Goes deeper while taking one field or item out of
/// the document makes the error go away (and no other field is then found missing), so the
/// message names `spec.deletionPolicy`, not `spec`.
fn narrow<K: DeserializeOwned>(document: &Value, path: &mut Vec<Step>, message: &str) {
    'deeper: loop {
        let mut probe = document.clone();
        let children: Vec<Step> = match at_mut(&mut probe, path) {
            Some(Value::Object(fields)) => fields.keys().cloned().map(Step::Field).collect(),
            Some(Value::Array(items)) => (0..items.len()).map(Step::Item).collect(),
            _ => return,
        };
        for child in children {
            let mut without = document.clone();
            match (at_mut(&mut without, path), &child) {
                (Some(Value::Object(fields)), Step::Field(name)) => drop(fields.remove(name)),
                (Some(Value::Array(items)), Step::Item(index)) => drop(items.remove(*index)),
                _ => continue,
            }
            let gone = match serde_json::from_value::<K>(without) {
                Ok(_) => true,
                Err(other) => {
                    let other = other.to_string();
                    other != message && !other.starts_with("missing field")
                }
            };
            if gone {
                path.push(child);
                continue 'deeper;
            }
        }
        return;
    }
}

/// Fields of `document` that the kind's CRD schema does not have, as dotted paths: a typo
/// would otherwise vanish from the plan while `kubectl apply` refuses it (or drops it).
fn unknown_fields(kind: &str, document: &Value) -> Vec<String> {
    let crd = crate::crds::all().into_iter().find(|crd| crd.spec.names.kind == kind);
    let schema = crd
        .and_then(|crd| crd.spec.versions.into_iter().next())
        .and_then(|version| version.schema?.open_api_v3_schema)
        .and_then(|schema| serde_json::to_value(schema).ok());
    let mut unknown = Vec::new();
    if let (Some(schema), Value::Object(fields)) = (schema, document) {
        for (key, value) in
            fields.iter().filter(|(key, _)| !["apiVersion", "kind", "metadata"].contains(&key.as_str()))
        {
            match schema["properties"].get(key) {
                Some(field) => collect_unknown(value, field, key, &mut unknown),
                None => unknown.push(key.clone()),
            }
        }
    }
    unknown
}

fn collect_unknown(value: &Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return;
    }
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let child_path = format!("{path}.{key}");
                match (schema["properties"].get(key), schema.get("additionalProperties")) {
                    (Some(field), _) => collect_unknown(child, field, &child_path, unknown),
                    (None, Some(additional)) if additional.is_object() => {
                        collect_unknown(child, additional, &child_path, unknown)
                    }
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) if schema.get("properties").is_none() => {}
                    (None, _) => unknown.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                collect_unknown(item, &schema["items"], &format!("{path}[{index}]"), unknown);
            }
        }
        _ => {}
    }
}

/// The rules to plan: the cluster's, with each rule a file also holds replaced by the file's
/// version (keeping the cluster object's uid and age, as `kubectl apply` would), plus the
/// files' new rules. New rules are the newest, for the precedence between policies, and all
/// created in the same second, as rules applied together are (the name then decides).
pub fn merged<K: Resource<DynamicType = ()> + Clone>(cluster: &[K], files: &[K]) -> Vec<K> {
    let now = k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
    let mut merged: BTreeMap<RuleKey, K> =
        cluster.iter().map(|object| (key_of(object), object.clone())).collect();
    for object in files {
        let key = key_of(object);
        let mut object = object.clone();
        let meta = object.meta_mut();
        match merged.get(&key) {
            Some(existing) => {
                meta.uid = existing.meta().uid.clone();
                meta.creation_timestamp = existing.meta().creation_timestamp.clone();
                meta.generation = existing.meta().generation.map(|generation| generation + 1);
            }
            None => {
                let (kind, namespace, name) = &key;
                meta.uid =
                    Some(format!("planned-{kind}-{}-{name}", namespace.as_deref().unwrap_or_default()));
                meta.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
                meta.generation = Some(1);
            }
        }
        merged.insert(key, object);
    }
    merged.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: kopper.dev/v1alpha1
kind: ConfigMapSync
metadata: {name: settings}
spec: {sourceNamespace: apps, configMapName: settings, destinationNamespaces: [team-a]}
---
apiVersion: kopper.dev/v1alpha1
kind: ReplicationRule
metadata: {name: shared}
spec:
  kind: ConfigMap
  namespaces: [apps]
  selector: {matchLabels: {share: "true"}}
"#;

    #[test]
    fn rules_are_read_with_their_file_and_namespaces_taken_as_applied() {
        let mut rules = FileRules::default();
        rules.add(RULES, Path::new("rules.yaml"), "apps").unwrap();
        assert_eq!(rules.replication_rules.len(), 1);
        assert_eq!(rules.config_map_syncs[0].metadata.namespace.as_deref(), Some("apps"));
        assert!(rules.skipped.is_empty(), "{:?}", rules.skipped);
        assert_eq!(rules.taken_as_applied(), ["Namespace team-a"], "planned as if applied with the rules");
        let namespaced = RULES.replace("metadata: {name: shared}", "metadata: {name: shared, namespace: x}");
        let mut again = FileRules::default();
        again.add(&namespaced, Path::new("rules.yaml"), "apps").unwrap();
        assert_eq!(again.replication_rules[0].metadata.namespace, None, "cluster-scoped: no namespace");
        let key = ("ConfigMapSync".to_owned(), Some("apps".to_owned()), "settings".to_owned());
        assert_eq!(rules.origins[&key], Path::new("rules.yaml"));
    }

    #[test]
    fn a_document_that_does_not_fit_its_kind_is_named_in_the_error() {
        let text = "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r}\nspec: {selectr: {}}\n";
        let error = FileRules::default().add(text, Path::new("f.yaml"), "default").unwrap_err();
        assert!(error.contains("document 1") && error.contains("ReplicationRule r"), "{error}");
        let typo = "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {name: r}\n\
                    spec: {kind: ConfigMap, namespaces: [a], selector: {matchLabels: {a: b}}, namespaceSelectr: {}}\n";
        let error = FileRules::default().add(typo, Path::new("f.yaml"), "default").unwrap_err();
        assert!(error.contains("unknown field spec.namespaceSelectr"), "{error}");
        let twice = format!("{RULES}---\n{}", RULES.split("---").last().unwrap());
        let error = FileRules::default().add(&twice, Path::new("f.yaml"), "default").unwrap_err();
        assert!(error.contains("ReplicationRule shared is given twice"), "{error}");
    }

    #[test]
    fn a_value_that_does_not_fit_its_field_is_named_by_the_field_path() {
        let rule = |spec: &str| {
            let text = format!(
                "apiVersion: kopper.dev/v1alpha1\nkind: ReplicationRule\nmetadata: {{name: r}}\n\
                 spec: {{kind: ConfigMap, namespaces: [a], selector: {{matchLabels: {{a: b}}}}, {spec}}}\n"
            );
            FileRules::default().add(&text, Path::new("f.yaml"), "default").unwrap_err()
        };
        let error = rule("deletionPolicy: orphan");
        assert!(
            error.contains("ReplicationRule r: spec.deletionPolicy: unknown variant `orphan`, expected `Delete` or `Orphan`"),
            "an unknown enum value: {error}"
        );
        let error = rule("keys: ca.crt");
        assert!(
            error.contains("ReplicationRule r: spec.keys: invalid type: string"),
            "a wrong type: {error}"
        );
        let error = rule("copyLabels: {add: {team: [a]}}");
        assert!(
            error.contains("spec.copyLabels.add.team: invalid type: sequence"),
            "a nested field: {error}"
        );
        let error = rule("namespaces: [a, 7]");
        assert!(error.contains("spec.namespaces[1]: invalid type: integer `7`"), "a list item: {error}");
    }

    #[test]
    fn every_sample_rule_has_only_fields_its_crd_knows() {
        for (name, text) in crate::samples::BUILT_IN {
            for document in crate::samples::documents(text).unwrap() {
                let kind = document["kind"].as_str().unwrap_or_default();
                assert_eq!(unknown_fields(kind, &document), Vec::<String>::new(), "{name}");
            }
        }
        let mut rules = FileRules::default();
        for (name, text) in crate::samples::BUILT_IN {
            rules.add(text, Path::new(name), "default").unwrap();
        }
        assert!(!rules.namespace_accesses.is_empty() && !rules.config_map_syncs.is_empty());
    }

    #[test]
    fn a_file_rule_replaces_the_cluster_rule_of_that_name_and_keeps_its_uid() {
        let mut rules = FileRules::default();
        rules.add(RULES, Path::new("rules.yaml"), "apps").unwrap();
        let mut in_cluster = rules.replication_rules[0].clone();
        in_cluster.metadata.uid = Some("uid-1".into());
        in_cluster.spec.namespaces = vec!["old".into()];
        let mut other = in_cluster.clone();
        other.metadata.name = Some("other".into());
        let merged = merged(&[in_cluster, other], &rules.replication_rules);
        assert_eq!(merged.len(), 2);
        let shared = merged.iter().find(|rule| rule.metadata.name.as_deref() == Some("shared")).unwrap();
        assert_eq!(shared.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(shared.spec.namespaces, ["apps"], "the file's spec wins");
    }
}
