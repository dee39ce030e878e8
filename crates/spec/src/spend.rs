//! Spend budgets on the spec (issue #51): a pool's, and the whole fleet's, in US dollars per
//! hour, and what enforcement does while its controller is silent.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::types::{ClusterSpec, Pool, PoolType, QuantityValue};

/// `budget` on a pool or on the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpendBudget {
    /// US dollars per hour: `"40"`, `"12.50"` (or a bare number).
    pub per_hour: QuantityValue,
    /// Warn when spend reaches this share of the budget; default `80%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<String>,
    /// A pool's only: the resource whose NodePool limit the budget controller narrows; default
    /// `nvidia.com/gpu` on a GPU pool whose GPUs are not time-sliced, else `cpu`. Never `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
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

impl Pool {
    /// The resource a budget on this pool narrows: as written; else the GPU resource on a GPU
    /// pool whose NodeClaims count its GPUs exactly (not time-sliced, where the Node advertises
    /// more than the NodeClaim), else `cpu`.
    pub fn budget_resource(&self) -> String {
        if let Some(resource) = self.budget.as_ref().and_then(|b| b.resource.clone()) {
            return resource;
        }
        match &self.gpu {
            Some(gpu) if self.pool_type == PoolType::Gpu && gpu.sharing_replicas <= 1 => {
                GPU_RESOURCE.to_owned()
            }
            _ => "cpu".to_owned(),
        }
    }
}

impl ClusterSpec {
    /// The pools whose launches the budget controller narrows, with the resource it narrows:
    /// dynamic pools with a budget, and every dynamic pool when the cluster has one. Static
    /// pools (`replicas`) launch a fixed count; their spend is checked once, at validate.
    pub fn budgeted_pools(&self) -> impl Iterator<Item = (&Pool, String)> {
        self.pools
            .iter()
            .filter(|p| p.replicas.is_none() && (p.budget.is_some() || self.budget.is_some()))
            .map(|p| (p, p.budget_resource()))
    }

    /// Whether the budget controller runs: a dynamic pool is budgeted.
    pub fn runs_budget_controller(&self) -> bool {
        self.budgeted_pools().next().is_some()
    }

    /// What a launch meets while the budget controller is silent.
    pub fn on_controller_down(&self) -> OnControllerDown {
        self.budget_enforcement
            .as_ref()
            .map(|e| e.on_controller_down)
            .unwrap_or_default()
    }

    /// How old the controller's heartbeat may be (validated; the default where unparsable).
    pub fn budget_stale_after(&self) -> Duration {
        self.budget_enforcement
            .as_ref()
            .and_then(|e| e.stale_after.as_deref())
            .and_then(|text| crate::time::parse_duration(text).ok())
            .unwrap_or(DEFAULT_STALE_AFTER)
    }
}
