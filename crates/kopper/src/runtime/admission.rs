//! Fair, bounded admission of a controller's objects into kube's runner.
//!
//! kube-runtime's runner keeps every reconcile it has started in a table and polls them all
//! each time it is woken: by a reconcile ending, by any watch event. Started unbounded, a
//! controller's whole backlog (75,000 pods asking for a label at Kubernetes' limits) sits in
//! that table waiting for a [`FairGate`](super::fair_gate::FairGate) permit, and every wake
//! costs a pass over all of it: the work per object grows with the backlog. Bounded by kube
//! instead, the backlog waits in kube's queue, which serves it first come, first served, so
//! one namespace's thousands of pods would hold up another namespace's first.
//!
//! So a controller's objects wait here before kube sees them: queued per namespace and
//! served in turn, as the gate serves its permits
//! ([`RoundRobin`](super::fair_gate::RoundRobin)), each at most once however often it
//! changes, and let through only while fewer than the window (the controller's
//! `--concurrency`, and one more due next) are being reconciled or due. kube then never
//! holds more than the window, and an object waiting costs a queue entry, not a started
//! reconcile. A change to an object being reconciled queues it again when that reconcile
//! ends, so the change is never lost and the object never runs twice at once. A failed
//! reconcile comes back through the same queue once its backoff has passed, so retries take
//! turns too.
//!
//! Objects queued by a pass over many (a watch's list at a start or a relist, every
//! namespace on a policy change or a resync) wait in their lane behind the objects that
//! changed, as in controller-runtime's priority queue: what a user just did is not held up
//! by a sweep over a cluster that is mostly as it should be. Lanes still take turns, so one
//! namespace's changes never go ahead of another namespace's swept objects. Within a lane,
//! one swept object goes through after every few changes, and an object's change goes ahead
//! of a sweep once while the sweep waits (after that it waits with the sweep), so the sweep
//! ends however many changes come and whoever makes them. What changed while a watch was
//! down, or while the namespace feed fell behind, comes back with the sweep that follows.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use futures::Stream;
use futures::stream::{BoxStream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DelayKey;
use tracing::warn;

use super::fair_gate::Lane;

/// Watch events taken in one poll before the stream yields to other tasks, so that a relist's
/// 150,000 events do not hold the thread in one go (its objects are queued together once it
/// is complete).
const INPUT_SLICE: usize = 1024;

/// Which objects wait for a turn, in which order, and which are being reconciled: the
/// decisions of admission, without its I/O. `T` names one object; its lane is its namespace.
#[derive(Debug)]
pub struct AdmissionQueue<T> {
    window: usize,
    waiting: Lanes<T>,
    /// Which objects wait, and as what: an object is queued once however often it changes. A
    /// swept object that changes moves to its lane's changes; its entry among the lane's
    /// swept objects is dropped when it comes up.
    queued: HashMap<T, Queued>,
    /// How many of `queued` wait as swept objects: while any does, a sweep waits.
    swept: usize,
    /// Objects whose change went ahead of the swept objects since the sweep started: a change
    /// of one of them waits with the sweep, so that a few objects changing without end (a
    /// tenant editing RoleBindings in a loop) cannot slow every sweep down to a crawl.
    went_ahead: HashSet<T>,
    /// Let through and not finished yet; `true` once the object changed meanwhile.
    admitted: HashMap<T, bool>,
}

/// Why an object waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queued {
    Change,
    Sweep,
    /// A change of an object whose change already went ahead of the sweep waiting: it waits
    /// with the swept objects, but is not one (it does not keep a sweep going).
    HeldBack,
}

/// While a lane has swept objects waiting, one of them goes through after this many of the
/// lane's changes in a row.
const CHANGES_PER_SWEPT: usize = 4;

impl<T: Clone + Eq + std::hash::Hash> AdmissionQueue<T> {
    /// A queue letting `window` objects through at a time (at least one).
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            waiting: Lanes::default(),
            queued: HashMap::new(),
            swept: 0,
            went_ahead: HashSet::new(),
            admitted: HashMap::new(),
        }
    }

    /// `object` in `lane` changed: it waits for its turn, ahead of its lane's swept objects
    /// (the first time it changes while a sweep waits; after that, with them), unless it
    /// already waits as a change, or is being reconciled (then it queues again when that
    /// ends).
    pub fn offer(&mut self, lane: Lane, object: T) {
        if let Some(changed) = self.admitted.get_mut(&object) {
            *changed = true;
            return;
        }
        let before = self.queued.get(&object).copied();
        if before == Some(Queued::Change) {
            return;
        }
        if self.swept == 0 {
            self.went_ahead.clear();
        } else if !self.went_ahead.insert(object.clone()) {
            if before.is_none() {
                self.queued.insert(object.clone(), Queued::HeldBack);
                self.waiting.push(lane, object, Queued::Sweep);
            }
            return;
        }
        self.queued.insert(object.clone(), Queued::Change);
        self.swept -= usize::from(before == Some(Queued::Sweep));
        self.waiting.push(lane, object, Queued::Change);
    }

    /// `object` in `lane` is to be reconciled in a pass over many (a start, a relist, a
    /// policy change): it waits behind its lane's changes, unless it already waits, or is
    /// being reconciled (then it queues again, as a change, when that ends). A sweep that
    /// starts when none waits lets every object's change go ahead once again.
    pub fn sweep(&mut self, lane: Lane, object: T) {
        if let Some(changed) = self.admitted.get_mut(&object) {
            *changed = true;
            return;
        }
        if self.swept == 0 {
            self.went_ahead.clear();
        }
        match self.queued.entry(object.clone()) {
            Entry::Vacant(unqueued) => {
                unqueued.insert(Queued::Sweep);
                self.swept += 1;
                self.waiting.push(lane, object, Queued::Sweep);
            }
            // Already among the swept objects; now part of the sweep.
            Entry::Occupied(mut held_back) if *held_back.get() == Queued::HeldBack => {
                held_back.insert(Queued::Sweep);
                self.swept += 1;
            }
            Entry::Occupied(_) => {}
        }
    }

    /// The next object whose turn it is, if fewer than the window are being reconciled:
    /// lanes take turns, and in each its changes go first, with one swept object after every
    /// [`CHANGES_PER_SWEPT`] changes. The caller reports its end with
    /// [`finish`](Self::finish).
    pub fn admit(&mut self) -> Option<T> {
        if self.admitted.len() >= self.window {
            return None;
        }
        let (queued, swept) = (&mut self.queued, &mut self.swept);
        let object = self.waiting.pop_live(|object, why| {
            let state = queued.get(object).copied();
            let live = match why {
                Queued::Sweep => matches!(state, Some(Queued::Sweep | Queued::HeldBack)),
                _ => state == Some(why),
            };
            if live && queued.remove(object) == Some(Queued::Sweep) {
                *swept -= 1;
            }
            live
        })?;
        self.admitted.insert(object.clone(), false);
        Some(object)
    }

    /// `object`'s reconcile ended: its place goes to the next in turn, and it queues again
    /// (at the back of its lane) if it changed meanwhile: then `true`. Unknown objects are
    /// ignored.
    pub fn finish<Q>(&mut self, lane: Lane, object: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: Eq + std::hash::Hash + ?Sized,
    {
        match self.admitted.remove_entry(object) {
            Some((object, true)) => {
                self.offer(lane, object);
                true
            }
            _ => false,
        }
    }

    /// `object` is gone (deleted, or nothing left to do for it): it no longer waits. Its
    /// entry in its lane is dropped when that lane's turn reaches it, without spending the
    /// turn; a reconcile of it under way ends as usual.
    pub fn withdraw<Q>(&mut self, object: &Q)
    where
        T: std::borrow::Borrow<Q>,
        Q: Eq + std::hash::Hash + ?Sized,
    {
        if self.queued.remove(object) == Some(Queued::Sweep) {
            self.swept -= 1;
        }
        self.went_ahead.remove(object);
        if let Some(changed) = self.admitted.get_mut(object) {
            *changed = false;
        }
    }

    /// Objects waiting for their turn.
    pub fn waiting(&self) -> usize {
        self.queued.len()
    }

    /// Objects let through and not finished.
    pub fn admitted(&self) -> usize {
        self.admitted.len()
    }
}

/// The objects waiting, per lane: lanes take turns, as
/// [`RoundRobin`](super::fair_gate::RoundRobin) serves them, and within a lane its changes go
/// before its swept objects.
#[derive(Debug)]
struct Lanes<T> {
    /// Lanes with something queued, in the order their turns come.
    turns: VecDeque<Lane>,
    queues: HashMap<Lane, LaneQueue<T>>,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Self { turns: VecDeque::new(), queues: HashMap::new() }
    }
}

#[derive(Debug)]
struct LaneQueue<T> {
    changes: VecDeque<T>,
    swept: VecDeque<T>,
    /// Changes let through since the lane's last swept object.
    changes_in_a_row: usize,
}

impl<T> Lanes<T> {
    fn push(&mut self, lane: Lane, object: T, why: Queued) {
        let queue = self.queues.entry(lane.clone()).or_insert_with(|| {
            self.turns.push_back(lane);
            LaneQueue { changes: VecDeque::new(), swept: VecDeque::new(), changes_in_a_row: 0 }
        });
        match why {
            Queued::Change => queue.changes.push_back(object),
            Queued::Sweep | Queued::HeldBack => queue.swept.push_back(object),
        }
    }

    /// The next object of the lane whose turn it is, dropping on the way the entries `live`
    /// rejects (withdrawn, or queued again as something else) without spending a turn; that
    /// lane goes to the end of the round if it has more.
    fn pop_live(&mut self, mut live: impl FnMut(&T, Queued) -> bool) -> Option<T> {
        while let Some(lane) = self.turns.pop_front() {
            let Some(queue) = self.queues.get_mut(&lane) else { continue };
            let found = queue.pop_live(&mut live);
            if queue.changes.is_empty() && queue.swept.is_empty() {
                self.queues.remove(&lane);
            } else {
                self.turns.push_back(lane);
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }
}

impl<T> LaneQueue<T> {
    fn pop_live(&mut self, live: &mut impl FnMut(&T, Queued) -> bool) -> Option<T> {
        let order = if self.changes_in_a_row >= CHANGES_PER_SWEPT {
            [Queued::Sweep, Queued::Change]
        } else {
            [Queued::Change, Queued::Sweep]
        };
        for why in order {
            let entries = match why {
                Queued::Change => &mut self.changes,
                Queued::Sweep | Queued::HeldBack => &mut self.swept,
            };
            while let Some(object) = entries.pop_front() {
                if live(&object, why) {
                    self.changes_in_a_row = match why {
                        Queued::Change => self.changes_in_a_row.saturating_add(1),
                        Queued::Sweep | Queued::HeldBack => 0,
                    };
                    return Some(object);
                }
            }
        }
        None
    }
}

/// One object, as admission keys it: shared between the queue and its index.
type Object<K> = Arc<ObjectRef<K>>;

/// A controller's admission: the handle its runner reports ends and retries to, and the
/// source of the stream of objects kube is given ([`Admission::admit`]). Cheap to clone.
pub struct Admission<K: Resource<DynamicType = ()> + 'static> {
    controller: &'static str,
    shared: Arc<Mutex<Shared<K>>>,
}

/// What [`Admission::letting_go_with`] is given.
type LetGo<K> = Arc<dyn Fn(&ObjectRef<K>) + Send + Sync>;

impl<K: Resource<DynamicType = ()> + 'static> Clone for Admission<K> {
    fn clone(&self) -> Self {
        Self { controller: self.controller, shared: self.shared.clone() }
    }
}

struct Shared<K: Resource<DynamicType = ()> + 'static> {
    queue: AdmissionQueue<Object<K>>,
    /// Failed objects waiting out their backoff, each once.
    retries: DelayQueue<Object<K>>,
    retry_keys: HashMap<Object<K>, DelayKey>,
    /// The admitted stream's task, woken when a place frees or a retry is added.
    waker: Option<Waker>,
    /// Set to how many objects wait for their turn, whenever that changes.
    waiting_gauge: Gauge<i64, AtomicI64>,
    /// Told of each object admission lets go of, so that what is kept per object elsewhere
    /// (its failure count) goes with it.
    let_go: LetGo<K>,
}

impl<K: Resource<DynamicType = ()> + 'static> Shared<K> {
    fn offer(&mut self, object: Object<K>) {
        self.queue.offer(object.namespace.clone(), object);
        self.publish_waiting();
    }

    /// `object` changed: reconciled at its turn, instead of any retry planned for it.
    fn changed(&mut self, object: Object<K>) {
        self.cancel_retry(&object);
        self.offer(object);
    }

    /// `object` is part of a sweep: reconciled behind the changes, instead of any retry
    /// planned for it.
    fn swept(&mut self, object: Object<K>) {
        self.cancel_retry(&object);
        self.queue.sweep(object.namespace.clone(), object);
        self.publish_waiting();
    }

    /// `object` is gone: it no longer waits, nor is it retried.
    fn withdraw(&mut self, object: &ObjectRef<K>) {
        self.queue.withdraw(object);
        self.cancel_retry(object);
        self.publish_waiting();
    }

    /// A change supersedes a retry: the object is reconciled now instead.
    fn cancel_retry(&mut self, object: &ObjectRef<K>) {
        if let Some(key) = self.retry_keys.remove(object) {
            self.retries.remove(&key);
        }
    }

    fn publish_waiting(&self) {
        self.waiting_gauge.set(i64::try_from(self.queue.waiting()).unwrap_or(i64::MAX));
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Admission<K> {
    /// Controller `controller`'s admission, letting `window` objects through at a time.
    pub fn new(controller: &'static str, window: usize) -> Self {
        let shared = Shared {
            queue: AdmissionQueue::new(window),
            retries: DelayQueue::new(),
            retry_keys: HashMap::new(),
            waker: None,
            waiting_gauge: Gauge::default(),
            let_go: Arc::new(|_| {}),
        };
        Self { controller, shared: Arc::new(Mutex::new(shared)) }
    }

    /// The same admission (every handle of it), calling `let_go` with each object it lets go
    /// of: deleted, or left the store (nothing to do for it) before its turn or its retry came.
    pub fn letting_go_with(self, let_go: impl Fn(&ObjectRef<K>) + Send + Sync + 'static) -> Self {
        self.lock().let_go = Arc::new(let_go);
        self
    }

    /// `object` changed and is to be reconciled: it waits for its turn, as a change a watch
    /// brought would. For a controller whose objects are offered by its own triggers
    /// ([`Admission::offered`]) rather than by one watch.
    pub fn offer(&self, object: ObjectRef<K>) {
        let mut shared = self.lock();
        shared.changed(Arc::new(object));
        wake(shared);
    }

    /// Each of `objects` is to be reconciled, in a pass over many (a start, a resync, a
    /// policy change): they wait behind the [offered](Admission::offer) changes, as the
    /// objects of a watch's list do.
    pub fn sweep(&self, objects: impl IntoIterator<Item = ObjectRef<K>>) {
        let mut shared = self.lock();
        objects.into_iter().for_each(|object| shared.swept(Arc::new(object)));
        wake(shared);
    }

    /// `object` is gone (deleted): it no longer waits, nor is it retried, and it is let go.
    pub fn withdraw(&self, object: &ObjectRef<K>) {
        let let_go = {
            let mut shared = self.lock();
            shared.withdraw(object);
            shared.let_go.clone()
        };
        let_go(object);
    }

    /// The stream to give kube for a controller whose objects are [offered](Admission::offer)
    /// rather than brought by a watch: each read from `store` when its turn comes (an object
    /// not in it by then is let go). Never ends: kube's shutdown stops it.
    pub fn offered<E>(&self, store: Store<K>) -> impl Stream<Item = Result<K, E>> + Send + use<K, E>
    where
        K: Clone + Send + Sync + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        self.admit(futures::stream::pending::<Result<Event<K>, E>>(), store)
    }

    /// The same admission, keeping `gauge` at the number of objects waiting (a metric).
    pub fn counting_waiters_in(self, gauge: Gauge<i64, AtomicI64>) -> Self {
        self.lock().waiting_gauge = gauge;
        self
    }

    /// The stream to give kube: the objects of `events` (a controller's watch events, once
    /// its reflector has applied them to `store`) queued per namespace and let through in
    /// turn, read again from `store` when their turn comes (an object gone from it by then
    /// is let go). The objects of a list are queued once it is complete, as a
    /// [sweep](Admission::sweep): the reflector holds them back from the store until then.
    /// Ends when `events` does.
    pub fn admit<S, E>(
        &self,
        events: S,
        store: Store<K>,
    ) -> impl Stream<Item = Result<K, E>> + Send + use<K, S, E>
    where
        S: Stream<Item = Result<Event<K>, E>> + Send + 'static,
        K: Clone + Send + Sync + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        Admitted { admission: self.clone(), events: events.boxed(), store, listed: Vec::new(), ended: false }
    }

    /// `object`'s reconcile ended (whatever its result): the next object's turn may come. If
    /// it changed meanwhile it queues again, and a retry its failure planned is dropped: the
    /// new reconcile plans its own if it fails too.
    pub fn finished(&self, object: &ObjectRef<K>) {
        let mut shared = self.lock();
        if shared.queue.finish(object.namespace.clone(), object) {
            shared.cancel_retry(object);
        }
        shared.publish_waiting();
        wake(shared);
    }

    /// `object` is to be reconciled again after `delay` (its backoff), through the queue.
    /// An earlier retry already planned is kept.
    pub fn retry_after(&self, object: &ObjectRef<K>, delay: Duration) {
        let mut shared = self.lock();
        let Shared { retries, retry_keys, .. } = &mut *shared;
        let deadline = tokio::time::Instant::now() + delay;
        match retry_keys.entry(Arc::new(object.clone())) {
            Entry::Occupied(planned) => {
                if deadline < retries.deadline(planned.get()) {
                    retries.reset_at(planned.get(), deadline);
                }
            }
            Entry::Vacant(unplanned) => {
                let key = retries.insert_at(unplanned.key().clone(), deadline);
                unplanned.insert(key);
            }
        }
        wake(shared);
    }

    /// Objects waiting for their turn.
    pub fn waiting(&self) -> usize {
        self.lock().queue.waiting()
    }

    fn lock(&self) -> MutexGuard<'_, Shared<K>> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Wakes the admitted stream after releasing the lock, so that it does not wake into it.
fn wake<K: Resource<DynamicType = ()> + 'static>(mut shared: MutexGuard<'_, Shared<K>>) {
    let waker = shared.waker.take();
    drop(shared);
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// The stream [`Admission::admit`] returns.
struct Admitted<K: Resource<DynamicType = ()> + 'static, E> {
    admission: Admission<K>,
    events: BoxStream<'static, Result<Event<K>, E>>,
    store: Store<K>,
    /// The objects of a list under way, queued when it is complete.
    listed: Vec<Object<K>>,
    ended: bool,
}

impl<K: Resource<DynamicType = ()> + 'static, E> Admitted<K, E> {
    fn hear(&mut self, event: Event<K>) {
        match event {
            Event::Init => self.listed.clear(),
            Event::InitApply(object) => self.listed.push(Arc::new(ObjectRef::from_obj(&object))),
            Event::InitDone => {
                let mut shared = self.admission.lock();
                self.listed.drain(..).for_each(|object| shared.swept(object));
                drop(shared);
                self.listed.shrink_to_fit();
            }
            Event::Apply(object) => self.admission.lock().changed(Arc::new(ObjectRef::from_obj(&object))),
            Event::Delete(object) => self.admission.withdraw(&ObjectRef::from_obj(&object)),
        }
    }
}

impl<K, E> Stream for Admitted<K, E>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    E: std::fmt::Display,
{
    type Item = Result<K, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        let mut more_input = true;
        for _ in 0..INPUT_SLICE {
            match this.events.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(event))) => this.hear(event),
                // Kept from kube, which would stop reading this stream (and so admitting
                // anything) for a backoff of its own; the watcher backs off already.
                Poll::Ready(Some(Err(error))) => {
                    warn!(
                        controller = this.admission.controller,
                        "watch failed, retrying with backoff: {error}"
                    );
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    more_input = false;
                    break;
                }
            }
        }
        let mut shared = this.admission.lock();
        while let Poll::Ready(Some(due)) = shared.retries.poll_expired(cx) {
            let object = due.into_inner();
            shared.retry_keys.remove(&object);
            shared.offer(object);
        }
        let mut gone = Vec::new();
        let mut next = None;
        while let Some(object) = shared.queue.admit() {
            match this.store.get(&object) {
                Some(latest) => {
                    next = Some(latest);
                    break;
                }
                // Deleted while it waited, or no longer kept (no work left): let it go.
                None => {
                    shared.queue.finish(object.namespace.clone(), &object);
                    gone.push(object);
                }
            }
        }
        shared.publish_waiting();
        if let Some(latest) = next {
            drop(shared);
            let_go_of(&this.admission, gone);
            return Poll::Ready(Some(Ok(latest.as_ref().clone())));
        }
        if more_input {
            // The slice is used up, not the input: come back after other tasks had a turn.
            cx.waker().wake_by_ref();
        } else if !shared.waker.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
            shared.waker = Some(cx.waker().clone());
        }
        drop(shared);
        let_go_of(&this.admission, gone);
        Poll::Pending
    }
}

fn let_go_of<K: Resource<DynamicType = ()> + 'static>(admission: &Admission<K>, gone: Vec<Object<K>>) {
    if gone.is_empty() {
        return;
    }
    let let_go = admission.lock().let_go.clone();
    for object in gone {
        let_go(&object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    fn lane(name: &str) -> Lane {
        Some(name.to_owned())
    }

    fn admit_all(queue: &mut AdmissionQueue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.admit()).collect()
    }

    #[test]
    fn namespaces_take_turns_whatever_order_their_objects_came_in() {
        let mut queue = AdmissionQueue::new(10);
        for object in ["a1", "a2", "a3", "a4"] {
            queue.offer(lane("a"), object);
        }
        queue.offer(lane("b"), "b1");
        queue.offer(lane("c"), "c1");
        assert_eq!(admit_all(&mut queue), ["a1", "b1", "c1", "a2", "a3", "a4"]);
    }

    #[test]
    fn no_more_than_the_window_is_let_through_until_one_finishes() {
        let mut queue = AdmissionQueue::new(2);
        for object in ["a1", "a2", "a3"] {
            queue.offer(lane("a"), object);
        }
        assert_eq!(admit_all(&mut queue), ["a1", "a2"]);
        assert_eq!((queue.admitted(), queue.waiting()), (2, 1));
        queue.finish(lane("a"), &"a1");
        assert_eq!(admit_all(&mut queue), ["a3"]);
    }

    #[test]
    fn an_object_that_changes_while_it_waits_waits_once() {
        let mut queue = AdmissionQueue::new(10);
        for _ in 0..3 {
            queue.offer(lane("a"), "a1");
        }
        assert_eq!(queue.waiting(), 1);
        assert_eq!(admit_all(&mut queue), ["a1"]);
    }

    #[test]
    fn a_change_goes_ahead_of_a_sweep_and_a_swept_object_that_changes_moves_ahead_once() {
        let mut queue = AdmissionQueue::new(100);
        for object in ["s1", "s2", "s3"] {
            queue.sweep(None, object);
        }
        queue.offer(None, "new");
        queue.offer(None, "s3");
        queue.sweep(None, "new");
        queue.sweep(None, "s1");
        assert_eq!(queue.waiting(), 4);
        assert_eq!(admit_all(&mut queue), ["new", "s3", "s1", "s2"]);
        assert_eq!(queue.waiting(), 0);
    }

    #[test]
    fn a_stream_of_changes_lets_a_swept_object_through_every_few() {
        let mut queue = AdmissionQueue::new(100);
        queue.sweep(None, "s1");
        queue.sweep(None, "s2");
        let changes = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"];
        changes.into_iter().for_each(|change| queue.offer(None, change));
        let order = admit_all(&mut queue);
        assert_eq!(order, ["c1", "c2", "c3", "c4", "s1", "c5", "c6", "c7", "c8", "s2", "c9", "c10"]);
    }

    #[test]
    fn one_namespace_s_changes_never_go_ahead_of_another_namespace_s_sweep() {
        let mut queue = AdmissionQueue::new(100);
        queue.sweep(lane("b"), "b1");
        queue.sweep(lane("b"), "b2");
        for object in ["a1", "a2", "a3", "a4", "a5"] {
            queue.offer(lane("a"), object);
        }
        assert_eq!(admit_all(&mut queue), ["b1", "a1", "b2", "a2", "a3", "a4", "a5"]);
    }

    #[test]
    fn an_object_changing_without_end_goes_ahead_of_a_sweep_once_then_waits_with_it() {
        let mut queue = AdmissionQueue::new(1);
        for object in ["s1", "s2", "s3", "s4"] {
            queue.sweep(None, object);
        }
        let mut order = Vec::new();
        while let Some(object) = {
            // A tenant edits RoleBindings in its namespace as fast as kopper passes over it.
            queue.offer(None, "churn");
            queue.admit()
        } {
            order.push(object);
            queue.finish(None, &object);
            if order.len() > 10 {
                break;
            }
        }
        assert_eq!(order[..6], ["churn", "s1", "s2", "s3", "s4", "churn"], "the sweep ends");
        queue.sweep(None, "s5");
        queue.offer(None, "churn");
        assert_eq!(queue.admit(), Some("churn"), "in the next sweep, its change goes ahead once again");
    }

    #[test]
    fn a_new_sweep_lets_each_change_go_ahead_again_and_held_back_changes_keep_no_sweep_going() {
        let mut queue = AdmissionQueue::new(1);
        queue.sweep(None, "s1");
        queue.offer(None, "c");
        assert_eq!(queue.admit(), Some("c"));
        queue.finish(None, &"c");
        queue.offer(None, "c");
        assert_eq!(queue.admit(), Some("s1"), "its second change waits with the sweep");
        queue.finish(None, &"s1");
        assert_eq!(queue.admit(), Some("c"));
        queue.finish(None, &"c");
        // The next sweep starts with no change offered in between.
        queue.sweep(None, "s2");
        queue.offer(None, "c");
        assert_eq!(queue.admit(), Some("c"), "a new sweep: it goes ahead once again");
        queue.finish(None, &"c");
        queue.offer(None, "c");
        assert_eq!(queue.admit(), Some("s2"));
        queue.finish(None, &"s2");
        // Only the held-back change waits, with the swept objects: no sweep waits, so the
        // next change goes ahead as changes do.
        queue.offer(None, "d");
        assert_eq!(queue.admit(), Some("d"));
        queue.finish(None, &"d");
        assert_eq!(queue.admit(), Some("c"));
        queue.finish(None, &"c");
        queue.sweep(None, "s3");
        queue.offer(None, "c");
        assert_eq!(queue.admit(), Some("c"), "a sweep started: c goes ahead once");
    }

    #[test]
    fn a_sweep_of_an_object_being_reconciled_queues_it_again_when_it_ends() {
        let mut queue = AdmissionQueue::new(1);
        queue.offer(None, "x");
        assert_eq!(queue.admit(), Some("x"));
        queue.sweep(None, "x");
        assert_eq!(queue.waiting(), 0, "never twice at once");
        assert!(queue.finish(None, &"x"));
        assert_eq!(queue.admit(), Some("x"));
    }

    #[test]
    fn a_withdrawn_swept_object_swept_or_changed_again_waits_once() {
        let mut queue = AdmissionQueue::new(100);
        queue.sweep(None, "a");
        queue.offer(None, "b");
        queue.withdraw(&"a");
        queue.withdraw(&"b");
        assert_eq!(queue.waiting(), 0);
        queue.offer(None, "a");
        queue.sweep(None, "b");
        assert_eq!(admit_all(&mut queue), ["a", "b"], "each once, however it was queued before");
    }

    #[test]
    fn a_change_during_a_reconcile_queues_the_object_again_when_it_ends() {
        let mut queue = AdmissionQueue::new(10);
        queue.offer(lane("a"), "a1");
        assert_eq!(admit_all(&mut queue), ["a1"]);
        queue.offer(lane("a"), "a1");
        assert_eq!(admit_all(&mut queue), Vec::<&str>::new(), "never twice at once");
        queue.finish(lane("a"), &"a1");
        assert_eq!(admit_all(&mut queue), ["a1"]);
        queue.finish(lane("a"), &"a1");
        assert_eq!((queue.admitted(), queue.waiting()), (0, 0), "unchanged since: done");
    }

    #[test]
    fn ends_of_objects_never_let_through_change_nothing() {
        let mut queue = AdmissionQueue::new(1);
        queue.offer(lane("a"), "a1");
        queue.offer(lane("a"), "a2");
        assert_eq!(admit_all(&mut queue), ["a1"]);
        queue.finish(lane("a"), &"a2");
        queue.finish(lane("b"), &"b9");
        assert_eq!((queue.admitted(), queue.waiting()), (1, 1));
    }

    /// A store holding `names` in namespace `namespace`, and the objects as a stream would
    /// bring them.
    fn config_maps(
        store: &mut reflector::store::Writer<ConfigMap>,
        namespace: &str,
        names: &[&str],
    ) -> Vec<ConfigMap> {
        names
            .iter()
            .map(|name| {
                let mut object = ConfigMap::default();
                object.metadata.name = Some((*name).into());
                object.metadata.namespace = Some(namespace.into());
                store.apply_watcher_event(&Event::Apply(object.clone()));
                object
            })
            .collect()
    }

    /// A watch that brought `objects` one by one, and then nothing.
    fn applied(objects: Vec<ConfigMap>) -> impl Stream<Item = Result<Event<ConfigMap>, String>> {
        futures::stream::iter(objects)
            .map(|object| Ok(Event::Apply(object)))
            .chain(futures::stream::pending())
    }

    fn names<E>(objects: &[Result<ConfigMap, E>]) -> Vec<String> {
        objects.iter().map(|object| object.as_ref().ok().unwrap().metadata.name.clone().unwrap()).collect()
    }

    /// What the stream lets through now, without waiting.
    fn ready<E, S: Stream<Item = Result<ConfigMap, E>> + Unpin>(stream: &mut S) -> Vec<Result<ConfigMap, E>> {
        let mut cx = TaskContext::from_waker(Waker::noop());
        std::iter::from_fn(|| match stream.poll_next_unpin(&mut cx) {
            Poll::Ready(item) => item,
            Poll::Pending => None,
        })
        .collect()
    }

    /// A watch the test feeds into an admission, over a store holding config maps of
    /// namespace "a".
    struct Fed {
        admitted: Pin<Box<dyn Stream<Item = Result<ConfigMap, String>> + Send>>,
        events: futures::channel::mpsc::UnboundedSender<Result<Event<ConfigMap>, String>>,
        objects: Vec<ConfigMap>,
        writer: reflector::store::Writer<ConfigMap>,
    }

    impl Fed {
        fn new(admission: &Admission<ConfigMap>, names: &[&str]) -> Self {
            let (store, mut writer) = reflector::store();
            let objects = config_maps(&mut writer, "a", names);
            let (events, input) = futures::channel::mpsc::unbounded();
            Self { admitted: Box::pin(admission.admit(input, store)), events, objects, writer }
        }

        fn send(&self, event: Result<Event<ConfigMap>, String>) {
            self.events.unbounded_send(event).unwrap();
        }

        fn apply(&self, index: usize) {
            self.send(Ok(Event::Apply(self.objects[index].clone())));
        }

        /// The names of what the stream lets through now.
        fn ready(&mut self) -> Vec<String> {
            names(&ready(&mut self.admitted))
        }
    }

    #[tokio::test]
    async fn kube_is_given_a_window_of_objects_in_turn_and_the_next_as_each_ends() {
        let (store, mut writer) = reflector::store();
        let mut objects = config_maps(&mut writer, "a", &["a1", "a2", "a3"]);
        objects.extend(config_maps(&mut writer, "b", &["b1"]));
        let admission = Admission::<ConfigMap>::new("test", 2);
        let mut admitted = Box::pin(admission.admit(applied(objects), store));

        assert_eq!(names(&ready(&mut admitted)), ["a1", "b1"]);
        assert_eq!(admission.waiting(), 2);
        admission.finished(&ObjectRef::new("b1").within("b"));
        assert_eq!(names(&ready(&mut admitted)), ["a2"]);
    }

    #[tokio::test]
    async fn an_object_gone_from_the_store_while_it_waited_is_let_go() {
        let (store, mut writer) = reflector::store();
        let objects = config_maps(&mut writer, "a", &["a1", "a2"]);
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut admitted = Box::pin(admission.admit(applied(objects.clone()), store));
        assert_eq!(names(&ready(&mut admitted)), ["a1"]);
        writer.apply_watcher_event(&Event::Delete(objects[1].clone()));
        admission.finished(&ObjectRef::new("a1").within("a"));
        assert!(ready(&mut admitted).is_empty());
        assert_eq!((admission.waiting(), admission.lock().queue.admitted()), (0, 0), "nothing held for it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_object_comes_back_through_the_queue_after_its_backoff() {
        let (store, mut writer) = reflector::store();
        let objects = config_maps(&mut writer, "a", &["a1"]);
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut admitted = Box::pin(admission.admit(applied(objects), store));
        assert_eq!(names(&ready(&mut admitted)), ["a1"]);
        let a1 = ObjectRef::new("a1").within("a");
        admission.retry_after(&a1, Duration::from_secs(5));
        admission.retry_after(&a1, Duration::from_secs(60));
        admission.finished(&a1);
        assert!(ready(&mut admitted).is_empty(), "not before its backoff");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(names(&ready(&mut admitted)), ["a1"], "the earlier retry holds");
        admission.finished(&a1);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(ready(&mut admitted).is_empty(), "and only once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_supersedes_a_planned_retry() {
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut fed = Fed::new(&admission, &["a1"]);
        fed.apply(0);
        assert_eq!(fed.ready(), ["a1"]);
        let a1 = ObjectRef::new("a1").within("a");
        admission.retry_after(&a1, Duration::from_secs(5));
        admission.finished(&a1);
        fed.apply(0);
        assert_eq!(fed.ready(), ["a1"], "the change is reconciled at once");
        admission.finished(&a1);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(fed.ready().is_empty(), "the retry it superseded does not run");
    }

    /// A reflector keeps a list's objects from its store until the list is complete (a
    /// relist keeps the old ones meanwhile): they are not let go as gone before then.
    #[tokio::test]
    async fn the_objects_of_a_list_are_let_through_once_the_store_has_them() {
        use kube::runtime::WatchStreamExt;
        let (store, writer) = reflector::store::<ConfigMap>();
        let (events, input) =
            futures::channel::mpsc::unbounded::<Result<Event<ConfigMap>, kube::runtime::watcher::Error>>();
        let admission = Admission::<ConfigMap>::new("test", 10);
        let mut admitted = Box::pin(admission.admit(input.reflect(writer), store));
        let unstored = |name: &str, namespace: &str| {
            let mut object = ConfigMap::default();
            object.metadata.name = Some(name.into());
            object.metadata.namespace = Some(namespace.into());
            object
        };
        events.unbounded_send(Ok(Event::Init)).unwrap();
        events.unbounded_send(Ok(Event::InitApply(unstored("a1", "a")))).unwrap();
        events.unbounded_send(Ok(Event::InitApply(unstored("b1", "b")))).unwrap();
        assert!(ready(&mut admitted).is_empty(), "not before the list is complete");
        events.unbounded_send(Ok(Event::InitDone)).unwrap();
        assert_eq!(names(&ready(&mut admitted)), ["a1", "b1"]);
    }

    #[tokio::test]
    async fn a_change_the_watch_brings_after_a_list_goes_ahead_of_the_list_s_objects() {
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut fed = Fed::new(&admission, &["a1", "a2", "a3"]);
        fed.send(Ok(Event::Init));
        (0..3).for_each(|index| fed.send(Ok(Event::InitApply(fed.objects[index].clone()))));
        fed.send(Ok(Event::InitDone));
        let mut admitted = fed.ready();
        fed.apply(2);
        admitted.extend(fed.ready());
        for name in ["a1", "a3", "a2"] {
            admission.finished(&ObjectRef::new(name).within("a"));
            admitted.extend(fed.ready());
        }
        assert_eq!(admitted, ["a1", "a3", "a2"], "a3 changed after the list: it goes first");
    }

    #[test]
    fn an_object_withdrawn_while_it_waits_neither_counts_nor_takes_a_turn() {
        let mut queue = AdmissionQueue::new(10);
        for object in ["a1", "a2", "a3"] {
            queue.offer(lane("a"), object);
        }
        queue.offer(lane("b"), "b1");
        queue.withdraw(&"a1");
        queue.withdraw(&"a2");
        assert_eq!(queue.waiting(), 2);
        assert_eq!(admit_all(&mut queue), ["a3", "b1"]);
    }

    #[test]
    fn an_object_withdrawn_during_its_reconcile_is_not_queued_again() {
        let mut queue = AdmissionQueue::new(10);
        queue.offer(lane("a"), "a1");
        assert_eq!(admit_all(&mut queue), ["a1"]);
        queue.offer(lane("a"), "a1");
        queue.withdraw(&"a1");
        assert!(!queue.finish(lane("a"), &"a1"));
        assert_eq!((queue.admitted(), queue.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_watch_error_does_not_stop_objects_being_let_through() {
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut fed = Fed::new(&admission, &["a1", "a2"]);
        fed.apply(0);
        fed.send(Err("the watch failed".into()));
        fed.apply(1);
        assert_eq!(fed.ready(), ["a1"], "kube is not handed the error");
        admission.finished(&ObjectRef::new("a1").within("a"));
        assert_eq!(fed.ready(), ["a2"]);
    }

    #[tokio::test]
    async fn objects_deleted_or_gone_before_their_turn_are_let_go_and_reported() {
        let let_go = Arc::new(Mutex::new(Vec::new()));
        let seen = let_go.clone();
        let admission = Admission::<ConfigMap>::new("test", 1)
            .letting_go_with(move |object| seen.lock().unwrap().push(object.name.clone()));
        let mut fed = Fed::new(&admission, &["a1", "a2", "a3"]);
        (0..3).for_each(|index| fed.apply(index));
        assert_eq!(fed.ready(), ["a1"]);
        // a2 is deleted; a3 leaves the store without a Delete event reaching admission.
        let (a2, a3) = (fed.objects[1].clone(), fed.objects[2].clone());
        fed.writer.apply_watcher_event(&Event::Delete(a2.clone()));
        fed.send(Ok(Event::Delete(a2)));
        fed.writer.apply_watcher_event(&Event::Delete(a3));
        assert!(fed.ready().is_empty());
        assert_eq!(admission.waiting(), 1, "a2 no longer waits");
        admission.finished(&ObjectRef::new("a1").within("a"));
        assert!(fed.ready().is_empty());
        assert_eq!(*let_go.lock().unwrap(), ["a2", "a3"]);
        assert_eq!((admission.waiting(), admission.lock().queue.admitted()), (0, 0));
    }

    #[tokio::test]
    async fn offered_objects_wait_once_each_and_kube_holds_no_more_than_the_window() {
        let (store, mut writer) = reflector::store();
        let objects = config_maps(&mut writer, "a", &["n1", "n2", "n3", "n4"]);
        let let_go = Arc::new(Mutex::new(Vec::new()));
        let seen = let_go.clone();
        let admission = Admission::<ConfigMap>::new("test", 2)
            .letting_go_with(move |object| seen.lock().unwrap().push(object.name.clone()));
        let mut admitted = Box::pin(admission.offered::<String>(store));
        assert!(ready(&mut admitted).is_empty(), "nothing offered, nothing let through");

        // A policy change and a resync each offer every object: each waits once.
        let every = || {
            objects
                .iter()
                .map(|object| ObjectRef::new(object.metadata.name.as_deref().unwrap_or_default()).within("a"))
        };
        admission.sweep(every());
        admission.sweep(every());
        assert_eq!(admission.waiting(), 4);
        assert_eq!(names(&ready(&mut admitted)), ["n1", "n2"], "the window, and no more");

        // n3 is deleted; an object offered by name but not in the store is let go at its turn.
        admission.withdraw(&ObjectRef::new("n3").within("a"));
        admission.offer(ObjectRef::new("never-stored").within("a"));
        admission.finished(&ObjectRef::new("n1").within("a"));
        assert_eq!(names(&ready(&mut admitted)), ["n4"]);
        admission.finished(&ObjectRef::new("n2").within("a"));
        assert!(ready(&mut admitted).is_empty());
        assert_eq!(*let_go.lock().unwrap(), ["n3", "never-stored"]);
        assert_eq!((admission.waiting(), admission.lock().queue.admitted()), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_planned_by_a_failure_gives_way_to_a_change_made_during_it() {
        let admission = Admission::<ConfigMap>::new("test", 1);
        let mut fed = Fed::new(&admission, &["a1"]);
        fed.apply(0);
        assert_eq!(fed.ready(), ["a1"]);
        fed.apply(0);
        assert!(fed.ready().is_empty(), "never twice at once");
        let a1 = ObjectRef::new("a1").within("a");
        admission.retry_after(&a1, Duration::from_secs(5));
        admission.finished(&a1);
        assert_eq!(fed.ready(), ["a1"], "the change is reconciled at once");
        admission.finished(&a1);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(fed.ready().is_empty(), "the retry it superseded does not run");
    }
}
