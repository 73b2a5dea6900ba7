//! `kopper demo`: a tour that needs no cluster. It starts an embedded kubesim, installs the
//! CRDs, runs every controller against it, applies the samples plus a small demo workload,
//! shows what kopper did, and keeps running so the newcomer can explore with kubectl.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::Scope;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::cli::{Cli, Command, DemoArgs, RunArgs};
use crate::controllers::bucket::types::Bucket;
use crate::controllers::replication::model::{
    MANAGED_BY_LABEL, REPLICATED_BY_LABEL, SOURCE_NAME_ANNOTATION, SOURCE_NAMESPACE_ANNOTATION,
};
use crate::controllers::replication::types::ReplicationRule;
use crate::runtime::Shutdown;

const FIELD_MANAGER: &str = "kopper-demo";
/// Namespaces (with a `team` label for label-based policies) and an annotated pod created
/// by the demo itself, so each controller has something to act on even when the samples
/// only hold policies.
const DEMO_NAMESPACES: [&str; 2] = ["team-a", "team-b"];
const DEMO_POD: &str = "hello";
/// How long the demo waits for kopper to act before printing what it sees.
const SETTLE_DEADLINE: Duration = Duration::from_secs(10);

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    crate::runtime::telemetry::init(&args.telemetry)?;
    let ctrl_c =
        crate::runtime::shutdown::termination_signal().context("cannot install SIGTERM/SIGINT handlers")?;
    let sim = kubesim::Server::start(kubesim::Config::default()).await.context("cannot start kubesim")?;
    let mut args = args;
    if args.admin_addr.is_none() {
        args.admin_addr = Some(free_loopback_addr().context("cannot find a free port for the admin server")?);
    }
    let kubeconfig = args.kubeconfig_out.clone().unwrap_or_else(default_kubeconfig_path);
    sim.write_kubeconfig(&kubeconfig)
        .with_context(|| format!("cannot write the kubeconfig to {}", kubeconfig.display()))?;
    let client = sim.client();
    println!("kopper demo: embedded API server at {}", sim.url());

    install_crds(&client).await?;
    let stop = Shutdown::new();
    let mut operator = tokio::spawn(crate::run(run_args(&args, &kubeconfig)?, stop.wait()));

    let applied = apply_samples(&client, args.samples.as_deref()).await?;
    create_demo_workload(&client, &run_args(&args, &kubeconfig)?).await?;
    tokio::select! {
        () = wait_until_settled(&client, &applied) => {}
        stopped = &mut operator => {
            stopped.context("the operator task failed")??;
            anyhow::bail!("the operator stopped unexpectedly");
        }
    }
    print_summary(&client, &applied).await?;

    println!("\nkubeconfig: {}", kubeconfig.display());
    println!(
        "try:        kubectl --kubeconfig {} get rolebindings,pods -A --show-labels",
        kubeconfig.display()
    );
    println!("metrics:    http://{}/metrics", admin_addr(&args));
    println!("Ctrl-C stops the demo.");
    ctrl_c.await;

    stop.trigger();
    operator.await.context("the operator task failed")??;
    sim.shutdown().await;
    // Whoever read the summary may be gone by now (a closed pipe): these lines are a
    // courtesy, not worth failing the exit for.
    let say = |line: String| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{line}");
    };
    say("\nstopped kopper and the embedded API server (its objects were in memory only)".to_owned());
    if args.kubeconfig_out.is_none() {
        // Best effort: a temporary file the system cleans anyway.
        if std::fs::remove_file(&kubeconfig).is_ok() {
            say(format!("removed {}", kubeconfig.display()));
        }
    } else {
        say(format!("kept {} (--kubeconfig-out)", kubeconfig.display()));
    }
    Ok(())
}

/// A loopback address whose port was free a moment ago (many machines have 8080 taken).
fn free_loopback_addr() -> std::io::Result<std::net::SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

fn admin_addr(args: &DemoArgs) -> std::net::SocketAddr {
    args.admin_addr.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
}

fn default_kubeconfig_path() -> PathBuf {
    std::env::temp_dir().join(format!("kopper-demo-{}.kubeconfig", std::process::id()))
}

/// The namespaces the demo protects besides the system ones: where the default-deny sample
/// keeps its source, apart from any pod (the policy closes its own namespace too).
pub const PROTECTED_NAMESPACES: [&str; 1] = ["kopper-policies"];

/// The `kopper run` flags the demo uses: its own kubeconfig, every controller, no lease.
fn run_args(args: &DemoArgs, kubeconfig: &Path) -> anyhow::Result<RunArgs> {
    let argv = [
        "kopper".into(),
        "run".into(),
        "--kubeconfig".into(),
        kubeconfig.to_string_lossy().into_owned(),
        "--leader-elect".into(),
        "false".into(),
        "--admin-addr".into(),
        admin_addr(args).to_string(),
        // The default-deny sample copies a kind the admin must allow, from a namespace of
        // its own the admin protects.
        "--protected-namespaces".into(),
        PROTECTED_NAMESPACES.join(","),
        "--replicate-kinds".into(),
        "networking.k8s.io/v1/NetworkPolicy".into(),
    ];
    match <Cli as clap::Parser>::try_parse_from(argv)?.into_command() {
        Command::Run(mut run) => {
            run.s3 = args.s3.clone();
            Ok(run)
        }
        _ => anyhow::bail!("internal error: demo flags did not parse as `kopper run`"),
    }
}

async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crate::crds::all() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("cannot install CRD {name}"))?;
        println!("installed CRD {name}");
    }
    Ok(())
}

/// Applies every YAML document under `dir` (namespaces first), returning `kind name` of each
/// one applied. A document that cannot be applied (say, a kind this build does not serve) is
/// reported and skipped, so one sample cannot spoil the whole tour.
async fn apply_samples(client: &kube::Client, dir: Option<&Path>) -> anyhow::Result<Vec<String>> {
    let mut documents = match dir {
        Some(dir) => read_documents(dir)?,
        None => built_in_documents()?,
    };
    documents.sort_by_key(|object| object.types.as_ref().is_none_or(|types| types.kind != "Namespace"));
    let mut applied = Vec::new();
    for object in documents {
        let label = describe(&object);
        match apply(client, object).await {
            Ok(()) => applied.push(label),
            Err(error) => println!("skipped sample {label}: {}", short_error(&error)),
        }
    }
    Ok(applied)
}

/// The API server's own message for a refused request, without kube's debug dump.
fn short_error(error: &anyhow::Error) -> String {
    match error.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status.message.clone(),
        _ => format!("{error:#}"),
    }
}

fn built_in_documents() -> anyhow::Result<Vec<DynamicObject>> {
    let mut documents = Vec::new();
    for (name, text) in crate::samples::BUILT_IN {
        for value in crate::samples::documents(text).with_context(|| format!("built-in sample {name}"))? {
            documents.push(serde_json::from_value(value).with_context(|| format!("built-in sample {name}"))?);
        }
    }
    Ok(documents)
}

fn read_documents(dir: &Path) -> anyhow::Result<Vec<DynamicObject>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        println!("no samples at {} (use --samples DIR); applying only the demo workload", dir.display());
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    paths.sort();
    let mut documents = Vec::new();
    for path in paths {
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let values = crate::samples::documents(&text)
            .with_context(|| format!("{} is not valid YAML", path.display()))?;
        for value in values {
            let object: DynamicObject = serde_json::from_value(value).with_context(|| {
                format!("{} holds a document that is not a Kubernetes object", path.display())
            })?;
            documents.push(object);
        }
    }
    Ok(documents)
}

fn describe(object: &DynamicObject) -> String {
    let kind = object.types.as_ref().map_or("?", |types| types.kind.as_str());
    match object.namespace() {
        Some(namespace) => format!("{kind} {namespace}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

async fn apply(client: &kube::Client, object: DynamicObject) -> anyhow::Result<()> {
    let types = object.types.clone().context("the document has no apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = object.namespace().unwrap_or_else(|| "default".to_owned());
            Api::namespaced_with(client.clone(), &namespace, &resource)
        }
    };
    api.patch(&object.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await?;
    Ok(())
}

async fn create_demo_workload(client: &kube::Client, args: &RunArgs) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in DEMO_NAMESPACES {
        let team = name.trim_start_matches("team-");
        let namespace = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": { "team": team } }
        });
        namespaces.patch(name, &params, &Patch::Apply(&namespace)).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), DEMO_NAMESPACES[0]);
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": DEMO_POD, "annotations": { &args.pod_label_annotation: "true" } },
        "spec": { "containers": [{ "name": "hello", "image": "nginx" }] }
    });
    pods.patch(DEMO_POD, &params, &Patch::Apply(&pod)).await?;
    Ok(())
}

/// Waits (bounded) until kopper has acted on the demo workload: the demo pod carries its
/// label and, when a NamespaceAccess sample was applied, every demo namespace has a
/// RoleBinding. The summary then shows results rather than a race.
async fn wait_until_settled(client: &kube::Client, applied: &[String]) {
    let expect_bindings = applied.iter().any(|label| label.starts_with("NamespaceAccess "));
    let expect_buckets = applied.iter().any(|label| label.starts_with("Bucket "));
    let expect_copies = applied.iter().any(|label| {
        ["ReplicationRule ", "ConfigMapSync ", "SecretSync "].iter().any(|kind| label.starts_with(kind))
    });
    let deadline = tokio::time::Instant::now() + SETTLE_DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if demo_pod_labelled(client).await
            && (!expect_bindings || demo_namespaces_bound(client).await)
            && (!expect_copies || demo_copies_made(client).await)
            && (!expect_buckets || buckets_settled(client).await)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "(kopper has not finished within {SETTLE_DEADLINE:?}; the summary shows what it has done so far)"
    );
}

/// Every Bucket has a Ready condition (True, or False with the reason it waits on).
async fn buckets_settled(client: &kube::Client) -> bool {
    let buckets: Api<Bucket> = Api::all(client.clone());
    let Ok(list) = buckets.list(&ListParams::default()).await else { return false };
    list.items.iter().all(|bucket| {
        let conditions =
            bucket.status.as_ref().map(|status| status.conditions.as_slice()).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == "Ready" && (c.status == "True" || c.reason != "Provisioning"))
    })
}

async fn demo_pod_labelled(client: &kube::Client) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), DEMO_NAMESPACES[0]);
    let pod = pods.get_opt(DEMO_POD).await.ok().flatten();
    pod.is_some_and(|pod| pod.labels().values().any(|value| value == DEMO_POD))
}

/// Every demo namespace holds a copy, and so does `destination-namespace` when the seed
/// 002 sample created it; Secret copies likewise: in every demo namespace when a
/// ReplicationRule copies Secrets, and in `payments` when the SecretSync sample created it.
async fn demo_copies_made(client: &kube::Client) -> bool {
    let copies = managed_copies::<ConfigMap>(client).await;
    let secrets = managed_copies::<Secret>(client).await;
    let in_namespace = |copies: &[CopyMeta], namespace: &str| {
        copies.iter().any(|copy| copy.namespace.as_deref() == Some(namespace))
    };
    let exists = |name: &'static str| async move {
        Api::<Namespace>::all(client.clone()).get_opt(name).await.ok().flatten().is_some()
    };
    let rules = Api::<ReplicationRule>::all(client.clone()).list(&ListParams::default()).await;
    let copies_secrets = rules.is_ok_and(|rules| rules.items.iter().any(|rule| rule.spec.copies_secrets()));
    DEMO_NAMESPACES.iter().all(|ns| in_namespace(&copies, ns))
        && (!exists("destination-namespace").await || in_namespace(&copies, "destination-namespace"))
        && (!copies_secrets || DEMO_NAMESPACES.iter().all(|ns| in_namespace(&secrets, ns)))
        && (!exists("payments").await || in_namespace(&secrets, "payments"))
}

/// A copy's metadata: the summary names copies, never their data.
type CopyMeta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The copies of kind `K` kopper keeps, metadata only (a Secret's data is never read).
async fn managed_copies<K>(client: &kube::Client) -> Vec<CopyMeta>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let selector = format!("{MANAGED_BY_LABEL}=kopper,{REPLICATED_BY_LABEL}");
    let copies: Api<K> = Api::all(client.clone());
    let list = copies.list_metadata(&ListParams::default().labels(&selector)).await;
    list.map(|list| list.items.into_iter().map(|copy| copy.metadata).collect()).unwrap_or_default()
}

async fn demo_namespaces_bound(client: &kube::Client) -> bool {
    for namespace in DEMO_NAMESPACES {
        let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
        match bindings.list(&ListParams::default()).await {
            Ok(list) if !list.items.is_empty() => {}
            _ => return false,
        }
    }
    true
}

async fn print_summary(client: &kube::Client, applied: &[String]) -> anyhow::Result<()> {
    println!("\napplied samples:");
    for label in applied {
        println!("  {label}");
    }
    println!(
        "and a workload for them to act on: namespaces {} and pod {}/{DEMO_POD} (annotated for the pod labeler)",
        DEMO_NAMESPACES.join(", "),
        DEMO_NAMESPACES[0]
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    println!("\nnamespaces:");
    for namespace in namespaces.list(&ListParams::default()).await? {
        println!("  {}", namespace.name_any());
    }
    let bindings: Api<RoleBinding> = Api::all(client.clone());
    println!("\nrole bindings:");
    for binding in bindings.list(&ListParams::default()).await? {
        let subjects: Vec<String> = binding
            .subjects
            .iter()
            .flatten()
            .map(|subject| format!("{} {}", subject.kind, subject.name))
            .collect();
        println!(
            "  {}/{} -> {} {} for {}",
            binding.namespace().unwrap_or_default(),
            binding.name_any(),
            binding.role_ref.kind,
            binding.role_ref.name,
            subjects.join(", ")
        );
    }
    print_copies("ConfigMap", &managed_copies::<ConfigMap>(client).await);
    print_copies("Secret", &managed_copies::<Secret>(client).await);
    print_buckets(client).await?;
    let pods: Api<Pod> = Api::all(client.clone());
    println!("\npods and their labels:");
    for pod in pods.list(&ListParams::default()).await? {
        let labels: Vec<String> = pod.labels().iter().map(|(key, value)| format!("{key}={value}")).collect();
        println!("  {}/{}  {}", pod.namespace().unwrap_or_default(), pod.name_any(), labels.join(","));
    }
    Ok(())
}

/// Each copy with its source and rule; names only, never a Secret's data.
fn print_copies(kind: &str, copies: &[CopyMeta]) {
    println!("\n{kind} copies kopper keeps:");
    for copy in copies {
        let annotation = |key: &str| copy.annotations.as_ref().and_then(|all| all.get(key).cloned());
        let rule = copy.labels.as_ref().and_then(|labels| labels.get(REPLICATED_BY_LABEL).cloned());
        println!(
            "  {}/{} <- {}/{} ({})",
            copy.namespace.as_deref().unwrap_or_default(),
            copy.name.as_deref().unwrap_or_default(),
            annotation(SOURCE_NAMESPACE_ANNOTATION).unwrap_or_default(),
            annotation(SOURCE_NAME_ANNOTATION).unwrap_or_default(),
            rule.unwrap_or_default()
        );
    }
}

/// Each Bucket with its bucket and Secret, or why it is not Ready; how to get an S3 endpoint
/// when the demo runs without one.
async fn print_buckets(client: &kube::Client) -> anyhow::Result<()> {
    let buckets: Api<Bucket> = Api::all(client.clone());
    let list = buckets.list(&ListParams::default()).await?;
    if list.items.is_empty() {
        return Ok(());
    }
    println!("\nBuckets:");
    let mut unconfigured = false;
    for bucket in &list.items {
        let status = bucket.status.clone().unwrap_or_default();
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
        let (state, reason) =
            ready.map(|c| (c.status.as_str(), c.reason.as_str())).unwrap_or(("Unknown", ""));
        unconfigured |= reason == "ProviderNotConfigured";
        let target = match (&status.bucket_name, state) {
            (Some(name), "True") => format!("bucket {name}, credentials in Secret {}", bucket.secret_name()),
            _ => format!("not ready: {reason}"),
        };
        println!("  {}/{}  {target}", bucket.namespace().unwrap_or_default(), bucket.name_any());
    }
    if unconfigured {
        println!(
            "  (no S3 endpoint given: start one, e.g. `pip install 'moto[server]' && moto_server -p 5000`, \
             and run `AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x kopper demo --s3-region us-east-1 \
             --s3-endpoint http://127.0.0.1:5000 --s3-force-path-style`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_protects_the_namespace_of_the_default_deny_sample_s_source() {
        let (_, sample) = crate::samples::BUILT_IN
            .iter()
            .find(|(name, _)| *name == "replicationrule-default-deny.yaml")
            .unwrap();
        let rule: ReplicationRule = crate::samples::of_kind(sample, "ReplicationRule").unwrap();
        let Ok(Command::Demo(args)) =
            <Cli as clap::Parser>::try_parse_from(["kopper", "demo"]).map(Cli::into_command)
        else {
            panic!("expected demo")
        };
        let run = run_args(&args, Path::new("/tmp/kubeconfig")).unwrap();
        let protected = run.settings().destinations.protected;
        for namespace in &rule.spec.namespaces {
            assert!(protected.contains(namespace), "{namespace} is not protected by the demo");
        }
    }
}
