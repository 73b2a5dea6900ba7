//! Errors kube-apiserver raises while *decoding* a built-in object, before validation.
//!
//! These are 400 BadRequest, not 422 Invalid: Go's `encoding/json` fails to unmarshal the
//! body into the typed struct (a string where an `int32` belongs, bad base64 in a `[]byte`)
//! and the apiserver answers `<Kind> in version "<v>" cannot be handled as a <Kind>: <err>`.
//! Only the fields kubesim's clients plausibly get wrong are checked.

use base64::Engine as _;
use serde_json::{Map, Value};

/// Go's `base64.StdEncoding` alphabet lookup: `None` for bytes outside the alphabet.
fn decode_symbol(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// The offset Go's `base64.StdEncoding.Decode` reports in `illegal base64 data at input byte N`,
/// or `None` when Go accepts the input. Mirrors `decodeQuantum`, including its tolerance of
/// `\r` and `\n` anywhere in the input.
pub(crate) fn go_base64_error_offset(input: &str) -> Option<usize> {
    let src = input.as_bytes();
    let mut si = 0;
    loop {
        match decode_quantum(src, si) {
            Quantum::Done => return None,
            Quantum::Corrupt(offset) => return Some(offset),
            Quantum::Next(next) => si = next,
        }
    }
}

enum Quantum {
    Done,
    Corrupt(usize),
    Next(usize),
}

fn skip_newlines(src: &[u8], mut si: usize) -> usize {
    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
        si += 1;
    }
    si
}

fn decode_quantum(src: &[u8], mut si: usize) -> Quantum {
    let mut j = 0;
    while j < 4 {
        if si == src.len() {
            // Input ended inside a quantum: Go requires padding, so only j == 0 is clean.
            return if j == 0 { Quantum::Done } else { Quantum::Corrupt(si - j) };
        }
        let byte = src[si];
        si += 1;
        if decode_symbol(byte).is_some() {
            j += 1;
            continue;
        }
        if byte == b'\n' || byte == b'\r' {
            continue;
        }
        if byte != b'=' {
            return Quantum::Corrupt(si - 1);
        }
        return padding(src, si, j);
    }
    Quantum::Next(si)
}

/// Handles `=` seen at quantum position `j`; `si` is just past it.
fn padding(src: &[u8], mut si: usize, j: usize) -> Quantum {
    match j {
        0 | 1 => return Quantum::Corrupt(si - 1),
        2 => {
            si = skip_newlines(src, si);
            if si == src.len() {
                return Quantum::Corrupt(src.len());
            }
            if src[si] != b'=' {
                return Quantum::Corrupt(si - 1);
            }
            si += 1;
        }
        _ => {}
    }
    si = skip_newlines(src, si);
    if si < src.len() { Quantum::Corrupt(si) } else { Quantum::Done }
}

/// The byte length Go gets from decoding `input`, assuming it is valid.
pub(crate) fn decoded_len(input: &str) -> usize {
    let cleaned: String = input.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    base64::engine::general_purpose::STANDARD.decode(cleaned).map(|bytes| bytes.len()).unwrap_or(0)
}

/// `Kind in version "v" cannot be handled as a Kind: <err>`, the text of the 400.
fn cannot_handle(obj: &Value, kind: &str, err: &str) -> String {
    let version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(|api_version| api_version.rsplit('/').next().unwrap_or(api_version))
        .filter(|v| !v.is_empty())
        .unwrap_or("v1");
    format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {err}")
}

/// How Go's `UnmarshalTypeError` names the JSON value it could not store: a number that does
/// not fit a numeric field is quoted literally (`number 1.5`), any other mismatch by kind.
fn json_kind(value: &Value, numeric_target: bool) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Number(n) if numeric_target => format!("number {n}"),
        Value::Number(_) => "number".to_string(),
        Value::String(_) => "string".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
    }
}

/// Go's `UnmarshalTypeError.Error()` for a struct field.
fn type_error(value: &Value, go_struct: &str, path: &str, go_type: &str) -> String {
    let numeric_target = go_type.starts_with("int");
    format!(
        "json: cannot unmarshal {} into Go struct field {go_struct}.{path} of type {go_type}",
        json_kind(value, numeric_target)
    )
}

/// The Go scalar types kubesim checks, and whether a JSON value fits them.
#[derive(Clone, Copy)]
enum GoType {
    String,
    Int32,
    Bool,
}

impl GoType {
    fn name(self) -> &'static str {
        match self {
            GoType::String => "string",
            GoType::Int32 => "int32",
            GoType::Bool => "bool",
        }
    }

    /// `null` always decodes (to the zero value), as in Go.
    fn accepts(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) => true,
            (GoType::String, Value::String(_)) | (GoType::Bool, Value::Bool(_)) => true,
            (GoType::Int32, Value::Number(n)) => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
            _ => false,
        }
    }
}

/// Checks `obj[section][field]` against a Go type.
fn check_field(obj: &Value, section: &str, field: &str, go_struct: &str, go_type: GoType) -> Option<String> {
    let value = obj.get(section)?.get(field)?;
    (!go_type.accepts(value))
        .then(|| type_error(value, go_struct, &format!("{section}.{field}"), go_type.name()))
}

/// `map[string]string` fields: a non-object or a non-string entry fails to decode.
fn check_string_map(value: Option<&Value>, go_struct: &str, path: &str) -> Option<String> {
    match value? {
        Value::Null => None,
        Value::Object(map) => map
            .values()
            .find(|v| !GoType::String.accepts(v))
            .map(|v| type_error(v, go_struct, path, "string")),
        other => Some(type_error(other, go_struct, path, "map[string]string")),
    }
}

/// `map[string][]byte` fields (Secret `data`, ConfigMap `binaryData`): strings of valid base64.
fn check_bytes_map(value: Option<&Value>, go_struct: &str, path: &str) -> Option<String> {
    let map = match value? {
        Value::Null => return None,
        Value::Object(map) => map,
        other => return Some(type_error(other, go_struct, path, "map[string][]uint8")),
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys.into_iter().find_map(|key| match &map[key] {
        Value::Null => None,
        Value::String(s) => {
            go_base64_error_offset(s).map(|offset| format!("illegal base64 data at input byte {offset}"))
        }
        other => Some(type_error(other, go_struct, path, "[]uint8")),
    })
}

fn metadata_error(obj: &Value) -> Option<String> {
    let metadata = obj.get("metadata")?;
    if !metadata.is_object() && !metadata.is_null() {
        return Some(format!(
            "json: cannot unmarshal {} into Go struct field .metadata of type v1.ObjectMeta",
            json_kind(metadata, false)
        ));
    }
    ["name", "generateName", "namespace"]
        .iter()
        .find_map(|field| check_field(obj, "metadata", field, "ObjectMeta", GoType::String))
        .or_else(|| check_string_map(metadata.get("labels"), "ObjectMeta", "metadata.labels"))
        .or_else(|| check_string_map(metadata.get("annotations"), "ObjectMeta", "metadata.annotations"))
}

/// kube-apiserver's 400 message when a Secret's `data` is not valid base64, e.g.
/// `Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 4`.
pub fn secret_data_decode_error(obj: &Value) -> Option<String> {
    check_bytes_map(obj.get("data"), "Secret", "data").map(|err| cannot_handle(obj, "Secret", &err))
}

/// The 400 BadRequest message kube-apiserver would send because `obj` cannot be decoded into
/// its Go type, or `None` when it decodes. Covers metadata strings and maps, Secret `data`,
/// ConfigMap `data`/`binaryData` and the Lease spec scalars.
pub fn builtin_decode_error(group: &str, resource: &str, obj: &Value) -> Option<String> {
    let kind = super::objects::kind_for(group, resource).unwrap_or("Object");
    let err = metadata_error(obj).or_else(|| match (group, resource) {
        ("", "secrets") => check_string_map(obj.get("stringData"), "Secret", "stringData")
            .or_else(|| check_bytes_map(obj.get("data"), "Secret", "data"))
            .or_else(|| check_field_root(obj, "type", "Secret", GoType::String))
            .or_else(|| check_field_root(obj, "immutable", "Secret", GoType::Bool)),
        ("", "configmaps") => check_string_map(obj.get("data"), "ConfigMap", "data")
            .or_else(|| check_bytes_map(obj.get("binaryData"), "ConfigMap", "binaryData"))
            .or_else(|| check_field_root(obj, "immutable", "ConfigMap", GoType::Bool)),
        ("coordination.k8s.io", "leases") => lease_spec_error(obj),
        ("", "resourcequotas") => super::quota::undecodable_quantity(
            [obj.pointer("/spec/hard"), obj.pointer("/status/hard"), obj.pointer("/status/used")].into_iter(),
        ),
        ("", "limitranges") => {
            let lists = ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"];
            let items = obj.pointer("/spec/limits").and_then(Value::as_array).into_iter().flatten();
            super::quota::undecodable_quantity(
                items.flat_map(|item| lists.iter().map(move |list| item.get(*list))),
            )
        }
        _ => None,
    })?;
    Some(cannot_handle(obj, kind, &err))
}

fn check_field_root(obj: &Value, field: &str, go_struct: &str, go_type: GoType) -> Option<String> {
    let value = obj.get(field)?;
    (!go_type.accepts(value)).then(|| type_error(value, go_struct, field, go_type.name()))
}

fn lease_spec_error(obj: &Value) -> Option<String> {
    const FIELDS: [(&str, GoType); 6] = [
        ("holderIdentity", GoType::String),
        ("leaseDurationSeconds", GoType::Int32),
        ("acquireTime", GoType::String),
        ("renewTime", GoType::String),
        ("leaseTransitions", GoType::Int32),
        ("preferredHolder", GoType::String),
    ];
    FIELDS.iter().find_map(|(field, go_type)| check_field(obj, "spec", field, "LeaseSpec", *go_type))
}

/// Merges Secret `stringData` into `data` (base64-encoding each value, overwriting existing
/// keys) and removes `stringData`, as kube-apiserver does on every write.
pub fn fold_string_data(obj: &mut Value) {
    let Some(root) = obj.as_object_mut() else { return };
    let Some(Value::Object(string_data)) = root.remove("stringData") else { return };
    if !matches!(root.get("data"), Some(Value::Object(_))) {
        root.insert("data".to_string(), Value::Object(Map::new()));
    }
    if let Some(Value::Object(data)) = root.get_mut("data") {
        for (key, value) in string_data {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            data.insert(key, Value::String(encoded));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_base64_decodes() {
        for ok in ["", "YQ==", "YWI=", "YWJj", "YWJjZA==", "YW\nJj"] {
            assert_eq!(go_base64_error_offset(ok), None, "{ok}");
        }
    }

    #[test]
    fn invalid_base64_reports_go_offsets() {
        assert_eq!(go_base64_error_offset("abc"), Some(0));
        assert_eq!(go_base64_error_offset("YWJj!"), Some(4));
        assert_eq!(go_base64_error_offset("not base64"), Some(3));
        assert_eq!(go_base64_error_offset("YQ="), Some(3));
        assert_eq!(go_base64_error_offset("YQ==YQ=="), Some(4));
        assert_eq!(go_base64_error_offset("Y==="), Some(1));
    }

    #[test]
    fn secret_with_bad_base64_is_a_decode_error() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "YWJj!"}});
        assert_eq!(
            secret_data_decode_error(&secret).as_deref(),
            Some(
                r#"Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 4"#
            )
        );
        assert_eq!(secret_data_decode_error(&json!({"data": {"k": "YWJj"}})), None);
    }

    #[test]
    fn string_lease_duration_is_a_decode_error() {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "spec": {"leaseDurationSeconds": "15"}});
        assert_eq!(
            builtin_decode_error("coordination.k8s.io", "leases", &lease).as_deref(),
            Some(
                r#"Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"#
            )
        );
    }

    #[test]
    fn fractional_lease_duration_names_the_number() {
        let lease = json!({"spec": {"leaseDurationSeconds": 1.5}});
        let err = builtin_decode_error("coordination.k8s.io", "leases", &lease).unwrap();
        assert!(err.ends_with("cannot unmarshal number 1.5 into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"));
    }

    #[test]
    fn numeric_label_value_is_a_decode_error() {
        let cm = json!({"metadata": {"name": "x", "labels": {"a": 1}}});
        let err = builtin_decode_error("", "configmaps", &cm).unwrap();
        assert_eq!(
            err,
            r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"#
        );
    }

    #[test]
    fn well_typed_objects_decode() {
        let lease = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": null}});
        assert_eq!(builtin_decode_error("coordination.k8s.io", "leases", &lease), None);
        let cm = json!({"metadata": {"name": "x"}, "data": {"a": "b"}, "binaryData": {"c": "YQ=="}});
        assert_eq!(builtin_decode_error("", "configmaps", &cm), None);
    }

    #[test]
    fn string_data_is_folded_into_data_and_wins() {
        let mut secret = json!({"data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "c": "x"}});
        fold_string_data(&mut secret);
        assert_eq!(secret, json!({"data": {"a": "bmV3", "keep": "eA==", "c": "eA=="}}));
    }

    #[test]
    fn string_data_creates_data_when_absent() {
        let mut secret = json!({"stringData": {"k": "v"}});
        fold_string_data(&mut secret);
        assert_eq!(secret, json!({"data": {"k": "dg=="}}));
    }
}
