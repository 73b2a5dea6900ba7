//! Wake-ups of a rule's controller, paced per rule: the first after a quiet spell goes on at
//! once, and those of a burst are merged into one that goes on when [`MIN_WAKE_GAP`] has
//! passed since the last.
//!
//! A rule's pass looks at every namespace, so its cost grows with the cluster. A debounce
//! would bound how often passes run, but it delays every change, a lone source update
//! included, by its whole period. Paced wake-ups serve a lone change at once and still give
//! a rule at most one pass per gap in a burst (a thousand namespaces created by a script, the
//! watch events of a pass's own writes). Nothing waits in the controller meanwhile: a held
//! wake-up takes no reconcile slot.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::Instant;

/// The least time between two wake-ups of one rule that go on.
pub const MIN_WAKE_GAP: Duration = Duration::from_millis(100);

/// `wakes`, paced per key by `gap`. Ends when `wakes` ends.
pub fn paced<T, S>(wakes: S, gap: Duration) -> impl Stream<Item = T> + Send
where
    T: Clone + Eq + Hash + Send + 'static,
    S: Stream<Item = T> + Unpin + Send + 'static,
{
    let state = (wakes, Pacer::new(gap), false);
    futures::stream::unfold(state, |(mut wakes, mut pacer, mut ended)| async move {
        loop {
            if let Some(key) = pacer.ready.pop_front() {
                return Some((key, (wakes, pacer, ended)));
            }
            let due = pacer.next_due();
            if ended && due.is_none() {
                return None;
            }
            tokio::select! {
                key = wakes.next(), if !ended => match key {
                    Some(key) => pacer.arrive(key, Instant::now()),
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
    /// Keys held back.
    held: HashSet<T>,
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
            held: HashSet::new(),
            due: BinaryHeap::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
            ready: VecDeque::new(),
            prune_at: MIN_PRUNE_AT,
        }
    }

    /// A wake-up of `key` at `now`: it goes on at once, or is held (merged with one
    /// already held) until the gap since the last has passed.
    fn arrive(&mut self, key: T, now: Instant) {
        if self.held.contains(&key) {
            return;
        }
        match self.last.get(&key) {
            Some(&last) if now < last + self.gap => self.hold(key, last + self.gap),
            _ => self.go_on(key, now),
        }
        if self.last.len() >= self.prune_at {
            self.forget_quiet(now);
            self.prune_at = (self.last.len() * 2).max(MIN_PRUNE_AT);
        }
    }

    fn hold(&mut self, key: T, until: Instant) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.held.insert(key.clone());
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

    /// Forgets keys that went on longer than the gap ago: their next wake-up goes on at once
    /// whether they are remembered or not, so memory follows the rules woken lately.
    fn forget_quiet(&mut self, now: Instant) {
        let gap = self.gap;
        self.last.retain(|_, last| now < *last + gap);
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    const GAP: Duration = Duration::from_millis(100);

    /// What goes on, and when (since the start), while `wakes` arrive at their times.
    async fn paced_run(wakes: &[(u64, &'static str)]) -> Vec<(u64, &'static str)> {
        let started = Instant::now();
        let (sender, receiver) = mpsc::unbounded();
        let mut out = Box::pin(paced(receiver, GAP));
        let wakes = wakes.to_vec();
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
            pacer.arrive(n, start + Duration::from_micros(n));
        }
        pacer.ready.clear();
        for n in (0..10_000u64).rev() {
            pacer.arrive(n, start + Duration::from_millis(50));
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
            pacer.arrive(n, start + Duration::from_millis(n * 10));
        }
        assert!(pacer.last.len() < 2 * MIN_PRUNE_AT, "{} keys remembered", pacer.last.len());
        assert_eq!(pacer.ready.len(), 1_000, "every key went on at once");
    }
}
