//! Wake-ups of a rule's controller, paced per rule: the first after a quiet spell goes on at
//! once, and those of a burst are merged into one that goes on when [`MIN_WAKE_GAP`] has
//! passed since the last.
//!
//! A wake-up that only asks for the rule's status to be brought up to date
//! ([`Urgency::Status`]: [`new_namespaces`](super::super::new_namespaces) has already
//! written the copies a new namespace wants) waits longer: until [`STATUS_IDLE_FACTOR`]
//! times as long as the rule's last pass took (wall time, writes included) has passed since
//! that pass began, and [`MAX_STATUS_WAIT`] at most. A stream of new namespaces then leaves a rule's passes
//! running a quarter of the time at most (while a pass takes under a quarter of
//! [`MAX_STATUS_WAIT`]), and the namespaces served meanwhile do not wait behind them. Any
//! other wake-up brings a held one forward.
//!
//! A rule's pass looks at every namespace, so its cost grows with the cluster. A debounce
//! would bound how often passes run, but it delays every change, a lone source update
//! included, by its whole period. Paced wake-ups serve a lone change at once and still give
//! a rule at most one pass per gap in a burst (a thousand namespaces created by a script,
//! sources edited in a loop). Nothing waits in the controller meanwhile: a held
//! wake-up takes no reconcile slot.
//!
//! Wake-ups that go on leave this stream as fast as the controller takes them (kube's
//! scheduler reads its triggers whether or not a reconcile could start), so the stream is
//! no queue that work waits in: which rule's pass runs next is decided by the runtime's
//! [`FairGate`](crate::runtime::fair_gate::FairGate), namespace by namespace.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::Instant;

/// The least time between two wake-ups of one rule that go on.
pub const MIN_WAKE_GAP: Duration = Duration::from_millis(100);

/// A wake-up for status only goes on once this many times the rule's last pass has passed
/// since that pass began: its passes then run a quarter of the time at most (up to
/// [`MAX_STATUS_WAIT`]).
pub const STATUS_IDLE_FACTOR: u32 = 4;

/// The longest a wake-up for status only waits after the rule's last pass began, however
/// long that pass took (a fan-out to thousands of namespaces, a throttled client).
pub const MAX_STATUS_WAIT: Duration = Duration::from_secs(30);

/// What a rule's controller hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal<T> {
    /// Wake the rule.
    Wake(T, Urgency),
    /// The rule's pass took this long.
    PassTook(T, Duration),
}

impl Signal<()> {
    /// The same signal about `key`.
    pub fn about<T>(self, key: T) -> Signal<T> {
        match self {
            Self::Wake((), urgency) => Signal::Wake(key, urgency),
            Self::PassTook((), took) => Signal::PassTook(key, took),
        }
    }
}

/// Why a rule is woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Something its copies depend on changed.
    Now,
    /// Only its status is behind what was done outside its passes.
    Status,
    /// Someone else changed or deleted one of its copies (or one where it wants a copy):
    /// paced as [`Urgency::Status`] is, by what its passes cost. Whoever edits copies in a
    /// loop (a tenant, in a namespace an admin's rule copies into) then costs kopper a
    /// quarter of the time at most, not a pass over every namespace per edit.
    Repair,
}

/// `signals`' wake-ups, paced per key: by `gap`, and wake-ups for status by the time the
/// key's last pass took too. Ends when `signals` ends.
pub fn paced<T, S>(signals: S, gap: Duration) -> impl Stream<Item = T> + Send
where
    T: Clone + Eq + Hash + Send + 'static,
    S: Stream<Item = Signal<T>> + Unpin + Send + 'static,
{
    let state = (signals, Pacer::new(gap), false);
    futures::stream::unfold(state, |(mut signals, mut pacer, mut ended)| async move {
        loop {
            if let Some(key) = pacer.ready.pop_front() {
                return Some((key, (signals, pacer, ended)));
            }
            let due = pacer.next_due();
            if ended && due.is_none() {
                return None;
            }
            tokio::select! {
                signal = signals.next(), if !ended => match signal {
                    Some(Signal::Wake(key, urgency)) => pacer.arrive(key, urgency, Instant::now()),
                    Some(Signal::PassTook(key, took)) => pacer.took(key, took, Instant::now()),
                    None => ended = true,
                },
                () = sleep_until(due) => pacer.release_due(Instant::now()),
            }
        }
    })
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The pacing decisions, apart from time and streams.
struct Pacer<T> {
    gap: Duration,
    /// When each key recently woken last went on; older entries are forgotten.
    last: HashMap<T, Instant>,
    /// How long each such key's last pass took.
    pass_took: HashMap<T, Duration>,
    /// Keys held back, with when they go on and their ticket.
    held: HashMap<T, (Instant, u64)>,
    /// When each held key may go on, soonest first, as (time, ticket); the ticket names the
    /// key in `tickets`. One entry per held key, so a wake-up of thousands of rules costs a
    /// heap operation each, not a scan of all that are held.
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    tickets: HashMap<u64, T>,
    next_ticket: u64,
    /// Keys that go on now, in order.
    ready: VecDeque<T>,
    /// Size of `last` at which entries quiet for longer than the gap are dropped.
    prune_at: usize,
}

/// `last` is pruned no sooner than at this size, then whenever it doubles.
const MIN_PRUNE_AT: usize = 64;

impl<T: Clone + Eq + Hash> Pacer<T> {
    fn new(gap: Duration) -> Self {
        Self {
            gap,
            last: HashMap::new(),
            pass_took: HashMap::new(),
            held: HashMap::new(),
            due: BinaryHeap::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
            ready: VecDeque::new(),
            prune_at: MIN_PRUNE_AT,
        }
    }

    /// A wake-up of `key` at `now`: it goes on at once, or is held (merged with one
    /// already held, which it may bring forward) until its gap since the last has passed.
    fn arrive(&mut self, key: T, urgency: Urgency, now: Instant) {
        let due = self.last.get(&key).map_or(now, |last| *last + self.gap_of(&key, urgency));
        match self.held.get(&key) {
            Some(&(held_until, _)) if held_until <= due => return,
            Some(&(_, ticket)) => {
                self.tickets.remove(&ticket);
                self.held.remove(&key);
            }
            None => {}
        }
        if now < due {
            self.hold(key, due);
        } else {
            self.go_on(key, now);
        }
        if self.last.len() >= self.prune_at {
            self.forget_quiet(now);
            self.prune_at = (self.last.len() * 2).max(MIN_PRUNE_AT);
        }
    }

    /// The least time between `key`'s last wake-up that went on and one of `urgency`.
    fn gap_of(&self, key: &T, urgency: Urgency) -> Duration {
        match (urgency, self.pass_took.get(key)) {
            (Urgency::Status | Urgency::Repair, Some(took)) => {
                self.gap.max((*took * STATUS_IDLE_FACTOR).min(MAX_STATUS_WAIT))
            }
            _ => self.gap,
        }
    }

    /// `key`'s pass took `took`, ending at `now`. It began `took` ago, which counts as its
    /// last wake-up going on: the controller starts passes of its own too (a spec change, a
    /// retry), and the one that went on may have waited in the controller's queue.
    fn took(&mut self, key: T, took: Duration, now: Instant) {
        let began = now.checked_sub(took).unwrap_or(now);
        let last = self.last.entry(key.clone()).or_insert(began);
        *last = (*last).max(began);
        self.pass_took.insert(key, took);
        if self.last.len() >= self.prune_at {
            self.forget_quiet(now);
            self.prune_at = (self.last.len() * 2).max(MIN_PRUNE_AT);
        }
    }

    fn hold(&mut self, key: T, until: Instant) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.held.insert(key.clone(), (until, ticket));
        self.tickets.insert(ticket, key);
        self.due.push(Reverse((until, ticket)));
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Lets on every held key whose time has come, soonest first.
    fn release_due(&mut self, now: Instant) {
        while let Some(Reverse((at, ticket))) = self.due.peek().copied()
            && at <= now
        {
            self.due.pop();
            if let Some(key) = self.tickets.remove(&ticket) {
                self.held.remove(&key);
                self.go_on(key, now);
            }
        }
        self.forget_quiet(now);
    }

    fn go_on(&mut self, key: T, now: Instant) {
        self.last.insert(key.clone(), now);
        self.ready.push_back(key);
    }

    /// Forgets keys that went on longer than their longest gap ago: their next wake-up goes
    /// on at once whether they are remembered or not, so memory follows the rules woken
    /// lately.
    fn forget_quiet(&mut self, now: Instant) {
        let longest = |key: &T| self.gap_of(key, Urgency::Status);
        let quiet: Vec<T> = self
            .last
            .iter()
            .filter(|(key, last)| now >= **last + longest(key))
            .map(|(key, _)| key.clone())
            .collect();
        for key in quiet {
            self.last.remove(&key);
        }
        let (last, held) = (&self.last, &self.held);
        self.pass_took.retain(|key, _| last.contains_key(key) || held.contains_key(key));
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    const GAP: Duration = Duration::from_millis(100);

    /// What goes on, and when (since the start), while `wakes` arrive at their times.
    async fn paced_run(wakes: &[(u64, &'static str)]) -> Vec<(u64, &'static str)> {
        let signals: Vec<_> = wakes.iter().map(|(at, key)| (*at, Signal::Wake(*key, Urgency::Now))).collect();
        signals_run(&signals).await
    }

    /// What goes on, and when (since the start), while `signals` arrive at their times.
    async fn signals_run(signals: &[(u64, Signal<&'static str>)]) -> Vec<(u64, &'static str)> {
        let started = Instant::now();
        let (sender, receiver) = mpsc::unbounded();
        let mut out = Box::pin(paced(receiver, GAP));
        let wakes = signals.to_vec();
        let feeder = tokio::spawn(async move {
            for (at, key) in wakes {
                tokio::time::sleep_until(started + Duration::from_millis(at)).await;
                sender.unbounded_send(key).unwrap();
            }
        });
        let mut seen = Vec::new();
        while let Some(key) = out.next().await {
            seen.push((u64::try_from(started.elapsed().as_millis()).unwrap(), key));
        }
        feeder.await.unwrap();
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_wake_up_goes_on_at_once() {
        assert_eq!(paced_run(&[(0, "a")]).await, [(0, "a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_on_at_once_then_once_more_after_the_gap() {
        let burst = [(0, "a"), (10, "a"), (20, "a"), (90, "a")];
        assert_eq!(paced_run(&burst).await, [(0, "a"), (100, "a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_after_a_quiet_spell_goes_on_at_once() {
        assert_eq!(paced_run(&[(0, "a"), (250, "a")]).await, [(0, "a"), (250, "a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn rules_are_paced_apart() {
        let wakes = [(0, "a"), (10, "b"), (20, "a"), (30, "b")];
        assert_eq!(paced_run(&wakes).await, [(0, "a"), (10, "b"), (100, "a"), (110, "b")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_goes_on_once_per_gap() {
        let wakes: Vec<(u64, &str)> = (0..50).map(|n| (n * 10, "a")).collect();
        let times: Vec<u64> = paced_run(&wakes).await.into_iter().map(|(at, _)| at).collect();
        assert_eq!(times, [0, 100, 200, 300, 400, 500]);
    }

    #[test]
    fn many_held_keys_go_on_soonest_first_and_leave_nothing_behind() {
        let mut pacer = Pacer::new(GAP);
        let start = Instant::now();
        for n in 0..10_000u64 {
            pacer.arrive(n, Urgency::Now, start + Duration::from_micros(n));
        }
        pacer.ready.clear();
        for n in (0..10_000u64).rev() {
            pacer.arrive(n, Urgency::Now, start + Duration::from_millis(50));
        }
        assert_eq!(pacer.next_due(), Some(start + GAP), "the key that went on first is due first");
        pacer.release_due(start + GAP + Duration::from_millis(10));
        assert!(pacer.held.is_empty() && pacer.tickets.is_empty() && pacer.due.is_empty());
        let released: Vec<u64> = pacer.ready.into_iter().collect();
        assert_eq!(released, (0..10_000u64).collect::<Vec<_>>());
    }

    #[test]
    fn keys_quiet_for_longer_than_the_gap_are_forgotten() {
        let mut pacer = Pacer::new(GAP);
        let start = Instant::now();
        for n in 0..1_000u64 {
            pacer.arrive(n, Urgency::Now, start + Duration::from_millis(n * 10));
        }
        assert!(pacer.last.len() < 2 * MIN_PRUNE_AT, "{} keys remembered", pacer.last.len());
        assert_eq!(pacer.ready.len(), 1_000, "every key went on at once");
    }

    fn wake(at: u64, key: &'static str, urgency: Urgency) -> (u64, Signal<&'static str>) {
        (at, Signal::Wake(key, urgency))
    }

    fn took(at: u64, key: &'static str, millis: u64) -> (u64, Signal<&'static str>) {
        (at, Signal::PassTook(key, Duration::from_millis(millis)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_for_status_waits_for_the_rule_to_be_idle_four_times_its_last_pass() {
        let signals = [wake(0, "a", Urgency::Now), took(300, "a", 300), wake(310, "a", Urgency::Status)];
        assert_eq!(signals_run(&signals).await, [(0, "a"), (1200, "a")]);
    }

    /// A copy edited by someone else every 10 ms: the rule's passes (300 ms each) are
    /// paced by their cost, not once per gap.
    #[tokio::test(start_paused = true)]
    async fn copies_edited_in_a_loop_wake_the_rule_by_what_its_passes_cost() {
        let mut signals = vec![wake(0, "a", Urgency::Now), took(300, "a", 300)];
        signals.extend((31..150).map(|n| wake(n * 10, "a", Urgency::Repair)));
        // With every edit waking it at once: 16 passes, one per 100 ms.
        assert_eq!(signals_run(&signals).await, [(0, "a"), (1200, "a"), (2400, "a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_that_matters_brings_one_for_status_forward() {
        let signals = [
            wake(0, "a", Urgency::Now),
            took(300, "a", 300),
            wake(310, "a", Urgency::Status),
            wake(500, "a", Urgency::Now),
            wake(510, "a", Urgency::Status),
        ];
        assert_eq!(signals_run(&signals).await, [(0, "a"), (500, "a"), (1700, "a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_for_status_of_a_rule_with_quick_passes_waits_only_the_gap() {
        let signals = [wake(0, "a", Urgency::Now), took(5, "a", 5), wake(10, "a", Urgency::Status)];
        assert_eq!(signals_run(&signals).await, [(0, "a"), (100, "a")]);
    }

    #[test]
    fn what_is_kept_of_a_rule_s_passes_goes_with_its_quiet() {
        let mut pacer = Pacer::new(GAP);
        let start = Instant::now();
        pacer.arrive("a", Urgency::Now, start);
        pacer.took("a", Duration::from_millis(300), start + Duration::from_millis(300));
        pacer.release_due(start + Duration::from_millis(1199));
        assert!(pacer.pass_took.contains_key("a"), "its status may still be held");
        pacer.release_due(start + Duration::from_millis(1200));
        assert!(pacer.last.is_empty() && pacer.pass_took.is_empty());
    }

    #[test]
    fn a_pass_the_controller_started_itself_counts_from_when_it_began() {
        let mut pacer = Pacer::new(GAP);
        let start = Instant::now();
        pacer.took("a", Duration::from_millis(200), start + Duration::from_millis(1000));
        pacer.arrive("a", Urgency::Status, start + Duration::from_millis(1010));
        assert_eq!(pacer.next_due(), Some(start + Duration::from_millis(800 + 800)));
    }

    #[test]
    fn a_wake_up_for_status_waits_no_longer_than_its_bound_after_a_long_pass() {
        let mut pacer = Pacer::new(GAP);
        let start = Instant::now();
        pacer.took("a", Duration::from_secs(20), start + Duration::from_secs(20));
        pacer.arrive("a", Urgency::Status, start + Duration::from_secs(21));
        assert_eq!(pacer.next_due(), Some(start + MAX_STATUS_WAIT));
        assert!(pacer.ready.is_empty());
    }
}
