//! The AWS provider's part: what an instance type offers (`computeRequirements`) and which
//! type, capacity type and zone a NodeClaim launches as (karpenter-provider-aws v1.14
//! `pkg/providers/instance`, `pkg/providers/instancetype`). The core scheduler only narrows the
//! list of types; this module picks among them.

use std::collections::{BTreeMap, BTreeSet};

use kk_catalog::{CapacityType, Catalog, InstanceType, Offering};

use super::{ClaimResult, Options};
use crate::labels;
use crate::offerings::{OfferingFilter, reservation_requirements};
use crate::req::{Requirement, Requirements};

fn region_of(zone: &str) -> Option<String> {
    let b = zone.as_bytes();
    let n = b.len();
    (n >= 3 && b[n - 1].is_ascii_lowercase() && b[n - 2].is_ascii_digit())
        .then(|| zone[..n - 1].to_owned())
}

/// The requirements an instance type offers (`computeRequirements`): its labels, every
/// well-known AWS label it lacks as DoesNotExist, its reservations' labels (DoesNotExist
/// without any), and zones/capacity types from its offerings.
pub fn instance_requirements(it: &InstanceType) -> Requirements {
    let mut r = Requirements::new();
    let aws = it.labels.contains_key(labels::INSTANCE_FAMILY)
        || it.labels.contains_key("karpenter.k8s.aws/instance-cpu");
    if aws {
        for key in labels::AWS_INSTANCE_LABELS {
            r.set(key, Requirement::does_not_exist());
        }
        r.set(labels::WINDOWS_BUILD, Requirement::does_not_exist());
        r.set(
            labels::TENANCY,
            Requirement::in_values(["default", "dedicated"]),
        );
    }
    for (k, v) in &it.labels {
        r.set(k, Requirement::single(v));
    }
    for (k, req) in reservation_requirements(&it.offerings) {
        r.set(k, req);
    }
    let avail = it.offerings.iter().filter(|o| o.available);
    let zones: BTreeSet<&str> = avail.clone().map(|o| &*o.zone).collect();
    let cts: BTreeSet<&str> = avail.map(|o| o.capacity_type.as_str()).collect();
    let regions: BTreeSet<String> = zones.iter().filter_map(|z| region_of(z)).collect();
    r.set(labels::ZONE, Requirement::in_values(zones.iter().copied()));
    r.set(
        labels::CAPACITY_TYPE,
        Requirement::in_values(cts.iter().copied()),
    );
    if !regions.is_empty() {
        r.set(labels::REGION, Requirement::in_values(regions));
    }
    r
}

/// Metal, GPU and accelerator types (`ExoticInstanceTypeFilter`).
pub(crate) fn is_exotic(it: &InstanceType) -> bool {
    it.size.contains("metal")
        || it.bare_metal
        || [
            "nvidia.com/gpu",
            "amd.com/gpu",
            "aws.amazon.com/neuron",
            "aws.amazon.com/neuroncore",
            "habana.ai/gaudi",
        ]
        .iter()
        .any(|r| it.capacity.get(r) > 0)
}
/// The launch the AWS provider would make for a claim: after the compatible/available,
/// exotic-instance and spot-price filters, the capacity type (spot when any compatible spot
/// offering remains), then the cheapest offering of the cheapest type among the first
/// `launch_instance_types` by price.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub instance_type: usize,
    pub capacity_type: CapacityType,
    pub zone: String,
    pub price: f64,
    /// Types left after the launch filters (before the 60-type cut).
    pub candidates: usize,
}

pub fn launch(
    catalog: &Catalog,
    claim: &ClaimResult,
    alloc: impl Fn(usize) -> BTreeMap<String, i64>,
    options: &Options,
) -> Option<Launch> {
    let fits = |ci: usize| {
        let a = alloc(ci);
        claim
            .requests
            .iter()
            .all(|(k, v)| *v <= a.get(k).copied().unwrap_or(0))
    };
    let filter = OfferingFilter::new(&claim.requirements);
    let types = catalog.types();
    let offers = |ci: usize| {
        types[ci]
            .offerings
            .iter()
            .filter(|o| o.launchable() && filter.allows(o))
    };
    let exotic = |ci: usize| is_exotic(&catalog.types()[ci]);
    launch_fitting(claim, fits, offers, exotic, options)
}

/// [`launch`] given whether the claim's requests fit each type's allocatable (`fits(ci)`),
/// each type's launchable offerings that the claim's requirements allow, in the type's order
/// (`offers(ci)`), and whether a type is exotic ([`is_exotic`], `exotic(ci)`): for callers that
/// keep these across the claims of a plan.
pub fn launch_fitting<'c, I>(
    claim: &ClaimResult,
    mut fits: impl FnMut(usize) -> bool,
    offers: impl Fn(usize) -> I,
    exotic: impl Fn(usize) -> bool,
    options: &Options,
) -> Option<Launch>
where
    I: Iterator<Item = &'c Offering>,
{
    let reqs = &claim.requirements;
    let cr = reqs.get(labels::CAPACITY_TYPE);
    let compatible_offer = |ci: usize, ct: Option<CapacityType>| {
        offers(ci).filter(move |o| ct.is_none_or(|c| c == o.capacity_type))
    };
    // CompatibleAvailableFilter.
    let mut kept: Vec<usize> = claim
        .types
        .iter()
        .copied()
        .filter(|&ci| fits(ci) && compatible_offer(ci, None).next().is_some())
        .collect();
    let min_values = reqs.has_min_values();
    // ExoticInstanceTypeFilter: drop metal and GPU/accelerator types when others remain.
    if !min_values {
        let generic: Vec<usize> = kept.iter().copied().filter(|&ci| !exotic(ci)).collect();
        if !generic.is_empty() {
            kept = generic;
        }
    }
    let both = cr.has("spot") && cr.has("on-demand");
    // SpotOfferingFilter: no spot offering dearer than the cheapest on-demand one.
    let mut spot_cap = f64::MAX;
    if both && !min_values {
        let cheapest_od = kept
            .iter()
            .flat_map(|&ci| compatible_offer(ci, Some(CapacityType::OnDemand)))
            .map(|o| o.price)
            .fold(f64::MAX, f64::min);
        let any_spot = kept.iter().any(|&ci| {
            compatible_offer(ci, Some(CapacityType::Spot))
                .next()
                .is_some()
        });
        if cheapest_od < f64::MAX && any_spot {
            spot_cap = cheapest_od;
        }
    }
    // getCapacityType: reserved first, when the claim allows it and a reservation has room.
    let capacity_type = if cr.has("reserved")
        && kept.iter().any(|&ci| {
            compatible_offer(ci, Some(CapacityType::Reserved))
                .next()
                .is_some()
        }) {
        CapacityType::Reserved
    } else if cr.has("spot")
        && kept
            .iter()
            .any(|&ci| compatible_offer(ci, Some(CapacityType::Spot)).any(|o| o.price <= spot_cap))
    {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    };
    let offer_price = |ci: usize| {
        compatible_offer(ci, Some(capacity_type))
            .filter(|o| capacity_type != CapacityType::Spot || o.price <= spot_cap)
            .map(|o| o.price)
            .fold(f64::MAX, f64::min)
    };
    let mut priced: Vec<(f64, usize)> = kept
        .iter()
        .map(|&ci| (offer_price(ci), ci))
        .filter(|(p, _)| *p < f64::MAX)
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let candidates = priced.len();
    priced.truncate(options.launch_instance_types);
    let &(price, ci) = priced.first()?;
    let zone = compatible_offer(ci, Some(capacity_type))
        .filter(|o| o.price == price)
        .map(|o| o.zone.to_string())
        .next()?;
    Some(Launch {
        instance_type: ci,
        capacity_type,
        zone,
        price,
        candidates,
    })
}
