//! BucketClasses: the backend and the settings a cluster admin enforces on every bucket of a
//! class, read back from S3 (moto), quotas per namespace, the default class, converging a
//! changed class, and a class held while Buckets use it. On moto, as the other Bucket tests.

use super::*;

use kopper::controllers::bucket::enforced::{LifecycleRule, PublicAccessBlock};
use kopper::controllers::bucket::types::BucketClass;

const DEFAULT_ANNOTATION: &str = "kopper.dev/is-default-class";
const CLASS_FINALIZER: &str = "kopper.dev/bucket-class-in-use";

fn classes(cluster: &Cluster) -> Api<BucketClass> {
    Api::all(cluster.client.clone())
}

async fn create_class(cluster: &Cluster, name: &str, spec: serde_json::Value, default: bool) {
    let annotations = if default { json!({DEFAULT_ANNOTATION: "true"}) } else { json!({}) };
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name, "annotations": annotations}, "spec": spec,
    }))
    .unwrap();
    classes(cluster).create(&PostParams::default(), &class).await.unwrap();
}

async fn patch_class(cluster: &Cluster, name: &str, spec: serde_json::Value) {
    let patch = Patch::Merge(json!({"spec": spec}));
    classes(cluster).patch(name, &PatchParams::default(), &patch).await.unwrap();
}

/// The bucket's tags as S3 holds them.
async fn bucket_tags(s3: &impl Provider, name: &str) -> BTreeMap<String, String> {
    match s3.lookup_bucket(name).await.unwrap() {
        BucketLookup::Ours { tags } => tags,
        other => panic!("no bucket {name}: {other:?}"),
    }
}

/// The bucket's versioning state as S3 says it, read raw: moto answers GetBucketVersioning with
/// a root element real S3 does not use, which the Rust SDK refuses to parse.
async fn versioning(moto: &Moto, name: &str) -> String {
    let address = moto.endpoint.trim_start_matches("http://");
    let (_, body) = common::http_get(address, &format!("/{name}?versioning")).await.unwrap();
    body
}

#[tokio::test]
async fn a_class_enforces_encryption_and_a_public_access_block_read_back_from_s3() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;
    create_class(
        &cluster,
        "secure",
        json!({"encryption": {"algorithm": "AES256"}, "tags": {"cost": "42"}}),
        false,
    )
    .await;

    create_bucket(&cluster, "data", json!({"className": "secure", "tags": {"team": "a"}})).await;
    let ready = status(&wait_for_reason(&cluster, "data", "Ready").await);
    let name = ready.bucket_name.clone().unwrap();
    assert_eq!(ready.class_name.as_deref(), Some("secure"));
    assert_eq!(ready.backend.as_deref(), Some(moto.endpoint.as_str()));

    let encryption = s3.encryption(&name).await.unwrap().expect("default encryption");
    assert_eq!(encryption.algorithm, "AES256");
    assert_eq!(s3.public_access_block(&name).await.unwrap(), PublicAccessBlock::ALL, "all four settings");
    let tags = bucket_tags(&s3, &name).await;
    assert_eq!((tags["cost"].as_str(), tags["team"].as_str()), ("42", "a"), "{tags:?}");

    let class = eventually("the class to count its Bucket and hold its finalizer", || async {
        let class = classes(&cluster).get("secure").await.unwrap();
        let counted = class.status.as_ref().is_some_and(|status| status.buckets_using == 1);
        (counted && class.finalizers().iter().any(|f| f == CLASS_FINALIZER)).then_some(class)
    })
    .await;
    let ready_condition = &class.status.unwrap().conditions[0];
    assert_eq!((ready_condition.type_.as_str(), ready_condition.status.as_str()), ("Ready", "True"));
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn lifecycle_rules_and_versioning_are_enforced_and_read_back() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;
    let spec = json!({
        "versioning": "Enabled",
        "blockPublicAccess": false,
        "lifecycleRules": [
            {"id": "logs", "prefix": "logs/", "expirationDays": 30},
            {"id": "versions", "noncurrentVersionExpirationDays": 7, "abortIncompleteMultipartUploadDays": 2},
        ],
    });
    create_class(&cluster, "kept", spec, false).await;
    create_bucket(&cluster, "history", json!({"className": "kept"})).await;
    let name = status(&wait_for_reason(&cluster, "history", "Ready").await).bucket_name.unwrap();

    assert!(versioning(&moto, &name).await.contains("<Status>Enabled</Status>"));
    let mut rules = s3.lifecycle(&name).await.unwrap();
    rules.sort();
    let expected = [
        LifecycleRule {
            id: "logs".into(),
            prefix: "logs/".into(),
            enabled: true,
            expiration_days: Some(30),
            ..LifecycleRule::default()
        },
        LifecycleRule {
            id: "versions".into(),
            enabled: true,
            noncurrent_version_expiration_days: Some(7),
            abort_incomplete_multipart_upload_days: Some(2),
            ..LifecycleRule::default()
        },
    ];
    assert_eq!(rules, expected);
    assert_eq!(s3.public_access_block(&name).await.unwrap(), PublicAccessBlock::default(), "not enforced");

    // A Bucket asking to turn versioning off in this class is refused, and gets nothing.
    create_bucket(&cluster, "no-history", json!({"className": "kept", "versioning": false})).await;
    let refused = status(&wait_for_reason(&cluster, "no-history", "ForbiddenByClass").await);
    let message = &refused.conditions[0].message;
    assert!(message.contains("spec.versioning") && message.contains("BucketClass kept"), "{message}");
    assert!(refused.bucket_name.is_none(), "{refused:?}");
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn a_quota_refuses_the_extra_bucket_until_an_older_one_is_deleted() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;
    create_class(&cluster, "small", json!({"maxBucketsPerNamespace": 1}), false).await;

    create_bucket(&cluster, "first", json!({"className": "small"})).await;
    wait_for_reason(&cluster, "first", "Ready").await;
    let second = create_bucket(&cluster, "second", json!({"className": "small"})).await;
    let refused = status(&wait_for_reason(&cluster, "second", "QuotaExceeded").await);
    let message = &refused.conditions[0].message;
    assert!(message.contains("BucketClass small") && message.contains("allows 1"), "{message}");
    assert!(refused.bucket_name.is_none(), "{refused:?}");
    let derived = owner(&second).default_bucket_name();
    assert_eq!(s3.lookup_bucket(&derived).await.unwrap(), BucketLookup::Missing, "nothing was created");
    assert!(secret(&cluster, "second-s3").await.is_none());

    delete_and_wait_gone(&cluster, "first").await;
    let proceeded = status(&wait_for_reason(&cluster, "second", "Ready").await);
    assert_eq!(proceeded.bucket_name, Some(derived));
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn a_class_change_converges_every_bucket_of_it_including_those_on_the_default() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;
    // Made before any class: kopper's built-in class, and it stays there.
    create_bucket(&cluster, "early", json!({})).await;
    let early = status(&wait_for_reason(&cluster, "early", "Ready").await);
    assert_eq!(early.class_name, None, "no class at all: the built-in one");

    let spec = json!({"encryption": {"algorithm": "AES256"}, "tags": {"tier": "gold"}});
    create_class(&cluster, "standard", spec, true).await;
    create_bucket(&cluster, "named", json!({"className": "standard"})).await;
    create_bucket(&cluster, "defaulted", json!({})).await;
    let mut names = Vec::new();
    for bucket in ["named", "defaulted"] {
        let ready = status(&wait_for_reason(&cluster, bucket, "Ready").await);
        assert_eq!(ready.class_name.as_deref(), Some("standard"), "{bucket}");
        names.push(ready.bucket_name.unwrap());
    }

    patch_class(
        &cluster,
        "standard",
        json!({"encryption": {"algorithm": "aws:kms", "kmsKeyId": "k-1"}, "tags": {"tier": "silver"}}),
    )
    .await;
    for name in &names {
        eventually(&format!("bucket {name} to follow the class"), || async {
            let encryption = s3.encryption(name).await.unwrap()?;
            let tags = bucket_tags(&s3, name).await;
            (encryption.algorithm == "aws:kms" && tags.get("tier").map(String::as_str) == Some("silver"))
                .then_some(())
        })
        .await;
    }
    let early_tags = bucket_tags(&s3, &early.bucket_name.unwrap()).await;
    assert!(
        !early_tags.contains_key("tier"),
        "a Bucket of the built-in class is not the default's: {early_tags:?}"
    );
    let early = status(&buckets(&cluster).get("early").await.unwrap());
    assert_eq!(early.class_name, None);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_class_is_reported_and_a_class_in_use_is_held_until_its_buckets_are_gone() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    create_bucket(&cluster, "waiting", json!({"className": "later", "deletionPolicy": "Delete"})).await;
    let missing = status(&wait_for_reason(&cluster, "waiting", "ClassNotFound").await);
    assert!(missing.conditions[0].message.contains("BucketClass later"), "{missing:?}");
    assert!(missing.bucket_name.is_none());

    create_class(&cluster, "later", json!({}), false).await;
    wait_for_reason(&cluster, "waiting", "Ready").await;

    classes(&cluster).delete("later", &DeleteParams::default()).await.unwrap();
    let held = classes(&cluster).get("later").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some() && held.finalizers().contains(&CLASS_FINALIZER.to_owned())
    );
    // The Bucket still works with it, and is cleaned up on its backend.
    delete_and_wait_gone(&cluster, "waiting").await;
    eventually("the class to go once no Bucket uses it", || async {
        classes(&cluster).get_opt("later").await.unwrap().is_none().then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// A Bucket of a converged class costs an idle pass reads only: encryption, public-access
/// block and lifecycle rules are read back and compared, none written.
#[tokio::test]
async fn an_idle_pass_on_a_converged_class_writes_nothing() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let admin = common::free_admin_addr();
    let operator = start_operator_at(&cluster, &proxy.endpoint, &["--admin-addr", &admin]);
    let spec = json!({
        "encryption": {"algorithm": "aws:kms", "kmsKeyId": "key-1"},
        "lifecycleRules": [{"id": "tmp", "prefix": "tmp/", "expirationDays": 1}],
        "tags": {"cost": "1"},
    });
    create_class(&cluster, "steady", spec, false).await;
    create_bucket(&cluster, "steady", json!({"className": "steady"})).await;
    wait_for_reason(&cluster, "steady", "Ready").await;

    proxy.reset_calls().await;
    let reconciles = eventually("kopper's reconcile count", || bucket_reconciles(&admin)).await;
    let label = Patch::Merge(json!({"metadata": {"labels": {"audited": "yes"}}}));
    Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE)
        .patch("steady-s3", &PatchParams::default(), &label)
        .await
        .unwrap();
    eventually("a pass after the Secret change", || async {
        (bucket_reconciles(&admin).await? > reconciles).then_some(())
    })
    .await;
    let calls = proxy.calls().await;
    for read in ["GetBucketEncryption", "GetPublicAccessBlock", "GetBucketLifecycleConfiguration"] {
        assert!(calls.iter().any(|call| call.operation == read), "the pass read {read}: {calls:?}");
    }
    let writes: Vec<_> = calls.iter().filter(|call| call.is_write()).map(|c| &c.operation).collect();
    assert!(writes.is_empty(), "an idle pass wrote to S3 or IAM: {writes:?}");
    operator.stop().await.unwrap();
}

/// A class with its own backend (a second moto, with kopper's credentials for it in a Secret
/// of kopper's namespace) gets its buckets there; pointing the class elsewhere afterwards
/// stops its Buckets (BackendChanged), deletion included, until it points back.
#[tokio::test]
async fn a_class_s_backend_gets_its_buckets_and_a_moved_backend_holds_them() {
    let Some(moto) = Moto::start().await else { return };
    let Some(other) = Moto::start().await else { return };
    let cluster = cluster().await;
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": "other-admin", "namespace": "kopper-system"},
        "stringData": {"AWS_ACCESS_KEY_ID": "other", "AWS_SECRET_ACCESS_KEY": "other"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), "kopper-system")
        .create(&PostParams::default(), &keys)
        .await
        .unwrap();
    let operator = start_operator(&cluster, &moto);
    let backend = |endpoint: &str| json!({"backend": {"region": REGION, "endpoint": endpoint, "forcePathStyle": true, "credentialsSecret": "other-admin"}});
    create_class(&cluster, "elsewhere", backend(&other.endpoint), false).await;
    create_bucket(&cluster, "remote", json!({"className": "elsewhere", "deletionPolicy": "Delete"})).await;
    let ready = status(&wait_for_reason(&cluster, "remote", "Ready").await);
    let name = ready.bucket_name.unwrap();
    assert_eq!(ready.backend.as_deref(), Some(other.endpoint.as_str()));
    assert!(matches!(other.client().await.lookup_bucket(&name).await.unwrap(), BucketLookup::Ours { .. }));
    assert_eq!(moto.client().await.lookup_bucket(&name).await.unwrap(), BucketLookup::Missing);
    let secret = secret(&cluster, "remote-s3").await.unwrap();
    assert_eq!(
        value(&secret, "AWS_ENDPOINT_URL"),
        other.endpoint,
        "the workload is sent to the class's backend"
    );

    patch_class(&cluster, "elsewhere", backend(&moto.endpoint)).await;
    let moved = status(&wait_for_reason(&cluster, "remote", "BackendChanged").await);
    assert!(moved.conditions[0].message.contains(&other.endpoint), "{moved:?}");
    buckets(&cluster).delete("remote", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        buckets(&cluster).get_opt("remote").await.unwrap().is_some(),
        "held while its backend is elsewhere"
    );
    patch_class(&cluster, "elsewhere", backend(&other.endpoint)).await;
    eventually("the Bucket to be cleaned up on its own backend", || async {
        buckets(&cluster).get_opt("remote").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(
        other.client().await.lookup_bucket(&name).await.unwrap(),
        BucketLookup::Missing,
        "deleted there"
    );
    operator.stop().await.unwrap();
}
