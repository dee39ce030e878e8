//! `spec.pools`: names, the node classes pools share, and each pool's own fields.

use super::node_class::{ami, instances, root_volume};
use super::reservations::{capacity_reservations, termination_grace_period};
use super::*;
use kk_karpenter::duration::is_whole_units;

/// `per_pool_sharing`: the GPU Operator picks each node's device plugin config by a pool
/// label, so pools may time-slice differently.
pub(super) fn pools(p: &mut Problems, at: &FieldPath, pools: &[Pool], per_pool_sharing: bool) {
    if pools.is_empty() {
        p.push((at.clone(), "at least one pool is needed".into()));
    }
    let mut names = BTreeMap::new();
    let mut classes: BTreeMap<String, (usize, &Pool)> = BTreeMap::new();
    // The bare device plugin serves every GPU pool with one time-slicing config, so a pool
    // asking for other sharing would silently get the first pool's (the operator's does not).
    let mut sharing: Option<(usize, i64)> = None;
    for (i, pool) in pools.iter().enumerate() {
        let Some(gpu) = pool
            .gpu
            .as_ref()
            .filter(|_| pool.pool_type == PoolType::Gpu)
        else {
            continue;
        };
        match sharing {
            _ if per_pool_sharing => {}
            None => sharing = Some((i, gpu.sharing_replicas)),
            Some((first, replicas)) if replicas != gpu.sharing_replicas => p.push((
                at.index(i).key("gpu").key("sharingReplicas"),
                format!(
                    "{} differs from pools[{first}] ({replicas}): every GPU pool shares one device plugin config",
                    gpu.sharing_replicas
                ),
            )),
            Some(_) => {}
        }
    }
    for (i, pool) in pools.iter().enumerate() {
        let at = at.index(i);
        if let Some(first) = names.insert(pool.name.as_str(), i) {
            p.push((
                at.key("name"),
                format!("duplicate pool name {:?} (also pools[{first}])", pool.name),
            ));
        }
        pool_fields(p, &at, pool);
        let class = node_class_name(pool).to_owned();
        match classes.get(&class) {
            Some((first, other)) if !same_node_class(other, pool) => p.push((
                at.key("nodeClass"),
                format!(
                    "shares EC2NodeClass {class:?} with pools[{first}] but differs in type, ami, joinMethod, rootVolume, kubelet, capacityReservations or localStorage"
                ),
            )),
            Some(_) => {}
            None => {
                classes.insert(class, (i, pool));
            }
        }
    }
}

/// The EC2NodeClass a pool uses.
pub fn node_class_name(pool: &Pool) -> &str {
    pool.node_class.as_deref().unwrap_or(&pool.name)
}

fn same_node_class(a: &Pool, b: &Pool) -> bool {
    a.pool_type == b.pool_type
        && a.ami == b.ami
        && a.join_method == b.join_method
        && a.root_volume == b.root_volume
        && a.kubelet == b.kubelet
        && a.instances.arch == b.instances.arch
        && a.taints == b.taints
        && a.labels == b.labels
        && a.capacity_reservations == b.capacity_reservations
        && a.local_storage == b.local_storage
}

fn pool_fields(p: &mut Problems, at: &FieldPath, pool: &Pool) {
    if !(DNS_SUBDOMAIN.is_match(&pool.name) && pool.name.len() <= 63) {
        p.push((
            at.key("name"),
            format!("{:?} is not a valid NodePool name", pool.name),
        ));
    }
    if let Some(class) = &pool.node_class
        && !(DNS_SUBDOMAIN.is_match(class) && class.len() <= 63)
    {
        p.push((
            at.key("nodeClass"),
            format!("{class:?} is not a valid EC2NodeClass name"),
        ));
    }
    ami(p, &at.key("ami"), &pool.ami, pool);
    instances(p, &at.key("instances"), &pool.instances);
    capacity_reservations(p, at, pool);
    termination_grace_period(p, at, pool);
    super::queue::queue(p, at, pool);
    if pool.local_storage.is_some() && pool.join_method == JoinMethod::Iam {
        p.push((
            at.key("localStorage"),
            "only the kubeadm-token userData builds the RAID0 (joinMethod iam renders nodeadm's, which does not yet)".into(),
        ));
    }
    match (pool.pool_type, &pool.gpu) {
        (PoolType::Gpu, None) => p.push((
            at.key("gpu"),
            "a GPU pool needs gpu.count (GPUs per node) so limits and the device plugin line up"
                .into(),
        )),
        (PoolType::Gpu, Some(gpu)) => {
            let at = at.key("gpu");
            match gpu.count {
                None => p.push((
                    at.key("count"),
                    "a GPU pool needs the GPU count per node".into(),
                )),
                Some(c) if c < 1 => p.push((at.key("count"), "must be at least 1".into())),
                _ => {}
            }
            if gpu.sharing_replicas < 1 {
                p.push((at.key("sharingReplicas"), "must be at least 1".into()));
            }
            if gpu.manufacturer != "nvidia" {
                p.push((
                    at.key("manufacturer"),
                    "only nvidia is supported (the device plugin rendered is NVIDIA's)".into(),
                ));
            }
        }
        (PoolType::Cpu, Some(_)) => p.push((
            at.key("gpu"),
            "a cpu pool cannot have GPU settings; use type: gpu".into(),
        )),
        (PoolType::Cpu, None) => {}
    }
    for (i, taint) in pool.taints.iter().enumerate() {
        let at = at.key("taints").index(i);
        if !is_qualified_name(&taint.key) {
            p.push((
                at.key("key"),
                format!("{:?} is not a valid taint key", taint.key),
            ));
        }
        if taint.key.starts_with("karpenter.sh/") {
            p.push((
                at.key("key"),
                "karpenter.sh/ taints are Karpenter's own".into(),
            ));
        }
        if let Some(v) = &taint.value
            && !LABEL_VALUE.is_match(v)
        {
            p.push((at.key("value"), format!("{v:?} is not a valid taint value")));
        }
        if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
            p.push((
                at.key("effect"),
                format!(
                    "{:?} must be NoSchedule, PreferNoSchedule or NoExecute",
                    taint.effect
                ),
            ));
        }
    }
    for key in pool.labels.keys() {
        let at = at.key("labels").key(key);
        if !is_qualified_name(key) {
            p.push((at.clone(), format!("{key:?} is not a valid label key")));
        }
        if let Some(domain) = kk_karpenter::labels::reserved_domain(key) {
            p.push((
                at.clone(),
                format!("labels under {domain} cannot be set by a pool (reserved for Kubernetes, Karpenter or the node's role)"),
            ));
        }
        if !LABEL_VALUE.is_match(&pool.labels[key]) {
            p.push((
                at,
                format!("{:?} is not a valid label value", pool.labels[key]),
            ));
        }
    }
    for (resource, value) in &pool.limits {
        let at = at.key("limits").key(resource);
        match Quantity::parse(&value.as_text()) {
            Err(e) => p.push((at, e.to_string())),
            Ok(q) if q.is_negative() => {
                p.push((at, format!("limit {} is negative", value.as_text())))
            }
            Ok(_) => {}
        }
    }
    if let Some(d) = &pool.disruption {
        let at = at.key("disruption");
        if let Some(policy) = &d.consolidation_policy
            && !["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"].contains(&policy.as_str())
        {
            p.push((
                at.key("consolidationPolicy"),
                format!("{policy:?} must be WhenEmpty, WhenEmptyOrUnderutilized or Balanced"),
            ));
        }
        if let Some(after) = &d.consolidate_after
            && after != "Never"
            && !is_whole_units(after)
        {
            p.push((
                at.key("consolidateAfter"),
                format!("{after:?} is not a duration like 30s, 5m, 2h or Never"),
            ));
        }
        for (i, b) in d.budgets.iter().enumerate() {
            let at = at.key("budgets").index(i);
            if !BUDGET_NODES.is_match(&b.nodes) {
                p.push((
                    at.key("nodes"),
                    format!("{:?} must be a count or a percentage", b.nodes),
                ));
            }
            if b.schedule.is_some() != b.duration.is_some() {
                p.push((at.clone(), "schedule and duration go together".into()));
            }
            if let Some(duration) = &b.duration
                && !is_whole_units(duration)
            {
                p.push((
                    at.key("duration"),
                    format!("{duration:?} is not a duration"),
                ));
            }
            for (j, reason) in b.reasons.iter().enumerate() {
                if !["Underutilized", "Empty", "Drifted"].contains(&reason.as_str()) {
                    p.push((
                        at.key("reasons").index(j),
                        format!("{reason:?} must be Underutilized, Empty or Drifted"),
                    ));
                }
            }
        }
    }
    if let Some(expire) = &pool.expire_after
        && expire != "Never"
        && !is_whole_units(expire)
    {
        p.push((
            at.key("expireAfter"),
            format!("{expire:?} is not a duration like 720h or Never"),
        ));
    }
    if let Some(v) = &pool.root_volume {
        root_volume(p, &at.key("rootVolume"), v);
    }
    if let Some(k) = &pool.kubelet {
        let at = at.key("kubelet");
        if let Some(max) = k.max_pods
            && !(1..=1024).contains(&max)
        {
            p.push((at.key("maxPods"), "must be between 1 and 1024".into()));
        }
        for (field, map) in [
            ("kubeReserved", &k.kube_reserved),
            ("systemReserved", &k.system_reserved),
        ] {
            for (resource, value) in map {
                let at = at.key(field).key(resource);
                if !RESERVED_RESOURCES.contains(&resource.as_str()) {
                    p.push((
                        at.clone(),
                        "only cpu, memory, ephemeral-storage and pid can be reserved".into(),
                    ));
                }
                match Quantity::parse(value) {
                    Err(e) => p.push((at, e.to_string())),
                    Ok(q) if q.is_negative() => p.push((at, "must not be negative".into())),
                    Ok(_) => {}
                }
            }
        }
    }
    if let Some(w) = pool.weight
        && !(1..=100).contains(&w)
    {
        p.push((at.key("weight"), "must be between 1 and 100".into()));
    }
}

/// Static (warm) pools, `replicas`: what Karpenter 1.15's NodePool CRD and the staticCapacity
/// gate allow. The CRD refuses weight and limits other than `nodes`; consolidation settings
/// are ignored there, so here they are errors rather than silent no-ops.
pub(super) fn static_pools(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let gate_on = spec
        .karpenter
        .feature_gates
        .get("staticCapacity")
        .copied()
        .unwrap_or(false);
    for (i, pool) in spec.pools.iter().enumerate() {
        let Some(replicas) = pool.replicas else {
            continue;
        };
        let at = at.key("pools").index(i);
        if replicas < 0 {
            p.push((at.key("replicas"), "must not be negative".into()));
        }
        if !gate_on {
            p.push((
                at.key("replicas"),
                "a static pool needs karpenter.featureGates.staticCapacity: true (alpha, off by default); without it Karpenter neither launches its nodes nor schedules onto the pool"
                    .into(),
            ));
        }
        if pool.weight.is_some() {
            p.push((
                at.key("weight"),
                "a static pool (replicas) has no weight: Karpenter's NodePool CRD refuses it"
                    .into(),
            ));
        }
        for key in pool.limits.keys().filter(|k| *k != "nodes") {
            p.push((
                at.key("limits").key(key),
                "a static pool (replicas) takes only the nodes limit: Karpenter's NodePool CRD refuses others".into(),
            ));
        }
        if let Some(nodes) = pool
            .limits
            .get("nodes")
            .and_then(|n| n.as_text().parse::<i64>().ok())
            && replicas > nodes
        {
            p.push((
                at.key("replicas"),
                format!(
                    "{replicas} exceeds limits.nodes {nodes}: Karpenter stops at {nodes} nodes"
                ),
            ));
        }
        if let Some(d) = &pool.disruption {
            for (field, set) in [
                ("consolidationPolicy", d.consolidation_policy.is_some()),
                ("consolidateAfter", d.consolidate_after.is_some()),
            ] {
                if set {
                    p.push((
                        at.key("disruption").key(field),
                        "a static pool (replicas) never consolidates: Karpenter ignores this field; remove it".into(),
                    ));
                }
            }
        }
    }
}
