//! kubesim's patch engine: the four PATCH content types of kube-apiserver and the field
//! ownership bookkeeping (`metadata.managedFields`) that server-side apply depends on.
//!
//! Everything here is a pure function over `serde_json::Value`, so the HTTP layer decides
//! when to read and store objects and this module only decides what the result looks like.
//! The behaviour follows k8s.io/apimachinery (JSON, merge and strategic merge patch) and
//! sigs.k8s.io/structured-merge-diff (server-side apply), including the error shapes that
//! clients such as kube-rs match on.
//!
//! How a request handler uses it:
//! - create and update: [`record_update`] (`old` is `None` on create) before storing;
//! - PATCH: [`PatchType::from_content_type`], then [`json_patch()`], [`merge_patch`] (after
//!   [`check_merge_patch`]) or [`strategic_merge_patch`] on a copy of the stored object,
//!   then [`record_update`]; for [`PatchType::Apply`], [`check_applied_type`] and then
//!   [`server_side_apply`], which does both;
//! - custom resources: pass [`SchemaListTypes`] built from the served version's schema
//!   (to [`record_update_with`] and [`server_side_apply`]); built-in kinds use
//!   [`BuiltinListTypes`];
//! - errors: [`PatchError::to_status`] is the response body, [`PatchError::status_code`]
//!   its HTTP status.

mod apply;
mod error;
mod fields;
mod json;
mod lists;
mod managed;
mod merge;
mod strategic;

pub use apply::{check_applied_type, server_side_apply};
pub use error::{FieldConflict, PatchError};
pub use fields::{FieldPath, FieldSet, PathElement};
pub use json::json_patch;
pub use lists::{BuiltinListTypes, ListType, ListTypes, SchemaListTypes, is_builtin_group};
pub use managed::{record_update, record_update_with};
pub use merge::{check_merge_patch, merge_patch};
pub use strategic::{strategic_merge_patch, strategic_merge_patch_with};

/// The PATCH flavours kube-apiserver accepts, told apart by the request's Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// RFC 6902 JSON Patch (`application/json-patch+json`).
    Json,
    /// RFC 7386 JSON Merge Patch (`application/merge-patch+json`).
    Merge,
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`).
    StrategicMerge,
    /// Server-side apply (`application/apply-patch+yaml`, or its JSON spelling).
    Apply,
}

impl PatchType {
    /// Maps a Content-Type header to a patch type, ignoring parameters such as `charset`.
    ///
    /// Returns `None` for anything kube-apiserver would answer with 415.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let media_type = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match media_type.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchType::Apply),
            _ => None,
        }
    }

    /// The canonical Content-Type of this patch type, as listed in 415 responses.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_map_to_patch_types_ignoring_parameters() {
        assert_eq!(PatchType::from_content_type("application/json-patch+json"), Some(PatchType::Json));
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(PatchType::from_content_type("application/apply-patch+yaml"), Some(PatchType::Apply));
        assert_eq!(PatchType::from_content_type("Application/Apply-Patch+JSON"), Some(PatchType::Apply));
        assert_eq!(PatchType::from_content_type("application/json"), None);
        assert_eq!(PatchType::from_content_type(""), None);
    }

    #[test]
    fn content_type_round_trips() {
        for patch_type in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge, PatchType::Apply] {
            assert_eq!(PatchType::from_content_type(patch_type.content_type()), Some(patch_type));
        }
    }
}
