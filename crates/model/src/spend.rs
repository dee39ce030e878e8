//! Spend budgets in US dollars per hour (issue #51): the annotations that carry a pool's budget
//! on its NodePool, and money as integer micro-dollars. Render writes the annotations; plan,
//! top and the budget controller read them, so the four can never disagree on a budget.

/// Our annotations on a NodePool whose launches a spend budget limits.
pub mod annotation {
    /// The pool's budget, US dollars per hour, as the spec wrote it (`"0.20"`).
    pub const PER_HOUR: &str = "kubean-karpenter.io/budget-per-hour";
    /// Where the warning starts, a share of the budget (`"80%"`).
    pub const WARN_AT: &str = "kubean-karpenter.io/budget-warn-at";
    /// The limit key the budget controller owns on this NodePool (`cpu`, `nvidia.com/gpu`).
    pub const RESOURCE: &str = "kubean-karpenter.io/budget-resource";
    /// The spec's own `limits[resource]`, which the controller never writes past.
    pub const CEILING: &str = "kubean-karpenter.io/budget-ceiling";
    /// The whole fleet's budget, on every dynamic NodePool when the cluster has one.
    pub const CLUSTER_PER_HOUR: &str = "kubean-karpenter.io/cluster-budget-per-hour";
}

/// Micro-dollars in a dollar: every amount is whole micro-dollars per hour, so that a limit
/// floored from a budget never falls on a floating-point edge (0.20 / 0.048 is 4, not 4.1666…
/// rounded the wrong way).
pub const MICRO: i64 = 1_000_000;

/// `"40"`, `"12.5"`, `"0.0960"` as micro-dollars; `None` unless a positive decimal with at most
/// six decimals (and below a trillion dollars).
pub fn parse_dollars(text: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || whole.len() > 12
        || fraction.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || (text.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fraction: i64 = format!("{fraction:0<6}").parse().ok()?;
    let micro = whole * MICRO + fraction;
    (micro > 0).then_some(micro)
}

/// A price in dollars as micro-dollars, rounded up: a budget charged with it is never
/// under-charged.
pub fn micro_from_dollars(dollars: f64) -> i64 {
    (dollars * MICRO as f64 - 1e-6).ceil().max(0.0) as i64
}

/// Micro-dollars as dollars, for reports and metrics.
pub fn dollars(micro: i64) -> f64 {
    micro as f64 / MICRO as f64
}

/// `$0.1920/h`: four decimals, what a budget message shows.
pub fn format_per_hour(micro: i64) -> String {
    format!("${:.4}/h", dollars(micro))
}

/// `"80%"` as 80; `None` unless 1 to 100 followed by `%`.
pub fn parse_percent(text: &str) -> Option<u8> {
    let digits = text.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u8 = digits.parse().ok()?;
    (1..=100).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_parse_exactly() {
        assert_eq!(parse_dollars("40"), Some(40 * MICRO));
        assert_eq!(parse_dollars("0.20"), Some(200_000));
        assert_eq!(parse_dollars("12.5"), Some(12_500_000));
        assert_eq!(parse_dollars("0.000001"), Some(1));
        for bad in [
            "",
            "0",
            "0.0",
            "-1",
            "1.",
            ".5",
            "1e3",
            "$4",
            "1.0000001",
            "1,5",
            " 4",
        ] {
            assert_eq!(parse_dollars(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prices_round_up_and_print_with_four_decimals() {
        assert_eq!(micro_from_dollars(0.096), 96_000);
        assert_eq!(micro_from_dollars(0.21883), 218_830);
        assert_eq!(micro_from_dollars(0.0384000001), 38_401);
        assert_eq!(format_per_hour(192_000), "$0.1920/h");
    }

    #[test]
    fn percentages_are_one_to_a_hundred() {
        assert_eq!(parse_percent("80%"), Some(80));
        assert_eq!(parse_percent("100%"), Some(100));
        for bad in ["0%", "101%", "80", "%", "8.5%", "-1%"] {
            assert_eq!(parse_percent(bad), None, "{bad:?}");
        }
    }
}
