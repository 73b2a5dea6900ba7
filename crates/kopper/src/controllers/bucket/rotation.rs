//! `spec.keyRotation` read and checked: pure, so that every refusal is tested without a
//! server. The decision what to do with the keys is [`super::provider::plan_keys`].
//!
//! A key is in use (held by the Secret) until it is `maxKeyAge - gracePeriod` old; then a new
//! key goes into the Secret and the old one is deleted `gracePeriod` later, so no key outlives
//! `maxKeyAge`. The grace period may be at most half the maximum age, so that a key is in use
//! at least as long as its successor's overlap, and kopper issues at most one key per
//! `maxKeyAge / 2`: with `maxKeyAge` at least `--bucket-min-key-age`, no tenant can make kopper
//! rotate faster than the admin allows.

use std::time::Duration;

use super::types::KeyRotation;
use crate::runtime::duration::{self, show};

/// The longest `maxKeyAge`: ten years, far beyond any policy, and far from where time
/// arithmetic could overflow.
pub const LONGEST_KEY_AGE: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A valid `spec.keyRotation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// No key lives longer than this.
    pub max_age: Duration,
    /// How long the retiring key keeps working after its successor is in the Secret.
    pub grace: Duration,
}

impl Schedule {
    /// How long a key is in use before it is replaced.
    pub fn in_use_for(&self) -> Duration {
        self.max_age.saturating_sub(self.grace)
    }
}

/// The schedule `spec.keyRotation` asks for, or why it is refused (a message naming the field).
/// `min_key_age` is kopper's `--bucket-min-key-age`.
pub fn schedule(spec: &KeyRotation, min_key_age: Duration) -> Result<Schedule, String> {
    let max_age = parse("spec.keyRotation.maxKeyAge", &spec.max_key_age)?;
    let grace = parse("spec.keyRotation.gracePeriod", &spec.grace_period)?;
    if max_age < min_key_age {
        return Err(format!(
            "spec.keyRotation.maxKeyAge {:?} is shorter than {}, the shortest this cluster allows \
             (kopper's --bucket-min-key-age)",
            spec.max_key_age,
            show(min_key_age)
        ));
    }
    if max_age > LONGEST_KEY_AGE {
        return Err(format!(
            "spec.keyRotation.maxKeyAge {:?} is longer than {} (ten years)",
            spec.max_key_age,
            show(LONGEST_KEY_AGE)
        ));
    }
    if grace > max_age / 2 {
        return Err(format!(
            "spec.keyRotation.gracePeriod {:?} is longer than half of maxKeyAge {:?}: a new key is \
             issued gracePeriod before the old one reaches maxKeyAge, so a longer grace period \
             would replace keys faster than the old ones retire",
            spec.grace_period, spec.max_key_age
        ));
    }
    Ok(Schedule { max_age, grace })
}

/// `text` read as a duration, or a refusal naming `field`.
fn parse(field: &str, text: &str) -> Result<Duration, String> {
    duration::parse(text).map_err(|refusal| format!("{field} {refusal}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn spec(max_key_age: &str, grace_period: &str) -> KeyRotation {
        KeyRotation { max_key_age: max_key_age.into(), grace_period: grace_period.into() }
    }

    #[test]
    fn a_duration_that_does_not_read_is_refused_naming_its_field() {
        let refusal = parse("spec.keyRotation.maxKeyAge", "1d").unwrap_err();
        assert!(refusal.starts_with("spec.keyRotation.maxKeyAge \"1d\" is not a duration"), "{refusal}");
    }

    #[test]
    fn a_valid_schedule_is_in_use_for_max_age_less_grace() {
        let schedule = schedule(&spec("720h", "24h"), HOUR).unwrap();
        assert_eq!(schedule, Schedule { max_age: 720 * HOUR, grace: 24 * HOUR });
        assert_eq!(schedule.in_use_for(), 696 * HOUR);
        assert!(super::schedule(&spec("2h", "1h"), HOUR).is_ok(), "grace may be half the age");
    }

    #[test]
    fn every_refusal_names_the_field_at_fault() {
        for (max, grace, field) in [
            ("soon", "1h", "maxKeyAge"),
            ("720h", "a day", "gracePeriod"),
            ("59m", "0s", "maxKeyAge"),
            ("87601h", "1h", "maxKeyAge"),
            ("2h", "61m", "gracePeriod"),
            ("2h", "3h", "gracePeriod"),
        ] {
            let refusal = schedule(&spec(max, grace), HOUR).unwrap_err();
            assert!(refusal.starts_with(&format!("spec.keyRotation.{field}")), "{max}/{grace}: {refusal}");
        }
    }

    #[test]
    fn the_shortest_key_age_is_the_admin_s_to_lower() {
        let refusal = schedule(&spec("3s", "1s"), HOUR).unwrap_err();
        assert!(refusal.contains("1h") && refusal.contains("--bucket-min-key-age"), "{refusal}");
        assert!(schedule(&spec("3s", "1s"), Duration::from_secs(1)).is_ok());
    }
}
