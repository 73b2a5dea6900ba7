//! Command line: every flag of `kopper run` has a `KOPPER_…` environment variable as its
//! default, so the same settings work from a shell, a Helm chart or a test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::controllers::ControllerName;
use crate::runtime::Settings;
use crate::runtime::duration;

/// `kopper --version`: the version and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("KOPPER_COMMIT"), ")");

#[derive(Debug, Parser)]
#[command(name = "kopper", version = VERSION, about = "A Kubernetes operator for multi-tenant clusters")]
#[command(args_conflicts_with_subcommands = true, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `kopper run`, which is what runs when no subcommand is given.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// Parses the command line as [`clap::Parser::parse`] does (printing the error and
    /// exiting on a mistake), with [`flag_order_tip`] on a subcommand's flag given before it.
    pub fn parse_or_exit() -> Self {
        <Self as Parser>::try_parse().unwrap_or_else(|error| flag_order_tip(error).exit())
    }

    /// The subcommand to run; `run` with the top-level flags when none was named.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

/// The flags before a subcommand's name are `kopper run`'s (a bare `kopper` runs the
/// operator), so `kopper --kubeconfig X plan` is refused: clap says only that the subcommand
/// cannot be used with the flag, and this tip adds where the flag goes. The flags are not made
/// global instead: a global flag before the name also conflicts with the subcommand (clap's
/// `args_conflicts_with_subcommands`, which keeps `kopper --leader-elect false plan` from
/// silently ignoring a flag of `run`), and `crds`, `demo` and `completions` connect to no cluster.
pub fn flag_order_tip(mut error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::ArgumentConflict {
        return error;
    }
    let Some(ContextValue::String(subcommand)) = error.get(ContextKind::InvalidSubcommand) else {
        return error;
    };
    let tip = format!(
        "a subcommand's flags go after its name, e.g. `kopper {subcommand} --kubeconfig <FILE>`; \
         the flags before it are `kopper run`'s"
    );
    error.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
    error
}

// One value, parsed once at start-up: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator against the cluster of the current kubeconfig (or in-cluster); the
    /// command when none is given.
    Run(RunArgs),
    /// Print every kopper CustomResourceDefinition as multi-document YAML.
    Crds(CrdsArgs),
    /// Print what the ConfigMapSync, ReplicationRule and NamespaceAccess objects in the cluster
    /// (or in files, with -f) would create, update and delete, without writing anything.
    Plan(PlanArgs),
    /// Start an embedded API server, run every controller on it and apply the samples: a tour with
    /// no cluster needed.
    Demo(DemoArgs),
    /// Print a shell completion script, e.g. `kopper completions bash > /etc/bash_completion.d/kopper`.
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// Writes the completion script for every command and flag of kopper to `out`.
    pub fn write(&self, out: &mut dyn std::io::Write) {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(self.shell, &mut command, "kopper", out);
    }
}

/// Whether to take a Lease before reconciling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LeaderElect {
    /// On when running in a pod (where replicas may be scaled), off elsewhere.
    Auto,
    True,
    False,
}

/// Whether to wait for an API server that cannot be reached at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WaitForApiServer {
    /// Wait when running in a pod (the API server will be back; exiting would only
    /// crash-loop), fail at once elsewhere.
    Auto,
    True,
    False,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file to connect with. Without it, KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account are tried, as kubectl does.
    #[arg(long, env = "KOPPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "KOPPER_CONTEXT")]
    pub context: Option<String>,

    /// Controllers to run, comma-separated.
    #[arg(long, env = "KOPPER_CONTROLLERS", value_enum, value_delimiter = ',',
          default_values_t = ControllerName::ALL.to_vec())]
    pub controllers: Vec<ControllerName>,

    /// Reconciles each controller runs at once; namespaces take these slots in turn.
    #[arg(long, env = "KOPPER_CONCURRENCY", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Take a coordination.k8s.io Lease so that only one replica reconciles.
    #[arg(long, env = "KOPPER_LEADER_ELECT", value_enum, default_value_t = LeaderElect::Auto)]
    pub leader_elect: LeaderElect,

    /// Name of the leader-election Lease.
    #[arg(long, env = "KOPPER_LEASE_NAME", default_value = "kopper-leader", value_parser = parse_object_name)]
    pub lease_name: String,

    /// Namespace of the leader-election Lease (default: the pod's own namespace in a cluster,
    /// `default` outside one).
    #[arg(long, env = "KOPPER_LEASE_NAMESPACE", value_parser = parse_namespace)]
    pub lease_namespace: Option<String>,

    /// How long a lease stays valid without renewal; a standby replica takes over within this
    /// time after the leader dies. Whole seconds, e.g. `15s`.
    #[arg(long, env = "KOPPER_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How often the leader renews its lease; at most 80% of --lease-duration. A leader that
    /// cannot renew for 80% of the lease duration stops, before a standby may take over.
    #[arg(long, env = "KOPPER_RENEW_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub renew_interval: Duration,

    /// How long in-flight reconciles may run after SIGTERM/SIGINT before kopper exits anyway.
    #[arg(long, env = "KOPPER_SHUTDOWN_GRACE_PERIOD", default_value = "25s", value_parser = parse_duration)]
    pub shutdown_grace_period: Duration,

    /// Address of the admin server (/metrics, /healthz, /readyz).
    #[arg(long, env = "KOPPER_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,

    /// How long the API server may fail to answer before /readyz says this replica is not
    /// ready (it comes back by itself once the API server answers again).
    #[arg(long, env = "KOPPER_API_UNREACHABLE_THRESHOLD", default_value = "30s", value_parser = parse_duration)]
    pub api_unreachable_threshold: Duration,

    /// At start-up, wait for an API server that cannot be reached (trying again every few
    /// seconds, with /healthz up and /readyz saying so) instead of exiting with an error.
    #[arg(long, env = "KOPPER_WAIT_FOR_API_SERVER", value_enum, default_value_t = WaitForApiServer::Auto)]
    pub wait_for_api_server: WaitForApiServer,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Annotation that asks the pod labeler to label a pod with its name (value "true").
    #[arg(long, env = "KOPPER_POD_LABEL_ANNOTATION", default_value = "kopper.dev/add-pod-name-label",
          value_parser = parse_label_key)]
    pub pod_label_annotation: String,

    /// Label the pod labeler sets to the pod's name.
    #[arg(long, env = "KOPPER_POD_NAME_LABEL", default_value = "kopper.dev/pod-name", value_parser = parse_label_key)]
    pub pod_name_label: String,

    /// Let a ConfigMapSync read from a namespace other than its own, never a protected one.
    /// ConfigMapSyncs only: a SecretSync reads its own namespace whatever this says. Only for
    /// clusters where nobody but administrators can create ConfigMapSyncs.
    #[arg(long, env = "KOPPER_ALLOW_CROSS_NAMESPACE_SOURCES")]
    pub allow_cross_namespace_sources: bool,

    /// Let a ConfigMapSync copy into any namespace that is not protected, without the
    /// destination's consent (the `kopper.dev/accept-replication-from` annotation). Only for
    /// clusters where every namespace belongs to one team.
    #[arg(long, env = "KOPPER_ALLOW_UNCONSENTED_DESTINATIONS")]
    pub allow_unconsented_destinations: bool,

    /// More namespaces to protect, besides kube-system, kube-public, kube-node-lease and
    /// kopper's own: no ConfigMapSync writes there, and a ReplicationRule only when its
    /// includeNamespaces names one exactly. Comma-separated.
    #[arg(long, env = "KOPPER_PROTECTED_NAMESPACES", value_delimiter = ',')]
    pub protected_namespaces: Vec<String>,

    /// kopper's own namespace, protected like the system ones (default: the pod's namespace
    /// in a cluster, else the lease namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,

    /// Kinds besides ConfigMap and Secret that ReplicationRules may copy, as apiVersion/Kind,
    /// comma-separated, e.g. `networking.k8s.io/v1/NetworkPolicy,v1/LimitRange`. kopper needs
    /// get, list, watch, create, update and delete on each (the chart's
    /// replication.extraKinds grants them). They are copied only from protected namespaces
    /// unless a rule sets allowUnprotectedSources. Blank elements are ignored. A kind the API server does not serve is not fatal:
    /// rules naming it wait for it (KindNotServed).
    #[arg(long, env = "KOPPER_REPLICATE_KINDS", value_delimiter = ',', value_parser = crate::kinds::parse_listed)]
    pub replicate_kinds: Vec<Option<crate::kinds::KindEntry>>,

    /// Base of the field managers kopper writes with: each controller writes as
    /// `<this>/<controller>` (e.g. `kopper/namespace-access`), so managedFields show which
    /// controller owns a field.
    #[arg(long, env = "KOPPER_FIELD_MANAGER", default_value = "kopper", value_parser = parse_field_manager)]
    pub field_manager: String,

    #[command(flatten)]
    pub s3: S3Args,
}

/// Settings of the Bucket controller's S3 and IAM provider.
#[derive(Clone, Debug, Args)]
pub struct S3Args {
    /// Names this cluster in derived bucket and user names and in tags, so that clusters
    /// sharing an account never take each other's buckets: lowercase letters, digits and
    /// hyphens, at most 20; one per cluster in an account. The sweep for credentials of
    /// deleted Buckets covers them only when it is set (not the default): with the default,
    /// two clusters in one account could not tell each other's credentials from orphans, and
    /// the sweep deletes only the users of grants gone from Buckets that exist here.
    #[arg(long, env = "KOPPER_CLUSTER_ID", default_value = crate::controllers::bucket::DEFAULT_CLUSTER_ID, value_parser = parse_cluster_id)]
    pub cluster_id: String,

    /// Region buckets are created in unless a Bucket names one. Setting it turns the S3
    /// provider on; without it, Buckets report ProviderNotConfigured.
    #[arg(long, env = "KOPPER_S3_REGION")]
    pub s3_region: Option<String>,

    /// S3 endpoint URL of an S3-compatible service (default: AWS). Also written into each
    /// Bucket's Secret as AWS_ENDPOINT_URL and S3_ENDPOINT.
    #[arg(long, env = "KOPPER_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// IAM endpoint URL (default: AWS, or the S3 endpoint when one is set).
    #[arg(long, env = "KOPPER_IAM_ENDPOINT")]
    pub iam_endpoint: Option<String>,

    /// Address buckets by path (`endpoint/bucket`) instead of by host name, as most
    /// S3-compatible services need.
    #[arg(long, env = "KOPPER_S3_FORCE_PATH_STYLE")]
    pub s3_force_path_style: bool,

    /// A Secret `namespace/name` holding kopper's own AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY (read at start-up). Default: the standard AWS chain
    /// (environment, profile, web identity for IRSA, container or instance metadata).
    #[arg(long, env = "KOPPER_S3_CREDENTIALS_SECRET", value_parser = parse_namespaced_name)]
    pub s3_credentials_secret: Option<(String, String)>,

    /// Object versions deleted per batch when emptying a bucket (default and most: 1000).
    /// Hidden: only tests lower it, to make a bucket slow to empty.
    #[arg(long, env = "KOPPER_S3_DELETE_BATCH", hide = true,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub s3_delete_batch: Option<u16>,

    /// The shortest time between two access keys for one Bucket: a rotation asked for sooner
    /// waits, and a key needed again sooner without being asked for (something keeps undoing
    /// kopper's work) is reported as CredentialsChurn instead of issued. Bounds the
    /// CreateAccessKey and DeleteAccessKey calls any Bucket can cost the shared account.
    #[arg(long, env = "KOPPER_BUCKET_KEY_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub bucket_key_interval: Duration,

    /// The shortest `spec.keyRotation.maxKeyAge` a Bucket may ask for; a shorter one is
    /// refused with InvalidKeyRotation. With a grace period of at most half the age, a Bucket
    /// gets at most one scheduled key per half of this.
    #[arg(long, env = "KOPPER_BUCKET_MIN_KEY_AGE", default_value = "1h", value_parser = parse_duration)]
    pub bucket_min_key_age: Duration,

    /// How often the leader deletes the IAM users, keys and policies of Buckets and
    /// BucketAccesses that no longer exist (a finalizer removed by hand), besides once at
    /// start. Each sweep lists the account's IAM users (one ListUsers call per 100; with the
    /// default cluster id only the grant users under `/kopper/<cluster>/grants/`), reads the
    /// tags of this cluster's (one ListUserTags each) and lists Buckets and BucketAccesses
    /// from the API server.
    #[arg(long, env = "KOPPER_ORPHAN_SWEEP_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub orphan_sweep_interval: Duration,

    /// ARN of the cluster's IAM OIDC provider (`arn:aws:iam::<account>:oidc-provider/<issuer>`),
    /// which turns on keyless access: a Bucket with `spec.access.mode: ServiceAccount` gets an
    /// IAM role that only its ServiceAccount can assume through this provider (IRSA). Without
    /// it such Buckets report KeylessNotConfigured and kopper watches no ServiceAccount.
    #[arg(long, env = "KOPPER_OIDC_PROVIDER_ARN", value_parser = parse_oidc_provider)]
    pub oidc_provider_arn: Option<crate::controllers::bucket::names::OidcProvider>,
}

impl S3Args {
    /// Refuses at start what the flags allow one by one but not together: keyless access with
    /// the default cluster id. The sweep for credentials of deleted Buckets leaves roles
    /// alone with the default id, so the role of a Bucket whose finalizer was removed by hand would live for
    /// ever, and a namespace re-created under the same name would inherit its trust.
    pub fn check(&self) -> Result<(), String> {
        if self.oidc_provider_arn.is_some()
            && self.cluster_id == crate::controllers::bucket::DEFAULT_CLUSTER_ID
        {
            return Err(format!(
                "--oidc-provider-arn (KOPPER_OIDC_PROVIDER_ARN, chart value bucket.oidcProviderArn) needs \
                 --cluster-id (KOPPER_CLUSTER_ID, chart value bucket.clusterId) set to a name of this \
                 cluster's own, not the default `{}`: with the default, kopper cannot sweep the roles of \
                 deleted Buckets. Choose an id no other cluster in the account uses, before the first Bucket",
                crate::controllers::bucket::DEFAULT_CLUSTER_ID
            ));
        }
        Ok(())
    }

    pub fn settings(&self) -> crate::controllers::bucket::BucketSettings {
        let provider = self.s3_region.as_ref().map(|region| crate::controllers::bucket::aws::AwsSettings {
            region: region.clone(),
            endpoint: self.s3_endpoint.clone(),
            iam_endpoint: self.iam_endpoint.clone(),
            force_path_style: self.s3_force_path_style,
            credentials: None,
            delete_batch: self.s3_delete_batch,
        });
        crate::controllers::bucket::BucketSettings {
            cluster_id: self.cluster_id.clone(),
            provider,
            credentials_secret: self.s3_credentials_secret.clone(),
            key_interval: self.bucket_key_interval,
            min_key_age: self.bucket_min_key_age,
            orphan_sweep_interval: self.orphan_sweep_interval,
            oidc: self.oidc_provider_arn.clone(),
            own_namespace: None,
        }
    }
}

fn parse_oidc_provider(text: &str) -> Result<crate::controllers::bucket::names::OidcProvider, String> {
    crate::controllers::bucket::names::OidcProvider::from_arn(text)
}

fn parse_cluster_id(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 20
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a cluster id: use 1 to 20 lowercase letters, digits and inner hyphens"))
    }
}

/// The levels tracing knows, for `--log-level`.
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// A level, or directives `target=level` (a bare word that is no level, like `verbose`, would
/// silently mean "everything from a module named verbose").
fn parse_log_filter(text: &str) -> Result<String, String> {
    let is_level = |level: &str| {
        LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) || level.parse::<u8>().is_ok()
    };
    // Split at the last `=`: a span filter (`kopper[reconcile{rule=x}]=debug`) holds others.
    let mut directives = text.split(',').map(str::trim).filter(|directive| !directive.is_empty());
    let problem = directives.find(|directive| match directive.rsplit_once('=') {
        None => !is_level(directive),
        Some((target, level)) => target.is_empty() || !is_level(level),
    });
    match problem {
        None if tracing_subscriber::EnvFilter::try_new(text).is_ok() => Ok(text.to_owned()),
        _ => Err(format!(
            "`{text}` is not a log filter: use a level ({}) or directives like `kopper=debug,kube=info`",
            LOG_LEVELS.join(", ")
        )),
    }
}

/// A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 letters, digits, `-`, `_` and `.`, alphanumeric at both ends.
fn parse_label_key(text: &str) -> Result<String, String> {
    let (prefix, name) = text.rsplit_once('/').map_or((None, text), |(prefix, name)| (Some(prefix), name));
    let prefix_ok = prefix.is_none_or(|prefix| {
        crate::controllers::namespace_access::names::check_dns_subdomain(prefix).is_ok()
    });
    let name_ok =
        !name.is_empty() && crate::controllers::namespace_access::names::check_label_value(name).is_ok();
    if prefix_ok && name_ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not a label key: use `name` or `prefix/name`, the name at most 63 letters, digits, \
             '-', '_' and '.', the prefix a DNS subdomain (e.g. `example.com/pod-name`)"
        ))
    }
}

/// An object name (a DNS subdomain): at most 253 lowercase letters, digits, `-` and `.`,
/// alphanumeric at both ends.
fn parse_object_name(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 253
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a Kubernetes name: use lowercase letters, digits, '-' and '.'"))
    }
}

/// A namespace name (a DNS label): at most 63 lowercase letters, digits and inner `-`.
fn parse_namespace(text: &str) -> Result<String, String> {
    let valid = text.len() <= 63 && !text.contains('.') && parse_object_name(text).is_ok();
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a namespace name: use at most 63 lowercase letters, digits and '-'"))
    }
}

/// A field manager base: at most 100 printable characters, so that `<base>/<controller>`
/// stays within the API server's 128.
fn parse_field_manager(text: &str) -> Result<String, String> {
    let valid = !text.is_empty() && text.len() <= 100 && text.chars().all(|c| c.is_ascii_graphic());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a field manager name: use 1 to 100 printable characters without spaces"))
    }
}

fn parse_namespaced_name(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{text}` is not `namespace/name`, e.g. `kopper-system/kopper-s3`")),
    }
}

impl RunArgs {
    /// kopper's own namespace: the flag, the pod's namespace, or the lease namespace.
    pub fn own_namespace(&self) -> Option<String> {
        self.namespace
            .clone()
            .or_else(crate::runtime::client::pod_namespace)
            .or_else(|| self.lease_namespace.clone())
    }

    /// The settings the controllers read, taken from the flags once at start-up.
    pub fn settings(&self) -> Settings {
        Settings {
            field_manager: self.field_manager.clone(),
            pod_label_annotation: self.pod_label_annotation.clone(),
            pod_name_label: self.pod_name_label.clone(),
            allow_cross_namespace_sources: self.allow_cross_namespace_sources,
            concurrency: self.concurrency,
            destinations: crate::tenancy::DestinationPolicy {
                protected: crate::tenancy::ProtectedNamespaces::new(
                    self.own_namespace().as_deref(),
                    &self.protected_namespaces,
                ),
                allow_unconsented: self.allow_unconsented_destinations,
            },
            replicate_kinds: crate::kinds::AllowedKinds::new(self.replicate_kinds.iter().flatten().cloned()),
        }
    }

    /// The settings only some controllers read, taken from the flags once at start-up.
    pub fn controller_settings(&self) -> crate::controllers::ControllerSettings {
        let mut buckets = self.s3.settings();
        // Where BucketClass credentials Secrets are read: kopper's own namespace, else that of
        // its own credentials Secret.
        buckets.own_namespace = self
            .own_namespace()
            .or_else(|| self.s3.s3_credentials_secret.as_ref().map(|(namespace, _)| namespace.clone()));
        crate::controllers::ControllerSettings { buckets }
    }

    /// The enabled controllers, each once, in a stable order.
    pub fn enabled_controllers(&self) -> Vec<ControllerName> {
        let mut names = self.controllers.clone();
        names.sort();
        names.dedup();
        names
    }
}

#[derive(Clone, Debug, Args)]
pub struct TelemetryArgs {
    /// Log line format.
    #[arg(long, env = "KOPPER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter: a level (`info`, `debug`) or per-module directives (`kopper=debug,kube=info`).
    #[arg(long, env = "KOPPER_LOG_LEVEL", default_value = "info", value_parser = parse_log_filter)]
    pub log_level: String,
}

#[derive(Clone, Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<plural>.<group>.yaml` file per CRD into this directory instead of printing
    /// them (how `config/crd/` is regenerated).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Print a Markdown reference of every field instead (how `docs/crd-reference.md` is
    /// regenerated).
    #[arg(long, conflicts_with = "out_dir")]
    pub reference: bool,
}

/// How `kopper plan` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    /// One line per change, for people.
    Text,
    /// One JSON document (rules, their changes and a summary), for scripts.
    Json,
}

#[derive(Clone, Debug, Args)]
#[command(after_help = "Exit status: 0 when every rule would get what it asks for, 3 when the plan finds \
conflicts or refused rules, 1 when the plan cannot be made (the cluster cannot be read, a file is \
invalid), 2 for wrong flags.")]
pub struct PlanArgs {
    /// Path to a kubeconfig; defaults to KUBECONFIG, then ~/.kube/config, then in-cluster.
    #[arg(long, env = "KOPPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "KOPPER_CONTEXT")]
    pub context: Option<String>,
    /// YAML files of ConfigMapSync, ReplicationRule and NamespaceAccess objects to plan as if
    /// applied (`-` reads standard input). A rule of the same kind and name in the cluster is
    /// replaced by the file's; other kinds of documents are skipped. Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Plan only the rules in the files, as if the cluster held no other rule.
    #[arg(long, requires = "files")]
    pub files_only: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = PlanOutput::Text)]
    pub output: PlanOutput,
    /// Plan as if kopper ran with --allow-cross-namespace-sources.
    #[arg(long, env = "KOPPER_ALLOW_CROSS_NAMESPACE_SOURCES")]
    pub allow_cross_namespace_sources: bool,
    /// Plan as if kopper ran with --allow-unconsented-destinations.
    #[arg(long, env = "KOPPER_ALLOW_UNCONSENTED_DESTINATIONS")]
    pub allow_unconsented_destinations: bool,
    /// Plan as if kopper ran with these --protected-namespaces. Comma-separated.
    #[arg(long, env = "KOPPER_PROTECTED_NAMESPACES", value_delimiter = ',')]
    pub protected_namespaces: Vec<String>,
    /// The namespace kopper runs in, protected like the system ones (`kopper run --namespace`).
    #[arg(long, value_parser = parse_namespace)]
    pub kopper_namespace: Option<String>,
    /// Plan as if kopper ran with these --replicate-kinds (apiVersion/Kind, comma-separated).
    #[arg(long, env = "KOPPER_REPLICATE_KINDS", value_delimiter = ',', value_parser = crate::kinds::parse_listed)]
    pub replicate_kinds: Vec<Option<crate::kinds::KindEntry>>,
}

impl PlanArgs {
    /// The settings the controllers would run with.
    pub fn settings(&self) -> Settings {
        Settings {
            allow_cross_namespace_sources: self.allow_cross_namespace_sources,
            destinations: crate::tenancy::DestinationPolicy {
                protected: crate::tenancy::ProtectedNamespaces::new(
                    self.kopper_namespace.as_deref(),
                    &self.protected_namespaces,
                ),
                allow_unconsented: self.allow_unconsented_destinations,
            },
            replicate_kinds: crate::kinds::AllowedKinds::new(self.replicate_kinds.iter().flatten().cloned()),
            ..Settings::default()
        }
    }
}

#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Directory whose YAML files are applied once the controllers run (default: the samples
    /// built into kopper, the same as config/samples/).
    #[arg(long, env = "KOPPER_DEMO_SAMPLES")]
    pub samples: Option<PathBuf>,

    /// Where to write the kubeconfig of the embedded API server, kept after the demo
    /// (default: a temporary file, removed when the demo stops).
    #[arg(long, env = "KOPPER_DEMO_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,

    /// Address of the admin server (/metrics, /healthz, /readyz) (default: a free port on
    /// 127.0.0.1).
    #[arg(long, env = "KOPPER_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,

    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// An S3 and IAM endpoint for the Bucket sample, e.g. moto: `pip install 'moto[server]'`,
    /// `moto_server -p 5000`, then `kopper demo --s3-region us-east-1 --s3-endpoint
    /// http://127.0.0.1:5000 --s3-force-path-style` with AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY set (moto takes any).
    #[command(flatten)]
    pub s3: S3Args,
}

/// A flag's duration: `500ms`, `15s`, `1h30m` as in a spec (see [`duration::parse`]), or a
/// bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    match text.parse::<u32>() {
        Ok(seconds) => Ok(Duration::from_secs(seconds.into())),
        Err(_) => duration::parse(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("kopper").chain(args.iter().copied())).map(Cli::into_command)
    }

    #[test]
    fn flags_a_running_kopper_would_trip_on_are_refused_at_start_naming_the_flag() {
        for (flag, value) in [
            ("--log-level", "verbose"),
            ("--log-level", "kopper=loud"),
            ("--concurrency", "0"),
            ("--lease-name", ""),
            ("--lease-namespace", "Not_A_Namespace"),
            ("--pod-name-label", "has space"),
            ("--pod-name-label", "example.com/"),
            ("--pod-name-label", "a..b/x"),
            ("--pod-label-annotation", "-leading"),
        ] {
            let argument = format!("{flag}={value}");
            let error =
                parse(&["run", &argument]).err().unwrap_or_else(|| panic!("{flag} {value:?} accepted"));
            let message = error.to_string();
            assert!(message.contains(flag), "{flag} {value:?}: {message}");
        }
        for (flag, value) in [
            ("--log-level", "debug"),
            ("--log-level", "kopper=debug,kube=info"),
            ("--log-level", "kopper[reconcile{rule=x}]=debug"),
            ("--log-level", "info,"),
            ("--pod-name-label", "example.com/pod-name"),
            ("--pod-name-label", "pod_name"),
            ("--lease-namespace", "kopper-system"),
        ] {
            assert!(parse(&["run", flag, value]).is_ok(), "{flag} {value:?} refused");
        }
    }

    #[test]
    fn keyless_access_with_the_default_cluster_id_is_refused_naming_both_flags() {
        let oidc = "arn:aws:iam::123456789012:oidc-provider/oidc.example.test/id/X";
        let Ok(Command::Run(run)) = parse(&["run", "--oidc-provider-arn", oidc]) else {
            panic!("expected run")
        };
        let message = run.s3.check().unwrap_err();
        for named in ["--oidc-provider-arn", "KOPPER_OIDC_PROVIDER_ARN", "--cluster-id", "KOPPER_CLUSTER_ID"]
        {
            assert!(message.contains(named), "{named}: {message}");
        }
        let Ok(Command::Run(run)) = parse(&["run", "--oidc-provider-arn", oidc, "--cluster-id", "prod"])
        else {
            panic!("expected run")
        };
        assert_eq!(run.s3.check(), Ok(()));
        let Ok(Command::Run(run)) = parse(&["run"]) else { panic!("expected run") };
        assert_eq!(run.s3.check(), Ok(()), "mode Key alone keeps the default id");
    }

    #[test]
    fn help_and_sample_names_use_words_a_user_knows() {
        let mut command = <Cli as clap::CommandFactory>::command();
        command.build();
        let mut help = command.render_long_help().to_string();
        for sub in command.get_subcommands_mut() {
            help.push_str(&sub.render_long_help().to_string());
        }
        assert!(!help.to_lowercase().contains("seed"), "help speaks of seeds:\n{help}");
        for (name, _) in crate::samples::BUILT_IN {
            assert!(!name.contains("seed"), "sample {name} is named after a seed");
        }
    }

    #[test]
    fn replicated_kinds_are_a_comma_list_deduplicated_and_a_bad_entry_is_refused_naming_the_flag() {
        let Ok(Command::Run(run)) = parse(&[]) else { panic!("expected run") };
        assert!(run.settings().replicate_kinds.is_empty(), "none by default");
        let list = "networking.k8s.io/v1/NetworkPolicy,v1/LimitRange,v1/LimitRange,example.com/v1/Widget";
        let Ok(Command::Run(run)) = parse(&["run", "--replicate-kinds", list]) else {
            panic!("expected run")
        };
        let kinds = run.settings().replicate_kinds;
        assert_eq!(
            format!("{kinds:?}"),
            r#"["v1/LimitRange", "example.com/v1/Widget", "networking.k8s.io/v1/NetworkPolicy"]"#
        );
        for blank in ["", "v1/LimitRange,", ",v1/LimitRange, ,"] {
            let Ok(Command::Run(run)) = parse(&["run", "--replicate-kinds", blank]) else {
                panic!("blank elements of {blank:?} are ignored")
            };
            assert!(run.settings().replicate_kinds.find("v1", "LimitRange").is_some() || blank.is_empty());
        }
        for bad in ["NetworkPolicy", "kopper.dev/v1alpha1/ReplicationRule", "v1/LimitRange,apps/Deployment"] {
            let message = parse(&["run", "--replicate-kinds", bad]).err().unwrap().to_string();
            assert!(
                message.contains("--replicate-kinds") && message.contains("KOPPER_REPLICATE_KINDS"),
                "{message}"
            );
        }
    }

    #[test]
    fn no_subcommand_means_run_with_every_controller() {
        let Ok(Command::Run(run)) = parse(&[]) else { panic!("expected run") };
        assert_eq!(run.enabled_controllers(), ControllerName::ALL.to_vec());
        assert_eq!(run.admin_addr.to_string(), "0.0.0.0:8080");
    }

    #[test]
    fn top_level_flags_apply_to_the_default_run() {
        let Ok(Command::Run(run)) = parse(&["--controllers", "pod-labeler", "--leader-elect", "false"])
        else {
            panic!("expected run")
        };
        assert_eq!(run.controllers, vec![ControllerName::PodLabeler]);
        assert_eq!(run.leader_elect, LeaderElect::False);
    }

    #[test]
    fn a_subcommand_flag_before_the_subcommand_is_refused_with_where_it_goes() {
        let error = parse(&["--kubeconfig", "x", "plan"]).map(|_| ()).map_err(flag_order_tip).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("the subcommand 'plan' cannot be used with '--kubeconfig"), "{message}");
        assert!(
            message.contains(
                "tip: a subcommand's flags go after its name, e.g. `kopper plan --kubeconfig <FILE>`"
            ),
            "{message}"
        );
        let Ok(Command::Plan(plan)) = parse(&["plan", "--kubeconfig", "x"]) else { panic!("expected plan") };
        assert_eq!(plan.kubeconfig, Some(PathBuf::from("x")));
        let other = parse(&["plan", "--output", "yaml"]).map(|_| ()).map_err(flag_order_tip).unwrap_err();
        assert!(!other.to_string().contains("tip: a subcommand's flags"), "only on flag order: {other}");
    }

    #[test]
    fn controllers_are_a_comma_list() {
        let Ok(Command::Run(run)) = parse(&["run", "--controllers", "pod-labeler,namespace-access"]) else {
            panic!("expected run")
        };
        assert_eq!(
            run.enabled_controllers(),
            vec![ControllerName::NamespaceAccess, ControllerName::PodLabeler]
        );
    }

    #[test]
    fn unknown_controller_name_is_refused_with_the_valid_names() {
        let error = parse(&["run", "--controllers", "pod-labeller"]).err().map(|e| e.to_string());
        let message = error.unwrap_or_default();
        assert!(message.contains("pod-labeller"), "{message}");
        assert!(message.contains("pod-labeler"), "{message}");
    }

    #[test]
    fn durations_accept_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
