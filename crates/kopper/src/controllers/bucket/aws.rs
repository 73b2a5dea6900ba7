//! [`Provider`] on the AWS SDK for Rust: S3 and IAM, or any S3-compatible service with the
//! IAM API (an endpoint URL and path-style addressing make that work).
//!
//! The SDK retries throttling and 5xx answers itself (standard retry mode, with backoff);
//! what still fails is classified into [`FailureKind`] for the controller's conditions.
//! Every call is counted in `kopper_bucket_provider_calls_total` by service, operation and
//! outcome.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use aws_config::{BehaviorVersion, Region};
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketLocationConstraint,
    BucketVersioningStatus, CreateBucketConfiguration, Delete, ExpirationStatus, LifecycleExpiration,
    LifecycleRuleFilter, NoncurrentVersionExpiration, ObjectIdentifier, PublicAccessBlockConfiguration,
    ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
    ServerSideEncryptionRule, Tagging, VersioningConfiguration,
};
use aws_smithy_http_client::tls;
use futures::FutureExt;
use futures::future::BoxFuture;

use super::enforced::{Encryption, LifecycleRule, PublicAccessBlock};
use super::metrics::count_provider_call;
use super::provider::{
    AccessKey, BucketLookup, FailureKind, NewAccessKey, Provider, ProviderError, ProviderResult, Role,
};

/// Largest batch S3's DeleteObjects accepts, and the default batch when emptying a bucket.
pub const MAX_DELETE_BATCH: u16 = 1000;

/// Where and as whom kopper talks to S3 and IAM.
#[derive(Clone, Debug, Default)]
pub struct AwsSettings {
    pub region: String,
    /// A custom S3 endpoint (an S3-compatible service); `None` for AWS.
    pub endpoint: Option<String>,
    /// A custom IAM endpoint; by default the S3 endpoint when one is set.
    pub iam_endpoint: Option<String>,
    pub force_path_style: bool,
    /// Static credentials (from `--s3-credentials-secret`); `None` for the standard AWS chain
    /// (environment, profile, web identity for IRSA, container and instance metadata).
    pub credentials: Option<StaticCredentials>,
    /// Object versions listed and deleted per batch when emptying a bucket; `None` for
    /// [`MAX_DELETE_BATCH`]. Smaller only in tests, to make a bucket slow to empty.
    pub delete_batch: Option<u16>,
}

#[derive(Clone)]
pub struct StaticCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

pub struct AwsProvider {
    s3: aws_sdk_s3::Client,
    iam: aws_sdk_iam::Client,
    settings: AwsSettings,
}

impl fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsProvider").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl AwsProvider {
    /// Builds the clients: rustls with ring and the system's CA certificates, no default
    /// features of the SDK beyond what is used.
    pub async fn new(settings: AwsSettings) -> Self {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .timeout_config(call_timeouts())
            .region(Region::new(settings.region.clone()));
        if let Some(credentials) = &settings.credentials {
            loader = loader.credentials_provider(aws_sdk_s3::config::Credentials::new(
                credentials.access_key_id.clone(),
                credentials.secret_access_key.clone(),
                credentials.session_token.clone(),
                None,
                "kopper-credentials-secret",
            ));
        }
        let shared = loader.load().await;
        let mut s3 = aws_sdk_s3::config::Builder::from(&shared).force_path_style(settings.force_path_style);
        if let Some(endpoint) = &settings.endpoint {
            s3 = s3.endpoint_url(endpoint);
        }
        let mut iam = aws_sdk_iam::config::Builder::from(&shared);
        if let Some(endpoint) = settings.iam_endpoint.as_ref().or(settings.endpoint.as_ref()) {
            iam = iam.endpoint_url(endpoint);
        }
        Self {
            s3: aws_sdk_s3::Client::from_conf(s3.build()),
            iam: aws_sdk_iam::Client::from_conf(iam.build()),
            settings,
        }
    }
}

/// How long one S3 or IAM request may take before the SDK gives it up (and retries it as
/// its retry policy says); connecting keeps the SDK's default of 3.1 s. The SDK sets no
/// limit beyond connecting, so a request on a
/// connection to an endpoint that died without a reset would hold its reconcile, and the
/// lock under which buckets are created, until the kernel gave the connection up (about
/// 15 minutes). kopper's calls are small: emptying a bucket deletes at most 1,000 objects
/// a request.
fn call_timeouts() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(std::time::Duration::from_millis(3_100))
        .operation_attempt_timeout(std::time::Duration::from_secs(60))
        .build()
}

/// Turns an SDK error into a [`ProviderError`] and counts the call.
fn failed<E>(
    service: &'static str,
    operation: &'static str,
    error: SdkError<E, HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = error.raw_response().map(|response| response.status().as_u16());
    let code = error.code().map(str::to_owned);
    // A 404 is NotFound only with the service's own error code: a proxy or gateway in front
    // of S3 or IAM answers 404 for its own reasons, and "gone" lets kopper release a Bucket.
    // HeadBucket alone has no body to carry a code; `lookup_bucket` confirms its 404.
    let kind = match (&error, status, code.as_deref()) {
        (SdkError::DispatchFailure(_) | SdkError::TimeoutError(_), _, _) => FailureKind::Unavailable,
        (_, _, Some("BucketAlreadyExists")) => FailureKind::BucketNameTaken,
        (
            _,
            _,
            Some("NoSuchBucket" | "NoSuchEntity" | "NoSuchKey" | "NoSuchTagSet" | "NoSuchTagSetError"),
        ) => FailureKind::NotFound,
        (_, Some(404), _) if operation == "HeadBucket" => FailureKind::NotFound,
        (_, _, Some("SlowDown" | "Throttling" | "ThrottlingException" | "TooManyRequests"))
        | (_, Some(429 | 503), _) => FailureKind::Throttled,
        (
            _,
            _,
            Some("AccessDenied" | "AccessDeniedException" | "InvalidAccessKeyId" | "SignatureDoesNotMatch"),
        )
        | (_, Some(401 | 403), _) => FailureKind::AccessDenied,
        (_, Some(500..), _) => FailureKind::Unavailable,
        _ => FailureKind::Other,
    };
    let message = match (code, error.message(), status) {
        (Some(code), Some(message), _) => format!("{code}: {message}"),
        (Some(code), None, _) => code,
        (None, _, Some(status)) => format!("unexpected answer (HTTP {status})"),
        (None, _, None) => brief(&aws_sdk_s3::error::DisplayErrorContext(&error).to_string()),
    };
    count_provider_call(service, operation, outcome(kind));
    ProviderError { service, operation, kind, message }
}

/// Error chains of connection failures can be long; a condition message stays readable.
fn brief(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn succeeded<T>(service: &'static str, operation: &'static str, value: T) -> T {
    count_provider_call(service, operation, "success");
    value
}

/// An SDK call's answer as a [`ProviderResult`], counted as a success or a failure.
fn counted<T, E>(
    service: &'static str,
    operation: &'static str,
    result: Result<T, SdkError<E, HttpResponse>>,
) -> ProviderResult<T>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(value) => Ok(succeeded(service, operation, value)),
        Err(error) => Err(failed(service, operation, error)),
    }
}

fn outcome(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::NotFound => "not_found",
        FailureKind::BucketNameTaken => "conflict",
        FailureKind::AccessDenied => "access_denied",
        FailureKind::Throttled => "throttled",
        FailureKind::Unavailable => "unavailable",
        FailureKind::Other => "error",
    }
}

/// The answer of a read of a bucket setting: `Ok(None)` when the service says, with `absent`
/// (its error code for "this bucket has no such setting"), that the bucket has none.
fn setting<T, E>(
    operation: &'static str,
    absent: &str,
    result: Result<T, SdkError<E, HttpResponse>>,
) -> ProviderResult<Option<T>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(value) => Ok(Some(succeeded("s3", operation, value))),
        Err(error) if error.code() == Some(absent) => {
            count_provider_call("s3", operation, "not_found");
            Ok(None)
        }
        Err(error) => Err(failed("s3", operation, error)),
    }
}

/// One of kopper's lifecycle rules as the SDK builds it.
fn sdk_rule(rule: &LifecycleRule) -> Result<aws_sdk_s3::types::LifecycleRule, ProviderError> {
    let mut built = aws_sdk_s3::types::LifecycleRule::builder()
        .id(&rule.id)
        .filter(LifecycleRuleFilter::builder().prefix(&rule.prefix).build())
        .status(if rule.enabled { ExpirationStatus::Enabled } else { ExpirationStatus::Disabled });
    if let Some(days) = rule.expiration_days {
        built = built.expiration(LifecycleExpiration::builder().days(days).build());
    }
    if let Some(days) = rule.noncurrent_version_expiration_days {
        built = built.noncurrent_version_expiration(
            NoncurrentVersionExpiration::builder().noncurrent_days(days).build(),
        );
    }
    if let Some(days) = rule.abort_incomplete_multipart_upload_days {
        built = built.abort_incomplete_multipart_upload(
            AbortIncompleteMultipartUpload::builder().days_after_initiation(days).build(),
        );
    }
    built.build().map_err(|e| invalid_request("s3", "PutBucketLifecycleConfiguration", e))
}

/// A rule as the service returns it, in kopper's spelling: the prefix from the filter or
/// the older top-level field, empty for none. The older field is deprecated in the SDK, but
/// S3-compatible services still answer with it, and read without it such a rule would differ
/// from kopper's at every pass and be written again for ever.
#[allow(deprecated)]
fn read_rule(rule: &aws_sdk_s3::types::LifecycleRule) -> LifecycleRule {
    let prefix = rule.filter().and_then(|filter| filter.prefix()).or(rule.prefix()).unwrap_or_default();
    LifecycleRule {
        id: rule.id().unwrap_or_default().to_owned(),
        prefix: prefix.to_owned(),
        enabled: *rule.status() == ExpirationStatus::Enabled,
        expiration_days: rule.expiration().and_then(|expiration| expiration.days()),
        noncurrent_version_expiration_days: rule
            .noncurrent_version_expiration()
            .and_then(|expiration| expiration.noncurrent_days()),
        abort_incomplete_multipart_upload_days: rule
            .abort_incomplete_multipart_upload()
            .and_then(|abort| abort.days_after_initiation()),
    }
}

/// `Ok(None)` for NotFound, the value otherwise.
fn found<T>(result: ProviderResult<T>) -> ProviderResult<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.kind == FailureKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// `Ok(())` for NotFound: deleting what is gone succeeded.
fn gone(result: ProviderResult<()>) -> ProviderResult<()> {
    found(result).map(drop)
}

/// IAM returns policy documents URL-encoded (RFC 3986); some compatible services do not.
fn parse_policy(document: &str) -> serde_json::Value {
    serde_json::from_str(document)
        .or_else(|_| serde_json::from_str(&percent_decode(document)))
        .unwrap_or(serde_json::Value::Null)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn s3_tags(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_s3::types::Tag> {
    tags.iter()
        .filter_map(|(key, value)| aws_sdk_s3::types::Tag::builder().key(key).value(value).build().ok())
        .collect()
}

fn iam_tags(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_iam::types::Tag> {
    tags.iter()
        .filter_map(|(key, value)| aws_sdk_iam::types::Tag::builder().key(key).value(value).build().ok())
        .collect()
}

/// IAM's tags of a user or role as a map.
fn tag_map(tags: &[aws_sdk_iam::types::Tag]) -> BTreeMap<String, String> {
    tags.iter().map(|tag| (tag.key().to_owned(), tag.value().to_owned())).collect()
}

fn invalid_request(
    service: &'static str,
    operation: &'static str,
    error: impl fmt::Display,
) -> ProviderError {
    count_provider_call(service, operation, "error");
    ProviderError { service, operation, kind: FailureKind::Other, message: error.to_string() }
}

impl AwsProvider {
    /// The bucket's tags (empty when it has none), or `None` when S3 says, with its error
    /// code, that there is no such bucket.
    async fn bucket_tags(&self, bucket: &str) -> ProviderResult<Option<BTreeMap<String, String>>> {
        match self.s3.get_bucket_tagging().bucket(bucket).send().await {
            Ok(output) => Ok(Some(
                succeeded("s3", "GetBucketTagging", output)
                    .tag_set()
                    .iter()
                    .map(|tag| (tag.key().to_owned(), tag.value().to_owned()))
                    .collect(),
            )),
            Err(error) => {
                let code = error.code().map(str::to_owned);
                let error = failed("s3", "GetBucketTagging", error);
                match code.as_deref() {
                    Some("NoSuchTagSet" | "NoSuchTagSetError") => Ok(Some(BTreeMap::new())),
                    Some("NoSuchBucket") => Ok(None),
                    _ => Err(error),
                }
            }
        }
    }

    /// Whether ListBuckets lists `bucket` among this account's own buckets.
    async fn is_listed(&self, bucket: &str) -> ProviderResult<bool> {
        let mut token = None;
        loop {
            let result =
                self.s3.list_buckets().prefix(bucket).set_continuation_token(token.clone()).send().await;
            let listed = counted("s3", "ListBuckets", result)?;
            if listed.buckets().iter().any(|listed| listed.name() == Some(bucket)) {
                return Ok(true);
            }
            match listed.continuation_token() {
                // A service that hands back the token it was given would loop for good.
                Some(next) if token.as_deref() == Some(next) => {
                    return Err(ProviderError {
                        service: "s3",
                        operation: "ListBuckets",
                        kind: FailureKind::Other,
                        message: "ListBuckets returned the continuation token it was sent".into(),
                    });
                }
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => return Ok(false),
            }
        }
    }

    async fn delete_one_batch(&self, bucket: &str) -> ProviderResult<u64> {
        let batch = self.settings.delete_batch.unwrap_or(MAX_DELETE_BATCH).clamp(1, MAX_DELETE_BATCH);
        let listed = self.s3.list_object_versions().bucket(bucket).max_keys(i32::from(batch)).send().await;
        let listed = counted("s3", "ListObjectVersions", listed)?;
        let versions = listed.versions().iter().map(|v| (v.key(), v.version_id()));
        let markers = listed.delete_markers().iter().map(|m| (m.key(), m.version_id()));
        let objects: Vec<ObjectIdentifier> = versions
            .chain(markers)
            .filter_map(|(key, version)| {
                ObjectIdentifier::builder()
                    .set_key(key.map(str::to_owned))
                    .set_version_id(version.map(str::to_owned))
                    .build()
                    .ok()
            })
            .collect();
        if objects.is_empty() {
            return Ok(0);
        }
        let count = objects.len() as u64;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| invalid_request("s3", "DeleteObjects", e))?;
        let deleted = self.s3.delete_objects().bucket(bucket).delete(delete).send().await;
        let deleted = counted("s3", "DeleteObjects", deleted)?;
        if let Some(error) = deleted.errors().first() {
            return Err(ProviderError {
                service: "s3",
                operation: "DeleteObjects",
                kind: FailureKind::Other,
                message: format!(
                    "{} objects could not be deleted, e.g. {:?}: {}",
                    deleted.errors().len(),
                    error.key().unwrap_or_default(),
                    error.message().unwrap_or_default()
                ),
            });
        }
        Ok(count)
    }
}

/// The marker of an IAM listing's next page, `None` after the last. A service that says the
/// list goes on but gives no marker would leave it partial (and a Bucket's cleanup would miss
/// a grant's user), and one that hands back a marker it gave before would loop for good: both
/// are errors, retried by the pass.
fn next_page(
    operation: &'static str,
    seen: &mut HashSet<String>,
    truncated: bool,
    marker: Option<&str>,
) -> ProviderResult<Option<String>> {
    if !truncated {
        return Ok(None);
    }
    let broken = |message: &str| ProviderError {
        service: "iam",
        operation,
        kind: FailureKind::Other,
        message: format!("{operation} {message}"),
    };
    match marker {
        Some(next) if !next.is_empty() && !seen.insert(next.to_owned()) => {
            Err(broken("returned a marker it had returned before"))
        }
        Some(next) if !next.is_empty() => Ok(Some(next.to_owned())),
        _ => Err(broken("said the list goes on but gave no marker")),
    }
}

impl Provider for AwsProvider {
    fn endpoint(&self) -> Option<&str> {
        self.settings.endpoint.as_deref()
    }

    fn default_region(&self) -> &str {
        &self.settings.region
    }

    /// HeadBucket answers without a body, so its 403 and 404 carry no error code and may come
    /// from a policy or a gateway rather than from S3's knowledge of the bucket; each is
    /// checked with a call that does answer with S3's own evidence before it is believed.
    fn lookup_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<BucketLookup>> {
        async move {
            let head = self.s3.head_bucket().bucket(bucket).send().await;
            if let Err(error) = head {
                let status = error.raw_response().map(|response| response.status().as_u16());
                let error = failed("s3", "HeadBucket", error);
                match status {
                    // Missing only if GetBucketTagging says NoSuchBucket; its tags if it answers.
                    Some(404) => {}
                    // Another account's bucket, unless it is one of this account's own, which
                    // kopper is merely not allowed to look at (an SCP, an endpoint policy).
                    Some(403) if self.is_listed(bucket).await? => return Err(error),
                    Some(403) => return Ok(BucketLookup::OtherAccount),
                    _ => return Err(error),
                }
            } else {
                count_provider_call("s3", "HeadBucket", "success");
            }
            Ok(match self.bucket_tags(bucket).await? {
                Some(tags) => BucketLookup::Ours { tags },
                None => BucketLookup::Missing,
            })
        }
        .boxed()
    }

    fn create_bucket<'a>(&'a self, bucket: &'a str, region: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let mut request = self.s3.create_bucket().bucket(bucket);
            // us-east-1 is the one region S3 refuses to be named as a location constraint.
            if region != "us-east-1" {
                let configuration = CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build();
                request = request.create_bucket_configuration(configuration);
            }
            match request.send().await {
                Ok(output) => {
                    succeeded("s3", "CreateBucket", output);
                    Ok(())
                }
                Err(error) if error.code() == Some("BucketAlreadyOwnedByYou") => {
                    count_provider_call("s3", "CreateBucket", "success");
                    Ok(())
                }
                Err(error) => Err(failed("s3", "CreateBucket", error)),
            }
        }
        .boxed()
    }

    fn tag_bucket<'a>(
        &'a self,
        bucket: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let tagging = Tagging::builder()
                .set_tag_set(Some(s3_tags(tags)))
                .build()
                .map_err(|e| invalid_request("s3", "PutBucketTagging", e))?;
            let result = self.s3.put_bucket_tagging().bucket(bucket).tagging(tagging).send().await;
            counted("s3", "PutBucketTagging", result).map(drop)
        }
        .boxed()
    }

    fn versioning<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>> {
        async move {
            let output = self.s3.get_bucket_versioning().bucket(bucket).send().await;
            let output = counted("s3", "GetBucketVersioning", output)?;
            Ok(output.status() == Some(&BucketVersioningStatus::Enabled))
        }
        .boxed()
    }

    fn set_versioning<'a>(&'a self, bucket: &'a str, enabled: bool) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let status =
                if enabled { BucketVersioningStatus::Enabled } else { BucketVersioningStatus::Suspended };
            let configuration = VersioningConfiguration::builder().status(status).build();
            let result = self
                .s3
                .put_bucket_versioning()
                .bucket(bucket)
                .versioning_configuration(configuration)
                .send()
                .await;
            counted("s3", "PutBucketVersioning", result).map(drop)
        }
        .boxed()
    }

    fn encryption<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Option<Encryption>>> {
        async move {
            let result = self.s3.get_bucket_encryption().bucket(bucket).send().await;
            let absent = "ServerSideEncryptionConfigurationNotFoundError";
            let Some(output) = setting("GetBucketEncryption", absent, result)? else { return Ok(None) };
            let rules = output.server_side_encryption_configuration().map(|c| c.rules()).unwrap_or_default();
            let default = rules.iter().find_map(|rule| rule.apply_server_side_encryption_by_default());
            Ok(default.map(|default| Encryption {
                algorithm: default.sse_algorithm().as_str().to_owned(),
                kms_key_id: default.kms_master_key_id().map(str::to_owned),
            }))
        }
        .boxed()
    }

    fn set_encryption<'a>(
        &'a self,
        bucket: &'a str,
        encryption: &'a Encryption,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let default = ServerSideEncryptionByDefault::builder()
                .sse_algorithm(ServerSideEncryption::from(encryption.algorithm.as_str()))
                .set_kms_master_key_id(encryption.kms_key_id.clone())
                .build()
                .map_err(|e| invalid_request("s3", "PutBucketEncryption", e))?;
            let rule =
                ServerSideEncryptionRule::builder().apply_server_side_encryption_by_default(default).build();
            let configuration = ServerSideEncryptionConfiguration::builder()
                .rules(rule)
                .build()
                .map_err(|e| invalid_request("s3", "PutBucketEncryption", e))?;
            let request = self
                .s3
                .put_bucket_encryption()
                .bucket(bucket)
                .server_side_encryption_configuration(configuration);
            counted("s3", "PutBucketEncryption", request.send().await).map(drop)
        }
        .boxed()
    }

    fn public_access_block<'a>(
        &'a self,
        bucket: &'a str,
    ) -> BoxFuture<'a, ProviderResult<PublicAccessBlock>> {
        async move {
            let result = self.s3.get_public_access_block().bucket(bucket).send().await;
            let absent = "NoSuchPublicAccessBlockConfiguration";
            let found = setting("GetPublicAccessBlock", absent, result)?;
            let Some(block) = found.as_ref().and_then(|output| output.public_access_block_configuration())
            else {
                return Ok(PublicAccessBlock::default());
            };
            Ok(PublicAccessBlock {
                block_public_acls: block.block_public_acls().unwrap_or(false),
                ignore_public_acls: block.ignore_public_acls().unwrap_or(false),
                block_public_policy: block.block_public_policy().unwrap_or(false),
                restrict_public_buckets: block.restrict_public_buckets().unwrap_or(false),
            })
        }
        .boxed()
    }

    fn set_public_access_block<'a>(
        &'a self,
        bucket: &'a str,
        block: &'a PublicAccessBlock,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let configuration = PublicAccessBlockConfiguration::builder()
                .block_public_acls(block.block_public_acls)
                .ignore_public_acls(block.ignore_public_acls)
                .block_public_policy(block.block_public_policy)
                .restrict_public_buckets(block.restrict_public_buckets)
                .build();
            let request = self
                .s3
                .put_public_access_block()
                .bucket(bucket)
                .public_access_block_configuration(configuration);
            counted("s3", "PutPublicAccessBlock", request.send().await).map(drop)
        }
        .boxed()
    }

    fn lifecycle<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<Vec<LifecycleRule>>> {
        async move {
            let result = self.s3.get_bucket_lifecycle_configuration().bucket(bucket).send().await;
            let found = setting("GetBucketLifecycleConfiguration", "NoSuchLifecycleConfiguration", result)?;
            Ok(found.map(|output| output.rules().iter().map(read_rule).collect()).unwrap_or_default())
        }
        .boxed()
    }

    fn set_lifecycle<'a>(
        &'a self,
        bucket: &'a str,
        rules: &'a [LifecycleRule],
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            if rules.is_empty() {
                let result = self.s3.delete_bucket_lifecycle().bucket(bucket).send().await;
                return gone(counted("s3", "DeleteBucketLifecycle", result).map(drop));
            }
            let rules = rules.iter().map(sdk_rule).collect::<Result<Vec<_>, _>>()?;
            let configuration = BucketLifecycleConfiguration::builder()
                .set_rules(Some(rules))
                .build()
                .map_err(|e| invalid_request("s3", "PutBucketLifecycleConfiguration", e))?;
            let request = self
                .s3
                .put_bucket_lifecycle_configuration()
                .bucket(bucket)
                .lifecycle_configuration(configuration);
            counted("s3", "PutBucketLifecycleConfiguration", request.send().await).map(drop)
        }
        .boxed()
    }

    fn bucket_is_empty<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<bool>> {
        async move {
            let listed = self.s3.list_object_versions().bucket(bucket).max_keys(1).send().await;
            let listed = counted("s3", "ListObjectVersions", listed)?;
            Ok(listed.versions().is_empty() && listed.delete_markers().is_empty())
        }
        .boxed()
    }

    fn empty_batch<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<u64>> {
        self.delete_one_batch(bucket).boxed()
    }

    fn delete_bucket<'a>(&'a self, bucket: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.s3.delete_bucket().bucket(bucket).send().await;
            gone(counted("s3", "DeleteBucket", result).map(drop))
        }
        .boxed()
    }

    fn users<'a>(
        &'a self,
        path_prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Vec<String>>> {
        async move {
            let (mut names, mut seen) = (Vec::new(), HashSet::new());
            let mut marker: Option<String> = None;
            loop {
                let request = self.iam.list_users().path_prefix(path_prefix).set_marker(marker.clone());
                let listed = counted("iam", "ListUsers", request.send().await)?;
                // A service that ignores the path prefix lists every user: only those under it count.
                let page = listed.users().iter().filter(|user| user.path().starts_with(path_prefix));
                let page = page.map(|user| user.user_name());
                names.extend(page.filter(|name| name.starts_with(name_prefix)).map(str::to_owned));
                marker = next_page("ListUsers", &mut seen, listed.is_truncated(), listed.marker())?;
                if marker.is_none() {
                    return Ok(names);
                }
            }
        }
        .boxed()
    }

    fn user_tags<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>> {
        async move {
            let result = self.iam.list_user_tags().user_name(user).send().await;
            let result = counted("iam", "ListUserTags", result).map(|output| tag_map(output.tags()));
            found(result)
        }
        .boxed()
    }

    fn create_user<'a>(
        &'a self,
        user: &'a str,
        path: &'a str,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let request = self.iam.create_user().user_name(user).path(path).set_tags(Some(iam_tags(tags)));
            let result = request.send().await;
            counted("iam", "CreateUser", result).map(drop)
        }
        .boxed()
    }

    fn delete_user<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.iam.delete_user().user_name(user).send().await;
            gone(counted("iam", "DeleteUser", result).map(drop))
        }
        .boxed()
    }

    fn user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>> {
        async move {
            let result = self.iam.get_user_policy().user_name(user).policy_name(policy).send().await;
            let result =
                counted("iam", "GetUserPolicy", result).map(|output| parse_policy(output.policy_document()));
            found(result)
        }
        .boxed()
    }

    fn put_user_policy<'a>(
        &'a self,
        user: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let request = self
                .iam
                .put_user_policy()
                .user_name(user)
                .policy_name(policy)
                .policy_document(document.to_string());
            let result = request.send().await;
            counted("iam", "PutUserPolicy", result).map(drop)
        }
        .boxed()
    }

    fn delete_user_policy<'a>(&'a self, user: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.iam.delete_user_policy().user_name(user).policy_name(policy).send().await;
            gone(counted("iam", "DeleteUserPolicy", result).map(drop))
        }
        .boxed()
    }

    fn access_keys<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<Vec<AccessKey>>> {
        async move {
            let result = self.iam.list_access_keys().user_name(user).send().await;
            let output = counted("iam", "ListAccessKeys", result)?;
            Ok(output
                .access_key_metadata()
                .iter()
                .filter_map(|key| {
                    let id = key.access_key_id()?.to_owned();
                    Some(AccessKey { id, created: key.create_date().and_then(timestamp) })
                })
                .collect())
        }
        .boxed()
    }

    fn create_access_key<'a>(&'a self, user: &'a str) -> BoxFuture<'a, ProviderResult<NewAccessKey>> {
        async move {
            let result = self.iam.create_access_key().user_name(user).send().await;
            let output = counted("iam", "CreateAccessKey", result)?;
            let key = output.access_key().ok_or_else(|| ProviderError {
                service: "iam",
                operation: "CreateAccessKey",
                kind: FailureKind::Other,
                message: "the answer held no access key".into(),
            })?;
            Ok(NewAccessKey {
                id: key.access_key_id().to_owned(),
                secret: key.secret_access_key().to_owned(),
                created: key.create_date().and_then(timestamp),
            })
        }
        .boxed()
    }

    fn delete_access_key<'a>(&'a self, user: &'a str, key_id: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.iam.delete_access_key().user_name(user).access_key_id(key_id).send().await;
            gone(counted("iam", "DeleteAccessKey", result).map(drop))
        }
        .boxed()
    }

    fn roles<'a>(&'a self, path_prefix: &'a str) -> BoxFuture<'a, ProviderResult<Vec<String>>> {
        async move {
            let (mut names, mut seen) = (Vec::new(), HashSet::new());
            let mut marker: Option<String> = None;
            loop {
                let request = self.iam.list_roles().path_prefix(path_prefix).set_marker(marker.clone());
                let result = request.send().await;
                let listed = counted("iam", "ListRoles", result)?;
                // A service that ignores the path prefix lists every role: only ours count.
                let page = listed.roles().iter().filter(|role| role.path().starts_with(path_prefix));
                names.extend(page.map(|role| role.role_name().to_owned()));
                marker = next_page("ListRoles", &mut seen, listed.is_truncated(), listed.marker())?;
                if marker.is_none() {
                    return Ok(names);
                }
            }
        }
        .boxed()
    }

    fn role_tags<'a>(
        &'a self,
        role: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<BTreeMap<String, String>>>> {
        async move {
            let result = self.iam.list_role_tags().role_name(role).send().await;
            let result = counted("iam", "ListRoleTags", result).map(|output| tag_map(output.tags()));
            found(result)
        }
        .boxed()
    }

    fn role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<Option<Role>>> {
        async move {
            let result = self.iam.get_role().role_name(role).send().await;
            let result = counted("iam", "GetRole", result).and_then(|output| {
                let role = output.role().ok_or_else(|| ProviderError {
                    service: "iam",
                    operation: "GetRole",
                    kind: FailureKind::Other,
                    message: "the answer held no role".into(),
                })?;
                let trust = role.assume_role_policy_document().map(parse_policy).unwrap_or_default();
                Ok(Role { arn: role.arn().to_owned(), trust })
            });
            found(result)
        }
        .boxed()
    }

    fn create_role<'a>(
        &'a self,
        role: &'a str,
        path: &'a str,
        trust: &'a serde_json::Value,
        tags: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, ProviderResult<String>> {
        async move {
            let request = self
                .iam
                .create_role()
                .role_name(role)
                .path(path)
                .assume_role_policy_document(trust.to_string())
                .set_tags(Some(iam_tags(tags)));
            let output = counted("iam", "CreateRole", request.send().await)?;
            output.role().map(|role| role.arn().to_owned()).ok_or_else(|| ProviderError {
                service: "iam",
                operation: "CreateRole",
                kind: FailureKind::Other,
                message: "the answer held no role".into(),
            })
        }
        .boxed()
    }

    fn update_trust_policy<'a>(
        &'a self,
        role: &'a str,
        trust: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let request =
                self.iam.update_assume_role_policy().role_name(role).policy_document(trust.to_string());
            counted("iam", "UpdateAssumeRolePolicy", request.send().await).map(drop)
        }
        .boxed()
    }

    fn delete_role<'a>(&'a self, role: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.iam.delete_role().role_name(role).send().await;
            gone(counted("iam", "DeleteRole", result).map(drop))
        }
        .boxed()
    }

    fn role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
    ) -> BoxFuture<'a, ProviderResult<Option<serde_json::Value>>> {
        async move {
            let result = self.iam.get_role_policy().role_name(role).policy_name(policy).send().await;
            let result =
                counted("iam", "GetRolePolicy", result).map(|output| parse_policy(output.policy_document()));
            found(result)
        }
        .boxed()
    }

    fn put_role_policy<'a>(
        &'a self,
        role: &'a str,
        policy: &'a str,
        document: &'a serde_json::Value,
    ) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let request = self
                .iam
                .put_role_policy()
                .role_name(role)
                .policy_name(policy)
                .policy_document(document.to_string());
            counted("iam", "PutRolePolicy", request.send().await).map(drop)
        }
        .boxed()
    }

    fn delete_role_policy<'a>(&'a self, role: &'a str, policy: &'a str) -> BoxFuture<'a, ProviderResult<()>> {
        async move {
            let result = self.iam.delete_role_policy().role_name(role).policy_name(policy).send().await;
            gone(counted("iam", "DeleteRolePolicy", result).map(drop))
        }
        .boxed()
    }
}

/// An IAM date as a timestamp.
fn timestamp(date: &aws_sdk_iam::primitives::DateTime) -> Option<k8s_openapi::jiff::Timestamp> {
    k8s_openapi::jiff::Timestamp::new(date.secs(), date.subsec_nanos().try_into().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing ends on its last page, and only there: a page that says more follows but
    /// gives no marker, or a marker given before (a cycle), is an error, not a partial list.
    #[test]
    fn an_iam_listing_ends_only_on_its_last_page() {
        let mut seen = HashSet::new();
        assert_eq!(next_page("ListUsers", &mut seen, true, Some("a")).unwrap(), Some("a".into()));
        assert_eq!(next_page("ListUsers", &mut seen, true, Some("b")).unwrap(), Some("b".into()));
        let cycle = next_page("ListUsers", &mut seen, true, Some("a")).unwrap_err();
        assert!(cycle.message.contains("returned before"), "{}", cycle.message);
        assert!(next_page("ListUsers", &mut seen, true, None).is_err());
        assert!(next_page("ListUsers", &mut seen, true, Some("")).is_err());
        assert_eq!(next_page("ListUsers", &mut seen, false, Some("c")).unwrap(), None);
    }

    #[test]
    fn policies_are_read_whether_or_not_they_are_url_encoded() {
        let policy = serde_json::json!({"Version": "2012-10-17", "Statement": []});
        assert_eq!(parse_policy(&policy.to_string()), policy);
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D";
        assert_eq!(parse_policy(encoded), policy);
    }
}
