//! Durations as flags and specs write them (`24h`, `1h30m`, `500ms`, `7d`) and timestamps as
//! kubeadm writes them: one parser and one printer for every crate.

use std::time::Duration;

use jiff::Timestamp;

/// RFC 3339 in UTC, seconds precision (what kubeadm writes).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A duration flag that is not `24h`, `10m`, `6s`-style text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("{0:?}: expected a number (e.g. 24h, 10m, 6s)")]
    NoNumber(String),
    #[error("{0:?}: number too large")]
    TooLarge(String),
    #[error("{0:?}: missing unit (ms, s, m, h or d)")]
    NoUnit(String),
    #[error("{text:?}: unknown unit {unit:?}")]
    UnknownUnit { text: String, unit: String },
}

/// Parses `24h`, `6s`, `1h30m`, `90m`, `500ms`, `7d` (Go/kubeadm style, plus `d`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::NoNumber(text.to_owned()));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let (unit, tail) = tail.split_at(unit_len);
        let n: u64 = number
            .parse()
            .map_err(|_| DurationError::TooLarge(text.to_owned()))?;
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            "" => return Err(DurationError::NoUnit(text.to_owned())),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        total = total.saturating_add(part);
        rest = tail;
    }
    Ok(total)
}

/// `1h2m3s` style, for messages.
pub fn format_duration(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubeadm() {
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("6s").unwrap(), Duration::from_secs(6));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        for bad in ["", "h", "10", "10x", "-1s", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(
            rfc3339("2026-12-01T10:00:00.5Z".parse().unwrap()),
            "2026-12-01T10:00:00Z"
        );
    }
}
