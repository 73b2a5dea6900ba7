//! What the Bucket controller needs from an object store with an IAM API, as a small trait:
//! [`aws::AwsProvider`](super::aws::AwsProvider) implements it with the AWS SDK; tests of the
//! decisions use a fake. Every method is idempotent where S3 and IAM allow it: deleting what
//! is already gone succeeds.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::enforced::{Encryption, LifecycleRule, PublicAccessBlock};
use super::rotation::Schedule;

/// What is found under a bucket name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketLookup {
    /// No bucket of that name exists (anywhere S3 can tell), as S3 said with its own error
    /// code: a bare 404, which a gateway may send, is an error instead.
    Missing,
    /// A bucket of this account, with these tags (empty when it has none).
    Ours { tags: BTreeMap<String, String> },
    /// A bucket of another account: S3 refuses kopper a look at it and it is not among this
    /// account's own buckets. A refusal to look at one of this account's own buckets is an
    /// AccessDenied error, never this.
    OtherAccount,
}

/// A freshly created access key. The secret is only ever written into the Secret; its
/// `Debug` is redacted so that no log line can hold it.
pub struct NewAccessKey {
    pub id: String,
    pub secret: String,
    /// When the key was created, as the service says (`None` when it does not).
    pub created: Option<Timestamp>,
}

impl fmt::Debug for NewAccessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewAccessKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("created", &self.created)
            .finish()
    }
}

/// How a provider call failed, in the categories the controller reacts to differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The thing asked about or deleted does not exist.
    NotFound,
    /// The bucket name is taken by another account.
    BucketNameTaken,
    /// kopper's credentials may not do this: reported, retried slowly.
    AccessDenied,
    /// Throttled (503 SlowDown, 429, `Throttling`) after the SDK's own retries.
    Throttled,
    /// The endpoint could not be reached, timed out, or answered 5xx.
    Unavailable,
    /// Anything else (a request the service refused).
    Other,
}

/// A failed provider call: which call, what kind of failure, and the service's message. The
/// message comes from S3 or IAM error responses, which never echo credentials.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{service} {operation} failed ({kind:?}): {message}")]
pub struct ProviderError {
    pub service: &'static str,
    pub operation: &'static str,
    pub kind: FailureKind,
    pub message: String,
}

pub type ProviderResult<T> = Result<T, ProviderError>;

/// S3 and IAM as the Bucket controller uses them.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The endpoint URL applications should use, when it is not AWS's own.
    fn endpoint(&self) -> Option<&str>;
    /// The region buckets are created in when a Bucket names none.
    fn default_region(&self) -> &str;

    fn lookup_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<BucketLookup>>;
    /// Creates the bucket; succeeds when this account already owns it.
    fn create_bucket<'a>(&'a self, bucket: &'a str, region: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
    fn tag_bucket<'a>(
        &'a self,
        bucket: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    /// Whether versioning is on (`false` for a bucket that never had it).
    fn versioning<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>>;
    fn set_versioning<'a>(&'a self, bucket: &'a str, enabled: bool) -> BoxFuture<'a, ProviderResult<()>>;
    /// The bucket's default encryption, `None` when it has none.
    fn encryption<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Option<Encryption>>>;
    fn set_encryption<'a>(
        &'a self,
        bucket: &'a str,
        encryption: &'a Encryption,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    /// The bucket's public-access block; all false when it has none.
    fn public_access_block<'a>(&'a self, bucket: &'a str)
    -> BoxFuture<'a, ProviderResult<PublicAccessBlock>>;
    fn set_public_access_block<'a>(
        &'a self,
        bucket: &'a str,
        block: &'a PublicAccessBlock,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    /// The bucket's lifecycle rules; empty when it has none.
    fn lifecycle<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Vec<LifecycleRule>>>;
    /// Replaces the bucket's lifecycle rules; no rules deletes its lifecycle configuration.
    fn set_lifecycle<'a>(
        &'a self,
        bucket: &'a str,
        rules: &'a [LifecycleRule],
    ) -> BoxFuture<'a, ProviderResult<()>>;
    /// Whether the bucket holds no object, object version or delete marker.
    fn bucket_is_empty<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>>;
    /// Deletes one batch of object versions and delete markers (one listing page and one
    /// DeleteObjects, at most 1,000); the number deleted, 0 once the bucket is empty. One
    /// batch at a time, so that emptying a huge bucket is spread over many short passes.
    fn empty_batch<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<u64>>;
    fn delete_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<()>>;

    /// The names of the account's IAM users under the IAM path `path_prefix` (`/` for all)
    /// whose names start with `name_prefix`, every page. A path prefix is filtered by IAM
    /// itself, so listing one Bucket's grant users costs a call, not a pass over the account.
    fn users<'a>(
        &'a self,
        path_prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Vec<String>>>;
    /// The user's tags, or `None` when there is no such user.
    fn user_tags<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>>;
    /// Creates the user under the IAM path `path` (`/` for none) with its tags in one call,
    /// so no untagged user can be left behind.
    fn create_user<'a>(
        &'a self,
        user: &'a str,
        path: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    fn delete_user<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
    /// The inline policy's document as JSON, or `None` when the user has no such policy.
    fn user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>>;
    fn put_user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    fn delete_user_policy<'a>(&'a self, user: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
    /// The user's access keys with their creation dates.
    fn access_keys<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<Vec<AccessKey>>>;
    fn create_access_key<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<NewAccessKey>>;
    fn delete_access_key<'a>(&'a self, user: &'a str, key_id: &'a str) -> BoxFuture<'a, ProviderResult<()>>;

    /// The names of the account's IAM roles under `path_prefix`, every page.
    fn roles<'a>(&'a self, path_prefix: &'a str) -> BoxFuture<'a, ProviderResult<Vec<String>>>;
    /// The role's tags, or `None` when there is no such role.
    fn role_tags<'a>(
        &'a self,
        role: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>>;
    /// The role's ARN and trust policy, or `None` when there is no such role.
    fn role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<Option<Role>>>;
    /// Creates the role under `path` with its trust policy and tags in one call, so no
    /// untagged role can be left behind; its ARN.
    fn create_role<'a>(
        &'a self,
        role: &'a str,
        path: &'a str,
        trust: &'a serde_json::Value,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<String>>;
    fn update_trust_policy<'a>(
        &'a self,
        role: &'a str,
        trust: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    fn delete_role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
    /// The role's inline policy as JSON, or `None` when the role has no such policy.
    fn role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>>;
    fn put_role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>>;
    fn delete_role_policy<'a>(&'a self, role: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
}

/// An IAM role as GetRole describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Role {
    pub arn: String,
    /// The trust policy (`AssumeRolePolicyDocument`), decoded.
    pub trust: serde_json::Value,
}

/// An access key as IAM lists it. `created` is `None` when the service does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessKey {
    pub id: String,
    pub created: Option<Timestamp>,
}

/// Why a new access key is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewKey {
    /// The Secret holds no key that exists.
    Missing,
    /// Asked for by the rotation annotation: the old key goes as soon as the Secret holds the
    /// new one.
    Asked,
    /// The key in use reached the age `spec.keyRotation` replaces it at: the old key stays
    /// for the grace period.
    Scheduled,
}

/// Which access keys to delete and whether to create one, so that the key in the Secret
/// exists, at most one older key still works (for its grace period), and no key is older
/// than the schedule allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPlan {
    /// Keys to delete before anything else: keys nobody holds (left by a crash between
    /// creating a key and writing the Secret, or by a rotation cut short), and a retiring key
    /// whose grace period is over (or that would be a third key).
    pub delete_first: Vec<String>,
    /// Create a key and write it into the Secret.
    pub create: Option<NewKey>,
    /// Delete after the Secret holds the new key (the key rotated out on request), so the
    /// application never sees a Secret whose key is already deleted.
    pub delete_after: Option<String>,
    /// When the next step falls due (a grace period ends, the key in use is to be replaced),
    /// if the plan is carried out now.
    pub next_due: Option<Timestamp>,
}

/// Plans the access keys from the keys IAM lists, the key id the Secret holds (if it holds
/// a complete pair), whether a rotation was asked for, the schedule of `spec.keyRotation` and
/// the time now. Only IAM's creation dates and the Secret count, so the plan after a crash
/// at any point finishes what the crashed pass began:
/// - a key not held that is newer than the held one was never handed out: deleted at once;
/// - one older than the held one is retiring: kept until the held key is `grace` old;
/// - the held key is replaced once it is `max_age - grace` old; a retiring key still there
///   is deleted first, so there are never three.
pub fn plan_keys(
    listed: &[AccessKey],
    in_secret: Option<&str>,
    rotate: bool,
    schedule: Option<&Schedule>,
    now: Timestamp,
) -> KeyPlan {
    let Some(held) = in_secret.and_then(|id| listed.iter().find(|key| key.id == id)) else {
        let delete_first = listed.iter().map(|key| key.id.clone()).collect();
        return KeyPlan { delete_first, create: Some(NewKey::Missing), ..KeyPlan::default() };
    };
    let unheld = listed.iter().filter(|key| key.id != held.id);
    if rotate {
        return KeyPlan {
            delete_first: unheld.map(|key| key.id.clone()).collect(),
            create: Some(NewKey::Asked),
            delete_after: Some(held.id.clone()),
            next_due: None,
        };
    }
    let grace = schedule.map_or(Duration::ZERO, |schedule| schedule.grace);
    let mut plan = KeyPlan::default();
    let mut retiring: Vec<&AccessKey> = Vec::new();
    for key in unheld {
        match (key.created, held.created) {
            (Some(created), Some(held_created)) if created <= held_created => {
                let grace_ends = after(held_created, grace);
                if now >= grace_ends {
                    plan.delete_first.push(key.id.clone());
                } else {
                    retiring.push(key);
                    plan.next_due = earliest(plan.next_due, grace_ends);
                }
            }
            _ => plan.delete_first.push(key.id.clone()),
        }
    }
    // Only one key retires at a time (IAM allows two keys in all): the newest is kept.
    retiring.sort_by_key(|key| std::cmp::Reverse(key.created));
    plan.delete_first.extend(retiring.iter().skip(1).map(|key| key.id.clone()));
    if let (Some(schedule), Some(held_created)) = (schedule, held.created) {
        let replace_at = after(held_created, schedule.in_use_for());
        if now >= replace_at {
            plan.delete_first.extend(retiring.iter().take(1).map(|key| key.id.clone()));
            plan.create = Some(NewKey::Scheduled);
            plan.next_due = Some(after(now, grace));
        } else {
            plan.next_due = earliest(plan.next_due, replace_at);
        }
    }
    plan
}

/// `time` plus `duration`, or the end of time.
fn after(time: Timestamp, duration: Duration) -> Timestamp {
    SignedDuration::try_from(duration)
        .ok()
        .and_then(|duration| time.checked_add(duration).ok())
        .unwrap_or(Timestamp::MAX)
}

fn earliest(due: Option<Timestamp>, time: Timestamp) -> Option<Timestamp> {
    Some(due.map_or(time, |due| due.min(time)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times in whole seconds after an arbitrary start.
    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn key(id: &str, created: i64) -> AccessKey {
        AccessKey { id: id.into(), created: Some(at(created)) }
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    /// Keys last 100 s; the old one retires for 20 s: a key is in use for 80 s.
    const SCHEDULE: Schedule = Schedule { max_age: Duration::from_secs(100), grace: Duration::from_secs(20) };

    fn scheduled(listed: &[AccessKey], held: &str, now: i64) -> KeyPlan {
        plan_keys(listed, Some(held), false, Some(&SCHEDULE), at(now))
    }

    #[test]
    fn the_key_in_the_secret_is_kept_and_nothing_is_written() {
        let plan = plan_keys(&[key("A", 0)], Some("A"), false, None, at(1_000_000));
        assert_eq!(plan, KeyPlan::default());
    }

    #[test]
    fn a_key_left_by_a_crash_before_the_secret_was_written_is_deleted() {
        let plan = plan_keys(&[key("A", 0), key("B", 5)], Some("A"), false, None, at(6));
        assert_eq!(plan, KeyPlan { delete_first: ids(&["B"]), ..KeyPlan::default() });
        // With a schedule too: a key newer than the one in use was never handed out.
        let plan = scheduled(&[key("A", 0), key("B", 5)], "A", 6);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["B"]), next_due: Some(at(80)), ..KeyPlan::default() });
    }

    #[test]
    fn without_a_schedule_an_older_key_is_deleted_at_once() {
        let plan = plan_keys(&[key("A", 0), key("B", 5)], Some("B"), false, None, at(6));
        assert_eq!(plan, KeyPlan { delete_first: ids(&["A"]), ..KeyPlan::default() });
    }

    #[test]
    fn without_a_usable_secret_every_listed_key_is_replaced() {
        let missing = |delete: &[&str]| KeyPlan {
            delete_first: ids(delete),
            create: Some(NewKey::Missing),
            ..KeyPlan::default()
        };
        assert_eq!(plan_keys(&[key("A", 0)], None, false, None, at(1)), missing(&["A"]));
        assert_eq!(plan_keys(&[key("A", 0)], Some("Z"), false, Some(&SCHEDULE), at(1)), missing(&["A"]));
        assert_eq!(plan_keys(&[], None, false, None, at(1)), missing(&[]));
    }

    #[test]
    fn a_rotation_asked_for_deletes_the_old_key_only_after_the_new_one_is_written() {
        let plan = plan_keys(&[key("A", 0), key("B", 5)], Some("A"), true, None, at(6));
        let asked = KeyPlan {
            delete_first: ids(&["B"]),
            create: Some(NewKey::Asked),
            delete_after: Some("A".into()),
            next_due: None,
        };
        assert_eq!(plan, asked);
        // A leaked key goes at once, schedule or not, and so does a retiring one.
        let plan = plan_keys(&[key("A", 0), key("B", 85)], Some("B"), true, Some(&SCHEDULE), at(90));
        assert_eq!(plan, KeyPlan { delete_first: ids(&["A"]), delete_after: Some("B".into()), ..asked });
    }

    #[test]
    fn a_key_in_use_is_kept_until_its_replacement_falls_due() {
        assert_eq!(
            scheduled(&[key("A", 0)], "A", 79),
            KeyPlan { next_due: Some(at(80)), ..KeyPlan::default() }
        );
    }

    #[test]
    fn a_key_at_its_replacement_age_gets_a_successor_and_is_kept_for_the_grace_period() {
        let plan = scheduled(&[key("A", 0)], "A", 80);
        assert_eq!(
            plan,
            KeyPlan { create: Some(NewKey::Scheduled), next_due: Some(at(100)), ..KeyPlan::default() }
        );
    }

    #[test]
    fn the_retiring_key_is_deleted_when_the_grace_period_ends() {
        let listed = [key("A", 0), key("B", 80)];
        assert_eq!(scheduled(&listed, "B", 99), KeyPlan { next_due: Some(at(100)), ..KeyPlan::default() });
        assert_eq!(
            scheduled(&listed, "B", 100),
            KeyPlan { delete_first: ids(&["A"]), next_due: Some(at(160)), ..KeyPlan::default() }
        );
    }

    #[test]
    fn a_crash_between_creating_the_successor_and_writing_the_secret_is_finished_again() {
        // B was created for A's replacement, but the Secret still holds A: B was never handed
        // out, so it goes, and A, still due, gets a successor in the same pass.
        let plan = scheduled(&[key("A", 0), key("B", 80)], "A", 81);
        assert_eq!(
            plan,
            KeyPlan {
                delete_first: ids(&["B"]),
                create: Some(NewKey::Scheduled),
                next_due: Some(at(101)),
                ..KeyPlan::default()
            }
        );
    }

    #[test]
    fn a_crash_after_the_secret_was_written_keeps_the_old_key_for_its_grace_period() {
        // Status was never written; IAM's dates and the Secret are enough.
        assert_eq!(
            scheduled(&[key("A", 0), key("B", 80)], "B", 81),
            KeyPlan { next_due: Some(at(100)), ..KeyPlan::default() }
        );
    }

    #[test]
    fn there_are_never_three_keys() {
        // B due for replacement while A still retires (a grace period longer than a key is
        // in use, which validation refuses): A goes before C is made.
        let odd = Schedule { max_age: Duration::from_secs(10), grace: Duration::from_secs(8) };
        let plan = plan_keys(&[key("A", 0), key("B", 80)], Some("B"), false, Some(&odd), at(83));
        assert_eq!(plan.delete_first, ids(&["A"]));
        assert_eq!(plan.create, Some(NewKey::Scheduled));
        // A service that allows more keys than IAM: only the newest older key retires.
        let plan = scheduled(&[key("A", 0), key("B", 10), key("C", 80)], "C", 81);
        assert_eq!(
            plan,
            KeyPlan { delete_first: ids(&["A"]), next_due: Some(at(100)), ..KeyPlan::default() }
        );
    }

    #[test]
    fn keys_without_a_creation_date_are_never_rotated_nor_kept_retiring() {
        let undated = AccessKey { id: "A".into(), created: None };
        assert_eq!(scheduled(std::slice::from_ref(&undated), "A", 1_000), KeyPlan::default());
        let plan = scheduled(&[undated, key("B", 0)], "B", 1);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["A"]), next_due: Some(at(80)), ..KeyPlan::default() });
    }

    #[test]
    fn the_secret_key_never_reaches_a_log_line() {
        let key = NewAccessKey { id: "AKIA1".into(), secret: "hunter2".into(), created: None };
        assert!(!format!("{key:?}").contains("hunter2"));
    }
}
