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

/// Every field a user can `kubectl explain` has text written for people: none empty, none
/// the generator's own boilerplate.
#[test]
fn every_field_has_a_description_written_for_users() {
    fn walk(path: &str, node: &serde_json::Value, problems: &mut Vec<String>) {
        let description = node["description"].as_str().unwrap_or_default();
        if description.trim().is_empty() || description.contains("Auto-generated") {
            problems.push(format!("{path}: {description:?}"));
        }
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                walk(&format!("{path}.{name}"), child, problems);
            }
        }
        if let Some(items) = node["items"].as_object().filter(|items| items.contains_key("properties")) {
            let items = serde_json::Value::Object(items.clone());
            for (name, child) in items["properties"].as_object().unwrap() {
                walk(&format!("{path}[].{name}"), child, problems);
            }
        }
    }
    let mut problems = Vec::new();
    for crd in kopper::crds::all() {
        let crd = serde_json::to_value(&crd).unwrap();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            for (name, child) in schema["properties"].as_object().unwrap() {
                if !["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
                    walk(
                        &format!("{}.{name}", crd["spec"]["names"]["kind"].as_str().unwrap()),
                        child,
                        &mut problems,
                    );
                }
            }
            let top = schema["description"].as_str().unwrap_or_default();
            if top.is_empty() || top.contains("Auto-generated") {
                problems.push(format!("{}: {top:?}", crd["metadata"]["name"]));
            }
        }
    }
    assert!(problems.is_empty(), "fields without a description for users:\n{}", problems.join("\n"));
}

/// Every kind that shows its Ready status in `kubectl get` also shows why under
/// `kubectl get -o wide`, so a user seeing `False` need not read the whole status to learn
/// the reason.
#[test]
fn every_ready_column_has_its_reason_under_wide() {
    let ready_reason = r#".status.conditions[?(@.type=="Ready")].reason"#;
    let mut missing = Vec::new();
    for crd in kopper::crds::all() {
        for version in &crd.spec.versions {
            let columns = version.additional_printer_columns.as_deref().unwrap_or_default();
            let shows_ready = columns.iter().any(|column| column.name == "Ready");
            let reason = columns.iter().find(|column| column.json_path == ready_reason);
            let wide_only =
                reason.is_some_and(|column| column.name == "Reason" && column.priority == Some(1));
            if shows_ready && !wide_only {
                missing.push(format!("{} {}", crd.spec.names.kind, version.name));
            }
        }
    }
    assert!(missing.is_empty(), "kinds with a Ready column but no Reason column under -o wide: {missing:?}");
}

/// kubesim (like kube-apiserver with these CRDs) refuses a selector with an unknown operator,
/// a malformed label key, or values that do not fit the operator, naming the field, instead of storing it for kopper to trip on.
#[tokio::test]
async fn a_wrong_selector_is_refused_when_applied_naming_the_field() {
    use kube::api::{Api, PostParams};
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let client = sim.client();
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    for crd in kopper::crds::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let rules: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("kopper.dev", "v1alpha1", "ReplicationRule"),
            "replicationrules",
        ),
    );
    let rule = |expression: serde_json::Value| -> kube::api::DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kopper.dev/v1alpha1", "kind": "ReplicationRule",
            "metadata": {"name": "wrong"},
            "spec": {"kind": "ConfigMap", "namespaces": ["default"],
                     "selector": {"matchExpressions": [expression]}},
        }))
        .unwrap()
    };
    for (expression, field) in [
        (serde_json::json!({"key": "team", "operator": "Maybe", "values": ["a"]}), "operator"),
        (serde_json::json!({"key": "has space", "operator": "Exists"}), "key"),
        (serde_json::json!({"key": "team", "operator": "In", "values": ["not ok!"]}), "values[0]"),
        // Values that do not fit the operator: the requirement as a whole is named.
        (serde_json::json!({"key": "team", "operator": "In"}), ""),
        (serde_json::json!({"key": "team", "operator": "NotIn", "values": []}), ""),
        (serde_json::json!({"key": "team", "operator": "Exists", "values": ["a"]}), ""),
    ] {
        let refused = rules.create(&PostParams::default(), &rule(expression)).await.unwrap_err();
        let kube::Error::Api(status) = refused else { panic!("{refused}") };
        assert_eq!(status.code, 422, "{status:?}");
        // Values that do not fit the operator fail the requirement's anyOf, which kube-openapi
        // reports with the requirement's path quoted.
        let field = if field.is_empty() {
            "\"spec.selector.matchExpressions[0]\" must validate at least one schema (anyOf)".to_owned()
        } else {
            format!("spec.selector.matchExpressions[0].{field}")
        };
        assert!(status.message.contains(&field), "{field}: {}", status.message);
    }
    let good = serde_json::json!({"key": "example.com/team", "operator": "In", "values": ["a-1"]});
    rules.create(&PostParams::default(), &rule(good)).await.unwrap();
    rules.delete("wrong", &Default::default()).await.unwrap();
    let exists = serde_json::json!({"key": "example.com/team", "operator": "DoesNotExist"});
    rules.create(&PostParams::default(), &rule(exists)).await.unwrap();
}
