//! Logging: human-readable or JSON lines, filtered by `--log-level`.

use tracing::subscriber::Interest;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{DynFilterFn, FilterFn, filter_fn};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::cli::{LogFormat, TelemetryArgs};
use crate::runtime::client::PROBE_SPAN;

/// Where kube's client logs, at ERROR, every request that cannot connect or is answered 5xx
/// ("failed with error client error (Connect)"), from the `TraceLayer` it builds into each client.
const KUBE_REQUEST_FAILURE_TARGET: &str = "kube_client::client::builder";
/// Where kube's client logs, at WARN, the whole text of a response it could not decode
/// (a Secret's content, say), and watch polls that timed out or ended, which the watchers
/// resume and kopper's own logs and metrics report.
const KUBE_RESPONSE_TEXT_TARGET: &str = "kube_client::client";

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
    // stays clean on stdout. A log line that cannot be written (stderr closed, its reader
    // gone) is dropped: the subscriber's own report of that failure would go to the same
    // closed stderr through `eprintln!`, which panics, in whichever task happened to log.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .with_ansi(colours_wanted());
    let _already_installed = match args.log_format {
        LogFormat::Text => {
            builder.finish().with(without_probe_failure_log()).with(without_response_texts()).try_init()
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .finish()
            .with(without_probe_failure_log())
            .with(without_response_texts())
            .try_init(),
    };
    Ok(())
}

/// Colours only for a person at a terminal: never into a pipe or file (where escape codes are
/// noise), and never when `NO_COLOR` is set (<https://no-color.org>).
fn colours_wanted() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// Drops kube's ERROR log of a failed request while kopper checks the API server at start-up.
/// If that check fails, kopper exits with its own one-line error naming the server and the fix
/// (`kopper demo`); kube's line before it would report the same failure a second time, with
/// neither. The same log during normal operation (a watch or write failing) is kept.
fn without_probe_failure_log<S>() -> DynFilterFn<
    S,
    impl Fn(&Metadata<'_>, &Context<'_, S>) -> bool,
    impl Fn(&'static Metadata<'static>) -> Interest,
>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    DynFilterFn::new(|metadata: &Metadata<'_>, cx: &Context<'_, S>| {
        !(is_kube_request_failure(metadata) && in_probe(cx))
    })
    // Every other callsite is decided once, so the span lookup costs nothing elsewhere.
    .with_callsite_filter(|metadata| {
        if is_kube_request_failure(metadata) { Interest::sometimes() } else { Interest::always() }
    })
}

/// Drops kube's WARN lines that can hold a response's text, whatever the log level: kopper
/// never logs Secret content, and the error that goes with such a line reaches kopper,
/// which reports it (a decode error names a line and column, not content).
fn without_response_texts() -> FilterFn<impl Fn(&Metadata<'_>) -> bool> {
    filter_fn(|metadata| {
        !(metadata.is_event()
            && *metadata.level() == Level::WARN
            && metadata.target() == KUBE_RESPONSE_TEXT_TARGET)
    })
}

fn is_kube_request_failure(metadata: &Metadata<'_>) -> bool {
    metadata.is_event()
        && *metadata.level() == Level::ERROR
        && metadata.target() == KUBE_REQUEST_FAILURE_TARGET
}

fn in_probe<S>(cx: &Context<'_, S>) -> bool
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    cx.lookup_current().is_some_and(|span| span.scope().any(|span| span.name() == PROBE_SPAN))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// Collects what the subscriber writes, for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Self;

        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    fn logged_by(emit: impl FnOnce()) -> String {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("info"))
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish()
            .with(without_probe_failure_log())
            .with(without_response_texts());
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn kube_request_failure_is_dropped_only_inside_the_start_up_probe() {
        let logged = logged_by(|| {
            tracing::error_span!(PROBE_SPAN).in_scope(|| {
                tracing::error!(target: KUBE_REQUEST_FAILURE_TARGET, "probe failed");
                tracing::error!("kopper's own error in the probe");
            });
            tracing::error!(target: KUBE_REQUEST_FAILURE_TARGET, "watch failed");
        });

        assert!(!logged.contains("probe failed"), "{logged}");
        assert!(logged.contains("kopper's own error in the probe"), "{logged}");
        assert!(logged.contains("watch failed"), "{logged}");
    }

    #[test]
    fn kube_warnings_that_can_hold_a_response_text_are_never_logged() {
        let logged = logged_by(|| {
            let body = r#"{"kind":"Secret","data":{"password":"c2VjcmV0"}}"#;
            tracing::warn!(target: KUBE_RESPONSE_TEXT_TARGET, "{body}, Error(\"missing field\")");
            tracing::info!(target: KUBE_RESPONSE_TEXT_TARGET, "kube's other lines");
        });

        assert!(!logged.contains("c2VjcmV0"), "{logged}");
        assert!(logged.contains("kube's other lines"), "{logged}");
    }

    #[test]
    fn other_kube_client_logs_still_follow_the_log_level() {
        let logged = logged_by(|| {
            tracing::debug!(target: KUBE_REQUEST_FAILURE_TARGET, "debug detail");
            tracing::warn!(target: KUBE_REQUEST_FAILURE_TARGET, "a warning");
        });

        assert!(!logged.contains("debug detail"), "{logged}");
        assert!(logged.contains("a warning"), "{logged}");
    }
}
