//! `kopper run`: connect, serve the admin endpoints, take the lease, run the controllers,
//! and shut down gracefully.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::cli::{LeaderElect, RunArgs, WaitForApiServer};
use crate::controllers;
use crate::runtime::fence::WriteFence;
use crate::runtime::leader::{self, LeaderError, Leadership, LeaseConfig};
use crate::runtime::readiness::Readiness;
use crate::runtime::{Context, Metrics, Shutdown, admin, client};

/// How long the admin server may take to close its connections at shutdown.
const ADMIN_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What `/readyz` waits for, next to the controllers' caches, until kopper has reached the
/// API server.
const API_SERVER: &str = "api-server";

/// The longest wait between two tries to reach the API server at start-up.
const CONNECT_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the operator until `shutdown` resolves, then stops taking new work, lets in-flight
/// reconciles finish within `--shutdown-grace-period`, releases the lease and returns `Ok`.
/// Returns an error when the cluster cannot be reached (unless told to wait for it), the
/// admin address cannot be bound, or leadership is lost (a replica that lost its lease must
/// stop at once).
pub async fn run(args: RunArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    args.s3.check().map_err(anyhow::Error::msg)?;
    let lease = lease_config(&args)?;
    let metrics = Arc::new(Metrics::new(controllers::register_metrics));
    let fence = if lease.is_some() { WriteFence::closed() } else { WriteFence::open() };
    // The admin server comes first, so that liveness holds while kopper waits for the API
    // server, and readiness says what it waits for.
    let listener = TcpListener::bind(args.admin_addr).await.with_context(|| {
        format!("cannot listen on --admin-addr {} (is the port in use?)", args.admin_addr)
    })?;
    let readiness = Readiness::default();
    readiness.register(API_SERVER);
    let enabled = args.enabled_controllers();
    for name in &enabled {
        readiness.register(name.as_str());
    }
    let admin_stop = Shutdown::new();
    let admin = tokio::spawn(admin::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
        args.api_unreachable_threshold,
        admin_stop.wait(),
    ));
    let stop = Shutdown::new();
    let trigger = stop.clone();
    let forward_shutdown = tokio::spawn(async move {
        shutdown.await;
        info!("shutting down: no new reconciles; waiting for in-flight ones");
        trigger.trigger();
    });

    let result = match connect(&args, &metrics, &fence, &stop).await {
        Ok(Some(client)) => {
            readiness.mark_synced(API_SERVER);
            let mut ctx = Context::new(client.clone(), metrics, args.settings()).with_fence(fence.clone());
            ctx.readiness = readiness;
            let ctx = Arc::new(ctx);
            let probe = tokio::spawn(admin::probe_api_server(
                client,
                ctx.metrics.clone(),
                admin::probe_interval(args.api_unreachable_threshold),
                admin_stop.wait(),
            ));
            let result =
                run_controllers(&ctx, &args, &enabled, lease.map(|config| (config, fence)), &stop).await;
            probe.abort();
            result
        }
        Ok(None) => Ok(()),
        Err(error) => Err(error.into()),
    };
    forward_shutdown.abort();
    stop_admin(admin, &admin_stop).await;
    result
}

/// Connects to the API server. When `--wait-for-api-server` says so (in a pod, by default),
/// an API server that cannot be reached is waited for, trying again every few seconds
/// until `stop`: after an outage longer than the lease, a replica restarted by its pod then
/// comes up with the API server instead of crash-looping behind it. Elsewhere (someone at a
/// terminal) it is an error at once. `None`: stopped while waiting.
async fn connect(
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    fence: &Arc<WriteFence>,
    stop: &Shutdown,
) -> Result<Option<kube::Client>, client::ConnectError> {
    let wait = match args.wait_for_api_server {
        WaitForApiServer::True => true,
        WaitForApiServer::False => false,
        WaitForApiServer::Auto => client::running_in_cluster(),
    };
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        let kubeconfig = args.kubeconfig.as_deref();
        let connecting =
            client::connect(kubeconfig, args.context.as_deref(), Some(metrics.clone()), fence.clone());
        let attempt = tokio::select! {
            attempt = connecting => attempt,
            () = stop.wait() => return Ok(None),
        };
        match attempt {
            Ok(client) => return Ok(Some(client)),
            Err(error) if wait && error.is_unreachable() => {
                warn!("{error}; trying again in {}s", delay.as_secs());
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.wait() => return Ok(None),
                }
                delay = (delay * 2).min(CONNECT_RETRY_MAX);
            }
            Err(error) => return Err(error),
        }
    }
}

/// Stops the admin server, giving open connections (a Prometheus scrape) a moment to end.
async fn stop_admin(admin: tokio::task::JoinHandle<std::io::Result<()>>, admin_stop: &Shutdown) {
    admin_stop.trigger();
    let abort = admin.abort_handle();
    match tokio::time::timeout(ADMIN_STOP_TIMEOUT, admin).await {
        Ok(Ok(Err(error))) => warn!("admin server failed: {error}"),
        Ok(_) => {}
        Err(_elapsed) => abort.abort(),
    }
}

async fn run_controllers(
    ctx: &Arc<Context>,
    args: &RunArgs,
    enabled: &[crate::cli::ControllerName],
    lease: Option<(LeaseConfig, Arc<WriteFence>)>,
    stop: &Shutdown,
) -> anyhow::Result<()> {
    let leadership = match lease {
        None => None,
        Some((config, fence)) => {
            ctx.readiness.set_standby(true);
            let Some(leadership) = leader::acquire(ctx.client.clone(), config, fence, stop).await else {
                return Ok(());
            };
            ctx.readiness.set_standby(false);
            Some(leadership)
        }
    };
    // Without leader election this process does the work, so it leads.
    ctx.metrics.set_leader(true);

    let mut running = JoinSet::new();
    for name in controllers::units(enabled) {
        running.spawn(controllers::run(name, ctx.clone(), args.controller_settings(), stop.wait()));
    }
    info!(controllers = ?enabled.iter().map(|name| name.as_str()).collect::<Vec<_>>(), "controllers started");

    if let Err(error) = drain_on_shutdown(&mut running, leadership.as_ref(), args, stop).await {
        running.abort_all();
        if let Some(leadership) = leadership {
            leadership.release().await;
        }
        ctx.metrics.set_leader(false);
        return Err(error);
    }
    running.abort_all();
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    ctx.metrics.set_leader(false);
    info!("stopped");
    Ok(())
}

/// Resolves when leadership is lost; never, when leader election is off.
async fn keep(leadership: Option<&Leadership>) -> LeaderError {
    match leadership {
        Some(leadership) => leadership.keep().await,
        None => std::future::pending().await,
    }
}

/// Waits for `stop`, then for in-flight reconciles (at most the grace period). Fails as soon
/// as leadership is lost or a controller fails; leadership is still renewed while reconciles
/// finish, so no other replica starts on the same objects meanwhile.
async fn drain_on_shutdown(
    running: &mut JoinSet<anyhow::Result<()>>,
    leadership: Option<&Leadership>,
    args: &RunArgs,
    stop: &Shutdown,
) -> anyhow::Result<()> {
    let mut lost = pin!(keep(leadership));
    tokio::select! {
        error = &mut lost => return Err(error.into()),
        error = first_failure(running) => return Err(error),
        () = stop.wait() => {}
    }
    let drained = tokio::time::timeout(args.shutdown_grace_period, drain(running));
    tokio::select! {
        error = &mut lost => Err(error.into()),
        finished = drained => {
            if finished.is_err() {
                warn!(grace = ?args.shutdown_grace_period, "reconciles still running after the grace period; stopping them");
            }
            Ok(())
        }
    }
}

/// Resolves with the first controller failure; never, if none fails.
async fn first_failure(running: &mut JoinSet<anyhow::Result<()>>) -> anyhow::Error {
    loop {
        match running.join_next().await {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(error))) => return error.context("a controller failed"),
            Some(Err(join_error)) => return anyhow::Error::new(join_error).context("a controller panicked"),
            None => return std::future::pending().await,
        }
    }
}

/// Waits for every controller to stop; failures during shutdown are logged, not returned,
/// since the operator is stopping anyway.
async fn drain(running: &mut JoinSet<anyhow::Result<()>>) {
    while let Some(result) = running.join_next().await {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!("a controller failed while stopping: {error:#}"),
            Err(join_error) => warn!("a controller panicked while stopping: {join_error}"),
        }
    }
}

/// The lease to take, or `None` when leader election is off. `auto` means on in a pod.
fn lease_config(args: &RunArgs) -> anyhow::Result<Option<LeaseConfig>> {
    let enabled = match args.leader_elect {
        LeaderElect::True => true,
        LeaderElect::False => false,
        LeaderElect::Auto => client::running_in_cluster(),
    };
    if !enabled {
        return Ok(None);
    }
    let namespace =
        args.lease_namespace.clone().or_else(client::pod_namespace).unwrap_or_else(|| "default".to_owned());
    let config = LeaseConfig {
        name: args.lease_name.clone(),
        namespace,
        identity: leader::default_identity(),
        duration: args.lease_duration,
        renew_interval: args.renew_interval,
    };
    config.validate()?;
    Ok(Some(config))
}
