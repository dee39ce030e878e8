//! Time for the disruption simulation, without a date library: RFC 3339 timestamps as Unix
//! seconds, Go-style durations (`720h`, `2h30m`, `Never`), and the 5-field cron schedules of
//! NodePool disruption budgets (`spec.disruption.budgets[].schedule`, evaluated in UTC as
//! Karpenter does with `TZ=UTC` and robfig/cron's standard parser).

use kk_model::civil_date::{civil_from_days, days_from_civil, rfc3339_utc};

/// Text that is not a time, a duration or a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    #[error("{0:?} is not an RFC 3339 time (2026-01-02T03:04:05Z)")]
    Time(String),
    #[error("{0:?} is not a duration (e.g. 30s, 15m, 2h, 720h, 1h30m)")]
    Duration(String),
    #[error("{0:?}: a schedule has 5 fields (minute hour day-of-month month day-of-week)")]
    ScheduleFields(String),
    #[error("{schedule:?}: {field}: {problem}")]
    ScheduleField {
        schedule: String,
        field: &'static str,
        problem: FieldProblem,
    },
}

/// What is wrong with one field of a cron schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("{0:?} is not a number")]
    NotANumber(String),
    #[error("bad step {0:?}")]
    BadStep(String),
    #[error("{part:?} is out of range {lo}-{hi}")]
    OutOfRange { part: String, lo: u32, hi: u32 },
}

/// `2026-01-02T03:04:05Z` (fractions and `+HH:MM` offsets accepted) → Unix seconds.
pub fn parse_time(text: &str) -> Result<i64, ClockError> {
    let bad = || ClockError::Time(text.to_owned());
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, ClockError> {
        let s = text.get(r).ok_or_else(bad)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(bad());
        }
        rest = &frac[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let oh: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let om: i64 = rest[4..6].parse().map_err(|_| bad())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// Unix seconds → `2026-01-02T03:04:05Z`.
pub fn format_time(t: i64) -> String {
    rfc3339_utc(t)
}

/// A Go duration (`720h`, `2h30m`, `90s`, `1.5h`, `0s`) → whole seconds (sub-second parts are
/// dropped; no NodePool setting uses them), as [`kk_karpenter::duration::parse`] reads it.
pub fn parse_duration(text: &str) -> Result<i64, ClockError> {
    kk_karpenter::duration::parse(text).ok_or_else(|| ClockError::Duration(text.to_owned()))
}

/// `720h`-style text for seconds (the largest units that divide it).
pub fn format_duration(secs: i64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut s = secs.abs();
    if secs < 0 {
        out.push('-');
    }
    if s >= 3600 {
        out.push_str(&format!("{}h", s / 3600));
        s %= 3600;
    }
    if s >= 60 {
        out.push_str(&format!("{}m", s / 60));
        s %= 60;
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A parsed 5-field cron schedule (minute hour day-of-month month day-of-week), in UTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// robfig/cron: when day-of-month or day-of-week is `*`/`?`, both must match; otherwise either.
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn field(
    text: &str,
    lo: u32,
    hi: u32,
    names: &[&str],
    base: u32,
) -> Result<(u64, bool), FieldProblem> {
    let mut bits = 0u64;
    let mut star = false;
    let value = |s: &str| -> Result<u32, FieldProblem> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + base);
        }
        s.parse::<u32>()
            .map_err(|_| FieldProblem::NotANumber(s.to_owned()))
    };
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                Some(
                    s.parse::<u32>()
                        .map_err(|_| FieldProblem::BadStep(s.to_owned()))?,
                ),
            ),
            None => (part, None),
        };
        let (a, b) = if range == "*" || range == "?" {
            if step.is_none() {
                star = true;
            }
            (lo, hi)
        } else if let Some((x, y)) = range.split_once('-') {
            (value(x)?, value(y)?)
        } else {
            let a = value(range)?;
            (a, if step.is_some() { hi } else { a })
        };
        let step = step.unwrap_or(1);
        if a < lo || b > hi || a > b || step == 0 {
            return Err(FieldProblem::OutOfRange {
                part: part.to_owned(),
                lo,
                hi,
            });
        }
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Cron {
    /// A schedule as NodePool budgets allow: five fields, or `@yearly`, `@annually`, `@monthly`,
    /// `@weekly`, `@daily`, `@midnight`, `@hourly`.
    pub fn parse(text: &str) -> Result<Cron, ClockError> {
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let [mi, h, dom, mo, dow] = parts.as_slice() else {
            return Err(ClockError::ScheduleFields(text.to_owned()));
        };
        let e = |field: &'static str, r: Result<(u64, bool), FieldProblem>| {
            r.map_err(|problem| ClockError::ScheduleField {
                schedule: text.to_owned(),
                field,
                problem,
            })
        };
        let (minute, _) = e("minute", field(mi, 0, 59, &[], 0))?;
        let (hour, _) = e("hour", field(h, 0, 23, &[], 0))?;
        let (dom, dom_star) = e("day of month", field(dom, 1, 31, &[], 1))?;
        let (month, _) = e("month", field(mo, 1, 12, &MONTHS, 1))?;
        let (dow, dow_star) = e("day of week", field(dow, 0, 6, &DAYS, 0))?;
        Ok(Cron {
            minute,
            hour,
            dom,
            month,
            dow,
            dom_star,
            dow_star,
        })
    }

    /// Whether the minute starting at `t` (Unix seconds, a multiple of 60) is a hit.
    pub fn matches(&self, t: i64) -> bool {
        let days = t.div_euclid(86_400);
        let s = t.rem_euclid(86_400);
        let (_, month, dom) = civil_from_days(days);
        let dow = (days + 4).rem_euclid(7); // 1970-01-01 was a Thursday
        let bit = |set: u64, v: i64| set & (1 << v) != 0;
        let day_ok = if self.dom_star || self.dow_star {
            bit(self.dom, dom) && bit(self.dow, dow)
        } else {
            bit(self.dom, dom) || bit(self.dow, dow)
        };
        bit(self.minute, s % 3600 / 60)
            && bit(self.hour, s / 3600)
            && bit(self.month, month)
            && day_ok
    }

    /// Karpenter's `Budget.IsActive`: the first hit strictly after `now − duration` is not
    /// after `now`.
    pub fn active(&self, now: i64, duration: i64) -> bool {
        let checkpoint = now - duration.max(0);
        let mut t = checkpoint.div_euclid(60) * 60 + 60;
        // Skip whole days whose month/day do not match, then minutes.
        while t <= now {
            if self.matches(t) {
                return true;
            }
            t += 60;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let t = parse_time("2026-12-01T12:18:27Z").unwrap();
        assert_eq!(format_time(t), "2026-12-01T12:18:27Z");
        assert_eq!(parse_time("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_time("2026-12-01T13:18:27+01:00").unwrap(),
            parse_time("2026-12-01T12:18:27.5Z").unwrap()
        );
        assert!(parse_time("2026-12-01").is_err());
        assert!(parse_time("2026-13-01T00:00:00Z").is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("720h").unwrap(), 720 * 3600);
        assert_eq!(parse_duration("1h30m").unwrap(), 5400);
        assert_eq!(parse_duration("1.5h").unwrap(), 5400);
        assert_eq!(parse_duration("0s").unwrap(), 0);
        assert_eq!(parse_duration("500ms").unwrap(), 0);
        assert!(parse_duration("2 hours").is_err());
        assert!(parse_duration("h").is_err());
        assert_eq!(format_duration(5400), "1h30m");
    }

    #[test]
    fn cron_business_hours_budget() {
        // A budget "nodes: 0, schedule: 0 9 * * mon-fri, duration: 8h" blocks 09:00-17:00 UTC
        // on weekdays. 2026-12-01 is a Tuesday.
        let c = Cron::parse("0 9 * * mon-fri").unwrap();
        let day = parse_time("2026-12-01T00:00:00Z").unwrap();
        assert!(!c.active(day + 8 * 3600 + 59 * 60, 8 * 3600));
        assert!(c.active(day + 9 * 3600, 8 * 3600));
        assert!(c.active(day + 16 * 3600 + 59 * 60, 8 * 3600));
        assert!(!c.active(day + 17 * 3600, 8 * 3600));
        // Saturday 2026-12-05: inactive.
        assert!(!c.active(day + 4 * 86_400 + 10 * 3600, 8 * 3600));
    }

    #[test]
    fn cron_day_fields_or_when_both_restricted() {
        // robfig/cron: both day fields restricted → either matches.
        let c = Cron::parse("0 0 1 * mon").unwrap();
        let mon = parse_time("2026-11-30T00:00:00Z").unwrap(); // a Monday, not the 1st
        assert!(c.matches(mon));
        let first = parse_time("2026-12-01T00:00:00Z").unwrap(); // Tuesday the 1st
        assert!(c.matches(first));
        assert!(!c.matches(first + 86_400));
        assert!(Cron::parse("0 0 * *").is_err());
        assert!(Cron::parse("61 0 * * *").is_err());
        assert_eq!(
            Cron::parse("@daily").unwrap(),
            Cron::parse("0 0 * * *").unwrap()
        );
    }
}
