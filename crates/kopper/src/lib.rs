//! kopper: one operator binary, several controllers for multi-tenant clusters.

pub mod cli;
pub mod controllers;
pub mod crds;
pub mod demo;
pub mod operator;
pub mod runtime;

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
        Command::Crds(args) => print_crds(args.out_dir.as_deref()),
        Command::Demo(args) => demo::run(args).await,
    }
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
