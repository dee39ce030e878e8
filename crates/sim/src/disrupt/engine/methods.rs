//! The disruption methods in the controller's order: Emptiness, (Static)Drift,
//! MultiNodeConsolidation, SingleNodeConsolidation.

use super::BALANCED_K;
use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use super::Replacement;
use super::watch::Stopwatch;
use crate::disrupt::state::Reason;
use std::collections::BTreeMap;

/// Multi-node consolidation looks at the first 100 candidates (`maxParallel`).
const MULTI_NODE_MAX: usize = 100;

impl Engine<'_> {
    pub(super) fn emptiness(&mut self, candidates: Vec<Candidate>) -> Option<Command> {
        let mut candidates = candidates;
        Self::sort_by_savings(&mut candidates);
        let mut budget = self.budgets(Reason::Empty);
        let mut chosen = Vec::new();
        for c in candidates {
            let left = budget.entry(c.pool.clone()).or_default();
            if *left == 0 {
                self.note(
                    &c.name,
                    Some(Method::Emptiness),
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Empty",
                        c.pool
                    ),
                );
                continue;
            }
            *left -= 1;
            chosen.push(c);
        }
        (!chosen.is_empty()).then(|| Command {
            method: Method::Emptiness,
            candidates: chosen,
            replacements: Vec::new(),
            moves: Vec::new(),
            stranded: Vec::new(),
        })
    }

    pub(super) fn drift(&mut self, mut candidates: Vec<Candidate>) -> Option<Command> {
        candidates.sort_by_key(|c| (self.nodes[&c.name].info.drifted_at, c.name.clone()));
        let (empty, busy): (Vec<Candidate>, Vec<Candidate>) =
            candidates.into_iter().partition(|c| c.reschedulable == 0);
        let budget = self.budgets(Reason::Drifted);
        for c in empty.into_iter().chain(busy) {
            if budget.get(&c.pool).copied().unwrap_or(0) == 0 {
                self.note(
                    &c.name,
                    Some(Method::Drift),
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Drifted",
                        c.pool
                    ),
                );
                continue;
            }
            match self.simulate(&[&c], false) {
                Err(e) => self.note(&c.name, Some(Method::Drift), e),
                Ok(sim) => {
                    let mut replacements = Vec::new();
                    for claim in sim.claims {
                        match self.do_launch(&claim) {
                            Some(launch) => replacements.push(Replacement { claim, launch }),
                            None => {
                                self.note(
                                    &c.name,
                                    Some(Method::Drift),
                                    "no launchable offering for a replacement".into(),
                                );
                                continue;
                            }
                        }
                    }
                    return Some(Command {
                        method: Method::Drift,
                        candidates: vec![c],
                        replacements,
                        moves: sim.moves,
                        stranded: Vec::new(),
                    });
                }
            }
        }
        None
    }

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

    /// Says that a method ran out of its `--budget-time` in this pass.
    fn stopped(&mut self, method: Method, what: &str) {
        let limit = self
            .opts
            .watch
            .as_ref()
            .and_then(|w| w.budget_seconds)
            .unwrap_or(0.0);
        self.warnings.push(format!(
            "pass {}: {} stopped at its time limit ({limit}s, --budget-time) {what}",
            self.round,
            method.name()
        ));
    }

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
