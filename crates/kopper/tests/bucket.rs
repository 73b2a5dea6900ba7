//! The Bucket controller end to end: kopper on kubesim against a real S3 and IAM API, moto in
//! server mode on loopback (installed by scripts/setup-moto.sh; one server per test, so each
//! test has its own account). Without moto these tests fail under `CI=true` and are skipped,
//! saying so, elsewhere.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;

use common::moto::{Moto, REGION};
use common::{Cluster, Operator, eventually};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kopper::controllers::bucket::names::{self, Owner};
use kopper::controllers::bucket::provider::{BucketLookup, Provider};
use kopper::controllers::bucket::types::{Bucket, BucketStatus};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const NAMESPACE: &str = "team-a";

/// kubesim with kopper's admin credentials Secret and a tenant namespace.
async fn cluster() -> Cluster {
    let cluster = Cluster::start().await;
    let crds = Api::all(cluster.client.clone());
    for crd in kopper::crds::all() {
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
    cluster
}

fn operator_flags(moto: &Moto) -> Vec<String> {
    let mut flags = vec!["--controllers".to_owned(), "bucket".to_owned()];
    flags.extend(common::moto::flags(moto, "test"));
    flags
}

fn start_operator(cluster: &Cluster, moto: &Moto) -> Operator {
    let flags = operator_flags(moto);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Operator::start(cluster.run_args(&flags))
}

fn buckets(cluster: &Cluster) -> Api<Bucket> {
    Api::namespaced(cluster.client.clone(), NAMESPACE)
}

async fn create_bucket(cluster: &Cluster, name: &str, spec: serde_json::Value) -> Bucket {
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }))
    .unwrap();
    buckets(cluster).create(&PostParams::default(), &bucket).await.unwrap()
}

fn ready_reason(bucket: &Bucket) -> Option<(String, String)> {
    let status = bucket.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status.clone(), ready.reason.clone()))
}

/// Waits for the Bucket's Ready condition to have `reason`; the Bucket then. On timeout the
/// failure shows the last status seen.
async fn wait_for_reason(cluster: &Cluster, name: &str, reason: &str) -> Bucket {
    let api = buckets(cluster);
    let give_up = tokio::time::Instant::now() + common::DEADLINE;
    loop {
        let bucket = api.get(name).await.unwrap();
        if ready_reason(&bucket).map(|(_, r)| r).as_deref() == Some(reason) {
            return bucket;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "Bucket {name} did not report {reason}; its status: {:?}",
            bucket.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn status(bucket: &Bucket) -> BucketStatus {
    bucket.status.clone().unwrap()
}

fn owner(bucket: &Bucket) -> Owner {
    Owner {
        cluster: "test".into(),
        namespace: NAMESPACE.into(),
        name: bucket.name_any(),
        uid: bucket.uid().unwrap(),
    }
}

async fn secret(cluster: &Cluster, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE).get_opt(name).await.unwrap()
}

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

/// An S3 client with the credentials a Bucket's Secret holds, as the application would use.
fn application_client(secret: &Secret) -> aws_sdk_s3::Client {
    let credentials = aws_sdk_s3::config::Credentials::new(
        value(secret, "AWS_ACCESS_KEY_ID"),
        value(secret, "AWS_SECRET_ACCESS_KEY"),
        None,
        None,
        "test",
    );
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(value(secret, "AWS_REGION")))
        .endpoint_url(value(secret, "AWS_ENDPOINT_URL"))
        .credentials_provider(credentials)
        .force_path_style(true)
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

async fn put_object(secret: &Secret, key: &str) {
    application_client(secret)
        .put_object()
        .bucket(value(secret, "BUCKET_NAME"))
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"data"))
        .send()
        .await
        .unwrap();
}

async fn delete_and_wait_gone(cluster: &Cluster, name: &str) {
    buckets(cluster).delete(name, &DeleteParams::default()).await.unwrap();
    let api = buckets(cluster);
    eventually(&format!("Bucket {name} to be gone"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_bucket_gets_a_bucket_a_user_a_policy_one_key_and_a_secret_and_retain_keeps_the_data() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;

    create_bucket(&cluster, "data", json!({"tags": {"team": "a"}, "versioning": true})).await;
    let bucket = wait_for_reason(&cluster, "data", "Ready").await;
    let status = status(&bucket);
    let owner = owner(&bucket);
    let name = status.bucket_name.clone().unwrap();
    assert_eq!(name, owner.default_bucket_name());
    assert_eq!(status.bucket_arn.as_deref(), Some(names::bucket_arn(&name).as_str()));
    assert_eq!(status.observed_generation, bucket.metadata.generation);

    let BucketLookup::Ours { tags } = s3.lookup_bucket(&name).await.unwrap() else {
        panic!("no bucket {name}")
    };
    assert!(owner.owns(&tags) && tags["team"] == "a", "{tags:?}");
    // Read raw: moto answers GetBucketVersioning with a root element real S3 does not use,
    // which the Rust SDK refuses to parse.
    let address = moto.endpoint.trim_start_matches("http://");
    let (_, versioning) = common::http_get(address, &format!("/{name}?versioning")).await.unwrap();
    assert!(versioning.contains("<Status>Enabled</Status>"), "{versioning}");
    let user = status.user_name.clone().unwrap();
    assert!(owner.owns(&s3.user_tags(&user).await.unwrap().unwrap()));
    assert_eq!(s3.user_policy(&user, names::POLICY_NAME).await.unwrap(), Some(names::policy_document(&name)));
    let keys = s3.access_keys(&user).await.unwrap();
    assert_eq!(keys, vec![status.access_key_id.clone().unwrap()], "exactly one key, the one in status");

    let secret = secret(&cluster, "data-s3").await.expect("the Secret data-s3");
    assert_eq!(value(&secret, "AWS_ACCESS_KEY_ID"), keys[0]);
    assert_eq!(value(&secret, "BUCKET_NAME"), name);
    assert_eq!(value(&secret, "AWS_REGION"), REGION);
    assert_eq!(value(&secret, "S3_ENDPOINT"), moto.endpoint);
    let secret_key = value(&secret, "AWS_SECRET_ACCESS_KEY");
    let shown = serde_json::to_string(&bucket).unwrap();
    assert!(!shown.contains(&secret_key), "the secret key is never in the Bucket");
    put_object(&secret, "kept.txt").await;

    delete_and_wait_gone(&cluster, "data").await;
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "the user, its policy and keys are gone");
    assert!(!s3.bucket_is_empty(&name).await.unwrap(), "Retain keeps the bucket and its data");
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE);
    eventually("the Secret to go with its Bucket", || async {
        secrets.get_opt("data-s3").await.unwrap().is_none().then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn delete_waits_on_a_non_empty_bucket_until_told_to_empty_it() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;

    create_bucket(&cluster, "scratch", json!({"deletionPolicy": "Delete", "bucketName": "scratch-bucket"}))
        .await;
    wait_for_reason(&cluster, "scratch", "Ready").await;
    let secret = secret(&cluster, "scratch-s3").await.unwrap();
    put_object(&secret, "a.txt").await;

    buckets(&cluster).delete("scratch", &DeleteParams::default()).await.unwrap();
    let stuck = wait_for_reason(&cluster, "scratch", "BucketNotEmpty").await;
    let message = &stuck.status.unwrap().conditions[0].message;
    assert!(message.contains("emptyOnDelete"), "the condition says how to proceed: {message}");
    assert!(!s3.bucket_is_empty("scratch-bucket").await.unwrap(), "nothing was deleted");
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    eventually("a Warning Event saying the bucket is not empty", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("BucketNotEmpty") && e.type_.as_deref() == Some("Warning"))
            .then_some(())
    })
    .await;

    let patch = Patch::Merge(json!({"spec": {"emptyOnDelete": true}}));
    buckets(&cluster).patch("scratch", &PatchParams::default(), &patch).await.unwrap();
    let api = buckets(&cluster);
    eventually("the emptied Bucket to be gone", || async {
        api.get_opt("scratch").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(s3.lookup_bucket("scratch-bucket").await.unwrap(), BucketLookup::Missing);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn rotation_writes_the_new_key_before_deleting_the_old() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;

    create_bucket(&cluster, "app", json!({})).await;
    let before = status(&wait_for_reason(&cluster, "app", "Ready").await);
    let old_key = before.access_key_id.clone().unwrap();
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"kopper.dev/rotate-credentials": "1"}}}));
    buckets(&cluster).patch("app", &PatchParams::default(), &patch).await.unwrap();
    let api = buckets(&cluster);
    let after = eventually("a new key in status", || async {
        let status = api.get("app").await.unwrap().status?;
        (status.rotated_for.as_deref() == Some("1")).then_some(status)
    })
    .await;
    let new_key = after.access_key_id.unwrap();
    assert_ne!(new_key, old_key);
    let user = after.user_name.unwrap();
    assert_eq!(s3.access_keys(&user).await.unwrap(), vec![new_key.clone()], "the old key is deleted");
    let secret = secret(&cluster, "app-s3").await.unwrap();
    assert_eq!(value(&secret, "AWS_ACCESS_KEY_ID"), new_key);
    put_object(&secret, "after-rotation.txt").await;
    operator.stop().await.unwrap();
}

/// What a crash at each step leaves behind, recreated by hand, is adopted: a bucket created
/// but not yet tagged, a user created without its policy, a key created but never written
/// into the Secret. Afterwards there is exactly one bucket, one user and one key.
#[tokio::test]
async fn what_a_crash_leaves_behind_is_adopted_without_duplicates() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let s3 = moto.client().await;

    // kopper recorded the bucket name and crashed after CreateBucket and CreateUser.
    let bucket = create_bucket(&cluster, "logs", json!({})).await;
    let owner = owner(&bucket);
    let name = owner.default_bucket_name();
    let intent = Patch::Merge(json!({"status": {"bucketName": name, "region": REGION}}));
    buckets(&cluster).patch_status("logs", &PatchParams::default(), &intent).await.unwrap();
    s3.create_bucket(&name, REGION).await.unwrap();
    s3.create_user(&owner.user_name(), &owner.tags()).await.unwrap();

    let operator = start_operator(&cluster, &moto);
    let ready = status(&wait_for_reason(&cluster, "logs", "Ready").await);
    assert_eq!(ready.bucket_name.as_deref(), Some(name.as_str()));
    let BucketLookup::Ours { tags } = s3.lookup_bucket(&name).await.unwrap() else { panic!() };
    assert!(owner.owns(&tags), "the untagged bucket was adopted and tagged");
    let user = ready.user_name.clone().unwrap();
    assert_eq!(user, owner.user_name());
    assert!(s3.user_policy(&user, names::POLICY_NAME).await.unwrap().is_some());

    // A crash between CreateAccessKey and writing the Secret leaves a key nobody holds.
    let orphan = s3.create_access_key(&user).await.unwrap();
    let nudge = Patch::Merge(json!({"spec": {"tags": {"nudge": "1"}}}));
    buckets(&cluster).patch("logs", &PatchParams::default(), &nudge).await.unwrap();
    let held = ready.access_key_id.unwrap();
    eventually("the orphaned key to be deleted", || async {
        (s3.access_keys(&user).await.unwrap() == vec![held.clone()]).then_some(())
    })
    .await;
    assert_ne!(orphan.id, held);
    operator.stop().await.unwrap();

    // A restart changes nothing.
    let operator = start_operator(&cluster, &moto);
    let again = buckets(&cluster);
    eventually("the Bucket to stay Ready after a restart", || async {
        let bucket = again.get("logs").await.unwrap();
        (ready_reason(&bucket).map(|(_, r)| r).as_deref() == Some("Ready")).then_some(())
    })
    .await;
    assert_eq!(s3.access_keys(&user).await.unwrap(), vec![held.clone()]);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn names_taken_by_others_are_reported_and_never_adopted_or_overwritten() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let s3 = moto.client().await;
    s3.create_bucket("someone-elses", REGION).await.unwrap();
    let squatted: Secret = serde_json::from_value(json!({
        "metadata": {"name": "mine-s3", "namespace": NAMESPACE},
        "stringData": {"keep": "me"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &squatted)
        .await
        .unwrap();
    let operator = start_operator(&cluster, &moto);

    let taken = create_bucket(&cluster, "taken", json!({"bucketName": "someone-elses"})).await;
    wait_for_reason(&cluster, "taken", "BucketNameTaken").await;
    assert_eq!(
        s3.lookup_bucket("someone-elses").await.unwrap(),
        BucketLookup::Ours { tags: BTreeMap::new() }
    );
    assert_eq!(
        s3.user_tags(&owner(&taken).user_name()).await.unwrap(),
        None,
        "no user for a bucket not ours"
    );

    create_bucket(&cluster, "mine", json!({})).await;
    let refused = wait_for_reason(&cluster, "mine", "SecretNameTaken").await;
    assert!(refused.status.unwrap().conditions[0].message.contains("spec.secretName"));
    let kept = secret(&cluster, "mine-s3").await.unwrap();
    assert_eq!(kept.data.unwrap(), BTreeMap::from([("keep".to_owned(), ByteString(b"me".to_vec()))]));

    // Renaming is refused, and nothing is deleted.
    let patch = Patch::Merge(json!({"spec": {"secretName": "mine-credentials"}}));
    buckets(&cluster).patch("mine", &PatchParams::default(), &patch).await.unwrap();
    let ready = status(&wait_for_reason(&cluster, "mine", "Ready").await);
    let old_name = ready.bucket_name.unwrap();
    let rename = Patch::Merge(json!({"spec": {"bucketName": "mine-renamed"}}));
    buckets(&cluster).patch("mine", &PatchParams::default(), &rename).await.unwrap();
    wait_for_reason(&cluster, "mine", "BucketNameImmutable").await;
    assert!(matches!(s3.lookup_bucket(&old_name).await.unwrap(), BucketLookup::Ours { .. }));
    assert_eq!(s3.lookup_bucket("mine-renamed").await.unwrap(), BucketLookup::Missing);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn without_a_provider_a_bucket_names_the_missing_setting() {
    let cluster = cluster().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "bucket"]));
    create_bucket(&cluster, "lonely", json!({})).await;
    let bucket = wait_for_reason(&cluster, "lonely", "ProviderNotConfigured").await;
    assert!(bucket.status.unwrap().conditions[0].message.contains("--s3-region"));
    operator.stop().await.unwrap();
}

/// kopper as a process at debug level: the secret key it creates appears in no log line.
#[tokio::test]
async fn no_secret_key_reaches_the_logs_at_debug_level() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    // A file, not a pipe: nobody reads a pipe while kopper runs, and a full one would stop it.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--kubeconfig", cluster.kubeconfig.to_str().unwrap(), "--admin-addr", "127.0.0.1:0"])
        .args(["--leader-elect", "false", "--log-level", "debug"])
        .args(operator_flags(&moto))
        .stdout(Stdio::from(log.reopen().unwrap()))
        .stderr(Stdio::from(log.reopen().unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    create_bucket(&cluster, "quiet", json!({})).await;
    wait_for_reason(&cluster, "quiet", "Ready").await;
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"kopper.dev/rotate-credentials": "x"}}}));
    buckets(&cluster).patch("quiet", &PatchParams::default(), &patch).await.unwrap();
    let api = buckets(&cluster);
    eventually("the rotation", || async {
        (api.get("quiet").await.unwrap().status?.rotated_for.as_deref() == Some("x")).then_some(())
    })
    .await;
    let secret_key = value(&secret(&cluster, "quiet-s3").await.unwrap(), "AWS_SECRET_ACCESS_KEY");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let logs = std::fs::read_to_string(log.path()).unwrap();
    assert!(logs.contains("wrote a new access key"), "debug logs were captured");
    assert!(!logs.contains(&secret_key), "a secret key appeared in the logs");
}
