//! BucketAccess: a grant of a Bucket's bucket to another namespace, only with the consent the
//! Bucket gives in `spec.sharedWith`. On moto, as the other Bucket tests; what a grant's key
//! can and cannot do is shown with moto enforcing IAM, after kopper has stopped.

use super::*;

use kopper::controllers::bucket::access_types::{BucketAccess, BucketAccessStatus};
use kopper::controllers::bucket::grant::GrantOwner;

use crate::common::moto::Call;

const CONSUMER: &str = "team-b";

async fn create_namespace(cluster: &Cluster, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

fn grants(cluster: &Cluster, namespace: &str) -> Api<BucketAccess> {
    Api::namespaced(cluster.client.clone(), namespace)
}

/// A cluster with the consumer's namespace, [`CONSUMER`].
async fn consumer_cluster() -> Cluster {
    let cluster = cluster().await;
    create_namespace(&cluster, CONSUMER).await;
    cluster
}

/// A Bucket's `spec.sharedWith` consenting to [`CONSUMER`] with `mode`.
fn consent(mode: &str) -> serde_json::Value {
    json!([{"namespace": CONSUMER, "mode": mode}])
}

/// A BucketAccess `name` in [`CONSUMER`] for `team-a/data`, asking for `mode`: its status
/// once granted.
async fn create_granted(cluster: &Cluster, name: &str, mode: &str) -> BucketAccessStatus {
    create_grant(cluster, CONSUMER, name, "data", mode).await;
    wait_for_grant(cluster, CONSUMER, name, "Granted").await.0
}

/// What a consumer can do to its own BucketAccess that no pass of kopper sees: strip kopper's
/// finalizer, then delete it.
async fn strip_and_delete(cluster: &Cluster, name: &str) {
    let api = grants(cluster, CONSUMER);
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch(name, &PatchParams::default(), &strip).await.unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

/// A BucketAccess in `namespace` for the Bucket `team-a/<bucket>`, asking for `mode`.
async fn create_grant(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    bucket: &str,
    mode: &str,
) -> BucketAccess {
    let grant: BucketAccess = serde_json::from_value(json!({
        "apiVersion": "kopper.dev/v1alpha1",
        "kind": "BucketAccess",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"bucketRef": {"namespace": NAMESPACE, "name": bucket}, "mode": mode},
    }))
    .unwrap();
    grants(cluster, namespace).create(&PostParams::default(), &grant).await.unwrap()
}

/// A Ready Bucket `team-a/<name>` shared as `shared_with` says.
async fn shared_bucket(cluster: &Cluster, name: &str, shared_with: serde_json::Value) -> BucketStatus {
    create_bucket(cluster, name, json!({"sharedWith": shared_with})).await;
    status(&wait_for_reason(cluster, name, "Ready").await)
}

/// The grant's Ready reason and message once its reason is `reason`, and its status.
async fn wait_for_grant(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    reason: &str,
) -> (BucketAccessStatus, String) {
    wait_for_grant_within(cluster, namespace, name, reason, common::DEADLINE).await
}

async fn wait_for_grant_within(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    reason: &str,
    deadline: Duration,
) -> (BucketAccessStatus, String) {
    let api = grants(cluster, namespace);
    eventually_within(deadline, &format!("BucketAccess {namespace}/{name} to report {reason}"), || async {
        let grant = api.get(name).await.unwrap();
        let status = grant.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        (ready.reason == reason).then_some((status, ready.message))
    })
    .await
}

async fn secret_in(cluster: &Cluster, namespace: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(cluster.client.clone(), namespace).get_opt(name).await.unwrap()
}

/// Every IAM user of the account.
async fn users(endpoint: &str) -> Vec<String> {
    account_contents(endpoint).await.0
}

/// Asserts that the account's IAM users are `expected`, in any order.
async fn assert_users(endpoint: &str, mut expected: Vec<String>, why: &str) {
    let mut left = users(endpoint).await;
    left.sort();
    expected.sort();
    assert_eq!(left, expected, "{why}");
}

fn grant_owner(grant: &BucketAccess, bucket: &Bucket) -> GrantOwner {
    GrantOwner {
        cluster: "test".into(),
        namespace: grant.namespace().unwrap(),
        name: grant.name_any(),
        grant_uid: grant.uid().unwrap(),
        bucket_uid: bucket.uid().unwrap(),
    }
}

/// Whether an IAM call names a grant user (of the cluster `test`).
fn is_grant_user_call(call: &Call) -> bool {
    let prefix = format!("{}ga-", kopper::controllers::bucket::names::user_name_prefix("test"));
    call.service == "iam" && call.user.as_deref().is_some_and(|user| user.starts_with(&prefix))
}

/// The grant users (of the cluster `test`) in the account.
async fn grant_users(endpoint: &str) -> Vec<String> {
    let prefix = format!("{}ga-", kopper::controllers::bucket::names::user_name_prefix("test"));
    users(endpoint).await.into_iter().filter(|user| user.starts_with(&prefix)).collect()
}

fn error_code<E: aws_sdk_s3::error::ProvideErrorMetadata>(error: &E) -> Option<String> {
    error.code().map(str::to_owned)
}

async fn get_object(secret: &Secret, key: &str) -> Result<(), String> {
    let got =
        application_client(secret).get_object().bucket(value(secret, "BUCKET_NAME")).key(key).send().await;
    got.map(drop).map_err(|error| error_code(&error).unwrap_or_else(|| format!("{error:?}")))
}

async fn try_put_object(secret: &Secret, key: &str) -> Result<(), String> {
    let put = application_client(secret)
        .put_object()
        .bucket(value(secret, "BUCKET_NAME"))
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"data"))
        .send()
        .await;
    put.map(drop).map_err(|error| error_code(&error).unwrap_or_else(|| format!("{error:?}")))
}

/// A read-only grant's key reads the shared bucket and is refused a write; a read-write
/// grant's key writes. The Secret holds what a Bucket's does, for the shared bucket.
#[tokio::test]
async fn a_read_only_grant_reads_and_cannot_write_and_a_read_write_grant_writes() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    create_namespace(&cluster, "team-c").await;
    let operator = start_operator(&cluster, &moto);
    let shared =
        json!([{"namespace": CONSUMER, "mode": "ReadOnly"}, {"namespace": "team-c", "mode": "ReadWrite"}]);
    let ready = shared_bucket(&cluster, "data", shared).await;
    let bucket_name = ready.bucket_name.unwrap();
    put_object(&secret(&cluster, "data-s3").await.unwrap(), "report.csv").await;

    let reader = create_grant(&cluster, CONSUMER, "reader", "data", "ReadOnly").await;
    let writer = create_grant(&cluster, "team-c", "writer", "data", "ReadWrite").await;
    let (granted, message) = wait_for_grant(&cluster, CONSUMER, "reader", "Granted").await;
    assert!(message.contains("ReadOnly") && message.contains(&bucket_name), "{message}");
    assert_eq!(granted.bucket_name.as_deref(), Some(bucket_name.as_str()));
    let bucket = buckets(&cluster).get("data").await.unwrap();
    assert_eq!(granted.user_name, Some(grant_owner(&reader, &bucket).user_name()));
    wait_for_grant(&cluster, "team-c", "writer", "Granted").await;
    // A read-write grant lowered to read-only: the policy follows it.
    create_grant(&cluster, "team-c", "lowered", "data", "ReadWrite").await;
    wait_for_grant(&cluster, "team-c", "lowered", "Granted").await;
    let lower = Patch::Merge(json!({"spec": {"mode": "ReadOnly"}}));
    grants(&cluster, "team-c").patch("lowered", &PatchParams::default(), &lower).await.unwrap();
    eventually("the lowered grant granted read-only", || async {
        let (_, message) = wait_for_grant(&cluster, "team-c", "lowered", "Granted").await;
        message.starts_with("ReadOnly").then_some(())
    })
    .await;
    let lowered = secret_in(&cluster, "team-c", "lowered").await.unwrap();
    let read_only =
        secret_in(&cluster, CONSUMER, "reader").await.expect("the grant's Secret, named after it");
    assert_eq!(value(&read_only, "BUCKET_NAME"), bucket_name);
    assert_eq!(value(&read_only, "AWS_REGION"), REGION);
    assert_eq!(value(&read_only, "AWS_ACCESS_KEY_ID"), granted.access_key_id.clone().unwrap());
    assert_eq!(read_only.owner_references()[0].uid, reader.uid().unwrap(), "owned by the BucketAccess");
    let read_write = secret_in(&cluster, "team-c", "writer").await.unwrap();
    let s3 = moto.client().await;
    let user = granted.user_name.unwrap();
    assert_eq!(key_ids(&s3, &user).await.unwrap(), vec![value(&read_only, "AWS_ACCESS_KEY_ID")]);
    let _ = writer;
    // kopper's own key exists in no IAM: it must be stopped before moto checks keys.
    operator.stop().await.unwrap();

    moto.enforce_iam_after(0).await;
    get_object(&read_only, "report.csv").await.expect("the read-only grant reads");
    assert_eq!(try_put_object(&read_only, "mine.csv").await, Err("AccessDenied".to_owned()));
    try_put_object(&read_write, "written.csv").await.expect("the read-write grant writes");
    get_object(&read_write, "written.csv").await.expect("and reads");
    assert_eq!(
        try_put_object(&lowered, "lowered.csv").await,
        Err("AccessDenied".to_owned()),
        "lowered: no write"
    );
    get_object(&lowered, "report.csv").await.expect("the lowered grant still reads");
}

/// Without an entry in the Bucket's sharedWith, a grant is refused (NotShared) and no IAM user
/// is made; the consent given afterwards grants it, and the Bucket's own namespace needs none.
#[tokio::test]
async fn a_grant_without_consent_is_refused_and_gets_no_user_until_the_owner_consents() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    shared_bucket(&cluster, "data", json!([])).await;
    let before = users(&moto.endpoint).await;
    proxy.reset_calls().await;

    create_grant(&cluster, CONSUMER, "reader", "data", "ReadOnly").await;
    let (refused, message) = wait_for_grant(&cluster, CONSUMER, "reader", "NotShared").await;
    assert!(message.contains("spec.sharedWith") && message.contains(CONSUMER), "{message}");
    assert_eq!((refused.user_name, refused.access_key_id), (None, None));
    assert!(secret_in(&cluster, CONSUMER, "reader").await.is_none());
    assert_eq!(users(&moto.endpoint).await, before, "no IAM user for a grant never consented to");
    let grant_calls: Vec<_> = proxy.calls().await.into_iter().filter(is_grant_user_call).collect();
    assert!(grant_calls.is_empty(), "a refused grant makes no IAM call: {grant_calls:?}");

    let consent =
        Patch::Merge(json!({"spec": {"sharedWith": [{"namespace": CONSUMER, "mode": "ReadOnly"}]}}));
    buckets(&cluster).patch("data", &PatchParams::default(), &consent).await.unwrap();
    wait_for_grant(&cluster, CONSUMER, "reader", "Granted").await;
    create_grant(&cluster, NAMESPACE, "own", "data", "ReadWrite").await;
    wait_for_grant(&cluster, NAMESPACE, "own", "Granted").await;
    assert_eq!(users(&moto.endpoint).await.len(), before.len() + 2);
    operator.stop().await.unwrap();
}

/// The Bucket's owner removes the namespace from sharedWith: the grant's user and key are
/// deleted, its Secret is gone, status says why, and the old key is refused by S3.
#[tokio::test]
async fn withdrawn_consent_deletes_the_grant_s_user_key_and_secret() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    shared_bucket(&cluster, "data", consent("ReadWrite")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let old = secret_in(&cluster, CONSUMER, "reader").await.unwrap();
    let user = granted.user_name.unwrap();
    let s3 = moto.client().await;

    let withdraw = Patch::Merge(json!({"spec": {"sharedWith": null}}));
    buckets(&cluster).patch("data", &PatchParams::default(), &withdraw).await.unwrap();
    let (revoked, message) = wait_for_grant(&cluster, CONSUMER, "reader", "NotShared").await;
    assert!(message.contains("does not exist or is not shared"), "{message}");
    assert_eq!((revoked.user_name, revoked.access_key_id), (None, None));
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "the grant's user is gone");
    eventually("the grant's Secret to be gone", || async {
        secret_in(&cluster, CONSUMER, "reader").await.is_none().then_some(())
    })
    .await;
    let events = Api::<Event>::namespaced(cluster.client.clone(), CONSUMER);
    eventually("a Revoked Event on the BucketAccess", || async {
        let listed = events.list(&ListParams::default()).await.unwrap();
        listed.items.iter().any(|event| event.reason.as_deref() == Some("Revoked")).then_some(())
    })
    .await;
    operator.stop().await.unwrap();

    moto.enforce_iam_after(0).await;
    let refused = get_object(&old, "anything").await.expect_err("the old key is refused");
    assert!(["InvalidAccessKeyId", "AccessDenied"].contains(&refused.as_str()), "{refused}");
}

/// A BucketAccess's new secretName gets the key and the former Secret goes; deleting the
/// BucketAccess deletes its user and key (its finalizer holds it until then); the Bucket's own
/// user is untouched.
#[tokio::test]
async fn a_moved_secret_leaves_no_former_one_and_deleting_a_grant_deletes_its_user() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let s3 = moto.client().await;
    let user = granted.user_name.clone().unwrap();

    // Another secretName: the key moves there, and the former Secret (its key deleted) goes.
    let moved = Patch::Merge(json!({"spec": {"secretName": "reader-moved"}}));
    grants(&cluster, CONSUMER).patch("reader", &PatchParams::default(), &moved).await.unwrap();
    let held = eventually("the key in the new Secret", || async {
        secret_in(&cluster, CONSUMER, "reader-moved").await.map(|moved| value(&moved, "AWS_ACCESS_KEY_ID"))
    })
    .await;
    eventually("the former Secret gone and one key, the new Secret's", || async {
        let former = secret_in(&cluster, CONSUMER, "reader").await;
        (former.is_none() && key_ids(&s3, &user).await.unwrap() == vec![held.clone()]).then_some(())
    })
    .await;

    grants(&cluster, CONSUMER).delete("reader", &DeleteParams::default()).await.unwrap();
    let api = grants(&cluster, CONSUMER);
    eventually("the BucketAccess to be gone", || async {
        api.get_opt("reader").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(s3.user_tags(&granted.user_name.unwrap()).await.unwrap(), None);
    assert_eq!(users(&moto.endpoint).await, vec![ready.user_name.unwrap()], "the Bucket's own user stays");
    operator.stop().await.unwrap();
}

/// Deleting a shared Bucket deletes every grant's user before its own: while IAM refuses
/// DeleteUser, the grant user has lost its key and the Bucket's own user still has its key;
/// once IAM allows it, every user is gone and the grant reports why.
#[tokio::test]
async fn deleting_a_bucket_deletes_its_grants_users_first() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let (own, grant_user) = (ready.user_name.unwrap(), granted.user_name.unwrap());
    let s3 = moto.client().await;

    proxy
        .set_faults(
            json!([{"operation": "DeleteUser", "times": 1000, "status": 403, "code": "AccessDenied"}]),
        )
        .await;
    buckets(&cluster).delete("data", &DeleteParams::default()).await.unwrap();
    wait_for_reason(&cluster, "data", "AccessDenied").await;
    eventually("the grant user's key to be deleted", || async {
        key_ids(&s3, &grant_user).await.unwrap().is_empty().then_some(())
    })
    .await;
    assert_eq!(key_ids(&s3, &own).await.unwrap().len(), 1, "the Bucket's own key waits for its grants");

    proxy.set_faults(json!([])).await;
    nudge(&cluster, "data", "1").await;
    let api = buckets(&cluster);
    eventually_within(THROUGH_FAULTS, "the Bucket to be gone", || async {
        api.get_opt("data").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(users(&moto.endpoint).await.is_empty(), "every user is gone");
    wait_for_grant(&cluster, CONSUMER, "reader", "NotShared").await;
    operator.stop().await.unwrap();
}

/// kopper restarts while a Bucket with a granted grant is being deleted, and its list of
/// BucketAccesses is held at the API server: the Bucket's cleanup waits for that list
/// (`WaitingForGrants`) and deletes nothing, so neither the bucket nor the Bucket's own user
/// goes while the grant's key works; once listed, every user is gone and so is the Bucket.
#[tokio::test]
async fn a_restarted_kopper_deletes_no_bucket_before_it_has_listed_its_grants() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    operator.stop().await.unwrap();
    buckets(&cluster).delete("data", &DeleteParams::default()).await.unwrap();

    // The grant watch's first list, and the sweep's (at start, if it lists grants first).
    let mut held = cluster.sim.faults().hold_next("list", "bucketaccesses");
    let also = cluster.sim.faults().hold_next("list", "bucketaccesses");
    let operator = start_operator(&cluster, &moto);
    held.arrived().await;
    wait_for_reason(&cluster, "data", "WaitingForGrants").await;
    assert_users(
        &moto.endpoint,
        vec![ready.user_name.unwrap(), granted.user_name.unwrap()],
        "nothing is deleted before the grants are listed",
    )
    .await;
    assert!(buckets(&cluster).get_opt("data").await.unwrap().is_some());

    held.release();
    drop(also);
    let api = buckets(&cluster);
    eventually("the Bucket to be gone", || async {
        api.get_opt("data").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(users(&moto.endpoint).await.is_empty(), "every user is gone");
    operator.stop().await.unwrap();
}

/// The writes that make a grant, in kopper's order.
const GRANT_WRITES: [&str; 3] = ["CreateUser", "PutUserPolicy", "CreateAccessKey"];

/// A crash right after each provider call of a grant (the call takes effect, its answer is
/// lost): each grant still ends with exactly one user and one key, the one in its Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_call_whose_answer_is_lost_leaves_one_user_and_one_key() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let s3 = moto.client().await;
    for (index, operation) in GRANT_WRITES.iter().enumerate() {
        proxy.set_faults(json!([{"operation": operation, "times": 3, "status": 500, "forward": true}])).await;
        let name = format!("lost-{index}");
        create_grant(&cluster, CONSUMER, &name, "data", "ReadOnly").await;
        let (granted, _) = wait_for_grant_within(&cluster, CONSUMER, &name, "Granted", THROUGH_FAULTS).await;
        assert_faults_used(&proxy).await;
        let user = granted.user_name.unwrap();
        let held = value(&secret_in(&cluster, CONSUMER, &name).await.unwrap(), "AWS_ACCESS_KEY_ID");
        eventually(&format!("{name}: one key, the one in its Secret"), || async {
            (key_ids(&s3, &user).await.unwrap() == vec![held.clone()]).then_some(())
        })
        .await;
    }
    assert_eq!(
        users(&moto.endpoint).await.len(),
        1 + GRANT_WRITES.len(),
        "one user per grant and the Bucket's"
    );
    operator.stop().await.unwrap();
}

/// The grant controller's reconciles, from kopper's metrics.
async fn grant_reconciles(admin: &str) -> Option<u64> {
    let (_, body) = common::http_get(admin, "/metrics").await?;
    let prefix = "kopper_reconciles_total{controller=\"bucket-access\"}";
    let line = body.lines().find(|line| line.starts_with(prefix))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// Writes to BucketAccesses and Secrets the API server has counted.
fn grant_and_secret_writes(cluster: &Cluster) -> u64 {
    let writes = ["create", "update", "patch", "delete"];
    cluster
        .sim
        .counters()
        .snapshot()
        .into_iter()
        .filter(|((verb, resource), _)| {
            writes.contains(&verb.as_str())
                && (resource.starts_with("bucketaccesses") || resource.starts_with("secrets"))
        })
        .map(|(_, count)| count)
        .sum()
}

/// A granted BucketAccess woken with nothing to do writes nothing: no IAM call that writes,
/// no status write, no Secret write.
#[tokio::test]
async fn a_granted_grant_s_idle_pass_writes_nothing() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let admin = common::free_admin_addr();
    let operator = start_operator_at(&cluster, &proxy.endpoint, &["--admin-addr", &admin]);
    shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    create_grant(&cluster, CONSUMER, "reader", "data", "ReadOnly").await;
    wait_for_grant(&cluster, CONSUMER, "reader", "Granted").await;
    // The pass its own Secret write queued is done once the count holds still.
    let reconciles = eventually("kopper's grant reconcile count to hold still", || async {
        let before = grant_reconciles(&admin).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        (grant_reconciles(&admin).await? == before).then_some(before)
    })
    .await;

    proxy.reset_calls().await;
    let writes = grant_and_secret_writes(&cluster);
    // A label on the Secret wakes the grant (its Secret changed) and asks for nothing.
    let label = Patch::Merge(json!({"metadata": {"labels": {"audited": "yes"}}}));
    Api::<Secret>::namespaced(cluster.client.clone(), CONSUMER)
        .patch("reader", &PatchParams::default(), &label)
        .await
        .unwrap();
    eventually("a pass after the Secret change", || async {
        (grant_reconciles(&admin).await? > reconciles).then_some(())
    })
    .await;
    let calls = proxy.calls().await;
    assert!(calls.iter().any(|call| call.operation == "ListAccessKeys"), "the pass looked: {calls:?}");
    let provider_writes: Vec<_> = calls.iter().filter(|call| call.is_write()).map(|c| &c.operation).collect();
    assert!(provider_writes.is_empty(), "an idle pass wrote to IAM: {provider_writes:?}");
    assert_eq!(grant_and_secret_writes(&cluster) - writes, 1, "only the test's own label was written");
    operator.stop().await.unwrap();
}

/// A BucketAccess gone without its finalizer (stripped while kopper was down) leaves its
/// user behind: the sweep deletes it, and the Bucket's own user and another live grant's stay.
#[tokio::test]
async fn the_user_of_a_grant_gone_without_its_finalizer_is_swept() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    create_grant(&cluster, CONSUMER, "gone", "data", "ReadOnly").await;
    create_grant(&cluster, CONSUMER, "kept", "data", "ReadOnly").await;
    let (gone, _) = wait_for_grant(&cluster, CONSUMER, "gone", "Granted").await;
    let (kept, _) = wait_for_grant(&cluster, CONSUMER, "kept", "Granted").await;
    operator.stop().await.unwrap();

    strip_and_delete(&cluster, "gone").await;
    assert!(grants(&cluster, CONSUMER).get_opt("gone").await.unwrap().is_none());
    let s3 = moto.client().await;
    let gone_user = gone.user_name.unwrap();
    assert!(s3.user_tags(&gone_user).await.unwrap().is_some(), "left behind");

    let operator = start_operator_at(&cluster, &moto.endpoint, &["--orphan-sweep-interval", "1s"]);
    eventually("the orphaned grant user to be swept", || async {
        s3.user_tags(&gone_user).await.unwrap().is_none().then_some(())
    })
    .await;
    assert_users(
        &moto.endpoint,
        vec![ready.user_name.unwrap(), kept.user_name.unwrap()],
        "the Bucket's user and the live grant's stay",
    )
    .await;
    operator.stop().await.unwrap();
}

/// A class pointed at another backend (here: other credentials, another account) after a
/// grant's user was made: withdrawing consent then deletes nothing on the class's new backend
/// and claims nothing; the grant reports BackendChanged and its user stays where it is, until
/// the class points back and the user is deleted there.
#[tokio::test]
async fn a_grant_whose_class_moved_to_another_backend_is_revoked_only_on_its_own() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    super::class::create_admin_secret(&cluster, "other-admin").await;
    let operator = start_operator(&cluster, &moto);
    let backend = |secret: &str| json!({"backend": {"region": REGION, "endpoint": moto.endpoint, "forcePathStyle": true, "credentialsSecret": secret}});
    super::class::create_class(&cluster, "fast", backend("s3-admin"), false).await;
    create_bucket(&cluster, "data", json!({"className": "fast", "sharedWith": consent("ReadOnly")})).await;
    wait_for_reason(&cluster, "data", "Ready").await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let user = granted.user_name.unwrap();
    assert!(granted.backend.is_some_and(|backend| backend.starts_with(&moto.endpoint)));

    super::class::patch_class(&cluster, "fast", backend("other-admin")).await;
    wait_for_reason(&cluster, "data", "BackendChanged").await;
    let withdraw = Patch::Merge(json!({"spec": {"sharedWith": null}}));
    buckets(&cluster).patch("data", &PatchParams::default(), &withdraw).await.unwrap();
    let (held, message) = wait_for_grant(&cluster, CONSUMER, "reader", "BackendChanged").await;
    assert!(message.contains(&user) && message.contains("BucketClass fast"), "{message}");
    assert_eq!(held.user_name.as_deref(), Some(user.as_str()), "still recorded");
    let s3 = moto.client().await;
    assert!(s3.user_tags(&user).await.unwrap().is_some(), "not deleted elsewhere and forgotten");

    super::class::patch_class(&cluster, "fast", backend("s3-admin")).await;
    wait_for_grant(&cluster, CONSUMER, "reader", "NotShared").await;
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "deleted on its own backend");
    operator.stop().await.unwrap();
}

/// kopper with its default cluster id, which another cluster in the account may share.
fn start_operator_with_default_id(cluster: &Cluster, endpoint: &str, extra: &[&str]) -> Operator {
    let mut flags = vec!["--cluster-id", kopper::controllers::bucket::DEFAULT_CLUSTER_ID];
    flags.extend(extra);
    start_operator_at(cluster, endpoint, &flags)
}

/// With the default cluster id the sweep still deletes what it can prove its own: the user of
/// a BucketAccess deleted without its finalizer while kopper was down, whose Bucket exists
/// here, goes as kopper starts again; a user under the same grants path for a Bucket this
/// cluster does not have (another cluster's, under the same id) stays through later sweeps.
#[tokio::test]
async fn with_the_default_cluster_id_a_grant_gone_while_kopper_was_down_loses_its_user() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let operator = start_operator_with_default_id(&cluster, &proxy.endpoint, &[]);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    create_grant(&cluster, CONSUMER, "gone", "data", "ReadOnly").await;
    create_grant(&cluster, CONSUMER, "kept", "data", "ReadOnly").await;
    let (gone, _) = wait_for_grant(&cluster, CONSUMER, "gone", "Granted").await;
    let (kept, _) = wait_for_grant(&cluster, CONSUMER, "kept", "Granted").await;
    operator.stop().await.unwrap();

    strip_and_delete(&cluster, "gone").await;
    let s3 = moto.client().await;
    let theirs = GrantOwner {
        cluster: kopper::controllers::bucket::DEFAULT_CLUSTER_ID.into(),
        namespace: CONSUMER.into(),
        name: "theirs".into(),
        grant_uid: "a-grant-of-another-cluster".into(),
        bucket_uid: "a-bucket-of-another-cluster".into(),
    };
    s3.create_user(&theirs.user_name(), &theirs.user_path(), &theirs.tags()).await.unwrap();

    let operator =
        start_operator_with_default_id(&cluster, &proxy.endpoint, &["--orphan-sweep-interval", "1s"]);
    let gone_user = gone.user_name.unwrap();
    eventually("the user of the grant gone while kopper was down to be swept", || async {
        s3.user_tags(&gone_user).await.unwrap().is_none().then_some(())
    })
    .await;
    proxy.reset_calls().await;
    eventually("two more sweeps to start (so one has run whole)", || async {
        let calls = proxy.calls().await;
        (calls.iter().filter(|call| call.operation == "ListUsers").count() >= 2).then_some(())
    })
    .await;
    assert_users(
        &moto.endpoint,
        vec![ready.user_name.unwrap(), kept.user_name.unwrap(), theirs.user_name()],
        "the Bucket's user, the live grant's and the other cluster's stay",
    )
    .await;
    operator.stop().await.unwrap();
}

/// A Bucket deleted after one of its BucketAccesses left without its finalizer while kopper
/// was down (default cluster id): the Bucket's cleanup lists its grants' users by their IAM
/// path, so that user goes with the Bucket's own, and nothing is left.
#[tokio::test]
async fn deleting_a_bucket_deletes_the_user_of_a_grant_gone_while_kopper_was_down() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    // The sweep, which would delete that user too, is denied its listing of every grant user;
    // the cleanup's listing of the Bucket's own (a longer path) goes through.
    let sweep_listing =
        kopper::controllers::bucket::grant::grants_path(kopper::controllers::bucket::DEFAULT_CLUSTER_ID);
    proxy
        .set_faults(json!([{"operation": "ListUsers", "params": {"PathPrefix": sweep_listing}, "times": 1000,
                            "status": 403, "code": "AccessDenied"}]))
        .await;
    let operator = start_operator_with_default_id(&cluster, &proxy.endpoint, &[]);
    shared_bucket(&cluster, "data", consent("ReadWrite")).await;
    let gone = create_granted(&cluster, "gone", "ReadWrite").await;
    operator.stop().await.unwrap();

    strip_and_delete(&cluster, "gone").await;
    buckets(&cluster).delete("data", &DeleteParams::default()).await.unwrap();
    assert!(users(&moto.endpoint).await.contains(&gone.user_name.unwrap()), "left behind");

    let operator = start_operator_with_default_id(&cluster, &proxy.endpoint, &[]);
    let buckets = buckets(&cluster);
    eventually("the Bucket to be gone", || async {
        buckets.get_opt("data").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(users(&moto.endpoint).await, Vec::<String>::new(), "no user outlives the Bucket");
    let sweeps_denied = 1000 - proxy.faults().await[0]["times"].as_u64().unwrap();
    assert!(sweeps_denied > 0, "the sweep listed grant users and was denied");
    operator.stop().await.unwrap();
}

/// A consumer strips kopper's finalizer from its own granted BucketAccess and deletes it, so
/// that no pass revokes it: kopper sees the grant go with its user still recorded and deletes
/// that user anyway (no sweep runs in this test), so the key it copied is refused, and the
/// Bucket's own user stays.
#[tokio::test]
async fn a_grant_deleted_without_its_finalizer_loses_its_user_at_once() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let copied = secret_in(&cluster, CONSUMER, "reader").await.unwrap();
    let user = granted.user_name.unwrap();

    strip_and_delete(&cluster, "reader").await;
    let s3 = moto.client().await;
    eventually("the user of the grant deleted without its finalizer to be gone", || async {
        s3.user_tags(&user).await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(users(&moto.endpoint).await, vec![ready.user_name.unwrap()], "the Bucket's own user stays");
    operator.stop().await.unwrap();

    moto.enforce_iam_after(0).await;
    let refused = get_object(&copied, "anything").await.expect_err("the copied key is refused");
    assert!(["InvalidAccessKeyId", "AccessDenied"].contains(&refused.as_str()), "{refused}");
}

/// The race of a Bucket's deletion and a grant's first pass: the Bucket (`Retain`) is deleted
/// while the grant's CreateUser is held at the proxy, so that its user is made after the
/// Bucket is gone. kopper reads the Bucket again once the user exists and deletes it before it
/// gets a key: no grant user is left, and no key was ever made.
#[tokio::test]
async fn a_bucket_deleted_while_a_grant_s_user_is_made_leaves_no_grant_user() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = consumer_cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let shared = consent("ReadOnly");
    create_bucket(&cluster, "data", json!({"deletionPolicy": "Retain", "sharedWith": shared})).await;
    wait_for_reason(&cluster, "data", "Ready").await;
    proxy.set_faults(json!([{"operation": "CreateUser", "times": 1, "delay": 10}])).await;
    proxy.reset_calls().await;

    create_grant(&cluster, CONSUMER, "reader", "data", "ReadOnly").await;
    let api = grants(&cluster, CONSUMER);
    eventually("the grant's user recorded, its CreateUser held", || async {
        api.get("reader").await.unwrap().status?.user_name.map(drop)
    })
    .await;
    buckets(&cluster).delete("data", &DeleteParams::default()).await.unwrap();
    let bucket_api = buckets(&cluster);
    eventually("the Bucket to be gone", || async {
        bucket_api.get_opt("data").await.unwrap().is_none().then_some(())
    })
    .await;
    let calls = proxy.calls().await;
    assert!(
        !calls.iter().any(|call| call.operation == "CreateUser"),
        "the Bucket must be gone before the held CreateUser is answered: {calls:?}"
    );

    let (withdrawn, _) =
        wait_for_grant_within(&cluster, CONSUMER, "reader", "NotShared", THROUGH_FAULTS).await;
    assert_eq!(withdrawn.user_name, None);
    eventually("no grant user left", || async { grant_users(&moto.endpoint).await.is_empty().then_some(()) })
        .await;
    let calls = proxy.calls().await;
    assert!(calls.iter().any(|call| call.operation == "CreateUser"), "the user was made: {calls:?}");
    assert!(!calls.iter().any(|call| call.operation == "CreateAccessKey"), "and never got a key: {calls:?}");
    assert!(secret_in(&cluster, CONSUMER, "reader").await.is_none());
    operator.stop().await.unwrap();
}

/// A Bucket gone without kopper seeing it (its finalizer stripped while kopper was down) and
/// created again under its name is another Bucket: the grant's user of the former is deleted,
/// and the grant gets a user for the new one.
#[tokio::test]
async fn a_bucket_created_again_under_its_name_deletes_the_former_bucket_s_grant_user() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let shared = consent("ReadOnly");
    let spec =
        |name: &str| json!({"deletionPolicy": "Retain", "bucketName": name, "sharedWith": shared.clone()});
    create_bucket(&cluster, "data", spec("grant-former-bucket")).await;
    wait_for_reason(&cluster, "data", "Ready").await;
    let former = create_granted(&cluster, "reader", "ReadOnly").await;
    let former_user = former.user_name.unwrap();
    let own_user = status(&buckets(&cluster).get("data").await.unwrap()).user_name.unwrap();
    operator.stop().await.unwrap();
    // The former Bucket's own user, which its stripped finalizer no longer deletes, is deleted
    // by hand (as install.md says); the grant's user is left for kopper.
    let s3 = moto.client().await;
    for key in key_ids(&s3, &own_user).await.unwrap() {
        s3.delete_access_key(&own_user, &key).await.unwrap();
    }
    s3.delete_user_policy(&own_user, kopper::controllers::bucket::names::POLICY_NAME).await.unwrap();
    s3.delete_user(&own_user).await.unwrap();

    let api = buckets(&cluster);
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("data", &PatchParams::default(), &strip).await.unwrap();
    api.delete("data", &DeleteParams::default()).await.unwrap();
    create_bucket(&cluster, "data", spec("grant-new-bucket")).await;

    let operator = start_operator(&cluster, &moto);
    wait_for_reason(&cluster, "data", "Ready").await;
    let (granted, message) = eventually("the grant granted the new Bucket", || async {
        let (granted, message) = wait_for_grant(&cluster, CONSUMER, "reader", "Granted").await;
        message.contains("grant-new-bucket").then_some((granted, message))
    })
    .await;
    assert_ne!(granted.user_name.as_deref(), Some(former_user.as_str()), "{message}");
    assert_eq!(s3.user_tags(&former_user).await.unwrap(), None, "the former Bucket's grant user is gone");
    assert_eq!(grant_users(&moto.endpoint).await, vec![granted.user_name.unwrap()]);
    operator.stop().await.unwrap();
}

/// Deleting the consumer's namespace deletes its BucketAccess, and with it the grant's IAM
/// user and key (the finalizer holds the namespace until then); the Bucket's own user stays.
#[tokio::test]
async fn deleting_a_consumer_namespace_deletes_its_grant_s_user() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = consumer_cluster().await;
    let operator = start_operator(&cluster, &moto);
    let ready = shared_bucket(&cluster, "data", consent("ReadOnly")).await;
    let granted = create_granted(&cluster, "reader", "ReadOnly").await;
    let user = granted.user_name.unwrap();

    let namespaces = Api::<Namespace>::all(cluster.client.clone());
    namespaces.delete(CONSUMER, &DeleteParams::default()).await.unwrap();
    eventually("the consumer namespace to be gone", || async {
        namespaces.get_opt(CONSUMER).await.unwrap().is_none().then_some(())
    })
    .await;
    let s3 = moto.client().await;
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "the grant's user went with its namespace");
    assert_eq!(users(&moto.endpoint).await, vec![ready.user_name.unwrap()], "the Bucket's own user stays");
    operator.stop().await.unwrap();
}
