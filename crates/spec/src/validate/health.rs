//! `health` on pools and Karpenter's node repair: combinations that cannot work are refused
//! (conditions nothing acts on, repair that reboots without repair on), and a GPU pool whose
//! faults nobody watches is a warning.

use super::*;

pub(super) fn health(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let gates = at.key("karpenter").key("featureGates");
    let watched: Vec<&str> = spec
        .pools
        .iter()
        .filter(|pool| spec.health_watch(pool).any())
        .map(|pool| pool.name.as_str())
        .collect();
    for (i, pool) in spec.pools.iter().enumerate() {
        let Some(health) = &pool.health else {
            continue;
        };
        if health.gpu == Some(true) && pool.pool_type != PoolType::Gpu {
            p.push((
                at.key("pools").index(i).key("health").key("gpu"),
                "a CPU pool has no GPU to watch (type: gpu pools only)".into(),
            ));
        }
    }
    if !watched.is_empty() {
        if spec.karpenter.feature_gates.get("nodeRepair") == Some(&false) {
            p.push((
                gates.key("nodeRepair"),
                format!(
                    "pools {} run the node health agent, but with node repair off nothing acts on the conditions it writes: remove this line (render turns repair on), or set health: {{gpu: false, kernel: false}} on those pools",
                    watched.join(", ")
                ),
            ));
        }
        if spec.controller.is_none() {
            p.push((
                at.key("controller"),
                format!(
                    "pools {} run the node health agent, which is our controller image: set spec.controller.image",
                    watched.join(", ")
                ),
            ));
        }
    }
    if spec.reboot_for_repair() && !spec.node_repair() {
        p.push((
            gates.key("rebootForRepair"),
            "reboot-for-repair does nothing without node repair: turn nodeRepair on, or run the health agent on a pool".into(),
        ));
    }
}

/// A GPU pool whose XIDs nobody watches: a GPU that fell off the bus leaves its node Ready,
/// taking jobs and failing each, until someone notices.
pub(super) fn warnings(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    for (i, pool) in spec.pools.iter().enumerate() {
        if pool.pool_type != PoolType::Gpu || spec.health_watch(pool).gpu {
            continue;
        }
        let why = if pool.health.and_then(|h| h.gpu) == Some(false) {
            "health.gpu is false"
        } else {
            "the health agent is our controller's image, and spec.controller names none"
        };
        p.push((
            at.key("pools").index(i).key("health").key("gpu"),
            format!(
                "nothing watches pool {}'s GPUs ({why}): a fatal XID leaves the node Ready and failing every job, and Karpenter's node repair never hears of it",
                pool.name
            ),
        ));
    }
}
