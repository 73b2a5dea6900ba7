//! Buckets in mode ServiceAccount (keyless, IRSA): an IAM role that only the named
//! ServiceAccount can assume, with the bucket's policy, its ARN in a ConfigMap and on the
//! ServiceAccount; no user and no key. On moto, as the other Bucket tests.

use super::*;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kopper::controllers::bucket::policy;

/// The OIDC provider these tests give kopper (moto's default account).
const OIDC_ARN: &str = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/TEST";
const ISSUER: &str = "oidc.example.test/id/TEST";
const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

fn keyless_flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["--oidc-provider-arn", OIDC_ARN];
    flags.extend(extra);
    flags
}

fn keyless(service_account: &str) -> serde_json::Value {
    json!({"access": {"mode": "ServiceAccount", "serviceAccountName": service_account}})
}

async fn create_service_account(cluster: &Cluster, namespace: &str, name: &str) {
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}})).unwrap();
    Api::<ServiceAccount>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
}

/// The role ARN annotation of the ServiceAccount `namespace/name`.
async fn role_annotation(cluster: &Cluster, namespace: &str, name: &str) -> Option<String> {
    let account =
        Api::<ServiceAccount>::namespaced(cluster.client.clone(), namespace).get(name).await.unwrap();
    account.annotations().get(ROLE_ARN_ANNOTATION).cloned()
}

async fn config_map(cluster: &Cluster, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(cluster.client.clone(), NAMESPACE).get_opt(name).await.unwrap()
}

/// The roles kopper made for the cluster `test`, as an admin lists them.
async fn kopper_roles(s3: &dyn Provider) -> Vec<String> {
    s3.roles("/kopper/test/").await.unwrap()
}

/// The trust policy kopper must give the role of `namespace/account`, written out by hand.
fn expected_trust(namespace: &str, account: &str) -> serde_json::Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": OIDC_ARN},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{ISSUER}:sub"): format!("system:serviceaccount:{namespace}:{account}"),
                format!("{ISSUER}:aud"): "sts.amazonaws.com",
            }},
        }],
    })
}

fn http() -> aws_sdk_s3::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// What a pod of the ServiceAccount does with the role's ARN and its projected token: an
/// unsigned AssumeRoleWithWebIdentity, then S3 with the credentials STS hands back.
async fn workload_client(endpoint: &str, role_arn: &str) -> aws_sdk_s3::Client {
    let sts = aws_sdk_sts::Client::from_conf(
        aws_sdk_sts::config::Builder::new()
            .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
            .region(aws_sdk_sts::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .http_client(http())
            .build(),
    );
    let assumed = sts
        .assume_role_with_web_identity()
        .role_arn(role_arn)
        .role_session_name("app")
        .web_identity_token(
            "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6dGVhbS1hOmFwcCJ9.c2ln",
        )
        .send()
        .await
        .unwrap();
    let issued = assumed.credentials().expect("STS answered with credentials");
    let credentials = aws_sdk_s3::config::Credentials::new(
        issued.access_key_id(),
        issued.secret_access_key(),
        Some(issued.session_token().to_owned()),
        None,
        "web-identity",
    );
    s3_client(endpoint, credentials)
}

/// A Bucket naming a ServiceAccount gets a bucket, a role whose trust policy names exactly
/// that ServiceAccount with STS as the audience, the bucket-only policy, the ARN in a
/// ConfigMap and on the ServiceAccount, and no user, key or Secret. A workload assumes the
/// role with a web identity token and writes to the bucket. An idle pass writes nothing.
/// Deleting the Bucket removes the role, its policy, the annotation and the ConfigMap.
#[tokio::test]
async fn a_service_account_gets_a_role_for_its_bucket_and_no_key_and_all_of_it_goes_with_the_bucket() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let admin = common::free_admin_addr();
    let operator = start_operator_at(&cluster, &proxy.endpoint, &keyless_flags(&["--admin-addr", &admin]));
    let s3 = moto.client().await;
    create_service_account(&cluster, NAMESPACE, "app").await;

    let bucket = create_bucket(&cluster, "data", keyless("app")).await;
    let ready = status(&wait_for_reason(&cluster, "data", "Ready").await);
    let owner = owner(&bucket);
    let role = owner.role_name();
    let arn = ready.role_arn.clone().expect("status names the role");
    assert!(arn.ends_with(&format!(":role/kopper/test/{role}")), "{arn}");
    assert_eq!(ready.service_account_name.as_deref(), Some("app"));
    assert_eq!((&ready.user_name, &ready.access_key_id), (&None, &None), "{ready:?}");

    let found = s3.role(&role).await.unwrap().expect("the role in IAM");
    assert_eq!(found.arn, arn);
    assert!(policy::equivalent(&expected_trust(NAMESPACE, "app"), &found.trust), "{}", found.trust);
    let conditions = &found.trust["Statement"][0]["Condition"]["StringEquals"];
    assert_eq!(conditions[format!("{ISSUER}:sub")], "system:serviceaccount:team-a:app");
    assert_eq!(conditions[format!("{ISSUER}:aud")], "sts.amazonaws.com");
    assert!(owner.owns(&s3.role_tags(&role).await.unwrap().unwrap()), "tagged as the Bucket's");
    let name = ready.bucket_name.clone().unwrap();
    let role_policy = s3.role_policy(&role, names::POLICY_NAME).await.unwrap().expect("the role's policy");
    assert!(policy::equivalent(&names::policy_document(&name), &role_policy), "{role_policy}");
    let (users, _) = account_contents(&moto.endpoint).await;
    assert!(users.is_empty(), "no IAM user: {users:?}");
    assert!(secret(&cluster, "data-s3").await.is_none(), "no Secret");
    let map = config_map(&cluster, "data-s3").await.expect("the ConfigMap data-s3");
    let data = map.data.unwrap();
    assert_eq!(data["AWS_ROLE_ARN"], arn);
    assert_eq!(data["BUCKET_NAME"], name);
    assert_eq!(role_annotation(&cluster, NAMESPACE, "app").await, Some(arn.clone()));

    let workload = workload_client(&moto.endpoint, &arn).await;
    workload
        .put_object()
        .bucket(&name)
        .key("written-by-the-workload.txt")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"data"))
        .send()
        .await
        .expect("the workload writes to its bucket");
    assert!(!s3.bucket_is_empty(&name).await.unwrap());

    // Labels on the ServiceAccount wake no Bucket: 20 relabels, then a change that does wake
    // it (a label on its ConfigMap) for one idle pass.
    proxy.reset_calls().await;
    let reconciles = eventually("kopper's reconcile count", || bucket_reconciles(&admin)).await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), NAMESPACE);
    for round in 0..20 {
        let label = Patch::Merge(json!({"metadata": {"labels": {"audited": format!("round-{round}")}}}));
        accounts.patch("app", &PatchParams::default(), &label).await.unwrap();
    }
    let touch = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    Api::<ConfigMap>::namespaced(cluster.client.clone(), NAMESPACE)
        .patch("data-s3", &PatchParams::default(), &touch)
        .await
        .unwrap();
    // GetRolePolicy is the pass's last provider call; a pass already under way when the
    // calls were reset may end first, and is idle too.
    let calls = eventually("a whole pass after the ConfigMap change", || async {
        let calls = proxy.calls().await;
        let looked = calls.iter().any(|call| call.operation == "GetRolePolicy");
        (looked && bucket_reconciles(&admin).await? > reconciles).then_some(calls)
    })
    .await;
    let writes: Vec<_> = calls.iter().filter(|call| call.is_write()).map(|c| &c.operation).collect();
    assert!(writes.is_empty(), "an idle pass wrote to S3 or IAM: {writes:?}");
    let passes = calls.iter().filter(|call| call.operation == "ListRoleTags").count();
    assert!(passes <= 2, "20 relabels of the ServiceAccount woke the Bucket: {passes} passes");

    delete_and_wait_gone(&cluster, "data").await;
    assert_eq!(s3.role_tags(&role).await.unwrap(), None, "the role and its policy are gone");
    assert!(kopper_roles(&s3).await.is_empty());
    assert_eq!(role_annotation(&cluster, NAMESPACE, "app").await, None, "kopper's annotation is gone");
    eventually("the ConfigMap to go with its Bucket", || async {
        config_map(&cluster, "data-s3").await.is_none().then_some(())
    })
    .await;
    assert!(!s3.bucket_is_empty(&name).await.unwrap(), "Retain keeps the data");
    operator.stop().await.unwrap();
}

/// The writes that give a keyless Bucket its credentials, in kopper's order.
const ROLE_WRITES: [&str; 2] = ["CreateRole", "PutRolePolicy"];

/// A crash right after each role call (the call takes effect, its answer is lost): each
/// Bucket still ends with exactly one role with one policy, and no user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_call_whose_answer_is_lost_leaves_exactly_one_role_and_one_policy() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &keyless_flags(&[]));
    let s3 = moto.client().await;
    for (index, operation) in ROLE_WRITES.iter().enumerate() {
        let rule = json!({"operation": operation, "times": 3, "status": 500, "forward": true});
        proxy.set_faults(json!([rule])).await;
        let name = format!("lost-{index}");
        create_service_account(&cluster, NAMESPACE, &name).await;
        let bucket = create_bucket(&cluster, &name, keyless(&name)).await;
        let ready = status(&wait_for_reason_within(&cluster, &name, "Ready", THROUGH_FAULTS).await);
        assert_faults_used(&proxy).await;
        let role = owner(&bucket).role_name();
        assert_eq!(s3.role(&role).await.unwrap().map(|role| role.arn), ready.role_arn);
        let policy = s3.role_policy(&role, names::POLICY_NAME).await.unwrap();
        assert_eq!(policy, Some(names::policy_document(&ready.bucket_name.unwrap())));
    }
    let roles = kopper_roles(&s3).await;
    assert_eq!(roles.len(), ROLE_WRITES.len(), "one role per Bucket: {roles:?}");
    let (users, buckets) = account_contents(&moto.endpoint).await;
    assert!(users.is_empty(), "no user: {users:?}");
    assert_eq!(buckets.len(), ROLE_WRITES.len(), "one bucket per Bucket: {buckets:?}");
    operator.stop().await.unwrap();
}

fn reason_message(bucket: &Bucket) -> String {
    let conditions = &status(bucket).conditions;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.message.clone()).unwrap_or_default()
}

/// Two Buckets name one ServiceAccount: the older holds it, the younger is refused naming the
/// older; when the holder goes, the other takes the ServiceAccount over. An annotation kopper
/// did not write is never overwritten, and the Bucket says who wrote it.
#[tokio::test]
async fn a_service_account_goes_to_one_bucket_and_a_foreign_annotation_is_never_overwritten() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &moto.endpoint, &keyless_flags(&[]));
    let s3 = moto.client().await;
    create_service_account(&cluster, NAMESPACE, "shared").await;

    create_bucket(&cluster, "first", keyless("shared")).await;
    let first = status(&wait_for_reason(&cluster, "first", "Ready").await);
    // Creation times count in seconds: the second Bucket is made a second later at least.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_bucket(&cluster, "second", keyless("shared")).await;
    let refused = wait_for_reason(&cluster, "second", "ServiceAccountTaken").await;
    let message = reason_message(&refused);
    assert!(message.contains("Bucket first"), "the refusal names the holder: {message}");
    assert_eq!(role_annotation(&cluster, NAMESPACE, "shared").await, first.role_arn);
    // The refused Bucket gets no role trusting the ServiceAccount, and no ConfigMap.
    let second_role = owner(&refused).role_name();
    assert_eq!(s3.role_tags(&second_role).await.unwrap(), None, "the refused Bucket has a role");
    assert_eq!(status(&refused).role_arn, None);
    assert!(config_map(&cluster, "second-s3").await.is_none());
    assert_eq!(kopper_roles(&s3).await.len(), 1, "only the holder's role");

    // A ServiceAccount that does not exist yet: no role until it does.
    create_bucket(&cluster, "early", keyless("later")).await;
    let waiting = wait_for_reason(&cluster, "early", "ServiceAccountNotFound").await;
    assert_eq!(
        s3.role_tags(&owner(&waiting).role_name()).await.unwrap(),
        None,
        "a role before its ServiceAccount"
    );
    assert!(config_map(&cluster, "early-s3").await.is_none());
    create_service_account(&cluster, NAMESPACE, "later").await;
    let early = status(&wait_for_reason(&cluster, "early", "Ready").await);
    assert_eq!(role_annotation(&cluster, NAMESPACE, "later").await, early.role_arn);
    delete_and_wait_gone(&cluster, "early").await;

    delete_and_wait_gone(&cluster, "first").await;
    let second = status(&wait_for_reason(&cluster, "second", "Ready").await);
    assert_eq!(role_annotation(&cluster, NAMESPACE, "shared").await, second.role_arn);
    assert_ne!(second.role_arn, first.role_arn);

    // Another tool's role on a ServiceAccount: kopper's apply is refused, nothing changes.
    let theirs = "arn:aws:iam::123456789012:role/platform/app-role";
    let account: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "annotated", "namespace": NAMESPACE,
                     "annotations": {ROLE_ARN_ANNOTATION: theirs}},
    }))
    .unwrap();
    let params = PostParams { field_manager: Some("platform-tool".into()), ..PostParams::default() };
    Api::<ServiceAccount>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(&params, &account)
        .await
        .unwrap();
    create_bucket(&cluster, "intruder", keyless("annotated")).await;
    let conflict = wait_for_reason(&cluster, "intruder", "ServiceAccountAnnotated").await;
    let message = reason_message(&conflict);
    assert!(message.contains("annotated") && message.contains(theirs), "{message}");
    assert_eq!(role_annotation(&cluster, NAMESPACE, "annotated").await.as_deref(), Some(theirs));
    delete_and_wait_gone(&cluster, "intruder").await;
    assert_eq!(
        role_annotation(&cluster, NAMESPACE, "annotated").await.as_deref(),
        Some(theirs),
        "a deleted Bucket leaves what it did not write"
    );
    operator.stop().await.unwrap();
}

/// Mode Key to mode ServiceAccount and back: each time exactly the credentials of the mode in
/// the spec exist (a user with one key and its Secret, or a role, its ConfigMap and the
/// annotation), and none of the other's. Naming another ServiceAccount moves the annotation
/// and rewrites the trust policy.
#[tokio::test]
async fn switching_between_key_and_keyless_leaves_exactly_the_right_credentials() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &moto.endpoint, &keyless_flags(&[]));
    let s3 = moto.client().await;
    create_service_account(&cluster, NAMESPACE, "app").await;
    let bucket = create_bucket(&cluster, "switch", json!({})).await;
    let (user, role) = (owner(&bucket).user_name(), owner(&bucket).role_name());
    let keyed = status(&wait_for_reason(&cluster, "switch", "Ready").await);
    wait_for_one_key(&cluster, &s3, "switch").await;

    let to_keyless = Patch::Merge(json!({"spec": keyless("app")}));
    buckets(&cluster).patch("switch", &PatchParams::default(), &to_keyless).await.unwrap();
    let api = buckets(&cluster);
    let keyless_ready = eventually("the Bucket Ready in mode ServiceAccount", || async {
        let bucket = api.get("switch").await.unwrap();
        let ready = ready_reason(&bucket).map(|(_, r)| r).as_deref() == Some("Ready");
        (ready && status(&bucket).role_arn.is_some()).then(|| status(&bucket))
    })
    .await;
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "the user and its key are gone");
    eventually("the Secret with the deleted key to go", || async {
        secret(&cluster, "switch-s3").await.is_none().then_some(())
    })
    .await;
    assert!(keyless_ready.user_name.is_none() && keyless_ready.access_key_id.is_none());
    assert_eq!(role_annotation(&cluster, NAMESPACE, "app").await, keyless_ready.role_arn);
    assert!(config_map(&cluster, "switch-s3").await.is_some());
    assert_eq!(keyless_ready.bucket_name, keyed.bucket_name, "the same bucket");

    // Another ServiceAccount: the annotation moves, and the trust policy names the new one.
    create_service_account(&cluster, NAMESPACE, "other").await;
    let to_other = Patch::Merge(json!({"spec": keyless("other")}));
    buckets(&cluster).patch("switch", &PatchParams::default(), &to_other).await.unwrap();
    eventually("the annotation to move to ServiceAccount other", || async {
        let moved = role_annotation(&cluster, NAMESPACE, "other").await == keyless_ready.role_arn
            && role_annotation(&cluster, NAMESPACE, "app").await.is_none();
        moved.then_some(())
    })
    .await;
    let trust = s3.role(&role).await.unwrap().unwrap().trust;
    assert!(policy::equivalent(&expected_trust(NAMESPACE, "other"), &trust), "{trust}");

    let to_key = Patch::Merge(json!({"spec": {"access": null}}));
    buckets(&cluster).patch("switch", &PatchParams::default(), &to_key).await.unwrap();
    let keyed_again = eventually("the Bucket Ready in mode Key", || async {
        let bucket = api.get("switch").await.unwrap();
        let ready = ready_reason(&bucket).map(|(_, r)| r).as_deref() == Some("Ready");
        (ready && status(&bucket).access_key_id.is_some()).then(|| status(&bucket))
    })
    .await;
    wait_for_one_key(&cluster, &s3, "switch").await;
    assert_eq!(keyed_again.role_arn, None);
    assert_eq!(s3.role_tags(&role).await.unwrap(), None, "the role and its policy are gone");
    assert_eq!(role_annotation(&cluster, NAMESPACE, "other").await, None);
    assert!(config_map(&cluster, "switch-s3").await.is_none(), "the ConfigMap is gone");
    let (users, _) = account_contents(&moto.endpoint).await;
    assert_eq!(users, vec![user], "one user");
    operator.stop().await.unwrap();
}

/// The role exists before status names it. A keyless Bucket refused afterwards (its ConfigMap
/// name is someone else's), switched to mode Key and refused again (its Secret name is
/// someone else's), then deleted: no role, no user, no key and no policy are left, and the
/// tenant's own ConfigMap and Secret are untouched.
#[tokio::test]
async fn a_bucket_refused_after_its_role_exists_leaves_no_credentials_when_deleted() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &moto.endpoint, &keyless_flags(&[]));
    let s3 = moto.client().await;
    create_service_account(&cluster, NAMESPACE, "app").await;
    let squatted_map: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "refused-s3", "namespace": NAMESPACE}, "data": {"mine": "1"}}),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &squatted_map)
        .await
        .unwrap();
    let squatted_secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "refused-s3", "namespace": NAMESPACE}, "stringData": {"mine": "1"}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &squatted_secret)
        .await
        .unwrap();

    let bucket = create_bucket(&cluster, "refused", keyless("app")).await;
    let (user, role) = (owner(&bucket).user_name(), owner(&bucket).role_name());
    let refused = wait_for_reason(&cluster, "refused", "ConfigMapNameTaken").await;
    assert!(s3.role_tags(&role).await.unwrap().is_some(), "the role was made before the refusal");
    assert_eq!(status(&refused).role_arn, None, "status does not name it");
    assert_eq!(role_annotation(&cluster, NAMESPACE, "app").await, None);

    let to_key = Patch::Merge(json!({"spec": {"access": null}}));
    buckets(&cluster).patch("refused", &PatchParams::default(), &to_key).await.unwrap();
    wait_for_reason(&cluster, "refused", "SecretNameTaken").await;
    assert!(s3.user_tags(&user).await.unwrap().is_some(), "the user was made before the refusal");
    assert_eq!(s3.role_tags(&role).await.unwrap(), None, "the switch removed the role");

    delete_and_wait_gone(&cluster, "refused").await;
    assert_eq!(s3.user_tags(&user).await.unwrap(), None, "no user, key or user policy");
    assert_eq!(s3.role_tags(&role).await.unwrap(), None, "no role or role policy");
    assert!(kopper_roles(&s3).await.is_empty());
    let map = config_map(&cluster, "refused-s3").await.expect("the tenant's ConfigMap stays");
    assert_eq!(map.data.unwrap()["mine"], "1");
    assert!(secret(&cluster, "refused-s3").await.is_some(), "the tenant's Secret stays");
    operator.stop().await.unwrap();
}

/// Without --oidc-provider-arn, a keyless Bucket says which setting is missing and nothing is
/// made for it; Buckets in mode Key work as before, and deleting one is not held up by a
/// denied look for a role on an install that never made any.
#[tokio::test]
async fn without_the_oidc_setting_a_keyless_bucket_names_it_and_key_buckets_are_unaffected() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator = start_operator_at(&cluster, &proxy.endpoint, &[]);
    let s3 = moto.client().await;
    let denied = |operation: &str| json!({"operation": operation, "times": 1000, "status": 403, "code": "AccessDenied", "message": "no"});
    proxy.set_faults(json!([denied("ListRoleTags"), denied("GetRole"), denied("ListRoles")])).await;

    create_bucket(&cluster, "keyless", keyless("app")).await;
    let refused = wait_for_reason(&cluster, "keyless", "KeylessNotConfigured").await;
    let message = reason_message(&refused);
    assert!(
        message.contains("--oidc-provider-arn") && message.contains("KOPPER_OIDC_PROVIDER_ARN"),
        "{message}"
    );
    assert_eq!(status(&refused).bucket_name, None, "no bucket was made");

    create_bucket(&cluster, "keyed", json!({})).await;
    let ready = status(&wait_for_reason(&cluster, "keyed", "Ready").await);
    let calls = proxy.calls().await;
    // The sweep (this install sets a cluster id) may list roles; a Bucket's pass looks at none.
    let role_calls: Vec<_> =
        calls.iter().filter(|call| ["ListRoleTags", "GetRole"].contains(&call.operation.as_str())).collect();
    assert!(role_calls.is_empty(), "a Bucket in mode Key looked for its role: {role_calls:?}");
    delete_and_wait_gone(&cluster, "keyed").await;
    assert_eq!(s3.user_tags(&ready.user_name.unwrap()).await.unwrap(), None);
    delete_and_wait_gone(&cluster, "keyless").await;
    let (users, buckets) = account_contents(&moto.endpoint).await;
    assert!(users.is_empty(), "{users:?}");
    assert_eq!(buckets.len(), 1, "the Retained bucket only: {buckets:?}");
    operator.stop().await.unwrap();
}

/// A keyless Bucket whose finalizer a tenant stripped: the sweep deletes its role and policy.
/// A sweep refused ListRoles still deletes the users of gone Buckets.
#[tokio::test]
async fn roles_of_gone_buckets_are_swept_and_a_denied_role_listing_spares_the_user_sweep() {
    let Some(moto) = Moto::start().await else { return };
    let proxy = FaultProxy::start(&moto.endpoint).await;
    let cluster = cluster().await;
    let operator =
        start_operator_at(&cluster, &proxy.endpoint, &keyless_flags(&["--orphan-sweep-interval", "1s"]));
    let s3 = moto.client().await;
    create_service_account(&cluster, NAMESPACE, "app").await;
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let api = buckets(&cluster);
    let gone = |name: &'static str| {
        let api = api.clone();
        async move {
            eventually(&format!("Bucket {name} to be gone"), || async {
                api.get_opt(name).await.unwrap().is_none().then_some(())
            })
            .await
        }
    };

    let keyless_bucket = create_bucket(&cluster, "leaked-role", keyless("app")).await;
    wait_for_reason(&cluster, "leaked-role", "Ready").await;
    let role = owner(&keyless_bucket).role_name();
    // Held back by a denial, then stripped of its finalizer by the tenant.
    let deny = json!([{"operation": "DeleteRole", "times": 100_000, "status": 403, "code": "AccessDenied"}]);
    proxy.set_faults(deny).await;
    api.delete("leaked-role", &DeleteParams::default()).await.unwrap();
    wait_for_reason(&cluster, "leaked-role", "AccessDenied").await;
    api.patch("leaked-role", &PatchParams::default(), &strip).await.unwrap();
    gone("leaked-role").await;
    proxy.set_faults(json!([])).await;
    eventually("the sweep to delete the gone Bucket's role", || async {
        s3.role_tags(&role).await.unwrap().is_none().then_some(())
    })
    .await;

    let denied = json!([{"operation": "ListRoles", "times": 100_000, "status": 403, "code": "AccessDenied"}]);
    proxy.set_faults(denied).await;
    create_bucket(
        &cluster,
        "leaked-user",
        json!({"deletionPolicy": "Delete", "bucketName": "leaked-user-bucket"}),
    )
    .await;
    let ready = status(&wait_for_reason(&cluster, "leaked-user", "Ready").await);
    put_object(&secret(&cluster, "leaked-user-s3").await.unwrap(), "a.txt").await;
    api.delete("leaked-user", &DeleteParams::default()).await.unwrap();
    wait_for_reason(&cluster, "leaked-user", "BucketNotEmpty").await;
    api.patch("leaked-user", &PatchParams::default(), &strip).await.unwrap();
    gone("leaked-user").await;
    let user = ready.user_name.unwrap();
    eventually("the sweep to delete the gone Bucket's user though ListRoles is denied", || async {
        s3.user_tags(&user).await.unwrap().is_none().then_some(())
    })
    .await;
    let calls = proxy.calls().await;
    assert!(
        calls.iter().any(|call| call.operation == "ListRoles" && call.status == 403),
        "the sweep was refused ListRoles: {calls:?}"
    );
    operator.stop().await.unwrap();
}

/// An S3 client with `credentials` (a session token for a role's).
fn s3_client(endpoint: &str, credentials: aws_sdk_s3::config::Credentials) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(credentials)
            .force_path_style(true)
            .http_client(http())
            .build(),
    )
}

/// Where moto enforces IAM (off by default, which is why the other tests cannot show a
/// refusal): a workload's credentials for the role write to the Bucket's bucket and are
/// refused another bucket of the same account. The web identity call is the one moto lets
/// through unsigned (it neither checks the token nor the trust policy, which the test above
/// reads back instead); every S3 call after it is checked against the role's policy.
#[tokio::test]
async fn the_role_reaches_its_bucket_and_no_other_where_moto_enforces_iam() {
    let Some(moto) = Moto::start().await else { return };
    let cluster = cluster().await;
    let s3 = moto.client().await;
    s3.create_bucket("someone-elses-bucket", REGION).await.unwrap();
    let operator = start_operator_at(&cluster, &moto.endpoint, &keyless_flags(&[]));
    create_service_account(&cluster, NAMESPACE, "app").await;
    create_bucket(&cluster, "data", keyless("app")).await;
    let ready = status(&wait_for_reason(&cluster, "data", "Ready").await);
    let (name, arn) = (ready.bucket_name.unwrap(), ready.role_arn.unwrap());
    // kopper's own key exists in no IAM: it must be stopped before moto checks keys.
    operator.stop().await.unwrap();

    moto.enforce_iam_after(1).await;
    let workload = workload_client(&moto.endpoint, &arn).await;
    let put = |bucket: &str| {
        workload
            .put_object()
            .bucket(bucket)
            .key("a.txt")
            .body(aws_sdk_s3::primitives::ByteStream::from_static(b"data"))
            .send()
    };
    put(&name).await.expect("the role writes to its bucket");
    let refused = put("someone-elses-bucket").await.expect_err("the role is refused another bucket");
    let code = aws_sdk_s3::error::ProvideErrorMetadata::code(&refused).map(str::to_owned);
    assert_eq!(code.as_deref(), Some("AccessDenied"), "{refused:?}");
}
