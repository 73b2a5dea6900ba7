//! Custom resources against a structural OpenAPI v3 schema, as apiextensions-apiserver does it:
//! prune unknown fields, drop non-nullable nulls, apply defaults, then validate.
//!
//! Validation follows kube-openapi's `SchemaValidator` (the messages are its
//! `"<path> in body ..."` texts, converted to causes by `kubeOpenAPIResultToFieldErrors`),
//! followed by the `x-kubernetes-list-type` and `x-kubernetes-embedded-resource` checks.
//! kube-openapi names fields `spec.items[0].name` and map entries `spec.labels.key`.
//! `allOf`, `anyOf`, `oneOf` and `not` are checked as kube-openapi's schema-props validator
//! does (the failing branch with the fewest causes stands for "the best failure").
//! Not modelled: `format`, CEL `x-kubernetes-validations`.

use serde_json::{Map, Value, json};

use super::render::{go_float_v, go_quote};
use super::{Cause, FieldPath, names};

/// Fields the apiserver owns at the root of every object (and of embedded resources).
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes, defaults and validates a custom resource `obj` in place against `schema`
/// (a version's `schema.openAPIV3Schema`), returning the validation causes.
///
/// Metadata is not validated here: combine with [`super::validate_metadata`].
pub fn prune_default_validate(schema: &Value, obj: &mut Value) -> Vec<Cause> {
    prune(schema, obj);
    prune_non_nullable_nulls(obj, Some(schema));
    apply_defaults(obj, Some(schema));
    validate(schema, obj)
}

/// The three forms of `additionalProperties`.
enum Additional<'a> {
    Absent,
    Allowed(bool),
    Schema(&'a Value),
}

/// Read-only view of one schema node.
#[derive(Clone, Copy)]
struct Node<'a>(&'a Value);

impl<'a> Node<'a> {
    fn get(self, key: &str) -> Option<&'a Value> {
        self.0.get(key)
    }

    fn flag(self, key: &str) -> bool {
        self.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    fn ty(self) -> &'a str {
        self.get("type").and_then(Value::as_str).unwrap_or_default()
    }

    fn properties(self) -> Option<&'a Map<String, Value>> {
        self.get("properties").and_then(Value::as_object)
    }

    fn property(self, key: &str) -> Option<&'a Value> {
        self.properties().and_then(|p| p.get(key))
    }

    fn additional(self) -> Additional<'a> {
        match self.get("additionalProperties") {
            None | Some(Value::Null) => Additional::Absent,
            Some(Value::Bool(allowed)) => Additional::Allowed(*allowed),
            Some(schema) => Additional::Schema(schema),
        }
    }

    /// The schema that applies to `key` of an object: its property, else additionalProperties.
    fn field_schema(self, key: &str) -> Option<&'a Value> {
        self.property(key).or(match self.additional() {
            Additional::Schema(schema) => Some(schema),
            _ => None,
        })
    }

    fn items(self) -> Option<&'a Value> {
        self.get("items").filter(|items| items.is_object())
    }

    fn preserve_unknown(self) -> bool {
        self.flag("x-kubernetes-preserve-unknown-fields")
    }

    fn embedded(self) -> bool {
        self.flag("x-kubernetes-embedded-resource")
    }

    fn nullable(self) -> bool {
        self.flag("nullable")
    }

    fn default(self) -> Option<&'a Value> {
        self.get("default")
    }

    fn f64(self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    fn usize(self, key: &str) -> Option<usize> {
        self.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok())
    }

    /// The declared types, as kube-openapi sees them: int-or-string means integer or string.
    fn types(self) -> Vec<&'a str> {
        if self.flag("x-kubernetes-int-or-string") {
            return vec!["integer", "string"];
        }
        match self.ty() {
            "" => Vec::new(),
            ty => vec![ty],
        }
    }
}

/// Removes fields the schema does not know (pruning), except under
/// `x-kubernetes-preserve-unknown-fields` and for `apiVersion`/`kind`/`metadata` at the root
/// and in embedded resources.
pub fn prune(schema: &Value, obj: &mut Value) {
    prune_node(obj, Some(Node(schema)), true);
}

fn prune_node(value: &mut Value, schema: Option<Node>, is_root: bool) {
    // The root is always treated as an embedded resource, as `PruneWithOptions` does.
    let embedded = is_root || schema.is_some_and(Node::embedded);
    if let Some(node) = schema
        && node.preserve_unknown()
    {
        prune_known_only(value, node, embedded);
        return;
    }
    match value {
        Value::Object(map) => {
            let Some(node) = schema else {
                map.clear();
                return;
            };
            map.retain(|key, child| {
                (embedded && is_meta_field(key, child))
                    || node.property(key).is_some()
                    || !matches!(node.additional(), Additional::Absent)
            });
            for (key, child) in map.iter_mut() {
                if !(embedded && is_meta_field(key, child)) {
                    prune_node(child, node.field_schema(key).map(Node), false);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(Node::items).map(Node);
            for item in items {
                prune_node(item, item_schema, false);
            }
        }
        _ => {}
    }
}

/// `apiVersion` and `kind` strings and the `metadata` object, which the apiserver handles
/// itself in resources and embedded resources.
fn is_meta_field(key: &str, value: &Value) -> bool {
    match key {
        "apiVersion" | "kind" => value.is_string(),
        "metadata" => value.is_object(),
        _ => false,
    }
}

/// Under preserve-unknown-fields, unknown keys stay but known ones are still pruned inside.
fn prune_known_only(value: &mut Value, node: Node, embedded: bool) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&key.as_str()) {
                    continue;
                }
                if let Some(schema) = node.field_schema(key) {
                    prune_node(child, Some(Node(schema)), false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.items() {
                for item in items {
                    prune_known_only(item, Node(item_schema), Node(item_schema).embedded());
                }
            }
        }
        _ => {}
    }
}

/// `PruneNonNullableNullsWithoutDefaults`: `null` where the schema allows neither null nor a
/// default is dropped, as if the field were absent.
fn prune_non_nullable_nulls(value: &mut Value, schema: Option<&Value>) {
    match value {
        Value::Object(map) => {
            let node = schema.map(Node);
            map.retain(|key, child| {
                let field = node.and_then(|n| n.field_schema(key)).map(Node);
                !(child.is_null() && field.is_some_and(|f| !f.nullable() && f.default().is_none()))
            });
            for (key, child) in map.iter_mut() {
                prune_non_nullable_nulls(child, node.and_then(|n| n.field_schema(key)));
            }
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| Node(s).items());
            for item in items {
                prune_non_nullable_nulls(item, item_schema);
            }
        }
        _ => {}
    }
}

/// Fills absent fields (and non-nullable nulls) from the schema's `default`s, top-down, so a
/// defaulted object then gets its own fields defaulted.
pub fn apply_defaults(value: &mut Value, schema: Option<&Value>) {
    let Some(node) = schema.map(Node) else { return };
    match value {
        Value::Object(map) => {
            if let Some(properties) = node.properties() {
                for (key, property) in properties {
                    let Some(default) = Node(property).default() else { continue };
                    let missing = map.get(key).is_none_or(|v| v.is_null() && !Node(property).nullable());
                    if missing {
                        map.insert(key.clone(), default.clone());
                    }
                }
            }
            for (key, child) in map.iter_mut() {
                if let Some(property) = node.property(key) {
                    apply_defaults(child, Some(property));
                } else if let Additional::Schema(additional) = node.additional() {
                    fill_null_from_default(child, additional);
                    apply_defaults(child, Some(additional));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.items() {
                for item in items {
                    fill_null_from_default(item, item_schema);
                    apply_defaults(item, Some(item_schema));
                }
            }
        }
        _ => {}
    }
}

fn fill_null_from_default(value: &mut Value, schema: &Value) {
    let node = Node(schema);
    if value.is_null()
        && !node.nullable()
        && let Some(default) = node.default()
    {
        *value = default.clone();
    }
}

/// Validates an already pruned and defaulted object: kube-openapi's checks, then list types,
/// then embedded resources.
pub fn validate(schema: &Value, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    openapi_validate(obj, Node(schema), "", &mut causes);
    list_type_causes(obj, Node(schema), &FieldPath::root(), &mut causes);
    embedded_causes(obj, Node(schema), &FieldPath::root(), &mut causes);
    causes
}

/// `ValidateDefaults` for one schema node of a CRD: its `default` must survive pruning
/// unchanged and satisfy the node's own schema. `path` is the node's `default` field; causes
/// inside the default hang below it (`...default.port`), with kube-openapi's relative names
/// in their messages.
pub fn default_value_causes(node: &Value, default: &Value, path: &FieldPath) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut pruned = default.clone();
    prune_node(&mut pruned, Some(Node(node)), Node(node).embedded());
    if pruned != *default {
        causes.push(Cause::invalid(path, default, "must not have unknown fields"));
    }
    let mut inner = Vec::new();
    openapi_validate(default, Node(node), "", &mut inner);
    causes.extend(inner.into_iter().map(|cause| {
        let field = if cause.field.is_empty() { path.to_string() } else { format!("{path}.{}", cause.field) };
        Cause { field, ..cause }
    }));
    causes
}

/// kube-openapi's child naming: `a.b`, without a leading dot at the root.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// The JSON Schema type kube-openapi infers from a decoded value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn openapi_validate(value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        validate_null(node, path, causes);
        return;
    }
    validate_type(value, node, path, causes);
    match value {
        Value::String(s) => validate_string(s, value, node, path, causes),
        Value::Number(_) => validate_number(value, node, path, causes),
        Value::Array(items) => validate_array(items, node, path, causes),
        _ => {}
    }
    validate_enum(value, node, path, causes);
    if let Value::Object(map) = value {
        validate_object(map, node, path, causes);
    }
    validate_combinators(value, node, path, causes);
}

/// `allOf`, `anyOf`, `oneOf` and `not`: value validations a structural schema may add, each
/// branch applied to the same value.
fn validate_combinators(value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    let branches = |key: &str| node.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let outcomes = |key: &str| -> Vec<Vec<Cause>> {
        branches(key)
            .iter()
            .map(|branch| {
                let mut inner = Vec::new();
                openapi_validate(value, Node(branch), path, &mut inner);
                inner
            })
            .collect()
    };
    // kube-openapi makes these errors without a field path (`errors.New`), so they read
    // `<nil>: Invalid value: "": "<path>" must ...`, with the path quoted in the message.
    let composite = |what: &str| Cause::invalid("<nil>", &json!(""), &format!("{} {what}", go_quote(path)));
    let fewest = |outcomes: Vec<Vec<Cause>>| outcomes.into_iter().min_by_key(Vec::len).unwrap_or_default();

    let all_of = outcomes("allOf");
    let failed = all_of.iter().filter(|inner| !inner.is_empty()).count();
    if failed > 0 {
        let none = if failed == all_of.len() { ". None validated" } else { "" };
        causes.extend(all_of.into_iter().flatten());
        causes.push(composite(&format!("must validate all the schemas (allOf){none}")));
    }
    let any_of = outcomes("anyOf");
    if !any_of.is_empty() && any_of.iter().all(|inner| !inner.is_empty()) {
        causes.push(composite("must validate at least one schema (anyOf)"));
        causes.extend(fewest(any_of));
    }
    let one_of = outcomes("oneOf");
    let valid = one_of.iter().filter(|inner| inner.is_empty()).count();
    if !one_of.is_empty() && valid == 0 {
        causes.push(composite("must validate one and only one schema (oneOf). Found none valid"));
        causes.extend(fewest(one_of));
    } else if valid > 1 {
        causes.push(composite(&format!(
            "must validate one and only one schema (oneOf). Found {valid} valid alternatives"
        )));
    }
    if let Some(not) = node.get("not").filter(|not| not.is_object()) {
        let mut inner = Vec::new();
        openapi_validate(value, Node(not), path, &mut inner);
        if inner.is_empty() {
            causes.push(composite("must not validate the schema (not)"));
        }
    }
}

fn type_cause(path: &str, types: &[&str], actual: &str) -> Cause {
    let detail = format!("{path} in body must be of type {}: {}", types.join(","), go_quote(actual));
    Cause::type_invalid(path, &json!(actual), &detail)
}

fn validate_null(node: Node, path: &str, causes: &mut Vec<Cause>) {
    let types = node.types();
    if node.nullable() {
        return;
    }
    if !types.is_empty() && !types.contains(&"null") {
        causes.push(type_cause(path, &types, "null"));
    }
    validate_enum(&Value::Null, node, path, causes);
}

fn validate_type(value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    let types = node.types();
    if types.is_empty() {
        return;
    }
    let actual = json_type(value);
    let integral_float = actual == "number" && value.as_f64().is_some_and(|f| f.fract() == 0.0);
    let fits = types.contains(&actual)
        || (integral_float && types.contains(&"integer"))
        || (actual == "integer" && types.contains(&"number"));
    if !fits {
        causes.push(type_cause(path, &types, actual));
    }
}

/// kube-openapi's string validator stops at the first failure: maxLength, minLength, pattern.
fn validate_string(s: &str, value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    let length = s.chars().count();
    if let Some(max) = node.usize("maxLength")
        && length > max
    {
        causes.push(Cause::too_long(path, max));
        return;
    }
    if let Some(min) = node.usize("minLength")
        && length < min
    {
        causes.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body should be at least {min} chars long"),
        ));
        return;
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
        && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
    {
        causes.push(Cause::invalid(path, value, &format!("{path} in body should match '{pattern}'")));
    }
}

/// A bound as kube-openapi prints it: truncated to an integer for integer data (it compares
/// natively), `%v` of the float otherwise.
fn bound(value: &Value, limit: f64) -> (f64, String) {
    if value.is_i64() || value.is_u64() {
        let truncated = limit.trunc();
        (truncated, format!("{}", truncated as i64))
    } else {
        (limit, go_float_v(limit))
    }
}

fn validate_number(value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    let Some(x) = value.as_f64() else { return };
    if let Some(factor) = node.f64("multipleOf")
        && factor > 0.0
    {
        let (factor, shown) = bound(value, factor);
        if factor != 0.0 && (x / factor).fract() != 0.0 {
            causes.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body should be a multiple of {shown}"),
            ));
        }
    }
    if let Some(max) = node.f64("maximum") {
        let exclusive = node.flag("exclusiveMaximum");
        let (max, shown) = bound(value, max);
        if x > max || (exclusive && x == max) {
            let relation = if exclusive { "less than" } else { "less than or equal to" };
            causes.push(Cause::invalid(path, value, &format!("{path} in body should be {relation} {shown}")));
        }
    }
    if let Some(min) = node.f64("minimum") {
        let exclusive = node.flag("exclusiveMinimum");
        let (min, shown) = bound(value, min);
        if x < min || (exclusive && x == min) {
            let relation = if exclusive { "greater than" } else { "greater than or equal to" };
            causes.push(Cause::invalid(path, value, &format!("{path} in body should be {relation} {shown}")));
        }
    }
}

/// Items first, then minItems, maxItems and uniqueItems, as kube-openapi's slice validator.
fn validate_array(items: &[Value], node: Node, path: &str, causes: &mut Vec<Cause>) {
    if let Some(item_schema) = node.items() {
        for (i, item) in items.iter().enumerate() {
            openapi_validate(item, Node(item_schema), &format!("{path}[{i}]"), causes);
        }
    }
    if let Some(min) = node.usize("minItems")
        && items.len() < min
    {
        let detail = format!("{path} in body should have at least {min} items");
        causes.push(Cause::invalid(path, &json!(items.len()), &detail));
    }
    if let Some(max) = node.usize("maxItems")
        && items.len() > max
    {
        causes.push(Cause::too_many(path, items.len(), max));
    }
    if node.flag("uniqueItems") && has_duplicates(items) {
        causes.push(Cause::invalid(
            path,
            &json!(""),
            &format!("{path} in body shouldn't contain duplicates"),
        ));
    }
}

fn has_duplicates(items: &[Value]) -> bool {
    items.iter().enumerate().any(|(i, a)| items[..i].iter().any(|b| json_equal(a, b)))
}

/// Deep equality where numbers compare by value (`1` equals `1.0`), as Go's decoded JSON does.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn validate_enum(value: &Value, node: Node, path: &str, causes: &mut Vec<Cause>) {
    let Some(allowed) = node.get("enum").and_then(Value::as_array) else { return };
    if allowed.is_empty() || allowed.iter().any(|candidate| json_equal(candidate, value)) {
        return;
    }
    let rendered: Vec<String> = allowed
        .iter()
        .map(|v| v.as_str().map_or_else(|| super::render::go_json(v), str::to_string))
        .collect();
    let supported: Vec<&str> = rendered.iter().map(String::as_str).collect();
    causes.push(Cause::not_supported(path, value, &supported));
}

/// min/maxProperties (which end the object's validation), forbidden or additional
/// properties, declared properties, then required ones.
fn validate_object(map: &Map<String, Value>, node: Node, path: &str, causes: &mut Vec<Cause>) {
    if let Some(min) = node.usize("minProperties")
        && map.len() < min
    {
        let detail = format!("{path} in body should have at least {min} properties");
        causes.push(Cause::invalid(path, &json!(min), &detail));
        return;
    }
    if let Some(max) = node.usize("maxProperties")
        && map.len() > max
    {
        causes.push(Cause::too_many(path, max, max));
        return;
    }
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let is_declared = |key: &str| node.property(key).is_some();
    match node.additional() {
        Additional::Allowed(false) => {
            for key in keys.iter().filter(|key| !is_declared(key.as_str())) {
                let detail = format!("{}.{key} in body is a forbidden property", path);
                causes.push(Cause::invalid(path, &json!(key), &detail));
            }
        }
        Additional::Schema(additional) => {
            for key in keys.iter().filter(|key| !is_declared(key.as_str())) {
                openapi_validate(&map[*key], Node(additional), &join(path, key), causes);
            }
        }
        Additional::Absent | Additional::Allowed(true) => {}
    }
    if let Some(properties) = node.properties() {
        for key in &keys {
            if let Some(property) = properties.get(key.as_str()) {
                openapi_validate(&map[*key], Node(property), &join(path, key), causes);
            }
        }
    }
    let required = node.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for key in required.iter().filter_map(Value::as_str) {
        if !map.contains_key(key) {
            causes.push(Cause::required(join(path, key), ""));
        }
    }
}

/// Walks objects and arrays alongside the schema, with `field.Path` naming
/// (properties as children, map entries as keys), calling `visit` on every node.
fn walk<'a>(
    value: &'a Value,
    node: Node<'a>,
    path: &FieldPath,
    visit: &mut dyn FnMut(&'a Value, Node<'a>, &FieldPath),
) {
    visit(value, node, path);
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                if let Some(property) = node.property(key) {
                    walk(&map[key], Node(property), &path.child(key), visit);
                } else if let Additional::Schema(additional) = node.additional() {
                    walk(&map[key], Node(additional), &path.key(key), visit);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.items() {
                for (i, item) in items.iter().enumerate() {
                    walk(item, Node(item_schema), &path.index(i), visit);
                }
            }
        }
        _ => {}
    }
}

/// `x-kubernetes-list-type: set` and `map`: no two items with the same value or keys.
fn list_type_causes(value: &Value, node: Node, path: &FieldPath, causes: &mut Vec<Cause>) {
    walk(value, node, path, &mut |value, node, path| {
        let Value::Array(items) = value else { return };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => set_causes(items, path, causes),
            Some("map") => map_list_causes(items, node, path, causes),
            _ => {}
        }
    });
}

fn set_causes(items: &[Value], path: &FieldPath, causes: &mut Vec<Cause>) {
    for (i, item) in items.iter().enumerate() {
        if items[..i].iter().any(|earlier| json_equal(earlier, item)) {
            causes.push(Cause::duplicate(path.index(i), item));
        }
    }
}

fn map_list_causes(items: &[Value], node: Node, path: &FieldPath, causes: &mut Vec<Cause>) {
    let key_names: Vec<&str> = node
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let item_schema = node.items().map(Node);
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(object) = item.as_object() else {
            causes.push(Cause::invalid(
                path.index(i),
                item,
                "must be an object for an array of list-type map",
            ));
            continue;
        };
        let mut key = Map::new();
        for name in &key_names {
            let default = item_schema.and_then(|s| s.property(name)).and_then(|p| Node(p).default());
            if let Some(v) = object.get(*name).or(default) {
                key.insert((*name).to_string(), v.clone());
            }
        }
        let key = Value::Object(key);
        if seen.iter().any(|earlier| json_equal(earlier, &key)) {
            causes.push(Cause::duplicate(path.index(i), &key));
        } else {
            seen.push(key);
        }
    }
}

/// `x-kubernetes-embedded-resource` objects need a non-empty `apiVersion` and a `kind`
/// that is a DNS-1035 label apart from case.
fn embedded_causes(value: &Value, node: Node, path: &FieldPath, causes: &mut Vec<Cause>) {
    walk(value, node, path, &mut |value, node, path| {
        let (true, Value::Object(map)) = (node.embedded(), value) else { return };
        for field in ["apiVersion", "kind"] {
            match map.get(field) {
                None => causes.push(Cause::required(path.child(field), "must not be empty")),
                Some(Value::String(s)) if s.is_empty() => {
                    causes.push(Cause::invalid_str(path.child(field), s, "must not be empty"));
                }
                Some(Value::String(_)) => {}
                Some(other) => causes.push(Cause::invalid(path.child(field), other, "must be a string")),
            }
        }
        if let Some(kind) = map.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty()) {
            let problems = names::dns1035_label(&kind.to_lowercase());
            if !problems.is_empty() {
                let detail =
                    format!("may have mixed case, but should otherwise match: {}", problems.join(","));
                causes.push(Cause::invalid_str(path.child("kind"), kind, &detail));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    fn widget_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 10, "pattern": "^[a-z]+$"},
                        "kind": {"type": "string", "enum": ["ConfigMap", "Secret"]},
                        "replicas": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
                        "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1.5},
                        "enabled": {"type": "boolean", "default": true},
                        "note": {"type": "string", "nullable": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "x-kubernetes-list-type": "set"},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
                        },
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                        "options": {"type": "object", "default": {}, "properties": {"level": {"type": "string", "default": "info"}}}
                    }
                }
            }
        })
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
    }

    fn run(spec: Value) -> (Value, Vec<Cause>) {
        let mut obj = widget(spec);
        let causes = prune_default_validate(&widget_schema(), &mut obj);
        (obj, causes)
    }

    #[test]
    fn valid_object_has_no_causes() {
        let (_, causes) = run(json!({"name": "abc", "kind": "Secret", "port": "http", "tags": ["a", "b"]}));
        assert_eq!(causes, vec![]);
    }

    #[test]
    fn schema_default_fills_missing_field() {
        let (obj, causes) = run(json!({"name": "abc"}));
        assert!(causes.is_empty());
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["enabled"], true);
    }

    #[test]
    fn defaulted_object_gets_its_own_fields_defaulted() {
        let (obj, _) = run(json!({"name": "abc"}));
        assert_eq!(obj["spec"]["options"], json!({"level": "info"}));
    }

    #[test]
    fn explicit_value_is_not_overwritten_by_default() {
        let (obj, _) = run(json!({"name": "abc", "replicas": 3}));
        assert_eq!(obj["spec"]["replicas"], 3);
    }

    #[test]
    fn null_without_nullable_is_replaced_by_default_or_dropped() {
        let (obj, causes) = run(json!({"name": "abc", "replicas": null, "kind": null}));
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(obj["spec"]["replicas"], 1);
        assert!(obj["spec"].get("kind").is_none());
    }

    #[test]
    fn nullable_field_keeps_null() {
        let (obj, causes) = run(json!({"name": "abc", "note": null}));
        assert!(causes.is_empty());
        assert_eq!(obj["spec"]["note"], Value::Null);
    }

    #[test]
    fn unknown_fields_are_pruned_but_preserved_under_preserve_unknown() {
        let (obj, causes) = run(json!({
            "name": "abc",
            "bogus": 1,
            "extra": {"anything": {"deep": true}, "known": {"a": "x", "dropped": 1}},
            "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
        }));
        assert!(causes.is_empty(), "{causes:?}");
        assert!(obj["spec"].get("bogus").is_none());
        assert_eq!(obj["spec"]["extra"]["anything"], json!({"deep": true}));
        assert_eq!(obj["spec"]["extra"]["known"], json!({"a": "x"}));
        assert_eq!(obj["spec"]["template"]["data"], json!({"k": "v"}));
    }

    #[test]
    fn root_metadata_fields_are_never_pruned() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        let mut obj = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}, "status": {}});
        let causes = prune_default_validate(&schema, &mut obj);
        assert!(causes.is_empty());
        assert_eq!(
            obj,
            json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}})
        );
    }

    #[test]
    fn missing_required_field_is_reported() {
        let (_, causes) = run(json!({}));
        assert_eq!(messages(&causes), vec!["spec.name: Required value"]);
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }

    #[test]
    fn enum_violation_names_field_and_supported_values() {
        let (_, causes) = run(json!({"name": "abc", "kind": "Foo"}));
        assert_eq!(
            messages(&causes),
            vec![r#"spec.kind: Unsupported value: "Foo": supported values: "ConfigMap", "Secret""#]
        );
    }

    #[test]
    fn wrong_type_is_a_type_invalid_cause() {
        let (_, causes) = run(json!({"name": "abc", "replicas": "two"}));
        assert_eq!(
            messages(&causes),
            vec![
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
            ]
        );
        assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
    }

    #[test]
    fn integral_float_is_accepted_as_integer() {
        let (_, causes) = run(json!({"name": "abc", "replicas": 2.0}));
        assert!(causes.is_empty());
    }

    #[test]
    fn int_or_string_rejects_booleans() {
        let (_, causes) = run(json!({"name": "abc", "port": true}));
        assert_eq!(
            messages(&causes),
            vec![
                r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#
            ]
        );
    }

    #[test]
    fn bounds_are_checked_with_kube_openapi_messages() {
        let (_, causes) = run(json!({"name": "abc", "replicas": 9, "ratio": 1.5}));
        assert_eq!(
            messages(&causes),
            vec![
                "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5",
                "spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 5",
            ]
        );
        let (_, causes) = run(json!({"name": "abc", "replicas": 0}));
        assert_eq!(
            messages(&causes),
            vec![
                "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
            ]
        );
    }

    #[test]
    fn string_checks_stop_at_the_first_failure() {
        let (_, causes) = run(json!({"name": "ABCDEFGHIJKL"}));
        assert_eq!(messages(&causes), vec!["spec.name: Too long: may not be more than 10 bytes"]);
        let (_, causes) = run(json!({"name": ""}));
        assert_eq!(
            messages(&causes),
            vec![r#"spec.name: Invalid value: "": spec.name in body should be at least 1 chars long"#]
        );
        let (_, causes) = run(json!({"name": "Abc"}));
        assert_eq!(
            messages(&causes),
            vec![r#"spec.name: Invalid value: "Abc": spec.name in body should match '^[a-z]+$'"#]
        );
    }

    #[test]
    fn too_many_items_and_properties_are_too_many() {
        let (_, causes) = run(
            json!({"name": "abc", "tags": ["a", "b", "c", "d"], "labels": {"a": "1", "b": "2", "c": "3"}}),
        );
        assert_eq!(
            messages(&causes),
            vec![
                "spec.labels: Too many: 2: must have at most 2 items",
                "spec.tags: Too many: 4: must have at most 3 items"
            ]
        );
    }

    #[test]
    fn additional_properties_schema_validates_each_value() {
        let (_, causes) = run(json!({"name": "abc", "labels": {"a": 1}}));
        assert_eq!(
            messages(&causes),
            vec![
                r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#
            ]
        );
    }

    #[test]
    fn list_type_set_rejects_duplicates() {
        let (_, causes) = run(json!({"name": "abc", "tags": ["a", "b", "a"]}));
        assert_eq!(messages(&causes), vec![r#"spec.tags[2]: Duplicate value: "a""#]);
    }

    #[test]
    fn list_type_map_rejects_duplicate_keys() {
        let (_, causes) = run(
            json!({"name": "abc", "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]}),
        );
        assert_eq!(messages(&causes), vec![r#"spec.ports[1]: Duplicate value: {"name":"http"}"#]);
    }

    #[test]
    fn item_errors_are_indexed() {
        let (_, causes) = run(json!({"name": "abc", "ports": [{"name": "http", "port": "80"}]}));
        assert_eq!(
            messages(&causes),
            vec![
                r#"spec.ports[0].port: Invalid value: "string": spec.ports[0].port in body must be of type integer: "string""#
            ]
        );
    }

    #[test]
    fn embedded_resource_needs_api_version_and_kind() {
        let (_, causes) = run(json!({"name": "abc", "template": {"metadata": {"name": "x"}}}));
        assert_eq!(
            messages(&causes),
            vec![
                "spec.template.apiVersion: Required value: must not be empty",
                "spec.template.kind: Required value: must not be empty",
            ]
        );
    }

    #[test]
    fn forbidden_additional_property_is_named() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "additionalProperties": false}}});
        let mut obj = json!({"spec": {"x": 1}});
        let causes = prune_default_validate(&schema, &mut obj);
        assert_eq!(
            messages(&causes),
            vec![r#"spec: Invalid value: "x": spec.x in body is a forbidden property"#]
        );
    }

    #[test]
    fn unique_items_rejects_equal_numbers() {
        let schema = json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}});
        let mut obj = json!({"xs": [1, 1.0]});
        let causes = prune_default_validate(&schema, &mut obj);
        assert_eq!(
            messages(&causes),
            vec![r#"xs: Invalid value: "": xs in body shouldn't contain duplicates"#]
        );
    }

    #[test]
    fn any_of_needs_one_branch_and_reports_the_closest_one() {
        // A label selector requirement: values for In/NotIn, none for Exists/DoesNotExist.
        let schema = json!({"type": "object", "properties": {"req": {
            "type": "object",
            "properties": {"operator": {"type": "string"}, "values": {"type": "array", "items": {"type": "string"}}},
            "anyOf": [
                {"properties": {"operator": {"enum": ["In", "NotIn"]}, "values": {"minItems": 1}}, "required": ["values"]},
                {"properties": {"operator": {"enum": ["Exists", "DoesNotExist"]}, "values": {"maxItems": 0}}}
            ]
        }}});
        for valid in [json!({"operator": "In", "values": ["a"]}), json!({"operator": "Exists"})] {
            let mut obj = json!({"req": valid});
            assert!(prune_default_validate(&schema, &mut obj).is_empty(), "{obj}");
        }
        let mut obj = json!({"req": {"operator": "In"}});
        assert_eq!(
            messages(&prune_default_validate(&schema, &mut obj)),
            vec![
                r#"<nil>: Invalid value: "": "req" must validate at least one schema (anyOf)"#,
                "req.values: Required value",
            ]
        );
        let mut obj = json!({"req": {"operator": "Exists", "values": ["a"]}});
        let causes = messages(&prune_default_validate(&schema, &mut obj));
        assert_eq!(causes[0], r#"<nil>: Invalid value: "": "req" must validate at least one schema (anyOf)"#);
    }

    #[test]
    fn not_refuses_what_its_schema_accepts() {
        let schema = json!({"type": "object", "not": {"required": ["a", "b"]}, "properties": {
            "a": {"type": "string"}, "b": {"type": "string"}
        }});
        let mut both = json!({"a": "x", "b": "y"});
        assert_eq!(
            messages(&prune_default_validate(&schema, &mut both)),
            vec![r#"<nil>: Invalid value: "": "" must not validate the schema (not)"#]
        );
        let mut one = json!({"a": "x"});
        assert!(prune_default_validate(&schema, &mut one).is_empty());
    }

    #[test]
    fn min_items_and_min_properties_are_invalid_values() {
        let schema = json!({"type": "object", "properties": {
            "xs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "m": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}
        }});
        let mut obj = json!({"xs": [], "m": {}});
        let causes = prune_default_validate(&schema, &mut obj);
        assert_eq!(
            messages(&causes),
            vec![
                "m: Invalid value: 1: m in body should have at least 1 properties",
                "xs: Invalid value: 0: xs in body should have at least 1 items",
            ]
        );
    }

    #[test]
    fn large_float_bounds_print_like_go() {
        let schema = json!({"type": "object", "properties": {"x": {"type": "number", "maximum": 1000000}}});
        let mut obj = json!({"x": 2000000.5});
        let causes = prune_default_validate(&schema, &mut obj);
        assert_eq!(
            messages(&causes),
            vec!["x: Invalid value: 2.0000005e+06: x in body should be less than or equal to 1e+06"]
        );
    }

    #[test]
    fn multiple_of_is_checked() {
        let schema = json!({"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 5}}});
        let mut obj = json!({"x": 7});
        let causes = prune_default_validate(&schema, &mut obj);
        assert_eq!(messages(&causes), vec!["x: Invalid value: 7: x in body should be a multiple of 5"]);
    }

    #[test]
    fn default_of_the_wrong_type_is_reported_below_default() {
        let node = json!({"type": "integer", "default": "one"});
        let path = FieldPath::new("spec").child("versions").index(0).child("default");
        assert_eq!(
            messages(&default_value_causes(&node, &node["default"], &path)),
            vec![
                r#"spec.versions[0].default: Invalid value: "string":  in body must be of type integer: "string""#
            ]
        );
    }

    #[test]
    fn default_with_unknown_fields_is_rejected() {
        let node =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}});
        let causes = default_value_causes(&node, &node["default"], &FieldPath::new("d"));
        assert_eq!(
            messages(&causes),
            vec![r#"d: Invalid value: {"a":"x","b":1}: must not have unknown fields"#]
        );
    }

    #[test]
    fn default_field_errors_name_the_inner_field() {
        let node = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "default": {"n": 0}});
        let causes = default_value_causes(&node, &node["default"], &FieldPath::new("d"));
        assert_eq!(
            messages(&causes),
            vec!["d.n: Invalid value: 0: n in body should be greater than or equal to 1"]
        );
    }
}
