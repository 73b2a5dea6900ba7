//! S3 and IAM writes pass the same fence as the client's writes to the API server (see
//! [`crate::runtime::fence`]): a leader paused past its lease must not create or delete a
//! bucket, a user or a key after a standby has taken over. A write let through is abandoned
//! once the fence closes (no renewal in time), so neither a slow call nor one of the SDK's
//! retries goes out after that.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::enforced::{Encryption, LifecycleRule, PublicAccessBlock};
use super::provider::{
    AccessKey, BucketLookup, FailureKind, NewAccessKey, Provider, ProviderError, ProviderResult, Role,
};
use crate::runtime::fence::WriteFence;

/// A [`Provider`] whose writes are refused while `fence` is closed; reads pass.
#[derive(Debug)]
pub struct Fenced<P> {
    pub inner: P,
    pub fence: Arc<WriteFence>,
}

impl<P: Provider> Fenced<P> {
    /// Runs `write` only while this replica may write, and gives it up at the deadline.
    fn write<'a, T: Send + 'a>(
        &'a self,
        service: &'static str,
        operation: &'static str,
        write: BoxFuture<'a, ProviderResult<T>>,
    ) -> BoxFuture<'a, ProviderResult<T>> {
        let refused = move |message: &str| ProviderError {
            service,
            operation,
            kind: FailureKind::Unavailable,
            message: message.to_owned(),
        };
        match self.fence.write_deadline() {
            Ok(deadline) => async move {
                self.fence.while_open(deadline, write).await.unwrap_or_else(|_fenced| {
                    Err(refused("abandoned: this replica could not prove it still holds the leader lease before an answer came"))
                })
            }
            .boxed(),
            Err(_) => std::future::ready(Err(refused(
                "not sent: this replica cannot prove it still holds the leader lease",
            )))
            .boxed(),
        }
    }
}

impl<P: Provider> Provider for Fenced<P> {
    fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint()
    }

    fn default_region(&self) -> &str {
        self.inner.default_region()
    }

    fn lookup_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<BucketLookup>> {
        self.inner.lookup_bucket(bucket)
    }

    fn create_bucket<'a>(&'a self, bucket: &'a str, region: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "CreateBucket", self.inner.create_bucket(bucket, region))
    }

    fn tag_bucket<'a>(
        &'a self,
        bucket: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "PutBucketTagging", self.inner.tag_bucket(bucket, tags))
    }

    fn versioning<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>> {
        self.inner.versioning(bucket)
    }

    fn set_versioning<'a>(&'a self, bucket: &'a str, enabled: bool) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "PutBucketVersioning", self.inner.set_versioning(bucket, enabled))
    }

    fn encryption<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Option<Encryption>>> {
        self.inner.encryption(bucket)
    }

    fn set_encryption<'a>(
        &'a self,
        bucket: &'a str,
        encryption: &'a Encryption,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "PutBucketEncryption", self.inner.set_encryption(bucket, encryption))
    }

    fn public_access_block<'a>(
        &'a self,
        bucket: &'a str,
    ) -> BoxFuture<'a, ProviderResult<PublicAccessBlock>> {
        self.inner.public_access_block(bucket)
    }

    fn set_public_access_block<'a>(
        &'a self,
        bucket: &'a str,
        block: &'a PublicAccessBlock,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "PutPublicAccessBlock", self.inner.set_public_access_block(bucket, block))
    }

    fn lifecycle<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Vec<LifecycleRule>>> {
        self.inner.lifecycle(bucket)
    }

    fn set_lifecycle<'a>(
        &'a self,
        bucket: &'a str,
        rules: &'a [LifecycleRule],
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "PutBucketLifecycleConfiguration", self.inner.set_lifecycle(bucket, rules))
    }

    fn bucket_is_empty<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>> {
        self.inner.bucket_is_empty(bucket)
    }

    fn empty_batch<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<u64>> {
        self.write("s3", "DeleteObjects", self.inner.empty_batch(bucket))
    }

    fn delete_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("s3", "DeleteBucket", self.inner.delete_bucket(bucket))
    }

    fn users<'a>(
        &'a self,
        path_prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Vec<String>>> {
        self.inner.users(path_prefix, name_prefix)
    }

    fn user_tags<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>> {
        self.inner.user_tags(user)
    }

    fn create_user<'a>(
        &'a self,
        user: &'a str,
        path: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "CreateUser", self.inner.create_user(user, path, tags))
    }

    fn delete_user<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "DeleteUser", self.inner.delete_user(user))
    }

    fn user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>> {
        self.inner.user_policy(user, policy)
    }

    fn put_user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "PutUserPolicy", self.inner.put_user_policy(user, policy, document))
    }

    fn delete_user_policy<'a>(&'a self, user: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "DeleteUserPolicy", self.inner.delete_user_policy(user, policy))
    }

    fn access_keys<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<Vec<AccessKey>>> {
        self.inner.access_keys(user)
    }

    fn create_access_key<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<NewAccessKey>> {
        self.write("iam", "CreateAccessKey", self.inner.create_access_key(user))
    }

    fn delete_access_key<'a>(&'a self, user: &'a str, key_id: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "DeleteAccessKey", self.inner.delete_access_key(user, key_id))
    }

    fn roles<'a>(&'a self, path_prefix: &'a str) -> BoxFuture<'a, ProviderResult<Vec<String>>> {
        self.inner.roles(path_prefix)
    }

    fn role_tags<'a>(
        &'a self,
        role: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>> {
        self.inner.role_tags(role)
    }

    fn role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<Option<Role>>> {
        self.inner.role(role)
    }

    fn create_role<'a>(
        &'a self,
        role: &'a str,
        path: &'a str,
        trust: &'a serde_json::Value,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<String>> {
        self.write("iam", "CreateRole", self.inner.create_role(role, path, trust, tags))
    }

    fn update_trust_policy<'a>(
        &'a self,
        role: &'a str,
        trust: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "UpdateAssumeRolePolicy", self.inner.update_trust_policy(role, trust))
    }

    fn delete_role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "DeleteRole", self.inner.delete_role(role))
    }

    fn role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>> {
        self.inner.role_policy(role, policy)
    }

    fn put_role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "PutRolePolicy", self.inner.put_role_policy(role, policy, document))
    }

    fn delete_role_policy<'a>(&'a self, role: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        self.write("iam", "DeleteRolePolicy", self.inner.delete_role_policy(role, policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::bucket::aws::{AwsProvider, AwsSettings, StaticCredentials};

    /// A provider whose S3 and IAM endpoint is `address`.
    async fn provider_at(address: std::net::SocketAddr) -> AwsProvider {
        AwsProvider::new(AwsSettings {
            region: "us-east-1".into(),
            endpoint: Some(format!("http://{address}")),
            iam_endpoint: None,
            force_path_style: true,
            credentials: Some(StaticCredentials {
                access_key_id: "id".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            }),
            delete_batch: None,
        })
        .await
    }

    #[tokio::test]
    async fn writes_are_refused_while_the_fence_is_closed_and_reads_go_out() {
        let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let inner = provider_at(closed_port).await;
        let fenced = Fenced { inner, fence: WriteFence::closed() };
        for refused in [
            fenced.create_bucket("b", "us-east-1").await.unwrap_err(),
            fenced.delete_user("u").await.unwrap_err(),
            fenced.create_access_key("u").await.map(|_| ()).unwrap_err(),
        ] {
            assert!(refused.message.contains("leader lease"), "{refused}");
        }
        let read = fenced.user_tags("u").await.unwrap_err();
        assert!(!read.message.contains("leader lease"), "reads are not fenced: {read}");
    }

    /// An endpoint that takes connections and never answers: without the deadline the call
    /// would wait on it (and the SDK retry it) long after the lease was lost.
    #[tokio::test]
    async fn a_write_still_unanswered_at_the_lease_deadline_is_abandoned() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inner = provider_at(silent.local_addr().unwrap()).await;
        let fence = WriteFence::closed();
        fence.open_until(tokio::time::Instant::now() + std::time::Duration::from_secs(2));
        let fenced = Fenced { inner, fence };

        let call =
            tokio::time::timeout(std::time::Duration::from_secs(20), fenced.create_bucket("b", "us-east-1"));
        let abandoned = call.await.expect("given up at the deadline, not waited for").unwrap_err();

        assert!(abandoned.message.starts_with("abandoned"), "{abandoned}");
        assert_eq!(abandoned.kind, FailureKind::Unavailable);
    }
}
