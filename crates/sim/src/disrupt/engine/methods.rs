//! The disruption methods in the controller's order: Emptiness, (Static)Drift,
//! MultiNodeConsolidation, SingleNodeConsolidation.

use super::BALANCED_K;
use super::Cand;
use super::Cmd;
use super::Engine;
use super::Method;
use super::Repl;
use crate::disrupt::state::Reason;
use std::collections::BTreeMap;

/// Multi-node consolidation looks at the first 100 candidates (`maxParallel`).
const MULTI_NODE_MAX: usize = 100;

impl Engine<'_> {
    pub(super) fn emptiness(&mut self, cands: Vec<Cand>) -> Option<Cmd> {
        let mut cands = cands;
        Self::sort_by_savings(&mut cands);
        let mut budget = self.budgets(Reason::Empty);
        let mut chosen = Vec::new();
        for c in cands {
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
        (!chosen.is_empty()).then(|| Cmd {
            method: Method::Emptiness,
            cands: chosen,
            repls: Vec::new(),
            moves: Vec::new(),
            stranded: Vec::new(),
        })
    }

    pub(super) fn drift(&mut self, mut cands: Vec<Cand>) -> Option<Cmd> {
        cands.sort_by_key(|c| (self.nodes[&c.name].info.drifted_at, c.name.clone()));
        let (empty, busy): (Vec<Cand>, Vec<Cand>) = cands.into_iter().partition(|c| c.resched == 0);
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
                    let mut repls = Vec::new();
                    for claim in sim.claims {
                        match self.do_launch(&claim) {
                            Some(launch) => repls.push(Repl { claim, launch }),
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
                    return Some(Cmd {
                        method: Method::Drift,
                        cands: vec![c],
                        repls,
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
        mut cands: Vec<Cand>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Cmd> {
        Self::sort_by_savings(&mut cands);
        let mut budget = self.budgets(Reason::Underutilized);
        let mut ok = Vec::new();
        for c in cands {
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
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let batch: Vec<&Cand> = ok[..=mid].iter().collect();
            let valid = match self.consolidate(&batch, Method::MultiNode) {
                Ok(cmd) => {
                    let s = self.savings(&cmd);
                    self.approve(&cmd.cands, s, totals).is_ok().then_some(cmd)
                }
                Err(_) => None,
            };
            match valid {
                Some(cmd) => {
                    best = Some(cmd);
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

    pub(super) fn single_node(
        &mut self,
        mut cands: Vec<Cand>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Cmd> {
        Self::sort_by_savings(&mut cands);
        // shuffleCandidates: round-robin over the NodePools (upstream: map order; here by name).
        let mut by_pool: BTreeMap<String, Vec<Cand>> = BTreeMap::new();
        for c in cands {
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
        for c in order {
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
                Ok(cmd) => {
                    let s = self.savings(&cmd);
                    if let Err(e) = self.approve(&cmd.cands, s, totals) {
                        self.note(&c.name, m, e);
                        continue;
                    }
                    return Some(cmd);
                }
            }
        }
        None
    }
}
