//! Prometheus metrics. Labels are bounded: controller names, kinds, verbs, status codes and
//! error categories, never object names. `docs/operations.md` says what each alert built on
//! them means and what to do.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::process::ProcessCollector;

/// kopper's version, and the commit it was built from (`unknown` outside a git checkout).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("KOPPER_COMMIT");

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

type IntGauge = Gauge<i64, AtomicI64>;

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// Reconciles waiting for one of their controller's `--concurrency` slots.
    pub reconciles_waiting: Family<ControllerLabels, IntGauge>,
    /// Unix time of each controller's last reconcile that succeeded.
    pub last_success: Family<ControllerLabels, Gauge<f64, AtomicU64>>,
    pub cached_objects: Family<CacheLabels, IntGauge>,
    pub leader: IntGauge,
    pub leader_transitions: Counter,
    pub objects_written: Family<ControllerLabels, Counter<u64, AtomicU64>>,
    pub conflicts: Family<ControllerLabels, IntGauge>,
    pub copies_out_of_sync: Family<KindLabels, IntGauge>,
    pub rules_not_ready: Family<ControllerLabels, IntGauge>,
    pub watch_errors: Family<CacheLabels, Counter>,
    pub relists: Family<CacheLabels, Counter>,
    pub api_requests: Family<RequestLabels, Counter>,
    /// Per controller and per rule, the figures the gauges above sum (see [`RuleGauges`]).
    rule_gauges: Mutex<BTreeMap<(String, String), RuleGauges>>,
    /// Since when every request to the API server has failed (no answer, 502, 503, 504); `None`
    /// while it answers. Fed by the client's request layer, read by `/readyz`.
    api_failing_since: Mutex<Option<std::time::Instant>>,
    /// Since when the API server's own `/readyz` has not said it is ready; `None` while it
    /// does. Only the probe's next answer ends it: other requests answered (from the API
    /// server's watch cache, or a 500 from a store that is down) do not show it can serve.
    api_not_ready_since: Mutex<Option<std::time::Instant>>,
    /// Watches whose requests fail while other requests succeed, by what they watch: since
    /// when they fail, and when they failed last. Fed by the request layer, read by `/readyz`.
    watches_failing: Mutex<BTreeMap<String, (std::time::Instant, std::time::Instant)>>,
    /// What each controller kept at registration to write its own metrics through, by type.
    kept: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

/// What a controller registers its own metrics with: the registry, under the `kopper_`
/// prefix, and a place to keep the handles it writes them through. Kept per [`Metrics`], so
/// that operators sharing a process (the tests') count apart.
pub struct Registration<'a> {
    pub registry: &'a mut Registry,
    kept: &'a mut HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Registration<'_> {
    /// Keeps `handles` for [`Metrics::kept`].
    pub fn keep<T: Any + Send + Sync>(&mut self, handles: Arc<T>) {
        self.kept.insert(TypeId::of::<T>(), handles);
    }
}

/// A failing watch retries at least this often (kube's watcher backs off to 30 s at most);
/// one not seen failing for longer was stopped or has recovered, and is forgotten.
const WATCH_RETRY_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// What one rule contributes to the per-controller gauges; replaced after each of its passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleGauges {
    pub kind: String,
    pub conflicts: i64,
    pub out_of_sync: i64,
    pub not_ready: bool,
}

impl Default for Metrics {
    /// The runtime's metrics alone.
    fn default() -> Self {
        Self::new(|_| {})
    }
}

impl Metrics {
    /// The runtime's metrics plus what `register` adds under the `kopper_` prefix: the
    /// controllers' own metrics, which the runtime does not know.
    pub fn new(register: impl FnOnce(&mut Registration<'_>)) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let kopper = registry.sub_registry_with_prefix("kopper");
        let mut kept = HashMap::new();
        register(&mut Registration { registry: kopper, kept: &mut kept });
        let build_info = Family::<BuildLabels, IntGauge>::default();
        build_info.get_or_create(&BuildLabels { version: VERSION.into(), commit: COMMIT.into() }).set(1);
        kopper.register(
            "build_info",
            "kopper's version and the commit it was built from; always 1",
            build_info,
        );
        let metrics = Self {
            registry: Registry::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            reconciles_waiting: Family::default(),
            last_success: Family::default(),
            cached_objects: Family::default(),
            leader: Gauge::default(),
            leader_transitions: Counter::default(),
            objects_written: Family::default(),
            conflicts: Family::default(),
            copies_out_of_sync: Family::default(),
            rules_not_ready: Family::default(),
            watch_errors: Family::default(),
            relists: Family::default(),
            api_requests: Family::default(),
            rule_gauges: Mutex::default(),
            api_failing_since: Mutex::default(),
            api_not_ready_since: Mutex::default(),
            watches_failing: Mutex::default(),
            kept,
        };
        metrics.register_into(kopper);
        Self { registry, ..metrics }
    }
}

impl Metrics {
    /// What a controller kept of type `T` when it registered its metrics; `None` if it did
    /// not register with these.
    pub fn kept<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.kept.get(&TypeId::of::<T>()).cloned().and_then(|kept| kept.downcast::<T>().ok())
    }

    fn register_into(&self, kopper: &mut Registry) {
        kopper.register("reconciles", "Reconciles run, per controller", self.reconciles.clone());
        kopper.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and error category",
            self.reconcile_errors.clone(),
        );
        kopper.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, per controller",
            self.reconcile_duration.clone(),
        );
        kopper.register(
            "reconciles_waiting",
            "Reconciles waiting for one of the controller's --concurrency slots, per controller",
            self.reconciles_waiting.clone(),
        );
        kopper.register(
            "last_successful_reconcile_timestamp_seconds",
            "Unix time of the controller's last reconcile that succeeded",
            self.last_success.clone(),
        );
        kopper.register(
            "cached_objects",
            "Objects held in each controller's cache",
            self.cached_objects.clone(),
        );
        kopper.register(
            "leader",
            "1 while this replica does the work: it holds the lease, or leader election is off",
            self.leader.clone(),
        );
        kopper.register(
            "leader_transitions",
            "Times this replica gained or lost leadership",
            self.leader_transitions.clone(),
        );
        kopper.register(
            "objects_written",
            "Objects created, updated or deleted by a controller",
            self.objects_written.clone(),
        );
        kopper.register(
            "conflicts",
            "Objects a controller wants but leaves alone because another owns the place",
            self.conflicts.clone(),
        );
        kopper.register(
            "copies_out_of_sync",
            "Copies wanted but not identical to their source (missing, stale or blocked), per kind",
            self.copies_out_of_sync.clone(),
        );
        kopper.register(
            "rules_not_ready",
            "Rules or Buckets whose Ready condition is not True, per controller",
            self.rules_not_ready.clone(),
        );
        kopper.register(
            "watch_errors",
            "Watches that failed and are retried with backoff, per controller and kind",
            self.watch_errors.clone(),
        );
        kopper.register(
            "relists",
            "Full lists of a watched kind (at start and after a watch could not resume), per controller and kind",
            self.relists.clone(),
        );
        kopper.register(
            "api_requests",
            "Requests to the Kubernetes API, by verb and HTTP status code (`error` when no answer came)",
            self.api_requests.clone(),
        );
    }

    pub fn reconciled(&self, controller: &str, took: Duration) {
        let labels = ControllerLabels { controller: controller.to_owned() };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration.get_or_create(&labels).observe(took.as_secs_f64());
    }

    pub fn succeeded(&self, controller: &str) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        self.last_success.get_or_create(&ControllerLabels { controller: controller.to_owned() }).set(now);
    }

    pub fn failed(&self, controller: &str, category: &str) {
        let labels = ErrorLabels { controller: controller.to_owned(), category: category.to_owned() };
        self.reconcile_errors.get_or_create(&labels).inc();
    }

    pub fn wrote(&self, controller: &str) {
        self.objects_written.get_or_create(&ControllerLabels { controller: controller.to_owned() }).inc();
    }

    /// Records that this replica started (`true`) or stopped doing the work.
    pub fn set_leader(&self, leading: bool) {
        let was = self.leader.set(i64::from(leading));
        if was != i64::from(leading) {
            self.leader_transitions.inc();
        }
    }

    pub fn api_request(&self, verb: &str, code: &str) {
        self.count_api_request(verb, code);
        // No answer, or a gateway or the server saying it cannot serve now. A 500 is an
        // answer (from a server that is up); a request refused that way again and again is
        // the watch check's business.
        self.api_answered(!matches!(code, "error" | "502" | "503" | "504"));
    }

    /// Counts a request in `kopper_api_requests_total` only: the readiness probe's, whose
    /// verdict [`Self::api_ready`] takes instead.
    pub fn count_api_request(&self, verb: &str, code: &str) {
        self.api_requests
            .get_or_create(&RequestLabels { verb: verb.to_owned(), code: code.to_owned() })
            .inc();
    }

    /// Whether a request was answered (or failed for want of an answer): a failure starts
    /// the stretch `/readyz` measures, an answer ends it.
    fn api_answered(&self, answered: bool) {
        stretch(&self.api_failing_since, !answered);
    }

    /// What the API server's own `/readyz` said: not ready (or no answer) starts a stretch
    /// that only its saying ready ends. Ready also ends the stretch of failed requests: the
    /// server answers, however long ago the last other request failed.
    pub fn api_ready(&self, ready: bool) {
        stretch(&self.api_not_ready_since, !ready);
        if ready {
            stretch(&self.api_failing_since, false);
        }
    }

    /// Records the outcome of one watch request (`watch` names what it watches): a failure
    /// starts or extends its failing stretch, an answer ends it.
    pub fn watch_request(&self, watch: &str, failed: bool) {
        let mut failing = self.watches_failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        if failed {
            failing.entry(watch.to_owned()).and_modify(|(_, last)| *last = now).or_insert((now, now));
        } else {
            failing.remove(watch);
        }
    }

    /// The watch that has been failing longest while it keeps retrying, and for how long.
    pub fn watch_failing_longest(&self) -> Option<(String, std::time::Duration)> {
        let mut failing = self.watches_failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failing.retain(|_, (_, last)| last.elapsed() < WATCH_RETRY_WINDOW);
        failing
            .iter()
            .map(|(watch, (since, _))| (watch.clone(), since.elapsed()))
            .max_by_key(|(_, failing_for)| *failing_for)
    }

    /// How long the API server has failed to serve kopper: every request failing, or its
    /// own `/readyz` not ready, whichever has lasted longer; `None` while it serves.
    pub fn api_unreachable_for(&self) -> Option<std::time::Duration> {
        let read = |since: &Mutex<Option<std::time::Instant>>| {
            *since.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        [read(&self.api_failing_since), read(&self.api_not_ready_since)]
            .into_iter()
            .flatten()
            .map(|since| since.elapsed())
            .max()
    }

    pub fn watch_failed(&self, controller: &str, kind: &str) {
        self.watch_errors.get_or_create(&cache_labels(controller, kind)).inc();
    }

    pub fn relisted(&self, controller: &str, kind: &str) {
        self.relists.get_or_create(&cache_labels(controller, kind)).inc();
    }

    /// Replaces what `rule` of `controller` contributes to the conflict, out-of-sync and
    /// not-ready gauges (`None`: the rule is gone), and sets those gauges.
    pub fn set_rule_gauges(&self, controller: &str, rule: &str, gauges: Option<RuleGauges>) {
        let mut all = self.rule_gauges.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (controller.to_owned(), rule.to_owned());
        let kind = match gauges {
            Some(gauges) => {
                let kind = gauges.kind.clone();
                all.insert(key, gauges);
                kind
            }
            None => match all.remove(&key) {
                Some(gone) => gone.kind,
                None => return,
            },
        };
        self.publish_rule_gauges(&all, controller, kind);
    }

    /// Forgets the rules `keep` refuses (`keep(controller, rule)`): rules deleted without
    /// their finalizer running (removed by hand) are never cleaned up, and would otherwise
    /// count towards the gauges, and fire their alerts, until kopper restarts.
    pub fn retain_rule_gauges(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut all = self.rule_gauges.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut gone = BTreeSet::new();
        all.retain(|(controller, rule), gauges| {
            let kept = keep(controller, rule);
            if !kept {
                gone.insert((controller.clone(), gauges.kind.clone()));
            }
            kept
        });
        for (controller, kind) in gone {
            self.publish_rule_gauges(&all, &controller, kind);
        }
    }

    /// Sets the gauges of `controller` and of copies of `kind` from every rule's share.
    fn publish_rule_gauges(
        &self,
        all: &BTreeMap<(String, String), RuleGauges>,
        controller: &str,
        kind: String,
    ) {
        let of_controller = all.iter().filter(|((c, _), _)| c == controller).map(|(_, g)| g);
        let (conflicts, not_ready) =
            of_controller.fold((0, 0), |(c, n), g| (c + g.conflicts, n + i64::from(g.not_ready)));
        let labels = ControllerLabels { controller: controller.to_owned() };
        self.conflicts.get_or_create(&labels).set(conflicts);
        self.rules_not_ready.get_or_create(&labels).set(not_ready);
        // A refused rule has no kind to speak of: it holds no copies.
        if !kind.is_empty() {
            let out_of_sync = all.values().filter(|g| g.kind == kind).map(|g| g.out_of_sync).sum();
            self.copies_out_of_sync.get_or_create(&KindLabels { kind }).set(out_of_sync);
        }
    }

    /// Renders the registry in the OpenMetrics text format (what Prometheus asks for).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Renders the registry in the classic Prometheus text format (version 0.0.4), for
    /// clients that do not ask for OpenMetrics (curl, `promtool check metrics`).
    pub fn encode_classic(&self) -> String {
        classic_text(&self.encode())
    }
}

fn cache_labels(controller: &str, kind: &str) -> CacheLabels {
    CacheLabels { controller: controller.to_owned(), kind: kind.to_owned() }
}

/// The classic text format of an OpenMetrics text: counters' HELP and TYPE lines name the
/// samples (`x_total`), and the OpenMetrics-only lines (`# UNIT`, `# EOF`) go.
fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Starts (`failed`) or ends a stretch of failures; a stretch already started keeps its start.
fn stretch(since: &Mutex<Option<std::time::Instant>>, failed: bool) {
    let mut since = since.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match (failed, *since) {
        (true, None) => *since = Some(std::time::Instant::now()),
        (false, Some(_)) => *since = None,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_controller_keeps_at_registration_is_found_by_its_type() {
        struct Kept(u8);
        let metrics = Metrics::new(|registration| registration.keep(Arc::new(Kept(7))));
        assert_eq!(metrics.kept::<Kept>().map(|kept| kept.0), Some(7));
        assert!(Metrics::default().kept::<Kept>().is_none(), "nothing kept, nothing found");
    }

    #[test]
    fn classic_text_names_counters_by_their_samples_and_drops_openmetrics_lines() {
        let openmetrics = "# HELP kopper_reconciles Reconciles run.\n# TYPE kopper_reconciles counter\n\
                           kopper_reconciles_total{controller=\"a\"} 1\n# TYPE kopper_leader gauge\n\
                           kopper_leader 1\n# UNIT x seconds\n# EOF\n";
        assert_eq!(
            classic_text(openmetrics),
            "# HELP kopper_reconciles_total Reconciles run.\n# TYPE kopper_reconciles_total counter\n\
             kopper_reconciles_total{controller=\"a\"} 1\n# TYPE kopper_leader gauge\nkopper_leader 1\n"
        );
    }

    #[test]
    fn rule_gauges_sum_per_controller_and_kind_and_forget_deleted_rules() {
        let metrics = Metrics::default();
        let gauges = |kind: &str, conflicts, out_of_sync, not_ready| {
            Some(RuleGauges { kind: kind.into(), conflicts, out_of_sync, not_ready })
        };
        metrics.set_rule_gauges("replication-rule", "a", gauges("ConfigMap", 2, 3, true));
        metrics.set_rule_gauges("replication-rule", "b", gauges("ConfigMap", 1, 0, false));
        metrics.set_rule_gauges("config-map-sync", "c", gauges("ConfigMap", 0, 4, true));
        let text = metrics.encode();
        assert!(text.contains("kopper_conflicts{controller=\"replication-rule\"} 3"), "{text}");
        assert!(text.contains("kopper_copies_out_of_sync{kind=\"ConfigMap\"} 7"), "{text}");
        assert!(text.contains("kopper_rules_not_ready{controller=\"replication-rule\"} 1"), "{text}");
        metrics.set_rule_gauges("replication-rule", "a", None);
        let text = metrics.encode();
        assert!(text.contains("kopper_conflicts{controller=\"replication-rule\"} 1"), "{text}");
        assert!(text.contains("kopper_copies_out_of_sync{kind=\"ConfigMap\"} 4"), "{text}");
        // "c" deleted without its finalizer running: forgotten at the next sweep.
        metrics.retain_rule_gauges(|_, rule| rule != "c");
        let text = metrics.encode();
        assert!(text.contains("kopper_rules_not_ready{controller=\"config-map-sync\"} 0"), "{text}");
        assert!(text.contains("kopper_copies_out_of_sync{kind=\"ConfigMap\"} 0"), "{text}");
        assert!(text.contains("kopper_conflicts{controller=\"replication-rule\"} 1"), "{text}");
    }

    #[test]
    fn an_api_server_not_ready_stays_unreachable_whatever_other_requests_get_back() {
        let metrics = Metrics::default();
        assert_eq!(metrics.api_unreachable_for(), None);
        metrics.api_ready(false);
        metrics.api_request("watch", "200");
        metrics.api_request("update", "500");
        assert!(metrics.api_unreachable_for().is_some(), "answers from its cache or a failing store");
        metrics.api_ready(true);
        assert_eq!(metrics.api_unreachable_for(), None);
    }

    #[test]
    fn a_lone_failed_request_ends_with_the_api_server_s_next_ready() {
        let metrics = Metrics::default();
        metrics.api_request("update", "503");
        assert!(metrics.api_unreachable_for().is_some());
        metrics.api_ready(true);
        assert_eq!(metrics.api_unreachable_for(), None, "no other request needed to end it");
    }

    #[test]
    fn leader_transitions_count_changes_only() {
        let metrics = Metrics::default();
        metrics.set_leader(true);
        metrics.set_leader(true);
        metrics.set_leader(false);
        assert_eq!(metrics.leader_transitions.get(), 2);
    }
}
