//! MultiNodeConsolidation (`multinodeconsolidation.go`): the largest prefix of the candidates,
//! by savings, that can go together (`firstNConsolidationOption`'s binary search).

use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use super::watch::Stopwatch;
use crate::disrupt::state::Reason;
use std::collections::BTreeMap;

/// Multi-node consolidation looks at the first 100 candidates (`maxParallel`).
const MULTI_NODE_MAX: usize = 100;

impl Engine<'_> {
    pub(super) fn multi_node(
        &mut self,
        mut candidates: Vec<Candidate>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Command> {
        Self::sort_by_savings(&mut candidates);
        let mut budget = self.budgets(Reason::Underutilized);
        let mut ok = Vec::new();
        for c in candidates {
            let left = budget.entry(c.pool.clone()).or_default();
            if *left == 0 {
                continue;
            }
            *left -= 1;
            ok.push(c);
        }
        if ok.len() < 2 {
            return None;
        }
        // firstNConsolidationOption: binary search on the prefix length.
        let mut lo = 1usize;
        let mut hi = if ok.len() <= MULTI_NODE_MAX {
            ok.len() - 1
        } else {
            MULTI_NODE_MAX
        };
        let mut best = None;
        let mut watch = Stopwatch::start(self.opts.watch.as_ref());
        let mut steps = 0;
        while lo <= hi {
            // Upstream checks its limit before each step and keeps the best command so far.
            if watch.expired() {
                self.stopped(
                    Method::MultiNode,
                    &format!(
                        "after {steps} binary-search steps; {}",
                        if best.is_some() {
                            "kept the best command found so far"
                        } else {
                            "no command found"
                        }
                    ),
                );
                break;
            }
            steps += 1;
            let round = self.round;
            watch.tick(|| {
                format!("pass {round}: MultiNodeConsolidation, binary-search step {steps}")
            });
            let mid = (lo + hi) / 2;
            let batch: Vec<&Candidate> = ok[..=mid].iter().collect();
            let valid = match self.consolidate(&batch, Method::MultiNode) {
                Ok(command) => {
                    let s = self.savings(&command);
                    self.approve(&command.candidates, s, totals)
                        .is_ok()
                        .then_some(command)
                }
                Err(_) => None,
            };
            match valid {
                Some(command) => {
                    best = Some(command);
                    lo = mid + 1;
                }
                None => {
                    if mid == 0 {
                        break;
                    }
                    hi = mid - 1;
                }
            }
        }
        best
    }
}
