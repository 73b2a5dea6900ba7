//! TEMPORARY stand-in until the patch engine lands (same API).
#![allow(dead_code, unused_variables)]
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}
impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("conflict")]
    Conflict(Vec<FieldConflict>),
}
#[derive(Debug, Clone)]
pub struct FieldConflict {
    pub manager: String,
    pub field: String,
}
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch)
}
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    json_patch::patch(target, &p).map_err(|e| PatchError::Invalid(e.to_string()))
}
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<(), PatchError> {
    merge_patch(target, patch);
    Ok(())
}
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}
pub trait ListTypes {
    fn list_type(&self, path: &[&str]) -> ListType;
}
pub struct BuiltinListTypes {}
impl BuiltinListTypes {
    pub fn new(group: &str, kind: &str) -> Self {
        Self {}
    }
}
impl ListTypes for BuiltinListTypes {
    fn list_type(&self, path: &[&str]) -> ListType {
        ListType::Atomic
    }
}
pub struct SchemaListTypes<'a> {
    schema: &'a Value,
}
impl<'a> SchemaListTypes<'a> {
    pub fn new(schema: &'a Value) -> Self {
        Self { schema }
    }
}
impl ListTypes for SchemaListTypes<'_> {
    fn list_type(&self, path: &[&str]) -> ListType {
        ListType::Atomic
    }
}
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    lists: &dyn ListTypes,
    now: &str,
) -> Result<Value, PatchError> {
    let mut out = live.cloned().unwrap_or(Value::Null);
    merge_patch(&mut out, applied);
    Ok(out)
}
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
}
