//! Node repair in `plan --disrupt`'s window: which Nodes carry a condition Karpenter's node
//! repair acts on, when it will reboot or replace each (the condition's start plus its
//! toleration), which pools' breaker stops it, and the pods each repair evicts. Reported beside
//! the disruption commands, not simulated with them: a repair launches a replacement first and
//! waits for it to initialize, honours PDBs only for the policy's drain bound, and paces by the
//! pool's `Unhealthy` budgets; what the replacement's pods then do is provisioning's business.

use kk_karpenter::repair::{breaker_threshold, breaker_tripped, policy_for, pool_tally};
use serde::Serialize;

use super::clock;
use super::state::ClusterState;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairOut {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub condition: String,
    pub status: String,
    pub reason: String,
    /// `reboot` or `replace`.
    pub action: String,
    /// When the toleration ends (RFC 3339); `None` when the condition has no start time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
    /// Whether it is due at the simulated instant.
    pub due_now: bool,
    /// Why Karpenter will not act, when it will not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// The pods the drain evicts (DaemonSet and mirror pods stay).
    pub evicts: Vec<String>,
}

/// Every Node with a condition node repair acts on, at `now`, as Karpenter would treat it.
pub fn repairs(state: &ClusterState, now: i64, reboot_for_repair: bool) -> Vec<RepairOut> {
    let per_pool = pool_tally(state.input.nodes.iter().map(|node| {
        let sick = state
            .nodes
            .get(&node.name)
            .is_some_and(|i| !i.unhealthy.is_empty());
        (node.pool(), sick)
    }));
    let mut out = Vec::new();
    for node in &state.input.nodes {
        let Some(info) = state.nodes.get(&node.name) else {
            continue;
        };
        let pool = node.pool();
        let evicts: Vec<String> = state
            .pods
            .values()
            .filter(|p| p.node.as_deref() == Some(node.name.as_str()) && !p.daemon() && !p.mirror())
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        for u in &info.unhealthy {
            let Some(policy) = policy_for(&u.condition, &u.status, &u.reason, reboot_for_repair)
            else {
                continue;
            };
            let due = u.since.map(|s| s + policy.toleration.as_secs() as i64);
            let blocked = match pool {
                None => Some("not a Karpenter node: nothing repairs it".to_owned()),
                Some(p) => {
                    let (total, sick) = per_pool.get(p).copied().unwrap_or_default();
                    breaker_tripped(total, sick).then(|| {
                        format!(
                            "pool {p}: {sick} of {total} nodes unhealthy, over Karpenter's 20 % ({}): repair stops for the pool",
                            breaker_threshold(total)
                        )
                    })
                }
            };
            out.push(RepairOut {
                node: node.name.clone(),
                node_pool: pool.map(str::to_owned),
                condition: u.condition.clone(),
                status: u.status.clone(),
                reason: u.reason.clone(),
                action: policy.action.as_str().to_owned(),
                due: due.map(clock::format_time),
                due_now: due.is_some_and(|d| d <= now) && blocked.is_none(),
                blocked,
                evicts: evicts.clone(),
            });
        }
    }
    out
}
