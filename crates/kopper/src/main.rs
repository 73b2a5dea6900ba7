use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use kopper::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let command = Cli::parse().into_command();
    match kopper::execute(command).await {
        Ok(code) => code,
        Err(error) => {
            // Not `eprintln!`: with stderr closed it would panic instead of exiting.
            let _ = writeln!(std::io::stderr(), "kopper: {error:#}");
            ExitCode::FAILURE
        }
    }
}
