//! Names and labels shared by several artifacts, defined once.

use std::collections::BTreeMap;

use kk_spec::{ClusterSpec, ElasticCluster, NodeRole, Pool, PoolType};
use serde_json::{Value, json};

/// Label on every Karpenter-launched node (seed 000): `kubectl get nodes -l node.lifecycle=karpenter`.
pub const LIFECYCLE_LABEL: (&str, &str) = ("node.lifecycle", "karpenter");
/// Label on GPU nodes; the device plugin selects it.
pub const ACCELERATOR_LABEL: (&str, &str) = ("node.accelerator", "nvidia-gpu");
/// Names live, the CLI and render all use (defined in kk-spec, which live may depend on).
pub use kk_spec::names::{
    INFRA_ROLE_LABEL, INSTANCE_NAME_PATTERN, JOIN_TOKEN_GROUP, MANAGED_BY, TOKEN_CLUSTER_LABEL,
    controller_namespace, controller_user, join_store,
};

/// NodePool template labels (and so the kubelet's `--node-labels`).
pub fn pool_labels(pool: &Pool) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(LIFECYCLE_LABEL.0.to_owned(), LIFECYCLE_LABEL.1.to_owned());
    if pool.pool_type == PoolType::Gpu {
        labels.insert(
            ACCELERATOR_LABEL.0.to_owned(),
            ACCELERATOR_LABEL.1.to_owned(),
        );
    }
    for (k, v) in &pool.labels {
        labels.insert(k.clone(), v.clone());
    }
    labels
}

/// The Kubean `Cluster` operations run on: the adopted one, else the one render writes.
pub fn kubean_cluster(cluster: &ElasticCluster) -> &str {
    cluster
        .spec
        .kubean
        .existing_cluster
        .as_deref()
        .unwrap_or(&cluster.metadata.name)
}

pub fn hosts_configmap(cluster: &ElasticCluster) -> String {
    format!("{}-hosts-conf", cluster.metadata.name)
}

pub fn vars_configmap(cluster: &ElasticCluster) -> String {
    format!("{}-vars-conf", cluster.metadata.name)
}

/// The kubelet's own default. Kubespray never installs the VPC CNI (validation refuses it),
/// so without an explicit value Karpenter would assume ENI-limited density instead.
pub const DEFAULT_MAX_PODS: i64 = 110;

/// `spec.kubelet.maxPods` of a pool's EC2NodeClass, always set.
pub fn max_pods(pool: &Pool) -> i64 {
    pool.kubelet
        .as_ref()
        .and_then(|k| k.max_pods)
        .unwrap_or(DEFAULT_MAX_PODS)
}

/// The kubelet flags equal to a pool's `spec.kubelet`, so what Karpenter assumes
/// about pod density and reserved resources is what the kubelet really does.
pub fn kubelet_flags(pool: &Pool) -> Vec<String> {
    let mut flags = vec![format!("--max-pods={}", max_pods(pool))];
    if let Some(k) = &pool.kubelet {
        for (flag, map) in [
            ("--kube-reserved", &k.kube_reserved),
            ("--system-reserved", &k.system_reserved),
        ] {
            if !map.is_empty() {
                let pairs: Vec<String> = map.iter().map(|(r, q)| format!("{r}={q}")).collect();
                flags.push(format!("{flag}={}", pairs.join(",")));
            }
        }
    }
    flags
}

/// Tolerations for the controllers pinned to infra nodes (Karpenter, the join-token rotator,
/// the EBS CSI controller): `CriticalAddonsOnly` (the charts' default) and every taint the spec
/// puts on infra nodes (`kubean.infraTaints`, `key=value:Effect`), or they stay Pending there.
pub fn infra_tolerations(spec: &ClusterSpec) -> Vec<Value> {
    let mut out = vec![json!({ "key": "CriticalAddonsOnly", "operator": "Exists" })];
    for taint in &spec.kubean.infra_taints {
        let Some((key_value, effect)) = taint.rsplit_once(':') else {
            continue;
        };
        let toleration = match key_value.split_once('=') {
            Some((key, value)) => {
                json!({ "key": key, "operator": "Equal", "value": value, "effect": effect })
            }
            None => json!({ "key": key_value, "operator": "Exists", "effect": effect }),
        };
        let key = toleration["key"].clone();
        // CriticalAddonsOnly is tolerated whatever its value and effect already.
        if key != "CriticalAddonsOnly" && !out.contains(&toleration) {
            out.push(toleration);
        }
    }
    out
}

/// How many Kubean nodes carry the infra role.
pub fn infra_nodes(spec: &ClusterSpec) -> usize {
    spec.kubean
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&NodeRole::Infra))
        .count()
}

/// Replicas of an infra controller: two (one survives a node loss), but no more than there are
/// infra nodes. Karpenter's chart requires hostname anti-affinity, so a second replica on a
/// single infra node would stay Pending forever; one node means one replica, no HA.
pub fn infra_replicas(spec: &ClusterSpec) -> usize {
    infra_nodes(spec).clamp(1, 2)
}
