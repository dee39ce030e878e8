//! Spend budgets on the spec (issue #51): a pool's, and the whole fleet's, in US dollars per
//! hour, and what enforcement does while its controller is silent. Which pools a budget
//! narrows is the spec's to say (`ClusterSpec::budgeted_pools`, in types.rs).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `budget` on a pool or on the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpendBudget {
    /// US dollars per hour: `"40"`, `"12.50"` (or a bare number).
    pub per_hour: Dollars,
    /// Warn when spend reaches this share of the budget; default `80%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<String>,
    /// A pool's only: the resource whose NodePool limit the budget controller narrows; default
    /// `nvidia.com/gpu` on a GPU pool whose GPUs are not time-sliced, else `cpu`. Never `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// An amount of US dollars as written: a string (`"0.20"`, exact) or a bare number (`40`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dollars {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Dollars {
    pub fn as_text(&self) -> String {
        match self {
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Text(s) => s.clone(),
        }
    }
}

/// What a launch of a budgeted pool meets while the budget controller is silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnControllerDown {
    /// Refused: no spend nobody counts (Karpenter backs off and retries).
    #[default]
    Deny,
    /// Admitted within the limits last written.
    Allow,
}

/// `budgetEnforcement` on the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetEnforcement {
    #[serde(default)]
    pub on_controller_down: OnControllerDown,
    /// A controller whose heartbeat is older than this is silent; default `2m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<String>,
}

/// The extended resource NVIDIA's device plugin advertises.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// A budget's warning share when the spec names none.
pub const DEFAULT_WARN_PERCENT: u8 = 80;
/// How old the budget controller's heartbeat may be when the spec says nothing.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(120);

impl SpendBudget {
    /// The budget in micro-dollars per hour, when it is one.
    pub fn micro_per_hour(&self) -> Option<i64> {
        kk_model::spend::parse_dollars(&self.per_hour.as_text())
    }

    /// The warning share, percent.
    pub fn warn_percent(&self) -> Option<u8> {
        match &self.warn_at {
            None => Some(DEFAULT_WARN_PERCENT),
            Some(text) => kk_model::spend::parse_percent(text),
        }
    }
}
