//! A gate of a fixed number of reconcile permits, shared between namespaces in turn.
//!
//! kube-runtime's `Controller` runs its queue first come, first served: with a bounded
//! concurrency, a namespace that queues thousands of objects (cheap for it: each is refused
//! at once) delays every other namespace's first reconcile behind all of them. So each
//! controller runs its `Controller` unbounded and every reconcile first takes a permit here.
//! Waiters queue per namespace (cluster-scoped objects share one queue of their own), and a
//! freed permit goes to the next namespace in turn, one waiter per namespace per round.
//!
//! The bound this gives: once a namespace has a reconcile waiting, at most one reconcile of
//! each other namespace that has work waiting starts before it (plus those already running
//! when it arrived). A namespace with 3,000 queued objects gets one turn per round like a
//! namespace with one.
//!
//! Waiting costs a parked future and a queue entry per waiting object; kube's scheduler
//! already holds one entry per queued object, and it never runs one object twice at once,
//! so there is at most one waiter per object.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

/// Items queued per key and served one key at a time, in turn: the next item comes from the
/// key after the last one served that has anything queued. Keys with nothing queued take no
/// memory.
#[derive(Debug)]
pub struct RoundRobin<K, T> {
    /// Keys with something queued, in the order their turns come.
    turns: VecDeque<K>,
    queues: HashMap<K, VecDeque<T>>,
    len: usize,
}

impl<K: Clone + Eq + Hash, T> Default for RoundRobin<K, T> {
    fn default() -> Self {
        Self { turns: VecDeque::new(), queues: HashMap::new(), len: 0 }
    }
}

impl<K: Clone + Eq + Hash, T> RoundRobin<K, T> {
    /// Queues `item` behind `key`'s others; a key with nothing queued joins the end of the
    /// round.
    pub fn push(&mut self, key: K, item: T) {
        let queue = self.queues.entry(key.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(key);
        }
        queue.push_back(item);
        self.len += 1;
    }

    /// The oldest item of the key whose turn it is; that key goes to the end of the round if
    /// it has more.
    pub fn pop(&mut self) -> Option<T> {
        let key = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&key)?;
        let item = queue.pop_front();
        self.len -= usize::from(item.is_some());
        if queue.is_empty() {
            self.queues.remove(&key);
        } else {
            self.turns.push_back(key);
        }
        item
    }

    /// [`pop`](Self::pop), dropping the items `live` rejects on the way: those at the front
    /// of the lane whose turn it is go without spending its turn, and a lane left with none
    /// passes the turn on.
    pub fn pop_live(&mut self, mut live: impl FnMut(&T) -> bool) -> Option<T> {
        while let Some(key) = self.turns.pop_front() {
            let Some(queue) = self.queues.get_mut(&key) else { continue };
            let mut found = None;
            while let Some(item) = queue.pop_front() {
                self.len -= 1;
                if live(&item) {
                    found = Some(item);
                    break;
                }
            }
            if queue.is_empty() {
                self.queues.remove(&key);
            } else {
                self.turns.push_back(key);
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Removes every queued item.
    fn drain(&mut self) -> Vec<T> {
        self.turns.clear();
        self.len = 0;
        self.queues.drain().flat_map(|(_, queue)| queue).collect()
    }
}

/// The key of an object's queue: its namespace, `None` for cluster-scoped objects.
pub type Lane = Option<String>;

/// `permits` reconciles at a time, handed out to namespaces in turn. Cheap to clone.
#[derive(Clone, Debug)]
pub struct FairGate {
    inner: Arc<Mutex<GateState>>,
}

#[derive(Debug)]
struct GateState {
    /// Permits not held by anyone; `None`: unbounded.
    free: Option<usize>,
    waiting: RoundRobin<Lane, oneshot::Sender<Permit>>,
    closed: bool,
    /// Set to how many wait, whenever that changes.
    waiting_gauge: Gauge<i64, AtomicI64>,
}

impl GateState {
    fn publish_waiting(&self) {
        self.waiting_gauge.set(i64::try_from(self.waiting.len()).unwrap_or(i64::MAX));
    }
}

/// Held while a reconcile runs; dropping it hands the permit to the next waiter in turn.
#[derive(Debug)]
pub struct Permit {
    gate: Option<FairGate>,
}

impl FairGate {
    /// A gate of `permits` permits; 0 for one that never makes anyone wait.
    pub fn new(permits: usize) -> Self {
        let free = (permits > 0).then_some(permits);
        let state = GateState {
            free,
            waiting: RoundRobin::default(),
            closed: false,
            waiting_gauge: Gauge::default(),
        };
        Self { inner: Arc::new(Mutex::new(state)) }
    }

    /// The same gate, keeping `gauge` at the number of reconciles waiting (a metric).
    pub fn counting_waiters_in(self, gauge: Gauge<i64, AtomicI64>) -> Self {
        self.lock().waiting_gauge = gauge;
        self
    }

    /// Waits for a permit in `lane`'s queue. `None` once the gate is closed: the caller
    /// gives up its turn (the process is shutting down).
    pub async fn acquire(&self, lane: Lane) -> Option<Permit> {
        let receiver = {
            let mut state = self.lock();
            if state.closed {
                return None;
            }
            let nobody_waiting = state.waiting.is_empty();
            match &mut state.free {
                None => return Some(Permit { gate: None }),
                Some(free) if *free > 0 && nobody_waiting => {
                    *free -= 1;
                    return Some(Permit { gate: Some(self.clone()) });
                }
                Some(_) => {
                    let (sender, receiver) = oneshot::channel();
                    state.waiting.push(lane, sender);
                    state.publish_waiting();
                    receiver
                }
            }
        };
        receiver.await.ok()
    }

    /// Wakes every waiter empty-handed and turns away whoever comes later, so that a
    /// shutdown waits only for the reconciles that hold a permit.
    pub fn close(&self) {
        let waiters = {
            let mut state = self.lock();
            state.closed = true;
            let waiters = state.waiting.drain();
            state.publish_waiting();
            waiters
        };
        drop(waiters);
    }

    /// Reconciles waiting for a permit.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Hands a freed permit to the next waiter in turn that is still waiting, or frees it.
    fn release(&self) {
        let mut state = self.lock();
        while let Some(waiter) = state.waiting.pop() {
            state.publish_waiting();
            match waiter.send(Permit { gate: Some(self.clone()) }) {
                Ok(()) => return,
                // That waiter gave up; its permit comes back here, and is not released twice.
                Err(mut unused) => unused.gate = None,
            }
        }
        if let Some(free) = &mut state.free {
            *free += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &str) -> Lane {
        Some(name.to_owned())
    }

    #[test]
    fn items_dropped_on_the_way_spend_no_turn() {
        let mut queue = RoundRobin::default();
        for item in ["a-dead-1", "a-dead-2", "a1"] {
            queue.push(lane("a"), item);
        }
        queue.push(lane("b"), "b-dead");
        queue.push(lane("c"), "c1");
        let live = |item: &&str| !item.contains("dead");
        assert_eq!(queue.pop_live(live), Some("a1"));
        assert_eq!(queue.pop_live(live), Some("c1"), "b had nothing live: its turn passes on");
        assert_eq!(queue.pop_live(live), None);
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn keys_are_served_in_turn_one_item_each() {
        let mut queue = RoundRobin::default();
        for n in 0..3 {
            queue.push("burst", format!("burst-{n}"));
        }
        queue.push("quiet", "quiet-0".to_owned());
        queue.push("other", "other-0".to_owned());
        let order: Vec<String> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(order, ["burst-0", "quiet-0", "other-0", "burst-1", "burst-2"]);
        assert!(queue.is_empty());
        assert!(queue.queues.is_empty(), "keys with nothing queued are forgotten");
    }

    #[test]
    fn a_key_that_arrives_behind_a_burst_waits_one_item_per_other_key() {
        let mut queue = RoundRobin::default();
        for n in 0..3_000 {
            queue.push("burst", n);
        }
        queue.pop();
        queue.push("late", 10_000);
        assert_eq!(queue.pop(), Some(1), "the burst's turn was already due");
        assert_eq!(queue.pop(), Some(10_000));
        assert_eq!(queue.len(), 2_998);
    }

    #[tokio::test]
    async fn a_namespace_behind_a_burst_gets_the_next_free_permit() {
        let gate = FairGate::new(1);
        let served = Arc::new(Mutex::new(Vec::new()));
        let running = gate.acquire(lane("burst")).await.unwrap();
        let mut waiters: Vec<_> =
            (0..100).map(|_| tokio::spawn(take_turn(gate.clone(), "burst", served.clone()))).collect();
        wait_until_waiting(&gate, 100).await;
        waiters.push(tokio::spawn(take_turn(gate.clone(), "quiet", served.clone())));
        wait_until_waiting(&gate, 101).await;
        drop(running);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        let served = served.lock().unwrap();
        assert_eq!(served.len(), 101);
        assert_eq!(served[..2], ["burst", "quiet"], "the burst's turn was due, then the quiet namespace's");
    }

    async fn take_turn(gate: FairGate, name: &'static str, served: Arc<Mutex<Vec<&'static str>>>) {
        let _permit = gate.acquire(lane(name)).await.unwrap();
        served.lock().unwrap().push(name);
    }

    #[tokio::test]
    async fn permits_bound_how_many_hold_one_and_come_back_when_dropped() {
        let gate = FairGate::new(2);
        let first = gate.acquire(None).await.unwrap();
        let second = gate.acquire(lane("a")).await.unwrap();
        let third = tokio::spawn(wait_for(gate.clone(), "a"));
        wait_until_waiting(&gate, 1).await;
        drop(first);
        assert!(third.await.unwrap().0.is_some());
        drop(second);
        assert!(gate.acquire(lane("b")).await.is_some());
    }

    #[tokio::test]
    async fn the_gauge_follows_how_many_wait() {
        let gauge = Gauge::<i64, AtomicI64>::default();
        let gate = FairGate::new(1).counting_waiters_in(gauge.clone());
        let held = gate.acquire(lane("a")).await.unwrap();
        let waiters: Vec<_> = (0..3).map(|_| tokio::spawn(wait_for(gate.clone(), "b"))).collect();
        wait_until_waiting(&gate, 3).await;
        assert_eq!(gauge.get(), 3);
        drop(held);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(gauge.get(), 0);
    }

    #[tokio::test]
    async fn closing_wakes_waiters_empty_handed_and_turns_away_newcomers() {
        let gate = FairGate::new(1);
        let held = gate.acquire(lane("a")).await.unwrap();
        let waiter = tokio::spawn(wait_for(gate.clone(), "b"));
        wait_until_waiting(&gate, 1).await;
        gate.close();
        assert!(waiter.await.unwrap().0.is_none());
        assert!(gate.acquire(lane("c")).await.is_none());
        drop(held);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_does_not_lose_the_permit() {
        let gate = FairGate::new(1);
        let held = gate.acquire(lane("a")).await.unwrap();
        let gave_up = tokio::spawn(wait_for(gate.clone(), "b"));
        wait_until_waiting(&gate, 1).await;
        gave_up.abort();
        let _ = gave_up.await;
        drop(held);
        assert!(gate.acquire(lane("c")).await.is_some(), "the permit came back");
    }

    #[test]
    fn an_unbounded_gate_never_makes_anyone_wait() {
        let gate = FairGate::new(0);
        let permits: Vec<_> = (0..10).map(|_| gate.acquire(None)).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for permit in permits {
            assert!(runtime.block_on(permit).is_some());
        }
    }

    async fn wait_for(gate: FairGate, name: &str) -> (Option<()>, Option<Permit>) {
        let permit = gate.acquire(lane(name)).await;
        (permit.as_ref().map(|_| ()), permit)
    }

    async fn wait_until_waiting(gate: &FairGate, count: usize) {
        let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while gate.waiting() != count {
            assert!(tokio::time::Instant::now() < give_up, "{} waiting, not {count}", gate.waiting());
            tokio::task::yield_now().await;
        }
    }
}
