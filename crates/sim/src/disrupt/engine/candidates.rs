//! Candidates (`NewCandidate`, `GetCandidates`), disruption budgets
//! (`BuildDisruptionBudgetMapping`) and the Balanced consolidation policy's approval.

use super::BALANCED_K;
use super::Candidate;
use super::Engine;
use super::Method;
use super::WorkingNode;
use crate::disrupt::state::PodInfo;
use crate::disrupt::state::Policy;
use crate::disrupt::state::Reason;
use crate::labels;
use crate::model::Effect;
use crate::model::Pod;
use crate::model::Taint;
use crate::model::untolerated;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

impl Engine<'_> {
    /// `NewCandidate` for every node: the candidates, and why the others are not. A node's
    /// answer depends only on it and its pods (the clock stands still during a run), so it is
    /// kept until a command touches the node (`forget_candidates`).
    pub(super) fn candidates(&mut self, method: Method, record: bool) -> Vec<Candidate> {
        let slot = usize::from(method.eventual());
        let mut cache = std::mem::take(&mut self.candidate_cache);
        let mut out = Vec::new();
        let mut notes = Vec::new();
        for (name, n) in &self.nodes {
            if !cache.contains_key(name) {
                cache.insert(name.clone(), Default::default());
            }
            let answers = cache.get_mut(name).expect("inserted");
            let answer =
                answers[slot].get_or_insert_with(|| self.candidate_of(name, n, method.eventual()));
            match answer {
                Ok(c) => out.push(c.clone()),
                Err(why) if record => notes.push((name.clone(), why.clone())),
                Err(_) => {}
            }
        }
        if record {
            for (n, r) in notes {
                self.note(&n, None, r);
            }
        }
        self.candidate_cache = cache;
        out
    }

    /// After a command: these nodes' candidacy is to be judged again.
    pub(super) fn forget_candidates<'n>(&mut self, nodes: impl Iterator<Item = &'n String>) {
        for name in nodes {
            self.candidate_cache.remove(name);
        }
    }

    /// `NewCandidate` for one node (`eventual`: for Drift): the candidate, or why it is not one.
    fn candidate_of(
        &self,
        name: &str,
        n: &WorkingNode,
        eventual: bool,
    ) -> Result<Candidate, String> {
        let now = self.opts.now;
        let disrupted = [Taint {
            key: "karpenter.sh/disrupted".into(),
            value: String::new(),
            effect: Effect::NoSchedule,
        }];
        if !n.managed {
            return Err("node isn't managed by karpenter".into());
        }
        if !n.info.initialized {
            return Err("node isn't initialized".into());
        }
        if n.info.deleting {
            return Err("node is deleting or marked for deletion".into());
        }
        if n.info.do_not_disrupt {
            return Err(
                "disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation"
                    .into(),
            );
        }
        let pool_name = n.pool.clone().unwrap_or_default();
        let Some(pool) = self.state.pools.get(&pool_name) else {
            return Err(format!("NodePool not found (NodePool={pool_name})"));
        };
        // Pods without a PodInfo are not the simulation's to judge: every check skips them.
        let pods: Vec<(usize, &Pod, &PodInfo)> = self
            .bound
            .get(name)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(at, p)| Some((at, p, self.info(p)?)))
            .collect();
        let eventual_ok = eventual && n.info.termination_grace.unwrap_or(pool.termination_grace);
        let mut blocked = None;
        for &(_, _, info) in &pods {
            if info.active() && info.do_not_disrupt_active(now) {
                blocked = Some(format!(
                    "pod {} has \"karpenter.sh/do-not-disrupt\" annotation",
                    info.key()
                ));
                break;
            }
        }
        if blocked.is_none() {
            'pods: for &(_, p, info) in &pods {
                let tolerates_disrupted = untolerated(&disrupted, &p.tolerations).is_none();
                if !info.active()
                    || tolerates_disrupted
                    || info.mirror()
                    || info.do_not_disrupt_active(now)
                {
                    continue;
                }
                let matching: Vec<_> = self.state.pdbs.iter().filter(|d| d.selects(info)).collect();
                if matching.len() > 1 {
                    blocked = Some(format!(
                        "eviction does not support multiple PDBs ({}) for pod {}",
                        matching
                            .iter()
                            .map(|d| d.key())
                            .collect::<Vec<_>>()
                            .join(", "),
                        info.key()
                    ));
                    break;
                }
                for d in matching {
                    if d.always_allow_unhealthy && info.not_ready {
                        continue 'pods;
                    }
                    if d.disruptions_allowed == 0 {
                        blocked = Some(format!(
                            "pdb {} prevents pod evictions (pod {})",
                            d.key(),
                            info.key()
                        ));
                        break 'pods;
                    }
                }
            }
        }
        if let Some(b) = blocked
            && !eventual_ok
        {
            return Err(b);
        }
        let mut reschedulable = 0;
        let mut cost = 1.0;
        let mut moving = Vec::new();
        for &(at, _, info) in &pods {
            if !info.reschedulable() {
                continue;
            }
            reschedulable += 1;
            cost += info.eviction_cost().max(0.0);
            let fully_blocked = self.state.pdbs.iter().any(|d| {
                d.selects(info) && d.fully_blocking && !(d.always_allow_unhealthy && info.not_ready)
            });
            if (!info.active() || !info.do_not_disrupt_active(now)) && !fully_blocked {
                moving.push(at);
            }
        }
        Ok(Candidate {
            name: name.to_owned(),
            pool: pool_name,
            price: n.price,
            it: n.it,
            capacity_type: n.node.labels.get(labels::CAPACITY_TYPE).cloned(),
            zone: n.node.labels.get(labels::ZONE).cloned(),
            reschedulable,
            moving: moving.into(),
            cost,
        })
    }

    /// `BuildDisruptionBudgetMapping`.
    pub(super) fn budgets(&self, reason: Reason) -> BTreeMap<String, i64> {
        let mut count: BTreeMap<&str, i64> = BTreeMap::new();
        let mut disrupting: BTreeMap<&str, i64> = BTreeMap::new();
        for n in self.nodes.values() {
            if !n.managed || !n.info.initialized {
                continue;
            }
            let Some(p) = n.pool.as_deref() else { continue };
            *count.entry(p).or_default() += 1;
            if !n.info.ready || n.info.deleting {
                *disrupting.entry(p).or_default() += 1;
            }
        }
        self.state
            .pools
            .values()
            .map(|p| {
                let n = count.get(p.name.as_str()).copied().unwrap_or(0);
                let allowed = p.allowed(self.opts.now, n, reason);
                let d = disrupting.get(p.name.as_str()).copied().unwrap_or(0);
                (p.name.clone(), (allowed - d).max(0))
            })
            .collect()
    }

    /// Per-pool totals for the Balanced policy (`computeNodePoolTotals`; the pool's cost is
    /// every node's price, as the cluster cost tracker has it).
    pub(super) fn totals(&self, candidates: &[Candidate]) -> BTreeMap<String, (f64, f64)> {
        let by_name: BTreeMap<&str, &Candidate> =
            candidates.iter().map(|c| (c.name.as_str(), c)).collect();
        let mut t: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (name, n) in &self.nodes {
            let Some(pool) = &n.pool else { continue };
            let e = t.entry(pool.clone()).or_default();
            e.0 += n.price;
            e.1 += match by_name.get(name.as_str()) {
                Some(c) => c.cost,
                None => {
                    1.0 + self
                        .bound
                        .get(name)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| self.info(p))
                        .filter(|i| i.reschedulable())
                        .map(|i| i.eviction_cost().max(0.0))
                        .sum::<f64>()
                }
            };
        }
        t
    }

    pub(super) fn balanced(&self, pool: &str) -> bool {
        self.state
            .pools
            .get(pool)
            .is_some_and(|p| p.policy == Policy::Balanced)
    }

    /// `EvaluateBalancedMove`: every Balanced pool of the command must score ≥ 1/k.
    pub(super) fn approve(
        &self,
        cmd_cands: &[Candidate],
        savings: f64,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Result<(), String> {
        let source: f64 = cmd_cands.iter().map(|c| c.price).sum();
        let pools: BTreeSet<&str> = cmd_cands.iter().map(|c| c.pool.as_str()).collect();
        for pool in &pools {
            if !self.balanced(pool) {
                continue;
            }
            let in_pool: Vec<&Candidate> = cmd_cands.iter().filter(|c| c.pool == *pool).collect();
            let dcost: f64 = in_pool.iter().map(|c| c.cost).sum();
            let pcost: f64 = in_pool.iter().map(|c| c.price).sum();
            let s = if source > 0.0 && pools.len() > 1 {
                savings * pcost / source
            } else {
                savings
            };
            let (tc, td) = totals.get(*pool).copied().unwrap_or((0.0, 0.0));
            let score = if tc <= 0.0 || td <= 0.0 || s / tc <= 0.0 {
                0.0
            } else if dcost / td == 0.0 {
                f64::INFINITY
            } else {
                (s / tc) / (dcost / td)
            };
            if score < 1.0 / BALANCED_K {
                return Err(format!(
                    "Balanced policy of nodepool {pool}: score {score:.3} below 1/{BALANCED_K} (savings {:.1}% of the pool's cost, disruption {:.1}% of its disruption cost)",
                    100.0 * s / tc.max(f64::MIN_POSITIVE),
                    100.0 * dcost / td.max(f64::MIN_POSITIVE)
                ));
            }
        }
        Ok(())
    }
}
