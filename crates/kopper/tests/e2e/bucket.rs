//! The Bucket controller end to end: kopper on kubesim against a real S3 and IAM API, moto in
//! server mode on loopback (installed by scripts/setup-moto.sh; one server per test, so each
//! test has its own account). Without moto these tests fail under `CI=true` and are skipped,
//! saying so, elsewhere.

use crate::common;

mod class;
mod grant;
mod keyless;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use crate::common::moto::{FaultProxy, Moto, REGION};
use crate::common::{Cluster, Operator, eventually, eventually_within};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kopper::controllers::bucket::names::{self, Owner};
use kopper::controllers::bucket::provider::{BucketLookup, Provider, ProviderError};
use kopper::controllers::bucket::types::{Bucket, BucketStatus};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const NAMESPACE: &str = "team-a";

/// kubesim with kopper's admin credentials Secret and a tenant namespace.
async fn cluster() -> Cluster {
    let cluster = Cluster::start().await;
    install(&cluster).await;
    cluster
}

/// What an admin installs before kopper serves Buckets: the CRDs, kopper's namespace with
/// its credentials Secret, and a tenant namespace.
async fn install(cluster: &Cluster) {
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
}

fn operator_flags(endpoint: &str) -> Vec<String> {
    let mut flags = vec!["--controllers".to_owned(), "bucket".to_owned()];
    flags.extend(common::moto::flags(endpoint, "test"));
    flags
}

fn start_operator(cluster: &Cluster, moto: &Moto) -> Operator {
    start_operator_at(cluster, &moto.endpoint, &[])
}

/// kopper with its S3 and IAM endpoint at `endpoint` (moto or a fault proxy) and `extra` flags.
/// Unless `extra` sets `--bucket-key-interval`, a Bucket may get a new key every second, so
/// that tests of rotation and repair need not wait out the default interval.
fn start_operator_at(cluster: &Cluster, endpoint: &str, extra: &[&str]) -> Operator {
    let flags = operator_flags(endpoint);
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    if !extra.contains(&"--bucket-key-interval") {
        flags.extend(["--bucket-key-interval", "1s"]);
    }
    flags.extend(extra);
    Operator::start(cluster.run_args(&flags))
}

fn buckets(cluster: &Cluster) -> Api<Bucket> {
    Api::namespaced(cluster.client.clone(), NAMESPACE)
}

async fn create_bucket(cluster: &Cluster, name: &str, spec: serde_json::Value) -> Bucket {
    create_bucket_in(cluster, NAMESPACE, name, spec).await
}

async fn create_bucket_in(cluster: &Cluster, namespace: &str, name: &str, spec: serde_json::Value) -> Bucket {
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap();
    Api::namespaced(cluster.client.clone(), namespace).create(&PostParams::default(), &bucket).await.unwrap()
}

fn ready_reason(bucket: &Bucket) -> Option<(String, String)> {
    let status = bucket.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status.clone(), ready.reason.clone()))
}

/// Waits for the Bucket's Ready condition to have `reason`; the Bucket then. On timeout the
/// failure shows the last status seen.
async fn wait_for_reason(cluster: &Cluster, name: &str, reason: &str) -> Bucket {
    wait_for_reason_within(cluster, name, reason, common::DEADLINE).await
}

/// [`wait_for_reason`] with a longer deadline, for Buckets that go through backoff first.
async fn wait_for_reason_within(cluster: &Cluster, name: &str, reason: &str, deadline: Duration) -> Bucket {
    let api = buckets(cluster);
    let give_up = tokio::time::Instant::now() + deadline;
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

/// The ids of the user's access keys, as IAM lists them.
async fn key_ids(s3: &dyn Provider, user: &str) -> Result<Vec<String>, ProviderError> {
    Ok(s3.access_keys(user).await?.into_iter().map(|key| key.id).collect())
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
    let keys = key_ids(&s3, &user).await.unwrap();
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
    let stuck = status(&wait_for_reason(&cluster, "scratch", "BucketNotEmpty").await);
    let message = &stuck.conditions[0].message;
    assert!(message.contains("emptyOnDelete"), "the condition says how to proceed: {message}");
    assert!(!s3.bucket_is_empty("scratch-bucket").await.unwrap(), "nothing was deleted");
    let user = stuck.user_name.clone().unwrap();
    let keys = key_ids(&s3, &user).await.unwrap();
    assert_eq!(keys, vec![stuck.access_key_id.unwrap()], "the tenant keeps the credentials to empty it");
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

/// With `emptyOnDelete`, the Bucket's credentials go before kopper empties the bucket: a
/// workload still running with them would otherwise keep writing, and the bucket would
/// never be empty.
#[tokio::test]
async fn emptying_a_bucket_on_delete_revokes_its_credentials_first() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let spec = json!({"deletionPolicy": "Delete", "emptyOnDelete": true, "bucketName": "busy-bucket"});
    create_bucket(&cluster, "busy", spec).await;
    wait_for_reason(&cluster, "busy", "Ready").await;
    put_object(&secret(&cluster, "busy-s3").await.unwrap(), "a.txt").await;
    proxy.reset_calls().await;

    delete_and_wait_gone(&cluster, "busy").await;
    let calls = proxy.calls().await;
    let first = |operation: &str| calls.iter().position(|call| call.operation == operation);
    let revoked = first("DeleteAccessKey").expect("the access key deleted");
    let emptied = first("DeleteObjects").or(first("DeleteObject")).expect("the bucket emptied");
    assert!(revoked < emptied, "credentials revoked before emptying: {calls:?}");
    operator.stop().await.unwrap();
}

/// IAM policies are compared by what they grant, not by their spelling: a policy another
/// tool (or a compatible service) returns with its statements reordered, its actions in
/// another case and order and single values as strings is left alone at the next pass; a
/// policy that grants more is put back to the Bucket's own.
#[tokio::test]
async fn a_respelled_policy_is_left_alone_and_a_widened_one_put_back() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let iam = moto.client().await;
    create_bucket(&cluster, "spelled", json!({"bucketName": "spelled-bucket"})).await;
    let user = status(&wait_for_reason(&cluster, "spelled", "Ready").await).user_name.unwrap();
    let wanted = names::policy_document("spelled-bucket");
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE);
    // A change to its Secret wakes the Bucket without changing its generation.
    let wake = |round: &'static str| {
        let touch = Patch::Merge(json!({"metadata": {"annotations": {"example.com/round": round}}}));
        let secrets = secrets.clone();
        async move { secrets.patch("spelled-s3", &PatchParams::default(), &touch).await.unwrap() }
    };

    let mut statements = wanted["Statement"].as_array().unwrap().clone();
    statements.reverse();
    for statement in &mut statements {
        let statement = statement.as_object_mut().unwrap();
        statement.remove("Sid");
        let mut actions: Vec<String> = serde_json::from_value(statement["Action"].clone()).unwrap();
        actions.reverse();
        actions[0] = actions[0].to_uppercase();
        statement.insert("Action".into(), json!(actions));
        let resource = statement["Resource"][0].clone();
        statement.insert("Resource".into(), resource);
    }
    let respelled = json!({"Version": "2012-10-17", "Statement": statements});
    iam.put_user_policy(&user, names::POLICY_NAME, &respelled).await.unwrap();
    proxy.reset_calls().await;
    wake("respelled").await;
    // The pass is over once it went on from the policy to the user's keys.
    let calls = eventually("a pass to read the policy and go on to the keys", || async {
        let calls = proxy.calls().await;
        let read = calls.iter().position(|call| call.operation == "GetUserPolicy")?;
        calls[read..].iter().any(|call| call.operation == "ListAccessKeys").then_some(calls)
    })
    .await;
    assert!(
        !calls.iter().any(|call| call.operation == "PutUserPolicy"),
        "a policy granting the same was rewritten: {calls:?}"
    );
    assert_eq!(iam.user_policy(&user, names::POLICY_NAME).await.unwrap(), Some(respelled));

    let mut widened = wanted.clone();
    widened["Statement"][1]["Action"].as_array_mut().unwrap().push(json!("s3:PutBucketPolicy"));
    iam.put_user_policy(&user, names::POLICY_NAME, &widened).await.unwrap();
    wake("widened").await;
    eventually("the Bucket's own policy put back", || async {
        (iam.user_policy(&user, names::POLICY_NAME).await.unwrap().as_ref() == Some(&wanted)).then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// Objects each huge bucket holds: with one object per delete batch, emptying one takes
/// many seconds, far longer than a Bucket takes to become Ready.
const HUGE: usize = 250;

/// Emptying buckets does not hold kopper's reconciles for everyone: while four huge buckets
/// of one namespace are emptied (one object per batch), another namespace's new Bucket
/// becomes Ready within seconds, and the four are still emptied and deleted in the end.
#[tokio::test]
async fn emptying_huge_buckets_does_not_hold_up_another_tenant_s_bucket() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
    Api::<Namespace>::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let operator = start_operator_at(&cluster, &moto.endpoint, &["--s3-delete-batch", "1"]);
    let s3 = moto.client().await;
    let huge: Vec<String> = (0..4).map(|n| format!("huge-{n}")).collect();
    for name in &huge {
        let spec = json!({"deletionPolicy": "Delete", "emptyOnDelete": true, "bucketName": format!("{name}-bucket")});
        create_bucket(&cluster, name, spec).await;
    }
    for name in &huge {
        wait_for_reason(&cluster, name, "Ready").await;
        let secret = secret(&cluster, &format!("{name}-s3")).await.unwrap();
        futures::stream::iter(0..HUGE)
            .for_each_concurrent(16, |n| {
                let secret = secret.clone();
                async move { put_object(&secret, &format!("object-{n}")).await }
            })
            .await;
    }

    for name in &huge {
        buckets(&cluster).delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in &huge {
        wait_for_reason(&cluster, name, "Emptying").await;
    }
    create_bucket_in(&cluster, "team-b", "quick", json!({})).await;
    let team_b = Api::<Bucket>::namespaced(cluster.client.clone(), "team-b");
    eventually_within(Duration::from_secs(10), "team-b's Bucket to be Ready", || async {
        let bucket = team_b.get("quick").await.unwrap();
        (ready_reason(&bucket).map(|(_, reason)| reason).as_deref() == Some("Ready")).then_some(())
    })
    .await;

    // 1,000 single-object deletes against moto: minutes when the whole suite shares 2 cores.
    let api = buckets(&cluster);
    for name in &huge {
        eventually_within(Duration::from_secs(300), &format!("Bucket {name} emptied and gone"), || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
        assert_eq!(s3.lookup_bucket(&format!("{name}-bucket")).await.unwrap(), BucketLookup::Missing);
    }
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
    assert_eq!(key_ids(&s3, &user).await.unwrap(), vec![new_key.clone()], "the old key is deleted");
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
    s3.create_user(&owner.user_name(), names::BUCKET_USER_PATH, &owner.tags()).await.unwrap();

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
        (key_ids(&s3, &user).await.unwrap() == vec![held.clone()]).then_some(())
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
    assert_eq!(key_ids(&s3, &user).await.unwrap(), vec![held.clone()]);
    operator.stop().await.unwrap();
}

/// The API server restarts under a running kopper. With its store kept, kopper goes on
/// serving Buckets: one made after the restart gets its bucket, one deleted is cleaned up.
/// With its store lost (an etcd restored from before the Buckets were made), kopper deletes
/// nothing in S3 or IAM for the Buckets it no longer sees; a Bucket made again under the
/// same name is a new owner (the uid decides, see `Owner::owns`), told that the user name is
/// taken, and the data stays for an admin to hand over. (The credentials of the Buckets the
/// store lost are the sweep's at its next run, `--orphan-sweep-interval`; not within this test.)
#[tokio::test]
async fn an_api_server_restart_is_survived_and_a_lost_store_loses_no_data() {
    let Some(moto) = Moto::start().await else { return };
    let store = tempfile::tempdir().unwrap();
    let kept_store =
        || kubesim::Config { data_dir: Some(store.path().to_owned()), ..kubesim::Config::default() };
    let cluster = Cluster::start_with(kept_store()).await;
    install(&cluster).await;
    let admin = common::free_admin_addr();
    let operator = start_operator_at(&cluster, &moto.endpoint, &["--admin-addr", &admin]);
    let s3 = moto.client().await;
    create_bucket(&cluster, "before", json!({})).await;
    let before = status(&wait_for_reason(&cluster, "before", "Ready").await);

    let cluster = cluster.with_api_server_restarted(kept_store(), &admin).await;
    create_bucket(&cluster, "after", json!({})).await;
    let after = status(&wait_for_reason(&cluster, "after", "Ready").await);
    delete_and_wait_gone(&cluster, "before").await;
    assert_eq!(s3.user_tags(&before.user_name.unwrap()).await.unwrap(), None, "cleaned up after the restart");
    put_object(&secret(&cluster, "after-s3").await.unwrap(), "kept.txt").await;

    let cluster = cluster.with_api_server_restarted(kubesim::Config::default(), &admin).await;
    let namespaces = Api::<Namespace>::all(cluster.client.clone());
    assert!(namespaces.get_opt(NAMESPACE).await.unwrap().is_none(), "an empty store");
    install(&cluster).await;
    create_bucket(&cluster, "after", json!({})).await;
    // A new uid: a new bucket name, but the same user name, which the old uid's tags hold.
    // kopper's Bucket watch failed through two restarts and while the kind was not served,
    // so it may wait out a watch backoff of up to a minute (30 s, jittered) before it lists.
    wait_for_reason_within(&cluster, "after", "UserNameTaken", Duration::from_secs(90)).await;
    let name = after.bucket_name.unwrap();
    assert!(!s3.bucket_is_empty(&name).await.unwrap(), "the bucket and its data are kept");
    let user = after.user_name.unwrap();
    assert!(s3.user_tags(&user).await.unwrap().is_some(), "the user is kept");
    assert_eq!(key_ids(&s3, &user).await.unwrap(), vec![after.access_key_id.unwrap()]);
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
        .args(operator_flags(&moto.endpoint))
        .args(["--bucket-key-interval", "1s"])
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

/// How long a Bucket may take to become Ready through injected failures: each failed
/// reconcile waits out the SDK's retries (three attempts, jittered backoff up to seconds) and
/// then kopper's per-object backoff (0.5 s, doubling).
const THROUGH_FAULTS: Duration = Duration::from_secs(90);

/// Every rule the proxy was given has been used up: the failures really happened.
async fn assert_faults_used(proxy: &FaultProxy) {
    let faults = proxy.faults().await;
    for rule in faults.as_array().unwrap() {
        assert_eq!(rule["times"], 0, "an injected failure was never hit: {rule}");
    }
}

/// The IAM users and S3 buckets in the account, as an admin would list them.
async fn account_contents(endpoint: &str) -> (Vec<String>, Vec<String>) {
    let credentials = aws_sdk_s3::config::Credentials::new("testing", "testing", None, None, "test");
    let http = || {
        aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https()
    };
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(credentials.clone())
            .force_path_style(true)
            .http_client(http())
            .build(),
    );
    let iam = aws_sdk_iam::Client::from_conf(
        aws_sdk_iam::config::Builder::new()
            .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
            .region(aws_sdk_iam::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(credentials)
            .http_client(http())
            .build(),
    );
    let users = iam.list_users().send().await.unwrap();
    let users = users.users().iter().map(|user| user.user_name().to_owned()).collect();
    let listed = s3.list_buckets().send().await.unwrap();
    let buckets = listed.buckets().iter().filter_map(|bucket| bucket.name().map(str::to_owned)).collect();
    (users, buckets)
}

/// Exactly one key lives for the Bucket's user, and it is the one its Secret holds.
async fn wait_for_one_key(cluster: &Cluster, s3: &impl Provider, name: &str) {
    let bucket = buckets(cluster).get(name).await.unwrap();
    let user = status(&bucket).user_name.unwrap();
    let held = value(&secret(cluster, &format!("{name}-s3")).await.unwrap(), "AWS_ACCESS_KEY_ID");
    eventually(&format!("{name}: one key, the one in its Secret"), || async {
        (key_ids(s3, &user).await.unwrap() == vec![held.clone()]).then_some(())
    })
    .await;
}

/// Throttling (S3 503 SlowDown, IAM Throttling, 429) and 500s on the calls that create a
/// Bucket are retried with backoff, shown as ProviderUnavailable meanwhile, and converge.
#[tokio::test]
async fn throttling_and_server_errors_are_retried_with_backoff_until_ready() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let admin = common::free_admin_addr();
    // The default key interval: a throttled CreateAccessKey made no key, so it starts none.
    let flags = ["--admin-addr", &admin, "--bucket-key-interval", "5m"];
    let operator = start_operator_at(&cluster, &proxy.endpoint, &flags);
    proxy
        .set_faults(json!([
            {"operation": "HeadBucket", "times": 2, "status": 503},
            {"operation": "CreateBucket", "times": 6, "status": 503, "code": "SlowDown"},
            {"operation": "CreateUser", "times": 4, "status": 400, "code": "Throttling"},
            {"operation": "PutUserPolicy", "times": 4, "status": 500, "code": "InternalError"},
            {"operation": "CreateAccessKey", "times": 2, "status": 429, "code": "TooManyRequests"},
        ]))
        .await;

    create_bucket(&cluster, "slow", json!({})).await;
    let throttled = wait_for_reason(&cluster, "slow", "ProviderUnavailable").await;
    let conditions = status(&throttled).conditions;
    let message = &conditions.iter().find(|c| c.type_ == "Ready").unwrap().message;
    assert!(message.contains("CreateBucket") && message.contains("SlowDown"), "{message}");

    let not_ready = "kopper_rules_not_ready{controller=\"bucket\"}";
    assert_eq!(common::metric(&admin, not_ready).await, Some(1.0), "counted while not Ready");
    wait_for_reason_within(&cluster, "slow", "Ready", THROUGH_FAULTS).await;
    eventually("the Bucket to count as Ready", || async {
        (common::metric(&admin, not_ready).await == Some(0.0)).then_some(())
    })
    .await;
    assert_faults_used(&proxy).await;
    let s3 = moto.client().await;
    wait_for_one_key(&cluster, &s3, "slow").await;
    let (users, buckets) = account_contents(&moto.endpoint).await;
    assert_eq!((users.len(), buckets.len()), (1, 1), "users {users:?}, buckets {buckets:?}");
    operator.stop().await.unwrap();
}

/// The writes that create a Bucket, in kopper's order.
const CREATE_WRITES: [&str; 6] = [
    "CreateBucket",
    "PutBucketTagging",
    "PutBucketVersioning",
    "CreateUser",
    "PutUserPolicy",
    "CreateAccessKey",
];

/// A crash right after each provider call: the call takes effect but kopper never sees its
/// answer (the proxy forwards it, then answers 500 to it and to the SDK's retries). Each
/// Bucket still ends with exactly one bucket, one user and one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_answer_is_lost_after_it_took_effect_leaves_no_duplicates() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let s3 = moto.client().await;
    for (index, operation) in CREATE_WRITES.iter().enumerate() {
        let rule = json!({"operation": operation, "times": 3, "status": 500, "forward": true});
        proxy.set_faults(json!([rule])).await;
        let name = format!("lost-{index}");
        create_bucket(&cluster, &name, json!({"versioning": true})).await;
        wait_for_reason_within(&cluster, &name, "Ready", THROUGH_FAULTS).await;
        assert_faults_used(&proxy).await;
        wait_for_one_key(&cluster, &s3, &name).await;
    }
    let (users, buckets) = account_contents(&moto.endpoint).await;
    assert_eq!(users.len(), CREATE_WRITES.len(), "one user per Bucket: {users:?}");
    assert_eq!(buckets.len(), CREATE_WRITES.len(), "one bucket per Bucket: {buckets:?}");
    operator.stop().await.unwrap();
}

/// An endpoint nobody listens on is ProviderUnavailable, not a crash or a silent hang.
#[tokio::test]
async fn an_unreachable_endpoint_is_reported_as_provider_unavailable() {
    let cluster = cluster().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let operator = start_operator_at(&cluster, &format!("http://{closed}"), &[]);
    create_bucket(&cluster, "nowhere", json!({})).await;
    let bucket = wait_for_reason(&cluster, "nowhere", "ProviderUnavailable").await;
    let ready = status(&bucket).conditions.into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    operator.stop().await.unwrap();
}

/// The Ready reason of a Bucket in any namespace, once it has one.
async fn reason_in(cluster: &Cluster, namespace: &str, name: &str) -> Option<String> {
    let bucket = Api::<Bucket>::namespaced(cluster.client.clone(), namespace).get(name).await.unwrap();
    ready_reason(&bucket).map(|(_, reason)| reason).filter(|reason| reason != "Provisioning")
}

/// Hostile tenants: two name the same bucket at once, and one gets it while the other keeps no
/// credentials; an explicit name may not take the prefix derived names start with (else a
/// tenant could squat another's derived name); tags kopper owns cannot be supplied.
#[tokio::test]
async fn a_bucket_name_goes_to_one_bucket_and_derived_names_and_owner_tags_cannot_be_claimed() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
    Api::<Namespace>::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;

    let contested = json!({"bucketName": "contested-bucket"});
    let (mine, theirs) = tokio::join!(
        create_bucket_in(&cluster, NAMESPACE, "mine", contested.clone()),
        create_bucket_in(&cluster, "team-b", "theirs", contested),
    );
    let reasons = eventually("both Buckets to settle", || async {
        let mine = reason_in(&cluster, NAMESPACE, "mine").await?;
        let theirs = reason_in(&cluster, "team-b", "theirs").await?;
        Some([mine, theirs])
    })
    .await;
    let mut sorted = reasons.clone();
    sorted.sort();
    assert_eq!(sorted, ["BucketNameTaken", "Ready"], "exactly one gets the bucket");
    let loser = if reasons[0] == "Ready" { &theirs } else { &mine };
    let loser = Owner {
        cluster: "test".into(),
        namespace: loser.namespace().unwrap(),
        name: loser.name_any(),
        uid: loser.uid().unwrap(),
    };
    eventually("the refused Bucket to hold no IAM user", || async {
        s3.user_tags(&loser.user_name()).await.unwrap().is_none().then_some(())
    })
    .await;
    let (users, buckets_in_account) = account_contents(&moto.endpoint).await;
    assert_eq!((users.len(), buckets_in_account), (1, vec!["contested-bucket".to_owned()]));

    // team-a tries to take the name team-b's Bucket "data" will derive.
    let victim =
        Owner { cluster: "test".into(), namespace: "team-b".into(), name: "data".into(), uid: "-".into() };
    let squat = json!({"bucketName": victim.default_bucket_name()});
    create_bucket(&cluster, "squat", squat).await;
    let refused = status(&wait_for_reason(&cluster, "squat", "InvalidBucketName").await);
    let message = &refused.conditions[0].message;
    assert!(message.contains("reserved") && message.contains("spec.bucketName"), "{message}");

    create_bucket(&cluster, "forged", json!({"tags": {"kopper.dev/uid": theirs.uid().unwrap()}})).await;
    let refused = status(&wait_for_reason(&cluster, "forged", "InvalidTags").await);
    assert!(refused.conditions[0].message.contains("spec.tags"), "{:?}", refused.conditions);
    let (_, after) = account_contents(&moto.endpoint).await;
    assert_eq!(after, vec!["contested-bucket".to_owned()], "nothing was created for refused Buckets");
    operator.stop().await.unwrap();
}

/// A CreateBucket refused for good (a bad region, say) does not leave the name recorded, so
/// spec.bucketName can be corrected and no later bucket of that name is adopted; an
/// AccessDenied is reported without the provider's message, which names kopper's principal.
#[tokio::test]
async fn a_refused_create_forgets_the_name_and_denials_do_not_reveal_kopper_s_principal() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let refuse = json!([{"operation": "CreateBucket", "times": 1000, "status": 400, "code": "InvalidLocationConstraint"}]);
    proxy.set_faults(refuse).await;
    create_bucket(&cluster, "moved", json!({"bucketName": "first-choice"})).await;
    let failed = wait_for_reason(&cluster, "moved", "ProviderError").await;
    assert!(status(&failed).conditions[0].message.contains("InvalidLocationConstraint"));
    let api = buckets(&cluster);
    eventually("the failed name to be forgotten", || async {
        api.get("moved").await.unwrap().status?.bucket_name.is_none().then_some(())
    })
    .await;
    proxy.set_faults(json!([])).await;
    let fix = Patch::Merge(json!({"spec": {"bucketName": "second-choice"}}));
    api.patch("moved", &PatchParams::default(), &fix).await.unwrap();
    let ready = wait_for_reason_within(&cluster, "moved", "Ready", THROUGH_FAULTS).await;
    assert_eq!(status(&ready).bucket_name.as_deref(), Some("second-choice"));

    let principal = "arn:aws:sts::123456789012:assumed-role/kopper/session";
    let message = format!("User: {principal} is not authorized to perform: iam:CreateUser");
    let deny = json!([{"operation": "CreateUser", "times": 1000, "status": 403, "code": "AccessDenied", "message": message}]);
    proxy.set_faults(deny).await;
    create_bucket(&cluster, "denied", json!({})).await;
    let denied = status(&wait_for_reason(&cluster, "denied", "AccessDenied").await);
    let shown = serde_json::to_string(&denied).unwrap();
    assert!(shown.contains("CreateUser") && !shown.contains("123456789012"), "{shown}");
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let warning = eventually("a Warning Event for the denial", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("AccessDenied"))
    })
    .await;
    assert!(!warning.note.unwrap_or_default().contains("123456789012"));
    operator.stop().await.unwrap();
}

/// Status with the user and key a Ready Bucket holds, and whether IAM still has them.
async fn credentials_kept(s3: &impl Provider, ready: &BucketStatus) -> bool {
    let user = ready.user_name.clone().unwrap();
    s3.user_tags(&user).await.unwrap().is_some()
        && key_ids(s3, &user).await.unwrap() == vec![ready.access_key_id.clone().unwrap()]
}

/// Changes the Bucket's spec, so it is reconciled now rather than after its backoff.
async fn nudge(cluster: &Cluster, name: &str, value: &str) {
    let patch = Patch::Merge(json!({"spec": {"tags": {"nudge": value}}}));
    buckets(cluster).patch(name, &PatchParams::default(), &patch).await.unwrap();
}

/// HeadBucket's 403 has no error code: an SCP or an endpoint policy that keeps kopper from
/// looking at this account's own buckets answers the same as another account's bucket. It is
/// reported as AccessDenied and revokes nothing. A bucket whose tags another tool replaced
/// keeps its credentials too, and is reported until the tags are back.
#[tokio::test]
async fn a_denied_look_or_lost_tags_are_reported_and_revoke_no_credentials() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let s3 = moto.client().await;
    let bucket = create_bucket(&cluster, "held", json!({})).await;
    let ready = status(&wait_for_reason(&cluster, "held", "Ready").await);
    let name = ready.bucket_name.clone().unwrap();

    proxy.set_faults(json!([{"operation": "HeadBucket", "times": 1000, "status": 403, "bare": true}])).await;
    nudge(&cluster, "held", "1").await;
    let denied = status(&wait_for_reason(&cluster, "held", "AccessDenied").await);
    assert!(denied.conditions[0].message.contains("HeadBucket"), "{:?}", denied.conditions);
    assert_eq!(denied.bucket_name.as_deref(), Some(name.as_str()));
    assert!(credentials_kept(&s3, &ready).await, "a denial revoked the Bucket's credentials");
    assert!(secret(&cluster, "held-s3").await.is_some());

    proxy.set_faults(json!([])).await;
    let replaced = BTreeMap::from([("cost-center".to_owned(), "42".to_owned())]);
    s3.tag_bucket(&name, &replaced).await.unwrap();
    nudge(&cluster, "held", "2").await;
    let lost = status(&wait_for_reason(&cluster, "held", "BucketTagsMissing").await);
    let message = &lost.conditions[0].message;
    assert!(message.contains(&bucket.uid().unwrap()), "the message names the tags to restore: {message}");
    assert!(credentials_kept(&s3, &ready).await, "lost tags revoked the Bucket's credentials");

    s3.tag_bucket(&name, &owner(&bucket).tags()).await.unwrap();
    nudge(&cluster, "held", "3").await;
    let again = status(&wait_for_reason(&cluster, "held", "Ready").await);
    assert_eq!(again.access_key_id, ready.access_key_id, "the same credentials throughout");
    operator.stop().await.unwrap();
}

/// Deleting a Bucket with `deletionPolicy: Delete`: a 403 on its bucket, or a 404 without
/// S3's or IAM's error code (a gateway's), is no proof that the bucket or the user is gone
/// or not the Bucket's. The finalizer stays, nothing is left behind, and cleanup finishes once
/// the provider answers.
#[tokio::test]
async fn cleanup_keeps_the_finalizer_through_a_denial_or_a_bare_404() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let s3 = moto.client().await;
    create_bucket(&cluster, "doomed", json!({"deletionPolicy": "Delete"})).await;
    let ready = status(&wait_for_reason(&cluster, "doomed", "Ready").await);
    let name = ready.bucket_name.clone().unwrap();

    proxy.set_faults(json!([{"operation": "HeadBucket", "times": 1000, "status": 403, "bare": true}])).await;
    buckets(&cluster).delete("doomed", &DeleteParams::default()).await.unwrap();
    wait_for_reason(&cluster, "doomed", "AccessDenied").await;
    assert!(
        matches!(s3.lookup_bucket(&name).await.unwrap(), BucketLookup::Ours { .. }),
        "the bucket is kept"
    );
    assert!(credentials_kept(&s3, &ready).await, "the user is kept while the bucket is");

    proxy
        .set_faults(json!([
            {"operation": "HeadBucket", "times": 1000, "status": 404, "bare": true},
            {"operation": "ListUserTags", "times": 1000, "status": 404, "bare": true},
        ]))
        .await;
    nudge(&cluster, "doomed", "1").await;
    wait_for_reason(&cluster, "doomed", "ProviderError").await;
    assert_eq!(
        s3.lookup_bucket(&name).await.unwrap(),
        BucketLookup::Missing,
        "the bucket was there to delete"
    );
    assert!(credentials_kept(&s3, &ready).await, "a bare 404 released the user");

    proxy.set_faults(json!([])).await;
    nudge(&cluster, "doomed", "2").await;
    let api = buckets(&cluster);
    eventually("the Bucket to be gone", || async {
        api.get_opt("doomed").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(s3.user_tags(&ready.user_name.unwrap()).await.unwrap(), None);
    operator.stop().await.unwrap();
}

/// A name recorded by an earlier pass (whose CreateBucket failed and whose check afterwards
/// failed too) and refused for good in this pass is forgotten: the pass's report does not
/// write it back from the status the pass started with, so spec.bucketName can be corrected.
#[tokio::test]
async fn a_name_refused_for_good_is_forgotten_though_an_earlier_pass_recorded_it() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    create_bucket(&cluster, "renamed", json!({"bucketName": "first-choice"})).await;
    let intent = Patch::Merge(json!({"status": {"bucketName": "first-choice", "region": REGION}}));
    buckets(&cluster).patch_status("renamed", &PatchParams::default(), &intent).await.unwrap();
    let elsewhere =
        json!([{"operation": "CreateBucket", "times": 1000, "status": 409, "code": "BucketAlreadyExists"}]);
    proxy.set_faults(elsewhere).await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);

    let refused = status(&wait_for_reason(&cluster, "renamed", "BucketNameTaken").await);
    assert_eq!(refused.bucket_name, None, "the refused name is still recorded");
    proxy.set_faults(json!([])).await;
    let fix = Patch::Merge(json!({"spec": {"bucketName": "second-choice"}}));
    buckets(&cluster).patch("renamed", &PatchParams::default(), &fix).await.unwrap();
    let ready = status(&wait_for_reason_within(&cluster, "renamed", "Ready", THROUGH_FAULTS).await);
    assert_eq!(ready.bucket_name.as_deref(), Some("second-choice"));
    operator.stop().await.unwrap();
}

/// The bucket a Bucket was Ready with is deleted outside kopper: the next pass makes it
/// again and the Bucket says Ready again, not the "creating" it wrote on the way (its
/// starting snapshot already said Ready, with the same generation).
#[tokio::test]
async fn a_bucket_deleted_outside_kopper_is_made_again_and_ready_again() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator(&cluster, &moto);
    let s3 = moto.client().await;
    create_bucket(&cluster, "again", json!({"bucketName": "again-bucket"})).await;
    wait_for_reason(&cluster, "again", "Ready").await;

    s3.delete_bucket("again-bucket").await.unwrap();
    // A change to its Secret wakes the Bucket without changing its generation.
    let touch = Patch::Merge(json!({"metadata": {"annotations": {"example.com/touched": "1"}}}));
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE);
    secrets.patch("again-s3", &PatchParams::default(), &touch).await.unwrap();
    eventually("the bucket to be made again", || async {
        (s3.lookup_bucket("again-bucket").await.unwrap() != BucketLookup::Missing).then_some(())
    })
    .await;
    wait_for_reason(&cluster, "again", "Ready").await;
    operator.stop().await.unwrap();
}

/// The bucket a Bucket was Ready with is deleted outside kopper and its name taken by
/// another account (HeadBucket 403, not among this account's buckets): the Bucket's IAM
/// user, policy and keys go, or its workload would write into someone else's bucket.
#[tokio::test]
async fn a_ready_bucket_now_another_account_s_revokes_the_credentials() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let s3 = moto.client().await;
    create_bucket(&cluster, "moved", json!({"bucketName": "moved-bucket"})).await;
    let ready = status(&wait_for_reason(&cluster, "moved", "Ready").await);
    let user = ready.user_name.clone().unwrap();

    s3.delete_bucket("moved-bucket").await.unwrap();
    proxy.set_faults(json!([{"operation": "HeadBucket", "times": 1000, "status": 403, "bare": true}])).await;
    nudge(&cluster, "moved", "1").await;
    wait_for_reason(&cluster, "moved", "BucketNameTaken").await;
    eventually("the Bucket's IAM user to be deleted", || async {
        s3.user_tags(&user).await.unwrap().is_none().then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// HeadBucket's 403 on a name that is not among the account's own buckets is another
/// account's bucket: BucketNameTaken, and nothing is created. When kopper may not list the
/// account's buckets either, it cannot tell, and says AccessDenied.
#[tokio::test]
async fn a_403_on_a_name_the_account_does_not_hold_is_taken_unless_listing_is_denied_too() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let head_denied = json!({"operation": "HeadBucket", "times": 1000, "status": 403, "bare": true});
    let list_denied =
        json!({"operation": "ListBuckets", "times": 1000, "status": 403, "code": "AccessDenied"});
    proxy.set_faults(json!([head_denied, list_denied])).await;
    create_bucket(&cluster, "unsure", json!({"bucketName": "elsewhere-bucket"})).await;
    wait_for_reason(&cluster, "unsure", "AccessDenied").await;

    proxy.set_faults(json!([head_denied])).await;
    nudge(&cluster, "unsure", "1").await;
    wait_for_reason(&cluster, "unsure", "BucketNameTaken").await;
    let calls = proxy.calls().await;
    assert!(!calls.iter().any(|call| call.operation == "CreateBucket"), "{calls:?}");
    let (users, buckets_in_account) = account_contents(&moto.endpoint).await;
    assert!(users.is_empty() && buckets_in_account.is_empty(), "{users:?} {buckets_in_account:?}");
    operator.stop().await.unwrap();
}

/// Another controller's hand on a Bucket's Secret, as the replication engine's would be:
/// every 100 ms the Secret `name` is put back to `data` (its metadata left as it is). The
/// number of times it had to, until the flag is set.
fn keep_secret(
    cluster: &Cluster,
    name: &str,
    data: BTreeMap<String, ByteString>,
) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, tokio::task::JoinHandle<u32>) {
    use std::sync::atomic::Ordering;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let api = Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE);
    let (name, flag) = (name.to_owned(), stop.clone());
    let task = tokio::spawn(async move {
        let mut restored = 0;
        while !flag.load(Ordering::Relaxed) {
            if let Some(mut current) = api.get_opt(&name).await.unwrap()
                && current.data.as_ref() != Some(&data)
            {
                current.data = Some(data.clone());
                if api.replace(&name, &PostParams::default(), &current).await.is_ok() {
                    restored += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        restored
    });
    (stop, task)
}

/// How long the tests of key loops count CreateAccessKey calls: the loop they guard against
/// made about nine a second.
const LOOP_WINDOW: Duration = Duration::from_secs(15);

async fn access_keys_created(proxy: &FaultProxy) -> usize {
    proxy.calls().await.iter().filter(|call| call.operation == "CreateAccessKey").count()
}

fn admin_data() -> BTreeMap<String, ByteString> {
    BTreeMap::from([("token".to_owned(), ByteString(b"admin".to_vec()))])
}

fn replication_marks() -> serde_json::Value {
    json!({
        "labels": {"app.kubernetes.io/managed-by": "kopper", "kopper.dev/replicated-by": "shared"},
        "annotations": {"kopper.dev/rule-uid": "rule-uid-1"},
    })
}

/// A tenant who may edit Secrets in its namespace forges a controller reference to its Bucket
/// (and the Bucket's label) on a Secret the replication engine keeps there; and, with no
/// forging, the engine takes over the Secret of a Ready Bucket (an admin rule replicating a
/// Secret named `<bucket>-s3`). Neither Secret is taken: no access key loop starts, the
/// admin's data is never overwritten, and each Bucket reports the conflict on
/// spec.secretName.
#[tokio::test]
async fn a_secret_the_replication_engine_keeps_is_never_taken_and_no_key_loop_starts() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &["--bucket-key-interval", "5m"]);
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE);
    let mut replicated: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shared-config", "namespace": NAMESPACE},
    }))
    .unwrap();
    replicated.metadata.labels = serde_json::from_value(replication_marks()["labels"].clone()).unwrap();
    replicated.metadata.annotations =
        serde_json::from_value(replication_marks()["annotations"].clone()).unwrap();
    replicated.data = Some(admin_data());
    secrets.create(&PostParams::default(), &replicated).await.unwrap();

    let forger = create_bucket(&cluster, "forger", json!({"secretName": "shared-config"})).await;
    wait_for_reason(&cluster, "forger", "SecretNameTaken").await;
    create_bucket(&cluster, "app", json!({})).await;
    wait_for_reason(&cluster, "app", "Ready").await;
    proxy.reset_calls().await;

    let owner_reference = json!({
        "apiVersion": "kopper.dev/v1alpha1", "kind": "Bucket", "name": "forger",
        "uid": forger.uid().unwrap(), "controller": true,
    });
    let forged = json!({"metadata": {"ownerReferences": [owner_reference], "labels": {"kopper.dev/bucket": "forger"}}});
    secrets.patch("shared-config", &PatchParams::default(), &Patch::Merge(forged)).await.unwrap();
    let (forged_stop, forged_keeper) = keep_secret(&cluster, "shared-config", admin_data());
    let mut taken_over = secrets.get("app-s3").await.unwrap();
    taken_over.labels_mut().insert("kopper.dev/replicated-by".into(), "shared".into());
    taken_over.annotations_mut().insert("kopper.dev/rule-uid".into(), "rule-uid-1".into());
    taken_over.data = Some(admin_data());
    secrets.replace("app-s3", &PostParams::default(), &taken_over).await.unwrap();
    let (app_stop, app_keeper) = keep_secret(&cluster, "app-s3", admin_data());

    // Counting calls over a window is the measurement: a loop shows as many calls in it.
    tokio::time::sleep(LOOP_WINDOW).await;
    let created = access_keys_created(&proxy).await;
    forged_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    app_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let restored = (forged_keeper.await.unwrap(), app_keeper.await.unwrap());
    assert!(created <= 1, "{created} access keys created in {LOOP_WINDOW:?}");
    assert_eq!(restored, (0, 0), "kopper overwrote a Secret the replication engine keeps");
    for name in ["forger", "app"] {
        let refused = wait_for_reason(&cluster, name, "SecretNameTaken").await;
        let message = &status(&refused).conditions[0].message;
        assert!(message.contains("spec.secretName") && message.contains("replication"), "{message}");
    }
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    eventually("a Warning Event for the taken Secret", || async {
        let listed = events.list(&ListParams::default()).await.unwrap();
        listed.items.into_iter().find(|event| {
            event.reason.as_deref() == Some("SecretNameTaken")
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("app")
        })
    })
    .await;
    operator.stop().await.unwrap();
}

/// Something keeps undoing kopper's work on a Secret that is the Bucket's own (a tool that
/// writes back stale content without the key pair): kopper issues no second key within the
/// interval and says CredentialsChurn, whatever the cause.
#[tokio::test]
async fn a_secret_rewritten_in_a_loop_costs_no_more_than_one_key_per_interval() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &["--bucket-key-interval", "5m"]);
    create_bucket(&cluster, "churn", json!({})).await;
    wait_for_reason(&cluster, "churn", "Ready").await;
    proxy.reset_calls().await;

    let (stop, keeper) = keep_secret(&cluster, "churn-s3", admin_data());
    tokio::time::sleep(LOOP_WINDOW).await;
    let created = access_keys_created(&proxy).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    keeper.await.unwrap();
    assert!(created <= 1, "{created} access keys created in {LOOP_WINDOW:?}");
    let churn = wait_for_reason(&cluster, "churn", "CredentialsChurn").await;
    let message = &status(&churn).conditions[0].message;
    assert!(message.contains("churn-s3"), "{message}");
    operator.stop().await.unwrap();
}

/// Rotation requests in quick succession: each change of the annotation is one new key, at
/// most one per interval; a request inside the interval waits, says so, and is served at the
/// interval's end.
#[tokio::test]
async fn rotations_asked_for_in_quick_succession_wait_for_the_interval() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &moto.endpoint, &["--bucket-key-interval", "6s"]);
    create_bucket(&cluster, "spin", json!({})).await;
    let first = status(&wait_for_reason(&cluster, "spin", "Ready").await).access_key_id.unwrap();
    let rotate = |value: &str| {
        Patch::Merge(json!({"metadata": {"annotations": {"kopper.dev/rotate-credentials": value}}}))
    };
    buckets(&cluster).patch("spin", &PatchParams::default(), &rotate("1")).await.unwrap();
    let waiting = wait_for_reason(&cluster, "spin", "RotationRateLimited").await;
    assert_eq!(status(&waiting).access_key_id.as_deref(), Some(first.as_str()), "no key yet");
    let api = buckets(&cluster);
    let rotated = eventually("the first rotation, at the interval's end", || async {
        let status = api.get("spin").await.unwrap().status?;
        (status.rotated_for.as_deref() == Some("1")).then_some(status)
    })
    .await;
    let second = rotated.access_key_id.unwrap();
    assert_ne!(second, first);

    buckets(&cluster).patch("spin", &PatchParams::default(), &rotate("2")).await.unwrap();
    let waiting = wait_for_reason(&cluster, "spin", "RotationRateLimited").await;
    assert_eq!(status(&waiting).access_key_id.as_deref(), Some(second.as_str()), "the second waits");
    let message = &status(&waiting).conditions[0].message;
    assert!(message.contains("kopper.dev/rotate-credentials"), "{message}");
    eventually("the second rotation, at the interval's end", || async {
        let status = api.get("spin").await.unwrap().status?;
        (status.rotated_for.as_deref() == Some("2") && status.access_key_id.as_deref() != Some(&second))
            .then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// `spec.keyRotation` with keys that live 9 s and retire for 3 s: the key in the Secret is
/// replaced when it is 6 s old, the old key is listed beside it for the grace period and gone
/// after it. Watched through ListAccessKeys the whole time: never more than two keys, and the
/// key in the Secret always one IAM lists.
#[tokio::test]
async fn scheduled_rotation_keeps_the_old_key_for_the_grace_period_only() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let admin = common::free_admin_addr();
    let operator =
        start_operator_at(&cluster, &moto.endpoint, &["--admin-addr", &admin, "--bucket-min-key-age", "1s"]);
    let s3 = moto.client().await;
    create_bucket(&cluster, "rotating", json!({"keyRotation": {"maxKeyAge": "9s", "gracePeriod": "3s"}}))
        .await;
    let ready = status(&wait_for_reason(&cluster, "rotating", "Ready").await);
    let (first, user) = (ready.access_key_id.clone().unwrap(), ready.user_name.clone().unwrap());
    let first_created = ready.key_created.clone().expect("status.keyCreated");

    // Observed as an application and an auditor would: the Secret, then IAM's list.
    let mut seen_two = None;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(40);
    let successor = loop {
        let held = value(&secret(&cluster, "rotating-s3").await.unwrap(), "AWS_ACCESS_KEY_ID");
        let listed = key_ids(&s3, &user).await.unwrap();
        assert!(listed.len() <= 2, "never more than two keys: {listed:?}");
        assert!(listed.contains(&held), "the Secret names {held}, which IAM does not list: {listed:?}");
        if held != first && listed.len() == 2 {
            assert!(listed.contains(&first), "the second key is the retiring one: {listed:?}");
            seen_two.get_or_insert(held.clone());
        }
        if seen_two.as_ref() == Some(&held) && listed == vec![held.clone()] {
            break held;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "no rotation with an overlap seen (two keys seen: {seen_two:?}; listed {listed:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let api = buckets(&cluster);
    let rotated = eventually("status naming the successor and its creation time", || async {
        let status = api.get("rotating").await.unwrap().status?;
        (status.access_key_id.as_deref() == Some(successor.as_str())).then_some(status)
    })
    .await;
    let created = rotated.key_created.expect("status.keyCreated");
    assert!(created.0 > first_created.0, "{created:?} after {first_created:?}");
    let in_iam = iam_created(&s3, &user, &successor).await;
    let oldest = eventually("the successor as the oldest key in kopper's metrics", || async {
        let oldest = key_gauges(&admin).await?.oldest_created?;
        ((oldest - in_iam).abs() <= 1).then_some(oldest)
    })
    .await;
    assert_eq!(oldest, created.0.as_second(), "status.keyCreated and the gauge agree");

    delete_and_wait_gone(&cluster, "rotating").await;
    eventually("no scheduled key left in kopper's metrics", || async {
        let gauges = key_gauges(&admin).await?;
        (gauges == KeyGauges { overdue: Some(0), oldest_created: None }).then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// When IAM refuses CreateAccessKey through a key's replacement time, the Bucket counts in
/// `kopper_bucket_access_keys_rotation_overdue` (its Ready condition says why), also in a
/// kopper started afresh, and no longer once the rotation goes through; no series names it.
#[tokio::test]
async fn a_rotation_held_up_past_its_time_counts_as_overdue_until_it_happens() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let flags = ["--bucket-min-key-age", "1s"];
    let admin = common::free_admin_addr();
    let operator = start_operator_at(
        &cluster,
        &proxy.endpoint,
        &[&["--admin-addr", admin.as_str()], &flags[..]].concat(),
    );
    let s3 = moto.client().await;
    // In use for 6 s, then retiring for 2 s.
    create_bucket(&cluster, "held-up", json!({"keyRotation": {"maxKeyAge": "8s", "gracePeriod": "2s"}}))
        .await;
    let ready = status(&wait_for_reason(&cluster, "held-up", "Ready").await);
    let (first, user) = (ready.access_key_id.clone().unwrap(), ready.user_name.clone().unwrap());
    let first_created = iam_created(&s3, &user, &first).await;
    let gauges = eventually("the key in kopper's metrics", || async {
        let gauges = key_gauges(&admin).await?;
        gauges.oldest_created.is_some().then_some(gauges)
    })
    .await;
    assert!(
        (gauges.oldest_created.unwrap() - first_created).abs() <= 1,
        "{gauges:?} vs IAM's {first_created}"
    );

    let unavailable = json!([{"operation": "CreateAccessKey", "times": 100_000, "status": 503, "code": "ServiceUnavailable"}]);
    proxy.set_faults(unavailable).await;
    let overdue = |admin: String| async move {
        let within = Duration::from_secs(30);
        eventually_within(within, "the held-up rotation counted as overdue", || async {
            let body = metrics_body(&admin).await?;
            body.lines().any(|line| line == "kopper_bucket_access_keys_rotation_overdue 1").then_some(body)
        })
        .await
    };
    let body = overdue(admin.clone()).await;
    assert!(!body.contains("held-up"), "no series names the Bucket:\n{body}");
    let held = status(&wait_for_reason(&cluster, "held-up", "ProviderUnavailable").await);
    assert!(held.conditions[0].message.contains("CreateAccessKey"), "{:?}", held.conditions);
    assert_eq!(held.access_key_id.as_deref(), Some(first.as_str()), "the old key stays in use");

    // A kopper started afresh counts it too, before any call to IAM has gone through.
    operator.stop().await.unwrap();
    let admin = common::free_admin_addr();
    let operator = start_operator_at(
        &cluster,
        &proxy.endpoint,
        &[&["--admin-addr", admin.as_str()], &flags[..]].concat(),
    );
    overdue(admin.clone()).await;

    proxy.set_faults(json!([])).await;
    let api = buckets(&cluster);
    let rotated = eventually_within(THROUGH_FAULTS, "the rotation once IAM answers", || async {
        let bucket = api.get("held-up").await.unwrap();
        let key = bucket.status.as_ref()?.access_key_id.clone()?;
        (key != first && ready_reason(&bucket)?.1 == "Ready").then_some(key)
    })
    .await;
    // Read around the Secret's key, as the schedule goes on replacing it every 6 s.
    eventually(&format!("the overdue count back to 0 and {rotated} or a successor the oldest"), || async {
        let gauges = key_gauges(&admin).await?;
        let held = api.get("held-up").await.unwrap().status?.access_key_id?;
        let created = iam_created(&s3, &user, &held).await;
        (gauges.overdue == Some(0) && (gauges.oldest_created? - created).abs() <= 1).then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

/// kopper's `/metrics` at `admin`; `None` while it does not answer.
async fn metrics_body(admin: &str) -> Option<String> {
    let (_, body) = common::http_get(admin, "/metrics").await?;
    Some(body)
}

/// The Bucket controller's key aggregates, as kopper exports them.
#[derive(Debug, PartialEq, Eq)]
struct KeyGauges {
    overdue: Option<i64>,
    oldest_created: Option<i64>,
}

/// The key aggregates at `admin`; `None` while it does not answer.
async fn key_gauges(admin: &str) -> Option<KeyGauges> {
    let body = metrics_body(admin).await?;
    let gauge = |name: &str| {
        body.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse::<i64>().ok())
    };
    Some(KeyGauges {
        overdue: gauge("kopper_bucket_access_keys_rotation_overdue"),
        oldest_created: gauge("kopper_bucket_oldest_access_key_created_timestamp_seconds"),
    })
}

/// When IAM says the access key `id` of `user` was created, in Unix seconds.
async fn iam_created(s3: &dyn Provider, user: &str, id: &str) -> i64 {
    let keys = s3.access_keys(user).await.unwrap();
    let key = keys.iter().find(|key| key.id == id).unwrap_or_else(|| panic!("{id} not in {keys:?}"));
    key.created.expect("IAM's creation date").as_second()
}

/// Writes to Buckets and Secrets the API server has counted.
fn bucket_and_secret_writes(cluster: &Cluster) -> u64 {
    let writes = ["create", "update", "patch", "delete"];
    cluster
        .sim
        .counters()
        .snapshot()
        .into_iter()
        .filter(|((verb, resource), _)| {
            writes.contains(&verb.as_str())
                && (resource.starts_with("buckets") || resource.starts_with("secrets"))
        })
        .map(|(_, count)| count)
        .sum()
}

/// The Bucket controller's reconciles, from kopper's metrics.
async fn bucket_reconciles(admin: &str) -> Option<u64> {
    let (_, body) = common::http_get(admin, "/metrics").await?;
    let line =
        body.lines().find(|line| line.starts_with("kopper_reconciles_total{controller=\"bucket\"}"))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// A Ready Bucket on a schedule that is not due costs a pass no write to S3, IAM, the Bucket
/// or its Secret; a schedule kopper refuses is reported naming the field at fault.
#[tokio::test]
async fn a_scheduled_bucket_s_idle_pass_writes_nothing_and_a_bad_schedule_names_its_field() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let admin = common::free_admin_addr();
    let operator = start_operator_at(&cluster, &proxy.endpoint, &["--admin-addr", &admin]);
    create_bucket(&cluster, "steady", json!({"keyRotation": {"maxKeyAge": "720h", "gracePeriod": "24h"}}))
        .await;
    let ready = status(&wait_for_reason(&cluster, "steady", "Ready").await);
    assert!(ready.key_created.is_some(), "{ready:?}");

    proxy.reset_calls().await;
    let writes = bucket_and_secret_writes(&cluster);
    let reconciles = eventually("kopper's reconcile count", || bucket_reconciles(&admin)).await;
    // A label on the Secret wakes the Bucket (its Secret changed) and asks for nothing.
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
    assert!(calls.iter().any(|call| call.operation == "ListAccessKeys"), "the pass looked: {calls:?}");
    let provider_writes: Vec<_> = calls.iter().filter(|call| call.is_write()).map(|c| &c.operation).collect();
    assert!(provider_writes.is_empty(), "an idle pass wrote to S3 or IAM: {provider_writes:?}");
    assert_eq!(bucket_and_secret_writes(&cluster) - writes, 1, "only the test's own label was written");

    for (name, rotation, field) in [
        ("too-fast", json!({"maxKeyAge": "30m", "gracePeriod": "1m"}), "maxKeyAge"),
        ("too-long-grace", json!({"maxKeyAge": "2h", "gracePeriod": "90m"}), "gracePeriod"),
    ] {
        create_bucket(&cluster, name, json!({"keyRotation": rotation})).await;
        let refused = status(&wait_for_reason(&cluster, name, "InvalidKeyRotation").await);
        let message = &refused.conditions[0].message;
        assert!(message.contains(&format!("spec.keyRotation.{field}")), "{name}: {message}");
        assert!(refused.access_key_id.is_none(), "{name} got a key: {refused:?}");
    }
    operator.stop().await.unwrap();
}

/// A tenant strips kopper's finalizer from a Bucket held in deletion (its bucket is not
/// empty): the Bucket is gone, and the sweep deletes its IAM user with its key and policy, so
/// the old key reads nothing once the bucket's name goes to someone else. The bucket and its
/// data stay; a live Bucket's user is untouched. (moto does not check signatures here, so the
/// old key is shown gone from IAM rather than refused by S3.)
#[tokio::test]
async fn credentials_of_a_bucket_whose_finalizer_was_stripped_are_swept() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &moto.endpoint, &["--orphan-sweep-interval", "1s"]);
    let s3 = moto.client().await;
    let live = status(&{
        create_bucket(&cluster, "live", json!({})).await;
        wait_for_reason(&cluster, "live", "Ready").await
    });
    create_bucket(&cluster, "held", json!({"deletionPolicy": "Delete", "bucketName": "held-bucket"})).await;
    let ready = status(&wait_for_reason(&cluster, "held", "Ready").await);
    let (user, old_key) = (ready.user_name.unwrap(), ready.access_key_id.unwrap());
    put_object(&secret(&cluster, "held-s3").await.unwrap(), "a.txt").await;

    buckets(&cluster).delete("held", &DeleteParams::default()).await.unwrap();
    wait_for_reason(&cluster, "held", "BucketNotEmpty").await;
    assert_eq!(key_ids(&s3, &user).await.unwrap(), vec![old_key.clone()], "held in deletion, kept");
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    buckets(&cluster).patch("held", &PatchParams::default(), &strip).await.unwrap();
    let api = buckets(&cluster);
    eventually("the stripped Bucket to be gone", || async {
        api.get_opt("held").await.unwrap().is_none().then_some(())
    })
    .await;

    eventually("the sweep to delete the gone Bucket's user", || async {
        s3.user_tags(&user).await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(key_ids(&s3, &user).await.is_err(), "the old key {old_key} went with its user");
    assert!(!s3.bucket_is_empty("held-bucket").await.unwrap(), "the data stays");
    let live_user = live.user_name.unwrap();
    assert_eq!(key_ids(&s3, &live_user).await.unwrap(), vec![live.access_key_id.unwrap()]);

    // An admin deletes the bucket; another tenant's Bucket takes its name.
    while s3.empty_batch("held-bucket").await.unwrap() > 0 {}
    s3.delete_bucket("held-bucket").await.unwrap();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
    Api::<Namespace>::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    create_bucket_in(&cluster, "team-b", "reused", json!({"bucketName": "held-bucket"})).await;
    eventually("the other tenant's Bucket to be Ready", || async {
        (reason_in(&cluster, "team-b", "reused").await.as_deref() == Some("Ready")).then_some(())
    })
    .await;
    let (users, _) = account_contents(&moto.endpoint).await;
    assert!(!users.contains(&user), "the old user did not come back: {users:?}");
    operator.stop().await.unwrap();
}

/// Two clusters share an account. A tenant of c1 takes, by an explicit bucketName, the name
/// c2's Bucket `team-a/data` would derive from what the tenant can know: its cluster,
/// namespace and name, but not the uid the API server gives it. c2's Bucket derives a name
/// holding its uid, gets its own bucket, and the squatted one stays c1's tenant's.
#[tokio::test]
async fn a_tenant_of_another_cluster_cannot_take_the_name_a_bucket_will_derive() {
    let Some(moto) = Moto::start().await else { return };
    let (c1, c2) = (cluster().await, cluster().await);
    let operator_for = |cluster: &Cluster, id: &str| {
        let mut flags = vec!["--controllers".to_owned(), "bucket".to_owned()];
        flags.extend(common::moto::flags(&moto.endpoint, id));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Operator::start(cluster.run_args(&flags))
    };
    let (operator1, operator2) = (operator_for(&c1, "c1"), operator_for(&c2, "c2"));
    let predictable =
        Owner { cluster: "c2".into(), namespace: NAMESPACE.into(), name: "data".into(), uid: String::new() }
            .default_bucket_name();
    create_bucket(&c1, "squat", json!({"bucketName": predictable})).await;
    wait_for_reason(&c1, "squat", "Ready").await;

    create_bucket(&c2, "data", json!({})).await;
    let ready = status(&wait_for_reason(&c2, "data", "Ready").await);
    let derived = ready.bucket_name.unwrap();
    assert_ne!(derived, predictable);
    assert!(derived.starts_with("c2-team-a-data-"), "{derived}");
    operator1.stop().await.unwrap();
    operator2.stop().await.unwrap();
}
/// kopper caches Buckets without the annotations and labels it does not read; the status it
/// writes from that cached copy leaves them on the server as they were.
#[tokio::test]
async fn a_status_written_from_the_cache_keeps_the_buckets_annotations_and_labels() {
    let cluster = cluster().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "bucket"]));
    let note = "n".repeat(100_000);
    let bucket: Bucket = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": "noted", "namespace": NAMESPACE,
                     "annotations": {"example.com/note": note, "kopper.dev/rotate-credentials": "1"},
                     "labels": {"team": "a"}},
        "spec": {},
    }))
    .unwrap();
    buckets(&cluster).create(&PostParams::default(), &bucket).await.unwrap();
    let reported = wait_for_reason(&cluster, "noted", "ProviderNotConfigured").await;
    assert_eq!(reported.annotations().get("example.com/note"), Some(&note));
    assert_eq!(reported.annotations().get("kopper.dev/rotate-credentials").map(String::as_str), Some("1"));
    assert_eq!(reported.labels().get("team").map(String::as_str), Some("a"));
    operator.stop().await.unwrap();
}
