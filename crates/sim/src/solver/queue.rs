//! The loop (`scheduler.go` `Solve`, `queue.go`): pods in queue order, each trying existing
//! nodes, then in-flight NodeClaims, then a new NodeClaim per NodePool, relaxing its
//! preferences when nothing takes it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::outcome::{Attempt, Outcome, Placement, PodError};
use super::relax::relax;
use super::{GO_SORT_EXACT, Scheduler};
use crate::model::Pod;
use crate::res;

/// A pod screens claims by position on a key only while the claims were narrowed to at most
/// this many domains of it (each costs the pod a topology check up front).
const BY_POSITION_DOMAINS: usize = 64;

impl Scheduler<'_> {
    pub(crate) fn solve(mut self) -> Outcome {
        let pods = self.pods;
        let mut errors: BTreeMap<usize, String> = BTreeMap::new();
        let mut waiting: BTreeSet<usize> = BTreeSet::new();
        let mut queue_pods: Vec<usize> = Vec::new();
        for (i, p) in self.pods.iter().enumerate() {
            match &p.invalid {
                Some(reason) => {
                    errors.insert(i, reason.clone());
                }
                None if self.no_pools => {
                    errors.insert(i, "no nodepools found".into());
                }
                None => queue_pods.push(i),
            }
        }
        // Queue order: CPU, then memory, descending; then creation time; then UID (pod objects
        // have one; `queue.go` `byCPUAndMemoryDescending`); then input order.
        queue_pods.sort_by(|&a, &b| {
            let (da, db) = (&self.data[a].requests, &self.data[b].requests);
            db[0]
                .cmp(&da[0])
                .then(db[1].cmp(&da[1]))
                .then_with(|| pods[a].created.cmp(&pods[b].created))
                .then_with(|| match (&pods[a].uid, &pods[b].uid) {
                    (Some(x), Some(y)) => x.as_bytes().cmp(y.as_bytes()),
                    _ => std::cmp::Ordering::Equal,
                })
                .then(a.cmp(&b))
        });
        let mut queue: VecDeque<usize> = queue_pods.into();
        let mut last_len: HashMap<usize, usize> = HashMap::new();
        while let Some(&pid) = queue.front() {
            if last_len.get(&pid) == Some(&queue.len()) {
                break;
            }
            queue.pop_front();
            if Some(pid) == self.trace_pod {
                self.trace.attempts.clear();
                self.trace.relaxations.clear();
                self.trace.passes += 1;
            }
            match self.try_schedule(pid) {
                Ok(()) => {
                    errors.remove(&pid);
                    waiting.remove(&pid);
                }
                Err(e) => {
                    if e.reserved {
                        waiting.insert(pid);
                    } else {
                        waiting.remove(&pid);
                    }
                    errors.insert(pid, e.text());
                    let original = &pods[pid];
                    self.topology.update(pid, original);
                    self.data[pid] = self.pod_data(original);
                    queue.push_back(pid);
                    last_len.insert(pid, queue.len());
                }
            }
        }
        self.finish(errors, waiting)
    }

    fn try_schedule(&mut self, pid: usize) -> Result<(), PodError> {
        let pods = self.pods;
        let mut pod: Cow<'_, Pod> = Cow::Borrowed(&pods[pid]);
        loop {
            let err = match self.add(pid, &pod) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            // Relaxing would not help: the reservation may free up, in this loop or the next.
            if err.reserved {
                return Err(err);
            }
            let Some(step) = relax(pod.to_mut(), self.tolerate_prefer_no_schedule) else {
                return Err(err);
            };
            if Some(pid) == self.trace_pod {
                self.trace.relaxations.push(step);
                self.trace.attempts.clear();
            }
            self.topology.update(pid, &pod);
            self.data[pid] = self.pod_data(&pod);
        }
    }

    fn note(&mut self, pid: usize, target: String, outcome: Result<(), String>) {
        if Some(pid) == self.trace_pod {
            self.trace.attempts.push(Attempt { target, outcome });
        }
    }

    /// Whether topology lets the pod onto a claim narrowed to domain `d` of key `ki` (an index
    /// into the keys), remembered in `memo` for the rest of the pod's scan.
    fn key_verdict(
        &mut self,
        memo: &mut Vec<(usize, u32, bool)>,
        pid: usize,
        pod: &Pod,
        ki: usize,
        d: u32,
    ) -> bool {
        if let Some(&(_, _, ok)) = memo.iter().find(|(i, dd, _)| *i == ki && *dd == d) {
            return ok;
        }
        let domain = self.topology.domain_name(d).to_owned();
        let ok = self.topology.key_allows(
            pid,
            pod,
            &self.data[pid].strict,
            &self.topo_keys[ki],
            &domain,
        );
        memo.push((ki, d, ok));
        ok
    }

    fn add(&mut self, pid: usize, pod: &Pod) -> Result<(), PodError> {
        let traced = self.trace_pod == Some(pid);
        let slots = self.index.len();
        for e in 0..self.existing.len() {
            // Untraced, a node without room is skipped unread (the first check it would fail).
            if !traced {
                let room = &self.rooms[e * slots..(e + 1) * slots];
                let requests = &self.data[pid].requests;
                if !room.iter().zip(requests).all(|(a, r)| *a >= 0 && r <= a) {
                    continue;
                }
            }
            let r = self.existing_can_add(e, pid, pod, traced);
            if traced {
                let target = format!(
                    "existing node {}",
                    self.input.nodes[self.existing[e].node].name
                );
                let outcome = match &r {
                    Ok(_) => Ok(()),
                    Err(reason) => Err(reason.clone().unwrap_or_default()),
                };
                self.note(pid, target, outcome);
            }
            if let Ok(reqs) = r {
                let data = &self.data[pid];
                let node = &mut self.existing[e];
                res::sub(&mut self.rooms[e * slots..(e + 1) * slots], &data.requests);
                node.pods.push(pid);
                node.host_ports.extend(pod.host_ports.iter().cloned());
                let taints = node.taints.clone();
                self.topology.record(pid, pod, &taints, &reqs);
                self.existing[e].reqs = Arc::new(reqs);
                self.placements[pid] = Some(Placement::Existing(e));
                return Ok(());
            }
        }
        // In-flight NodeClaims, fewest pods first, in the order Go's sort leaves them.
        if self.claims.len() <= GO_SORT_EXACT {
            let claims = &self.claims;
            crate::gosort::sort_slice(&mut self.order, |&a, &b| {
                claims[a].pods.len() < claims[b].pods.len()
            });
            self.screens.forget();
        }
        let order = std::mem::take(&mut self.order);
        let mut chosen = None;
        // Exact prefilters, prepared once per pod: hostname (anti-)affinity/spread counts, and
        // the topology verdict for claims already narrowed to one domain of a key.
        let host_plan = self.topology.host_plan(pid, pod);
        let keys: Vec<usize> = self
            .topology
            .keys_for(pid, pod)
            .iter()
            .filter_map(|k| self.topo_keys.iter().position(|t| t == k))
            .collect();
        let mut memo: Vec<(usize, u32, bool)> = Vec::new();
        let requests = self.data[pid].requests.clone();
        // With the order kept one move at a time, a pod that may join no host a hostname
        // group counts (highest allowed count 0) passes over those claims' positions
        // unscreened: `host_ok` would refuse each of them.
        let free = if !traced && self.claims.len() > GO_SORT_EXACT {
            host_plan
                .iter()
                .find(|&&(_, _, limit)| limit <= 0)
                .map(|&(inverse, g, _)| {
                    let topology = &self.topology;
                    self.screens.occupancy(inverse, g, &order, |host| {
                        topology.host_count(inverse, g, host) > 0
                    })
                })
        } else {
            None
        };
        // With the order followed one move at a time, the claims' single domains are read by
        // position, before the claim itself: zone-spread and zone-affinity pods pass over
        // runs of claims in zones they may not take.
        let by_position = !traced
            && !keys.is_empty()
            && self.screens.tracking()
            && keys
                .iter()
                .all(|&ki| self.screens.kinds(ki).len() <= BY_POSITION_DOMAINS);
        // Per key: whether the pod is refused each coded domain (code 0, none, never is).
        let mut refused: Vec<Vec<bool>> = Vec::new();
        if by_position {
            for &ki in &keys {
                let kinds = self.screens.kinds(ki).to_vec();
                let mut verdicts = vec![false];
                for d in kinds {
                    verdicts.push(!self.key_verdict(&mut memo, pid, pod, ki, d));
                }
                refused.push(verdicts);
            }
        }
        let mut next = 0;
        'scan: while next < order.len() {
            if let Some(i) = free {
                match self.screens.next_free(i, next) {
                    Some(position) => next = position,
                    None => break,
                }
            }
            if by_position && self.screens.refused(&keys, &refused, next) {
                next += 1;
                while next < order.len() && self.screens.refused(&keys, &refused, next) {
                    next += 1;
                }
                continue 'scan;
            }
            let c = order[next];
            next += 1;
            if !traced {
                // The checks below are necessary conditions of `claim_can_add` for an untraced
                // pod (whose rejections nobody reads), cheapest and most selective first.
                if !self.topology.host_ok(&host_plan, self.screens.host(c)) {
                    continue;
                }
                if !by_position {
                    for &ki in &keys {
                        let d = self.screens.single(c, ki);
                        if d != u32::MAX && !self.key_verdict(&mut memo, pid, pod, ki, d) {
                            continue 'scan;
                        }
                    }
                }
                if !self.screens.has_room(c, &requests) {
                    continue;
                }
            }
            // An in-flight claim that cannot hold its reservations with this pod refuses it,
            // silently (upstream drops in-flight errors).
            let r =
                self.claim_can_add(c, pid, pod, true, false)
                    .and_then(
                        |(reqs, types)| match self.offerings_to_reserve(c, &reqs, &types) {
                            Ok(reserve) => Ok((reqs, types, reserve)),
                            Err(reason) => Err(traced.then_some(reason)),
                        },
                    );
            if traced {
                let target = format!(
                    "in-flight NodeClaim {} (nodepool {}, {} pods)",
                    self.claims[c].hostname,
                    self.pools[self.claims[c].pool].name,
                    self.claims[c].pods.len()
                );
                let outcome = match &r {
                    Ok(_) => Ok(()),
                    Err(reason) => Err(reason.clone().unwrap_or_default()),
                };
                self.note(pid, target, outcome);
            }
            if let Ok(ok) = r {
                chosen = Some((c, ok));
                break;
            }
        }
        self.order = order;
        if let Some((c, (reqs, types, reserve))) = chosen {
            self.claim_add(c, pid, pod, reqs, types, reserve);
            return Ok(());
        }
        if self.pools.is_empty() {
            return Err(PodError::general(
                "nodepool requirements filtered out all available instance types",
            ));
        }
        let mut errs = Vec::new();
        let mut reserved = false;
        for p in 0..self.pools.len() {
            let name = self.pools[p].name.clone();
            let target = format!("new NodeClaim from nodepool {name}");
            match self.new_claim(p, pid, pod) {
                Ok(()) => {
                    self.note(pid, target, Ok(()));
                    return Ok(());
                }
                Err(refused) => {
                    self.note(pid, target, Err(refused.reason.clone()));
                    errs.push((name, refused.reason));
                    // A pod a reservation could take tries no NodePool of lower weight.
                    if refused.reserved {
                        reserved = true;
                        break;
                    }
                }
            }
        }
        Err(PodError {
            general: None,
            pools: errs,
            reserved,
        })
    }
}
