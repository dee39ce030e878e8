//! A NodePool's `spec.limits` as the scheduler spends them (`scheduler.go`
//! `filterByRemainingResources`): existing nodes use up what they advertise, and a new NodeClaim
//! is charged pessimistically as the largest type it may still launch as.
//!
//! The `nodes` limit counts existing nodes only: Karpenter v1.14.0 charges a new NodeClaim with
//! `subtractMax`, the largest *capacity* among its instance types, and no instance type's
//! capacity has a `nodes` entry, so within one scheduling round a NodePool with `nodes: 1` and
//! no node yet may open several claims (sigs.k8s.io/karpenter v1.14.0
//! pkg/controllers/provisioning/scheduling/scheduler.go `subtractMax`; the count comes from
//! `StateNode.Capacity`, pkg/controllers/state/statenode.go). The next round sees them as nodes.

use std::collections::BTreeMap;

use kk_catalog::resources::format_quantity;

use super::PoolInstanceType;
use super::bits::Bits;
use crate::res::{Res, ResIndex};

/// What is left of one NodePool's limits.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// (slot, remaining) for each limited resource; `nodes` separately.
    remaining: Vec<(usize, i64)>,
    remaining_nodes: Option<i64>,
    /// Each limit as the NodePool wrote it, for messages.
    written: BTreeMap<String, String>,
    /// The pool's types that still fit within the limits (cached until the next charge).
    within: Option<Bits>,
    /// The resource a spend budget narrows and why a launch past it waits (budget.rs).
    budget: Option<(String, String)>,
}

impl Limits {
    pub(super) fn new(
        limits: &BTreeMap<String, i64>,
        budget: Option<&crate::model::PoolLedger>,
        index: &ResIndex,
    ) -> Limits {
        let mut remaining = Vec::new();
        let mut remaining_nodes = None;
        let mut written = BTreeMap::new();
        for (k, v) in limits {
            written.insert(k.clone(), format_quantity(k, *v));
            if k == "nodes" {
                remaining_nodes = Some(*v);
            } else if let Some(slot) = index.slot(k) {
                remaining.push((slot, *v));
            }
        }
        Limits {
            remaining,
            remaining_nodes,
            written,
            within: None,
            budget: budget.map(|b| (b.resource.clone(), b.reason())),
        }
    }

    /// An existing node of the pool uses up its capacity and one node.
    pub(super) fn charge_node(&mut self, capacity: &Res) {
        for (slot, rem) in &mut self.remaining {
            *rem -= capacity[*slot];
        }
        if let Some(n) = self.remaining_nodes.as_mut() {
            *n -= 1;
        }
        self.within = None;
    }

    /// A new claim uses up, per limited resource, the most any of `kept` has (`subtractMax`);
    /// not a node (see the module comment).
    pub(super) fn charge_claim(&mut self, types: &[PoolInstanceType], kept: &Bits) {
        for (slot, rem) in &mut self.remaining {
            let max = kept
                .iter()
                .map(|t| types[t].capacity[*slot])
                .max()
                .unwrap_or(0);
            *rem -= max;
        }
        self.within = None;
    }

    /// Why the pool may open no further NodeClaim at all, if its node count is spent.
    pub(super) fn nodes_exceeded(&self, pool: &str) -> Option<String> {
        if self.remaining_nodes.is_none_or(|n| n > 0) {
            return None;
        }
        let limit = self.written.get("nodes").cloned().unwrap_or_default();
        Some(format!("nodepool {pool} limit nodes={limit} exceeded"))
    }

    /// The pool's types whose capacity still fits within every limit.
    pub(super) fn within(&mut self, types: &[PoolInstanceType]) -> Bits {
        if let Some(b) = &self.within {
            return b.clone();
        }
        let mut b = Bits::empty(types.len());
        for (i, t) in types.iter().enumerate() {
            if self
                .remaining
                .iter()
                .all(|(slot, rem)| t.capacity[*slot] <= *rem)
            {
                b.set(i);
            }
        }
        self.within = Some(b.clone());
        b
    }

    /// Which limit blocks every type (or, when none alone does, all of them), as written.
    pub(super) fn error(&self, pool: &str, types: &[PoolInstanceType], index: &ResIndex) -> String {
        let blocking: Vec<&(usize, i64)> = self
            .remaining
            .iter()
            .filter(|(slot, rem)| types.iter().all(|t| t.capacity[*slot] > *rem))
            .collect();
        let shown: Vec<&(usize, i64)> = if blocking.is_empty() {
            self.remaining.iter().collect()
        } else {
            blocking
        };
        let names = index.names();
        let parts: Vec<String> = shown
            .iter()
            .map(|(slot, _)| {
                let n = &names[*slot];
                format!("{n}={}", self.written.get(n).cloned().unwrap_or_default())
            })
            .collect();
        let exceeded = format!("nodepool {pool} limit {} exceeded", parts.join(", "));
        // A limit a budget set: say so, naming the budget (the limit stays in the text).
        match &self.budget {
            Some((resource, reason)) if shown.iter().any(|(slot, _)| names[*slot] == *resource) => {
                format!("{reason} ({exceeded})")
            }
            _ => exceeded,
        }
    }
}
