//! The CRDs committed under `config/crd/` must be exactly what the Rust types generate, so
//! that `kubectl apply -f config/crd/` installs the schema the controllers were built with.

use std::collections::BTreeSet;
use std::path::PathBuf;

const REGENERATE: &str = "regenerate them with `cargo run -p kopper -- crds --out-dir config/crd`";

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd")
}

fn committed_files() -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(crd_dir()) else { return BTreeSet::new() };
    entries
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect()
}

#[test]
fn committed_crds_match_the_types() {
    for crd in kopper::crds::all() {
        let file = crd_dir().join(kopper::crds::file_name(&crd));
        let committed = std::fs::read_to_string(&file)
            .unwrap_or_else(|_| panic!("{} is missing; {REGENERATE}", file.display()));
        let generated = serde_yaml::to_string(&crd).unwrap();
        assert!(committed == generated, "{} differs from the Rust types; {REGENERATE}", file.display());
    }
}

#[test]
fn committed_field_reference_matches_the_types() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/crd-reference.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = kopper::crd_reference::render(&kopper::crds::all());
    assert!(
        committed == generated,
        "docs/crd-reference.md differs from the CRDs; regenerate it with \
         `cargo run -p kopper -- crds --reference > docs/crd-reference.md`"
    );
}

#[test]
fn no_committed_crd_is_left_without_a_type() {
    let expected: BTreeSet<String> = kopper::crds::all().iter().map(kopper::crds::file_name).collect();
    let stray: Vec<_> = committed_files().difference(&expected).cloned().collect();
    assert!(stray.is_empty(), "config/crd/ holds CRDs no type generates: {stray:?}; {REGENERATE}");
}

#[test]
fn printed_crds_parse_back_as_the_same_definitions() {
    let all = kopper::crds::all();
    let printed = kopper::crds::to_yaml(&all).unwrap();
    let parsed: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&printed)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|document: &serde_json::Value| !document.is_null())
        .collect();
    let expected: Vec<serde_json::Value> = all.iter().map(|crd| serde_json::to_value(crd).unwrap()).collect();
    assert_eq!(parsed, expected);
}
