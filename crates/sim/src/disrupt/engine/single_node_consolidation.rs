//! SingleNodeConsolidation (`singlenodeconsolidation.go`): one candidate at a time, round-robin
//! over the NodePools, the first that can be deleted or replaced more cheaply.

use super::BALANCED_K;
use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use super::watch::Stopwatch;
use crate::disrupt::state::Reason;
use std::collections::BTreeMap;

impl Engine<'_> {
    pub(super) fn single_node(
        &mut self,
        mut candidates: Vec<Candidate>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Command> {
        Self::sort_by_savings(&mut candidates);
        // shuffleCandidates: round-robin over the NodePools (upstream: map order; here by name).
        let mut by_pool: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for c in candidates {
            by_pool.entry(c.pool.clone()).or_default().push(c);
        }
        let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
        let mut order = Vec::new();
        for i in 0..longest {
            for list in by_pool.values() {
                if let Some(c) = list.get(i) {
                    order.push(c.clone());
                }
            }
        }
        let budget = self.budgets(Reason::Underutilized);
        let mut watch = Stopwatch::start(self.opts.watch.as_ref());
        let total = order.len();
        for (evaluated, c) in order.into_iter().enumerate() {
            // Upstream checks its limit before each candidate and gives up the pass.
            if watch.expired() {
                self.stopped(
                    Method::SingleNode,
                    &format!("after {evaluated} of {total} candidates; no command this pass"),
                );
                return None;
            }
            let round = self.round;
            watch.tick(|| {
                format!("pass {round}: SingleNodeConsolidation, candidate {evaluated} of {total}")
            });
            let m = Some(Method::SingleNode);
            if budget.get(&c.pool).copied().unwrap_or(0) == 0 {
                self.note(
                    &c.name,
                    m,
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Underutilized",
                        c.pool
                    ),
                );
                continue;
            }
            if self.balanced(&c.pool)
                && let Some(&(tc, td)) = totals.get(&c.pool)
                && tc > 0.0
            {
                let score = if td <= 0.0 || c.price / tc <= 0.0 {
                    0.0
                } else {
                    (c.price / tc) / (c.cost / td)
                };
                if score < 1.0 / BALANCED_K {
                    self.note(&c.name, m, format!("Balanced policy: the node cannot pass the score threshold ({score:.3} < 1/{BALANCED_K})"));
                    continue;
                }
            }
            match self.consolidate(&[&c], Method::SingleNode) {
                Err(e) => self.note(&c.name, m, e),
                Ok(command) => {
                    let s = self.savings(&command);
                    if let Err(e) = self.approve(&command.candidates, s, totals) {
                        self.note(&c.name, m, e);
                        continue;
                    }
                    return Some(command);
                }
            }
        }
        None
    }
}
