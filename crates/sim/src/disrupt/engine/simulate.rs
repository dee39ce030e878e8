//! The replacement simulation (`SimulateScheduling`) and the launch of its NodeClaims.

use super::Candidate;
use super::Dest;
use super::Engine;
use super::Sim;
use super::UNDER_CONSOLIDATE_AFTER;
use super::WorkingNode;
use crate::labels;
use crate::model::Effect;
use crate::model::Node;
use crate::model::Pod;
use crate::model::Taint;
use crate::model::Toleration;
use crate::model::TolerationOp;
use crate::solver::ClaimResult;
use crate::solver::Launch;
use crate::solver::NodeChange;
use crate::solver::Outcome;
use crate::solver::Placement;
use crate::solver::Prepared;
use crate::solver::launch;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// One replacement simulation's input and result.
pub(super) struct Probe {
    /// Pending pods first, then the candidates' moving pods from `first_moved` on.
    pub pods: Vec<Pod>,
    pub first_moved: usize,
    pub outcome: Outcome,
    /// The names of the existing nodes moved pods went to, by the scheduler's index
    /// (`Placement::Existing`).
    pub kept: BTreeMap<usize, String>,
}

impl Engine<'_> {
    /// The cluster prepared once per state for every probe of the same kind; a command
    /// carried out changes the state and drops it (`apply`).
    fn prepared(&mut self, consolidation: bool) -> Prepared<'static> {
        if let Some((kind, p)) = self.prepared.take()
            && kind == consolidation
        {
            return p;
        }
        let mut input = self.input.clone();
        input.nodes = self
            .nodes
            .values()
            .map(|n| self.node_for(n, consolidation))
            .collect();
        input.bound = self
            .bound
            .iter()
            .flat_map(|(n, pods)| pods.iter().map(move |p| (n.clone(), p.clone())))
            .collect();
        input.pods = self.pending_for(consolidation);
        Prepared::new(Cow::Owned(input))
    }

    /// A node as probes see it: for consolidation, one still inside `consolidateAfter` is
    /// tainted so that only pending pods land there.
    fn node_for(&self, n: &WorkingNode, consolidation: bool) -> Node {
        let mut node = n.node.clone();
        if consolidation && self.under_consolidate_after(n).is_some() {
            node.taints.push(Taint {
                key: UNDER_CONSOLIDATE_AFTER.into(),
                value: String::new(),
                effect: Effect::NoSchedule,
            });
        }
        node
    }

    /// After a command: the prepared cluster with the nodes it touched (gone, added, or
    /// given pods) changed in place, or dropped when it cannot be (or `rebuild` is set).
    pub(super) fn update_prepared(&mut self, touched: BTreeSet<String>) {
        let Some((consolidation, mut prepared)) = self.prepared.take() else {
            return;
        };
        if self.rebuild {
            return;
        }
        let changes = touched
            .into_iter()
            .map(|name| {
                let now = self.nodes.get(&name).map(|n| {
                    let pods = self.bound.get(&name).cloned().unwrap_or_default();
                    (self.node_for(n, consolidation), pods)
                });
                NodeChange { name, now }
            })
            .collect();
        if prepared.update(changes) {
            self.prepared = Some((consolidation, prepared));
        }
    }

    /// The pending pods; for consolidation, tolerating the nodes still inside
    /// `consolidateAfter` (only moved pods avoid them).
    fn pending_for(&self, consolidation: bool) -> Vec<Pod> {
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
        pods
    }

    /// The candidates' nodes gone, their pods (and the pending ones) scheduled over the rest
    /// plus new NodeClaims: a delta on the prepared cluster, which stays as it was.
    pub(super) fn probe(&mut self, candidates: &[&Candidate], consolidation: bool) -> Probe {
        let prepared = self.prepared(consolidation);
        let nodes = &prepared.input().nodes;
        // The prepared nodes are in name order (`self.nodes`'s, kept by `update`).
        let mut gone = vec![false; nodes.len()];
        for c in candidates {
            if let Ok(at) = nodes.binary_search_by(|n| n.name.as_str().cmp(&c.name)) {
                gone[at] = true;
            }
        }
        let mut pods = prepared.input().pods.clone();
        let first_moved = pods.len();
        for c in candidates {
            let bound = self.bound.get(&c.name).map_or(&[][..], Vec::as_slice);
            pods.extend(c.moving.iter().map(|&at| bound[at].clone()));
        }
        let outcome = prepared.simulate(&pods, &gone);
        // `Placement::Existing` indexes the scheduler's existing nodes, which it orders
        // initialized ones first (not by name alone): each names its input node.
        let kept = outcome.placements[first_moved..]
            .iter()
            .filter_map(|p| match p {
                Some(Placement::Existing(e)) => Some(*e),
                _ => None,
            })
            .map(|e| (e, nodes[outcome.existing[e].0].name.clone()))
            .collect();
        self.prepared = Some((consolidation, prepared));
        Probe {
            pods,
            first_moved,
            outcome,
            kept,
        }
    }

    /// Whether a node is initialized (or not Karpenter's).
    fn initialized(&self, name: &str) -> bool {
        self.nodes.get(name).is_none_or(|n| {
            n.node.pool().is_none()
                || n.node
                    .labels
                    .get(labels::INITIALIZED)
                    .is_some_and(|v| v == "true")
        })
    }

    /// `SimulateScheduling`: the candidates' nodes gone, their pods (and the pending ones)
    /// scheduled over the rest plus new NodeClaims. `Err` names the pods that found no place.
    pub(super) fn simulate(
        &mut self,
        candidates: &[&Candidate],
        consolidation: bool,
    ) -> Result<Sim, String> {
        let Probe {
            pods,
            first_moved,
            outcome,
            kept,
        } = self.probe(candidates, consolidation);
        let mut failed = Vec::new();
        for (&pi, reason) in outcome.errors.range(first_moved..) {
            failed.push(format!("{}: {reason}", pods[pi].key()));
        }
        // The probe's pods move into the result (a pod is large: growing the vector and
        // copying each pod once more showed in the profile).
        let mut moves = Vec::with_capacity(pods.len() - first_moved);
        for (pi, pod) in pods.into_iter().enumerate().skip(first_moved) {
            match outcome.placements[pi] {
                Some(Placement::Existing(ni)) => {
                    let name = &kept[&ni];
                    if !self.initialized(name) {
                        failed.push(format!(
                            "{}: would schedule against uninitialized node/{name}",
                            pod.key(),
                        ));
                    }
                    moves.push((pod, Dest::Existing(name.clone())));
                }
                Some(Placement::Claim(ci)) => {
                    moves.push((pod, Dest::Claim(ci)));
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
