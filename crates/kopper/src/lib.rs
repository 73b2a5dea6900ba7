//! kopper: one operator binary, several controllers for multi-tenant clusters.

pub mod cli;
pub mod controllers;
pub mod crd_reference;
pub mod crds;
pub mod demo;
pub mod kinds;
pub mod operator;
pub mod patterns;
pub mod plan;
pub mod runtime;
pub mod samples;
pub mod tenancy;

pub use operator::run;

use std::process::ExitCode;

use anyhow::Context as _;
use cli::Command;

/// Runs one `kopper` subcommand; `main` only parses the command line and reports errors.
pub async fn execute(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => {
            runtime::telemetry::init(&args.telemetry)?;
            let signal =
                runtime::shutdown::termination_signal().context("cannot install SIGTERM/SIGINT handlers")?;
            run(args, signal).await?;
        }
        Command::Crds(args) if args.reference => print_quiet(&crd_reference::render(&crds::all())),
        Command::Crds(args) => print_crds(args.out_dir.as_deref())?,
        Command::Plan(args) => return plan::run(args).await,
        Command::Demo(args) => demo::run(args).await?,
        Command::Completions(args) => {
            let mut script = Vec::new();
            args.write(&mut script);
            print_quiet(&String::from_utf8_lossy(&script));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints to stdout; a reader that went away (`kopper crds | head`) is not an error, and
/// never a panic as with `print!`. Any other failure (a full disk) is said on stderr.
pub fn print_quiet(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(std::io::stderr(), "kopper: cannot write the output: {error}");
        }
        _ => {}
    }
}

fn print_crds(out_dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let all = crds::all();
    match out_dir {
        Some(dir) => crds::write_dir(dir, &all),
        None => {
            print_quiet(&crds::to_yaml(&all)?);
            Ok(())
        }
    }
}
