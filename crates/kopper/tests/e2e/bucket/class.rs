//! BucketClasses: the backend and the settings a cluster admin enforces on every bucket of a
//! class, read back from S3 (moto), quotas per namespace, the default class, converging a
//! changed class, and a class held while Buckets use it. On moto, as the other Bucket tests.

use super::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopper::controllers::bucket::enforced::{LifecycleRule, PublicAccessBlock};
use kopper::controllers::bucket::types::BucketClass;

const DEFAULT_ANNOTATION: &str = "kopper.dev/is-default-class";
const CLASS_FINALIZER: &str = "kopper.dev/bucket-class-in-use";

fn classes(cluster: &Cluster) -> Api<BucketClass> {
    Api::all(cluster.client.clone())
}

pub(super) async fn create_class(cluster: &Cluster, name: &str, spec: serde_json::Value, default: bool) {
    let annotations = if default { json!({DEFAULT_ANNOTATION: "true"}) } else { json!({}) };
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name, "annotations": annotations}, "spec": spec,
    }))
    .unwrap();
    classes(cluster).create(&PostParams::default(), &class).await.unwrap();
}

pub(super) async fn patch_class(cluster: &Cluster, name: &str, spec: serde_json::Value) {
    let patch = Patch::Merge(json!({"spec": spec}));
    classes(cluster).patch(name, &PatchParams::default(), &patch).await.unwrap();
}

/// A Secret `name` of kopper's credentials for another account (moto takes any key), in
/// kopper's own namespace, as a class's `backend.credentialsSecret` names one.
pub(super) async fn create_admin_secret(cluster: &Cluster, name: &str) {
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kopper-system"},
        "stringData": {"AWS_ACCESS_KEY_ID": "other", "AWS_SECRET_ACCESS_KEY": "other"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), "kopper-system")
        .create(&PostParams::default(), &keys)
        .await
        .unwrap();
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
    let backend = ready.backend.clone().unwrap_or_default();
    assert!(backend.starts_with(&format!("{} region={REGION}", moto.endpoint)), "{backend}");

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
    create_admin_secret(&cluster, "other-admin").await;
    let operator = start_operator(&cluster, &moto);
    let backend = |endpoint: &str| json!({"backend": {"region": REGION, "endpoint": endpoint, "forcePathStyle": true, "credentialsSecret": "other-admin"}});
    create_class(&cluster, "elsewhere", backend(&other.endpoint), false).await;
    create_bucket(&cluster, "remote", json!({"className": "elsewhere", "deletionPolicy": "Delete"})).await;
    let ready = status(&wait_for_reason(&cluster, "remote", "Ready").await);
    let name = ready.bucket_name.unwrap();
    let recorded = ready.backend.clone().unwrap_or_default();
    assert!(recorded.starts_with(&format!("{} region={REGION}", other.endpoint)), "{recorded}");
    assert!(
        !recorded.contains("other-admin"),
        "no Secret name of kopper's namespace for tenants: {recorded}"
    );
    assert!(matches!(other.client().await.lookup_bucket(&name).await.unwrap(), BucketLookup::Ours { .. }));
    assert_eq!(moto.client().await.lookup_bucket(&name).await.unwrap(), BucketLookup::Missing);
    let secret = secret(&cluster, "remote-s3").await.unwrap();
    assert_eq!(
        value(&secret, "AWS_ENDPOINT_URL"),
        other.endpoint,
        "the workload is sent to the class's backend"
    );

    // Other credentials are another account: its Buckets stop rather than get a user there.
    create_admin_secret(&cluster, "another-admin").await;
    patch_class(&cluster, "elsewhere", json!({"backend": {"credentialsSecret": "another-admin"}})).await;
    wait_for_reason(&cluster, "remote", "BackendChanged").await;
    patch_class(&cluster, "elsewhere", json!({"backend": {"credentialsSecret": "other-admin"}})).await;
    wait_for_reason(&cluster, "remote", "Ready").await;

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

/// Old CRDs (no BucketClass CRD): kopper does not bind a Bucket to its built-in class for good
/// because it could not list classes; the Bucket waits, saying so, and takes the default class
/// once the CRD and a default class are there.
#[tokio::test]
async fn without_the_class_crd_a_bucket_waits_and_then_takes_the_default_class() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = Cluster::start().await;
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    let (class_crd, others): (Vec<_>, Vec<_>) =
        kopper::crds::all().into_iter().partition(|crd| crd.name_any() == "bucketclasses.kopper.dev");
    for crd in others {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    for name in ["kopper-system", NAMESPACE] {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(cluster.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    common::moto::create_credentials_secret(&cluster.client).await;
    let operator = start_operator(&cluster, &moto);
    create_bucket(&cluster, "early", json!({})).await;
    let waiting = status(&wait_for_reason(&cluster, "early", "WaitingForClasses").await);
    assert!(waiting.bucket_name.is_none() && waiting.class_name.is_none(), "{waiting:?}");
    assert!(waiting.conditions[0].message.contains("CRDs"), "{waiting:?}");

    for crd in class_crd {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    // The API server serves the new kind a moment after the CRD is created.
    eventually("the BucketClass kind to be served", || async {
        classes(&cluster).list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
    create_class(&cluster, "std", json!({"encryption": {"algorithm": "AES256"}}), true).await;
    let ready = status(&wait_for_reason_within(&cluster, "early", "Ready", Duration::from_secs(90)).await);
    assert_eq!(ready.class_name.as_deref(), Some("std"), "the default class, not the built-in one");
    let encryption = moto.client().await.encryption(&ready.bucket_name.unwrap()).await.unwrap();
    assert_eq!(encryption.map(|e| e.algorithm).as_deref(), Some("AES256"));
    operator.stop().await.unwrap();
}

/// A default class and Buckets that exist before kopper starts: every Bucket gets the default
/// class, none the built-in one (kopper decides nothing before it has listed the classes).
#[tokio::test]
async fn buckets_made_before_kopper_starts_take_the_default_class_that_exists() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    create_class(&cluster, "std", json!({"tags": {"tier": "std"}}), true).await;
    let names: Vec<String> = (0..6).map(|i| format!("early-{i}")).collect();
    for name in &names {
        create_bucket(&cluster, name, json!({})).await;
    }
    let operator = start_operator(&cluster, &moto);
    for name in &names {
        let ready = status(&wait_for_reason(&cluster, name, "Ready").await);
        assert_eq!(ready.class_name.as_deref(), Some("std"), "{name}");
    }
    operator.stop().await.unwrap();
}

/// With classes but no default, a Bucket naming no class waits (NoDefaultClass) instead of
/// taking kopper's built-in class for good, and takes the default once one is set.
#[tokio::test]
async fn with_classes_but_no_default_an_unnamed_bucket_waits_for_one() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    create_class(&cluster, "plain", json!({}), false).await;
    create_bucket(&cluster, "unnamed", json!({})).await;
    let waiting = status(&wait_for_reason(&cluster, "unnamed", "NoDefaultClass").await);
    assert!(waiting.bucket_name.is_none(), "{waiting:?}");
    let annotate = Patch::Merge(json!({"metadata": {"annotations": {DEFAULT_ANNOTATION: "true"}}}));
    classes(&cluster).patch("plain", &PatchParams::default(), &annotate).await.unwrap();
    let ready = status(&wait_for_reason(&cluster, "unnamed", "Ready").await);
    assert_eq!(ready.class_name.as_deref(), Some("plain"));
    operator.stop().await.unwrap();
}

/// Buckets of a class with a quota of 2, created at once in descending name order (so each
/// may see only the ones after it, and all within one second): exactly two get a bucket.
#[tokio::test]
async fn buckets_created_at_once_never_exceed_their_class_s_quota() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    create_class(&cluster, "pair", json!({"maxBucketsPerNamespace": 2}), false).await;
    let names: Vec<String> = ["f", "e", "d", "c", "b", "a"].iter().map(|n| format!("q-{n}")).collect();
    futures::future::join_all(
        names.iter().map(|name| create_bucket(&cluster, name, json!({"className": "pair"}))),
    )
    .await;
    let reasons = eventually("every Bucket to be Ready or refused", || async {
        let mut reasons = Vec::new();
        for name in &names {
            let bucket = buckets(&cluster).get(name).await.unwrap();
            match ready_reason(&bucket).map(|(_, reason)| reason).as_deref() {
                Some(reason @ ("Ready" | "QuotaExceeded")) => reasons.push(reason.to_owned()),
                _ => return None,
            }
        }
        Some(reasons)
    })
    .await;
    let ready = reasons.iter().filter(|reason| *reason == "Ready").count();
    assert_eq!(ready, 2, "{names:?}: {reasons:?}");
    let made = buckets(&cluster).list(&Default::default()).await.unwrap();
    let with_bucket = made.items.iter().filter(|b| status(b).bucket_name.is_some()).count();
    assert_eq!(with_bucket, 2, "only the admitted ones got a bucket");
    operator.stop().await.unwrap();
}

/// A Bucket of a class with its own backend leaves without its finalizer (kopper stopped
/// meanwhile): the sweep deletes its IAM user on the class's backend too.
#[tokio::test]
async fn the_sweep_deletes_credentials_left_on_a_class_s_own_backend() {
    let Some(moto) = Moto::start().await else { return };
    let Some(other) = Moto::start().await else { return };
    let cluster = cluster().await;
    create_admin_secret(&cluster, "other-admin").await;
    let backend = json!({"backend": {"region": REGION, "endpoint": other.endpoint, "forcePathStyle": true, "credentialsSecret": "other-admin"}});
    create_class(&cluster, "elsewhere", backend, false).await;
    let operator = start_operator(&cluster, &moto);
    create_bucket(&cluster, "remote", json!({"className": "elsewhere"})).await;
    let user = status(&wait_for_reason(&cluster, "remote", "Ready").await).user_name.unwrap();
    let there = other.client().await;
    assert!(there.user_tags(&user).await.unwrap().is_some());
    operator.stop().await.unwrap();

    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    buckets(&cluster).patch("remote", &PatchParams::default(), &strip).await.unwrap();
    buckets(&cluster).delete("remote", &DeleteParams::default()).await.unwrap();
    let operator = start_operator_at(&cluster, &moto.endpoint, &["--orphan-sweep-interval", "1s"]);
    eventually("the sweep to delete the user on the class's backend", || async {
        there.user_tags(&user).await.unwrap().is_none().then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}
