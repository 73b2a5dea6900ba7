//! Every CustomResourceDefinition kopper serves, derived from the Rust types. `kopper crds`
//! prints them; `config/crd/` holds the committed copies, checked by `tests/crds.rs`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use kube::CustomResourceExt;

use crate::controllers::bucket::types::Bucket;
use crate::controllers::config_map_sync::types::ConfigMapSync;
use crate::controllers::namespace_access::NamespaceAccess;
use crate::controllers::replication_rule::types::ReplicationRule;

/// The API group of every kopper kind.
pub const GROUP: &str = "kopper.dev";

/// All kopper CRDs, in a stable order. Each controller adds its kinds here.
pub fn all() -> Vec<CustomResourceDefinition> {
    let crds = [NamespaceAccess::crd(), ConfigMapSync::crd(), ReplicationRule::crd(), Bucket::crd()];
    crds.into_iter().map(with_strict_selectors).collect()
}

/// Label keys as Kubernetes accepts them: an optional DNS-subdomain prefix and `/`, then a
/// name of at most 63 letters, digits, `-`, `_` and `.`, alphanumeric at both ends.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// Label values: empty, or at most 63 letters, digits, `-`, `_` and `.`, alphanumeric at both ends.
pub const LABEL_VALUE_PATTERN: &str = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// k8s-openapi's LabelSelector schema accepts any string as an operator, key or value, so a
/// wrong selector would be stored and fail only when kopper reads it. Every selector in
/// kopper's CRDs gets the rules kube-apiserver applies to label selectors: operators from
/// the four that exist, label keys and values of the right shape; `kubectl apply` then
/// refuses a wrong one and names the field.
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
        requirement["key"]["maxLength"] = 317.into();
        requirement["values"]["items"]["pattern"] = LABEL_VALUE_PATTERN.into();
        properties["matchExpressions"]["items"]["anyOf"] = values_fit_the_operator();
        properties["matchLabels"]["additionalProperties"]["pattern"] = LABEL_VALUE_PATTERN.into();
    }
    for child in object.values_mut() {
        match child {
            serde_json::Value::Array(items) => items.iter_mut().for_each(tighten_selectors),
            other => tighten_selectors(other),
        }
    }
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
