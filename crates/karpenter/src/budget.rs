//! A disruption budget's `nodes`: a count (`"1"`) or a percentage of the pool's nodes (`"10%"`),
//! and how many nodes it allows at once (kubernetes-sigs/karpenter `pkg/apis/v1/nodepool.go`
//! `GetAllowedDisruptions`: a percentage rounds up). A pool without budgets gets Karpenter's
//! default, `nodes: 10%`.

/// `nodes` of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNodes {
    Count(i64),
    Percent(i64),
}

/// Karpenter's default budget when a NodePool names none.
pub const DEFAULT_BUDGET: BudgetNodes = BudgetNodes::Percent(10);

impl BudgetNodes {
    /// `"1"` or `"10%"`; `None` for anything else.
    pub fn parse(text: &str) -> Option<BudgetNodes> {
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(p) => p
                .parse()
                .ok()
                .filter(|p| (0..=100).contains(p))
                .map(BudgetNodes::Percent),
            None => text
                .parse()
                .ok()
                .filter(|n: &i64| *n >= 0)
                .map(BudgetNodes::Count),
        }
    }

    /// How many of `nodes` it allows to be disrupted at once.
    pub fn allowed(self, nodes: i64) -> i64 {
        match self {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => (p * nodes + 99) / 100,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentages_rounding_up() {
        assert_eq!(BudgetNodes::parse("1"), Some(BudgetNodes::Count(1)));
        assert_eq!(BudgetNodes::parse("10%").unwrap().allowed(4), 1);
        assert_eq!(BudgetNodes::parse("50%").unwrap().allowed(5), 3);
        assert_eq!(BudgetNodes::parse("0%").unwrap().allowed(5), 0);
        assert_eq!(DEFAULT_BUDGET.allowed(0), 0);
        assert_eq!(BudgetNodes::parse("-1"), None);
        assert_eq!(BudgetNodes::parse("101%"), None);
        assert_eq!(BudgetNodes::parse("x"), None);
    }
}
