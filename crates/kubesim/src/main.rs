//! `kubesim serve`: an in-memory Kubernetes API server on loopback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
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
    /// Changes kept for watches to resume from; older resource versions get 410 Gone.
    #[arg(long, env = "KUBESIM_WATCH_HISTORY", default_value_t = 100_000)]
    watch_history: usize,
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
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(&args.log)).init();
    let config = Config {
        addr: SocketAddr::new(args.bind, args.port),
        authorization: match args.authorization {
            AuthzMode::AlwaysAllow => Authorization::AlwaysAllow,
            AuthzMode::Rbac => Authorization::Rbac,
        },
        watch_history: args.watch_history,
        bookmark_interval: Duration::from_secs(1),
        ..Config::default()
    };
    let server = Server::start(config).await?;
    println!("kubesim serving at {}", server.url());
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path)?;
        println!("kubeconfig written to {}", path.display());
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
