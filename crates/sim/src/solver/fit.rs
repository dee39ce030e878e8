//! The checks an existing node and a NodeClaim share: the requirement a key has once a pod
//! joins, and whether the pod's topology domains are compatible with it
//! (`Requirements.Compatible` against the topology requirements).

use std::borrow::Cow;

use super::{PodData, Scheduler};
use crate::labels;
use crate::model::Pod;
use crate::req::{Operator, Requirement, Requirements};
use crate::topology::Topology;
use kk_catalog::resources::format_quantity;

/// The requirement for `key` once `pod` joins `node`.
fn merged<'r>(node: &'r Requirements, pod: &'r Requirements, key: &str) -> Cow<'r, Requirement> {
    match (node.get_ref(key), pod.get_ref(key)) {
        (Some(n), Some(p)) => Cow::Owned(p.intersection(n)),
        (Some(r), None) | (None, Some(r)) => Cow::Borrowed(r),
        (None, None) => Cow::Borrowed(&crate::req::EXISTS),
    }
}

fn negative(r: &Requirement) -> bool {
    matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
}

/// `base.Compatible(topologyRequirements)` where base = node ∪ pod requirements.
fn check_topology(
    node: &Requirements,
    pod: &Requirements,
    topo: &[(String, Requirement)],
    allow_undefined_well_known: bool,
) -> Result<(), String> {
    for (k, d) in topo {
        let defined = node.has(k) || pod.has(k);
        if !defined {
            if !(negative(d) || allow_undefined_well_known && labels::is_well_known(k)) {
                return Err(format!("topology: label {k:?} does not have known values"));
            }
            continue;
        }
        let existing = merged(node, pod, k);
        let combined = d.intersection(existing.as_ref());
        let negatives = negative(&combined) && negative(existing.as_ref());
        if !(existing.has_intersection(&combined) || negatives) {
            return Err(format!("topology: {k} {combined} not in {existing}"));
        }
    }
    Ok(())
}
/// The node's requirements once the pod joins, with the domains its topology constraints
/// leave (`AddRequirements`, then `Compatible`). `detail` off: a rejection is `Err(None)` and
/// nothing is formatted; `new_node`: an undefined well-known label is allowed, as on a
/// NodeClaim not launched yet.
pub(super) fn with_topology(
    topology: &mut Topology,
    pid: usize,
    pod: &Pod,
    data: &PodData,
    node: &Requirements,
    detail: bool,
    new_node: bool,
) -> Result<Requirements, Option<String>> {
    let say = |e: String| detail.then_some(e);
    let topo = topology
        .domains_for(
            pid,
            pod,
            &data.strict,
            |k| merged(node, &data.reqs, k),
            detail,
        )
        .map_err(|e| detail.then(|| e.to_string()))?;
    check_topology(node, &data.reqs, &topo, new_node).map_err(say)?;
    let mut base = node.clone();
    base.add_all(&data.reqs);
    for (k, d) in topo {
        base.add(&k, d);
    }
    Ok(base)
}

impl Scheduler<'_> {
    pub(super) fn describe(&self, r: &[i64]) -> String {
        self.index
            .to_map(r)
            .iter()
            .map(|(k, v)| format!("{k}={}", format_quantity(k, *v)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}
