//! What a BucketAccess gets, decided without a server: whether the Bucket's owner consents,
//! the grant's IAM user name and tags, and its policy. The I/O is in
//! [`grant_controller`](super::grant_controller).

use std::collections::BTreeMap;

use serde_json::json;

use super::access_types::GrantMode;
use super::names::{self, TAG_CLUSTER, TAG_NAME, TAG_NAMESPACE};
use super::types::{AccessMode, Bucket, BucketClassSpec};

/// Tag on a grant's IAM user: the uid of the BucketAccess it was made for.
pub const TAG_GRANT_UID: &str = "kopper.dev/grant-uid";
/// Tag on a grant's IAM user: the uid of the Bucket whose bucket it reaches.
pub const TAG_BUCKET_UID: &str = "kopper.dev/bucket-uid";

/// Hex digits of the Bucket's uid digest in a grant user's name: enough to list one Bucket's
/// grant users apart from others' (tags prove the rest).
const BUCKET_DIGEST_CHARS: usize = 12;
/// Hex digits (80 bits) of the grant's uid digest ending a grant user's name.
const GRANT_DIGEST_CHARS: usize = 20;

/// Which grant a user belongs to, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantOwner {
    pub cluster: String,
    /// The BucketAccess's namespace and name, for people reading the tags.
    pub namespace: String,
    pub name: String,
    pub grant_uid: String,
    pub bucket_uid: String,
}

impl GrantOwner {
    /// `kopper-<cluster>-ga-<12 hex of the Bucket>-<20 hex of the grant>`, at most 64
    /// characters (the cluster id has at most 20). It starts with
    /// [`names::user_name_prefix`], which kopper's IAM policy and the sweep are scoped to, and
    /// with [`bucket_grants_prefix`]. It follows from the cluster and the two uids alone, so
    /// that the Bucket's cleanup names every grant's user without listing the account. Both
    /// digests take in uids, which only those who may read the objects know: nobody can make a
    /// user under the name first.
    pub fn user_name(&self) -> String {
        let grant = names::digest_hex(&[self.cluster.as_str(), &self.grant_uid].join("/"));
        format!("{}{}", bucket_grants_prefix(&self.cluster, &self.bucket_uid), &grant[..GRANT_DIGEST_CHARS])
    }

    /// The IAM path the user is made under: [`bucket_grants_path`] of its Bucket.
    pub fn user_path(&self) -> String {
        bucket_grants_path(&self.cluster, &self.bucket_uid)
    }

    /// The tags that mark a user as this grant's.
    pub fn tags(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (TAG_CLUSTER.to_owned(), self.cluster.clone()),
            (TAG_NAMESPACE.to_owned(), self.namespace.clone()),
            (TAG_NAME.to_owned(), self.name.clone()),
            (TAG_GRANT_UID.to_owned(), self.grant_uid.clone()),
            (TAG_BUCKET_UID.to_owned(), self.bucket_uid.clone()),
        ])
    }

    /// Whether `tags` say the user is this grant's: the cluster and both uids.
    pub fn owns(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.get(TAG_CLUSTER) == Some(&self.cluster)
            && tags.get(TAG_GRANT_UID) == Some(&self.grant_uid)
            && tags.get(TAG_BUCKET_UID) == Some(&self.bucket_uid)
    }
}

/// The IAM path under which this cluster's grant users are made: `/kopper/<cluster>/grants/`.
/// Tenants reach IAM only through kopper, so no tenant can make or remove a user there
/// (another cluster under the same id may, which tags tell apart): listing it is a record of
/// every grant user that survives kopper's restarts and a tenant removing a BucketAccess's
/// finalizer. The sweep and a Bucket's cleanup read it.
pub fn grants_path(cluster: &str) -> String {
    format!("{}grants/", names::role_path(cluster))
}

/// The IAM path of the grant users of the Bucket `bucket_uid`, under [`grants_path`]: one
/// ListUsers call finds them all, however large the account.
pub fn bucket_grants_path(cluster: &str, bucket_uid: &str) -> String {
    format!("{}{bucket_uid}/", grants_path(cluster))
}

/// What the name of every grant user of the Bucket `bucket_uid` starts with.
pub fn bucket_grants_prefix(cluster: &str, bucket_uid: &str) -> String {
    let bucket = names::digest_hex(&[cluster, bucket_uid].join("/"));
    format!("{}ga-{}-", names::user_name_prefix(cluster), &bucket[..BUCKET_DIGEST_CHARS])
}

/// Whether `tags` mark a grant user of this cluster for the Bucket `bucket_uid`.
pub fn is_grant_of_bucket(tags: &BTreeMap<String, String>, cluster: &str, bucket_uid: &str) -> bool {
    tags.get(TAG_CLUSTER).is_some_and(|tag| tag == cluster)
        && tags.get(TAG_GRANT_UID).is_some_and(|uid| !uid.is_empty())
        && tags.get(TAG_BUCKET_UID).is_some_and(|uid| uid == bucket_uid)
}

/// Whether `tags` mark a grant user of this cluster whose grant or Bucket no longer exists
/// (among `live_grants` and `live_buckets`): the sweep deletes it. Untagged users and those
/// of other clusters are never orphans.
pub fn is_orphaned_grant(
    tags: &BTreeMap<String, String>,
    cluster: &str,
    live_grants: &std::collections::HashSet<String>,
    live_buckets: &std::collections::HashSet<String>,
) -> bool {
    let (Some(grant), Some(bucket)) = (tags.get(TAG_GRANT_UID), tags.get(TAG_BUCKET_UID)) else {
        return false;
    };
    tags.get(TAG_CLUSTER).is_some_and(|tag| tag == cluster)
        && !grant.is_empty()
        && !bucket.is_empty()
        && (!live_grants.contains(grant) || !live_buckets.contains(bucket))
}

/// Whether `tags` mark a grant user of this cluster whose Bucket exists (among
/// `live_buckets`) and whose grant does not (among `live_grants`). This much is proven even
/// under a cluster id other clusters in the account share: a Bucket's uid is its cluster's
/// alone, so a user tagged with a live Bucket's uid is this cluster's.
pub fn is_orphaned_grant_of_live_bucket(
    tags: &BTreeMap<String, String>,
    cluster: &str,
    live_grants: &std::collections::HashSet<String>,
    live_buckets: &std::collections::HashSet<String>,
) -> bool {
    tags.get(TAG_BUCKET_UID).is_some_and(|bucket| live_buckets.contains(bucket))
        && is_orphaned_grant(tags, cluster, live_grants, live_buckets)
}

/// The inline policy of a grant: exactly `mode` on exactly `bucket`.
pub fn policy_document(bucket: &str, mode: GrantMode) -> serde_json::Value {
    let arn = names::bucket_arn(bucket);
    let mut on_bucket = vec!["s3:ListBucket", "s3:GetBucketLocation"];
    let mut on_objects = vec!["s3:GetObject", "s3:GetObjectVersion"];
    if mode == GrantMode::ReadWrite {
        on_bucket.push("s3:ListBucketMultipartUploads");
        on_objects.extend([
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ]);
    }
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Bucket", "Effect": "Allow", "Action": on_bucket, "Resource": [arn]},
            {"Sid": "Objects", "Effect": "Allow", "Action": on_objects, "Resource": [format!("{arn}/*")]},
        ],
    })
}

/// What a grant gets, given the Bucket it names (as read from the API server) and that
/// Bucket's class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Consent is given and the Bucket is Ready with `bucket` in `region`: the grant gets (or
    /// keeps) its user, policy, key and Secret.
    Grant { bucket: String, region: String },
    /// Consent is given but nothing new can be made now: what the grant has stays.
    Hold { reason: &'static str, message: String },
    /// No consent (any more), or no Bucket: whatever the grant has is removed.
    Withdraw { reason: &'static str, message: String },
}

/// Most grants one namespace may hold on one Bucket, the Bucket's own namespace too (it needs
/// no consent). IAM allows an account a few thousand users in all: without a bound, a
/// namespace could use them up, and every tenant of the account would get no more credentials.
pub const MAX_GRANTS_PER_NAMESPACE: usize = 10;

/// Whether the grant `me` may hold a user, given the grants of its namespace that hold one of
/// the same Bucket (`holders`, by uid, which may include `me`): those in place keep theirs,
/// and a new one takes a place only while fewer than [`MAX_GRANTS_PER_NAMESPACE`] are taken.
pub fn admits(me: &str, holders: &std::collections::HashSet<String>) -> bool {
    holders.contains(me) || holders.len() < MAX_GRANTS_PER_NAMESPACE
}

/// The refusal of a grant beyond [`MAX_GRANTS_PER_NAMESPACE`]: it holds nothing.
pub fn too_many(bucket_ref: (&str, &str)) -> Verdict {
    let (namespace, name) = bucket_ref;
    Verdict::Withdraw {
        reason: "TooManyGrants",
        message: format!(
            "{MAX_GRANTS_PER_NAMESPACE} other BucketAccesses of this namespace already hold access to Bucket \
             {namespace}/{name}, the most one namespace may hold: delete one, or share one grant's Secret among your \
             workloads (this one is granted when a place is free)"
        ),
    }
}

/// Whether a Bucket change wakes a grant of namespace `grant_namespace`: only a grant of the
/// Bucket's own namespace, of a namespace it is (or was, `shared`) shared with, or one that
/// holds a user. Others are never told anything about the Bucket, not even when it changes.
pub fn woken_by_bucket(
    grant_namespace: &str,
    holds_user: bool,
    bucket_namespace: &str,
    shared: &std::collections::BTreeSet<String>,
) -> bool {
    holds_user || grant_namespace == bucket_namespace || shared.contains(grant_namespace)
}

/// After a grant's user is created: `Ok` only when the Bucket read since (`fresh`) is still the
/// one the user was made for (`granted_uid`), not being deleted, still consents, and its class
/// still allows keys (`class_allows`); else why the user just made must go. The Bucket's
/// deletion writes its deletionTimestamp and then deletes its grants' users; this read comes
/// after the user exists, so one of the two sees the other.
pub fn after_create(
    grant_namespace: &str,
    mode: GrantMode,
    bucket_ref: (&str, &str),
    granted_uid: &str,
    fresh: Option<&Bucket>,
    class_allows: bool,
) -> Result<(), Verdict> {
    let (namespace, name) = bucket_ref;
    match verdict(grant_namespace, mode, bucket_ref, fresh) {
        Verdict::Grant { .. } => {}
        other => return Err(other),
    }
    if fresh.and_then(|bucket| bucket.metadata.uid.as_deref()) != Some(granted_uid) {
        return Err(Verdict::Withdraw {
            reason: "BucketDeleted",
            message: format!(
                "Bucket {namespace}/{name} was deleted and created again while this grant's user was made: kopper \
                 deleted that user and grants the new Bucket on the next pass, if it is shared"
            ),
        });
    }
    if !class_allows {
        return Err(Verdict::Hold {
            reason: "ForbiddenByClass",
            message: format!(
                "the class of Bucket {namespace}/{name} does not allow access keys (allowedAccessModes), and a \
                 BucketAccess gets one: no new key is issued"
            ),
        });
    }
    Ok(())
}

/// Whether the Bucket's class lets a grant have an access key (its `allowedAccessModes`
/// holds `Key`), as for the Bucket's own; a `Hold` when it does not, so that a class changed
/// later keeps existing grants as it keeps existing Buckets, and issues nothing new.
pub fn class_allows(class: &BucketClassSpec, bucket_ref: (&str, &str)) -> Result<(), Verdict> {
    if class.allowed_access_modes.contains(&AccessMode::Key) {
        return Ok(());
    }
    let (namespace, name) = bucket_ref;
    Err(Verdict::Hold {
        reason: "ForbiddenByClass",
        message: format!(
            "the class of Bucket {namespace}/{name} does not allow access keys (allowedAccessModes), and a \
             BucketAccess gets one: no new key is issued"
        ),
    })
}

/// Ready reasons of a Bucket whose bucket is not (or no longer) the Bucket's own: grants to
/// it are withdrawn, as the Bucket's own credentials are.
const BUCKET_LOST: [&str; 2] = ["BucketNameTaken", "BucketTagsMissing"];

/// The verdict for a grant of namespace `grant_namespace` asking for `mode` on `bucket`
/// (`bucket_ref` as the grant names it, `None` when no such Bucket exists). The Bucket's
/// class is judged afterwards ([`class_allows`]), only for a grant consented to.
///
/// A Bucket that does not exist and one that is not shared with the namespace get the same
/// reason and message, and consent is decided before anything else about the Bucket is
/// looked at, so that a tenant cannot learn by a BucketAccess which Buckets other namespaces
/// have, or anything about those not shared with it.
pub fn verdict(
    grant_namespace: &str,
    mode: GrantMode,
    bucket_ref: (&str, &str),
    bucket: Option<&Bucket>,
) -> Verdict {
    let (namespace, name) = bucket_ref;
    let not_shared = || Verdict::Withdraw {
        reason: "NotShared",
        message: format!(
            "Bucket {namespace}/{name} does not exist or is not shared with namespace {grant_namespace}: its owner \
             must add {{namespace: {grant_namespace}, mode: {}}} to its spec.sharedWith",
            mode.as_str()
        ),
    };
    let Some(bucket) = bucket else { return not_shared() };
    if grant_namespace != namespace {
        let Some(shared) = bucket.spec.shared_with.iter().find(|entry| entry.namespace == grant_namespace)
        else {
            return not_shared();
        };
        if shared.mode < mode {
            return Verdict::Withdraw {
                reason: "ModeNotShared",
                message: format!(
                    "Bucket {namespace}/{name} is shared with namespace {grant_namespace} for {} only, and this \
                     BucketAccess asks for {}: set spec.mode to {}, or ask the Bucket's owner to share {}",
                    shared.mode.as_str(),
                    mode.as_str(),
                    shared.mode.as_str(),
                    mode.as_str()
                ),
            };
        }
    }
    if bucket.metadata.deletion_timestamp.is_some() {
        return Verdict::Withdraw {
            reason: "BucketDeleted",
            message: format!("Bucket {namespace}/{name} is being deleted: its grants are removed"),
        };
    }
    let status = bucket.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|condition| condition.type_ == "Ready");
    if let Some(ready) = ready.filter(|ready| BUCKET_LOST.contains(&ready.reason.as_str())) {
        return Verdict::Withdraw {
            reason: "BucketNotReady",
            message: format!(
                "Bucket {namespace}/{name} no longer holds its bucket ({}): its grants are removed",
                ready.reason
            ),
        };
    }
    match (status.bucket_name, status.region, ready.map(|ready| ready.status.as_str())) {
        (Some(bucket), Some(region), Some("True")) => Verdict::Grant { bucket, region },
        _ => Verdict::Hold {
            reason: "BucketNotReady",
            message: format!("Bucket {namespace}/{name} is not Ready: the grant waits for it"),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::Value;

    use super::*;
    use crate::controllers::bucket::policy;

    fn bucket(namespace: &str, shared: Value, ready: Option<(&str, &str)>) -> Bucket {
        let mut bucket: Bucket = serde_json::from_value(json!({
            "apiVersion": "kopper.dev/v1alpha1",
            "kind": "Bucket",
            "metadata": {"name": "data", "namespace": namespace, "uid": "b-1"},
            "spec": {"sharedWith": shared},
        }))
        .unwrap();
        if let Some((status, reason)) = ready {
            bucket.status = Some(
                serde_json::from_value(json!({
                    "bucketName": "c1-team-a-data-1234",
                    "region": "eu-west-1",
                    "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": "",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                }))
                .unwrap(),
            );
        }
        bucket
    }

    fn ready_bucket(shared: Value) -> Bucket {
        bucket("team-a", shared, Some(("True", "Ready")))
    }

    fn judge(grant_namespace: &str, mode: GrantMode, bucket: Option<&Bucket>) -> Verdict {
        verdict(grant_namespace, mode, ("team-a", "data"), bucket)
    }

    fn reason(verdict: &Verdict) -> &'static str {
        match verdict {
            Verdict::Grant { .. } => "Granted",
            Verdict::Hold { reason, .. } | Verdict::Withdraw { reason, .. } => reason,
        }
    }

    #[test]
    fn a_listed_namespace_gets_up_to_its_mode() {
        let shared = ready_bucket(json!([{"namespace": "team-b", "mode": "ReadWrite"}]));
        let granted = Verdict::Grant { bucket: "c1-team-a-data-1234".into(), region: "eu-west-1".into() };
        assert_eq!(judge("team-b", GrantMode::ReadOnly, Some(&shared)), granted);
        assert_eq!(judge("team-b", GrantMode::ReadWrite, Some(&shared)), granted);
    }

    #[test]
    fn read_only_consent_refuses_read_write() {
        let shared = ready_bucket(json!([{"namespace": "team-b", "mode": "ReadOnly"}]));
        let verdict = judge("team-b", GrantMode::ReadWrite, Some(&shared));
        assert!(matches!(verdict, Verdict::Withdraw { reason: "ModeNotShared", .. }), "{verdict:?}");
    }

    #[test]
    fn a_missing_bucket_and_an_unshared_one_look_the_same() {
        let unshared = ready_bucket(json!([{"namespace": "team-c", "mode": "ReadWrite"}]));
        let missing = judge("team-b", GrantMode::ReadOnly, None);
        assert_eq!(judge("team-b", GrantMode::ReadOnly, Some(&unshared)), missing);
        assert_eq!(reason(&missing), "NotShared");
        // Not even the Bucket's state shows through: a deleted or broken one looks the same.
        let mut deleting = bucket("team-a", json!([]), Some(("False", "BucketNameTaken")));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(judge("team-b", GrantMode::ReadOnly, Some(&deleting)), missing);
    }

    #[test]
    fn the_bucket_s_own_namespace_needs_no_entry() {
        assert_eq!(reason(&judge("team-a", GrantMode::ReadWrite, Some(&ready_bucket(json!([]))))), "Granted");
    }

    #[test]
    fn a_bucket_not_ready_holds_and_one_deleted_or_lost_withdraws() {
        let shared = json!([{"namespace": "team-b", "mode": "ReadOnly"}]);
        let waiting = bucket("team-a", shared.clone(), Some(("False", "ProviderUnavailable")));
        assert_eq!(reason(&judge("team-b", GrantMode::ReadOnly, Some(&waiting))), "BucketNotReady");
        assert!(matches!(judge("team-b", GrantMode::ReadOnly, Some(&waiting)), Verdict::Hold { .. }));
        let unmade = bucket("team-a", shared.clone(), None);
        assert!(matches!(judge("team-b", GrantMode::ReadOnly, Some(&unmade)), Verdict::Hold { .. }));
        let lost = bucket("team-a", shared.clone(), Some(("False", "BucketNameTaken")));
        assert!(matches!(judge("team-b", GrantMode::ReadOnly, Some(&lost)), Verdict::Withdraw { .. }));
        let mut deleting = ready_bucket(shared);
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(reason(&judge("team-b", GrantMode::ReadOnly, Some(&deleting))), "BucketDeleted");
    }

    #[test]
    fn a_class_without_access_keys_holds_the_grant() {
        let class = BucketClassSpec {
            allowed_access_modes: vec![AccessMode::ServiceAccount],
            ..BucketClassSpec::built_in()
        };
        let verdict = class_allows(&class, ("team-a", "data")).unwrap_err();
        assert!(matches!(verdict, Verdict::Hold { reason: "ForbiddenByClass", .. }), "{verdict:?}");
        assert_eq!(class_allows(&BucketClassSpec::built_in(), ("team-a", "data")), Ok(()));
    }

    #[test]
    fn the_read_only_policy_reads_and_never_writes_and_read_write_adds_writes() {
        let read = policy_document("data", GrantMode::ReadOnly).to_string();
        assert!(read.contains("s3:GetObject") && read.contains("s3:ListBucket"), "{read}");
        for write in ["Put", "Delete", "Abort", "Multipart"] {
            assert!(!read.contains(write), "{write} in {read}");
        }
        assert!(read.contains("\"arn:aws:s3:::data\"") && read.contains("\"arn:aws:s3:::data/*\""));
        let write = policy_document("data", GrantMode::ReadWrite);
        let text = write.to_string();
        for action in [
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
            "s3:ListBucketMultipartUploads",
        ] {
            assert!(text.contains(action), "{action} missing from {text}");
        }
        assert!(!text.contains("\"*\"") && !text.contains("s3:*") && !text.contains("PutBucket"));
        assert!(policy::equivalent(&write, &write));
        assert!(!policy::equivalent(&write, &policy_document("data", GrantMode::ReadOnly)));
    }

    #[test]
    fn grants_in_place_keep_their_place_and_a_new_one_waits_for_a_free_one() {
        let holders: HashSet<String> = (0..MAX_GRANTS_PER_NAMESPACE).map(|i| format!("uid-{i}")).collect();
        assert!(admits("uid-3", &holders), "a grant in place keeps it");
        assert!(!admits("uid-new", &holders), "the bound is full");
        let fewer: HashSet<String> = holders.iter().skip(1).cloned().collect();
        assert!(admits("uid-new", &fewer));
        assert!(matches!(too_many(("team-a", "data")), Verdict::Withdraw { reason: "TooManyGrants", .. }));
    }

    #[test]
    fn a_bucket_change_wakes_no_grant_of_a_namespace_it_is_not_shared_with() {
        let shared: std::collections::BTreeSet<String> = ["team-b".to_owned()].into();
        assert!(!woken_by_bucket("team-c", false, "team-a", &shared), "not shared: told nothing");
        assert!(woken_by_bucket("team-b", false, "team-a", &shared));
        assert!(woken_by_bucket("team-a", false, "team-a", &shared), "its own namespace");
        assert!(woken_by_bucket("team-c", true, "team-a", &shared), "a grant holding a user loses it");
    }

    #[test]
    fn after_its_user_is_made_a_grant_goes_on_only_for_the_same_bucket_still_consenting() {
        let mut fresh = ready_bucket(json!([{"namespace": "team-b", "mode": "ReadOnly"}]));
        fresh.metadata.uid = Some("uid-1".into());
        let check = |fresh: Option<&Bucket>, class: bool| {
            after_create("team-b", GrantMode::ReadOnly, ("team-a", "data"), "uid-1", fresh, class)
        };
        assert_eq!(check(Some(&fresh), true), Ok(()));
        let reason = |result: Result<(), Verdict>| reason(&result.unwrap_err());
        assert_eq!(reason(check(None, true)), "NotShared", "deleted meanwhile");
        assert_eq!(reason(check(Some(&fresh), false)), "ForbiddenByClass");
        let mut deleting = fresh.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(reason(check(Some(&deleting), true)), "BucketDeleted");
        let mut recreated = fresh.clone();
        recreated.metadata.uid = Some("uid-2".into());
        assert_eq!(reason(check(Some(&recreated), true)), "BucketDeleted");
        let mut unshared = fresh.clone();
        unshared.spec.shared_with.clear();
        assert_eq!(reason(check(Some(&unshared), true)), "NotShared", "consent withdrawn meanwhile");
    }

    fn owner(grant: &str, bucket: &str) -> GrantOwner {
        GrantOwner {
            cluster: "c1".into(),
            namespace: "team-b".into(),
            name: "reader".into(),
            grant_uid: grant.into(),
            bucket_uid: bucket.into(),
        }
    }

    #[test]
    fn grant_users_fit_iam_are_listed_under_their_bucket_and_owned_by_uid() {
        let a = owner("g-1", "b-1");
        let user = a.user_name();
        assert!(user.len() <= 64 && user.starts_with(&bucket_grants_prefix("c1", "b-1")), "{user}");
        assert!(user.starts_with(&names::user_name_prefix("c1")), "{user}");
        let long = GrantOwner { cluster: "c".repeat(20), ..a.clone() };
        assert_eq!(long.user_name().len(), 64);
        assert_ne!(user, owner("g-2", "b-1").user_name());
        assert!(!owner("g-1", "b-2").user_name().starts_with(&bucket_grants_prefix("c1", "b-1")));
        assert!(a.owns(&a.tags()));
        assert!(!owner("g-2", "b-1").owns(&a.tags()), "a grant recreated under its name is another owner");
        assert!(is_grant_of_bucket(&a.tags(), "c1", "b-1"));
        assert!(!is_grant_of_bucket(&a.tags(), "c1", "b-2"));
        assert!(!is_grant_of_bucket(&a.tags(), "c2", "b-1"));
    }

    #[test]
    fn a_grant_user_is_orphaned_when_its_grant_or_its_bucket_is_gone() {
        let tags = owner("g-1", "b-1").tags();
        let set = |items: &[&str]| items.iter().map(|item| item.to_string()).collect::<HashSet<_>>();
        assert!(!is_orphaned_grant(&tags, "c1", &set(&["g-1"]), &set(&["b-1"])));
        assert!(is_orphaned_grant(&tags, "c1", &set(&[]), &set(&["b-1"])));
        assert!(is_orphaned_grant(&tags, "c1", &set(&["g-1"]), &set(&[])));
        assert!(!is_orphaned_grant(&tags, "c2", &set(&[]), &set(&[])), "another cluster's");
        assert!(!is_orphaned_grant(&BTreeMap::new(), "c1", &set(&[]), &set(&[])), "untagged");
    }

    #[test]
    fn under_a_shared_cluster_id_only_grant_users_of_live_buckets_are_orphans() {
        let tags = owner("g-1", "b-1").tags();
        let set = |items: &[&str]| items.iter().map(|item| item.to_string()).collect::<HashSet<_>>();
        assert!(is_orphaned_grant_of_live_bucket(&tags, "c1", &set(&[]), &set(&["b-1"])), "grant gone");
        assert!(!is_orphaned_grant_of_live_bucket(&tags, "c1", &set(&["g-1"]), &set(&["b-1"])), "grant live");
        assert!(
            !is_orphaned_grant_of_live_bucket(&tags, "c1", &set(&[]), &set(&["b-2"])),
            "a Bucket not here may be another cluster's under the same id"
        );
        assert!(
            !is_orphaned_grant_of_live_bucket(&tags, "c2", &set(&[]), &set(&["b-1"])),
            "another cluster's"
        );
    }

    #[test]
    fn grant_users_of_one_bucket_share_a_path_under_the_cluster_s_grants_path() {
        let a = owner("g-1", "b-1");
        assert_eq!(a.user_path(), "/kopper/c1/grants/b-1/");
        assert_eq!(a.user_path(), owner("g-2", "b-1").user_path());
        assert!(a.user_path().starts_with(&grants_path("c1")));
        assert!(!a.user_path().starts_with(&grants_path("c")), "the closing slash keeps cluster c out");
        assert!(!owner("g-1", "b-10").user_path().starts_with(&a.user_path()));
    }
}
