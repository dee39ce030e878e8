//! Carrying commands out: forceful removal (expiration before the first round, a reclaim), and
//! the execution of a chosen command (nodes gone, pods moved, replacements up).

use super::Candidate;
use super::Command;
use super::Dest;
use super::Engine;
use super::Method;
use super::Replacement;
use super::WorkingNode;
use crate::disrupt::report::NodeOut;
use crate::disrupt::report::ReplacementOut;
use crate::disrupt::report::{self, CommandOut};
use crate::disrupt::state::NodeInfo;
use crate::disrupt::state::PodInfo;
use crate::labels;
use crate::model::Node;
use crate::solver::Placement;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

impl Engine<'_> {
    /// Expired nodes go first, all at once, whatever blocks graceful disruption.
    pub(super) fn expire(&mut self) {
        let now = self.opts.now;
        let expired: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                let Some(pool) = n.pool.as_deref() else {
                    return false;
                };
                let after = n
                    .info
                    .expire_after
                    .unwrap_or_else(|| self.state.pools.get(pool).and_then(|p| p.expire_after));
                n.managed && matches!((after, n.info.created), (Some(a), Some(c)) if now >= c + a)
            })
            .map(|(k, _)| k.clone())
            .collect();
        self.remove_forcefully(Method::Expiration, &expired);
    }

    /// Removes `names` at once, whatever blocks graceful disruption (expiration, a reclaim),
    /// and provisions their pods again: the ones that find no place stay Pending.
    pub(super) fn remove_forcefully(&mut self, method: Method, names: &[String]) {
        if names.is_empty() {
            return;
        }
        let candidates: Vec<Candidate> = names
            .iter()
            .map(|name| {
                let n = &self.nodes[name];
                let moving: Vec<usize> = self
                    .bound
                    .get(name)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .filter(|(_, p)| self.info(p).is_some_and(PodInfo::reschedulable))
                    .map(|(at, _)| at)
                    .collect();
                Candidate {
                    name: name.clone(),
                    pool: n.pool.clone().unwrap_or_default(),
                    price: n.price,
                    it: n.it,
                    capacity_type: n.node.labels.get(labels::CAPACITY_TYPE).cloned(),
                    zone: n.node.labels.get(labels::ZONE).cloned(),
                    reschedulable: moving.len(),
                    cost: 1.0,
                    moving: moving.into(),
                }
            })
            .collect();
        let refs: Vec<&Candidate> = candidates.iter().collect();
        // Provisioning for the evicted pods: failures stay Pending.
        let (claims, moves, stranded) = match self.simulate(&refs, false) {
            Ok(sim) => (sim.claims, sim.moves, Vec::new()),
            Err(_) => {
                // Run it again to learn which pods are placed; keep those, strand the rest.
                let probe = self.probe(&refs, false);
                let mut moves = Vec::new();
                let mut stranded = Vec::new();
                for (pi, p) in probe.pods.iter().enumerate().skip(probe.first_moved) {
                    let p = p.clone();
                    match probe.outcome.placements[pi] {
                        Some(Placement::Existing(ni)) => {
                            moves.push((p, Dest::Existing(probe.kept[&ni].clone())));
                        }
                        Some(Placement::Claim(ci)) => moves.push((p, Dest::Claim(ci))),
                        None => stranded.push((
                            p.key(),
                            probe.outcome.errors.get(&pi).cloned().unwrap_or_default(),
                        )),
                    }
                }
                let outcome = probe.outcome;
                (outcome.claims, moves, stranded)
            }
        };
        let mut replacements = Vec::new();
        for claim in claims {
            if let Some(launch) = self.do_launch(&claim) {
                replacements.push(Replacement { claim, launch });
            }
        }
        let command = Command {
            method,
            candidates,
            replacements,
            moves,
            stranded,
        };
        self.apply(command);
    }

    /// Carries a command out and records it.
    pub(super) fn apply(&mut self, command: Command) {
        let now = self.opts.now;
        let catalog = self.input.catalog.clone();
        let before: f64 = command.candidates.iter().map(|c| c.price).sum();
        let mut nodes_out = Vec::new();
        for c in &command.candidates {
            let n = self.nodes.remove(&c.name).expect("candidate exists");
            self.bound.remove(&c.name);
            nodes_out.push(NodeOut {
                name: c.name.clone(),
                node_pool: c.pool.clone(),
                instance_type: n
                    .node
                    .labels
                    .get(labels::INSTANCE_TYPE)
                    .cloned()
                    .unwrap_or_default(),
                capacity_type: c.capacity_type.clone().unwrap_or_default(),
                zone: c.zone.clone().unwrap_or_default(),
                price_per_hour: crate::disrupt::report::round(c.price),
            });
        }
        let mut repl_names = Vec::new();
        let mut repls_out = Vec::new();
        for r in &command.replacements {
            self.next_name += 1;
            let name = format!("{}-replacement-{}", r.claim.pool, self.next_name);
            let it = &catalog.types()[r.launch.instance_type];
            let kubelet = self
                .pool_kubelet(&r.claim.pool)
                .cloned()
                .unwrap_or_default();
            let pool = self.input.pools.iter().find(|p| p.name == r.claim.pool);
            let mut lbls: BTreeMap<String, String> = it
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            for (k, req) in r.claim.requirements.iter() {
                if let Some(v) = req.single_value()
                    && !lbls.contains_key(k)
                {
                    lbls.insert(k.to_owned(), v.to_owned());
                }
            }
            if let Some(p) = pool {
                lbls.extend(p.labels.clone());
            }
            for (k, v) in [
                (labels::NODEPOOL, r.claim.pool.clone()),
                (labels::INSTANCE_TYPE, it.name.clone()),
                (labels::ZONE, r.launch.zone.clone()),
                (
                    labels::CAPACITY_TYPE,
                    r.launch.capacity_type.as_str().to_owned(),
                ),
                (labels::HOSTNAME, name.clone()),
                (labels::REGISTERED, "true".into()),
                (labels::INITIALIZED, "true".into()),
            ] {
                lbls.insert(k.to_owned(), v);
            }
            let to_map = |r: kk_catalog::Resources| {
                r.iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect::<BTreeMap<_, _>>()
            };
            let node = Node {
                name: name.clone(),
                labels: lbls,
                taints: pool.map(|p| p.taints.clone()).unwrap_or_default(),
                allocatable: to_map(it.allocatable(&kubelet)),
                capacity: to_map(it.capacity.clone()),
            };
            let expire = self
                .state
                .pools
                .get(&r.claim.pool)
                .and_then(|p| p.expire_after);
            self.nodes.insert(
                name.clone(),
                WorkingNode {
                    node,
                    info: NodeInfo {
                        name: name.clone(),
                        claim: Some(name.clone()),
                        created: Some(now),
                        initialized_at: Some(now),
                        initialized: true,
                        last_pod_event: Some(now),
                        expire_after: Some(expire),
                        ready: true,
                        ..NodeInfo::default()
                    },
                    pool: Some(r.claim.pool.clone()),
                    managed: true,
                    it: Some(r.launch.instance_type),
                    price: r.launch.price,
                },
            );
            repl_names.push(name.clone());
            repls_out.push(ReplacementOut {
                name,
                node_pool: r.claim.pool.clone(),
                instance_type: it.name.clone(),
                instance_type_options: r
                    .claim
                    .types
                    .iter()
                    .map(|&ci| catalog.types()[ci].name.clone())
                    .collect(),
                capacity_type: r.launch.capacity_type.as_str().to_owned(),
                zone: r.launch.zone.clone(),
                price_per_hour: crate::disrupt::report::round(r.launch.price),
                pods: Vec::new(),
            });
        }
        let mut moved = 0;
        let mut to_existing = Vec::new();
        let mut targets = BTreeSet::new();
        for (p, dest) in command.moves {
            moved += 1;
            let target = match dest {
                Dest::Existing(n) => {
                    // Where each pod went is the question a reclaim answers.
                    if command.method == Method::Interruption {
                        to_existing.push(report::PodMove {
                            pod: p.key(),
                            node: n.clone(),
                        });
                    }
                    n
                }
                Dest::Claim(k) => {
                    if let Some(out) = repls_out.get_mut(k) {
                        out.pods.push(p.key());
                    }
                    match repl_names.get(k) {
                        Some(n) => n.clone(),
                        None => continue,
                    }
                }
            };
            if let Some(n) = self.nodes.get_mut(&target) {
                n.info.last_pod_event = Some(now);
            }
            targets.insert(target.clone());
            self.bound.entry(target).or_default().push(p);
        }
        for (pod, reason) in &command.stranded {
            self.stranded.push((pod.clone(), reason.clone()));
        }
        for r in &mut repls_out {
            r.pods.sort();
        }
        let mut touched: BTreeSet<String> = command
            .candidates
            .iter()
            .map(|c| c.name.clone())
            .chain(repl_names.iter().cloned())
            .collect();
        touched.extend(targets);
        self.forget_candidates(touched.iter());
        self.update_prepared(touched);
        let after: f64 = command.replacements.iter().map(|r| r.launch.price).sum();
        if let Some(x) = &self.opts.explain
            && command.candidates.iter().any(|c| &c.name == x)
        {
            self.explained.push(format!(
                "round {}: {}: {} (with {} other node(s)){}",
                self.round,
                command.method.name(),
                if command.replacements.is_empty() {
                    "deleted"
                } else {
                    "replaced"
                },
                command.candidates.len() - 1,
                if repl_names.is_empty() {
                    String::new()
                } else {
                    format!(" by {}", repl_names.join(", "))
                }
            ));
        }
        self.commands.push(CommandOut {
            round: self.round,
            method: command.method.name().to_owned(),
            reason: match command.method {
                Method::Expiration => "Expired".to_owned(),
                Method::Interruption => "Reclaimed".to_owned(),
                m => m.reason().as_str().to_owned(),
            },
            decision: if command.replacements.is_empty() {
                "delete"
            } else {
                "replace"
            }
            .to_owned(),
            nodes: nodes_out,
            replacements: repls_out,
            pods_moved: moved,
            moved_to_existing: to_existing,
            price_per_hour_before: crate::disrupt::report::round(before),
            price_per_hour_after: crate::disrupt::report::round(after),
            savings_per_hour: crate::disrupt::report::round(before - after),
        });
    }
}
