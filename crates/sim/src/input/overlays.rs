//! NodeOverlays (karpenter.sh/v1alpha1, the `NodeOverlay` feature gate): the capacity a
//! NodePool's instance types advertise to the scheduler. Resolved per NodePool and instance
//! type as Karpenter's overlay controller resolves them (sigs.k8s.io/karpenter v1.15
//! `pkg/controllers/nodeoverlay`): an overlay applies to a type of a pool when its
//! requirements are compatible with the pool's name, template labels and the type's own
//! requirements, and some offering of the type matches them; overlays go by weight (highest
//! first, equal weights by name descending); a resource an earlier overlay set is kept; an
//! overlay that sets a resource an equal-weight overlay already set conflicts and applies
//! nowhere. An overlay's capacity **replaces** the type's value for that resource (checked
//! against Karpenter: testbed/karpenter-oracle/overlay_test.go). Price adjustments are not
//! modelled (warned).

use std::collections::BTreeMap;

use kk_catalog::Catalog;
use serde_json::Value;

use super::read::{Ctx, join, quantity};
use crate::labels;
use crate::model::Pool;
use crate::offerings::OfferingFilter;
use crate::req::{Operator, Requirement, Requirements};
use crate::solver::instance_requirements;

/// Resources an overlay may not set (Karpenter's `WellKnownResources`: the overlay fails its
/// runtime validation and applies nowhere).
const RESTRICTED: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// One NodeOverlay as read.
#[derive(Debug, Clone)]
pub(super) struct Overlay {
    name: String,
    weight: i64,
    requirements: Requirements,
    /// Resource → quantity in catalog units.
    capacity: BTreeMap<String, i64>,
}

pub(super) fn read_overlay(
    ctx: &mut Ctx,
    prefix: &str,
    value: &Value,
    warnings: &mut Vec<String>,
) -> Option<Overlay> {
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        ctx.err(&join(prefix, "metadata.name"), "a NodeOverlay needs a name");
        return None;
    }
    let spec = value.get("spec").cloned().unwrap_or(Value::Null);
    let weight = spec.get("weight").and_then(Value::as_i64).unwrap_or(0);
    let mut requirements = Requirements::new();
    for (i, r) in spec
        .get("requirements")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = join(prefix, &format!("spec.requirements[{i}]"));
        let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<String> = r
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let op = match Operator::parse(r.get("operator").and_then(Value::as_str).unwrap_or("")) {
            Ok(op) => op,
            Err(e) => {
                ctx.err(&format!("{f}.operator"), e);
                return None;
            }
        };
        match Requirement::new(op, &values) {
            Ok(req) => requirements.add(key, req),
            Err(e) => {
                ctx.err(&format!("{f}.values"), e);
                return None;
            }
        }
    }
    let mut capacity = BTreeMap::new();
    for (resource, q) in spec
        .get("capacity")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let f = join(prefix, &format!("spec.capacity[{resource}]"));
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                ctx.err(&f, "a capacity is a quantity (\"4\")");
                return None;
            }
        };
        capacity.insert(resource.clone(), quantity(ctx, &f, resource, &text)?);
    }
    if let Some(bad) = capacity.keys().find(|k| RESTRICTED.contains(&k.as_str())) {
        warnings.push(format!(
            "nodeoverlay {name}: capacity {bad} is restricted (Karpenter fails the overlay's validation and applies none of it)"
        ));
        return None;
    }
    if spec.get("price").is_some() || spec.get("priceAdjustment").is_some() {
        warnings.push(format!(
            "nodeoverlay {name}: price adjustments are not modelled; prices stay the catalog's"
        ));
    }
    Some(Overlay {
        name,
        weight,
        requirements,
        capacity,
    })
}

/// Resource → (value, weight of the overlay that set it), for one pool and type.
type SetBy = BTreeMap<String, (i64, i64)>;

/// Fills each pool's `capacity_overlay` from the overlays.
pub(super) fn apply(
    mut overlays: Vec<Overlay>,
    pools: &mut [Pool],
    catalog: &Catalog,
    warnings: &mut Vec<String>,
) {
    if overlays.is_empty() {
        return;
    }
    warnings.push(
        "NodeOverlays take effect only with Karpenter's nodeOverlay feature gate (alpha, off by default); the plan applies them".into(),
    );
    overlays.sort_by(|a, b| b.weight.cmp(&a.weight).then(b.name.cmp(&a.name)));
    let type_requirements: Vec<Requirements> =
        catalog.types().iter().map(instance_requirements).collect();
    // Per (pool, type): resource → (value, weight of the overlay that set it).
    let mut set: Vec<BTreeMap<usize, SetBy>> = vec![BTreeMap::new(); pools.len()];
    for overlay in &overlays {
        let filter = OfferingFilter::new(&overlay.requirements);
        let mut targets = Vec::new();
        for (pi, pool) in pools.iter().enumerate() {
            let mut base = Requirements::from_labels(&pool.labels);
            base.add(labels::NODEPOOL, Requirement::single(&pool.name));
            for (ci, it) in catalog.types().iter().enumerate() {
                let mut reqs = base.clone();
                reqs.add_all(&type_requirements[ci]);
                if reqs.is_compatible(&overlay.requirements, false)
                    && it.offerings.iter().any(|o| filter.allows(o))
                {
                    targets.push((pi, ci));
                }
            }
        }
        let conflict = targets.iter().any(|(pi, ci)| {
            set[*pi].get(ci).is_some_and(|done| {
                overlay
                    .capacity
                    .keys()
                    .any(|r| done.get(r).is_some_and(|(_, w)| *w == overlay.weight))
            })
        });
        if conflict {
            warnings.push(format!(
                "nodeoverlay {}: conflicts with an overlay of the same weight on the same resource; Karpenter applies none of it",
                overlay.name
            ));
            continue;
        }
        for (pi, ci) in targets {
            let done = set[pi].entry(ci).or_default();
            for (resource, value) in &overlay.capacity {
                done.entry(resource.clone())
                    .or_insert((*value, overlay.weight));
            }
        }
    }
    for (pi, per_type) in set.into_iter().enumerate() {
        for (ci, resources) in per_type {
            if resources.is_empty() {
                continue;
            }
            pools[pi].capacity_overlay.insert(
                ci,
                resources.into_iter().map(|(r, (v, _))| (r, v)).collect(),
            );
        }
    }
}
