//! Spend budgets (`budget` on pools and on the cluster, `budgetEnforcement`): what can be
//! judged without prices. Whether a budget buys even one node needs the catalog, which the
//! CLI checks where it reads a spec.

use super::*;
use crate::spend::{GPU_RESOURCE, SpendBudget};

/// The resources a budget may narrow: those Karpenter charges within one scheduling batch.
const BUDGET_RESOURCES: [&str; 3] = ["cpu", "memory", GPU_RESOURCE];
/// A heartbeat checked more often than this would refuse launches on a slow API server.
const MIN_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) fn budgets(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let cluster_budget = spec.budget.as_ref().and_then(|b| {
        let at = at.key("budget");
        amounts(p, &at, b);
        if b.resource.is_some() {
            p.push((
                at.key("resource"),
                "only a pool's budget narrows a resource: the cluster's is shared among the pools, each narrowing its own".into(),
            ));
        }
        b.micro_per_hour()
    });
    for (i, pool) in spec.pools.iter().enumerate() {
        let Some(budget) = &pool.budget else {
            continue;
        };
        let at = at.key("pools").index(i).key("budget");
        amounts(p, &at, budget);
        if let (Some(own), Some(cluster)) = (budget.micro_per_hour(), cluster_budget)
            && own > cluster
        {
            p.push((
                at.key("perHour"),
                format!(
                    "{} is above the cluster's budget ({}, spec.budget.perHour): the pool could never spend it",
                    kk_model::spend::format_per_hour(own),
                    kk_model::spend::format_per_hour(cluster)
                ),
            ));
        }
        if let Some(resource) = &budget.resource {
            resource_problem(p, &at.key("resource"), pool, resource);
        }
    }
    let budgeted: Vec<&str> = spec
        .budgeted_pools()
        .map(|(pool, _)| pool.name.as_str())
        .collect();
    if !budgeted.is_empty() && spec.controller.is_none() {
        p.push((
            at.key("controller"),
            format!(
                "pools {} have a spend budget, which our budget controller enforces: set spec.controller.image",
                budgeted.join(", ")
            ),
        ));
    }
    if let Some(enforcement) = &spec.budget_enforcement {
        let at = at.key("budgetEnforcement");
        if budgeted.is_empty() {
            p.push((
                at.clone(),
                "no dynamic pool has a budget (and the cluster none): nothing to enforce".into(),
            ));
        }
        if let Some(text) = &enforcement.stale_after {
            match crate::time::parse_duration(text) {
                Err(e) => p.push((at.key("staleAfter"), e.to_string())),
                Ok(d) if d < MIN_STALE_AFTER => p.push((
                    at.key("staleAfter"),
                    format!(
                        "{text} is shorter than 30s: one slow API server call would look like a silent controller"
                    ),
                )),
                Ok(_) => {}
            }
        }
    }
}

fn amounts(p: &mut Problems, at: &FieldPath, budget: &SpendBudget) {
    if budget.micro_per_hour().is_none() {
        p.push((
            at.key("perHour"),
            format!(
                "{:?} is not an amount: US dollars per hour, e.g. \"40\" or \"12.50\" (at most six decimals)",
                budget.per_hour.as_text()
            ),
        ));
    }
    if budget.warn_percent().is_none() {
        p.push((
            at.key("warnAt"),
            "a share of the budget from 1% to 100%, e.g. \"80%\"".into(),
        ));
    }
}

fn resource_problem(p: &mut Problems, at: &FieldPath, pool: &Pool, resource: &str) {
    if resource == "nodes" {
        p.push((
            at.clone(),
            "Karpenter does not count limits.nodes within one scheduling batch (kubernetes-sigs/karpenter#2915), so one batch could pass the budget: use cpu, memory or nvidia.com/gpu".into(),
        ));
    } else if !BUDGET_RESOURCES.contains(&resource) {
        p.push((
            at.clone(),
            format!("{resource:?} is not one of {}", BUDGET_RESOURCES.join(", ")),
        ));
    } else if resource == GPU_RESOURCE && pool.pool_type != PoolType::Gpu {
        p.push((
            at.clone(),
            "a CPU pool's nodes have no nvidia.com/gpu to count (type: gpu pools only)".into(),
        ));
    }
}
