use std::process::ExitCode;

use clap::Parser;
use kopper::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let command = Cli::parse().into_command();
    match kopper::execute(command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kopper: {error:#}");
            ExitCode::FAILURE
        }
    }
}
