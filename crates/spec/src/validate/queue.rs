//! `queue` on a pool: what the Kueue objects rendered from it need.

use super::*;

/// Kueue admits a workload only if its ClusterQueue covers every resource the workload
/// requests, so the quota (the pool's limits) must name the three every training pod asks for.
pub const QUEUE_RESOURCES: [&str; 3] = ["cpu", "memory", "nvidia.com/gpu"];
/// Kueue v0.19.2's ResourceFlavor (v1beta2, as in v0.17.0) allows 8 node labels (one is
/// `karpenter.sh/nodepool`) and 8 node taints.
const MAX_FLAVOR_LABELS: usize = 7;
const MAX_FLAVOR_TAINTS: usize = 8;

pub(super) fn queue(p: &mut Problems, at: &FieldPath, pool: &Pool) {
    let Some(queue) = &pool.queue else {
        return;
    };
    let at = at.key("queue");
    if pool.pool_type != PoolType::Gpu {
        p.push((
            at.clone(),
            "job queues are for GPU pools (type: gpu)".into(),
        ));
    }
    if queue.namespaces.is_empty() {
        p.push((
            at.key("namespaces"),
            "at least one namespace (each gets a LocalQueue)".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, namespace) in queue.namespaces.iter().enumerate() {
        if !DNS_LABEL.is_match(namespace) {
            p.push((
                at.key("namespaces").index(i),
                format!("{namespace:?} is not a namespace name"),
            ));
        } else if !seen.insert(namespace) {
            p.push((
                at.key("namespaces").index(i),
                format!("{namespace:?} is listed twice"),
            ));
        }
    }
    let missing: Vec<&str> = QUEUE_RESOURCES
        .into_iter()
        .filter(|r| !pool.limits.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        p.push((
            at.clone(),
            format!(
                "the ClusterQueue's quota is the pool's limits, which lack {}: Kueue admits no workload that requests a resource its queue does not cover (set limits.{})",
                missing.join(", "),
                missing.join(", limits.")
            ),
        ));
    }
    if pool.labels.len() > MAX_FLAVOR_LABELS {
        p.push((
            at.clone(),
            format!("{} labels: a Kueue ResourceFlavor takes at most {MAX_FLAVOR_LABELS} besides karpenter.sh/nodepool", pool.labels.len()),
        ));
    }
    if pool.taints.len() > MAX_FLAVOR_TAINTS {
        p.push((
            at,
            format!(
                "{} taints: a Kueue ResourceFlavor takes at most {MAX_FLAVOR_TAINTS}",
                pool.taints.len()
            ),
        ));
    }
}
