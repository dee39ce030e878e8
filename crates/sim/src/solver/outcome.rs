//! What the scheduling loop returns: where each pod went, the NodeClaims it opened (their
//! types ordered by price and cut to `max_instance_types`, as `nodeclaim.go` `FinalizeScheduling`
//! and `OrderByPrice` leave them), why the rest stay Pending, and a traced pod's attempts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Scheduler;
use crate::labels::{self, HOSTNAME};
use crate::offerings::OfferingFilter;
use crate::req::{Requirement, Requirements};
use crate::res::{self, Res};

/// Where a pod went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Existing(usize),
    Claim(usize),
}

/// One step of a traced pod's last scheduling attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub target: String,
    pub outcome: Result<(), String>,
}

/// What happened to one traced pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub attempts: Vec<Attempt>,
    pub relaxations: Vec<String>,
    pub passes: usize,
}

/// Why a pod could not be placed (per NodePool, or for all of them).
#[derive(Debug, Clone, PartialEq)]
pub struct PodError {
    pub general: Option<String>,
    pub pools: Vec<(String, String)>,
    /// A reserved-offering error ended the attempt (`IsReservedOfferingError`).
    pub reserved: bool,
}

impl PodError {
    pub(super) fn general(text: impl Into<String>) -> PodError {
        PodError {
            general: Some(text.into()),
            pools: Vec::new(),
            reserved: false,
        }
    }

    /// One line: the general reason, the only pool's reason, or `pool: reason; ...`.
    pub fn text(&self) -> String {
        if let Some(g) = &self.general {
            return g.clone();
        }
        match self.pools.as_slice() {
            [(_, reason)] => reason.clone(),
            many => many
                .iter()
                .map(|(p, r)| format!("nodepool {p}: {r}"))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// A NodeClaim the simulation opened, before launch selection.
#[derive(Debug, Clone)]
pub struct ClaimResult {
    pub pool: String,
    pub pool_index: usize,
    pub requirements: Requirements,
    /// Catalog indices, cheapest first, at most `max_instance_types`.
    pub types: Vec<usize>,
    /// Pod requests plus the smallest DaemonSet overhead of the remaining types.
    pub requests: BTreeMap<String, i64>,
    pub pods: Vec<usize>,
}

/// The raw result of a simulation.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub claims: Vec<ClaimResult>,
    /// (node index, pods placed there).
    pub existing: Vec<(usize, Vec<usize>)>,
    /// Pod index → why it stays Pending.
    pub errors: BTreeMap<usize, String>,
    /// Pending pods that only wait for a capacity reservation another NodeClaim of this loop
    /// holds (a reserved-offering error): the next loop places them.
    pub waiting: BTreeSet<usize>,
    pub warnings: Vec<String>,
    pub trace: Option<Trace>,
    pub placements: Vec<Option<Placement>>,
}

impl Scheduler<'_> {
    /// The loop's result: each claim's types by price, cut to `max_instance_types`, and its
    /// pods Pending instead when the cut leaves a `minValues` short.
    pub(super) fn finish(
        mut self,
        mut errors: BTreeMap<usize, String>,
        waiting: BTreeSet<usize>,
    ) -> Outcome {
        let input = self.input;
        let mut claims = Vec::new();
        let mut price_cache: HashMap<(usize, OfferingFilter), Vec<f64>> = HashMap::new();
        for c in 0..self.claims.len() {
            let claim = self.claims[c].clone();
            let pool = &self.pools[claim.pool];
            let mut reqs = claim.reqs.clone();
            reqs.remove(HOSTNAME);
            reqs.remove(labels::REGISTERED);
            reqs.remove(labels::INITIALIZED);
            // Smallest DaemonSet overhead among the groups that still have a type.
            let mut daemon: Option<Res> = None;
            for t in claim.types.iter() {
                let o = &pool.group_overhead[pool.types[t].group];
                match daemon.as_mut() {
                    None => daemon = Some(o.clone()),
                    Some(d) => res::min_into(d, o),
                }
            }
            let mut requests = claim.requests.clone();
            if let Some(d) = daemon {
                res::add(&mut requests, &d);
            }
            // FinalizeScheduling: a claim holding reservations launches into one of them.
            if !claim.reserved.is_empty() {
                reqs.set(labels::CAPACITY_TYPE, Requirement::single("reserved"));
                reqs.add(
                    labels::RESERVATION_ID,
                    Requirement::in_values(claim.reserved.iter().map(|id| id.to_string())),
                );
            }
            // Cheapest compatible launchable offering first (OrderByPrice), then truncate.
            let filter = OfferingFilter::new(&reqs);
            let prices = price_cache
                .entry((claim.pool, filter.clone()))
                .or_insert_with(|| {
                    pool.types
                        .iter()
                        .map(|t| {
                            input.catalog.types()[t.cat]
                                .offerings
                                .iter()
                                .filter(|o| o.launchable() && filter.allows(o))
                                .map(|o| o.price)
                                .fold(f64::MAX, f64::min)
                        })
                        .collect::<Vec<f64>>()
                });
            let mut types: Vec<(f64, usize)> = claim
                .types
                .iter()
                .map(|t| (prices[t], pool.types[t].cat))
                .collect();
            types.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            types.truncate(input.options.max_instance_types);
            let kept: Vec<usize> = types.iter().map(|(_, ci)| *ci).collect();
            // Truncating checks minValues under Strict only (`InstanceTypes.Truncate`).
            if reqs.has_min_values()
                && input.options.min_values_policy == super::MinValuesPolicy::Strict
            {
                let types: Vec<&crate::req::Requirements> =
                    kept.iter().map(|ci| &self.cat_reqs[*ci]).collect();
                let short: Vec<String> = super::prepare::min_values_counts(&reqs, &types)
                    .into_iter()
                    .filter(|(_, have, min)| have < min)
                    .map(|(k, _, _)| k.to_owned())
                    .collect();
                if !short.is_empty() {
                    for &pid in &claim.pods {
                        errors.insert(
                            pid,
                            format!(
                                "nodepool {} could not meet minValues for {} within {} instance types",
                                pool.name,
                                short.join(", "),
                                input.options.max_instance_types
                            ),
                        );
                        self.placements[pid] = None;
                    }
                    continue;
                }
            }
            claims.push(ClaimResult {
                pool: pool.name.clone(),
                pool_index: pool.input,
                requirements: reqs,
                types: kept,
                requests: self.index.to_map(&requests),
                pods: claim.pods.clone(),
            });
        }
        let existing = self
            .existing
            .iter()
            .map(|e| (e.node, e.pods.clone()))
            .collect();
        let trace = self.trace_pod.map(|_| std::mem::take(&mut self.trace));
        Outcome {
            claims,
            existing,
            errors,
            waiting,
            warnings: self.warnings,
            trace,
            placements: self.placements,
        }
    }
}
