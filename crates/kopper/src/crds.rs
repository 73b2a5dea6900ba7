//! Every CustomResourceDefinition kopper serves, derived from the Rust types. `kopper crds`
//! prints them; `config/crd/` holds the committed copies, checked by `tests/crds.rs`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use kube::CustomResourceExt;

use crate::controllers::bucket::types::Bucket;
use crate::controllers::config_map_sync::types::ConfigMapSync;
use crate::controllers::namespace_access::NamespaceAccess;
use crate::controllers::replication_rule::types::ReplicationRule;

/// All kopper CRDs, in a stable order. Each controller adds its kinds here.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![NamespaceAccess::crd(), ConfigMapSync::crd(), ReplicationRule::crd(), Bucket::crd()]
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
