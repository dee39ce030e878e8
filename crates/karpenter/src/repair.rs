//! Node repair as Karpenter 1.15 (AWS provider 1.15.2) decides it: which node conditions it
//! acts on, after how long, whether it reboots or replaces, and the breaker that stops it when
//! too much of a pool is sick. The agent that writes the conditions, doctor, `top` and
//! `plan --disrupt` all read these rules from here.
//!
//! Facts (the provider's `RepairPolicies`, core's `disruption/repair.go`): a policy matches a
//! Node condition by type and status and, for `AcceleratedHardwareReady`, by an unanchored
//! `.*XID(<codes>).*` match on the condition's reason; the toleration counts from the
//! condition's `lastTransitionTime`; with several matches, replace beats reboot and the shorter
//! drain bound wins. A NodePool whose unhealthy Nodes are more than 20 % of its Nodes (rounded
//! up) is not repaired at all, whatever the reason or toleration.

use std::collections::BTreeMap;
use std::time::Duration;

/// The condition the node monitoring agent sets for GPU (and other accelerator) faults.
pub const ACCELERATED_HARDWARE_READY: &str = "AcceleratedHardwareReady";
/// Kernel faults the node cannot recover from (a read-only root filesystem, a shut-down XFS).
pub const KERNEL_READY: &str = "KernelReady";
pub const STORAGE_READY: &str = "StorageReady";
pub const NETWORKING_READY: &str = "NetworkingReady";
pub const CONTAINER_RUNTIME_READY: &str = "ContainerRuntimeReady";

/// The condition types an agent of ours may own (never `Ready`, which is the kubelet's).
pub const AGENT_CONDITIONS: [&str; 5] = [
    ACCELERATED_HARDWARE_READY,
    KERNEL_READY,
    STORAGE_READY,
    NETWORKING_READY,
    CONTAINER_RUNTIME_READY,
];

/// XIDs whose `AcceleratedHardwareReady=False` Karpenter reboots for when `rebootForRepair` is
/// on (and replaces for otherwise).
pub const REBOOT_XIDS: [u32; 14] = [
    46, 48, 54, 62, 63, 95, 109, 110, 136, 140, 143, 155, 156, 158,
];
/// XIDs Karpenter always replaces the node for.
pub const REPLACE_XIDS: [u32; 5] = [64, 74, 79, 119, 120];

/// What Karpenter does once a policy's toleration has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RepairAction {
    Reboot,
    Replace,
}

impl RepairAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Reboot => "reboot",
            RepairAction::Replace => "replace",
        }
    }
}

/// The repair that applies to one condition: how long Karpenter tolerates it, how long the
/// drain may take, and what it does then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    pub toleration: Duration,
    /// The policy's termination grace period: the longest the drain honours PDBs.
    pub drain_bound: Duration,
    pub action: RepairAction,
}

const MINUTE: u64 = 60;

fn repair(toleration_minutes: u64, drain_minutes: u64, action: RepairAction) -> Repair {
    Repair {
        toleration: Duration::from_secs(toleration_minutes * MINUTE),
        drain_bound: Duration::from_secs(drain_minutes * MINUTE),
        action,
    }
}

/// Whether the reason matches Karpenter's `.*XID(a|b|…).*`: some `XID` in it is followed by
/// text that starts with one of `codes` (unanchored after the number, as the regex is).
fn reason_names_xid(reason: &str, codes: &[u32]) -> bool {
    reason.match_indices("XID").any(|(at, _)| {
        let after = &reason[at + 3..];
        codes
            .iter()
            .any(|code| after.starts_with(&code.to_string()))
    })
}

/// The repair Karpenter applies to a Node condition of `kind`, `status` and `reason`, or `None`
/// when no policy covers it (a `True` condition, a type Karpenter does not watch).
pub fn policy_for(
    kind: &str,
    status: &str,
    reason: &str,
    reboot_for_repair: bool,
) -> Option<Repair> {
    match (kind, status) {
        ("Ready", "False" | "Unknown") => Some(repair(30, 10, RepairAction::Replace)),
        (ACCELERATED_HARDWARE_READY, "False") => {
            if reason_names_xid(reason, &REPLACE_XIDS) {
                // Replace wins over a reboot match for the same reason.
                Some(repair(10, 5, RepairAction::Replace))
            } else if reason_names_xid(reason, &REBOOT_XIDS) {
                let action = if reboot_for_repair {
                    RepairAction::Reboot
                } else {
                    RepairAction::Replace
                };
                Some(repair(10, 5, action))
            } else {
                Some(repair(30, 10, RepairAction::Replace))
            }
        }
        (KERNEL_READY | STORAGE_READY | NETWORKING_READY | CONTAINER_RUNTIME_READY, "False") => {
            Some(repair(30, 10, RepairAction::Replace))
        }
        _ => None,
    }
}

/// Whether Karpenter counts a Node with this condition as unhealthy for the breaker: any
/// covered type and status, whatever the reason and however recent.
pub fn counts_as_unhealthy(kind: &str, status: &str) -> bool {
    policy_for(kind, status, "", false).is_some()
}

/// Share of a pool's Nodes that may be unhealthy before repair stops for the pool.
pub const BREAKER_PERCENT: u64 = 20;

/// How many unhealthy Nodes a pool of `nodes` tolerates: 20 % rounded up.
pub fn breaker_threshold(nodes: usize) -> usize {
    (nodes * BREAKER_PERCENT as usize).div_ceil(100)
}

/// Per NodePool, `(nodes, unhealthy nodes)` as the breaker counts them, from each Node's pool
/// (`karpenter.sh/nodepool`; a Node without one counts nowhere) and whether any of its
/// conditions [`counts_as_unhealthy`].
pub fn pool_tally<'a>(
    nodes: impl IntoIterator<Item = (Option<&'a str>, bool)>,
) -> BTreeMap<&'a str, (usize, usize)> {
    let mut tally: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (pool, unhealthy) in nodes {
        if let Some(pool) = pool {
            let counts = tally.entry(pool).or_default();
            counts.0 += 1;
            counts.1 += usize::from(unhealthy);
        }
    }
    tally
}

/// Whether repair is blocked for a pool of `nodes` with `unhealthy` of them sick.
pub fn breaker_tripped(nodes: usize, unhealthy: usize) -> bool {
    unhealthy > breaker_threshold(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_faults_are_rebooted_or_replaced_after_ten_minutes() {
        let xid79 = policy_for(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID79Error",
            true,
        );
        assert_eq!(xid79, Some(repair(10, 5, RepairAction::Replace)));
        let xid48 = policy_for(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID48Error",
            true,
        );
        assert_eq!(xid48.map(|r| r.action), Some(RepairAction::Reboot));
        let xid48 = policy_for(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID48Error",
            false,
        );
        assert_eq!(xid48.map(|r| r.action), Some(RepairAction::Replace));
        // Any other reason falls back to the 30-minute policy.
        let other = policy_for(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID142Error",
            true,
        );
        assert_eq!(other, Some(repair(30, 10, RepairAction::Replace)));
        // The regex is unanchored after the number: XID460 reads as XID46.
        assert!(reason_names_xid("NvidiaXID460Error", &REBOOT_XIDS));
        assert!(!reason_names_xid("NvidiaXid79Error", &REPLACE_XIDS));
    }

    #[test]
    fn healthy_and_unwatched_conditions_are_not_repaired() {
        assert_eq!(
            policy_for(ACCELERATED_HARDWARE_READY, "True", "", false),
            None
        );
        assert_eq!(policy_for("MemoryPressure", "True", "", false), None);
        assert_eq!(policy_for("GPUOverheated", "False", "", false), None);
        assert!(counts_as_unhealthy("Ready", "Unknown"));
        assert!(counts_as_unhealthy(KERNEL_READY, "False"));
        assert!(!counts_as_unhealthy(KERNEL_READY, "True"));
    }

    #[test]
    fn the_breaker_trips_above_a_fifth_rounded_up() {
        assert_eq!(breaker_threshold(1), 1);
        assert!(!breaker_tripped(1, 1));
        assert_eq!(breaker_threshold(5), 1);
        assert!(breaker_tripped(2, 2));
        assert!(breaker_tripped(5, 2));
        assert_eq!(breaker_threshold(6), 2);
        assert!(!breaker_tripped(10, 2));
        assert!(breaker_tripped(10, 3));
        let tally = pool_tally([
            (Some("gpu"), true),
            (Some("gpu"), false),
            (None, true),
            (Some("cpu"), false),
        ]);
        assert_eq!(tally.get("gpu"), Some(&(2, 1)));
        assert_eq!(tally.get("cpu"), Some(&(1, 0)));
        assert_eq!(tally.len(), 2, "a node outside any pool counts nowhere");
    }
}
