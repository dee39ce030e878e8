//! Static NodePools (`spec.replicas`, the StaticCapacity gate): Karpenter's static provisioning
//! controller keeps `replicas` nodes of the pool (at most `limits.nodes`), whatever the pods,
//! and the provisioner never opens a NodeClaim for it (sigs.k8s.io/karpenter v1.15
//! `pkg/controllers/static/provisioning`, `Provisioner.NewScheduler` skips static pools). A
//! plan therefore sees a static pool as existing capacity: the nodes it already has, plus the
//! missing ones as Karpenter's static controller would launch them — a NodeClaim with the
//! pool's requirements and no pods, which the AWS provider launches as the cheapest compatible
//! offering (the same launch choice as any claim's).

use std::collections::BTreeMap;

use crate::labels;
use crate::model::Node;
use crate::req::{Requirement, Requirements};
use crate::solver::{ClaimResult, Input, instance_requirements, launch};

/// Adds the nodes each static pool still lacks to `input.nodes`, as initialized nodes named
/// `<pool>-static-<i>`, with a warning per pool saying what they are and cost.
pub fn add_static_nodes(input: &mut Input) {
    let catalog = &input.catalog;
    let mut added = Vec::new();
    let mut warnings = Vec::new();
    for (pi, pool) in input.pools.iter().enumerate() {
        let Some(replicas) = pool.replicas else {
            continue;
        };
        let have = input
            .nodes
            .iter()
            .filter(|n| n.pool() == Some(pool.name.as_str()))
            .count() as i64;
        let want = pool
            .limits
            .get("nodes")
            .map_or(replicas, |&limit| replicas.min(limit));
        if have >= want {
            continue;
        }
        let mut template = pool.requirements.clone();
        template.add_all(&Requirements::from_labels(&pool.labels));
        template.add(labels::NODEPOOL, Requirement::single(&pool.name));
        let types: Vec<usize> = catalog
            .types()
            .iter()
            .enumerate()
            .filter(|(_, it)| instance_requirements(it).intersects(&template).is_ok())
            .map(|(ci, _)| ci)
            .collect();
        let claim = ClaimResult {
            pool: pool.name.clone(),
            pool_index: pi,
            requirements: template,
            types,
            requests: BTreeMap::new(),
            pods: Vec::new(),
        };
        let allocatable = |ci: usize| pool.advertised(catalog, ci).0;
        let Some(l) = launch(catalog, &claim, allocatable, &input.options) else {
            warnings.push(format!(
                "nodepool {}: static ({replicas} replicas), but no instance type it allows can launch; its nodes are left out",
                pool.name
            ));
            continue;
        };
        let it = &catalog.types()[l.instance_type];
        let (allocatable, capacity) = pool.advertised(catalog, l.instance_type);
        for i in have..want {
            let name = format!("{}-static-{i}", pool.name);
            let mut node_labels = crate::next_loop::launched_labels(
                it,
                pool,
                l.zone.as_str(),
                l.capacity_type.as_str(),
                &name,
            );
            for (key, value) in [
                (labels::INSTANCE_TYPE, it.name.as_str()),
                (labels::REGISTERED, "true"),
                (labels::INITIALIZED, "true"),
            ] {
                node_labels.insert(key.to_owned(), value.to_owned());
            }
            added.push(Node {
                name,
                labels: node_labels,
                taints: pool.taints.clone(),
                allocatable: allocatable.clone(),
                capacity: capacity.clone(),
            });
        }
        warnings.push(format!(
            "nodepool {}: static ({replicas} replicas{}): {} node(s) of {} {} in {} at ${:.4}/h each, modelled as existing nodes {}-static-{have}..{}; they run whatever the pods",
            pool.name,
            if want < replicas { format!(", limits.nodes {want}") } else { String::new() },
            want - have,
            it.name,
            l.capacity_type.as_str(),
            l.zone,
            l.price,
            pool.name,
            want - 1,
        ));
    }
    input.nodes.extend(added);
    input.warnings.extend(warnings);
}
