//! TEMPORARY stand-in until the RBAC module lands (same API).
#![allow(dead_code, unused_variables)]
use serde_json::Value;
#[derive(Debug, Clone)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}
pub fn user_from_token(token: &str) -> Option<UserInfo> {
    Some(UserInfo { name: "kubesim-admin".into(), groups: vec!["system:masters".into()] })
}
pub fn token_for_user(name: &str, groups: &[&str]) -> String {
    format!("user:{name}:{}", groups.join(","))
}
pub fn token_for_service_account(ns: &str, name: &str) -> String {
    format!("serviceaccount:{ns}:{name}")
}
pub struct RequestAttributes {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub path: String,
    pub is_resource_request: bool,
}
pub struct RbacSnapshot<'a> {
    pub roles: &'a [Value],
    pub role_bindings: &'a [Value],
    pub cluster_roles: &'a [Value],
    pub cluster_role_bindings: &'a [Value],
}
pub enum Decision {
    Allow,
    Deny,
}
pub fn authorize(user: &UserInfo, attrs: &RequestAttributes, rbac: &RbacSnapshot) -> Decision {
    Decision::Allow
}
pub fn forbidden_message(user: &UserInfo, attrs: &RequestAttributes) -> String {
    String::new()
}
