//! A Markdown reference of every field of kopper's CRDs, generated from their schemas (so from
//! the Rust types' doc comments): `kopper crds --reference` prints it, `docs/crd-reference.md`
//! holds the committed copy, checked by `tests/e2e/crds.rs`.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The reference of `crds`, one section per kind.
pub fn render(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# CRD reference\n\nEvery field of kopper's custom resources, generated from their schemas \
         (`kopper crds --reference`; do not edit by hand).\n",
    );
    for crd in crds {
        let names = &crd.spec.names;
        for version in &crd.spec.versions {
            let _ = write!(
                out,
                "\n## {}\n\n`{}/{}`, {} (short name: {}).\n",
                names.kind,
                crd.spec.group,
                version.name,
                if crd.spec.scope == "Namespaced" { "namespaced" } else { "cluster-scoped" },
                names.short_names.as_ref().map(|s| s.join(", ")).unwrap_or_else(|| "none".into()),
            );
            let Some(schema) = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()) else {
                continue;
            };
            let schema = serde_json::to_value(schema).unwrap_or_default();
            if let Some(description) = schema["description"].as_str() {
                let _ = writeln!(out, "\n{}", one_paragraph(description));
            }
            out.push_str("\n| field | type | required | description |\n|---|---|---|---|\n");
            for part in ["spec", "status"] {
                let required = schema["required"].as_array().is_some_and(|r| r.iter().any(|n| n == part));
                walk(&mut out, part, &schema["properties"][part], required);
            }
        }
    }
    out
}

/// One row for `schema` at `path`, then rows for what it holds.
fn walk(out: &mut String, path: &str, schema: &Value, required: bool) {
    if schema.is_null() {
        return;
    }
    let description = schema["description"].as_str().map(one_paragraph).unwrap_or_default();
    let _ = writeln!(
        out,
        "| `{path}` | {} | {} | {} |",
        type_of(schema),
        if required { "yes" } else { "" },
        description.replace('|', "\\|")
    );
    let required_here: Vec<&str> =
        schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, child) in properties {
            walk(out, &format!("{path}.{name}"), child, required_here.contains(&name.as_str()));
        }
    }
    let items = &schema["items"];
    if let Some(properties) = items["properties"].as_object() {
        let required_items: Vec<&str> =
            items["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for (name, child) in properties {
            walk(out, &format!("{path}[].{name}"), child, required_items.contains(&name.as_str()));
        }
    }
}

fn type_of(schema: &Value) -> String {
    if schema["x-kubernetes-int-or-string"] == true {
        return "integer or string".into();
    }
    let additional = &schema["additionalProperties"];
    let base = match schema["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&schema["items"])),
        Some("object") if additional.is_object() => format!("map of {}", type_of(additional)),
        Some(kind) => kind.to_owned(),
        None => "object".to_owned(),
    };
    let typed = match schema["enum"].as_array() {
        Some(values) => {
            let values: Vec<String> =
                values.iter().map(|v| format!("`{}`", v.as_str().unwrap_or_default())).collect();
            format!("{base}: {}", values.join(", "))
        }
        None => base,
    };
    format!("{typed}{}", bound_of(schema))
}

/// The bound the API server puts on a field's size, as `kubectl explain` users need it.
fn bound_of(schema: &Value) -> String {
    let bounds = [("maxLength", "characters"), ("maxItems", "items"), ("maxProperties", "entries")];
    bounds
        .iter()
        .filter_map(|(keyword, unit)| schema[keyword].as_u64().map(|max| format!(" (at most {max} {unit})")))
        .collect()
}

/// A description on one line: the schema keeps the doc comment's line breaks.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_field_of_every_kind_has_a_row_with_its_description() {
        let reference = render(&crate::crds::all());
        for kind in ["NamespaceAccess", "ConfigMapSync", "ReplicationRule", "SecretSync"] {
            assert!(reference.contains(&format!("## {kind}")), "{kind}");
        }
        assert!(
            reference.contains(
                "| `spec.configMapName` | string (at most 253 characters) | yes | Name of the ConfigMap to copy"
            ),
            "{reference}"
        );
        assert!(reference.contains("| `spec.kind` | string (at most 63 characters) | yes |"), "{reference}");
        assert!(
            reference
                .contains("`spec.credentialTypes` | array of string: `kubernetes.io/service-account-token`")
        );
        assert!(
            reference
                .contains("| `spec.tags` | map of string (at most 256 characters) (at most 40 entries) |"),
            "{reference}"
        );
    }
}
