//! Reading the multi-document YAML of `config/samples/` (the demo applies it; tests pick
//! the documents they need).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `config/samples/`, built into the binary, so that `kopper demo` works from any folder.
pub const BUILT_IN: [(&str, &str); 10] = [
    ("bucket-with-credentials.yaml", include_str!("../../../config/samples/bucket-with-credentials.yaml")),
    ("bucketaccess-read-only.yaml", include_str!("../../../config/samples/bucketaccess-read-only.yaml")),
    ("bucketclass-encrypted.yaml", include_str!("../../../config/samples/bucketclass-encrypted.yaml")),
    (
        "configmapsync-across-namespaces.yaml",
        include_str!("../../../config/samples/configmapsync-across-namespaces.yaml"),
    ),
    (
        "namespaceaccess-group-per-namespace.yaml",
        include_str!("../../../config/samples/namespaceaccess-group-per-namespace.yaml"),
    ),
    (
        "namespaceaccess-team-label.yaml",
        include_str!("../../../config/samples/namespaceaccess-team-label.yaml"),
    ),
    (
        "replicationrule-ca-bundle.yaml",
        include_str!("../../../config/samples/replicationrule-ca-bundle.yaml"),
    ),
    (
        "replicationrule-default-deny.yaml",
        include_str!("../../../config/samples/replicationrule-default-deny.yaml"),
    ),
    (
        "replicationrule-shared-settings.yaml",
        include_str!("../../../config/samples/replicationrule-shared-settings.yaml"),
    ),
    (
        "secretsync-ca-certificate.yaml",
        include_str!("../../../config/samples/secretsync-ca-certificate.yaml"),
    ),
];

/// Every non-empty document of a YAML stream.
pub fn documents(text: &str) -> Result<Vec<Value>, serde_yaml::Error> {
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(document)?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// The first document of `kind`, as `T`; `None` if there is none or it does not fit `T`.
pub fn of_kind<T: DeserializeOwned>(text: &str, kind: &str) -> Option<T> {
    let document = documents(text).ok()?.into_iter().find(|d| d["kind"] == kind)?;
    serde_json::from_value(document).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_sample_is_built_in() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/samples");
        let mut committed: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".yaml"))
            .collect();
        committed.sort();
        let built_in: Vec<&str> = BUILT_IN.iter().map(|(name, _)| *name).collect();
        assert_eq!(committed, built_in, "list every file of config/samples/ in samples::BUILT_IN");
    }

    #[test]
    fn picks_the_document_of_a_kind_from_a_stream() {
        let text = "kind: Namespace\nmetadata: {name: a}\n---\n---\nkind: ConfigMap\nmetadata: {name: b}\n";
        assert_eq!(documents(text).unwrap().len(), 2);
        let cm: Value = of_kind(text, "ConfigMap").unwrap();
        assert_eq!(cm["metadata"]["name"], "b");
        assert!(of_kind::<Value>(text, "Secret").is_none());
    }
}
