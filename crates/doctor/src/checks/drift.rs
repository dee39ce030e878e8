//! Drift in progress, and what holds it back. Karpenter replaces `Drifted` NodeClaims one command
//! at a time under each pool's `Drifted` budget (kubernetes-sigs/karpenter v1.14
//! `pkg/controllers/disruption`): a node annotated `karpenter.sh/do-not-disrupt` never goes, and
//! a pod with that annotation or one whose PodDisruptionBudget allows no disruption keeps its
//! node unless the NodeClaim has a `terminationGracePeriod`; a budget used up by nodes NotReady
//! or being deleted holds the rest of the pool.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kk_karpenter::budget::{BudgetNodes, DEFAULT_BUDGET};
use kk_karpenter::{Operator, Requirement};
use kube_core::DynamicObject;
use serde_json::Value;

use super::{check, condition, name_of};
use crate::snapshot::Snapshot;
use crate::{Check, Status};

const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Whether a label selector selects `labels` (an empty selector selects everything).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    exact
        && selector.match_expressions.iter().flatten().all(|e| {
            Operator::parse(&e.operator)
                .ok()
                .and_then(|op| Requirement::new(op, e.values.as_deref().unwrap_or_default()).ok())
                .is_some_and(|r| r.matches(labels.get(&e.key).map(String::as_str)))
        })
}

/// Why a pod keeps its node from being disrupted, if it does.
fn pod_blocks(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> Option<String> {
    let meta = &pod.metadata;
    let owned_by = |kind: &str| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == kind)
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if owned_by("DaemonSet")
        || owned_by("Node")
        || meta.deletion_timestamp.is_some()
        || matches!(phase, Some("Succeeded" | "Failed"))
    {
        return None;
    }
    if meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(DO_NOT_DISRUPT))
        .is_some()
    {
        return Some(format!(
            "pod {} has the {DO_NOT_DISRUPT} annotation",
            name_of(meta)
        ));
    }
    let labels = meta.labels.clone().unwrap_or_default();
    pdbs.iter()
        .filter(|d| d.metadata.namespace == meta.namespace)
        .filter(|d| {
            d.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selects(s, &labels))
        })
        .find(|d| {
            d.status
                .as_ref()
                .is_some_and(|s| s.disruptions_allowed == 0)
        })
        .map(|d| {
            format!(
                "PDB {} allows no disruption now (pod {})",
                name_of(&d.metadata),
                name_of(meta)
            )
        })
}

fn tainted(node: Option<&Node>) -> bool {
    node.and_then(|n| n.spec.as_ref()?.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT))
}

fn ready(node: Option<&Node>) -> bool {
    node.and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The smallest `Drifted` budget of a pool for `nodes` nodes; `None` when one has a schedule
/// (whether it is active is not evaluated here).
fn drifted_allowance(pool: Option<&DynamicObject>, nodes: i64) -> Option<i64> {
    let budgets = pool.and_then(|p| p.data["spec"]["disruption"]["budgets"].as_array());
    let Some(budgets) = budgets else {
        return Some(DEFAULT_BUDGET.allowed(nodes));
    };
    let mut least = i64::from(i32::MAX);
    for b in budgets {
        let applies = b["reasons"]
            .as_array()
            .is_none_or(|r| r.iter().any(|x| x == "Drifted"));
        if !applies {
            continue;
        }
        if b.get("schedule").is_some_and(|s| !s.is_null()) {
            return None;
        }
        let text = match &b["nodes"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => "10%".into(),
        };
        least = least.min(BudgetNodes::parse(&text)?.allowed(nodes));
    }
    Some(least)
}

/// One pool's drift: (drifted claims being replaced, drifted claims waiting with their blockers).
#[derive(Default)]
struct PoolDrift {
    members: i64,
    disrupting: i64,
    replacing: Vec<String>,
    waiting: Vec<(String, Vec<String>)>,
}

pub(super) fn drift_progress(s: &Snapshot) -> Check {
    let mut c = check(
        "drift",
        "drifted nodes are being replaced; nothing (PDB, do-not-disrupt, budget) holds them",
    );
    let (Ok(claims), Ok(nodes), Ok(pods)) = (&s.nodeclaims, &s.nodes, &s.pods) else {
        return c.skip("NodeClaims, Nodes or Pods could not be listed");
    };
    let pdbs: &[PodDisruptionBudget] = match &s.pdbs {
        Ok(p) => p,
        Err(_) => &[],
    };
    let nodes: BTreeMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let mut pools: BTreeMap<String, PoolDrift> = BTreeMap::new();
    for claim in claims {
        let Some(pool) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("karpenter.sh/nodepool"))
        else {
            continue;
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        let node_name = claim.data["status"]["nodeName"].as_str().unwrap_or("");
        let node = nodes.get(node_name).copied();
        let deleting = claim.metadata.deletion_timestamp.is_some();
        let p = pools.entry(pool.clone()).or_default();
        // Its instance terminating, a node no longer counts against the budget (Karpenter v1.14
        // `BuildDisruptionBudgetMapping`), though its NodeClaim stays until the instance is gone.
        if condition(claim, "InstanceTerminating").is_some_and(|x| x["status"] == "True") {
            continue;
        }
        if condition(claim, "Initialized").is_some_and(|x| x["status"] == "True") {
            p.members += 1;
            if deleting || !ready(node) {
                p.disrupting += 1;
            }
        }
        if !condition(claim, "Drifted").is_some_and(|x| x["status"] == "True") {
            continue;
        }
        if deleting || tainted(node) {
            p.replacing.push(format!("{name} (node {node_name})"));
            continue;
        }
        let mut blockers = Vec::new();
        if node
            .and_then(|n| n.metadata.annotations.as_ref())
            .and_then(|a| a.get(DO_NOT_DISRUPT))
            .is_some_and(|v| v == "true")
        {
            blockers.push(format!(
                "node {node_name} has the {DO_NOT_DISRUPT} annotation"
            ));
        }
        let grace = claim.data["spec"]["terminationGracePeriod"].is_string();
        if !grace {
            blockers.extend(
                pods.iter()
                    .filter(|p| {
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name)
                    })
                    .filter_map(|p| pod_blocks(p, pdbs)),
            );
        }
        p.waiting
            .push((format!("{name} (node {node_name})"), blockers));
    }
    let pool_objects = s.nodepools.as_ref().ok();
    let mut drifted_total = 0;
    for (pool, p) in &pools {
        if p.replacing.is_empty() && p.waiting.is_empty() {
            continue;
        }
        drifted_total += p.replacing.len() + p.waiting.len();
        let object = pool_objects.and_then(|list| {
            list.iter()
                .find(|o| o.metadata.name.as_deref() == Some(pool))
        });
        let left = drifted_allowance(object, p.members).map(|a| a - p.disrupting);
        for (claim, blockers) in &p.waiting {
            if !blockers.is_empty() {
                c.worse(
                    Status::Warn,
                    format!("pool {pool}: {claim} drifted, held: {}", blockers.join("; ")),
                    "let the pods move: relax the PDB (or scale the workload up), remove do-not-disrupt, or set the pool's terminationGracePeriod to bound the wait (`plan --disrupt` shows the order)",
                );
            }
        }
        let unblocked = p.waiting.iter().filter(|(_, b)| b.is_empty()).count();
        let budget = match left {
            Some(l) => format!(
                "Drifted budget leaves {} of {} nodes now",
                l.max(0),
                p.members
            ),
            None => "a scheduled Drifted budget (not evaluated)".into(),
        };
        if unblocked > 0 && p.replacing.is_empty() && left.is_some_and(|l| l <= 0) {
            c.worse(
                Status::Warn,
                format!(
                    "pool {pool}: {unblocked} drifted node(s) wait and none is being replaced: the {budget} ({} NotReady or being deleted)",
                    p.disrupting
                ),
                "raise the pool's Drifted budget, or bring its NotReady nodes back",
            );
        } else {
            c.evidence.push(format!(
                "pool {pool}: drift in progress, replacing {}; {} waiting; {budget}",
                if p.replacing.is_empty() {
                    "none yet".to_owned()
                } else {
                    p.replacing.join(", ")
                },
                p.waiting.len()
            ));
        }
    }
    if s.pdbs.is_err() {
        c.evidence
            .push("PodDisruptionBudgets could not be listed: PDB blocks not checked".into());
    }
    if drifted_total == 0 {
        c = c.saw("no NodeClaim is drifted");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_and_pod_blockers() {
        let sel: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]}))
        .unwrap();
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        assert!(selects(&sel, &labels));
        let batch: BTreeMap<String, String> = [("app", "web"), ("tier", "batch")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert!(!selects(&sel, &batch));

        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "d",
            "labels": {"app": "web"}}, "spec": {"nodeName": "n", "containers": []}}))
        .unwrap();
        let pdb = |allowed: i32| -> PodDisruptionBudget {
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}))
            .unwrap()
        };
        assert_eq!(pod_blocks(&pod, &[pdb(1)]), None);
        assert!(
            pod_blocks(&pod, &[pdb(0)])
                .unwrap()
                .contains("PDB d/web allows no disruption")
        );
        let mut pinned = pod.clone();
        pinned.metadata.annotations = Some([(DO_NOT_DISRUPT.to_owned(), "true".to_owned())].into());
        assert!(pod_blocks(&pinned, &[]).unwrap().contains("do-not-disrupt"));
    }

    #[test]
    fn drifted_budgets_count_and_percent() {
        let pool: DynamicObject = serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1",
            "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Drifted"]},
                {"nodes": "50%", "reasons": ["Empty"]}]}}}))
        .unwrap();
        assert_eq!(drifted_allowance(Some(&pool), 10), Some(1));
        assert_eq!(drifted_allowance(None, 10), Some(1), "10% of 10");
        assert_eq!(drifted_allowance(None, 11), Some(2), "rounds up");
    }
}
