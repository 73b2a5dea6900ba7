//! End-to-end behaviour of the operator runtime on kubesim: graceful shutdown, leader
//! election, the admin endpoints and start-up errors.

use std::process::Stdio;

use crate::common::{
    Cluster, DEADLINE, Operator, create_pod, eventually, free_admin_addr, http_get, label_of, metric, pod,
    restart_api_server, run_args, wait_for_label,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopper::controllers::namespace_access::NamespaceAccess;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const ANNOTATION: &str = "kopper.dev/add-pod-name-label";

async fn lease_holder(cluster: &Cluster, name: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    leases.get_opt(name).await.unwrap()?.spec?.holder_identity
}

/// Flags for one of two replicas that differ only in the label they write, so the pods show
/// which replica reconciled them.
fn replica_flags<'a>(label: &'a str, admin: &'a str) -> Vec<&'a str> {
    vec![
        "--controllers",
        "pod-labeler",
        "--leader-elect",
        "true",
        "--lease-name",
        "kopper-test",
        "--lease-namespace",
        "default",
        "--lease-duration",
        "3s",
        "--renew-interval",
        "500ms",
        "--pod-name-label",
        label,
        "--admin-addr",
        admin,
    ]
}

#[tokio::test]
async fn every_controller_runs_in_one_operator_and_readiness_waits_for_all() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let operator = Operator::start(cluster.run_args(&["--admin-addr", &admin]));
    eventually("the admin server", || async { http_get(&admin, "/readyz").await }).await;
    let (status, body) = http_get(&admin, "/readyz").await.unwrap();
    assert_eq!(status, 503, "not ready while the NamespaceAccess CRD is missing");
    assert!(body.contains("namespace-access"), "{body}");

    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    for crd in kopper::crds::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let policy: NamespaceAccess = serde_yaml::from_str(include_str!(
        "../../../../config/samples/namespaceaccess-group-per-namespace.yaml"
    ))
    .unwrap();
    Api::<NamespaceAccess>::all(cluster.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let namespace = Namespace {
        metadata: ObjectMeta { name: Some("team-a".into()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    Api::<Namespace>::all(cluster.client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;

    wait_for_label(&cluster, "web-1", "kopper.dev/pod-name", Some("web-1")).await;
    let bindings: Api<RoleBinding> = Api::namespaced(cluster.client.clone(), "team-a");
    eventually("the seed's RoleBinding", || async {
        bindings.get_opt("ad-kubernetes-team-a").await.unwrap()
    })
    .await;
    eventually("/readyz to return 200", || async {
        http_get(&admin, "/readyz").await.filter(|(status, _)| *status == 200)
    })
    .await;
    // NamespaceAccess and replication share one namespace cache: one list, not three.
    assert_eq!(cluster.sim.counters().get("list", "namespaces"), 1);
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn graceful_shutdown_returns_ok() {
    let cluster = Cluster::start().await;
    let operator = Operator::start(cluster.run_args(&["--controllers", "pod-labeler"]));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "kopper.dev/pod-name", Some("web-1")).await;

    operator.stop().await.unwrap();
}

#[tokio::test]
async fn only_the_leader_reconciles_and_the_standby_takes_over_when_it_stops() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let replica_a = Operator::start(cluster.run_args(&replica_flags("a.test/pod-name", &admin_a)));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "a.test/pod-name", Some("web-1")).await;

    let replica_b = Operator::start(cluster.run_args(&replica_flags("b.test/pod-name", &admin_b)));
    eventually("the standby to serve /readyz", || async {
        http_get(&admin_b, "/readyz").await.filter(|(status, _)| *status == 200)
    })
    .await;
    create_pod(&cluster.pods("default"), &pod("web-2", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-2", "a.test/pod-name", Some("web-2")).await;
    assert_eq!(label_of(&cluster.pods("default"), "web-1", "b.test/pod-name").await, None);
    assert_eq!(metric(&admin_b, "kopper_leader").await, Some(0.0));
    let holder_a = lease_holder(&cluster, "kopper-test").await;

    replica_a.stop().await.unwrap();

    wait_for_label(&cluster, "web-1", "b.test/pod-name", Some("web-1")).await;
    wait_for_label(&cluster, "web-2", "b.test/pod-name", Some("web-2")).await;
    assert_ne!(lease_holder(&cluster, "kopper-test").await, holder_a);
    assert_eq!(metric(&admin_b, "kopper_leader").await, Some(1.0));
    replica_b.stop().await.unwrap();
}

#[tokio::test]
async fn standby_takes_over_after_the_leader_dies_without_releasing() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let replica_a = Operator::start(cluster.run_args(&replica_flags("a.test/pod-name", &admin_a)));
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "a.test/pod-name", Some("web-1")).await;
    let replica_b = Operator::start(cluster.run_args(&replica_flags("b.test/pod-name", &admin_b)));

    // Dropping the run future is what a crash looks like to the cluster: no release.
    replica_a.handle.abort();

    wait_for_label(&cluster, "web-1", "b.test/pod-name", Some("web-1")).await;
    replica_b.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_releases_the_lease_at_once() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let mut flags = replica_flags("a.test/pod-name", &admin);
    flags.extend(["--lease-duration", "60s", "--renew-interval", "20s"]);
    let replica = Operator::start(cluster.run_args(&flags));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    replica.stop().await.unwrap();

    assert_eq!(lease_holder(&cluster, "kopper-test").await, None);
}

#[tokio::test]
async fn leader_stops_with_an_error_when_another_replica_takes_its_lease() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let replica = Operator::start(cluster.run_args(&replica_flags("a.test/pod-name", &admin)));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let patch = Patch::Merge(json!({ "spec": { "holderIdentity": "intruder" } }));
    leases.patch("kopper-test", &PatchParams::default(), &patch).await.unwrap();

    let result =
        tokio::time::timeout(DEADLINE, replica.handle).await.expect("the leader kept running").unwrap();
    let message = format!("{:#}", result.unwrap_err());
    assert!(message.contains("lost the leader lease"), "{message}");
}

/// One API server behind a load balancer dies without a reset: the standby's pooled
/// connection goes silent, while new connections reach another API server. The standby's
/// question about the lease is given up after a renew interval and asked again on a new
/// connection, so it takes over once the leader steps down instead of hanging for minutes.
#[tokio::test]
async fn a_standby_whose_connection_went_silent_takes_over_through_a_new_one() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let replica_a = Operator::start(cluster.run_args(&replica_flags("a.test/pod-name", &admin_a)));
    let holder_a =
        eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let replica_b = Operator::start(run_args(&kubeconfig, &replica_flags("b.test/pod-name", &admin_b)));
    readyz(&admin_b, 200).await;

    partition.stall();
    replica_a.stop().await.unwrap();

    eventually("the standby to take the lease", || async {
        lease_holder(&cluster, "kopper-test").await.filter(|holder| *holder != holder_a)
    })
    .await;
    replica_b.stop().await.unwrap();
}

/// One API server behind a load balancer dies without a reset while the leader's renewal is
/// on its way there or waits in the pool: that renewal is given up after a renew interval and
/// sent again on a new connection, well before the renew deadline, so the leader keeps its
/// lease instead of stepping down.
#[tokio::test]
async fn a_leader_whose_connection_went_silent_renews_through_a_new_one() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let admin = free_admin_addr();
    let replica = Operator::start(run_args(&kubeconfig, &replica_flags("a.test/pod-name", &admin)));
    let holder =
        eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    partition.stall();
    let stalled = k8s_openapi::jiff::Timestamp::now();

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    // Renewed a whole lease duration (3s) after the stall, past the renew deadline.
    let past_the_deadline = stalled + std::time::Duration::from_secs(4);
    eventually("a renewal a lease duration after the stall", || async {
        let spec = leases.get("kopper-test").await.unwrap().spec?;
        let renewed = spec.renew_time?.0;
        (spec.holder_identity.as_ref() == Some(&holder) && renewed > past_the_deadline).then_some(())
    })
    .await;
    assert!(!replica.handle.is_finished(), "the leader stepped down");
    replica.stop().await.unwrap();
}

/// A leader whose API server takes connections and never answers cannot renew; once its
/// renew deadline passes it exits at once, without trying to give back a lease it cannot
/// reach (that request would hang as long as the kernel keeps the connection).
#[tokio::test]
async fn a_leader_that_cannot_renew_through_a_silent_api_server_exits() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let admin = free_admin_addr();
    let replica = Operator::start(run_args(&kubeconfig, &replica_flags("a.test/pod-name", &admin)));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    partition.black_hole();

    let result =
        tokio::time::timeout(DEADLINE, replica.handle).await.expect("the leader kept running").unwrap();
    let message = format!("{:#}", result.unwrap_err());
    assert!(message.contains("lost the leader lease"), "{message}");
}

/// Stopped while its API server takes connections and never answers, a leader gives up
/// trying to release its lease after a moment and exits well within a pod's grace period.
#[tokio::test]
async fn shutdown_does_not_wait_on_a_release_the_api_server_never_answers() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let admin = free_admin_addr();
    let mut flags = replica_flags("a.test/pod-name", &admin);
    flags.extend(["--lease-duration", "60s", "--renew-interval", "20s"]);
    let replica = Operator::start(run_args(&kubeconfig, &flags));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    partition.go_silent();

    let stopping = std::time::Instant::now();
    replica.stop().await.unwrap();
    assert!(stopping.elapsed() < std::time::Duration::from_secs(10), "took {:?}", stopping.elapsed());
}

/// Someone deletes the Lease (`kubectl delete lease`, an etcd restored from before it
/// existed): the leader, whose writes are fenced open until its next renewal, finds it gone
/// there and stops; the standby, which saw it hold the lease, creates the Lease again only once
/// the leader's last record would have expired. Two leaders never write at once.
#[tokio::test]
async fn a_deleted_lease_is_taken_over_only_once_the_old_leader_has_stopped() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let durations = ["--lease-duration", "6s", "--renew-interval", "1s"];
    let mut flags_a = replica_flags("a.test/pod-name", &admin_a);
    flags_a.extend(durations);
    let replica_a = Operator::start(cluster.run_args(&flags_a));
    let holder_a =
        eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;
    let mut flags_b = replica_flags("b.test/pod-name", &admin_b);
    flags_b.extend(durations);
    let replica_b = Operator::start(cluster.run_args(&flags_b));
    readyz(&admin_b, 200).await;
    // The standby asks about the lease every renew interval: after two more renewals it has
    // seen the leader hold it.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let seen_by_the_standby = k8s_openapi::jiff::Timestamp::now() + std::time::Duration::from_secs(2);
    eventually("two renewals after the standby started", || async {
        let renewed = leases.get("kopper-test").await.unwrap().spec?.renew_time?.0;
        (renewed > seen_by_the_standby).then_some(())
    })
    .await;

    leases.delete("kopper-test", &Default::default()).await.unwrap();
    let deleted = std::time::Instant::now();

    let holder_b = eventually("the Lease to be created again", || async {
        let holder = lease_holder(&cluster, "kopper-test").await?;
        assert!(replica_a.handle.is_finished(), "the Lease was taken again while the old leader ran");
        Some(holder)
    })
    .await;
    assert_ne!(holder_b, holder_a);
    // The leader's last renewal came at most a renew interval before the delete; the standby
    // waits a lease duration (6s) from when it saw it.
    assert!(deleted.elapsed() > std::time::Duration::from_secs(3), "taken after {:?}", deleted.elapsed());
    let message = format!("{:#}", replica_a.handle.await.unwrap().unwrap_err());
    assert!(message.contains("deleted it"), "{message}");
    replica_b.stop().await.unwrap();
}

/// A standby stopped while its question about the lease hangs (its API server takes the
/// connection and never answers) exits at once rather than after the answer.
#[tokio::test]
async fn a_standby_stops_when_told_while_its_api_server_is_silent() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let mut flags_a = replica_flags("a.test/pod-name", &admin_a);
    flags_a.extend(["--lease-duration", "60s", "--renew-interval", "20s"]);
    let replica_a = Operator::start(cluster.run_args(&flags_a));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let mut flags_b = replica_flags("b.test/pod-name", &admin_b);
    flags_b.extend(["--lease-duration", "60s", "--renew-interval", "5s"]);
    let replica_b = Operator::start(run_args(&kubeconfig, &flags_b));
    readyz(&admin_b, 200).await;
    partition.go_silent();
    eventually("the standby to ask about the lease and wait for the answer", || async {
        partition.holds_a_request_to("/leases/kopper-test").then_some(())
    })
    .await;

    let stopping = std::time::Instant::now();
    replica_b.stop().await.unwrap();
    // Less than the renew interval, which bounds the question itself.
    assert!(stopping.elapsed() < std::time::Duration::from_secs(3), "took {:?}", stopping.elapsed());
    replica_a.stop().await.unwrap();
}

/// A leader whose Lease someone cleared (the holder removed by hand) stops at its next
/// renewal rather than writing itself back: a standby may already be taking the free lease.
#[tokio::test]
async fn leader_stops_with_an_error_when_its_lease_holder_is_cleared() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let replica = Operator::start(cluster.run_args(&replica_flags("a.test/pod-name", &admin)));
    eventually("the lease to be held", || async { lease_holder(&cluster, "kopper-test").await }).await;

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let patch = Patch::Merge(json!({ "spec": { "holderIdentity": null } }));
    leases.patch("kopper-test", &PatchParams::default(), &patch).await.unwrap();

    let result =
        tokio::time::timeout(DEADLINE, replica.handle).await.expect("the leader kept running").unwrap();
    let message = format!("{:#}", result.unwrap_err());
    assert!(message.contains("cleared its holder"), "{message}");
}

#[tokio::test]
async fn readyz_is_true_once_caches_have_synced_and_metrics_are_served() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let operator =
        Operator::start(cluster.run_args(&["--controllers", "pod-labeler", "--admin-addr", &admin]));

    eventually("/readyz to return 200", || async {
        http_get(&admin, "/readyz").await.filter(|(status, _)| *status == 200)
    })
    .await;
    let (status, _) = http_get(&admin, "/healthz").await.unwrap();
    assert_eq!(status, 200);
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "kopper.dev/pod-name", Some("web-1")).await;
    // The label can be seen before the reconcile that wrote it has returned and recorded
    // its metrics. The labeler holds only pods with work pending: 1 or, once the labelled
    // pod's event has let it go, 0.
    let cached = r#"kopper_cached_objects{controller="pod-labeler",kind="Pod"} "#;
    let metrics = eventually("the pod labeler's metrics", || async {
        http_get(&admin, "/metrics")
            .await
            .map(|(_, metrics)| metrics)
            .filter(|metrics| metrics.contains(cached))
    })
    .await;
    assert!(metrics.contains("kopper_reconciles_total"), "{metrics}");
    assert!(metrics.contains("kopper_reconcile_duration_seconds_bucket"), "{metrics}");
    operator.stop().await.unwrap();
}

#[tokio::test]
async fn unreachable_api_server_is_an_error_that_suggests_demo() {
    let cluster = Cluster::start().await;
    let kubeconfig = cluster.kubeconfig.clone();
    cluster.sim.shutdown().await;

    let error = kopper::run(run_args(&kubeconfig, &[]), std::future::pending()).await.unwrap_err();

    let message = format!("{error:#}");
    assert!(message.contains("cannot reach the Kubernetes API server"), "{message}");
    assert!(message.contains("kopper demo"), "{message}");
}

/// In a pod (here: told so), kopper waits at start-up for an API server it cannot reach,
/// with `/healthz` up and `/readyz` saying what it waits for, and starts working once the
/// API server answers: a replica restarted during an outage does not crash-loop.
#[tokio::test]
async fn told_to_wait_kopper_starts_once_the_api_server_answers() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    partition.cut();
    let admin = free_admin_addr();
    let flags = ["--controllers", "pod-labeler", "--admin-addr", &admin, "--wait-for-api-server", "true"];
    let operator = Operator::start(run_args(&kubeconfig, &flags));

    let (_, waiting) = eventually("/readyz to say what kopper waits for", || async {
        http_get(&admin, "/readyz").await.filter(|(status, _)| *status == 503)
    })
    .await;
    assert!(waiting.contains("api-server"), "{waiting}");
    assert_eq!(http_get(&admin, "/healthz").await.map(|(status, _)| status), Some(200), "alive meanwhile");
    assert!(!operator.handle.is_finished(), "waiting, not exited");

    partition.restore();
    eventually("/readyz to return 200", || async {
        http_get(&admin, "/readyz").await.filter(|(status, _)| *status == 200)
    })
    .await;
    labels_a_new_pod_and_stops(&cluster, operator).await;
}

/// Stopped while it waits for an API server that takes connections and never answers,
/// kopper exits cleanly: neither the wait nor the attempt in flight holds it.
#[tokio::test]
async fn kopper_waiting_for_the_api_server_stops_when_told() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    partition.black_hole();
    let admin = free_admin_addr();
    let flags = ["--admin-addr", &admin, "--wait-for-api-server", "true"];
    let operator = Operator::start(run_args(&kubeconfig, &flags));
    eventually("the admin server", || async { http_get(&admin, "/healthz").await }).await;

    operator.stop().await.unwrap();
}

#[tokio::test]
async fn unreachable_api_server_is_one_line_on_stderr_naming_the_server_and_demo() {
    let cluster = Cluster::start().await;
    let (kubeconfig, url) = (cluster.kubeconfig.clone(), cluster.sim.url());
    cluster.sim.shutdown().await;

    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--log-level", "info", "--admin-addr", "127.0.0.1:0", "--wait-for-api-server", "false"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env_remove("KOPPER_LOG_FORMAT")
        .output()
        .await
        .unwrap();

    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("cannot reach the Kubernetes API server"), "{stderr}");
    assert!(lines[0].contains(&url), "{stderr}");
    assert!(lines[0].contains("kopper demo"), "{stderr}");
}

#[tokio::test]
async fn sigterm_stops_the_binary_with_exit_code_zero() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let mut child = kopper_process(
        &cluster,
        &["--controllers", "pod-labeler", "--leader-elect", "false", "--admin-addr", &admin],
        Stdio::null(),
    );
    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "kopper.dev/pod-name", Some("web-1")).await;

    signal(&child, "-TERM").await;

    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A log reader that went away (a closed pipe) must not take kopper down: every log line
/// fails to be written, the work goes on, and SIGTERM still ends the process cleanly.
#[tokio::test]
async fn logging_into_a_closed_pipe_neither_stops_the_work_nor_the_shutdown() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let flags = ["--controllers", "pod-labeler", "--leader-elect", "false", "--admin-addr", &admin];
    let mut child =
        kopper_process(&cluster, &[&flags[..], &["--log-level", "debug"]].concat(), Stdio::piped());
    drop(child.stderr.take());

    create_pod(&cluster.pods("default"), &pod("web-1", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "web-1", "kopper.dev/pod-name", Some("web-1")).await;
    signal(&child, "-TERM").await;

    let status =
        tokio::time::timeout(DEADLINE, child.wait()).await.expect("kopper hung after SIGTERM").unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A kopper CRD that is not installed is named in the log, with the command that installs it.
#[tokio::test]
async fn a_missing_crd_is_named_in_the_log_with_the_command_that_installs_it() {
    use tokio::io::AsyncBufReadExt as _;
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let mut child = kopper_process(
        &cluster,
        &["--controllers", "replication-rule", "--leader-elect", "false", "--admin-addr", &admin],
        Stdio::piped(),
    );
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let named = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("CustomResourceDefinition replicationrules.kopper.dev is not installed") {
                return line;
            }
        }
        panic!("kopper exited without naming the missing CRD");
    };
    let line = tokio::time::timeout(DEADLINE, named).await.expect("no warning naming the missing CRD");
    assert!(line.contains("kopper crds | kubectl apply"), "{line}");
}

#[test]
fn bad_flag_is_a_one_line_error_and_a_failing_exit() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .args(["run", "--lease-duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.lines().next().unwrap_or_default().contains("--lease-duration"), "{stderr}");
}

/// `kopper run FLAGS` as a process of its own against `cluster` (so that it can be signalled
/// or paused), its stdout discarded and its stderr as asked.
fn kopper_process(cluster: &Cluster, flags: &[&str], stderr: Stdio) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kopper"))
        .arg("run")
        .args(flags)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// One of two replicas as a process of its own, so that it can be paused.
fn replica_process(cluster: &Cluster, label: &str, admin: &str) -> tokio::process::Child {
    kopper_process(cluster, &replica_flags(label, admin), Stdio::null())
}

async fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().unwrap().to_string();
    let sent = tokio::process::Command::new("kill").args([signal, &pid]).status().await.unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Waits until every thread of `child` is stopped. `kill -STOP` returns before that: the
/// stop takes effect when the thread chosen to handle it next runs, and on a busy machine
/// the others keep working meanwhile (reading events, writing) with a lease still valid.
async fn wait_until_stopped(child: &tokio::process::Child) {
    let pid = child.id().unwrap();
    eventually("every thread of the paused process to be stopped", || async {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let stopped =
            |stat: String| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'));
        threads
            .filter_map(Result::ok)
            .all(|thread| std::fs::read_to_string(thread.path().join("stat")).is_ok_and(stopped))
            .then_some(())
    })
    .await;
}

/// A leader paused past its lease (SIGSTOP: a stalled node, a frozen VM) wakes up with watch
/// events queued and reconciles due; it must write nothing once the standby has taken over,
/// and stop. Its writes are fenced by the deadline its last renewal earned.
#[tokio::test]
async fn a_leader_paused_past_its_lease_writes_nothing_after_the_standby_took_over() {
    let cluster = Cluster::start().await;
    let (admin_a, admin_b) = (free_admin_addr(), free_admin_addr());
    let mut leader = replica_process(&cluster, "a.test/pod-name", &admin_a);
    let pods = cluster.pods("default");
    create_pod(&pods, &pod("before", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "before", "a.test/pod-name", Some("before")).await;
    let mut standby = replica_process(&cluster, "b.test/pod-name", &admin_b);
    eventually("the standby to serve /readyz", || async {
        http_get(&admin_b, "/readyz").await.filter(|(status, _)| *status == 200)
    })
    .await;
    let holder = lease_holder(&cluster, "kopper-test").await;

    signal(&leader, "-STOP").await;
    wait_until_stopped(&leader).await;
    let during: Vec<String> = (0..5).map(|n| format!("during-{n}")).collect();
    for name in &during {
        create_pod(&pods, &pod(name, &[(ANNOTATION, "true")], &[])).await;
    }
    for name in &during {
        wait_for_label(&cluster, name, "b.test/pod-name", Some(name)).await;
    }
    assert_ne!(lease_holder(&cluster, "kopper-test").await, holder, "the standby took the lease");

    signal(&leader, "-CONT").await;
    let exit = tokio::time::timeout(DEADLINE, leader.wait()).await.expect("the old leader stops").unwrap();
    assert!(!exit.success(), "losing the lease is an error exit");
    for name in &during {
        assert_eq!(
            label_of(&pods, name, "a.test/pod-name").await,
            None,
            "the old leader wrote to {name} after losing its lease"
        );
    }
    standby.start_kill().unwrap();
    standby.wait().await.unwrap();
}

/// A TCP proxy between kopper and the API server that a test can cut (dropping every open
/// connection and resetting new ones, as a network partition would), close (no one listens:
/// connections are refused, as when the API server is down), black-hole (dropping every open
/// connection, then taking new ones and never answering, as a dead route or a hung proxy
/// would), stall (the open connections go silent, new ones are served, as when one API
/// server behind a load balancer dies without a reset), make silent (open connections and
/// new ones alike) and restore.
struct Partition {
    url: String,
    addr: std::net::SocketAddr,
    /// Where connections go: changed by [`Self::route_to`].
    upstream: std::sync::Arc<std::sync::Mutex<std::net::SocketAddr>>,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Bumped by [`Self::stall`]: every connection served before goes silent.
    stalls: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    /// The request lines of the requests sent on silent connections.
    unanswered: Unanswered,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

type Unanswered = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// One of the ways a [`Partition`] fails.
type PartitionFailure = fn(&Partition);

/// kopper at work once more: a pod annotated now gets its label. Then kopper is stopped.
async fn labels_a_new_pod_and_stops(cluster: &Cluster, operator: Operator) {
    create_pod(&cluster.pods("default"), &pod("after", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(cluster, "after", "kopper.dev/pod-name", Some("after")).await;
    operator.stop().await.unwrap();
}

/// Waits for kopper's `/readyz` at `admin` to answer `want`; its status and body then.
async fn readyz(admin: &str, want: u16) -> (u16, String) {
    eventually(&format!("/readyz {want}"), || async {
        http_get(admin, "/readyz").await.filter(|(status, _)| *status == want)
    })
    .await
}

impl Partition {
    /// A kubeconfig for `cluster` that reaches it through this partition, and the
    /// directory that holds it (removed when dropped).
    fn kubeconfig(&self, cluster: &Cluster) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let text =
            std::fs::read_to_string(&cluster.kubeconfig).unwrap().replace(&cluster.sim.url(), &self.url);
        std::fs::write(&kubeconfig, text).unwrap();
        (dir, kubeconfig)
    }

    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = Self::listen_outside_the_ephemeral_range();
        let addr = listener.local_addr().unwrap();
        let partition = Self {
            url: format!("http://{addr}"),
            addr,
            upstream: std::sync::Arc::new(std::sync::Mutex::new(upstream)),
            open: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
            silent: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
            stalls: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
            unanswered: Unanswered::default(),
            connections: std::sync::Arc::default(),
            accept: std::sync::Mutex::new(None),
        };
        partition.serve(listener);
        partition
    }

    /// A listener on a port below Linux's ephemeral range (32768 and up), so that while
    /// [`Self::close`] has it closed, no socket another test binds to port 0 can take it.
    fn listen_outside_the_ephemeral_range() -> tokio::net::TcpListener {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let start = 20_000 + nanos % 12_000;
        (0..12_000u32)
            .map(|offset| 20_000 + (start - 20_000 + offset) % 12_000)
            .find_map(|port| Self::listen_at(([127, 0, 0, 1], u16::try_from(port).unwrap()).into()).ok())
            .expect("a free port between 20000 and 32000")
    }

    fn listen_at(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        // Connections closed there may linger in TIME_WAIT.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    }

    /// Sends new connections to another API server (one back with other data).
    fn route_to(&self, upstream: std::net::SocketAddr) {
        *self.upstream.lock().unwrap() = upstream;
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        use std::sync::atomic::Ordering;
        let (open, silent, tracked) = (self.open.clone(), self.silent.clone(), self.connections.clone());
        let (upstream, stalls) = (self.upstream.clone(), self.stalls.clone());
        let unanswered = self.unanswered.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if silent.load(Ordering::SeqCst) {
                    let held = tokio::spawn(Self::never_answer(inbound, unanswered.clone()));
                    tracked.lock().unwrap().push(held.abort_handle());
                    continue;
                }
                if !open.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is reset
                }
                let to = *upstream.lock().unwrap();
                let mut stall = stalls.subscribe();
                let unanswered = unanswered.clone();
                let task = tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = stall.changed() => {
                            drop(outbound);
                            Self::never_answer(inbound, unanswered).await;
                        }
                    }
                });
                tracked.lock().unwrap().push(task.abort_handle());
            }
        });
        *self.accept.lock().unwrap() = Some(accept);
    }

    /// Keeps `inbound` open and never answers it, noting the request line of each request
    /// that comes in on it.
    async fn never_answer(mut inbound: tokio::net::TcpStream, unanswered: Unanswered) {
        use tokio::io::AsyncReadExt as _;
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = inbound.read(&mut buffer).await {
            let text = String::from_utf8_lossy(&buffer[..read]);
            if let Some(line) = text.lines().next().filter(|line| line.ends_with("HTTP/1.1")) {
                unanswered.lock().unwrap().push(line.to_owned());
            }
        }
        std::future::pending::<()>().await;
        drop(inbound);
    }

    /// Whether a request whose request line contains `path` is waiting for an answer that
    /// will never come.
    fn holds_a_request_to(&self, path: &str) -> bool {
        self.unanswered.lock().unwrap().iter().any(|line| line.contains(path))
    }

    fn drop_connections(&self) {
        self.connections.lock().unwrap().drain(..).for_each(|connection| connection.abort());
    }

    fn black_hole(&self) {
        self.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        self.drop_connections();
    }

    /// The connections open now stop carrying anything but stay open, without a reset or a
    /// close; new connections are served.
    fn stall(&self) {
        self.stalls.send_modify(|stalls| *stalls += 1);
    }

    /// The API server dies without a reset: the connections open now stay open and carry
    /// nothing, new ones are taken and never answered.
    fn go_silent(&self) {
        self.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stall();
    }

    fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        self.drop_connections();
    }

    /// Stops listening: connections are refused until [`Self::restore`].
    fn close(&self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
        }
        self.drop_connections();
    }

    fn restore(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
        if self.silent.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // Connections taken while silent carry requests that will never be answered.
            self.drop_connections();
        }
        if self.accept.lock().unwrap().is_none() {
            self.serve(Self::listen_at(self.addr).unwrap());
        }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
        }
    }
}

/// While the API server cannot be reached for longer than --api-unreachable-threshold,
/// /readyz says so; once it answers again, readiness and the work come back without a
/// restart. Both when connections fail, and when the API server takes them and never
/// answers (a black-holed route, a hung proxy): then no request of kopper's ends in an
/// error, they hang, and only the question kopper asks on its own (`probe_api_server`)
/// going unanswered tells.
#[tokio::test]
async fn readyz_fails_while_the_api_server_is_unreachable_or_silent_and_recovers_by_itself() {
    let failures: [(&str, PartitionFailure); 2] =
        [("cut", Partition::cut), ("black-holed", Partition::black_hole)];
    for (failure, fail) in failures {
        let cluster = Cluster::start().await;
        let partition = Partition::start(cluster.sim.addr()).await;
        let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
        let admin = free_admin_addr();
        let flags =
            ["--controllers", "pod-labeler", "--admin-addr", &admin, "--api-unreachable-threshold", "1s"];
        let operator = Operator::start(run_args(&kubeconfig, &flags));
        readyz(&admin, 200).await;

        fail(&partition);
        let (_, body) = readyz(&admin, 503).await;
        assert!(body.contains("API server has not answered"), "{failure}: {body}");

        partition.restore();
        readyz(&admin, 200).await;
        labels_a_new_pod_and_stops(&cluster, operator).await;
    }
}

/// An API server cut off from kopper comes back with other data whose resourceVersion has
/// already passed the one kopper's watches hold (an etcd restored from a backup, then written
/// to before kopper reconnects). Resuming would succeed and serve only what came after: the
/// pod made first would never be seen. kopper lists again after a resume that got no answer.
#[tokio::test]
async fn an_api_server_back_from_a_cut_with_other_data_is_listed_again() {
    let cluster = Cluster::start().await;
    let partition = Partition::start(cluster.sim.addr()).await;
    let (_dir, kubeconfig) = partition.kubeconfig(&cluster);
    let admin = free_admin_addr();
    let operator =
        Operator::start(run_args(&kubeconfig, &["--controllers", "pod-labeler", "--admin-addr", &admin]));
    create_pod(&cluster.pods("default"), &pod("before", &[(ANNOTATION, "true")], &[])).await;
    wait_for_label(&cluster, "before", "kopper.dev/pod-name", Some("before")).await;
    let config_maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let version_held = |list: kube::core::ObjectList<ConfigMap>| -> u64 {
        list.metadata.resource_version.unwrap().parse().unwrap()
    };
    let held = version_held(config_maps.list(&ListParams::default()).await.unwrap());
    let unanswered_watches = r#"kopper_api_requests_total{verb="watch",code="error"}"#;
    let unanswered_before = metric(&admin, unanswered_watches).await.unwrap_or(0.0);

    partition.close();
    // The API server back with other data (a fresh kubesim behind the same address).
    let cluster = Cluster::start().await;
    partition.route_to(cluster.sim.addr());
    create_pod(&cluster.pods("default"), &pod("after", &[(ANNOTATION, "true")], &[])).await;
    let config_maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    for n in 0.. {
        let filler = ConfigMap {
            metadata: ObjectMeta { name: Some(format!("filler-{n}")), ..ObjectMeta::default() },
            ..ConfigMap::default()
        };
        config_maps.create(&PostParams::default(), &filler).await.unwrap();
        if version_held(config_maps.list(&ListParams::default()).await.unwrap()) > held + 10 {
            break;
        }
    }
    eventually("kopper to try to resume its watches and get no answer", || async {
        (metric(&admin, unanswered_watches).await.unwrap_or(0.0) > unanswered_before).then_some(())
    })
    .await;
    partition.restore();

    wait_for_label(&cluster, "after", "kopper.dev/pod-name", Some("after")).await;
    operator.stop().await.unwrap();
}

/// A watch the API server keeps refusing while it answers everything else (lists, the
/// lease, writes) leaves kopper's caches stale: `/readyz` says so, naming the watch, and
/// recovers once the watch is served again.
#[tokio::test]
async fn readyz_fails_while_a_watch_is_refused_and_recovers_by_itself() {
    let cluster = Cluster::start().await;
    let admin = free_admin_addr();
    let flags = ["--controllers", "pod-labeler", "--admin-addr", &admin, "--api-unreachable-threshold", "1s"];
    let operator = Operator::start(cluster.run_args(&flags));
    readyz(&admin, 200).await;

    let refused = kubesim::Fault {
        verb: Some("watch".into()),
        resource: Some("pods".into()),
        count: u32::MAX,
        status: 500,
    };
    cluster.sim.faults().fail_next(refused);
    cluster.sim.faults().close_watches();
    let (_, body) = readyz(&admin, 503).await;
    assert!(body.contains("a watch has been refused") && body.contains("/pods"), "{body}");

    cluster.sim.faults().clear();
    readyz(&admin, 200).await;
    labels_a_new_pod_and_stops(&cluster, operator).await;
}

/// An API server that comes back without its data (restarted without its store, or an etcd
/// restored from an older backup) neither refuses nor answers kopper's resumed watches,
/// whose resourceVersion it has not reached (kube-apiserver's watch cache stays quiet).
/// kopper's resumes found no API server while it was down, so it lists again and works on
/// the new state, without a restart.
#[tokio::test]
async fn an_api_server_back_without_its_data_is_listed_again_and_served() {
    let sim = kubesim::Server::start(kubesim::Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let admin = free_admin_addr();
    let operator =
        Operator::start(run_args(&kubeconfig, &["--controllers", "pod-labeler", "--admin-addr", &admin]));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sim.client(), "default");
    for n in 0..10 {
        create_pod(&pods, &pod(&format!("before-{n}"), &[(ANNOTATION, "true")], &[])).await;
    }
    eventually("the last pod before the restart to be labelled", || async {
        label_of(&pods, "before-9", "kopper.dev/pod-name").await
    })
    .await;

    let unanswered_watches = r#"kopper_api_requests_total{verb="watch",code="error"}"#;
    let unanswered_before = metric(&admin, unanswered_watches).await.unwrap_or(0.0);
    let addr = sim.addr();
    sim.shutdown().await;
    eventually("kopper's watches to find no API server", || async {
        (metric(&admin, unanswered_watches).await.unwrap_or(0.0) > unanswered_before).then_some(())
    })
    .await;
    let sim = kubesim::Server::start(kubesim::Config { addr, ..kubesim::Config::default() }).await.unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sim.client(), "default");
    create_pod(&pods, &pod("after", &[(ANNOTATION, "true")], &[])).await;
    eventually("the pod created after the restart to be labelled", || async {
        label_of(&pods, "after", "kopper.dev/pod-name").await
    })
    .await;
    operator.stop().await.unwrap();
}

/// An API server that restarts with its data (resourceVersions continue, old watches are
/// refused with 410): kopper resumes from what it knew and keeps converging.
#[tokio::test]
async fn an_api_server_back_with_its_data_is_resumed_and_served() {
    let data = tempfile::tempdir().unwrap();
    let config = || kubesim::Config { data_dir: Some(data.path().to_owned()), ..kubesim::Config::default() };
    let sim = kubesim::Server::start(config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let admin = free_admin_addr();
    let operator =
        Operator::start(run_args(&kubeconfig, &["--controllers", "pod-labeler", "--admin-addr", &admin]));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sim.client(), "default");
    create_pod(&pods, &pod("before", &[(ANNOTATION, "true")], &[])).await;
    eventually("the pod before the restart to be labelled", || async {
        label_of(&pods, "before", "kopper.dev/pod-name").await
    })
    .await;

    let sim = restart_api_server(sim, config()).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sim.client(), "default");
    assert_eq!(
        label_of(&pods, "before", "kopper.dev/pod-name").await.as_deref(),
        Some("before"),
        "data kept"
    );
    let unlabel = json!({"metadata": {"labels": {"kopper.dev/pod-name": null}}});
    pods.patch("before", &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    create_pod(&pods, &pod("after", &[(ANNOTATION, "true")], &[])).await;
    for name in ["before", "after"] {
        eventually(&format!("{name} to be labelled after the restart"), || async {
            label_of(&pods, name, "kopper.dev/pod-name").await.filter(|value| value == name)
        })
        .await;
    }
    operator.stop().await.unwrap();
}
