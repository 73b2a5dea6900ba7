//! Logging: human-readable or JSON lines, filtered by `--log-level`.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, TelemetryArgs};

#[derive(Debug, thiserror::Error)]
#[error("invalid --log-level `{level}`: {cause} (use e.g. `info`, `debug` or `kopper=debug,kube=info`)")]
pub struct TelemetryError {
    level: String,
    cause: tracing_subscriber::filter::ParseError,
}

/// Installs the global subscriber. A second call (several operators in one test process)
/// keeps the first subscriber and is not an error.
pub fn init(args: &TelemetryArgs) -> Result<(), TelemetryError> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|cause| TelemetryError { level: args.log_level.clone(), cause })?;
    // stderr, so that output meant for people or pipes (`kopper crds`, the demo's summary)
    // stays clean on stdout.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _already_installed = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    Ok(())
}
