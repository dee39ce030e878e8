//! Kubernetes minors' support windows (`kubernetes_support.txt`, sourced and dated there): when
//! each minor was released, when it entered maintenance mode and when it reached end of life.
//! Pure: whoever asks says what day it is ([`Day`]), so the same day gives the same answer.

use std::sync::LazyLock;

const TABLE: &str = include_str!("kubernetes_support.txt");

/// A calendar day, `YYYY-MM-DD` (ordered as the text is).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Day(String);

impl Day {
    /// `2026-12-07`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Day> {
        let b = text.as_bytes();
        let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        (b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && digits(0..4)
            && digits(5..7)
            && digits(8..10))
        .then(|| Day(text.to_owned()))
    }

    /// The UTC day `seconds` after the Unix epoch.
    pub fn from_unix(seconds: u64) -> Day {
        let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX / 2);
        let (year, month, day) = kk_model::civil_date::civil_from_days(days);
        Day(format!("{year:04}-{month:02}-{day:02}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One minor's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// `34` for 1.34.
    pub minor: u32,
    pub released: Day,
    pub maintenance: Day,
    pub end_of_life: Day,
}

/// Where a minor stands on a given day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Supported {
        maintenance: Day,
    },
    Maintenance {
        end_of_life: Day,
    },
    EndOfLife {
        since: Day,
    },
    /// Newer than the table, or older than its first minor.
    Unknown,
}

fn parse(table: &str) -> Result<Vec<Window>, String> {
    let mut out: Vec<Window> = Vec::new();
    for (i, line) in table.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("kubernetes_support.txt line {}: {line:?}", i + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        let [minor, released, maintenance, end] = words[..] else {
            return Err(bad());
        };
        let minor = minor
            .strip_prefix("1.")
            .and_then(|m| m.parse().ok())
            .ok_or_else(bad)?;
        let day = |t: &str| Day::parse(t).ok_or_else(bad);
        let window = Window {
            minor,
            released: day(released)?,
            maintenance: day(maintenance)?,
            end_of_life: day(end)?,
        };
        if !(window.released < window.maintenance && window.maintenance < window.end_of_life)
            || out.last().is_some_and(|w| w.minor + 1 != minor)
        {
            return Err(bad());
        }
        out.push(window);
    }
    Ok(out)
}

static WINDOWS: LazyLock<Vec<Window>> =
    LazyLock::new(|| parse(TABLE).expect("kubernetes_support.txt parses (tested)"));

/// Every minor of the table, oldest first.
pub fn windows() -> &'static [Window] {
    &WINDOWS
}

pub fn window(minor: u32) -> Option<&'static Window> {
    WINDOWS.iter().find(|w| w.minor == minor)
}

pub fn standing(minor: u32, today: &Day) -> Standing {
    match window(minor) {
        None => Standing::Unknown,
        Some(w) if *today >= w.end_of_life => Standing::EndOfLife {
            since: w.end_of_life.clone(),
        },
        Some(w) if *today >= w.maintenance => Standing::Maintenance {
            end_of_life: w.end_of_life.clone(),
        },
        Some(w) => Standing::Supported {
            maintenance: w.maintenance.clone(),
        },
    }
}

/// The oldest minor after `minor` that is fully supported (not yet in maintenance) on `today`.
pub fn next_supported(minor: u32, today: &Day) -> Option<u32> {
    WINDOWS
        .iter()
        .filter(|w| w.minor > minor && *today < w.maintenance)
        .map(|w| w.minor)
        .next()
}

/// The warning for a control plane on 1.`minor` on `today`, if it is past its end of life or in
/// maintenance mode: what and since when, and the minor to move to.
pub fn warning(minor: u32, today: &Day) -> Option<String> {
    let next = next_supported(minor, today)
        .map(|m| format!("; plan the upgrade to 1.{m} (`kubean-karpenter upgrade plan`)"))
        .unwrap_or_default();
    match standing(minor, today) {
        Standing::EndOfLife { since } => Some(format!(
            "Kubernetes 1.{minor} reached its end of life on {since}: no fixes, security ones included{next}"
        )),
        Standing::Maintenance { end_of_life } => Some(format!(
            "Kubernetes 1.{minor} is in maintenance mode (critical and security fixes only) until its end of life on {end_of_life}{next}"
        )),
        Standing::Supported { .. } | Standing::Unknown => None,
    }
}

/// Today, UTC: `SOURCE_DATE_EPOCH` when set (reproducible output, as reproducible builds
/// read it), else the clock.
pub fn today() -> Day {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    Day::from_unix(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> Day {
        Day::parse(text).unwrap()
    }

    #[test]
    fn the_table_parses_and_is_contiguous() {
        let w = windows();
        assert_eq!(w.first().map(|w| w.minor), Some(29));
        assert!(w.len() >= 9);
        assert_eq!(window(34).unwrap().end_of_life, day("2026-10-27"));
    }

    #[test]
    fn malformed_lines_are_refused() {
        assert!(parse("1.30 2024-04-17 2025-04-28\n").is_err());
        assert!(parse("1.30 2024-04-17 2025-04-28 2025-02-30x\n").is_err());
        assert!(parse("1.30 2025-04-28 2024-04-17 2025-07-15\n").is_err());
        assert!(
            parse("1.30 2024-04-17 2025-04-28 2025-07-15\n1.32 2024-12-11 2025-12-28 2026-02-28\n")
                .is_err()
        );
    }

    #[test]
    fn days_from_unix_seconds() {
        assert_eq!(Day::from_unix(0).as_str(), "1970-01-01");
        assert_eq!(Day::from_unix(951_782_400).as_str(), "2000-02-29");
        assert_eq!(Day::from_unix(1_796_601_600).as_str(), "2026-12-07");
        assert_eq!(Day::parse("2026-1-07"), None);
    }

    #[test]
    fn standing_on_either_side_of_each_date() {
        assert_eq!(
            standing(34, &day("2026-10-26")),
            Standing::Maintenance {
                end_of_life: day("2026-10-27")
            }
        );
        assert_eq!(
            standing(34, &day("2026-10-27")),
            Standing::EndOfLife {
                since: day("2026-10-27")
            }
        );
        assert_eq!(
            standing(35, &day("2026-12-27")),
            Standing::Supported {
                maintenance: day("2026-12-28")
            }
        );
        assert_eq!(standing(99, &day("2026-12-07")), Standing::Unknown);
        assert_eq!(next_supported(34, &day("2026-12-07")), Some(35));
        assert_eq!(next_supported(34, &day("2026-12-28")), Some(36));
        let w = warning(34, &day("2026-12-07")).unwrap();
        assert!(
            w.contains("end of life on 2026-10-27") && w.contains("1.35"),
            "{w}"
        );
        assert_eq!(warning(36, &day("2026-12-07")), None);
    }
}
