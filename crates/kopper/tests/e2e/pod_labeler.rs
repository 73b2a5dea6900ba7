//! End-to-end behaviour of the pod labeler (seed 001) on kubesim.

use std::time::Duration;

use crate::common::{
    Cluster, Operator, create_pod, eventually, eventually_within, label_of, pod, wait_for_label,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const ANNOTATION: &str = "kopper.dev/add-pod-name-label";
const LABEL: &str = "kopper.dev/pod-name";

async fn set_annotation(cluster: &Cluster, name: &str, value: Option<&str>) {
    let patch = Patch::Merge(json!({ "metadata": { "annotations": { ANNOTATION: value } } }));
    cluster.pods("default").patch(name, &PatchParams::default(), &patch).await.unwrap();
}

#[tokio::test]
async fn annotated_pod_gets_its_name_as_label() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;

    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn label_changes_are_recorded_as_events_on_the_pod() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;
    set_annotation(&cluster, "web-1", None).await;
    wait_for_label(&cluster, "web-1", LABEL, None).await;

    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    let reasons = || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|event| event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web-1"))
            .filter_map(|event| event.reason)
            .collect::<Vec<_>>()
    };
    eventually("both Events", || async {
        let reasons = reasons().await;
        (reasons.iter().any(|r| r == "PodNameLabelSet") && reasons.iter().any(|r| r == "PodNameLabelRemoved"))
            .then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn pod_name_too_long_for_a_label_is_reported_as_a_warning_event() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    let name = format!("web-{}", "x".repeat(70));
    create_pod(&cluster.pods("default"), &pod(&name, &[(ANNOTATION, "true")], &[])).await;

    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    eventually("a Warning Event", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|event| {
            event.reason.as_deref() == Some("PodNameLabelInvalid")
                && event.type_.as_deref() == Some("Warning")
        })
    })
    .await;
    assert_eq!(label_of(&cluster.pods("default"), &name, LABEL).await, None);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn label_is_removed_when_annotation_is_removed() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[("app", "web")])).await;
    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;

    set_annotation(&cluster, "web-1", None).await;

    wait_for_label(&cluster, "web-1", LABEL, None).await;
    assert_eq!(label_of(&cluster.pods("default"), "web-1", "app").await.as_deref(), Some("web"));
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn annotation_other_than_true_removes_the_label() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "false")], &[(LABEL, "web-1")])).await;

    wait_for_label(&cluster, "web-1", LABEL, None).await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn label_and_annotation_keys_come_from_flags() {
    let cluster = Cluster::start().await;
    let flags = [
        "--controllers",
        "pod-labeler",
        "--pod-label-annotation",
        "padok.fr/add-pod-name-label",
        "--pod-name-label",
        "padok.fr/pod-name",
    ];
    let operator = Operator::start(cluster.run_args(&flags));
    create_pod(&cluster.pods("default"), &pod("web-1", &[("padok.fr/add-pod-name-label", "true")], &[]))
        .await;

    wait_for_label(&cluster, "web-1", "padok.fr/pod-name", Some("web-1")).await;
    assert_eq!(label_of(&cluster.pods("default"), "web-1", LABEL).await, None);
    operator.stop().await.unwrap();
}

async fn label_is_set_despite_failed_patches(status: u16) {
    let cluster = Cluster::start().await;
    let fault =
        kubesim::Fault { verb: Some("patch".into()), resource: Some("pods".into()), count: 2, status };
    cluster.sim.faults().fail_next(fault);
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;

    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;
    assert!(cluster.sim.counters().get("patch", "pods") >= 3, "the two failed patches were retried");
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn server_errors_on_patch_are_retried_until_the_label_is_set() {
    label_is_set_despite_failed_patches(500).await;
}

#[tokio::test]
async fn conflicts_on_patch_are_retried_until_the_label_is_set() {
    label_is_set_despite_failed_patches(409).await;
}

#[tokio::test]
async fn changes_made_while_kopper_was_down_converge_when_it_restarts() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;
    operator.stop().await.unwrap();

    set_annotation(&cluster, "web-1", None).await;
    create_pod(&cluster.pods("default"), &pod("web-2", &[(ANNOTATION, "true")], &[])).await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));

    wait_for_label(&cluster, "web-1", LABEL, None).await;
    wait_for_label(&cluster, "web-2", LABEL, Some("web-2")).await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn pods_are_labelled_after_the_watch_is_closed_by_the_server() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", LABEL, Some("web-1")).await;

    cluster.sim.faults().close_watches();
    create_pod(&cluster.pods("default"), &pod("web-2", &[(ANNOTATION, "true")], &[])).await;

    wait_for_label(&cluster, "web-2", LABEL, Some("web-2")).await;
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn pods_that_need_no_change_are_not_written() {
    let cluster = Cluster::start().await;
    let pods = cluster.pods("default");
    create_pod(&pods, &pod("plain", &[], &[])).await;
    create_pod(&pods, &pod("done", &[(ANNOTATION, "true")], &[(LABEL, "done")])).await;
    create_pod(&pods, &pod("other", &[(ANNOTATION, "no")], &[])).await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));

    // The watch delivers pods in order, so once a pod created after them is labelled, the
    // three before it have been looked at.
    create_pod(&pods, &pod("later", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "later", LABEL, Some("later")).await;

    assert_eq!(cluster.sim.counters().get("patch", "pods"), 1, "only the pod that asked was written");
    operator.stop().await.unwrap();
}

/// One namespace's burst does not hold up another namespace's pod: with a backlog of 1,000 of
/// team-a's pods asking for the label and one reconcile at a time, team-b's pod created
/// meanwhile is labelled while most of team-a's still wait, because namespaces take their
/// turns (kube's own queue would serve it after all of team-a's). And none of the backlog is
/// lost on the way.
#[tokio::test]
async fn a_burst_of_one_namespace_s_pods_does_not_hold_up_another_namespace_s() {
    const BURST: usize = 1_000;
    let cluster = Cluster::start().await;
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    for name in ["team-a", "team-b"] {
        let metadata = ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() };
        namespaces
            .create(&PostParams::default(), &Namespace { metadata, ..Namespace::default() })
            .await
            .unwrap();
    }
    let team_a = cluster.pods("team-a");
    futures::stream::iter(0..BURST)
        .for_each_concurrent(16, |n| {
            let team_a = team_a.clone();
            async move { create_pod(&team_a, &pod(&format!("burst-{n}"), &[(ANNOTATION, "true")], &[])).await }
        })
        .await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler", "--concurrency", "1"]));
    // One page of at most `limit` unlabelled pods: cheap enough to ask every few milliseconds.
    let unlabelled = |limit: u32| {
        let team_a = team_a.clone();
        async move {
            let params = ListParams::default().labels(&format!("!{LABEL}")).limit(limit);
            team_a.list(&params).await.unwrap().items.len()
        }
    };
    eventually("team-a's backlog under way", || async {
        label_of(&team_a, "burst-0", LABEL).await.or(label_of(
            &team_a,
            &format!("burst-{}", BURST - 1),
            LABEL,
        )
        .await)
    })
    .await;

    let team_b = cluster.pods("team-b");
    create_pod(&team_b, &pod("web", &[(ANNOTATION, "true")], &[])).await;
    eventually("team-b's pod labelled", || async { label_of(&team_b, "web", LABEL).await }).await;
    let waiting = unlabelled(BURST as u32).await;
    assert!(waiting > BURST / 2, "team-b's pod waited for {} of team-a's", BURST - waiting);

    // One at a time on a loaded machine: more than the usual deadline.
    eventually_within(Duration::from_secs(90), "team-a's backlog labelled", || async {
        (unlabelled(1).await == 0).then_some(())
    })
    .await;
    operator.stop().await.unwrap();
}
