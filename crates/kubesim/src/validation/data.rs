//! ConfigMap and Secret data: key syntax, the 1 MiB limit, the keys each Secret type
//! requires, and immutability once `immutable: true` is set.

use serde_json::Value;

use super::objects::{FIELD_IMMUTABLE, MAX_OBJECT_BYTES, map_at, sorted_keys, str_at};
use super::{Cause, FieldPath, names};

const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const SA_NAME_ANNOTATION_PATH: [&str; 3] = ["metadata", "annotations", SA_NAME_ANNOTATION];
const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

/// Keys of a data map, each a valid config key, and the summed size of the values.
fn data_key_causes(obj: &Value, field: &str, size: impl Fn(&str) -> usize) -> (Vec<Cause>, usize) {
    let Some(data) = obj.get(field).and_then(Value::as_object) else { return (Vec::new(), 0) };
    let path = FieldPath::new(field);
    let mut causes = Vec::new();
    let mut total = 0;
    for key in sorted_keys(data) {
        causes.extend(names::config_map_key(key).iter().map(|m| Cause::invalid_str(path.key(key), key, m)));
        total += size(data[key].as_str().unwrap_or_default());
    }
    (causes, total)
}

/// `ValidateConfigMap`: valid keys, no key in both maps, at most 1 MiB in total.
pub(super) fn config_map_causes(obj: &Value) -> Vec<Cause> {
    let (mut causes, data_size) = data_key_causes(obj, "data", str::len);
    if let (Some(data), Some(binary)) = (map_at(obj, &["data"]), map_at(obj, &["binaryData"])) {
        for key in sorted_keys(data).into_iter().filter(|key| binary.contains_key(*key)) {
            causes.push(Cause::invalid_str(
                FieldPath::new("data").key(key),
                key,
                "duplicate of key present in binaryData",
            ));
        }
    }
    let (binary_causes, binary_size) = data_key_causes(obj, "binaryData", super::decode::decoded_len);
    causes.extend(binary_causes);
    if data_size + binary_size > MAX_OBJECT_BYTES {
        causes.push(Cause::too_long(FieldPath::root(), MAX_OBJECT_BYTES));
    }
    causes
}

/// `ValidateSecret`: valid keys, at most 1 MiB, and the keys each well-known type requires.
pub(super) fn secret_causes(obj: &Value) -> Vec<Cause> {
    let (mut causes, size) = data_key_causes(obj, "data", super::decode::decoded_len);
    let data_path = FieldPath::new("data");
    if size > MAX_OBJECT_BYTES {
        causes.push(Cause::too_long(&data_path, MAX_OBJECT_BYTES));
    }
    let data = map_at(obj, &["data"]);
    let value_of = |key: &str| data.and_then(|d| d.get(key)).and_then(Value::as_str);
    let has = |key: &str| value_of(key).is_some();
    match str_at(obj, &["type"]) {
        "kubernetes.io/service-account-token" if str_at(obj, &SA_NAME_ANNOTATION_PATH).is_empty() => {
            let path = FieldPath::new("metadata").child("annotations").key(SA_NAME_ANNOTATION);
            causes.push(Cause::required(path, ""));
        }
        "kubernetes.io/dockercfg" => {
            causes.extend(docker_config_causes(value_of(".dockercfg"), &data_path, ".dockercfg"))
        }
        "kubernetes.io/dockerconfigjson" => {
            causes.extend(docker_config_causes(
                value_of(".dockerconfigjson"),
                &data_path,
                ".dockerconfigjson",
            ));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(Cause::required(data_path.key("username"), ""));
            causes.push(Cause::required(data_path.key("password"), ""));
        }
        "kubernetes.io/ssh-auth"
            if value_of("ssh-privatekey").is_none_or(|v| super::decode::decoded_len(v) == 0) =>
        {
            causes.push(Cause::required(data_path.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"].into_iter().filter(|key| !has(key)) {
                causes.push(Cause::required(data_path.key(key), ""));
            }
        }
        _ => {}
    }
    causes
}

/// Docker config secrets must carry their key, holding a JSON object.
fn docker_config_causes(encoded: Option<&str>, data_path: &FieldPath, key: &str) -> Vec<Cause> {
    let Some(encoded) = encoded else { return vec![Cause::required(data_path.key(key), "")] };
    let cleaned: String = encoded.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    let bytes =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, cleaned).unwrap_or_default();
    match go_json_object_error(&bytes) {
        Some(err) => vec![Cause::invalid_str(data_path.key(key), "<secret contents redacted>", &err)],
        None => Vec::new(),
    }
}

/// An approximation of Go's `json.Unmarshal(b, &map[string]interface{}{})` error text.
fn go_json_object_error(bytes: &[u8]) -> Option<String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(_)) => None,
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => return None,
            };
            Some(format!("json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"))
        }
        Err(_) if first.is_none() => Some("unexpected end of JSON input".to_string()),
        Err(_) => match first {
            Some(b) if !b"{[\"-0123456789tfn".contains(b) => {
                Some(format!("invalid character '{}' looking for beginning of value", char::from(*b)))
            }
            _ => Some("unexpected end of JSON input".to_string()),
        },
    }
}

pub(super) fn secret_update_causes(old: &Value, new: &Value) -> Vec<Cause> {
    let effective_type = |obj: &Value| match str_at(obj, &["type"]) {
        "" => "Opaque".to_string(),
        other => other.to_string(),
    };
    let mut causes = Vec::new();
    let new_type = effective_type(new);
    if effective_type(old) != new_type {
        causes.push(Cause::invalid_str("type", &new_type, FIELD_IMMUTABLE));
    }
    causes.extend(immutable_data_causes(old, new, &["data"]));
    causes
}

/// Once `immutable: true` is set it stays, and so do the data fields.
pub(super) fn immutable_data_causes(old: &Value, new: &Value, fields: &[&str]) -> Vec<Cause> {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return Vec::new();
    }
    let mut causes = Vec::new();
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(Cause::forbidden("immutable", IMMUTABLE_WHEN_SET));
    }
    for field in fields {
        if present(old.get(*field)) != present(new.get(*field)) {
            causes.push(Cause::forbidden(*field, IMMUTABLE_WHEN_SET));
        }
    }
    causes
}

/// `null` decodes to a nil map, like an absent field; an empty map does not (`reflect.DeepEqual`).
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::objects::{apply_builtin_defaults, validate_builtin, validate_builtin_update};
    use serde_json::json;

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    fn cm(data: Value) -> Value {
        json!({"metadata": {"name": "cfg", "namespace": "default"}, "data": data})
    }

    #[test]
    fn valid_config_map_has_no_causes() {
        assert_eq!(validate_builtin("", "configmaps", &cm(json!({"a.b_c-1": "x"}))), vec![]);
    }

    #[test]
    fn configmap_key_with_space_is_invalid() {
        let causes = validate_builtin("", "configmaps", &cm(json!({"a b": "x"})));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "data[a b]");
        assert_eq!(causes[0].reason, "FieldValueInvalid");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
        );
    }

    #[test]
    fn configmap_key_in_data_and_binary_data_is_a_duplicate() {
        let mut obj = cm(json!({"k": "x"}));
        obj["binaryData"] = json!({"k": "eA=="});
        let causes = validate_builtin("", "configmaps", &obj);
        assert_eq!(
            messages(&causes),
            vec!["data[k]: Invalid value: \"k\": duplicate of key present in binaryData"]
        );
    }

    #[test]
    fn configmap_over_one_mebibyte_is_too_long_for_the_whole_object() {
        let causes =
            validate_builtin("", "configmaps", &cm(json!({"big": "x".repeat(MAX_OBJECT_BYTES + 1)})));
        assert_eq!(messages(&causes), vec![": Too long: may not be more than 1048576 bytes"]);
        assert_eq!(causes[0].reason, "FieldValueTooLong");
    }

    #[test]
    fn configmap_of_exactly_one_mebibyte_is_accepted() {
        assert!(
            validate_builtin("", "configmaps", &cm(json!({"big": "x".repeat(MAX_OBJECT_BYTES)}))).is_empty()
        );
    }

    #[test]
    fn immutable_configmap_data_cannot_change() {
        let old = json!({"metadata": {"name": "a"}, "immutable": true, "data": {"k": "1"}});
        let new = json!({"metadata": {"name": "a"}, "immutable": true, "data": {"k": "2"}});
        let causes = validate_builtin_update("", "configmaps", &old, &new);
        assert_eq!(messages(&causes), vec!["data: Forbidden: field is immutable when `immutable` is set"]);
    }

    #[test]
    fn immutable_flag_cannot_be_cleared() {
        let old = json!({"metadata": {"name": "a"}, "immutable": true});
        let new = json!({"metadata": {"name": "a"}, "immutable": false});
        let causes = validate_builtin_update("", "configmaps", &old, &new);
        assert_eq!(
            messages(&causes),
            vec!["immutable: Forbidden: field is immutable when `immutable` is set"]
        );
    }

    #[test]
    fn mutable_configmap_data_may_change() {
        let old = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
        let new = json!({"metadata": {"name": "a"}, "data": {"k": "2"}});
        assert!(validate_builtin_update("", "configmaps", &old, &new).is_empty());
    }

    #[test]
    fn secret_type_is_immutable() {
        let old = json!({"metadata": {"name": "s"}});
        let new = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"});
        let causes = validate_builtin_update("", "secrets", &old, &new);
        assert_eq!(messages(&causes), vec!["type: Invalid value: \"kubernetes.io/tls\": field is immutable"]);
        let explicit_opaque = json!({"metadata": {"name": "s"}, "type": "Opaque"});
        assert!(validate_builtin_update("", "secrets", &old, &explicit_opaque).is_empty());
    }

    #[test]
    fn tls_secret_requires_cert_and_key() {
        let secret =
            json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/tls", "data": {}});
        let causes = validate_builtin("", "secrets", &secret);
        assert_eq!(messages(&causes), vec!["data[tls.crt]: Required value", "data[tls.key]: Required value"]);
    }

    #[test]
    fn dockerconfigjson_secret_requires_its_key_holding_json() {
        let missing =
            json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/dockerconfigjson"});
        assert_eq!(
            messages(&validate_builtin("", "secrets", &missing)),
            vec!["data[.dockerconfigjson]: Required value"]
        );
        let not_json = json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "eA=="}});
        assert_eq!(
            messages(&validate_builtin("", "secrets", &not_json)),
            vec![
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'x' looking for beginning of value"
            ]
        );
        let ok = json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}});
        assert!(validate_builtin("", "secrets", &ok).is_empty());
    }

    #[test]
    fn basic_auth_needs_username_or_password() {
        let base = |data: Value| json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/basic-auth", "data": data});
        assert_eq!(validate_builtin("", "secrets", &base(json!({}))).len(), 2);
        assert!(validate_builtin("", "secrets", &base(json!({"password": ""}))).is_empty());
    }

    #[test]
    fn ssh_auth_needs_a_non_empty_private_key() {
        let secret = json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}});
        assert_eq!(
            messages(&validate_builtin("", "secrets", &secret)),
            vec!["data[ssh-privatekey]: Required value"]
        );
    }

    #[test]
    fn service_account_token_secret_needs_the_account_annotation() {
        let secret = json!({"metadata": {"name": "s", "namespace": "n"}, "type": "kubernetes.io/service-account-token"});
        assert_eq!(
            messages(&validate_builtin("", "secrets", &secret)),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
    }

    #[test]
    fn oversized_secret_is_too_long_at_data() {
        let big = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            vec![0u8; MAX_OBJECT_BYTES + 1],
        );
        let secret = json!({"metadata": {"name": "s", "namespace": "n"}, "data": {"k": big}});
        assert_eq!(
            messages(&validate_builtin("", "secrets", &secret)),
            vec!["data: Too long: may not be more than 1048576 bytes"]
        );
    }

    #[test]
    fn secret_defaults_to_opaque() {
        let mut secret = json!({"metadata": {"name": "s"}});
        apply_builtin_defaults("", "secrets", &mut secret);
        assert_eq!(secret["type"], "Opaque");
    }
}
