//! The oracle's result format: a plan's NodeClaims, existing nodes and Pending pods in the
//! shape `karpenter-oracle run` writes (docs/internals/fidelity.md, "The result format").
//!
//! A [`Report`] is serialized as it is written: one NodeClaim's launch, options and pods at a
//! time. At 100,000 pods of Karpenter's benchmark shapes a plan has 20,000 NodeClaims with up
//! to 400 instance-type options each; built as one JSON value first, those alone were
//! gigabytes.

use std::collections::BTreeMap;

use kk_catalog::Catalog;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::plan::{Allocatable, claim_launch, claim_requests, round};
use crate::solve::simulate;
use crate::solver::{ClaimResult, Input, Outcome};

/// The cheapest launchable offering of catalog type `ci` that a claim's requirements allow:
/// (capacity type, zone, price), price ties broken by capacity type, then zone, by name — the
/// oracle's `capacityType`/`zone`/`price` of a claim (docs/internals/fidelity.md, "The result format").
fn cheapest_offering(
    catalog: &Catalog,
    claim: &ClaimResult,
    ci: usize,
) -> Option<(&'static str, String, f64)> {
    let filter = crate::offerings::OfferingFilter::new(&claim.requirements);
    catalog.types()[ci]
        .offerings
        .iter()
        .filter(|o| o.launchable() && filter.allows(o))
        .map(|o| (o.capacity_type.as_str(), o.zone.to_string(), o.price))
        .min_by(|a, b| {
            a.2.total_cmp(&b.2)
                .then_with(|| a.0.cmp(b.0))
                .then_with(|| a.1.cmp(&b.1))
        })
}

/// A scenario solved, to be serialized in the oracle's result shape (`scenario`, `nodeClaims`,
/// `existingNodes`, `pending`), node claims sorted by their first pod as the oracle sorts them.
///
/// A claim's `cheapestInstanceType`, `capacityType`, `zone` and `price` are what the oracle
/// reports: the first option (by the price of its cheapest compatible available offering) and
/// that offering. They describe the claim, not a launch: which type and capacity type the AWS
/// provider launches is its own step (CreateFleet with the price-capacity-optimized strategy,
/// spot whenever the claim allows spot and a spot offering remains, after its exotic-type and
/// spot-price filters), which the oracle's fake cloud provider does not have. kk-sim's launch
/// choice is rendered as `launchInstanceType`, `launchCapacityType`, `launchZone` and
/// `launchPrice`, not compared.
pub struct Report<'a> {
    scenario: &'a str,
    input: &'a Input,
    outcome: Outcome,
    /// Claim indices by their first pod (`namespace/name`, least first); stable among equals.
    order: Vec<usize>,
}

/// Solves `input` (the scenario at path `scenario`) for a [`Report`].
pub fn report<'a>(scenario: &'a str, input: &'a Input) -> Report<'a> {
    let outcome = simulate(input);
    let first: Vec<Option<String>> = outcome
        .claims
        .iter()
        .map(|c| c.pods.iter().map(|&p| input.pods[p].key()).min())
        .collect();
    let mut order: Vec<usize> = (0..outcome.claims.len()).collect();
    order.sort_by(|&a, &b| first[a].cmp(&first[b]));
    Report {
        scenario,
        input,
        outcome,
        order,
    }
}

/// [`report`] as a JSON value.
pub fn result(scenario: &str, input: &Input) -> Value {
    serde_json::to_value(report(scenario, input)).unwrap_or(Value::Null)
}

impl Serialize for Report<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("scenario", self.scenario)?;
        map.serialize_entry("nodeClaims", &Claims(self))?;
        map.serialize_entry("existingNodes", &Existing(self))?;
        map.serialize_entry("pending", &Pending(self))?;
        map.end()
    }
}

/// One NodeClaim as the oracle writes it (fields in its order).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimEntry<'c> {
    node_pool: &'c str,
    instance_type_options: TypeNames<'c>,
    cheapest_instance_type: &'c str,
    capacity_type: &'c str,
    zone: String,
    price: f64,
    launch_instance_type: &'c str,
    launch_capacity_type: &'c str,
    launch_zone: String,
    launch_price: f64,
    requests: BTreeMap<String, String>,
    pods: Vec<String>,
}

/// Catalog types by name, written from the catalog's own strings.
struct TypeNames<'c>(&'c Catalog, &'c [usize]);

impl Serialize for TypeNames<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let types = self.0.types();
        serializer.collect_seq(self.1.iter().map(|&ci| types[ci].name.as_str()))
    }
}

struct Claims<'r, 'a>(&'r Report<'a>);

impl Serialize for Claims<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let report = self.0;
        let input = report.input;
        let catalog = &input.catalog;
        let mut allocatable = Allocatable::new(input);
        let mut seq = serializer.serialize_seq(Some(report.order.len()))?;
        for &c in &report.order {
            let raw = &report.outcome.claims[c];
            let (launch_type, launch_capacity_type, launch_zone, launch_price) =
                claim_launch(input, raw, &mut allocatable);
            let mut pods: Vec<String> = raw.pods.iter().map(|&p| input.pods[p].key()).collect();
            pods.sort();
            let (capacity_type, zone, price) = raw
                .types
                .first()
                .and_then(|&ci| cheapest_offering(catalog, raw, ci))
                .unwrap_or(("", String::new(), 0.0));
            seq.serialize_element(&ClaimEntry {
                node_pool: &raw.pool,
                instance_type_options: TypeNames(catalog, &raw.types),
                cheapest_instance_type: raw
                    .types
                    .first()
                    .map_or(launch_type, |&ci| &catalog.types()[ci].name),
                capacity_type,
                zone,
                price,
                launch_instance_type: launch_type,
                launch_capacity_type,
                launch_zone,
                launch_price: round(launch_price),
                requests: claim_requests(raw),
                pods,
            })?;
        }
        seq.end()
    }
}

/// One existing node that takes pods.
#[derive(Serialize)]
struct ExistingEntry<'e> {
    name: &'e str,
    pods: Vec<String>,
}

struct Existing<'r, 'a>(&'r Report<'a>);

impl Serialize for Existing<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let input = self.0.input;
        serializer.collect_seq(
            self.0
                .outcome
                .existing
                .iter()
                .filter(|(_, pods)| !pods.is_empty())
                .map(|(n, pods)| {
                    let mut pods: Vec<String> = pods.iter().map(|&p| input.pods[p].key()).collect();
                    pods.sort();
                    ExistingEntry {
                        name: &input.nodes[*n].name,
                        pods,
                    }
                }),
        )
    }
}

/// One Pending pod and why.
#[derive(Serialize)]
struct PendingEntry<'p> {
    pod: String,
    error: &'p str,
}

struct Pending<'r, 'a>(&'r Report<'a>);

impl Serialize for Pending<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let input = self.0.input;
        let mut pending: Vec<PendingEntry> = self
            .0
            .outcome
            .errors
            .iter()
            .map(|(&p, reason)| PendingEntry {
                pod: input.pods[p].key(),
                error: reason,
            })
            .collect();
        pending.sort_by(|a, b| a.pod.cmp(&b.pod));
        serializer.collect_seq(pending)
    }
}
