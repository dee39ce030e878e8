//! What the consolidation methods share (`consolidation.go`): whether a candidate may be
//! consolidated and with what replacement (`ShouldDisrupt`, `computeConsolidation`,
//! spot-to-spot), the command's estimated savings, and the note when a method runs out of time.

use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use super::Replacement;
use super::price_of;
use crate::disrupt::state::Policy;
use crate::labels;
use crate::req::Requirement;
use crate::req::Requirements;
use kk_catalog::CapacityType;

/// `MinInstanceTypesForSpotToSpotConsolidation`.
const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// `Offerings.WorstLaunchPrice`: the dearest compatible available spot offering, else the
/// dearest on-demand one.
fn worst_launch_price(it: &kk_catalog::InstanceType, reqs: &Requirements) -> f64 {
    let zr = reqs.get(labels::ZONE);
    let cr = reqs.get(labels::CAPACITY_TYPE);
    for ct in [CapacityType::Spot, CapacityType::OnDemand] {
        let worst = it
            .offerings
            .iter()
            .filter(|o| {
                o.available
                    && o.capacity_type == ct
                    && zr.has(&o.zone)
                    && cr.has(o.capacity_type.as_str())
            })
            .map(|o| o.price)
            .fold(f64::NAN, f64::max);
        if !worst.is_nan() {
            return worst;
        }
    }
    f64::MAX
}

/// The price `Command.EstimatedSavings` charges for a replacement of type `it`: its cheapest
/// available offering among those the replacement's requirements allow (zone and capacity
/// type). A replacement held to on-demand is not priced at its type's spot offering, nor one
/// held to a zone at another zone's offering; `None` when no offering qualifies.
fn replacement_price(it: &kk_catalog::InstanceType, reqs: &Requirements) -> Option<f64> {
    let zr = reqs.get(labels::ZONE);
    let cr = reqs.get(labels::CAPACITY_TYPE);
    it.offerings
        .iter()
        .filter(|o| o.available && zr.has(&o.zone) && cr.has(o.capacity_type.as_str()))
        .map(|o| o.price)
        .reduce(f64::min)
}

impl Engine<'_> {
    /// `consolidation.ShouldDisrupt` (and Emptiness's): `Err` is why not.
    pub(super) fn consolidatable(&self, c: &Candidate, method: Method) -> Result<(), String> {
        let pool = &self.state.pools[&c.pool];
        if pool.static_pool {
            return Err("static NodePool".into());
        }
        let n = &self.nodes[&c.name];
        if method == Method::Emptiness {
            if pool.consolidate_after.is_none() {
                return Err(format!("NodePool {:?} has consolidation disabled", c.pool));
            }
            if !c.empty() {
                return Err(format!(
                    "not empty ({} reschedulable pods)",
                    c.reschedulable
                ));
            }
        } else {
            if c.it.is_none() {
                return Err(format!(
                    "Instance Type {:?} not found",
                    n.node
                        .labels
                        .get(labels::INSTANCE_TYPE)
                        .cloned()
                        .unwrap_or_default()
                ));
            }
            if c.capacity_type.is_none() {
                return Err(format!(
                    "Node does not have label {:?}",
                    labels::CAPACITY_TYPE
                ));
            }
            if c.zone.is_none() {
                return Err(format!("Node does not have label {:?}", labels::ZONE));
            }
            if pool.consolidate_after.is_none() {
                return Err(format!("NodePool {:?} has consolidation disabled", c.pool));
            }
            if c.empty() {
                return Err("empty: left to Emptiness".into());
            }
            if pool.policy == Policy::WhenEmpty {
                return Err(format!(
                    "NodePool {:?} has consolidation policy WhenEmpty, but node is not empty",
                    c.pool
                ));
            }
        }
        if let Some(at) = self.under_consolidate_after(n) {
            return Err(format!(
                "consolidateAfter not elapsed: consolidatable at {}",
                crate::disrupt::clock::format_time(at)
            ));
        }
        Ok(())
    }

    /// `computeConsolidation` (with `computeSpotToSpotConsolidation`).
    pub(super) fn consolidate(
        &mut self,
        candidates: &[&Candidate],
        method: Method,
    ) -> Result<Command, String> {
        let sim = self.simulate(candidates, true)?;
        let owned: Vec<Candidate> = candidates.iter().map(|c| (*c).clone()).collect();
        if sim.claims.is_empty() {
            return Ok(Command {
                method,
                candidates: owned,
                replacements: Vec::new(),
                moves: sim.moves,
                stranded: Vec::new(),
            });
        }
        if sim.claims.len() != 1 {
            return Err(format!(
                "can't remove without creating {} nodes",
                sim.claims.len()
            ));
        }
        let price: f64 = candidates.iter().map(|c| c.price).sum();
        let mut claim = sim.claims[0].clone();
        let catalog = &self.input.catalog;
        let all_spot = candidates
            .iter()
            .all(|c| c.capacity_type.as_deref() == Some("spot"));
        if all_spot && claim.requirements.get(labels::CAPACITY_TYPE).has("spot") {
            if !self.opts.spot_to_spot {
                return Err(
                    "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                        .into(),
                );
            }
            claim
                .requirements
                .add(labels::CAPACITY_TYPE, Requirement::single("spot"));
            let zr = claim.requirements.get(labels::ZONE);
            claim.types.retain(|&ci| {
                catalog.types()[ci].offerings.iter().any(|o| {
                    o.available && o.capacity_type == CapacityType::Spot && zr.has(&o.zone)
                })
            });
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < price);
            if claim.types.is_empty() {
                return Err("can't replace with a cheaper node".into());
            }
            if candidates.len() == 1 {
                if claim.types.len() < SPOT_TO_SPOT_MIN_TYPES {
                    return Err(format!(
                        "SpotToSpotConsolidation requires {SPOT_TO_SPOT_MIN_TYPES} cheaper instance type options than the current candidate to consolidate, got {}",
                        claim.types.len()
                    ));
                }
                claim.types.truncate(SPOT_TO_SPOT_MIN_TYPES);
            }
        } else {
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < price);
            if claim.types.is_empty() {
                return Err("can't replace with a cheaper node".into());
            }
            let ct = claim.requirements.get(labels::CAPACITY_TYPE);
            if ct.has("spot") && ct.has("on-demand") {
                claim
                    .requirements
                    .add(labels::CAPACITY_TYPE, Requirement::single("spot"));
            }
        }
        if method == Method::MultiNode {
            // filterOutSameInstanceType: no replacement dearer than a candidate's own type.
            let mut max_price = f64::MAX;
            for c in candidates {
                let Some(it) = c.it else { continue };
                if claim.types.contains(&it) {
                    max_price = max_price.min(price_of(
                        catalog,
                        it,
                        c.zone.as_deref(),
                        c.capacity_type.as_deref(),
                    ));
                }
            }
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < max_price);
            if claim.types.is_empty() {
                return Err("only replaceable by the same instance type".into());
            }
        }
        let launch = self
            .do_launch(&claim)
            .ok_or("no launchable offering for the replacement")?;
        Ok(Command {
            method,
            candidates: owned,
            replacements: vec![Replacement { claim, launch }],
            moves: sim.moves,
            stranded: Vec::new(),
        })
    }

    /// `Command.EstimatedSavings`: the candidates' prices less, for each replacement, the
    /// cheapest available offering of its first option that its requirements allow.
    pub(super) fn savings(&self, command: &Command) -> f64 {
        let source: f64 = command.candidates.iter().map(|c| c.price).sum();
        let dest: f64 = command
            .replacements
            .iter()
            .filter_map(|r| {
                let &ci = r.claim.types.first()?;
                replacement_price(&self.input.catalog.types()[ci], &r.claim.requirements)
            })
            .sum();
        source - dest
    }

    pub(super) fn sort_by_savings(candidates: &mut [Candidate]) {
        // Upstream sorts with sort.Slice on candidates in map order (ties random); here ties
        // keep name order.
        candidates.sort_by(|a, b| {
            b.savings_ratio()
                .total_cmp(&a.savings_ratio())
                .then(a.name.cmp(&b.name))
        });
    }

    /// Says that a method ran out of its `--budget-time` in this pass.
    pub(super) fn stopped(&mut self, method: Method, what: &str) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_catalog::{Catalog, OfferingConfig};

    fn m5_large(catalog: &Catalog) -> &kk_catalog::InstanceType {
        catalog
            .types()
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large in the catalog")
    }

    fn price(it: &kk_catalog::InstanceType, zone: &str, ct: CapacityType) -> f64 {
        it.offerings
            .iter()
            .find(|o| &*o.zone == zone && o.capacity_type == ct)
            .expect("offering")
            .price
    }

    #[test]
    fn an_on_demand_replacement_is_not_priced_at_its_types_spot_offering() {
        let catalog = Catalog::aws(&OfferingConfig::default()).unwrap();
        let it = m5_large(&catalog);
        let od = price(it, "us-east-1a", CapacityType::OnDemand);
        assert!(
            price(it, "us-east-1a", CapacityType::Spot) < od,
            "the test needs a cheaper spot offering"
        );
        let mut reqs = Requirements::new();
        reqs.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
        assert_eq!(replacement_price(it, &reqs), Some(od));
        // Unrestricted, the spot offering is the cheapest.
        assert!(replacement_price(it, &Requirements::new()).unwrap() < od);
    }

    #[test]
    fn a_zone_bound_replacement_is_priced_in_its_zone() {
        let catalog = Catalog::aws(&OfferingConfig::default()).unwrap();
        let mut it = m5_large(&catalog).clone();
        // Make us-east-1b's spot offering the type's cheapest.
        let b_spot = price(&it, "us-east-1b", CapacityType::Spot);
        for o in &mut it.offerings {
            if &*o.zone == "us-east-1b" && o.capacity_type == CapacityType::Spot {
                o.price = b_spot / 2.0;
            }
        }
        let mut reqs = Requirements::new();
        reqs.add(labels::ZONE, Requirement::single("us-east-1a"));
        let a_cheapest = price(&it, "us-east-1a", CapacityType::Spot).min(price(
            &it,
            "us-east-1a",
            CapacityType::OnDemand,
        ));
        assert_eq!(replacement_price(&it, &reqs), Some(a_cheapest));
        // Nothing available in the zone: no price (and no savings term).
        for o in &mut it.offerings {
            if &*o.zone == "us-east-1a" {
                o.available = false;
            }
        }
        assert_eq!(replacement_price(&it, &reqs), None);
    }
}
