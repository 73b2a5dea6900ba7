//! Prometheus metrics. Labels are bounded: controller names and error categories, never
//! object names.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub controller: String,
    pub kind: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub cached_objects: Family<CacheLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    pub leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    pub objects_written: Family<ControllerLabels, Counter<u64, AtomicU64>>,
    pub conflicts: Family<ControllerLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kopper");
        crate::controllers::replication::register_metrics(&mut registry);
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        let cached_objects = Family::default();
        let leader = Gauge::default();
        let objects_written = Family::default();
        let conflicts = Family::default();
        registry.register("reconciles", "Reconciles run, per controller", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and error category",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, per controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "cached_objects",
            "Objects held in each controller's cache",
            cached_objects.clone(),
        );
        registry.register("leader", "1 while this replica holds the leader lease", leader.clone());
        registry.register(
            "objects_written",
            "Objects created, updated or deleted by a controller",
            objects_written.clone(),
        );
        registry.register("conflicts", "Objects a controller wants but did not create", conflicts.clone());
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            cached_objects,
            leader,
            objects_written,
            conflicts,
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, controller: &str, took: Duration) {
        let labels = ControllerLabels { controller: controller.to_owned() };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration.get_or_create(&labels).observe(took.as_secs_f64());
    }

    pub fn failed(&self, controller: &str, category: &str) {
        let labels = ErrorLabels { controller: controller.to_owned(), category: category.to_owned() };
        self.reconcile_errors.get_or_create(&labels).inc();
    }

    pub fn wrote(&self, controller: &str) {
        self.objects_written.get_or_create(&ControllerLabels { controller: controller.to_owned() }).inc();
    }

    /// Renders the registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
