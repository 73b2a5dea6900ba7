use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};

use crate::common::{NAMESPACE_DEADLINE, TestCluster, api_error, wait_for, wait_for_within};

fn config_map(value: serde_json::Value) -> ConfigMap {
    serde_json::from_value(value).unwrap()
}

async fn gone<K>(api: &Api<K>, name: &str) -> Option<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none().then_some(())
}

#[tokio::test]
async fn finalizer_holds_the_object_until_it_is_removed() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let cm = config_map(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}));
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let held = api.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some(), "deletion is pending");
    let status = api_error(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}})),
        )
        .await,
    );
    assert_eq!(status.code, 422, "no new finalizers on a deleting object");
    assert!(status.message.contains("no new finalizers can be added"), "{}", status.message);
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    wait_for("the object to go once its finalizer is removed", || gone(&api, "held")).await;
}

async fn owner_and_dependent(cluster: &TestCluster, ns: &str, block: bool) -> (Api<ConfigMap>, Api<Secret>) {
    let owners: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), ns);
    let owner = owners
        .create(&PostParams::default(), &config_map(json!({"metadata": {"name": "owner"}})))
        .await
        .unwrap();
    let dependents: Api<Secret> = Api::namespaced(cluster.client.clone(), ns);
    let dependent: Secret = serde_json::from_value(json!({"metadata": {"name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.unwrap(), "blockOwnerDeletion": block}]}}))
    .unwrap();
    dependents.create(&PostParams::default(), &dependent).await.unwrap();
    (owners, dependents)
}

#[tokio::test]
async fn background_deletion_collects_dependents_after_the_owner_is_gone() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let (owners, dependents) = owner_and_dependent(&cluster, &ns, false).await;
    owners.delete("owner", &DeleteParams::background()).await.unwrap();
    assert!(owners.get_opt("owner").await.unwrap().is_none(), "the owner goes at once");
    wait_for("the dependent to be collected", || gone(&dependents, "dependent")).await;
}

#[tokio::test]
async fn foreground_deletion_removes_blocking_dependents_before_the_owner() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let (owners, dependents) = owner_and_dependent(&cluster, &ns, true).await;
    let dependent_hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    dependents.patch("dependent", &PatchParams::default(), &Patch::Merge(dependent_hold)).await.unwrap();
    owners.delete("owner", &DeleteParams::foreground()).await.unwrap();
    wait_for("the dependent to be marked for deletion", || async {
        dependents.get("dependent").await.unwrap().metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    let owner = owners.get("owner").await.unwrap();
    assert!(owner.metadata.finalizers.unwrap_or_default().contains(&"foregroundDeletion".to_owned()));
    dependents
        .patch("dependent", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    wait_for("the owner to go after its dependent", || gone(&owners, "owner")).await;
}

/// The dependent Secret as the server sends it, untyped, so the test sees whether a field is
/// there at all rather than how a typed client happens to map an empty list.
async fn raw_dependent(cluster: &TestCluster, ns: &str) -> Value {
    let request =
        http::Request::get(format!("/api/v1/namespaces/{ns}/secrets/dependent")).body(Vec::new()).unwrap();
    cluster.client.request::<Value>(request).await.unwrap()
}

/// How a client asks for the owner's deletion to orphan its dependents.
enum OrphanRequest {
    /// A `DeleteOptions` body, as kubectl and kube-rs send.
    Body(Value),
    /// Query parameters and no body, as `kubectl --raw` or curl send.
    Query(&'static str),
}

/// Deletes the owner ConfigMap with a raw request, as kube-rs cannot send the deprecated
/// `orphanDependents` field.
async fn delete_owner_with(cluster: &TestCluster, ns: &str, how: OrphanRequest) {
    let path = format!("/api/v1/namespaces/{ns}/configmaps/owner");
    let request = match how {
        OrphanRequest::Body(options) => http::Request::delete(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&options).unwrap()),
        OrphanRequest::Query(query) => http::Request::delete(format!("{path}?{query}")).body(Vec::new()),
    };
    cluster.client.request::<Value>(request.unwrap()).await.unwrap();
}

/// Orphans the dependent as `how` asks and checks that it stays, without the field.
async fn orphaning_drops_the_owner_references_field(how: OrphanRequest) {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let (owners, dependents) = owner_and_dependent(&cluster, &ns, false).await;
    delete_owner_with(&cluster, &ns, how).await;
    wait_for("the owner to go", || gone(&owners, "owner")).await;
    assert!(dependents.get_opt("dependent").await.unwrap().is_some(), "the dependent stays");
    let dependent = raw_dependent(&cluster, &ns).await;
    // kube-apiserver removes the field with its last entry; an empty list is a different object.
    assert_eq!(dependent["metadata"].get("ownerReferences"), None, "{dependent}");
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_removes_their_owner_references_field() {
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Orphan"});
    orphaning_drops_the_owner_references_field(OrphanRequest::Body(options)).await;
}

#[tokio::test]
async fn orphan_dependents_true_keeps_dependents_and_removes_their_owner_references_field() {
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "orphanDependents": true});
    orphaning_drops_the_owner_references_field(OrphanRequest::Body(options)).await;
}

#[tokio::test]
async fn orphan_dependents_in_the_query_orphans_like_the_body() {
    orphaning_drops_the_owner_references_field(OrphanRequest::Query("orphanDependents=true")).await;
}

#[tokio::test]
async fn orphaning_by_one_owner_keeps_the_other_owners_reference() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let (owners, dependents) = owner_and_dependent(&cluster, &ns, false).await;
    let second = owners
        .create(&PostParams::default(), &config_map(json!({"metadata": {"name": "second-owner"}})))
        .await
        .unwrap();
    let second_uid = second.metadata.uid.unwrap();
    let also_owned = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "second-owner", "uid": second_uid}]}});
    // A strategic merge patch adds to the list (merge key uid) instead of replacing it.
    dependents.patch("dependent", &PatchParams::default(), &Patch::Strategic(also_owned)).await.unwrap();
    let orphan =
        DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..DeleteParams::default() };
    owners.delete("owner", &orphan).await.unwrap();
    wait_for("the owner to go", || gone(&owners, "owner")).await;
    let dependent = raw_dependent(&cluster, &ns).await;
    let uids: Vec<&Value> = dependent["metadata"]["ownerReferences"]
        .as_array()
        .unwrap_or_else(|| panic!("the second owner's reference stays: {dependent}"))
        .iter()
        .map(|r| &r["uid"])
        .collect();
    assert_eq!(uids, vec![&json!(second_uid)]);
}

#[tokio::test]
async fn dependent_of_a_missing_owner_is_collected() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let dangling = config_map(json!({"metadata": {"name": "dangling", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "nobody", "uid": "00000000-0000-0000-0000-000000000000"}]}}));
    api.create(&PostParams::default(), &dangling).await.unwrap();
    wait_for("the dangling dependent to be collected", || gone(&api, "dangling")).await;
}

#[tokio::test]
async fn deleting_a_namespace_terminates_it_refuses_new_objects_and_empties_it() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let held = config_map(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}));
    api.create(&PostParams::default(), &held).await.unwrap();
    api.create(&PostParams::default(), &config_map(json!({"metadata": {"name": "plain"}}))).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    let terminating = namespaces.get(&ns).await.unwrap();
    assert_eq!(terminating.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));

    let status = api_error(
        api.create(&PostParams::default(), &config_map(json!({"metadata": {"name": "late"}}))).await,
    );
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert!(status.message.contains("because it is being terminated"), "{}", status.message);

    wait_for_within(NAMESPACE_DEADLINE, "the plain object to be deleted", || gone(&api, "plain")).await;
    assert!(namespaces.get_opt(&ns).await.unwrap().is_some(), "a finalizer inside holds the namespace");
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    wait_for_within(NAMESPACE_DEADLINE, "the namespace to go", || gone(&namespaces, &ns)).await;
}

#[tokio::test]
async fn delete_precondition_on_a_stale_resource_version_is_conflict() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("delete").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map(json!({"metadata": {"name": "a"}}))).await.unwrap();
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions { resource_version: Some("1".into()), uid: None }),
        ..DeleteParams::default()
    };
    let status = api_error(api.delete("a", &stale).await);
    assert_eq!(status.code, 409);
    assert!(api.get_opt("a").await.unwrap().is_some());
}

#[tokio::test]
async fn a_terminating_namespace_keeps_its_contents_until_the_namespace_controller_gets_to_it() {
    let delay = std::time::Duration::from_millis(1500);
    let mut cluster =
        TestCluster::with_config(kubesim::Config { namespace_deletion_delay: delay, ..Default::default() })
            .await;
    let ns = cluster.namespace("delete").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map(json!({"metadata": {"name": "content"}}))).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let started = std::time::Instant::now();
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    let still_there = api.get_opt("content").await.unwrap().is_some();
    // The delay is kubesim's setting; a real namespace controller may act within it.
    if cluster.is_kubesim() && started.elapsed() < delay {
        assert!(still_there, "contents stay while the namespace controller has not yet acted");
    }
    wait_for_within(NAMESPACE_DEADLINE, "the contents to go", || gone(&api, "content")).await;
    wait_for_within(NAMESPACE_DEADLINE, "the namespace to go", || gone(&namespaces, &ns)).await;
    if cluster.is_kubesim() {
        assert!(started.elapsed() >= delay, "kubesim waited for the configured delay");
    }
}
