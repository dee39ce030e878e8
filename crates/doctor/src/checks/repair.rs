//! Sick nodes and Karpenter's node repair: every Node with a condition repair acts on, since
//! when, and when Karpenter will reboot or replace it — or why it will not (the gate off, the
//! pool's 20 % breaker tripped, the node outside any NodePool).

use std::time::Duration;

use kk_karpenter::repair::{
    breaker_threshold, breaker_tripped, counts_as_unhealthy, policy_for, pool_tally,
};

use super::{check, pool_of, secs};
use crate::snapshot::Snapshot;
use crate::{Check, Facts, Status};

pub(super) fn node_health(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "node-health",
        "no Node has a condition Karpenter's node repair acts on, or repair will act on it",
    );
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    let mut sick = Vec::new();
    for n in nodes {
        let pool = pool_of(n.metadata.labels.as_ref());
        let conditions: Vec<_> = n
            .status
            .iter()
            .flat_map(|st| st.conditions.iter().flatten())
            .filter(|c| counts_as_unhealthy(&c.type_, &c.status))
            .collect();
        sick.push((n, pool, conditions));
    }
    let pools = pool_tally(sick.iter().map(|(_, pool, c)| (*pool, !c.is_empty())));
    sick.retain(|(_, _, c)| !c.is_empty());
    for (n, pool, conditions) in sick {
        let name = n.metadata.name.as_deref().unwrap_or("");
        for cond in conditions {
            let reason = cond.reason.as_deref().unwrap_or("");
            let since = cond.last_transition_time.as_ref().map(|t| t.0);
            let age = since.map_or(Duration::ZERO, |t| {
                Duration::from_secs(s.now.duration_since(t).as_secs().max(0) as u64)
            });
            let Some(policy) = policy_for(&cond.type_, &cond.status, reason, f.reboot_for_repair)
            else {
                continue;
            };
            let what = format!(
                "Node {name} ({}): {}={} reason {reason:?} for {}",
                pool.unwrap_or("no NodePool"),
                cond.type_,
                cond.status,
                secs(age)
            );
            if !f.node_repair {
                c.worse(
                    Status::Fail,
                    format!("{what}; node repair is off, so Karpenter will not act"),
                    "turn node repair on (remove karpenter.featureGates.nodeRepair: false, or run the health agent on the pool), or replace the node by hand: kubectl delete nodeclaim",
                );
                continue;
            }
            let Some(pool) = pool else {
                c.worse(
                    Status::Warn,
                    format!("{what}; not a Karpenter node, so Karpenter will not repair it"),
                    "repair Kubean's own nodes by hand (kubean-karpenter kubean operation)",
                );
                continue;
            };
            let (total, unhealthy) = pools[pool];
            if breaker_tripped(total, unhealthy) {
                c.worse(
                    Status::Fail,
                    format!(
                        "{what}; repair of pool {pool} is blocked: {unhealthy} of its {total} nodes are unhealthy, more than Karpenter's 20 % ({} node(s))",
                        breaker_threshold(total)
                    ),
                    "find what makes so many nodes sick at once (a bad AMI, a driver, the network) and replace them by hand: kubectl delete nodeclaim",
                );
                continue;
            }
            let left = policy.toleration.saturating_sub(age);
            let when = if left.is_zero() {
                "due now".to_owned()
            } else {
                format!("in {}", secs(left))
            };
            c.worse(
                Status::Warn,
                format!(
                    "{what}; Karpenter will {} it {when} (after {}, draining for at most {})",
                    policy.action.as_str(),
                    secs(policy.toleration),
                    secs(policy.drain_bound)
                ),
                "nothing to do: Karpenter repairs it; to keep it, annotate the Node karpenter.sh/do-not-repair=true",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{} Node(s), none with a condition node repair acts on (node repair {})",
            nodes.len(),
            if f.node_repair { "on" } else { "off" }
        ));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    fn node(name: &str, pool: &str, gpu: (&str, &str)) -> Node {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": pool } },
            "status": { "conditions": [
                { "type": "Ready", "status": "True" },
                { "type": "AcceleratedHardwareReady", "status": gpu.0, "reason": gpu.1,
                  "lastTransitionTime": "2026-12-07T10:00:00Z" },
            ]},
        }))
        .unwrap()
    }

    fn snapshot(nodes: Vec<Node>) -> Snapshot {
        let mut s = crate::snapshot::tests::empty();
        s.now = "2026-12-07T10:04:00Z".parse().unwrap();
        s.nodes = Ok(nodes);
        s
    }

    fn facts(repair: bool) -> Facts {
        Facts {
            node_repair: repair,
            ..Facts::default()
        }
    }

    #[test]
    fn a_sick_gpu_node_is_due_for_replacement_after_ten_minutes() {
        let s = snapshot(vec![
            node("a", "gpu", ("False", "NvidiaXID79Error")),
            node("b", "gpu", ("True", "NvidiaGPUIsReady")),
            node("c", "gpu", ("True", "NvidiaGPUIsReady")),
            node("d", "gpu", ("True", "NvidiaGPUIsReady")),
            node("e", "gpu", ("True", "NvidiaGPUIsReady")),
        ]);
        let c = node_health(&s, &facts(true));
        assert_eq!(c.status, Status::Warn, "{:?}", c.evidence);
        assert!(c.evidence[0].contains("Node a (gpu): AcceleratedHardwareReady=False reason \"NvidiaXID79Error\" for 4m; Karpenter will replace it in 6m"), "{:?}", c.evidence);
    }

    #[test]
    fn the_breaker_and_the_gate_are_named_when_repair_will_not_act() {
        let two_sick = vec![
            node("a", "gpu", ("False", "NvidiaXID79Error")),
            node("b", "gpu", ("False", "NvidiaXID48Error")),
            node("c", "gpu", ("True", "NvidiaGPUIsReady")),
        ];
        let c = node_health(&snapshot(two_sick.clone()), &facts(true));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence
                .iter()
                .all(|e| e.contains("2 of its 3 nodes are unhealthy")),
            "{:?}",
            c.evidence
        );
        let c = node_health(&snapshot(two_sick), &facts(false));
        assert!(
            c.evidence[0].contains("node repair is off"),
            "{:?}",
            c.evidence
        );
        let healthy = node_health(
            &snapshot(vec![node("c", "gpu", ("True", "x"))]),
            &facts(true),
        );
        assert_eq!(healthy.status, Status::Ok);
    }
}
