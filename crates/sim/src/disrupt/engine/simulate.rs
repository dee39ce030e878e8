//! The replacement simulation (`SimulateScheduling`) and the launch of its NodeClaims.

use super::Candidate;
use super::Dest;
use super::Engine;
use super::Sim;
use super::UNDER_CONSOLIDATE_AFTER;
use crate::labels;
use crate::model::Effect;
use crate::model::Taint;
use crate::model::Toleration;
use crate::model::TolerationOp;
use crate::plan::simulate;
use crate::solver::ClaimResult;
use crate::solver::Launch;
use crate::solver::Placement;
use crate::solver::launch;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

impl Engine<'_> {
    /// `SimulateScheduling`: the candidates' nodes gone, their pods (and the pending ones)
    /// scheduled over the rest plus new NodeClaims. `Err` names the pods that found no place.
    pub(super) fn simulate(
        &mut self,
        candidates: &[&Candidate],
        consolidation: bool,
    ) -> Result<Sim, String> {
        let gone: BTreeSet<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (name, n) in &self.nodes {
            if gone.contains(name.as_str()) {
                continue;
            }
            let mut node = n.node.clone();
            if consolidation && self.under_consolidate_after(n).is_some() {
                node.taints.push(Taint {
                    key: UNDER_CONSOLIDATE_AFTER.into(),
                    value: String::new(),
                    effect: Effect::NoSchedule,
                });
            }
            nodes.push(node);
        }
        if self.bound_dirty {
            self.input.bound = self
                .bound
                .iter()
                .flat_map(|(n, pods)| pods.iter().map(move |p| (n.clone(), p.clone())))
                .collect();
            self.bound_dirty = false;
        }
        let mut pods = self.pending.clone();
        if consolidation {
            for p in &mut pods {
                p.tolerations.push(Toleration {
                    key: UNDER_CONSOLIDATE_AFTER.into(),
                    operator: TolerationOp::Exists,
                    value: String::new(),
                    effect: None,
                });
            }
        }
        let first_moved = pods.len();
        for c in candidates {
            pods.extend(c.moving.iter().cloned());
        }
        self.input.nodes = nodes;
        self.input.pods = pods;
        let outcome = simulate(&self.input);
        let mut failed = Vec::new();
        for (&pi, reason) in outcome.errors.range(first_moved..) {
            failed.push(format!("{}: {reason}", self.input.pods[pi].key()));
        }
        let mut moves = Vec::new();
        for pi in first_moved..self.input.pods.len() {
            match outcome.placements[pi] {
                Some(Placement::Existing(ni)) => {
                    let node = &self.input.nodes[ni];
                    let initialized = node.pool().is_none()
                        || node
                            .labels
                            .get(labels::INITIALIZED)
                            .is_some_and(|v| v == "true");
                    if !initialized {
                        failed.push(format!(
                            "{}: would schedule against uninitialized node/{}",
                            self.input.pods[pi].key(),
                            node.name
                        ));
                    }
                    moves.push((
                        self.input.pods[pi].clone(),
                        Dest::Existing(node.name.clone()),
                    ));
                }
                Some(Placement::Claim(ci)) => {
                    moves.push((self.input.pods[pi].clone(), Dest::Claim(ci)));
                }
                None => {}
            }
        }
        if !failed.is_empty() {
            let n = failed.len();
            failed.truncate(3);
            let more = if n > 3 {
                format!(" (and {} more)", n - 3)
            } else {
                String::new()
            };
            return Err(format!(
                "pods would not reschedule: {}{more}",
                failed.join("; ")
            ));
        }
        Ok(Sim {
            claims: outcome.claims,
            moves,
        })
    }

    pub(super) fn do_launch(&self, claim: &ClaimResult) -> Option<Launch> {
        let kubelet = self.input.pools[claim.pool_index].kubelet.clone();
        let catalog = &self.input.catalog;
        let alloc = |ci: usize| {
            catalog.types()[ci]
                .allocatable(&kubelet)
                .iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        };
        launch(catalog, claim, alloc, &self.input.options)
    }
}
