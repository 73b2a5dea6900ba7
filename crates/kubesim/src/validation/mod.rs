//! TEMPORARY stand-in until the validation module lands (same API).
#![allow(dead_code, unused_variables)]
use serde_json::Value;
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}
pub fn invalid_message(kind: &str, name: &str, causes: &[Cause]) -> String {
    let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    if parts.len() == 1 {
        format!("{kind} \"{name}\" is invalid: {}", parts[0])
    } else {
        format!("{kind} \"{name}\" is invalid: [{}]", parts.join(", "))
    }
}
#[derive(Debug, Clone, Copy)]
pub enum NameRule {
    Subdomain,
    Label,
    PathSegment,
}
pub fn name_rule(group: &str, resource: &str) -> NameRule {
    if resource == "namespaces" { NameRule::Label } else { NameRule::Subdomain }
}
pub fn validate_metadata(obj: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    Vec::new()
}
pub fn validate_builtin(group: &str, resource: &str, obj: &Value) -> Vec<Cause> {
    Vec::new()
}
pub fn validate_builtin_update(group: &str, resource: &str, old: &Value, new: &Value) -> Vec<Cause> {
    Vec::new()
}
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    Vec::new()
}
pub fn prune_default_validate(schema: &Value, obj: &mut Value) -> Vec<Cause> {
    Vec::new()
}
pub fn secret_data_decode_error(obj: &Value) -> Option<String> {
    None
}
pub fn fold_string_data(obj: &mut Value) {}
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;
