//! Every CustomResourceDefinition kopper serves, derived from the Rust types. `kopper crds`
//! prints them; `config/crd/` holds the committed copies, checked by `tests/e2e/crds.rs`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use kube::CustomResourceExt;

use crate::controllers::bucket::access_types::BucketAccess;
use crate::controllers::bucket::types::{Bucket, BucketClass};
use crate::controllers::namespace_access::NamespaceAccess;
use crate::controllers::replication::types::{ConfigMapSync, ReplicationRule, SecretSync};

/// The API group of every kopper kind.
pub const GROUP: &str = "kopper.dev";

/// All kopper CRDs, in a stable order. Each controller adds its kinds here.
pub fn all() -> Vec<CustomResourceDefinition> {
    let crds = [
        NamespaceAccess::crd(),
        ConfigMapSync::crd(),
        ReplicationRule::crd(),
        SecretSync::crd(),
        Bucket::crd(),
        BucketClass::crd(),
        BucketAccess::crd(),
    ];
    crds.into_iter().map(with_strict_selectors).collect()
}

/// Label keys as Kubernetes accepts them: an optional DNS-subdomain prefix and `/`, then a
/// name of at most 63 letters, digits, `-`, `_` and `.`, alphanumeric at both ends.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// Label values: empty, or at most 63 letters, digits, `-`, `_` and `.`, alphanumeric at both ends.
pub const LABEL_VALUE_PATTERN: &str = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// Most `matchExpressions` in one label selector.
pub const MAX_MATCH_EXPRESSIONS: usize = 16;
/// Most `values` in one selector requirement.
pub const MAX_REQUIREMENT_VALUES: usize = 64;
/// Most `matchLabels` in one label selector.
pub const MAX_MATCH_LABELS: usize = 64;
/// Longest label key Kubernetes accepts: a 253-character prefix, `/` and a 63-character name.
pub const MAX_LABEL_KEY_LENGTH: usize = 317;
/// Longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE_LENGTH: usize = 63;

/// k8s-openapi's LabelSelector schema accepts any string as an operator, key or value, and
/// any number of them, so a wrong or tenant-sized selector would be stored and fail (or sit
/// in kopper's memory) only when kopper reads it. Every selector in kopper's CRDs gets the
/// rules kube-apiserver applies to label selectors: operators from the four that exist, label
/// keys and values of the right shape and length, and a bounded number of each;
/// `kubectl apply` then refuses a wrong one and names the field.
fn with_strict_selectors(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.take()) else {
            continue;
        };
        let mut value = serde_json::to_value(schema).expect("a schema is JSON");
        tighten_selectors(&mut value);
        let schema = serde_json::from_value(value).expect("a tightened schema is still a schema");
        version.schema.as_mut().expect("checked above").open_api_v3_schema = Some(schema);
    }
    crd
}

fn tighten_selectors(node: &mut serde_json::Value) {
    let serde_json::Value::Object(object) = node else { return };
    if let Some(properties) = object.get_mut("properties").and_then(serde_json::Value::as_object_mut)
        && properties.contains_key("matchExpressions")
        && properties.contains_key("matchLabels")
    {
        let requirement = &mut properties["matchExpressions"]["items"]["properties"];
        requirement["operator"]["enum"] = serde_json::json!(["In", "NotIn", "Exists", "DoesNotExist"]);
        requirement["key"]["pattern"] = LABEL_KEY_PATTERN.into();
        requirement["key"]["maxLength"] = MAX_LABEL_KEY_LENGTH.into();
        requirement["values"]["maxItems"] = MAX_REQUIREMENT_VALUES.into();
        requirement["values"]["items"]["pattern"] = LABEL_VALUE_PATTERN.into();
        requirement["values"]["items"]["maxLength"] = MAX_LABEL_VALUE_LENGTH.into();
        properties["matchExpressions"]["items"]["anyOf"] = values_fit_the_operator();
        properties["matchExpressions"]["maxItems"] = MAX_MATCH_EXPRESSIONS.into();
        append_description(
            &mut properties["matchExpressions"],
            &format!(
                "At most {MAX_MATCH_EXPRESSIONS} requirements, each with at most \
                 {MAX_REQUIREMENT_VALUES} values."
            ),
        );
        let match_labels = &mut properties["matchLabels"];
        match_labels["additionalProperties"]["pattern"] = LABEL_VALUE_PATTERN.into();
        match_labels["additionalProperties"]["maxLength"] = MAX_LABEL_VALUE_LENGTH.into();
        match_labels["maxProperties"] = MAX_MATCH_LABELS.into();
        // Structural schemas cannot bound map keys; a CEL rule can (kube-apiserver 1.25+).
        match_labels["x-kubernetes-validations"] = serde_json::json!([{
            "rule": format!("self.all(key, size(key) <= {MAX_LABEL_KEY_LENGTH})"),
            "message": format!("label keys must have at most {MAX_LABEL_KEY_LENGTH} characters"),
        }]);
        append_description(match_labels, &format!("At most {MAX_MATCH_LABELS} labels."));
    }
    for child in object.values_mut() {
        match child {
            serde_json::Value::Array(items) => items.iter_mut().for_each(tighten_selectors),
            other => tighten_selectors(other),
        }
    }
}

fn append_description(node: &mut serde_json::Value, sentence: &str) {
    let description = node["description"].as_str().unwrap_or_default().trim_end().to_owned();
    node["description"] = format!("{description} {sentence}").trim_start().into();
}

/// `values` as kube-apiserver wants them in a label selector requirement: at least one for
/// `In` and `NotIn`, none for `Exists` and `DoesNotExist`. Written as `anyOf`, which every
/// API server with structural schemas checks (CEL rules would need v1.25).
fn values_fit_the_operator() -> serde_json::Value {
    serde_json::json!([
        {
            "properties": {"operator": {"enum": ["In", "NotIn"]}, "values": {"minItems": 1}},
            "required": ["values"]
        },
        {
            "properties": {"operator": {"enum": ["Exists", "DoesNotExist"]}, "values": {"maxItems": 0}}
        }
    ])
}

/// The CRDs as one multi-document YAML stream.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_yaml::Error> {
    let documents = crds.iter().map(serde_yaml::to_string).collect::<Result<Vec<_>, _>>()?;
    Ok(documents.iter().map(|document| format!("---\n{document}")).collect())
}

/// File name of a CRD under `config/crd/`: its own name, `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Writes one file per CRD into `dir`, as committed under `config/crd/`.
pub fn write_dir(dir: &Path, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for crd in crds {
        std::fs::write(dir.join(file_name(crd)), serde_yaml::to_string(crd)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// install.md's uninstall deletes every kopper resource while kopper still runs, so
    /// their finalizers release what kopper made: a CRD added without its plural there would
    /// leave its objects stuck on the finalizer once the CRDs go.
    #[test]
    fn install_md_uninstall_deletes_every_kind_of_kopper_resource() {
        let install = include_str!("../../../docs/install.md");
        let uninstall = install.split("## Uninstall").nth(1).expect("an Uninstall section");
        let deletes: Vec<&str> =
            uninstall.lines().filter(|line| line.starts_with("kubectl delete ")).collect();
        for crd in all() {
            let plural = crd.spec.names.plural.as_str();
            let namespaced = crd.spec.scope == "Namespaced";
            let named = deletes.iter().any(|line| {
                let resources = line.split_whitespace().nth(2).unwrap_or_default();
                resources.split(',').any(|resource| resource == plural)
                    && line.contains("--all-namespaces") == namespaced
            });
            assert!(named, "{plural} (namespaced: {namespaced}) in install.md's uninstall: {deletes:?}");
        }
    }
}
