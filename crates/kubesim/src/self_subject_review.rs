//! SelfSubjectReview (`authentication.k8s.io/v1`, `kubectl auth whoami`): who the server takes
//! the requester for, so a kubeconfig written for a user or ServiceAccount can be seen to be
//! that identity before its permissions are tried.

use serde_json::{Value, json};

use crate::authz::UserInfo;

pub const GROUP: &str = "authentication.k8s.io";
pub const VERSION: &str = "v1";
pub const RESOURCE: &str = "selfsubjectreviews";
const KIND: &str = "SelfSubjectReview";

/// The entry `/apis/authentication.k8s.io/v1` lists: cluster-scoped, create only.
pub fn discovery_resource() -> Value {
    json!({
        "name": RESOURCE,
        "singularName": KIND.to_lowercase(),
        "namespaced": false,
        "kind": KIND,
        "verbs": ["create"],
    })
}

/// The review kube-apiserver returns: the requester's name and groups in `status.userInfo`.
pub fn answer(user: &UserInfo) -> Value {
    json!({
        "kind": KIND,
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_user_and_their_groups() {
        let user =
            UserInfo { name: "alice".into(), groups: vec!["devs".into(), "system:authenticated".into()] };
        assert_eq!(
            answer(&user)["status"],
            json!({"userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]}})
        );
    }
}
