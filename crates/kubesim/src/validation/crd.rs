//! CustomResourceDefinition validation (apiextensions.k8s.io/v1), after
//! `apiextensions/validation` and the structural-schema rules of `apiserver/schema`.
//!
//! Complex bad values (the `versions` list) are rendered as the JSON the client sent; Go
//! prints its internal structs there, which no client can rely on.

use serde_json::{Map, Value, json};

use super::objects::{NameRule, validate_metadata};
use super::{Cause, FieldPath, names};

const OPENAPI_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];
const FIELD_IMMUTABLE: &str = "field is immutable";

fn str_at<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(value, |v, key| v.get(*key)).and_then(Value::as_str).unwrap_or_default()
}

/// v1 defaulting: `singular` is the lowercased kind, `listKind` is `<kind>List`, and the
/// conversion strategy is `None`.
pub fn default_crd(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if !spec.get("conversion").is_some_and(Value::is_object) {
        spec.insert("conversion".to_string(), json!({"strategy": "None"}));
    }
    let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) else { return };
    let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind.is_empty() {
        return;
    }
    if is_blank(names, "singular") {
        names.insert("singular".to_string(), json!(kind.to_lowercase()));
    }
    if is_blank(names, "listKind") {
        names.insert("listKind".to_string(), json!(format!("{kind}List")));
    }
}

fn is_blank(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).and_then(Value::as_str).unwrap_or_default().is_empty()
}

/// `ValidateCustomResourceDefinition` on create and update: metadata (the name must be
/// `<plural>.<group>`), group, scope, versions and their schemas, names.
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = metadata_causes(crd);
    let spec = FieldPath::new("spec");
    causes.extend(group_causes(crd, &spec));
    causes.extend(scope_causes(crd, &spec));
    causes.extend(version_causes(crd, &spec));
    causes.extend(required_name_causes(crd, &spec));
    causes.extend(names_causes(crd.get("spec").and_then(|s| s.get("names")), &spec.child("names")));
    causes
}

/// `ValidateCustomResourceDefinitionSpecUpdate` for an established CRD: group, plural,
/// scope and kind never change.
pub fn validate_crd_update(old: &Value, new: &Value) -> Vec<Cause> {
    let spec = FieldPath::new("spec");
    let fields: [(&[&str], FieldPath); 4] = [
        (&["spec", "scope"], spec.child("scope")),
        (&["spec", "names", "kind"], spec.child("names").child("kind")),
        (&["spec", "group"], spec.child("group")),
        (&["spec", "names", "plural"], spec.child("names").child("plural")),
    ];
    fields
        .into_iter()
        .filter(|(path, _)| str_at(old, path) != str_at(new, path))
        .map(|(path, field)| Cause::invalid_str(field, str_at(new, path), FIELD_IMMUTABLE))
        .collect()
}

fn metadata_causes(crd: &Value) -> Vec<Cause> {
    let mut causes = validate_metadata(crd, NameRule::Subdomain, false);
    let name = str_at(crd, &["metadata", "name"]);
    let required =
        format!("{}.{}", str_at(crd, &["spec", "names", "plural"]), str_at(crd, &["spec", "group"]));
    if !name.is_empty() && name != required {
        let is_name_cause = |c: &Cause| c.field == "metadata.name" || c.field == "metadata.generateName";
        let position = causes.iter().take_while(|c| is_name_cause(c)).count();
        causes.insert(
            position,
            Cause::invalid_str("metadata.name", name, r#"must be spec.names.plural+"."+spec.group"#),
        );
    }
    causes
}

fn group_causes(crd: &Value, spec: &FieldPath) -> Vec<Cause> {
    let group = str_at(crd, &["spec", "group"]);
    let path = spec.child("group");
    if group.is_empty() {
        return vec![Cause::required(path, "")];
    }
    let problems = names::dns1123_subdomain(group);
    if !problems.is_empty() {
        return vec![Cause::invalid_str(path, group, &problems.join(","))];
    }
    if !group.contains('.') {
        return vec![Cause::invalid_str(path, group, "should be a domain with at least one dot")];
    }
    Vec::new()
}

fn scope_causes(crd: &Value, spec: &FieldPath) -> Vec<Cause> {
    match str_at(crd, &["spec", "scope"]) {
        "" => vec![Cause::required(spec.child("scope"), "")],
        "Cluster" | "Namespaced" => Vec::new(),
        other => vec![Cause::not_supported(spec.child("scope"), &json!(other), &["Cluster", "Namespaced"])],
    }
}

fn version_causes(crd: &Value, spec: &FieldPath) -> Vec<Cause> {
    let versions_value = crd.get("spec").and_then(|s| s.get("versions")).cloned().unwrap_or(Value::Null);
    let versions = versions_value.as_array().map(Vec::as_slice).unwrap_or_default();
    let path = spec.child("versions");
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let name = str_at(version, &["name"]);
        unique &= !seen.contains(&name);
        seen.push(name);
        let problems = names::dns1035_label(name);
        if !problems.is_empty() {
            causes.push(Cause::invalid_str(path.index(i).child("name"), name, &problems.join(",")));
        }
        let schema_path = path.index(i).child("schema").child("openAPIV3Schema");
        match version.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
            Some(schema) if schema.is_object() => causes.extend(validate_schema(schema, &schema_path)),
            _ => causes.push(Cause::required(schema_path, "schemas are required")),
        }
    }
    if !unique {
        causes.push(Cause::invalid(&path, &versions_value, "must contain unique version names"));
    }
    let storage = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if storage != 1 {
        causes.push(Cause::invalid(
            &path,
            &versions_value,
            "must have exactly one version marked as storage version",
        ));
    }
    causes
}

fn required_name_causes(crd: &Value, spec: &FieldPath) -> Vec<Cause> {
    ["plural", "singular", "kind", "listKind"]
        .into_iter()
        .filter(|field| str_at(crd, &["spec", "names", field]).is_empty())
        .map(|field| Cause::required(spec.child("names").child(field), ""))
        .collect()
}

/// `ValidateCustomResourceDefinitionNames`.
fn names_causes(names_value: Option<&Value>, path: &FieldPath) -> Vec<Cause> {
    let Some(names_value) = names_value else { return Vec::new() };
    let get = |key: &str| str_at(names_value, &[key]);
    let mut causes = Vec::new();
    for field in ["plural", "singular"] {
        let value = get(field);
        let problems = names::dns1035_label(value);
        if !value.is_empty() && !problems.is_empty() {
            causes.push(Cause::invalid_str(path.child(field), value, &problems.join(",")));
        }
    }
    for field in ["kind", "listKind"] {
        let value = get(field);
        let problems = names::dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !problems.is_empty() {
            let detail = format!("may have mixed case, but should otherwise match: {}", problems.join(","));
            causes.push(Cause::invalid_str(path.child(field), value, &detail));
        }
    }
    for list in ["shortNames", "categories"] {
        let items = names_value.get(list).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, item) in items.iter().enumerate() {
            let value = item.as_str().unwrap_or_default();
            let problems = names::dns1035_label(value);
            if !problems.is_empty() {
                causes.push(Cause::invalid_str(path.child(list).index(i), value, &problems.join(",")));
            }
        }
    }
    if !get("kind").is_empty() && get("kind") == get("listKind") {
        causes.push(Cause::invalid_str(
            path.child("listKind"),
            get("listKind"),
            "kind and listKind may not be the same",
        ));
    }
    causes
}

/// Where a schema node sits, which decides the structural rules for its `type`.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

/// A version's schema: the OpenAPI restrictions in walk order, then the structural
/// violations sorted by their text, as `ValidateStructural` sorts them.
fn validate_schema(schema: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut openapi = Vec::new();
    let mut structural = Vec::new();
    walk_schema(schema, path, Level::Root, &mut openapi, &mut structural);
    structural.sort_by_key(ToString::to_string);
    openapi.extend(structural);
    if openapi.is_empty() {
        // Like kube-apiserver, defaults are only checked once the schema itself is sound.
        walk_defaults(schema, path, true, &mut openapi);
    }
    openapi
}

/// Every `default` below the root, except inside the root's `metadata`, validated against
/// the node that declares it.
fn walk_defaults(node: &Value, path: &FieldPath, is_root: bool, causes: &mut Vec<Cause>) {
    if let Some(default) = node.get("default").filter(|_| !is_root) {
        causes.extend(super::schema::default_value_causes(node, default, &path.child("default")));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let mut keys: Vec<&String> = properties.keys().collect();
        keys.sort();
        for key in keys.into_iter().filter(|key| !(is_root && key.as_str() == "metadata")) {
            walk_defaults(&properties[key], &path.child("properties").key(key), false, causes);
        }
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        walk_defaults(additional, &path.child("additionalProperties"), false, causes);
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        walk_defaults(items, &path.child("items"), false, causes);
    }
}

fn walk_schema(
    node: &Value,
    path: &FieldPath,
    level: Level,
    openapi: &mut Vec<Cause>,
    structural: &mut Vec<Cause>,
) {
    openapi.extend(openapi_restrictions(node, path));
    structural.extend(structural_invariants(node, path, level));
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let mut keys: Vec<&String> = properties.keys().collect();
        keys.sort();
        for key in keys {
            walk_schema(
                &properties[key],
                &path.child("properties").key(key),
                Level::Field,
                openapi,
                structural,
            );
        }
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        walk_schema(additional, &path.child("additionalProperties"), Level::Field, openapi, structural);
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        walk_schema(items, &path.child("items"), Level::Item, openapi, structural);
    }
}

/// `specStandardValidatorV3` and `ValidateCustomResourceDefinitionOpenAPISchema`: keywords
/// CRDs do not support, and combinations they forbid.
fn openapi_restrictions(node: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let unsupported = [
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ];
    for (key, detail) in unsupported {
        if node.get(key).is_some_and(|v| !v.is_null()) {
            causes.push(Cause::forbidden(path.child(key), detail));
        }
    }
    match node.get("type").and_then(Value::as_str).unwrap_or_default() {
        "" => {}
        "null" => causes.push(Cause::forbidden(
            path.child("type"),
            "type cannot be set to null, use nullable as an alternative",
        )),
        ty if !OPENAPI_TYPES.contains(&ty) => {
            causes.push(Cause::not_supported(path.child("type"), &json!(ty), &OPENAPI_TYPES));
        }
        _ => {}
    }
    if node.get("items").is_some_and(Value::is_array) {
        causes.push(Cause::forbidden(path.child("items"), "items must be a schema object and not an array"));
    }
    if node.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
        causes.push(Cause::forbidden(
            path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let has_properties = node.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    let restricts_additional =
        matches!(node.get("additionalProperties"), Some(Value::Bool(false)) | Some(Value::Object(_)));
    if has_properties && restricts_additional {
        causes.push(Cause::forbidden(
            path.child("additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    causes
}

/// `validateStructuralInvariants` for one node.
fn structural_invariants(node: &Value, path: &FieldPath, level: Level) -> Vec<Cause> {
    let flag = |key: &str| node.get(key).and_then(Value::as_bool).unwrap_or(false);
    let ty = str_at(node, &["type"]);
    let (embedded, int_or_string, preserve) = (
        flag("x-kubernetes-embedded-resource"),
        flag("x-kubernetes-int-or-string"),
        flag("x-kubernetes-preserve-unknown-fields"),
    );
    let has_additional = node.get("additionalProperties").is_some_and(|a| !a.is_null());
    let mut causes = Vec::new();
    if ty == "array" && node.get("items").is_none() {
        causes.push(Cause::required(path.child("items"), "must be specified"));
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
        && let Err(err) = regex::Regex::new(pattern)
    {
        // Go prints its regexp parser's error; the Rust parser's wording differs.
        let detail = format!("must be a valid regular expression, but isn't: {err}");
        causes.push(Cause::invalid_str(path.child("pattern"), pattern, &detail));
    }
    if has_additional && level == Level::Root {
        causes.push(Cause::forbidden(path.child("additionalProperties"), "must not be used at the root"));
    }
    if int_or_string && preserve {
        causes.push(Cause::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            &json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        causes.push(Cause::invalid(
            path.child("x-kubernetes-embedded-resource"),
            &json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    causes.extend(type_invariants(ty, path, level, embedded, int_or_string, preserve));
    if embedded && has_additional {
        causes.push(Cause::forbidden(
            path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    causes.extend(meta_field_invariants(node, path, level == Level::Root || embedded, level));
    let has_properties = node.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    if embedded && !preserve && !has_properties {
        causes.push(Cause::required(
            path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    causes
}

fn type_invariants(
    ty: &str,
    path: &FieldPath,
    level: Level,
    embedded: bool,
    int_or_string: bool,
    preserve: bool,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    if embedded && ty != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        causes.push(if ty.is_empty() {
            Cause::required(path.child("type"), detail)
        } else {
            Cause::invalid_str(path.child("type"), ty, detail)
        });
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        causes.push(Cause::required(path.child("type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        causes.push(Cause::invalid_str(path.child("type"), ty, "must be object at the root"));
    }
    causes
}

/// `kind`/`apiVersion` must be strings and `metadata` an object in resources; at the root,
/// `metadata` may only restrict `name` and `generateName`.
fn meta_field_invariants(node: &Value, path: &FieldPath, check_metadata: bool, level: Level) -> Vec<Cause> {
    let Some(properties) = node.get("properties").and_then(Value::as_object) else { return Vec::new() };
    let mut causes = Vec::new();
    for field in ["kind", "apiVersion"] {
        if let Some(property) = properties.get(field).filter(|_| check_metadata) {
            let ty = str_at(property, &["type"]);
            if ty != "string" {
                causes.push(Cause::invalid_str(
                    path.child("properties").key(field).child("type"),
                    ty,
                    "must be string",
                ));
            }
        }
    }
    let Some(metadata) = properties.get("metadata") else { return causes };
    let metadata_path = path.child("properties").key("metadata");
    let ty = str_at(metadata, &["type"]);
    if check_metadata && ty != "object" {
        causes.push(Cause::invalid_str(metadata_path.child("type"), ty, "must be object"));
    }
    if level == Level::Root && !root_metadata_is_allowed(metadata) {
        causes.push(Cause::forbidden(
            metadata_path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
    causes
}

fn root_metadata_is_allowed(metadata: &Value) -> bool {
    let Some(map) = metadata.as_object() else { return true };
    map.iter().all(|(key, value)| match key.as_str() {
        "type" | "default" => true,
        "properties" => {
            value.as_object().is_none_or(|props| props.keys().all(|k| k == "name" || k == "generateName"))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wg"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "port": {"x-kubernetes-int-or-string": true}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                        }
                    }}
                }]
            }
        })
    }

    #[test]
    fn valid_crd_has_no_causes() {
        assert_eq!(validate_crd(&crd()), vec![]);
    }

    #[test]
    fn crd_name_must_be_plural_dot_group() {
        let mut obj = crd();
        obj["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#
            ]
        );
    }

    #[test]
    fn group_needs_a_dot() {
        let mut obj = crd();
        obj["spec"]["group"] = json!("example");
        obj["metadata"]["name"] = json!("widgets.example");
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#]
        );
    }

    #[test]
    fn unknown_scope_is_not_supported() {
        let mut obj = crd();
        obj["spec"]["scope"] = json!("Global");
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#]
        );
    }

    #[test]
    fn exactly_one_storage_version_is_required() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["storage"] = json!(false);
        let causes = validate_crd(&obj);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.versions");
        assert!(causes[0].message.ends_with(": must have exactly one version marked as storage version"));
    }

    #[test]
    fn duplicate_version_names_are_rejected() {
        let mut obj = crd();
        let mut second = obj["spec"]["versions"][0].clone();
        second["storage"] = json!(false);
        obj["spec"]["versions"].as_array_mut().unwrap().push(second);
        let causes = validate_crd(&obj);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].message.ends_with(": must contain unique version names"));
    }

    #[test]
    fn version_without_schema_is_rejected() {
        let mut obj = crd();
        obj["spec"]["versions"][0].as_object_mut().unwrap().remove("schema");
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec!["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
        );
    }

    #[test]
    fn schema_node_without_type_is_not_structural() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] =
            json!({"minimum": 1});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields"
            ]
        );
    }

    #[test]
    fn array_without_items_and_bad_type_are_reported() {
        let mut obj = crd();
        let props =
            &mut obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        props["list"] = json!({"type": "array"});
        props["odd"] = json!({"type": "text"});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                r#"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[odd].type: Unsupported value: "text": supported values: "array", "boolean", "integer", "number", "object", "string""#,
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[list].items: Required value: must be specified",
            ]
        );
    }

    #[test]
    fn unsupported_keywords_are_forbidden() {
        let mut obj = crd();
        let spec = &mut obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        spec["$ref"] = json!("#/definitions/x");
        spec["properties"]["tags"] =
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].$ref: Forbidden: $ref is not supported",
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ]
        );
    }

    #[test]
    fn root_must_be_an_object_without_additional_properties() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"] =
            json!({"type": "string", "additionalProperties": {"type": "string"}});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.additionalProperties: Forbidden: must not be used at the root",
                r#"spec.versions[0].schema.openAPIV3Schema.type: Invalid value: "string": must be object at the root"#,
            ]
        );
    }

    #[test]
    fn root_metadata_may_only_restrict_name() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
            json!({"type": "object", "properties": {"labels": {"type": "object"}}});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            ]
        );
    }

    #[test]
    fn missing_names_are_required_and_kind_may_be_mixed_case() {
        let mut obj = crd();
        obj["spec"]["names"] = json!({"plural": "widgets", "kind": "Wid_get"});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.names.singular: Required value",
                "spec.names.listKind: Required value",
                "spec.names.kind: Invalid value: \"Wid_get\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            ]
        );
    }

    #[test]
    fn defaulting_fills_singular_and_list_kind() {
        let mut obj = crd();
        obj["spec"]["names"] = json!({"plural": "widgets", "kind": "Widget"});
        default_crd(&mut obj);
        assert_eq!(obj["spec"]["names"]["singular"], "widget");
        assert_eq!(obj["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(obj["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(validate_crd(&obj), vec![]);
    }

    #[test]
    fn bad_short_name_is_indexed() {
        let mut obj = crd();
        obj["spec"]["names"]["shortNames"] = json!(["ok", "Not_OK"]);
        let causes = validate_crd(&obj);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.names.shortNames[1]");
    }

    #[test]
    fn group_plural_scope_and_kind_are_immutable() {
        let old = crd();
        let mut new = crd();
        new["spec"]["scope"] = json!("Cluster");
        new["spec"]["names"]["kind"] = json!("Gadget");
        assert_eq!(
            messages(&validate_crd_update(&old, &new)),
            vec![
                r#"spec.scope: Invalid value: "Cluster": field is immutable"#,
                r#"spec.names.kind: Invalid value: "Gadget": field is immutable"#,
            ]
        );
    }

    #[test]
    fn embedded_resource_schema_must_be_an_object() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tpl"] =
            json!({"x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tpl].type: Required value: must be object if x-kubernetes-embedded-resource is true"
            ]
        );
    }

    #[test]
    fn invalid_default_is_rejected_at_its_node() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] =
            json!({"type": "integer", "default": "big"});
        assert_eq!(
            messages(&validate_crd(&obj)),
            vec![
                r#"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].default: Invalid value: "string":  in body must be of type integer: "string""#
            ]
        );
    }

    #[test]
    fn invalid_pattern_is_rejected() {
        let mut obj = crd();
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["code"] =
            json!({"type": "string", "pattern": "([a-z"});
        let causes = validate_crd(&obj);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[code].pattern"
        );
        assert!(
            causes[0]
                .message
                .starts_with(r#"Invalid value: "([a-z": must be a valid regular expression, but isn't: "#)
        );
    }
}
