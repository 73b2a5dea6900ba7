//! kopper's container image, run as a cluster runs it: read-only root filesystem, every
//! capability dropped, a non-root user, against a kubesim the containers reach over a
//! private Docker network. Builds the image with scripts/image.sh, from the static kopper
//! binary the suite built (see [`build_image`]). Needs a Docker engine: under `CI=true` these
//! tests fail without one; elsewhere they are skipped, saying so.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{eventually_within, http_get};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kopper::controllers::replication::types::ReplicationRule;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// Its own tag, so the tests never replace the `kopper:dev` a person built.
const IMAGE: &str = "kopper:test";
/// Long enough for a container to start and converge on a busy 2-core machine.
const SLOW: Duration = Duration::from_secs(90);

fn docker(args: &[&str]) -> Result<String, String> {
    let output = Command::new("docker").args(args).output().map_err(|e| format!("docker: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("docker {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}

/// Whether a Docker engine answers; under CI its absence fails the test.
fn engine_available() -> bool {
    match docker(&["info", "--format", "{{.ServerVersion}}"]) {
        Ok(_) => true,
        Err(error) => {
            let message = format!("no Docker engine is running ({error})");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("skipped: {message}");
            false
        }
    }
}

/// Builds the image once per test binary. When this test binary's own kopper binary is
/// static (scripts/test.sh builds the suite so), that binary goes into the image; otherwise
/// scripts/image.sh builds a static one with the `image-test` profile.
fn build_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/image.sh");
        let mut command = Command::new(script);
        command.env("KOPPER_IMAGE", IMAGE).env("KOPPER_IMAGE_PROFILE", "image-test");
        command.env("KOPPER_IMAGE_REUSE", env!("CARGO_BIN_EXE_kopper"));
        let output = command.output().expect("scripts/image.sh runs");
        assert!(
            output.status.success(),
            "scripts/image.sh failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// A private network, kubesim on the host where its containers reach it, and the kopper
/// containers started on it; all removed on drop, whether the test passed or not.
struct Stage {
    network: String,
    containers: Vec<String>,
    _sim: kubesim::Server,
    admin: Client,
    kubeconfig: tempfile::TempDir,
}

impl Stage {
    async fn start() -> Self {
        let network = format!("kopper-it-{}", &uuid_like());
        docker(&["network", "create", &network]).unwrap();
        let gateway =
            docker(&["network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", &network]).unwrap();
        let config = kubesim::Config {
            addr: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            ..kubesim::Config::default()
        };
        let sim = kubesim::Server::start(config).await.unwrap();
        let admin = sim.client();
        let crds = Api::all(admin.clone());
        for crd in kopper::crds::all() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let mut kubeconfig = sim.kubeconfig();
        for cluster in &mut kubeconfig.clusters {
            if let Some(cluster) = cluster.cluster.as_mut() {
                cluster.server = Some(format!("http://{gateway}:{}", sim.addr().port()));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Self { network, containers: Vec::new(), _sim: sim, admin, kubeconfig: dir }
    }

    /// Starts replica `name` hardened as a pod would be: read-only root, no capabilities,
    /// uid 65532, no privilege escalation. Its field manager names it, so every object shows
    /// which replica wrote it.
    fn replica(&mut self, name: &str) {
        let mount =
            format!("{}:/etc/kopper/kubeconfig:ro", self.kubeconfig.path().join("kubeconfig").display());
        let manager = format!("kopper-{name}");
        docker(&[
            "run",
            "--detach",
            "--name",
            &self.container(name),
            "--network",
            &self.network,
            "--read-only",
            "--cap-drop",
            "ALL",
            "--user",
            "65532:65532",
            "--security-opt",
            "no-new-privileges",
            "--env",
            &format!("POD_NAME={name}"),
            "--volume",
            &mount,
            IMAGE,
            "run",
            "--kubeconfig",
            "/etc/kopper/kubeconfig",
            "--controllers",
            "replication-rule",
            "--leader-elect",
            "true",
            "--lease-namespace",
            "default",
            "--lease-duration",
            "3s",
            "--renew-interval",
            "1s",
            "--admin-addr",
            "0.0.0.0:8080",
            "--field-manager",
            &manager,
            "--log-format",
            "json",
        ])
        .unwrap();
        self.containers.push(self.container(name));
    }

    fn container(&self, name: &str) -> String {
        format!("{}-{name}", self.network)
    }

    fn address(&self, name: &str) -> String {
        let ip = docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &self.container(name),
        ])
        .unwrap();
        format!("{ip}:8080")
    }

    fn logs(&self, name: &str) -> String {
        docker(&["logs", "--tail", "30", &self.container(name)]).unwrap_or_else(|e| e)
    }

    /// The replica that holds the lease now.
    async fn leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), "default");
        let holder = leases.get_opt("kopper-leader").await.ok()??.spec?.holder_identity?;
        Some(holder.rsplit_once('-')?.0.to_owned())
    }

    async fn namespace(&self, name: &str) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(self.admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    }

    /// The replica whose field manager wrote the copy in `namespace`, once it is there.
    async fn copy_writer(&self, namespace: &str) -> String {
        let copies: Api<ConfigMap> = Api::namespaced(self.admin.clone(), namespace);
        eventually_within(SLOW, &format!("the copy in {namespace}"), || async {
            let copy = copies.get_opt("shared-settings").await.ok()??;
            let manager = copy.metadata.managed_fields?.into_iter().find_map(|entry| entry.manager)?;
            // Each replica's --field-manager is `kopper-<replica>`; the replication engine
            // writes as `<that>/replication`.
            let replica = manager.strip_prefix("kopper-")?;
            Some(replica.strip_suffix("/replication").unwrap_or(replica).to_owned())
        })
        .await
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        for container in &self.containers {
            let _ = docker(&["rm", "--force", container]);
        }
        let _ = docker(&["network", "rm", &self.network]);
    }
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{:x}{:x}", std::process::id(), nanos)
}

async fn seed_rule(admin: &Client) {
    let sample = include_str!("../../../../config/samples/replicationrule-shared-settings.yaml");
    for document in kopper::samples::documents(sample).unwrap() {
        let name = document["metadata"]["name"].as_str().unwrap().to_owned();
        let params = PatchParams::apply("test").force();
        if document["kind"] == "ReplicationRule" {
            Api::<ReplicationRule>::all(admin.clone())
                .patch(&name, &params, &Patch::Apply(&document))
                .await
                .unwrap();
        } else {
            Api::<ConfigMap>::namespaced(admin.clone(), "default")
                .patch(&name, &params, &Patch::Apply(&document))
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_hardened_and_replicates() {
    if !engine_available() {
        return;
    }
    build_image();
    let size: u64 = docker(&["image", "inspect", IMAGE, "--format", "{{.Size}}"]).unwrap().parse().unwrap();
    eprintln!("image size: {:.1} MiB", size as f64 / 1024.0 / 1024.0);
    let user = docker(&["image", "inspect", IMAGE, "--format", "{{.Config.User}}"]).unwrap();
    assert_eq!(user, "65532:65532");
    let mut stage = Stage::start().await;
    stage.replica("solo");
    let address = stage.address("solo");
    eventually_within(SLOW, "/readyz to answer 200", || async {
        let (status, _) = http_get(&address, "/readyz").await?;
        (status == 200).then_some(())
    })
    .await;
    seed_rule(&stage.admin).await;
    stage.namespace("team-a").await;
    assert_eq!(stage.copy_writer("team-a").await, "solo", "{}", stage.logs("solo"));
}

/// Two replicas with leader election: the leader is cut off the network, then the next one
/// is stopped; each time another takes over, the one cut off writes nothing more, and every
/// namespace created meanwhile gets its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_takes_over_when_the_leader_is_cut_off_or_stopped() {
    if !engine_available() {
        return;
    }
    build_image();
    let mut stage = Stage::start().await;
    stage.replica("a");
    stage.replica("b");
    seed_rule(&stage.admin).await;
    let first = eventually_within(SLOW, "a leader", || stage.leader()).await;
    stage.namespace("before").await;
    assert_eq!(stage.copy_writer("before").await, first);

    docker(&["network", "disconnect", &stage.network, &stage.container(&first)]).unwrap();
    let second = eventually_within(SLOW, "another replica to take the lease", || async {
        stage.leader().await.filter(|leader| *leader != first)
    })
    .await;
    stage.namespace("after-cut").await;
    assert_eq!(stage.copy_writer("after-cut").await, second, "the new leader writes");
    // Back on the network, the old leader must see it lost the lease and write nothing.
    docker(&["network", "connect", &stage.network, &stage.container(&first)]).unwrap();
    stage.replica("c");
    eventually_within(SLOW, "the old leader to stop", || async {
        let running = docker(&["inspect", "-f", "{{.State.Running}}", &stage.container(&first)]).ok()?;
        (running == "false").then_some(())
    })
    .await;

    docker(&["stop", "--time", "10", &stage.container(&second)]).unwrap();
    let third = eventually_within(SLOW, "the last replica to take the lease", || async {
        stage.leader().await.filter(|leader| *leader != second)
    })
    .await;
    assert_eq!(third, "c");
    stage.namespace("after-stop").await;
    assert_eq!(stage.copy_writer("after-stop").await, "c");
    for namespace in ["before", "after-cut", "after-stop"] {
        let writer = stage.copy_writer(namespace).await;
        assert!(writer != first || namespace == "before", "{namespace} written by the cut-off leader");
    }
}
