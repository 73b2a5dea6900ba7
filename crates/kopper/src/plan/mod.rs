//! `kopper plan`: what the rules in the cluster, or in files about to be applied, would
//! create, update and delete, decided by the controllers' own pure decision functions and
//! without writing anything. Exits with [`report::FINDINGS_EXIT_CODE`] when a rule would not
//! get what it asks for, so a CI pipeline can gate on it.

pub mod files;
pub mod report;

use std::process::ExitCode;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::ListParams;
use kube::{Api, Client, Resource, ResourceExt};

use self::files::{FileRules, merged};
use self::report::Report;
use crate::cli::{PlanArgs, PlanOutput};
use crate::controllers::namespace_access::NamespaceAccess;
use crate::controllers::namespace_access::diff::managing_policy;
use crate::controllers::namespace_access::plan::plan_policies;
use crate::controllers::replication::plan::{ClusterObjects, plan_rules};

/// Reads the cluster (and the files), prints the plan, and says how to exit.
pub async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let client = crate::runtime::client::connect(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        None,
        crate::runtime::fence::WriteFence::open(),
    )
    .await?;
    let files = FileRules::read(&args.files, client.default_namespace())?;
    let taken = files.taken_as_applied();
    if !taken.is_empty() {
        eprintln_quiet(&format!("kopper plan: planned as if applied with the rules: {}", taken.join(", ")));
    }
    if !files.skipped.is_empty() {
        eprintln_quiet(&format!(
            "kopper plan: skipped {} document(s) that are not kopper rules ({})",
            files.skipped.len(),
            files.skipped.join(", ")
        ));
    }
    let report = plan(&client, &args, &files).await?;
    let text = match args.output {
        PlanOutput::Text => report.to_text(),
        PlanOutput::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    crate::print_quiet(&text);
    // With files, the pipeline gates on the rules it is about to apply, not on others' rules.
    let gate = if args.files.is_empty() { report::Gate::All } else { report::Gate::FileRules };
    Ok(if report.has_findings(gate) { ExitCode::from(report::FINDINGS_EXIT_CODE) } else { ExitCode::SUCCESS })
}

/// The plan of every rule kind against what the cluster holds now.
pub async fn plan(client: &Client, args: &PlanArgs, files: &FileRules) -> anyhow::Result<Report> {
    let settings = args.settings();
    let replication_rules = merged(&rules_in_cluster(client, args).await?, &files.replication_rules);
    let config_map_syncs = merged(&rules_in_cluster(client, args).await?, &files.config_map_syncs);
    let secret_syncs = merged(&rules_in_cluster(client, args).await?, &files.secret_syncs);
    let policies = merged(&rules_in_cluster(client, args).await?, &files.namespace_accesses);
    let namespaces = merged(&list_all::<Namespace>(client).await?, &files.namespaces);
    // Secrets are read only when a rule copies Secrets: plan needs no more access than that.
    let copies_secrets =
        !secret_syncs.is_empty() || replication_rules.iter().any(|rule| rule.spec.copies_secrets());
    let secrets = if copies_secrets { list_all::<Secret>(client).await? } else { Vec::new() };
    let config_maps = merged(&list_all::<ConfigMap>(client).await?, &files.config_maps);
    let mut cluster = ClusterObjects::new(&namespaces, &config_maps, &secrets);
    add_other_kinds(client, &settings, &replication_rules, &mut cluster).await?;
    let mut bindings = list_all::<RoleBinding>(client).await?;
    if args.files_only {
        // The cluster's other policies are left out, not deleted: their bindings stay theirs.
        let planned: Vec<String> = policies.iter().map(|policy| policy.name_any()).collect();
        bindings.retain(|binding| {
            managing_policy(binding).is_none_or(|policy| planned.iter().any(|p| p == policy))
        });
    }

    let origin = |key| files.origins.get(&key).cloned();
    let mut report = Report::default();
    for rule in plan_rules(&replication_rules, &config_map_syncs, &secret_syncs, &settings, &cluster) {
        let key =
            (report::rule_kind(&rule.id.kind).to_owned(), rule.id.namespace.clone(), rule.id.name.clone());
        report.push(report::replication_rule(&rule, origin(key)));
    }
    let protected = &settings.destinations.protected;
    for policy in plan_policies(&policies, &namespaces, &bindings, protected) {
        let key = (NamespaceAccess::kind(&()).into_owned(), None, policy.policy.clone());
        report.push(report::namespace_access(&policy, origin(key)));
    }
    Ok(report)
}

/// The rules of one kind in the cluster: none with `--files-only`, nor when the kind's CRD
/// is not installed.
async fn rules_in_cluster<K>(client: &Client, args: &PlanArgs) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if args.files_only {
        return Ok(Vec::new());
    }
    match Api::<K>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Vec::new()),
        Err(error) => Err(error.into()),
    }
}

/// Reads the objects of every kind besides ConfigMap and Secret that a rule copies and
/// `--replicate-kinds` allows, as discovery finds them served (those not served leave their
/// rules refused, as in the engine).
async fn add_other_kinds(
    client: &Client,
    settings: &crate::runtime::Settings,
    rules: &[crate::controllers::replication::types::ReplicationRule],
    cluster: &mut ClusterObjects,
) -> anyhow::Result<()> {
    use crate::controllers::replication::model::ObjectKind;
    let named: std::collections::BTreeSet<ObjectKind> = rules
        .iter()
        .filter_map(|rule| settings.replicate_kinds.find(rule.spec.api_version(), &rule.spec.kind))
        .map(ObjectKind::Other)
        .collect();
    for kind in named {
        let ObjectKind::Other(allowed) = kind else { continue };
        if !crate::controllers::replication::cache::kinds::resolve(client, allowed).await {
            continue;
        }
        let Some(resource) = kind.api_resource() else { continue };
        let api = Api::<kube::core::DynamicObject>::all_with(client.clone(), &resource);
        let objects: Vec<_> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|object| {
                let fields = match object.data {
                    serde_json::Value::Object(fields) => fields,
                    _ => serde_json::Map::new(),
                };
                (object.metadata, fields)
            })
            .collect();
        cluster.add_kind(kind, &objects);
    }
    Ok(())
}

async fn list_all<K>(client: &Client) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone()).list(&ListParams::default()).await?.items)
}

fn eprintln_quiet(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}
