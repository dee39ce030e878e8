//! NodeClaims (`nodeclaim.go`): whether a pod can join an in-flight claim, which of its
//! NodePool's instance types survive, why none does, and opening a new claim.

use std::sync::Arc;

use super::bits::Bits;
use super::fit::with_topology;
use super::outcome::Placement;
use super::{Claim, GO_SORT_EXACT, Scheduler};
use crate::labels::{self, HOSTNAME};
use crate::model::{Pod, untolerated};
use crate::offerings::OfferingFilter;
use crate::req::{Operator, Requirement, Requirements};
use crate::res::{self, Res};
use kk_catalog::resources::format_quantity;

impl Scheduler<'_> {
    pub(super) fn compat_bits(&mut self, p: usize, reqs: &Requirements) -> Bits {
        let pool = &mut self.pools[p];
        let mut bits = pool.all.clone();
        for (k, r) in reqs.iter() {
            if k == HOSTNAME {
                continue;
            }
            let by_req = pool.compat_cache.entry(k.to_owned()).or_default();
            if !by_req.contains_key(r) {
                let mut b = pool.all.cleared();
                for (i, t) in pool.types.iter().enumerate() {
                    let ok = match self.cat_reqs[t.cat].get_ref(k) {
                        None => true,
                        Some(tr) => {
                            tr.has_intersection(r)
                                || (matches!(
                                    r.operator(),
                                    Operator::NotIn | Operator::DoesNotExist
                                ) && matches!(
                                    tr.operator(),
                                    Operator::NotIn | Operator::DoesNotExist
                                ))
                        }
                    };
                    if ok {
                        b.set(i);
                    }
                }
                by_req.insert(r.clone(), b);
            }
            if let Some(b) = by_req.get(r) {
                bits.and(b);
            }
        }
        bits
    }

    /// The types with an available offering the requirements allow.
    pub(super) fn offer_bits(&mut self, p: usize, reqs: &Requirements) -> Bits {
        let filter = OfferingFilter::new(reqs);
        let input = self.input;
        let pool = &mut self.pools[p];
        if let Some(b) = pool.offer_cache.get(&filter) {
            return b.clone();
        }
        let mut b = pool.all.cleared();
        for (i, t) in pool.types.iter().enumerate() {
            let it = &input.catalog.types()[t.cat];
            if it.offerings.iter().any(|o| o.available && filter.allows(o)) {
                b.set(i);
            }
        }
        pool.offer_cache.insert(filter, b.clone());
        b
    }

    pub(super) fn max_net(&self, p: usize, types: &Bits) -> Res {
        let pool = &self.pools[p];
        let mut m = vec![i64::MIN; self.index.len()];
        for t in types.iter() {
            res::max_into(&mut m, &pool.types[t].net);
        }
        m
    }

    /// Whether `pod` can join claim `c`. `Err(None)` for a rejection nobody reads (in-flight
    /// claims; upstream drops those errors), `Err(Some(reason))` otherwise. `opening`: `c` is
    /// a claim being opened for `pod`, where the BestEffort minValues policy relaxes.
    #[allow(clippy::type_complexity)]
    pub(super) fn claim_can_add(
        &mut self,
        c: usize,
        pid: usize,
        pod: &Pod,
        quiet: bool,
        opening: bool,
    ) -> Result<(Requirements, Bits), Option<String>> {
        let traced = self.trace_pod == Some(pid);
        let say = |s: String| if quiet && !traced { None } else { Some(s) };
        let claim = &self.claims[c];
        let p = claim.pool;
        if let Some(t) = untolerated(&self.pools[p].taints, &pod.tolerations) {
            return Err(say(format!("untolerated taint {t}")));
        }
        if let Some(hp) = pod
            .host_ports
            .iter()
            .find(|hp| claim.host_ports.contains(hp))
        {
            return Err(say(format!("host port {}/{} in use", hp.0, hp.1)));
        }
        // Upstream's order: taints, requirements, topology, instance types. The two cheap
        // screens below (hostname counts, room in the largest remaining type) are necessary
        // conditions of the later steps, so they change no verdict; when the reason is read
        // they come after the requirement check, so the reported cause is upstream's.
        let fast = quiet && !traced;
        let data = &self.data[pid];
        if !fast && let Err(conflict) = claim.reqs.compatible(&data.reqs, true) {
            return Err(Some(format!("incompatible requirements: {conflict}")));
        }
        let host = claim.host;
        if fast && !self.topology.hostname_allows(pid, pod, host) {
            return Err(None);
        }
        let claim = &self.claims[c];
        let data = &self.data[pid];
        let total = res::plus(&claim.requests, &data.requests);
        if fast && !res::fits(&total, &claim.max_net) {
            return Err(None);
        }
        if fast && claim.reqs.compatible(&data.reqs, true).is_err() {
            return Err(None);
        }
        let base = with_topology(
            &mut self.topology,
            pid,
            pod,
            data,
            &claim.reqs,
            !quiet || traced,
            true,
        )?;
        let claim = &self.claims[c];
        let mut candidates = claim.types.clone();
        if base != claim.reqs {
            let compat = self.compat_bits(p, &base);
            let offer = self.offer_bits(p, &base);
            candidates.and(&compat);
            candidates.and(&offer);
        }
        let pool = &self.pools[p];
        let mut kept = candidates.cleared();
        for t in candidates.iter() {
            let ty = &pool.types[t];
            if ty.alloc_ok && res::fits(&total, &ty.net) {
                kept.set(t);
            }
        }
        if kept.is_empty() {
            let reason = if quiet && !traced {
                None
            } else {
                let (_, msg) = self.filter_error(p, &self.claims[c].types.clone(), &base, &total);
                Some(msg)
            };
            return Err(reason);
        }
        // minValues is checked on the types left, only when some are left (`SatisfiesMinValues`
        // finds nothing to object to in an empty list; sigs.k8s.io/karpenter v1.14.0
        // pkg/cloudprovider/types.go).
        let mut base = base;
        if opening
            && self.input.options.min_values_policy == super::MinValuesPolicy::BestEffort
            && base.has_min_values()
        {
            self.relax_min_values(p, &kept, &mut base);
        }
        if base.has_min_values()
            && let Err(msg) = self.min_values_ok(p, &kept, &base)
        {
            return Err(say(msg));
        }
        Ok((base, kept))
    }

    /// The catalog requirements of pool `p`'s instance types that `kept` holds.
    fn kept_requirements(&self, p: usize, kept: &Bits) -> Vec<&Requirements> {
        let pool = &self.pools[p];
        kept.iter()
            .map(|t| &self.cat_reqs[pool.types[t].cat])
            .collect()
    }

    /// BestEffort on a claim being opened: each `minValues` the kept types cannot meet is
    /// lowered to the number of values they offer (`nodeclaim.go` `SetMinValues`), and the
    /// claim carries the lowered value from then on.
    fn relax_min_values(&self, p: usize, kept: &Bits, reqs: &mut Requirements) {
        let types = self.kept_requirements(p, kept);
        let short: Vec<(String, usize)> = super::prepare::min_values_counts(reqs, &types)
            .into_iter()
            .filter(|(_, have, min)| have < min)
            .map(|(k, have, _)| (k.to_owned(), have))
            .collect();
        for (key, have) in short {
            reqs.set_min_values(&key, have);
        }
    }

    pub(super) fn min_values_ok(
        &self,
        p: usize,
        kept: &Bits,
        reqs: &Requirements,
    ) -> Result<(), String> {
        let types = self.kept_requirements(p, kept);
        match super::prepare::min_values_short(reqs, &types) {
            None => Ok(()),
            Some(short) => Err(format!("minValues requirement not met: {short}")),
        }
    }

    /// Why no type in `types` takes `total` under `reqs` (`InstanceTypeFilterError`).
    pub(super) fn filter_error(
        &mut self,
        p: usize,
        types: &Bits,
        reqs: &Requirements,
        total: &[i64],
    ) -> (bool, String) {
        let compat = self.compat_bits(p, reqs);
        let offer = self.offer_bits(p, reqs);
        let pool = &self.pools[p];
        let (mut req_met, mut fits, mut has_offer) = (false, false, false);
        let (mut req_fit, mut req_offer, mut fit_offer) = (false, false, false);
        let mut best: Vec<i64> = vec![i64::MIN; self.index.len()];
        let mut compatible_count = 0;
        for t in types.iter() {
            let c = compat.has(t);
            let o = offer.has(t);
            let ty = &pool.types[t];
            let f = ty.alloc_ok && res::fits(total, &ty.net);
            req_met |= c;
            has_offer |= o;
            fits |= f && o;
            req_fit |= c && f && !o;
            req_offer |= c && o && !f;
            fit_offer |= f && o && !c;
            if c && o {
                compatible_count += 1;
                res::max_into(&mut best, &ty.net);
            }
        }
        let need = |this: &Self| {
            let names = this.index.names();
            let mut short: Vec<String> = Vec::new();
            let mut rest: Vec<String> = Vec::new();
            for (i, v) in total.iter().enumerate() {
                if *v <= 0 {
                    continue;
                }
                let s = format!("{}>={}", names[i], format_quantity(&names[i], *v));
                if compatible_count > 0 && *v > best[i] {
                    short.push(s);
                } else {
                    rest.push(s);
                }
            }
            short.extend(rest);
            format!("no instance type has {}", short.join(" and "))
        };
        let offering = || {
            format!(
                "no instance type has an offering in {} {} / {} {}",
                labels::ZONE,
                reqs.get(labels::ZONE),
                labels::CAPACITY_TYPE,
                reqs.get(labels::CAPACITY_TYPE)
            )
        };
        let msg = if !req_met {
            format!("incompatible requirements: no instance type meets {reqs}")
        } else if !has_offer {
            offering()
        } else if !fits {
            need(self)
        } else if req_fit {
            format!("{} among the types that meet the requirements", offering())
        } else if fit_offer || req_offer {
            format!(
                "{} among the types that meet the requirements ({reqs})",
                need(self)
            )
        } else {
            format!("no instance type meets the requirements, has room and an offering ({reqs})")
        };
        (req_met, msg)
    }

    pub(super) fn claim_add(
        &mut self,
        c: usize,
        pid: usize,
        pod: &Pod,
        reqs: Requirements,
        types: Bits,
        reserve: Vec<Arc<str>>,
    ) {
        self.reservations.hold(self.claims[c].host, &reserve);
        self.claims[c].reserved = reserve;
        // The largest remaining type's room changes only with the types.
        let max_net = if types == self.claims[c].types {
            self.claims[c].max_net.clone()
        } else {
            self.max_net(self.claims[c].pool, &types)
        };
        let data = &self.data[pid];
        let claim = &mut self.claims[c];
        let old = claim.pods.len();
        res::add(&mut claim.requests, &data.requests);
        claim.reqs = reqs;
        claim.types = types;
        claim.max_net = max_net;
        claim.pods.push(pid);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        let (host, pool) = (claim.host, claim.pool);
        if old == 0 {
            self.order.push(c);
        }
        let mut moved = None;
        if self.claims.len() > GO_SORT_EXACT {
            // What a stable sort by pod count does after this one change: a claim that gained
            // a pod moves to the front of its new count's block; a new one to the end of the
            // one-pod block.
            // The order is sorted by pod count before this change, the claim still in its old
            // count's block (or, new, at the end).
            let claims = &self.claims;
            let (pos, at) = if old == 0 {
                let last = self.order.len() - 1;
                let at = self.order[..last].partition_point(|&x| claims[x].pods.len() <= 1);
                (last, at)
            } else {
                let pos = self.screens.position(c, &self.order);
                let end = self
                    .order
                    .partition_point(|&x| x == c || claims[x].pods.len() <= old);
                (pos, end - 1)
            };
            super::screen::shift(&mut self.order, pos, at);
            moved = Some((pos, at));
        }
        // Borrowed, not cloned: the claim, its pool and the topology are separate fields.
        let claim = &self.claims[c];
        debug_assert_eq!((claim.host, claim.pool), (host, pool));
        let taints = &self.pools[pool].taints;
        let topology = &mut self.topology;
        let singles: Vec<u32> = self
            .topo_keys
            .iter()
            .map(|k| {
                claim
                    .reqs
                    .get_ref(k)
                    .and_then(|r| r.single_value())
                    .map_or(u32::MAX, |d| topology.domain_id(d))
            })
            .collect();
        self.screens
            .set(c, host, &claim.requests, &claim.max_net, &singles);
        topology.register_host(host);
        topology.record(pid, pod, taints, &claim.reqs);
        let topology = &self.topology;
        self.screens
            .follow(&self.order, c, old == 0, moved, |inverse, g| {
                topology.host_count(inverse, g, host) > 0
            });
        self.placements[pid] = Some(Placement::Claim(c));
    }

    pub(super) fn new_claim(&mut self, p: usize, pid: usize, pod: &Pod) -> Result<(), Refused> {
        let pool = &mut self.pools[p];
        if let Some(reason) = pool.limits.nodes_exceeded(&pool.name) {
            return Err(Refused::plain(reason));
        }
        let types = pool.limits.within(&pool.types);
        if types.is_empty() {
            return Err(Refused::plain(pool.limits.error(
                &pool.name,
                &pool.types,
                &self.index,
            )));
        }
        let hostname = format!("hostname-placeholder-{:04}", self.claims.len() + 1);
        let host = self.topology.domain_id(&hostname);
        let mut reqs = self.pools[p].template.clone();
        reqs.add(HOSTNAME, Requirement::single(&hostname));
        let max_net = self.max_net(p, &types);
        let claim = Claim {
            pool: p,
            hostname,
            host,
            reqs,
            types,
            requests: self.index.zero(),
            max_net,
            pods: Vec::new(),
            host_ports: Vec::new(),
            reserved: Vec::new(),
        };
        self.claims.push(claim);
        let c = self.claims.len() - 1;
        let accepted = self
            .claim_can_add(c, pid, pod, false, true)
            .map_err(|reason| Refused::plain(reason.unwrap_or_else(|| "cannot schedule".into())))
            .and_then(|(reqs, types)| {
                self.offerings_to_reserve(c, &reqs, &types)
                    .map(|reserve| (reqs, types, reserve))
                    .map_err(|reason| Refused {
                        reason,
                        reserved: true,
                    })
            });
        match accepted {
            Ok((reqs, types, reserve)) => {
                self.claim_add(c, pid, pod, reqs, types, reserve);
                // Pessimistic limits: the claim may launch as its largest remaining type.
                let pool = &mut self.pools[p];
                pool.limits.charge_claim(&pool.types, &self.claims[c].types);
                Ok(())
            }
            Err(refused) => {
                self.claims.pop();
                Err(refused)
            }
        }
    }
}

/// Why a NodePool could not open a claim for a pod.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    pub reason: String,
    /// A reserved-offering error: the pod waits for a later loop.
    pub reserved: bool,
}

impl Refused {
    fn plain(reason: String) -> Refused {
        Refused {
            reason,
            reserved: false,
        }
    }
}
