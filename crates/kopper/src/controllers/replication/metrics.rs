//! The replication engine's own metrics, registered by the engine under the `kopper_`
//! prefix next to the runtime's. The per-controller gauges the engine shares with other
//! controllers (conflicts, rules not ready, objects written) stay in
//! [`crate::runtime::metrics`].

use std::sync::LazyLock;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Seconds from kopper seeing a source change to the last of its copies written.
pub static SOURCE_TO_COPY_SECONDS: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.005, 2.0, 14)));

/// Registers the engine's own metrics; `Metrics` is shared behind an `Arc`, so its owner
/// calls this while building the registry.
pub fn register_metrics(registry: &mut Registry) {
    registry.register(
        "replication_source_to_copy_seconds",
        "Time from a source change seen to its last copy written",
        SOURCE_TO_COPY_SECONDS.clone(),
    );
}
