//! The driver every kopper controller runs on: metrics, a tracing span per reconcile,
//! per-object exponential backoff, and the readiness registry behind `/readyz`.
//!
//! kube-runtime's `Controller` already owns the watches, the work queue and deduplication;
//! this module adds what it leaves to each operator, so that every controller gets the same
//! retry policy, the same observability and the same fairness between namespaces (a
//! [`FairGate`] bounds concurrency, or for a controller whose backlog can be every object of
//! a kind, an [`Admission`] queue in front of kube's) without repeating it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::Either;
use futures::{Stream, StreamExt};
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::admission::Admission;
use super::context::{Context, ErrorCategory};
use super::fair_gate::FairGate;
use super::metrics::{CacheLabels, ControllerLabels};

/// First retry delay after a failed reconcile.
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest retry delay, and the delay used for permanent errors: those wait for the object
/// to change (which triggers a reconcile through the watch) rather than being retried hot.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Share of each delay that is randomised, so objects that failed together do not retry in
/// lockstep against an API server that is already struggling.
const BACKOFF_JITTER: f64 = 0.2;
/// How often a controller's store is asked whether its first list has arrived.
const READINESS_POLL: Duration = Duration::from_millis(100);

/// The controller settings every kopper controller starts from. kube's own concurrency is
/// unbounded: [`run_controller`] bounds reconciles to
/// [`Settings::concurrency`](super::Settings::concurrency) with a [`FairGate`] that serves
/// namespaces in turn, where kube's queue would serve them first come, first served. A
/// controller adds its own debounce on top, so this is not applied behind its back. Each
/// reconcile waiting for a permit is one kube has started and polls on every wake, which
/// suits backlogs of custom resources; a backlog of every pod of the cluster goes through
/// [`run_admitted_controller`] instead.
pub fn config() -> Config {
    Config::default().concurrency(0)
}

/// [`config`] for a controller of cluster-scoped objects: kube's own bound of
/// [`Settings::concurrency`](super::Settings::concurrency) reconciles at a time. Their
/// reconciles would all wait in one queue of the [`FairGate`], first come, first served, as
/// kube's queue serves them; but kube's runner holds every reconcile it started and polls
/// them all each time it is woken (a reconcile ending, any watch event), so thousands
/// waiting there for a permit would cost a pass over all of them per event. Kept in kube's
/// queue instead, they cost nothing until their turn, and the gate never makes anyone wait.
/// For a few objects (NamespaceAccess's policies); a controller of every namespace offers
/// them through an admission queue ([`run_offered_controller`]).
pub fn cluster_scoped_config(settings: &super::Settings) -> Config {
    config().concurrency(settings.concurrency)
}

/// Runs `controller` until `shutdown` resolves and its running reconciles end: records metrics
/// (`ctx.metrics.reconciled`/`failed`), wraps each reconcile in a tracing span naming the
/// object (fields `controller`, `namespace`, `object`), and on error requeues with per-object
/// exponential backoff (base 500ms, x2, max 5 min, jitter; reset on success); permanent errors
/// ([`ErrorCategory::is_permanent`]) are not retried hot (requeue after the max).
///
/// `name` must be the controller's `--controllers` name ([`ControllerName::as_str`]), so that
/// `/readyz` waits for it.
///
/// [`ControllerName::as_str`]: crate::cli::ControllerName::as_str
///
/// The caller builds the `Controller` (its watches, owned and watched kinds) and gives it
/// [`config`] (plus any debounce of its own). `name` is registered with [`Readiness`] and is
/// ready once the controller's main watch has delivered its first list.
///
/// Each reconcile first waits for a permit of a [`FairGate`] of
/// [`Settings::concurrency`](super::Settings::concurrency) permits, in its namespace's queue
/// (cluster-scoped objects have one of their own): a namespace's first waiting reconcile
/// starts after at most one of each other namespace with work waiting. The wait is not in
/// the reconcile metrics or span timings. kube still never runs one object twice at once.
/// When `shutdown` resolves, reconciles holding a permit finish and those still waiting
/// give up their turn, so stopping does not wait for a whole backlog. A reconcile that got
/// its permit reads its object from the cache again, so it never acts on the version it was
/// queued with when a newer one arrived meanwhile, and skips an object deleted meanwhile.
pub async fn run_controller<K, E, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let waiting = waiting_gauge(&ctx, name);
    let gate = FairGate::new(usize::from(ctx.settings.concurrency)).counting_waiters_in(waiting);
    let turns = Turns { gate, admission: None, failures: Arc::default() };
    drive(name, controller, turns, ctx, shutdown, reconcile).await;
}

/// [`run_controller`] for a controller driven by one watch of its objects (`events`, once its
/// reflector has applied them to `store`), whose backlog can reach every object of a kind in
/// the cluster (the pod labeler's pods): the objects wait in an [`Admission`] queue, per
/// namespace and in turn, and kube is given
/// [`Settings::concurrency`](super::Settings::concurrency) of them at a time and
/// [`ADMITTED_AHEAD`] more, so that nothing
/// kube holds grows with the backlog. Failed reconciles wait out their backoff and then their
/// turn in the same queue. Reconciles return [`Action::await_change`]: a requeue they ask for
/// would be kube's, out of turn (it is logged as a warning).
pub async fn run_admitted_controller<K, E, F, Fut>(
    name: &'static str,
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    store: Store<K>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let admission = admission_for(name, &ctx);
    let admitted = admission.admit(events, store.clone());
    drive_admitted(name, admission, admitted, store, ctx, shutdown, reconcile).await;
}

/// Objects admission lets through to kube beyond the reconciles kube may run at once: one,
/// due next. kube's queue rounds each due time up to the next millisecond and is woken by its
/// timer then, so an object handed over only as a slot freed would wait that long idle; with
/// one already due, a freed slot starts it at once. No more than one: kube holds the objects
/// due while its slots are full in a hash set and takes them in hash order, so with several
/// one namespace's could keep overtaking another's. Measured with `cargo bench -p kopper
/// --bench scale`: with none, namespaces that needed no write went through 2,000 a second.
const ADMITTED_AHEAD: usize = 1;

/// An [`Admission`] queue for controller `name`, letting
/// [`Settings::concurrency`](super::Settings::concurrency) objects and [`ADMITTED_AHEAD`]
/// more through at a time, for [`run_admitted_controller`] and [`run_offered_controller`]:
/// its gauge is `kopper_reconciles_waiting`.
pub fn admission_for<K: Resource<DynamicType = ()> + 'static>(
    name: &'static str,
    ctx: &Context,
) -> Admission<K> {
    let window = usize::from(ctx.settings.concurrency) + ADMITTED_AHEAD;
    Admission::new(name, window).counting_waiters_in(waiting_gauge(ctx, name))
}

/// [`run_admitted_controller`] for a controller whose objects several triggers of its own
/// [offer](Admission::offer) to `admission` (made by [`admission_for`]), reading them from
/// `store` when their turn comes: NamespaceAccess's namespaces, woken by namespace changes,
/// by RoleBinding changes and by policy changes (every namespace at once). A reconcile that
/// wants another pass later asks `admission` ([`Admission::retry_after`]) and returns
/// [`Action::await_change`].
pub async fn run_offered_controller<K, E, F, Fut>(
    name: &'static str,
    admission: Admission<K>,
    store: Store<K>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let admitted = admission.offered(store.clone());
    drive_admitted(name, admission, admitted, store, ctx, shutdown, reconcile).await;
}

/// What [`run_admitted_controller`] and [`run_offered_controller`] share: kube runs what
/// `admitted` lets through, as many at a time as `admission`'s window.
async fn drive_admitted<K, E, F, Fut>(
    name: &'static str,
    admission: Admission<K>,
    admitted: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    store: Store<K>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let concurrency = ctx.settings.concurrency;
    let failures = Arc::new(FailureCounts::default());
    let forget = failures.clone();
    // An object let go before kube saw it again (deleted, or no work left) is never
    // reported to `drive` as gone: its failures are forgotten here.
    let admission = admission.letting_go_with(move |object| forget.reset(&failure_key(object)));
    let controller = Controller::for_stream(admitted, store).with_config(config().concurrency(concurrency));
    // kube runs `concurrency` of the window at a time: the gate's permits are never short.
    let gate = FairGate::new(usize::from(concurrency));
    let turns = Turns { gate, admission: Some(admission), failures };
    drive(name, controller, turns, ctx, shutdown, reconcile).await;
}

fn waiting_gauge(ctx: &Context, name: &'static str) -> Gauge<i64, AtomicI64> {
    ctx.metrics.reconciles_waiting.get_or_create(&ControllerLabels { controller: name.into() }).clone()
}

/// How a controller's reconciles take turns, and their failures per object.
struct Turns<K: Resource<DynamicType = ()> + 'static> {
    /// Every reconcile waits here for a permit.
    gate: FairGate,
    /// Where objects wait before kube sees them, for [`run_admitted_controller`] and
    /// [`run_offered_controller`]; it is told of each reconcile's end and plans retries.
    admission: Option<Admission<K>>,
    failures: Arc<FailureCounts>,
}

/// What [`run_controller`], [`run_admitted_controller`] and [`run_offered_controller`] share:
/// runs `controller` with its reconciles taking `turns`.
async fn drive<K, E, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    turns: Turns<K>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    E: std::error::Error + ErrorCategory + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let store = controller.store();
    spawn_readiness_watch(name, store.clone(), &ctx);
    let Turns { gate, admission, failures } = turns;
    let stopping = CancellationToken::new();
    let controller = controller.graceful_shutdown_on(stopping.clone().cancelled_owned());

    let reconciles = Reconciles {
        name,
        gate: gate.clone(),
        failures: failures.clone(),
        store: store.clone(),
        reconcile: Arc::new(reconcile),
    };
    let policy_failures = failures.clone();
    let policy_admission = admission.clone();
    let reconciler = move |obj: Arc<K>, ctx: Arc<Context>| reconciles.start(&obj, ctx);
    let error_policy = move |obj: Arc<K>, error: &E, _ctx: Arc<Context>| {
        let object = ObjectRef::from_obj(obj.as_ref());
        let key = failure_key(&object);
        let delay = retry_delay(error.is_permanent(), policy_failures.increment(&key), random_unit());
        warn!(
            controller = name,
            object = %key,
            category = error.category(),
            permanent = error.is_permanent(),
            retry_in_ms = delay.as_millis() as u64,
            "reconcile failed: {error}"
        );
        match &policy_admission {
            Some(admission) => {
                admission.retry_after(&object, delay);
                Action::await_change()
            }
            None => Action::requeue(delay),
        }
    };

    let running = controller.run(reconciler, error_policy, ctx).for_each(|result| {
        if let (Some(admission), Some(object)) = (&admission, reconciled_object::<K, E>(&result)) {
            admission.finished(&object);
            if let Ok((_, action)) = &result
                && *action != Action::await_change()
            {
                warn!(controller = name, %object, "a requeue asked by an admitted reconcile skips its turn");
            }
        }
        // An object that left the cache will not be retried: forget its failures.
        if let Err(ControllerError::ObjectNotFound(object)) = &result {
            failures.reset(&object.to_string());
        }
        log_outcome(name, result);
        std::future::ready(())
    });
    let closing = async {
        shutdown.await;
        gate.close();
        stopping.cancel();
    };
    let running = std::pin::pin!(running);
    if let Either::Left(((), running)) = futures::future::select(std::pin::pin!(closing), running).await {
        running.await;
    }
    debug!(controller = name, "controller stopped");
}

/// The object a result of kube's runner is the end of a reconcile of, if it is one.
fn reconciled_object<K, E>(
    result: &Result<(ObjectRef<K>, Action), ControllerError<E, watcher::Error>>,
) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
{
    let erased = match result {
        Ok((object, _)) => return Some(object.clone()),
        Err(ControllerError::ReconcilerFailed(_, object) | ControllerError::ObjectNotFound(object)) => object,
        Err(_) => return None,
    };
    let object = ObjectRef::new(&erased.name);
    Some(match &erased.namespace {
        Some(namespace) => object.within(namespace),
        None => object,
    })
}

/// What every reconcile of one controller shares.
struct Reconciles<K: Resource<DynamicType = ()> + Clone + 'static, F> {
    name: &'static str,
    gate: FairGate,
    failures: Arc<FailureCounts>,
    store: Store<K>,
    reconcile: Arc<F>,
}

impl<K, F> Reconciles<K, F>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// One reconcile of `obj`, as kube starts it: it waits for its namespace's turn at the
    /// gate, reads the object again from the cache and runs the controller's reconcile in
    /// its span. kube keeps every started reconcile in a table until it ends, and a burst
    /// starts one for every object at once (150,000 pods at Kubernetes' limits), so what
    /// waits must be small: the span is made, and the reconcile's own state (an API
    /// request's, kilobytes) is boxed, only once the turn has come.
    fn start<E, Fut>(
        &self,
        obj: &K,
        ctx: Arc<Context>,
    ) -> impl Future<Output = Result<Action, E>> + Send + use<K, F, E, Fut>
    where
        E: std::error::Error + ErrorCategory + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let name = self.name;
        let object = ObjectRef::from_obj(obj);
        let lane = obj.namespace();
        let gate = self.gate.clone();
        let failures = self.failures.clone();
        let store = self.store.clone();
        let reconcile = self.reconcile.clone();
        async move {
            let Some(_permit) = gate.acquire(lane).await else {
                debug!(controller = name, object = %object, "shutting down: this reconcile gives up its turn");
                return Ok(Action::await_change());
            };
            // The wait for a permit can be long (other namespaces' backlogs): decide on the
            // object as the cache holds it now, not as it was when the work was queued.
            let Some(latest) = store.get(&object) else {
                debug!(controller = name, object = %object, "gone from the cache while waiting; nothing to do");
                return Ok(Action::await_change());
            };
            let span = info_span!(
                "reconcile",
                controller = name,
                namespace = latest.namespace().unwrap_or_default(),
                // Not `name`: JSON logs already use that key for the span's own name.
                object = latest.name_any(),
            );
            let work = Box::pin(span.in_scope(|| reconcile(latest, ctx.clone())).instrument(span));
            let started = Instant::now();
            let result = work.await;
            ctx.metrics.reconciled(name, started.elapsed());
            record_cache_size(&ctx, name, &store);
            match &result {
                Ok(_) => {
                    failures.reset(&failure_key(&object));
                    ctx.metrics.succeeded(name);
                }
                Err(error) => ctx.metrics.failed(name, error.category()),
            }
            result
        }
    }
}

/// Reconciler failures are logged by the error policy, where the retry delay is known; this
/// logs what only the result stream sees.
fn log_outcome<K, E>(name: &str, result: Result<(ObjectRef<K>, Action), ControllerError<E, watcher::Error>>)
where
    K: Resource,
    E: std::error::Error,
{
    match result {
        Ok((object, _)) => debug!(controller = name, %object, "reconciled"),
        Err(ControllerError::ReconcilerFailed(..)) => {}
        Err(ControllerError::ObjectNotFound(object)) => {
            debug!(controller = name, %object, "object is gone from the cache; nothing to do")
        }
        Err(error @ ControllerError::QueueError(_)) => {
            warn!(controller = name, "watch failed, retrying with backoff: {error}")
        }
        Err(error) => warn!(controller = name, "controller error: {error}"),
    }
}

fn record_cache_size<K>(ctx: &Context, name: &str, store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let labels = CacheLabels { controller: name.to_owned(), kind: K::kind(&()).into_owned() };
    let size = i64::try_from(store.len()).unwrap_or(i64::MAX);
    ctx.metrics.cached_objects.get_or_create(&labels).set(size);
}

/// Marks `name` synced once its store has had its first list.
///
/// `Store::wait_until_ready` is backed by a oneshot channel that remembers only the last
/// waiter's waker, and the controller's own runner waits on it too; a single long-lived
/// wait here can be left unwoken. So the store is asked afresh at a short interval: the
/// answer is immediate once the list has arrived, and the runner re-registers itself each
/// time it is polled, in the same task that processes the list.
fn spawn_readiness_watch<K>(name: &'static str, store: Store<K>, ctx: &Context)
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let readiness = ctx.readiness.clone();
    readiness.register(name);
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(READINESS_POLL, store.wait_until_ready()).await {
                Ok(Ok(())) => return readiness.mark_synced(name),
                Ok(Err(_writer_dropped)) => return,
                Err(_elapsed) => {}
            }
        }
    });
}

/// When to retry after a failure: permanent errors wait the longest delay (a change to the
/// object triggers a reconcile sooner through the watch); others back off exponentially.
pub fn retry_delay(permanent: bool, attempt: u32, unit: f64) -> Duration {
    if permanent { BACKOFF_MAX } else { backoff_delay(attempt, unit) }
}

/// Delay before retry number `attempt` (1 for the first failure): `BACKOFF_BASE * 2^(attempt-1)`
/// capped at [`BACKOFF_MAX`], with up to a fifth of it taken off (jitter) according to
/// `unit` (a number in `[0, 1)`).
pub fn backoff_delay(attempt: u32, unit: f64) -> Duration {
    let exponent = attempt.saturating_sub(1).min(20);
    let uncapped = BACKOFF_BASE.saturating_mul(1u32 << exponent);
    let capped = uncapped.min(BACKOFF_MAX);
    capped.mul_f64(1.0 - BACKOFF_JITTER * unit.clamp(0.0, 1.0))
}

/// A number in `[0, 1)` that differs per call. `RandomState` is seeded randomly per process
/// and per instance, which is all jitter needs; it spares a dependency on `rand`.
fn random_unit() -> f64 {
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Consecutive failures per object, so backoff grows per object and resets when that object
/// reconciles successfully.
#[derive(Default)]
struct FailureCounts(Mutex<HashMap<String, u32>>);

/// An object's key in [`FailureCounts`] and in logs: `kind.version.group/namespace/name`, as
/// kube's results name an object they no longer type.
fn failure_key<K: Resource<DynamicType = ()>>(object: &ObjectRef<K>) -> String {
    object.clone().erase().to_string()
}

impl FailureCounts {
    fn increment(&self, key: &str) -> u32 {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(key.to_owned()).or_default();
        *count = count.saturating_add(1);
        *count
    }

    fn reset(&self, key: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    impl ErrorCategory for Never {
        fn category(&self) -> &'static str {
            "never"
        }
    }

    /// A reconcile whose own state is large: 64 KiB held across an await.
    async fn large_reconcile(
        _: Arc<k8s_openapi::api::core::v1::ConfigMap>,
        _: Arc<Context>,
    ) -> Result<Action, Never> {
        let buffer = [7u8; 64 * 1024];
        tokio::task::yield_now().await;
        std::hint::black_box(&buffer);
        Ok(Action::await_change())
    }

    /// kube keeps every started reconcile until it ends, and a burst starts one per object:
    /// one waiting for its turn must not weigh what its work will.
    #[tokio::test]
    async fn a_reconcile_waiting_for_its_turn_holds_little_however_large_its_work() {
        let (store, _writer) = kube::runtime::reflector::store();
        let reconciles = Reconciles {
            name: "test",
            gate: FairGate::new(1),
            failures: Arc::default(),
            store,
            reconcile: Arc::new(large_reconcile),
        };
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let ctx = Arc::new(Context::new(client, Arc::default(), super::super::Settings::default()));
        let mut config_map = k8s_openapi::api::core::v1::ConfigMap::default();
        config_map.metadata.name = Some("settings".into());
        config_map.metadata.namespace = Some("team-a".into());
        let waiting = reconciles.start(&config_map, ctx);
        let size = std::mem::size_of_val(&waiting);
        assert!(size < 1024, "a waiting reconcile holds {size} bytes");
    }

    #[test]
    fn backoff_doubles_from_half_a_second() {
        assert_eq!(backoff_delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(backoff_delay(2, 0.0), Duration::from_secs(1));
        assert_eq!(backoff_delay(4, 0.0), Duration::from_secs(4));
    }

    #[test]
    fn backoff_is_capped_at_five_minutes() {
        assert_eq!(backoff_delay(10, 0.0), Duration::from_secs(256));
        assert_eq!(backoff_delay(11, 0.0), BACKOFF_MAX);
        assert_eq!(backoff_delay(u32::MAX, 0.0), BACKOFF_MAX);
    }

    #[test]
    fn jitter_only_shortens_the_delay_by_a_bounded_share() {
        let delay = backoff_delay(3, 0.999);
        assert!(delay < Duration::from_secs(2));
        assert!(delay >= Duration::from_secs(2).mul_f64(1.0 - BACKOFF_JITTER));
    }

    #[test]
    fn permanent_errors_are_not_retried_hot() {
        assert_eq!(retry_delay(true, 1, 0.0), BACKOFF_MAX);
        assert_eq!(retry_delay(false, 1, 0.0), BACKOFF_BASE);
    }

    #[test]
    fn failures_count_per_object_and_reset_on_success() {
        let counts = FailureCounts::default();
        assert_eq!(counts.increment("a"), 1);
        assert_eq!(counts.increment("a"), 2);
        assert_eq!(counts.increment("b"), 1);
        counts.reset("a");
        assert_eq!(counts.increment("a"), 1);
    }
}
