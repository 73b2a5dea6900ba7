//! `kubesim serve`: an in-memory Kubernetes API server on loopback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kubesim::identity::{self, Identity};
use kubesim::{Authorization, Config, Server};

#[derive(Parser)]
#[command(name = "kubesim", version, about = "An embedded Kubernetes API server for tests and demos")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Kubernetes API until SIGINT or SIGTERM.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Port to listen on (127.0.0.1); 0 picks a free one.
    #[arg(long, env = "KUBESIM_PORT", default_value_t = 0)]
    port: u16,
    /// Address to bind; loopback unless you mean to expose an unauthenticated API server.
    #[arg(long, env = "KUBESIM_BIND", default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// Write a kubeconfig for the admin user here (kubectl and kube-rs read it).
    #[arg(long, env = "KUBESIM_KUBECONFIG_OUT")]
    kubeconfig_out: Option<PathBuf>,
    /// How requests are authorized: allow everything, or by the cluster's RBAC objects for the
    /// bearer token's user.
    #[arg(long, env = "KUBESIM_AUTHORIZATION", value_enum, default_value_t = AuthzMode::AlwaysAllow)]
    authorization: AuthzMode,
    /// Changes kept per resource type for watches to resume from; older resource versions
    /// get 410 Gone.
    #[arg(long, env = "KUBESIM_WATCH_HISTORY", default_value_t = 100_000)]
    watch_history: usize,
    /// How long a terminating namespace keeps its contents before they are deleted, as a
    /// real cluster's namespace controller takes a while (`500ms`, `5s`, `1m`; 0: at once).
    #[arg(long, env = "KUBESIM_NAMESPACE_DELETION_DELAY", default_value = "0", value_parser = parse_duration)]
    namespace_deletion_delay: Duration,
    /// Serve HTTPS with a CA and certificate generated at start (`--tls`, `--tls=false`).
    /// On by default with `--authorization rbac`, because kubectl sends bearer tokens only
    /// over TLS; off by default otherwise.
    #[arg(long, env = "KUBESIM_TLS", num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    tls: Option<bool>,
    /// Write a kubeconfig for this user into --kubeconfig-dir (`alice`, or `bob:devs,ops` for
    /// a user in groups); repeat for more users.
    #[arg(long = "user", value_name = "NAME[:GROUP,...]", requires = "kubeconfig_dir",
          value_parser = Identity::parse_user)]
    users: Vec<Identity>,
    /// Write a kubeconfig for this ServiceAccount into --kubeconfig-dir; repeat for more.
    #[arg(long = "service-account", value_name = "NAMESPACE/NAME", requires = "kubeconfig_dir",
          value_parser = Identity::parse_service_account)]
    service_accounts: Vec<Identity>,
    /// Write admin.kubeconfig, plus <user>.kubeconfig and <namespace>-<name>.kubeconfig for
    /// each --user and --service-account, into this directory.
    #[arg(long, env = "KUBESIM_KUBECONFIG_DIR")]
    kubeconfig_dir: Option<PathBuf>,
    /// Keep the objects and resource versions in this directory across restarts (written every
    /// second while they change and on SIGINT/SIGTERM); without it, everything is in memory.
    #[arg(long, env = "KUBESIM_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Log filter, e.g. `info` or `kubesim=debug`.
    #[arg(long, env = "KUBESIM_LOG", default_value = "info")]
    log: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum AuthzMode {
    AlwaysAllow,
    Rbac,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::Serve(args) = Cli::parse().command;
    let identities: Vec<Identity> = args.users.iter().chain(&args.service_accounts).cloned().collect();
    if let Err(problem) = identity::check_distinct(&identities) {
        clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            format!("--user/--service-account: {problem}\n"),
        )
        .exit();
    }
    let rbac = matches!(args.authorization, AuthzMode::Rbac);
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(&args.log)).init();
    let config = Config {
        addr: SocketAddr::new(args.bind, args.port),
        authorization: match args.authorization {
            AuthzMode::AlwaysAllow => Authorization::AlwaysAllow,
            AuthzMode::Rbac => Authorization::Rbac,
        },
        watch_history: args.watch_history,
        bookmark_interval: Duration::from_secs(1),
        namespace_deletion_delay: args.namespace_deletion_delay,
        tls: args.tls.unwrap_or(rbac),
        data_dir: args.data_dir,
        ..Config::default()
    };
    let server = Server::start(config).await?;
    println!("kubesim serving at {}", server.url());
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path)?;
        println!("kubeconfig written to {}", path.display());
    }
    if let Some(dir) = &args.kubeconfig_dir {
        for path in identity::write_kubeconfigs(&server, dir, &identities)? {
            println!("kubeconfig written to {}", path.display());
        }
    }
    if rbac && args.tls == Some(false) {
        println!("warning: kubectl sends bearer tokens only over TLS; with --tls=false its requests get 401");
    }
    shutdown_signal().await?;
    println!("kubesim stopping");
    server.shutdown().await;
    Ok(())
}

async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

/// A duration as `500ms`, `5s`, `2m`, or a number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 =
        number.parse().map_err(|_| format!("`{text}` is not a duration such as 500ms, 5s or 1m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("`{text}`: the unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}
