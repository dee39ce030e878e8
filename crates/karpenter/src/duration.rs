//! Durations as NodePools write them (`consolidateAfter`, `expireAfter`, a disruption budget's
//! `duration`): Karpenter reads them with Go's `time.ParseDuration` ([`parse`]), while the
//! NodePool CRD admits only whole hours, minutes and seconds such as `30s` or `2h30m`
//! ([`is_whole_units`]). `Never`, where a field allows it, is the caller's to handle.

/// One `<number><unit>` run of a duration, in order: `1h30m` is `[("1", "h"), ("30", "m")]`.
/// `None` when a run has no number; a run without a unit has `""` for it.
fn runs(text: &str) -> Option<Vec<(&str, &str)>> {
    let mut rest = text;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let number = rest
            .bytes()
            .take_while(|c| c.is_ascii_digit() || *c == b'.')
            .count();
        if number == 0 {
            return None;
        }
        let (value, after) = rest.split_at(number);
        let unit = after
            .char_indices()
            .take_while(|(_, c)| c.is_alphabetic())
            .map(|(i, c)| i + c.len_utf8())
            .last()
            .unwrap_or(0);
        let (unit, after) = after.split_at(unit);
        out.push((value, unit));
        rest = after;
    }
    Some(out)
}

/// A Go duration (`720h`, `2h30m`, `90s`, `1.5h`, `0s`, `-5m`) in whole seconds, rounded down
/// (no NodePool setting uses less than a second); `None` for text that is not one.
pub fn parse(text: &str) -> Option<i64> {
    let text = text.trim();
    if text == "0" {
        return Some(0);
    }
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if unsigned.is_empty() {
        return None;
    }
    let mut total = 0f64;
    for (value, unit) in runs(unsigned)? {
        let value: f64 = value.parse().ok()?;
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * seconds;
    }
    if !total.is_finite() || total > 1e15 {
        return None;
    }
    let whole = total.floor() as i64;
    Some(if negative { -whole } else { whole })
}

/// Whether `text` is a duration of the form the NodePool CRD admits: one or more runs of a
/// whole number and `h`, `m` or `s` (`^([0-9]+(s|m|h))+$`), nothing around it.
pub fn is_whole_units(text: &str) -> bool {
    !text.is_empty()
        && runs(text).is_some_and(|runs| {
            runs.iter().all(|(value, unit)| {
                value.bytes().all(|c| c.is_ascii_digit()) && matches!(*unit, "h" | "m" | "s")
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("720h"), Some(720 * 3600));
        assert_eq!(parse("1h30m"), Some(5400));
        assert_eq!(parse("1.5h"), Some(5400));
        assert_eq!(parse("0s"), Some(0));
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("500ms"), Some(0));
        assert_eq!(parse("-5m"), Some(-300));
        assert_eq!(parse("2 hours"), None);
        assert_eq!(parse("h"), None);
        assert_eq!(parse("5"), None);
        assert_eq!(parse("-"), None);
    }

    #[test]
    fn the_crd_form_is_whole_hours_minutes_and_seconds() {
        for ok in ["30s", "5m", "2h", "720h", "1h30m", "0s", "1h1h"] {
            assert!(is_whole_units(ok), "{ok}");
        }
        for bad in [
            "", "0", "1.5h", "500ms", "-5m", "+5m", " 5m", "5m ", "5", "h", "5H", "1d", "Never",
            "5m5", "5µs",
        ] {
            assert!(!is_whole_units(bad), "{bad:?}");
        }
    }
}
