//! Leader election on a coordination.k8s.io/v1 Lease, so that of several replicas only one
//! reconciles.
//!
//! Written on `kube::Api<Lease>` rather than a crate: `kube-leader-election` is still on kube 4,
//! and `kube-lease-manager` (kube 5) keeps reporting leadership while it cannot renew (its
//! watch loop logs API errors and retries, so a partitioned leader never learns that its lease
//! expired) and panics on some inputs. Here every write is guarded by the lease's
//! resourceVersion, so a 409 means another replica won, and a leader that cannot renew before
//! its lease would expire gives up leadership.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::fence::WriteFence;
use super::shutdown::Shutdown;

/// Share of the lease duration after the last renewal at which the leader gives up.
const RENEW_DEADLINE_SHARE: f64 = 0.8;
/// Pause between renewal attempts after one failed.
const RENEW_RETRY: Duration = Duration::from_secs(1);
/// The longest a shutdown waits to give the lease back. A standby takes the lease over when it
/// expires anyway, so an API server that does not answer must not hold the exit past the
/// pod's grace period.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the lease lives and how this replica takes part.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// Unique per replica: the pod name plus a random suffix.
    pub identity: String,
    pub duration: Duration,
    pub renew_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "--renew-interval ({renew:?}) must be well under --lease-duration ({duration:?}): at most 80% of it"
    )]
    RenewNotShorterThanDuration { renew: Duration, duration: Duration },
    #[error("--lease-duration must be at least one second")]
    DurationTooShort,
    #[error("lost the leader lease {0}: another replica holds it now")]
    Taken(String),
    #[error("lost the leader lease {0}: the API server did not answer a renewal before the renew deadline")]
    RenewTimedOut(String),
    #[error("lost the leader lease {name}: could not renew it before it expired: {cause}")]
    RenewFailed { name: String, cause: kube::Error },
    #[error("lost the leader lease {0}: someone else deleted it or cleared its holder")]
    Removed(String),
}

impl LeaseConfig {
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.duration < Duration::from_secs(1) {
            return Err(LeaderError::DurationTooShort);
        }
        if self.renew_interval >= self.renew_deadline() {
            return Err(LeaderError::RenewNotShorterThanDuration {
                renew: self.renew_interval,
                duration: self.duration,
            });
        }
        Ok(())
    }

    /// How long after its last successful renewal the leader gives up: before the lease can
    /// expire, so that a standby cannot take the lease while this replica still believes it
    /// leads.
    fn renew_deadline(&self) -> Duration {
        self.duration.mul_f64(RENEW_DEADLINE_SHARE)
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// What this replica should do about a lease, given its current spec.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: write a fresh renewTime.
    Renew,
    /// Nobody holds it, or the holder let it expire: write ourselves as holder.
    TakeOver,
    /// Someone else holds a valid lease; it expires after this long.
    Wait(Duration),
}

/// Another replica's lease as this replica last saw it, and when it saw it change, by its own
/// monotonic clock. A standby judges expiry from that moment, never from the renewTime the
/// holder wrote: the two machines' wall clocks may disagree by more than a lease (as
/// client-go's leader election does, for the same reason).
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    record: LeaseSpec,
    changed_at: Instant,
}

impl Observation {
    /// The holder may rely on its lease until then, by this replica's clock.
    fn expires(&self) -> Instant {
        let seconds = self.record.lease_duration_seconds.unwrap_or(0);
        self.changed_at + Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }

    fn decide(self, now: Instant) -> (Decision, Option<Self>) {
        let expires = self.expires();
        let decision =
            if now < expires { Decision::Wait(expires.duration_since(now)) } else { Decision::TakeOver };
        (decision, Some(self))
    }
}

/// Pure decision logic: whether `identity` may write itself into the lease, whose spec is
/// `spec` (`None`: there is no Lease), seen at `now`, given what it saw before (`last`).
/// Returns the observation to keep for next time. A lease with no holder or duration is free:
/// nobody can be relying on it. A missing Lease is free too, unless this replica saw another
/// hold it: that holder may be writing until its next renewal finds the Lease gone (someone
/// deleted it, or the API server lost it), so it is taken only once the holder's last record
/// seen here would have expired. A replica that never saw a holder (a fresh install) takes
/// it at once.
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    last: Option<&Observation>,
    now: Instant,
) -> (Decision, Option<Observation>) {
    let Some(spec) = spec else {
        return match last {
            Some(last) => last.clone().decide(now),
            None => (Decision::TakeOver, None),
        };
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == identity {
        return (Decision::Renew, None);
    }
    if holder.is_empty() || spec.lease_duration_seconds.is_none() {
        return (Decision::TakeOver, None);
    }
    let changed_at = match last {
        Some(last) if last.record == *spec => last.changed_at,
        _ => now,
    };
    Observation { record: spec.clone(), changed_at }.decide(now)
}

/// The spec we write when taking or renewing the lease.
fn claimed_spec(previous: Option<&LeaseSpec>, config: &LeaseConfig, now: Timestamp) -> LeaseSpec {
    let previous = previous.cloned().unwrap_or_default();
    let ours = previous.holder_identity.as_deref() == Some(config.identity.as_str());
    let transitions = previous.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.duration_seconds()),
        renew_time: Some(MicroTime(now)),
        acquire_time: if ours { previous.acquire_time.clone() } else { Some(MicroTime(now)) },
        lease_transitions: Some(if ours { transitions } else { transitions.saturating_add(1) }),
        ..previous
    }
}

/// Leadership held by this replica. Renew it with [`Leadership::keep`]; give it back with
/// [`Leadership::release`].
///
/// Every request about the lease has a deadline: kube's client sets no read timeout, and a
/// request on a pooled connection to an API server that died without a reset (a node behind
/// a load balancer) would otherwise hang for many minutes, holding up a failover or an exit.
/// A request given up on closes its connection, so the next attempt goes out on another one.
pub struct Leadership {
    api: Api<Lease>,
    config: LeaseConfig,
    /// Opened by each successful claim or renewal until its renew deadline; closed when
    /// leadership ends.
    fence: Arc<WriteFence>,
    /// Set once [`Leadership::keep`] found the lease lost: there is nothing left to release.
    lost: AtomicBool,
}

/// Waits until this replica holds the lease, then opens `fence` for writes. Returns `None` if
/// `shutdown` fires first.
pub async fn acquire(
    client: kube::Client,
    config: LeaseConfig,
    fence: Arc<WriteFence>,
    shutdown: &Shutdown,
) -> Option<Leadership> {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "waiting for the leader lease");
    let mut observed = None;
    loop {
        let sent = Instant::now();
        let attempt = tokio::time::timeout(config.renew_interval, try_claim(&api, &config, &mut observed));
        let attempt = tokio::select! {
            () = shutdown.wait() => return None,
            attempt = attempt => attempt,
        };
        let wait = match attempt {
            Ok(Ok(None)) => {
                info!(lease = %config.name, identity = %config.identity, "became the leader");
                fence.open_until(sent + config.renew_deadline());
                return Some(Leadership { api, config, fence, lost: AtomicBool::new(false) });
            }
            Ok(Ok(Some(remaining))) => remaining.min(config.renew_interval),
            Ok(Err(error)) => {
                warn!(lease = %config.name, "cannot take the leader lease yet: {error}");
                config.renew_interval
            }
            // The attempt has waited a renew interval already; the next one goes out on
            // another connection.
            Err(_elapsed) => {
                warn!(lease = %config.name, waited = ?config.renew_interval, "the API server did not answer about the leader lease; trying again");
                Duration::ZERO
            }
        };
        tokio::select! {
            () = shutdown.wait() => return None,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One attempt, while not leading, to create, take over or renew the lease. `Ok(None)`: we
/// hold it now; `Ok(Some(d))`: another replica holds it for `d` more, or may still rely on
/// it; a conflict counts as "someone else moved first" and is retried after a short pause.
/// `observed` carries what this replica saw of another's lease from one attempt to the next.
async fn try_claim(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observation>,
) -> Result<Option<Duration>, kube::Error> {
    let now = Timestamp::now();
    let lease = api.get_opt(&config.name).await?;
    let spec = lease.as_ref().map(|lease| lease.spec.clone().unwrap_or_default());
    let (decision, seen) = decide(spec.as_ref(), &config.identity, observed.as_ref(), Instant::now());
    *observed = seen;
    if let Decision::Wait(remaining) = decision {
        return Ok(Some(remaining));
    }
    let Some(mut lease) = lease else {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(config.name.clone()), ..ObjectMeta::default() },
            spec: Some(claimed_spec(None, config, now)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(None),
            Err(error) if is_conflict(&error) => Ok(Some(Duration::ZERO)),
            Err(error) => Err(error),
        };
    };
    lease.spec = Some(claimed_spec(lease.spec.as_ref(), config, now));
    match api.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(None),
        Err(error) if is_conflict(&error) => Ok(Some(Duration::from_millis(200))),
        Err(error) => Err(error),
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// The result of one renewal attempt.
enum Renewal {
    Renewed,
    /// Another replica holds the lease now.
    Taken,
    /// The Lease is gone, or names no holder: someone else removed it, and a standby may
    /// take it.
    Removed,
    /// Our write lost a race (409); look again shortly.
    Contended,
}

impl Leadership {
    /// Renews the lease every renew interval, and returns only when leadership is lost:
    /// another replica holds the lease, someone removed it, or renewals kept failing for most
    /// of the lease duration. Failed renewals are retried at a shorter interval.
    pub async fn keep(&self) -> LeaderError {
        let error = self.renew_until_lost().await;
        self.fence.close();
        self.lost.store(true, Ordering::SeqCst);
        error
    }

    async fn renew_until_lost(&self) -> LeaderError {
        let mut last_renewed = Instant::now();
        let mut wait = self.config.renew_interval;
        loop {
            tokio::time::sleep(wait).await;
            // The lease is valid from when the renewal was sent, not from when it returned.
            let sent = Instant::now();
            // A renewal that hangs past the renew deadline is a failed one: this replica must
            // step down then, not wait on the API server while the fence keeps it idle.
            let give_up = (last_renewed + self.config.renew_deadline()).max(sent);
            // One attempt waits at most a renew interval, leaving time before the renew
            // deadline for another on a fresh connection.
            let attempt_deadline = (sent + self.config.renew_interval).min(give_up);
            let outcome = match tokio::time::timeout_at(attempt_deadline, self.renew()).await {
                Ok(outcome) => outcome,
                Err(_elapsed) if attempt_deadline >= give_up => {
                    return LeaderError::RenewTimedOut(self.config.name.clone());
                }
                Err(_elapsed) => {
                    warn!(lease = %self.config.name, waited = ?self.config.renew_interval, "the API server did not answer a renewal; retrying");
                    wait = Duration::ZERO;
                    continue;
                }
            };
            if let Ok(Renewal::Renewed) = outcome {
                last_renewed = sent;
                self.fence.open_until(sent + self.config.renew_deadline());
                wait = self.config.renew_interval;
                continue;
            }
            let expired = last_renewed.elapsed() >= self.config.renew_deadline();
            match outcome {
                Ok(Renewal::Taken) => return LeaderError::Taken(self.config.name.clone()),
                Ok(Renewal::Removed) => return LeaderError::Removed(self.config.name.clone()),
                Err(cause) if expired => {
                    return LeaderError::RenewFailed { name: self.config.name.clone(), cause };
                }
                Ok(_) if expired => return LeaderError::Taken(self.config.name.clone()),
                Err(error) => {
                    warn!(lease = %self.config.name, "renewing the leader lease failed, retrying: {error}")
                }
                Ok(_) => debug!(lease = %self.config.name, "renewal raced with another write, retrying"),
            }
            wait = self.config.renew_interval.min(RENEW_RETRY);
        }
    }

    /// Writes a fresh renewTime into the lease if it still names this replica. A Lease that
    /// is gone is not created again: a standby that saw it vanish may take it.
    async fn renew(&self) -> Result<Renewal, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(Renewal::Removed);
        };
        let holder = lease.spec.as_ref().and_then(|spec| spec.holder_identity.as_deref());
        match holder {
            Some(holder) if holder == self.config.identity => {}
            None | Some("") => return Ok(Renewal::Removed),
            Some(_) => return Ok(Renewal::Taken),
        }
        lease.spec = Some(claimed_spec(lease.spec.as_ref(), &self.config, now));
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Renewal::Renewed),
            Err(error) if is_conflict(&error) => Ok(Renewal::Contended),
            Err(error) => Err(error),
        }
    }

    /// Clears the holder so that a standby takes over at its next poll instead of waiting for
    /// the lease to expire. Best effort, for at most [`RELEASE_TIMEOUT`]: on failure the lease
    /// simply expires. Nothing is sent once [`Leadership::keep`] found the lease lost: another
    /// replica holds it, or the API server could not be reached to renew it.
    pub async fn release(self) {
        self.fence.close();
        if self.lost.load(Ordering::SeqCst) {
            return;
        }
        let result = tokio::time::timeout(RELEASE_TIMEOUT, async {
            let mut lease = self.api.get(&self.config.name).await?;
            let Some(spec) = lease.spec.as_mut() else { return Ok(()) };
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = None;
            self.api.replace(&self.config.name, &PostParams::default(), &lease).await.map(drop)
        })
        .await;
        match result {
            Ok(Ok(())) => info!(lease = %self.config.name, "released the leader lease"),
            Ok(Err(error)) => warn!(lease = %self.config.name, "could not release the leader lease: {error}"),
            Err(_elapsed) => {
                warn!(lease = %self.config.name, waited = ?RELEASE_TIMEOUT, "the API server did not answer the release of the leader lease; it will expire instead")
            }
        }
    }
}

/// A per-process identity: the pod name when there is one (so `kubectl get lease` shows which
/// pod leads), plus a random suffix so that two processes on one host never share it.
pub fn default_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "kopper".to_owned());
    let suffix = std::collections::hash_map::RandomState::new().build_hasher().finish() & 0xff_ffff;
    format!("{host}-{suffix:06x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, renewed_at: i64, duration_seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(at(renewed_at))),
            lease_duration_seconds: Some(duration_seconds),
            ..LeaseSpec::default()
        }
    }

    /// Decides at `at` seconds after `start`, carrying the observation along.
    fn decide_at(
        spec: Option<&LeaseSpec>,
        last: &mut Option<Observation>,
        start: Instant,
        at: u64,
    ) -> Decision {
        let (decision, seen) = decide(spec, "me", last.as_ref(), start + Duration::from_secs(at));
        *last = seen;
        decision
    }

    #[test]
    fn missing_lease_is_taken_at_once_by_a_replica_that_never_saw_a_holder() {
        assert_eq!(decide_at(None, &mut None, Instant::now(), 0), Decision::TakeOver);
    }

    #[test]
    fn a_lease_deleted_under_its_holder_is_taken_only_once_the_holders_record_would_expire() {
        let (start, mut seen) = (Instant::now(), None);
        assert!(matches!(decide_at(Some(&held_by("other", 0, 15)), &mut seen, start, 0), Decision::Wait(_)));
        assert!(matches!(decide_at(Some(&held_by("other", 5, 15)), &mut seen, start, 5), Decision::Wait(_)));
        // Deleted at once after that renewal: the holder may write until its next one.
        assert_eq!(decide_at(None, &mut seen, start, 6), Decision::Wait(Duration::from_secs(14)));
        assert_eq!(decide_at(None, &mut seen, start, 19), Decision::Wait(Duration::from_secs(1)));
        assert_eq!(decide_at(None, &mut seen, start, 20), Decision::TakeOver);
    }

    #[test]
    fn a_lease_deleted_after_its_release_is_taken_at_once() {
        let (start, mut seen) = (Instant::now(), None);
        assert!(matches!(decide_at(Some(&held_by("other", 0, 15)), &mut seen, start, 0), Decision::Wait(_)));
        let released = LeaseSpec { holder_identity: None, ..held_by("other", 0, 15) };
        assert_eq!(decide_at(Some(&released), &mut seen, start, 1), Decision::TakeOver);
        assert_eq!(decide_at(None, &mut seen, start, 2), Decision::TakeOver);
    }

    #[test]
    fn own_lease_is_renewed_even_when_expired() {
        assert_eq!(decide_at(Some(&held_by("me", -100, 15)), &mut None, Instant::now(), 0), Decision::Renew);
    }

    #[test]
    fn another_replicas_lease_expires_a_lease_duration_after_it_last_changed_here() {
        let (start, mut seen) = (Instant::now(), None);
        let lease = held_by("other", 0, 15);
        assert_eq!(decide_at(Some(&lease), &mut seen, start, 0), Decision::Wait(Duration::from_secs(15)));
        assert_eq!(decide_at(Some(&lease), &mut seen, start, 5), Decision::Wait(Duration::from_secs(10)));
        assert_eq!(decide_at(Some(&lease), &mut seen, start, 15), Decision::TakeOver);
        assert_eq!(decide_at(Some(&lease), &mut seen, start, 60), Decision::TakeOver);
    }

    #[test]
    fn a_renewing_leader_keeps_its_lease_whatever_its_clock_says() {
        // The leader's clock is an hour behind: its renewTime always looks long expired.
        let (start, mut seen) = (Instant::now(), None);
        for (second, renewed_at) in [(0, -3600), (10, -3590), (20, -3580), (30, -3570)] {
            let lease = held_by("other", renewed_at, 15);
            assert!(matches!(decide_at(Some(&lease), &mut seen, start, second), Decision::Wait(_)));
        }
        // An hour ahead, and then it stops renewing: taken a lease duration later, not an hour.
        let ahead = held_by("other", 3600, 15);
        assert!(matches!(decide_at(Some(&ahead), &mut seen, start, 40), Decision::Wait(_)));
        assert_eq!(decide_at(Some(&ahead), &mut seen, start, 55), Decision::TakeOver);
    }

    #[test]
    fn released_lease_is_taken_at_once() {
        let released = LeaseSpec { holder_identity: None, ..held_by("other", 0, 15) };
        assert_eq!(decide_at(Some(&released), &mut None, Instant::now(), 1), Decision::TakeOver);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "default".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
        };
        let taken = claimed_spec(Some(&held_by("other", 0, 15)), &config, at(20));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(20))));
        let renewed = claimed_spec(Some(&taken), &config, at(25));
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(25))));
    }

    #[test]
    fn renew_interval_must_leave_room_to_retry_before_the_lease_expires() {
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "default".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(13),
        };
        assert!(config.validate().is_err());
        assert!(LeaseConfig { renew_interval: Duration::from_secs(5), ..config }.validate().is_ok());
    }
}
