//! Durations as Kubernetes and Go write them (`90s`, `1h30m`, `500ms`): read from kopper's
//! flags and from specs, and written back in messages in the same form. One reader for both,
//! so a value that works in one place works in the other.

use std::time::Duration;

/// The units a duration may be written in, longest name first so that `ms` is not read as
/// minutes followed by a stray `s`.
const UNITS: [(&str, Duration); 4] = [
    ("ms", Duration::from_millis(1)),
    ("h", Duration::from_secs(3600)),
    ("m", Duration::from_secs(60)),
    ("s", Duration::from_secs(1)),
];

/// A duration written as whole numbers each followed by a unit (`h`, `m`, `s` or `ms`), e.g.
/// `720h`, `1h30m`, `90s`, `500ms`. The error says what is wrong and how to write it.
pub fn parse(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration: write e.g. \"90s\", \"1h30m\" or \"500ms\"");
    if text.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let value: u32 = rest[..digits].parse().map_err(|_| invalid())?;
        let (name, unit) =
            UNITS.iter().find(|(name, _)| rest[digits..].starts_with(name)).ok_or_else(invalid)?;
        let part = unit.checked_mul(value).ok_or_else(invalid)?;
        total = total.checked_add(part).ok_or_else(invalid)?;
        rest = &rest[digits + name.len()..];
    }
    Ok(total)
}

/// `duration` as [`parse`] reads it, in its largest whole units: `1h30m`, `90s`, `500ms`.
pub fn show(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    let mut rest = duration.as_millis();
    let mut text = String::new();
    for (name, unit) in [("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)] {
        if rest >= unit {
            text.push_str(&format!("{}{name}", rest / unit));
            rest %= unit;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn durations_are_read_as_kubernetes_writes_them() {
        for (text, want) in [
            ("720h", 720 * HOUR),
            ("1h30m", HOUR + 30 * MINUTE),
            ("90s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1m500ms", MINUTE + Duration::from_millis(500)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_how_to_write_it() {
        for wrong in ["", "720", "h", "1d", "1.5h", "-1h", "1h 30m", " 1h", "99999999999h", "5 s"] {
            let refusal = parse(wrong).unwrap_err();
            assert!(refusal.contains("is not a duration") && refusal.contains("1h30m"), "{wrong}: {refusal}");
        }
    }

    #[test]
    fn a_shown_duration_reads_back_the_same() {
        for duration in [
            Duration::ZERO,
            Duration::from_millis(500),
            90 * MINUTE,
            720 * HOUR,
            HOUR + Duration::from_millis(1),
        ] {
            assert_eq!(parse(&show(duration)), Ok(duration), "{}", show(duration));
        }
        assert_eq!(show(HOUR + 30 * MINUTE), "1h30m");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
    }
}
