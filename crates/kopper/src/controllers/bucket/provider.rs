//! What the Bucket controller needs from an object store with an IAM API, as a small trait:
//! [`aws::AwsProvider`](super::aws::AwsProvider) implements it with the AWS SDK; tests of the
//! decisions use a fake. Every method is idempotent where S3 and IAM allow it: deleting what
//! is already gone succeeds.

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;

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
}

impl fmt::Debug for NewAccessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewAccessKey").field("id", &self.id).field("secret", &"<redacted>").finish()
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
    /// Whether the bucket holds no object, object version or delete marker.
    fn bucket_is_empty<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>>;
    /// Deletes one batch of object versions and delete markers (one listing page and one
    /// DeleteObjects, at most 1,000); the number deleted, 0 once the bucket is empty. One
    /// batch at a time, so that emptying a huge bucket is spread over many short passes.
    fn empty_batch<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<u64>>;
    fn delete_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<()>>;

    /// The names of the account's IAM users that start with `prefix`, every page.
    fn users<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, ProviderResult<Vec<String>>>;
    /// The user's tags, or `None` when there is no such user.
    fn user_tags<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>>;
    /// Creates the user with its tags in one call, so no untagged user can be left behind.
    fn create_user<'a>(
        &'a self,
        user: &'a str,
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
    /// Ids of the user's access keys.
    fn access_keys<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<Vec<String>>>;
    fn create_access_key<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<NewAccessKey>>;
    fn delete_access_key<'a>(&'a self, user: &'a str, key_id: &'a str) -> BoxFuture<'a, ProviderResult<()>>;
}

/// Which access keys to delete and whether to create one, so that exactly one live key
/// remains and it is the one in the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPlan {
    /// Keys to delete before anything else: keys nobody holds (left by a crash between
    /// creating a key and writing the Secret, or by a rotation cut short).
    pub delete_first: Vec<String>,
    /// Create a key and write it into the Secret.
    pub create: bool,
    /// Delete after the Secret holds the new key (the key being rotated out), so the
    /// application never sees a Secret whose key is already deleted.
    pub delete_after: Option<String>,
}

/// Plans the access keys from the keys IAM lists, the key id the Secret holds (if it holds
/// a complete pair) and whether a rotation was asked for.
pub fn plan_keys(listed: &[String], in_secret: Option<&str>, rotate: bool) -> KeyPlan {
    let held = in_secret.filter(|id| listed.iter().any(|listed| listed == id));
    let unheld = listed.iter().filter(|id| Some(id.as_str()) != held).cloned().collect();
    match held {
        Some(held) if rotate => {
            KeyPlan { delete_first: unheld, create: true, delete_after: Some(held.to_owned()) }
        }
        Some(_) => KeyPlan { delete_first: unheld, create: false, delete_after: None },
        None => KeyPlan { delete_first: unheld, create: true, delete_after: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn the_key_in_the_secret_is_kept_and_nothing_is_written() {
        let plan = plan_keys(&ids(&["A"]), Some("A"), false);
        assert_eq!(plan, KeyPlan { delete_first: vec![], create: false, delete_after: None });
    }

    #[test]
    fn a_key_left_by_a_crash_before_the_secret_was_written_is_deleted() {
        let plan = plan_keys(&ids(&["A", "B"]), Some("A"), false);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["B"]), create: false, delete_after: None });
    }

    #[test]
    fn without_a_usable_secret_every_listed_key_is_replaced() {
        let plan = plan_keys(&ids(&["A"]), None, false);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["A"]), create: true, delete_after: None });
        let plan = plan_keys(&ids(&["A"]), Some("Z"), false);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["A"]), create: true, delete_after: None });
        assert!(plan_keys(&[], None, false).create);
    }

    #[test]
    fn rotation_deletes_the_old_key_only_after_the_new_one_is_written() {
        let plan = plan_keys(&ids(&["A", "B"]), Some("A"), true);
        assert_eq!(plan, KeyPlan { delete_first: ids(&["B"]), create: true, delete_after: Some("A".into()) });
    }

    #[test]
    fn the_secret_key_never_reaches_a_log_line() {
        let key = NewAccessKey { id: "AKIA1".into(), secret: "hunter2".into() };
        assert!(!format!("{key:?}").contains("hunter2"));
    }
}
