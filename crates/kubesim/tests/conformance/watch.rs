use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use crate::common::{TestCluster, wait_for};

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// The next event's type and object name, passing over bookmarks.
async fn next<S>(stream: &mut S) -> (String, String)
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    loop {
        let event = next_event(stream).await;
        if !matches!(event, WatchEvent::Bookmark(_)) {
            return describe(event);
        }
    }
}

async fn next_event<S>(stream: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("an event within the deadline")
        .expect("no stream error")
        .expect("stream still open")
}

fn describe(event: WatchEvent<ConfigMap>) -> (String, String) {
    match event {
        WatchEvent::Added(o) => ("ADDED".into(), o.metadata.name.unwrap_or_default()),
        WatchEvent::Modified(o) => ("MODIFIED".into(), o.metadata.name.unwrap_or_default()),
        WatchEvent::Deleted(o) => ("DELETED".into(), o.metadata.name.unwrap_or_default()),
        WatchEvent::Bookmark(_) => ("BOOKMARK".into(), String::new()),
        WatchEvent::Error(e) => (format!("ERROR {}", e.code), e.message),
    }
}

fn event(kind: &str, name: &str) -> (String, String) {
    (kind.to_owned(), name.to_owned())
}

#[tokio::test]
async fn watch_from_a_list_resource_version_sees_each_later_change_in_order() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("before", json!({}))).await.unwrap();
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(next(&mut stream).await, event("ADDED", "a"));
    assert_eq!(next(&mut stream).await, event("MODIFIED", "a"));
    assert_eq!(next(&mut stream).await, event("DELETED", "a"));
}

#[tokio::test]
async fn watch_from_zero_starts_with_the_current_objects() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &config_map("existing", json!({}))).await.unwrap();
    let mut stream = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert_eq!(next(&mut stream).await, event("ADDED", "existing"));
}

#[tokio::test]
async fn label_selected_watch_sees_objects_enter_and_leave_the_selection() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default().labels("app=x"), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &config_map("other", json!({}))).await.unwrap();
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})))
        .await
        .unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": null}}})))
        .await
        .unwrap();
    assert_eq!(next(&mut stream).await, event("ADDED", "a"));
    assert_eq!(next(&mut stream).await, event("DELETED", "a"));
}

#[tokio::test]
async fn watch_from_a_resource_version_older_than_history_is_gone() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let Some(sim) = cluster.sim() else { return };
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let old = api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    sim.set_watch_history(2);
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("b{i}"), json!({}))).await.unwrap();
    }
    let rv = old.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let (kind, message) = next(&mut stream).await;
    assert_eq!(kind, "ERROR 410");
    assert!(message.contains("too old resource version"), "{message}");
}

/// kube-apiserver keeps a watch cache per resource type: a watch of one kind resumes from
/// its resourceVersion however many changes other kinds (Events, Secrets) made since.
#[tokio::test]
async fn changes_of_other_kinds_do_not_push_a_kind_out_of_its_watch_history() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    if let Some(sim) = cluster.sim() {
        sim.set_watch_history(2);
    }
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), &ns);
    for i in 0..5 {
        let secret = serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    api.create(&PostParams::default(), &config_map("after", json!({}))).await.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    assert_eq!(next(&mut stream).await, event("ADDED", "after"));
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version() {
    let mut cluster = TestCluster::new().await;
    if !cluster.is_kubesim() {
        eprintln!("skipped on a real cluster: it sends bookmarks only about once a minute");
        return;
    }
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let params = WatchParams { bookmarks: true, ..WatchParams::default() };
    let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
    let created = api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let created_rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(next(&mut stream).await, event("ADDED", "a"));
    let bookmark = next_event(&mut stream).await;
    let WatchEvent::Bookmark(b) = bookmark else { panic!("expected a bookmark, got {bookmark:?}") };
    let after: u64 = b.metadata.resource_version.parse().unwrap();
    assert!(after >= created_rv, "bookmark {after} is not behind the last event {created_rv}");
}

#[tokio::test]
async fn watch_ends_after_its_timeout() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let params = WatchParams { bookmarks: false, ..WatchParams::default() }.timeout(1);
    let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.expect("stream ends");
    assert!(matches!(ended, Ok(None)), "{ended:?}");
}

#[tokio::test]
async fn reflector_recovers_from_closed_watches_and_compaction() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let Some(sim) = cluster.sim() else { return };
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    wait_for("the first object in the cache", || async { (reader.state().len() == 1).then_some(()) }).await;
    sim.faults().close_watches();
    sim.compact();
    api.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    wait_for("the cache to converge after the watch was closed", || async {
        let names: Vec<String> = reader.state().iter().filter_map(|c| c.metadata.name.clone()).collect();
        (names == vec!["b".to_owned()]).then_some(())
    })
    .await;
    task.abort();
}

/// Whether the server streams lists: from v1.27 it refuses `sendInitialEvents` (422) while
/// its `WatchList` feature gate is off, as it is by default before v1.32.
async fn streaming_lists_enabled(api: &Api<ConfigMap>) -> bool {
    let probe = WatchParams::streaming_lists().timeout(1);
    match api.watch(&probe, "").await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 422 => {
            eprintln!("skipped: streaming lists are off on this server: {}", status.message);
            false
        }
        Err(e) => panic!("probing for streaming lists: {e}"),
    }
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let mut cluster = TestCluster::new().await;
    if !cluster.supports("streaming lists (sendInitialEvents)", 27).await {
        return;
    }
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    if !streaming_lists_enabled(&api).await {
        return;
    }
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().streaming_lists();
    let stream = reflector(writer, watcher(api.clone(), config)).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    wait_for("streamed initial state", || async { (reader.state().len() == 1).then_some(()) }).await;
    api.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    wait_for("a later change", || async { (reader.state().len() == 2).then_some(()) }).await;
    task.abort();
}

#[tokio::test]
async fn delayed_watch_events_arrive_late_but_in_order() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let Some(sim) = cluster.sim() else { return };
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let params = WatchParams { bookmarks: false, ..WatchParams::default() };
    let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
    let delay = Duration::from_millis(300);
    sim.faults().set_watch_delay(delay);
    let started = std::time::Instant::now();
    api.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    api.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    assert_eq!(next(&mut stream).await, event("ADDED", "a"));
    assert!(started.elapsed() >= delay, "the event waited for the injected delay");
    assert_eq!(next(&mut stream).await, event("ADDED", "b"));
}

/// A resourceVersion far past the server's current one, as a client resuming against a
/// server restored from an older backup would send.
async fn resource_version_ahead(api: &Api<ConfigMap>) -> String {
    let list = api.list(&ListParams::default()).await.unwrap();
    let current: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    (current + 1_000_000).to_string()
}

/// kube-apiserver 1.32 neither refuses nor answers a watch from a version it has not
/// reached: the watch stays open, quiet, and sends only what comes after that version.
#[tokio::test]
async fn watch_from_a_resource_version_the_server_never_reached_stays_quiet_until_it_passes_it() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let current: u64 =
        api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap().parse().unwrap();
    // Two writes ahead: the first change falls at or before the version asked for.
    let ahead = (current + 2).to_string();
    let params = WatchParams { bookmarks: false, ..WatchParams::default() };
    let mut stream = api.watch(&params, &ahead).await.unwrap().boxed();
    let quiet = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
    assert!(quiet.is_err(), "nothing is sent before the store reaches the version");
    let ahead: u64 = ahead.parse().unwrap();
    let mut written = Vec::new();
    for name in ["a", "b", "c"] {
        let created = api.create(&PostParams::default(), &config_map(name, json!({}))).await.unwrap();
        written.push((name, created.metadata.resource_version.unwrap().parse::<u64>().unwrap()));
    }
    // Other writers may share a real server: which writes fall past the version is read
    // from their own versions.
    let expected: Vec<(String, String)> = written
        .iter()
        .filter(|(_, rv)| *rv > ahead)
        .map(|(name, _)| ("ADDED".to_owned(), (*name).to_owned()))
        .collect();
    assert!(!expected.is_empty(), "the last write passes the version asked for");
    for want in &expected {
        assert_eq!(&describe(next_event(&mut stream).await), want, "only changes past the version are sent");
    }
}

#[tokio::test]
async fn list_at_a_resource_version_the_server_never_reached_is_refused() {
    let mut cluster = TestCluster::new().await;
    let ns = cluster.namespace("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let ahead = resource_version_ahead(&api).await;
    let impatient: Api<ConfigMap> = Api::namespaced(cluster.client_without_retries(), &ns);
    let status = crate::common::api_error(impatient.list(&ListParams::default().at(&ahead)).await);
    assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"), "{}", status.message);
    assert!(status.message.contains("Too large resource version"), "{}", status.message);
}
