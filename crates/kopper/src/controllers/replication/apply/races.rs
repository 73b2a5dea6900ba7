//! Each write racing another writer, forced against kubesim by making the other write
//! between kopper's look and its write (or holding kopper's request while it is made). What
//! a user relies on: kopper never overwrites or deletes an object it did not make, a race
//! with itself is reported so the next pass judges the copy anew, and a name freed meanwhile
//! still gets its copy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, PostParams};

use super::*;
use kube::ResourceExt;

use crate::controllers::replication::desired::desired_copy;
use crate::controllers::replication::model::{MANAGED_BY_LABEL, ObjectInfo, Payload, RuleId, Source};

const DEST: &str = "dest";
const NAME: &str = "x";

struct Cluster {
    sim: kubesim::Server,
    client: Client,
}

impl Cluster {
    async fn start() -> Self {
        let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
        let client = sim.client();
        let namespace = Namespace {
            metadata: ObjectMeta { name: Some(DEST.into()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
        Self { sim, client }
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), DEST)
    }

    async fn execute(&self, change: Change) -> Applied {
        execute(&self.client, "kopper-test", &[change]).await
    }

    /// Writes `copy` as kopper would and returns the copy's uid and resourceVersion.
    async fn write_copy(&self, copy: &DesiredCopy) -> (String, String) {
        let applied = self.execute(Change::Create(copy.clone())).await;
        assert_eq!(applied.written.len(), 1, "{applied:?}");
        let meta = look(&self.client, &copy.key).await.unwrap().unwrap();
        (meta.uid.unwrap(), meta.resource_version.unwrap())
    }

    /// A tenant's own ConfigMap at the copy's place.
    async fn tenant_config_map(&self) -> String {
        let object = ConfigMap {
            metadata: ObjectMeta { name: Some(NAME.into()), ..ObjectMeta::default() },
            data: Some([("tenant".to_owned(), "mine".to_owned())].into()),
            ..ConfigMap::default()
        };
        let made = self.config_maps().create(&PostParams::default(), &object).await.unwrap();
        made.metadata.uid.unwrap()
    }

    async fn data_at_place(&self) -> Option<BTreeMap<String, String>> {
        self.config_maps().get_opt(NAME).await.unwrap().map(|object| object.data.unwrap_or_default())
    }

    async fn delete_at_place(&self) {
        self.config_maps().delete(NAME, &DeleteParams::default()).await.unwrap();
    }
}

fn copy_holding(kind: ObjectKind, value: &str) -> DesiredCopy {
    let source = ObjectInfo { namespace: "src".into(), name: NAME.into(), ..ObjectInfo::default() };
    let payload = Payload { data: [("key".to_owned(), value.to_owned())].into(), ..Payload::default() };
    let rule = RuleId::replication_rule("r");
    desired_copy(&rule, "rule-uid", kind, &Source::new(source, payload), DEST)
}

fn data(value: &str) -> Option<BTreeMap<String, String>> {
    Some([("key".to_owned(), value.to_owned())].into())
}

fn tenant_data() -> Option<BTreeMap<String, String>> {
    Some([("tenant".to_owned(), "mine".to_owned())].into())
}

#[tokio::test]
async fn a_create_that_meets_a_tenant_s_object_leaves_it_as_it_is() {
    let cluster = Cluster::start().await;
    cluster.tenant_config_map().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");

    let applied = cluster.execute(Change::Create(copy.clone())).await;

    assert_eq!(applied.unmanaged, [copy.key]);
    assert!(applied.written.is_empty() && applied.raced.is_empty() && applied.failed.is_empty());
    assert_eq!(cluster.data_at_place().await, tenant_data());
}

#[tokio::test]
async fn a_create_that_meets_another_pass_s_copy_is_a_race_and_overwrites_nothing() {
    let cluster = Cluster::start().await;
    let first = copy_holding(ObjectKind::ConfigMap, "v1");
    cluster.write_copy(&first).await;
    let second = copy_holding(ObjectKind::ConfigMap, "v2");

    let applied = cluster.execute(Change::Create(second.clone())).await;

    assert_eq!(applied.raced, [second.key]);
    assert!(applied.written.is_empty() && applied.unmanaged.is_empty() && applied.failed.is_empty());
    assert_eq!(cluster.data_at_place().await, data("v1"), "the next pass judges the copy, not this write");
}

#[tokio::test]
async fn a_create_whose_name_is_freed_while_kopper_looks_writes_the_copy() {
    let cluster = Cluster::start().await;
    cluster.tenant_config_map().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");
    // kopper's POST meets the tenant's object; its look at the name is held while the
    // tenant deletes it, so the look finds nothing there.
    let mut look = cluster.sim.faults().hold_next("get", "configmaps");
    let writing = tokio::spawn({
        let client = cluster.client.clone();
        let change = Change::Create(copy.clone());
        async move { execute(&client, "kopper-test", &[change]).await }
    });
    look.arrived().await;
    cluster.delete_at_place().await;
    look.release();

    let applied = writing.await.unwrap();

    assert_eq!(applied.written.iter().collect::<Vec<_>>(), [&copy.key]);
    assert_eq!(cluster.data_at_place().await, data("v1"));
}

#[tokio::test]
async fn an_update_of_a_copy_a_tenant_replaced_touches_the_tenant_s_object_not() {
    for seen_version in [true, false] {
        let cluster = Cluster::start().await;
        let (uid, version) = cluster.write_copy(&copy_holding(ObjectKind::ConfigMap, "v1")).await;
        cluster.delete_at_place().await;
        cluster.tenant_config_map().await;
        let copy = copy_holding(ObjectKind::ConfigMap, "v2");
        let seen_version = seen_version.then_some(version);

        let applied =
            cluster.execute(Change::Update { existing_uid: uid, seen_version, copy: copy.clone() }).await;

        assert_eq!(applied.raced, [copy.key]);
        assert!(applied.written.is_empty() && applied.failed.is_empty(), "{applied:?}");
        assert_eq!(cluster.data_at_place().await, tenant_data());
    }
}

#[tokio::test]
async fn an_update_of_a_copy_changed_since_its_watch_saw_it_reads_it_and_writes_exactly_the_source() {
    let cluster = Cluster::start().await;
    let (uid, version) = cluster.write_copy(&copy_holding(ObjectKind::ConfigMap, "v1")).await;
    // Someone adds a key to kopper's copy after the watch saw it.
    let mut edited = cluster.config_maps().get(NAME).await.unwrap();
    edited.data.get_or_insert_default().insert("added".into(), "by hand".into());
    cluster.config_maps().replace(NAME, &PostParams::default(), &edited).await.unwrap();
    let copy = copy_holding(ObjectKind::ConfigMap, "v2");

    let applied = cluster
        .execute(Change::Update {
            existing_uid: uid.clone(),
            seen_version: Some(version),
            copy: copy.clone(),
        })
        .await;

    assert_eq!(applied.written.iter().collect::<Vec<_>>(), [&copy.key]);
    assert_eq!(cluster.data_at_place().await, data("v2"));
    let now = look(&cluster.client, &copy.key).await.unwrap().unwrap();
    assert_eq!(now.uid.as_deref(), Some(uid.as_str()), "updated in place");
}

#[tokio::test]
async fn an_update_of_a_copy_deleted_meanwhile_makes_no_object() {
    let cluster = Cluster::start().await;
    let (uid, version) = cluster.write_copy(&copy_holding(ObjectKind::ConfigMap, "v1")).await;
    cluster.delete_at_place().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v2");

    let applied =
        cluster.execute(Change::Update { existing_uid: uid, seen_version: Some(version), copy }).await;

    // Its deletion's event wakes the rule, whose pass creates the copy anew.
    assert!(applied.written.is_empty() && applied.failed.is_empty(), "{applied:?}");
    assert_eq!(cluster.data_at_place().await, None);
}

#[tokio::test]
async fn a_delete_of_a_copy_a_tenant_replaced_deletes_nothing() {
    let cluster = Cluster::start().await;
    let copy = copy_holding(ObjectKind::Secret, "v1");
    let (uid, _) = cluster.write_copy(&copy).await;
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), DEST);
    secrets.delete(NAME, &DeleteParams::default()).await.unwrap();
    let tenant_secret = Secret {
        metadata: ObjectMeta { name: Some(NAME.into()), ..ObjectMeta::default() },
        string_data: Some([("password".to_owned(), "hunter2".to_owned())].into()),
        ..Secret::default()
    };
    let tenant_uid = secrets.create(&PostParams::default(), &tenant_secret).await.unwrap().metadata.uid;

    let applied = cluster.execute(Change::Delete { key: copy.key.clone(), uid, seen_version: None }).await;

    assert_eq!(applied.raced, [copy.key]);
    assert!(applied.removed.is_empty() && applied.failed.is_empty(), "{applied:?}");
    let kept = secrets.get(NAME).await.unwrap();
    assert_eq!(kept.metadata.uid, tenant_uid);
}

#[tokio::test]
async fn a_replacement_of_a_copy_a_tenant_replaced_deletes_and_overwrites_nothing() {
    let cluster = Cluster::start().await;
    let (uid, _) = cluster.write_copy(&copy_holding(ObjectKind::ConfigMap, "v1")).await;
    cluster.delete_at_place().await;
    cluster.tenant_config_map().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v2");

    let applied =
        cluster.execute(Change::Replace { existing_uid: uid, seen_version: None, copy: copy.clone() }).await;

    assert_eq!(applied.raced, [copy.key]);
    assert!(applied.written.is_empty() && applied.removed.is_empty() && applied.failed.is_empty());
    assert_eq!(cluster.data_at_place().await, tenant_data());
}

/// A tenant takes a copy over in place (removes kopper's label, keeps the object) after
/// kopper's watch saw it: kopper's delete, conditioned on the version it saw, leaves it.
#[tokio::test]
async fn a_delete_of_a_copy_a_tenant_took_over_in_place_deletes_nothing() {
    let cluster = Cluster::start().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");
    let (uid, version) = cluster.write_copy(&copy).await;
    let mut taken = cluster.config_maps().get(NAME).await.unwrap();
    taken.metadata.labels.get_or_insert_default().remove(MANAGED_BY_LABEL);
    cluster.config_maps().replace(NAME, &PostParams::default(), &taken).await.unwrap();

    let delete =
        Change::Delete { key: copy.key.clone(), uid: uid.clone(), seen_version: Some(version.clone()) };
    let applied = cluster.execute(delete).await;
    assert_eq!(applied.raced, std::slice::from_ref(&copy.key));
    assert!(applied.removed.is_empty() && applied.failed.is_empty(), "{applied:?}");

    let replace = Change::Replace { existing_uid: uid, seen_version: Some(version), copy: copy.clone() };
    let applied = cluster.execute(replace).await;
    assert_eq!(applied.raced, [copy.key]);
    let kept = cluster.config_maps().get(NAME).await.unwrap();
    assert!(!kept.labels().contains_key(MANAGED_BY_LABEL), "the tenant's object stays theirs");
}

#[tokio::test]
async fn a_delete_of_a_copy_already_gone_counts_as_removed() {
    let cluster = Cluster::start().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");
    let (uid, version) = cluster.write_copy(&copy).await;
    cluster.delete_at_place().await;

    let applied =
        cluster.execute(Change::Delete { key: copy.key.clone(), uid, seen_version: Some(version) }).await;

    assert_eq!(applied.removed.iter().collect::<Vec<_>>(), [&copy.key]);
    assert!(applied.raced.is_empty() && applied.failed.is_empty(), "{applied:?}");
}

#[tokio::test]
async fn a_create_in_a_namespace_that_is_gone_is_no_error() {
    let cluster = Cluster::start().await;
    let mut copy = copy_holding(ObjectKind::ConfigMap, "v1");
    copy.key.namespace = "never-made".into();

    let applied = cluster.execute(Change::Create(copy)).await;

    assert!(applied.written.is_empty() && applied.failed.is_empty() && applied.unmanaged.is_empty());
}

/// The orphaning of `copy`'s place, planned for the copy of uid `uid` at `seen_version`.
fn orphaning(copy: &DesiredCopy, uid: &str, seen_version: Option<&str>) -> Change {
    Change::Orphan {
        key: copy.key.clone(),
        uid: uid.to_owned(),
        seen_version: seen_version.map(str::to_owned),
        rule: copy.labels[REPLICATED_BY_LABEL].clone(),
    }
}

#[tokio::test]
async fn an_orphaning_that_loses_a_race_to_the_rule_s_own_copy_fails_and_leaves_it_labelled() {
    let cluster = Cluster::start().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");
    cluster.write_copy(&copy).await;

    // Planned for a copy that was replaced since (by a pass of the same rule, say).
    let applied = cluster.execute(orphaning(&copy, "a-replaced-copy-uid", None)).await;

    assert!(
        matches!(applied.failed.as_slice(), [WriteError::OrphanRaced { key }] if *key == copy.key),
        "{applied:?}"
    );
    assert!(applied.removed.is_empty() && applied.orphaned == 0, "not done: the finalizer stays");
    let labels = cluster.config_maps().get(NAME).await.unwrap().labels().clone();
    assert_eq!(labels.get(REPLICATED_BY_LABEL), copy.labels.get(REPLICATED_BY_LABEL));
}

#[tokio::test]
async fn an_orphaning_that_loses_a_race_to_another_orphaning_of_the_copy_is_done() {
    let cluster = Cluster::start().await;
    let copy = copy_holding(ObjectKind::ConfigMap, "v1");
    let (uid, version) = cluster.write_copy(&copy).await;
    let first = cluster.execute(orphaning(&copy, &uid, Some(&version))).await;
    assert_eq!(first.orphaned, 1, "{first:?}");

    let again = cluster.execute(orphaning(&copy, &uid, Some(&version))).await;

    assert!(again.failed.is_empty(), "{again:?}");
    assert_eq!((again.orphaned, again.removed.len()), (1, 1));
    assert_eq!(cluster.data_at_place().await, data("v1"));
}
