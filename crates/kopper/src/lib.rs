//! kopper: one operator binary, several controllers for multi-tenant clusters.

pub mod cli;
pub mod controllers;
pub mod crd_reference;
pub mod crds;
pub mod demo;
pub mod operator;
pub mod patterns;
pub mod runtime;
pub mod samples;
pub mod tenancy;

pub use operator::run;

use anyhow::Context as _;
use cli::Command;

/// Runs one `kopper` subcommand; `main` only parses the command line and reports errors.
pub async fn execute(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => {
            runtime::telemetry::init(&args.telemetry)?;
            let signal =
                runtime::shutdown::termination_signal().context("cannot install SIGTERM/SIGINT handlers")?;
            run(args, signal).await
        }
        Command::Crds(args) if args.reference => {
            print!("{}", crd_reference::render(&crds::all()));
            Ok(())
        }
        Command::Crds(args) => print_crds(args.out_dir.as_deref()),
        Command::Plan(args) => plan(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Completions(args) => {
            args.write(&mut std::io::stdout().lock());
            Ok(())
        }
    }
}

/// `kopper plan`: the replication engine's decision against the live cluster, printed.
async fn plan(args: cli::PlanArgs) -> anyhow::Result<()> {
    let client = runtime::client::connect(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        None,
        runtime::fence::WriteFence::open(),
    )
    .await?;
    let settings = runtime::Settings {
        allow_cross_namespace_sources: args.allow_cross_namespace_sources,
        field_manager: args.field_manager,
        ..runtime::Settings::default()
    };
    print!("{}", controllers::replication::plan(&client, &settings).await?);
    Ok(())
}

fn print_crds(out_dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let all = crds::all();
    match out_dir {
        Some(dir) => crds::write_dir(dir, &all),
        None => {
            print!("{}", crds::to_yaml(&all)?);
            Ok(())
        }
    }
}
