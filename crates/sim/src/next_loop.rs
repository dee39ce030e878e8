//! Karpenter's next provisioning loop, for the pods that only waited for a capacity
//! reservation.
//!
//! In one loop a NodeClaim holds an instance of every reservation it could launch into, so
//! when pods need more nodes than a reservation has left, the rest wait with a
//! reserved-offering error instead of falling back (`DisableReservedCapacityFallback`). The
//! claims launch; the AWS provider counts the instances taken from each reservation
//! (`MarkLaunched`); seconds later the next loop sees those NodeClaims as in-flight nodes
//! and the reservations that much fuller, and the waiting pods land on what is left: more
//! reserved capacity, or on-demand/spot when the reservations are full. That second loop is
//! simulated here as Karpenter would run it: the first loop's claims become in-flight nodes
//! (their type, zone, capacity type and reservation as launched, their pods bound), and every
//! pod still Pending is scheduled again.

use std::collections::BTreeMap;

use crate::labels;
use crate::model::Node;
use crate::offerings::OfferingFilter;
use crate::plan::Plan;
use crate::solver::{Input, Outcome};

/// The name of the in-flight node standing for the first loop's claim `i` (0-based).
pub fn in_flight_name(i: usize) -> String {
    format!("nodeclaim-{}", i + 1)
}

/// The labels of a node launched for `pool` on type `it` in `zone` with `capacity_type`,
/// named `hostname`: the type's labels, the pool's, and the ones Karpenter sets on launch.
pub(crate) fn launched_labels(
    it: &kk_catalog::InstanceType,
    pool: &crate::model::Pool,
    zone: &str,
    capacity_type: &str,
    hostname: &str,
) -> BTreeMap<String, String> {
    let mut node_labels: BTreeMap<String, String> = it
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    node_labels.extend(pool.labels.clone());
    for (key, value) in [
        (labels::NODEPOOL, pool.name.as_str()),
        (labels::ZONE, zone),
        (labels::CAPACITY_TYPE, capacity_type),
        (labels::HOSTNAME, hostname),
    ] {
        node_labels.insert(key.to_owned(), value.to_owned());
    }
    node_labels
}

/// The input of the next loop: the first loop's claims as in-flight nodes, the pods placed
/// anywhere bound there, the reservations charged, and only the pods still Pending.
pub fn next_input(input: &Input, outcome: &Outcome, plan: &Plan) -> Input {
    let mut next = input.clone();
    let types = input.catalog.types();
    for (i, (claim, planned)) in outcome.claims.iter().zip(&plan.node_claims).enumerate() {
        let Some(ci) = types.iter().position(|t| t.name == planned.instance_type) else {
            continue;
        };
        let it = &types[ci];
        let pool = &input.pools[claim.pool_index];
        let name = in_flight_name(i);
        let mut node_labels =
            launched_labels(it, pool, &planned.zone, &planned.capacity_type, &name);
        if planned.capacity_type == "reserved" {
            let filter = OfferingFilter::new(&claim.requirements);
            let id = it
                .offerings
                .iter()
                .filter(|o| o.launchable() && filter.allows(o) && *o.zone == *planned.zone)
                .find_map(|o| o.reservation.as_ref().map(|r| r.id.to_string()));
            if let Some(id) = id {
                next.catalog.take_reserved_instance(&id);
                node_labels.insert(labels::RESERVATION_ID.into(), id);
            }
        }
        // As launched: what the pool's type advertises, NodeOverlay capacity included.
        let (allocatable, capacity) = pool.advertised(&input.catalog, ci);
        next.nodes.push(Node {
            name: name.clone(),
            labels: node_labels,
            taints: pool.taints.clone(),
            allocatable,
            capacity,
        });
        for &p in &claim.pods {
            next.bound.push((name.clone(), input.pods[p].clone()));
        }
    }
    for (n, pods) in &outcome.existing {
        for &p in pods {
            next.bound
                .push((input.nodes[*n].name.clone(), input.pods[p].clone()));
        }
    }
    next.pods = input
        .pods
        .iter()
        .enumerate()
        .filter(|(p, _)| outcome.errors.contains_key(p))
        .map(|(_, pod)| pod.clone())
        .collect();
    next
}

/// Folds the next loop's result into the first loop's plan: pods it put on an in-flight node
/// join that claim, its new claims are added (marked), and its Pending pods are the plan's.
pub fn merge(first: &mut Plan, next_input: &Input, next: &Outcome, second: Plan) {
    let mut existing = std::mem::take(&mut first.existing_nodes);
    for (n, pods) in &next.existing {
        if pods.is_empty() {
            continue;
        }
        let node = &next_input.nodes[*n].name;
        let keys: Vec<String> = pods.iter().map(|&p| next_input.pods[p].key()).collect();
        if let Some(i) = (0..first.node_claims.len()).find(|&i| in_flight_name(i) == *node) {
            first.node_claims[i].pods.extend(keys);
        } else if let Some(e) = existing.iter_mut().find(|e| e.node == *node) {
            e.pods.extend(keys);
        } else {
            existing.push(crate::plan::ExistingUse {
                node: node.clone(),
                node_pool: next_input.nodes[*n].pool().map(str::to_owned),
                pods: keys,
            });
        }
    }
    first.existing_nodes = existing;
    for mut c in second.node_claims {
        c.next_loop = true;
        first.node_claims.push(c);
    }
    first.pending = second.pending;
    for w in second.warnings {
        if !first.warnings.contains(&w) {
            first.warnings.push(w);
        }
    }
    first.recount();
}
