//! `gpu/`: the NVIDIA device plugin, tolerating exactly the GPU pools' taints and selecting
//! their label, plus a time-slicing config when a pool shares GPUs (`gpu.stack:
//! device-plugin`); under `gpu.stack: operator`, `crate::gpu_operator` instead.
//!
//! Karpenter waits for every extended resource an instance type has (nvidia.com/gpu) before
//! it calls a node initialized, and has no timeout: a device plugin that cannot land on a
//! GPU node leaves it uninitialized and billed forever.

use std::collections::BTreeSet;

use kk_spec::{ClusterSpec, ElasticCluster, GpuSoftware, Pool, PoolType, images, versions};
use serde_json::{Value, json};

use crate::names::{ACCELERATOR_LABEL, MANAGED_BY};
use crate::{Bundle, RenderError};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "nvidia-device-plugin";
const TIME_SLICING_CONFIG: &str = "nvidia-device-plugin-time-slicing";
const DEVICE_PLUGINS_VOLUME: &str = "kubelet-device-plugins-dir";
const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";

/// The GPU pools of the spec.
pub(crate) fn gpu_pools(spec: &ClusterSpec) -> Vec<&Pool> {
    spec.pools
        .iter()
        .filter(|p| p.pool_type == PoolType::Gpu)
        .collect()
}

/// Tolerations for exactly the GPU pools' taints, sorted and without repeats: the bare device
/// plugin's and, under `gpu.stack: operator`, every operator daemonset's. The CCM lifts the
/// uninitialized taint before the plugin is needed.
pub(crate) fn gpu_tolerations(spec: &ClusterSpec) -> Vec<Value> {
    let mut tolerations: BTreeSet<(String, Option<String>, String)> = BTreeSet::new();
    for pool in gpu_pools(spec) {
        for t in &pool.taints {
            tolerations.insert((t.key.clone(), t.value.clone(), t.effect.clone()));
        }
    }
    tolerations
        .into_iter()
        .map(|(key, value, effect)| match value {
            Some(value) => {
                json!({ "key": key, "operator": "Equal", "value": value, "effect": effect })
            }
            None => json!({ "key": key, "operator": "Exists", "effect": effect }),
        })
        .collect()
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let spec = &cluster.spec;
    let Some(gpu) = &spec.gpu else {
        return Ok(());
    };
    let gpu_pools = gpu_pools(spec);
    if gpu_pools.is_empty() {
        return Ok(());
    }
    // The operator's release and configs are `gpu_operator`'s (render calls one or the other).
    if gpu.stack == GpuSoftware::Operator {
        return Ok(());
    }
    let tolerations = gpu_tolerations(spec);

    // One config for the whole DaemonSet: the largest replica count asked for (validation
    // refuses pools that differ). Per-pool configs picked by a node label: `gpu.stack: operator`.
    let replicas = gpu_pools
        .iter()
        .filter_map(|p| p.gpu.as_ref())
        .map(|g| g.sharing_replicas)
        .max()
        .unwrap_or(1);
    // Compared with NVIDIA's static manifest (NVIDIA/k8s-device-plugin
    // deployments/static/nvidia-device-plugin.yml at v0.20.0): the same unprivileged container
    // (allowPrivilegeEscalation false, all capabilities dropped), the same device-plugins
    // hostPath volume (named kubelet-device-plugins-dir, `type: Directory`: the pod does not
    // start on a node whose kubelet has no device-plugins directory, instead of creating an
    // empty one the kubelet never reads) and system-node-critical priority. Two deliberate
    // differences:
    // - tolerations: upstream tolerates nvidia.com/gpu:NoSchedule on every node; ours tolerates
    //   exactly the GPU pools' taints and selects only GPU nodes.
    // - fail-on-init-error: v0.20.0's manifest no longer sets FAIL_ON_INIT_ERROR=false (v0.17
    //   did, because that DaemonSet runs on every node and must idle, not crash, where there is
    //   no GPU); the binary's own default is true. Ours runs only on GPU nodes, where an init error
    //   means the node can never advertise nvidia.com/gpu: true makes that a CrashLoopBackOff in
    //   `kubectl get pods -A` (the seed's first check) instead of a Running pod that hides it.
    //   Karpenter treats both alike (the node never initializes); the userData now stops the boot
    //   before joining when the NVIDIA runtime is not active, so this is the last line. We keep
    //   the flag explicit so a future default cannot change it silently.
    let mut container = json!({
        "name": NAME,
        "image": images::resolve(spec, versions::DEVICE_PLUGIN).reference(),
        "args": ["--fail-on-init-error=true"],
        "securityContext": { "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } },
        "volumeMounts": [{ "name": DEVICE_PLUGINS_VOLUME, "mountPath": DEVICE_PLUGINS_DIR }],
        "resources": { "requests": { "cpu": "10m", "memory": "32Mi" } },
    });
    let mut volumes = vec![
        json!({ "name": DEVICE_PLUGINS_VOLUME, "hostPath": { "path": DEVICE_PLUGINS_DIR, "type": "Directory" } }),
    ];
    let mut docs = Vec::new();
    if replicas > 1 {
        let config = format!(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
        );
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": TIME_SLICING_CONFIG, "namespace": NAMESPACE, "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
            "data": { "config.yaml": config },
        }));
        container["args"] = json!([
            "--fail-on-init-error=true",
            "--config-file=/etc/nvidia-device-plugin/config.yaml"
        ]);
        container["volumeMounts"]
            .as_array_mut()
            .expect("array")
            .push(json!({ "name": "config", "mountPath": "/etc/nvidia-device-plugin" }));
        volumes.push(json!({ "name": "config", "configMap": { "name": TIME_SLICING_CONFIG } }));
    }
    docs.push(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
        "spec": {
            "selector": { "matchLabels": { "name": NAME } },
            "updateStrategy": { "type": "RollingUpdate" },
            "template": {
                "metadata": { "labels": { "name": NAME } },
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": { ACCELERATOR_LABEL.0: ACCELERATOR_LABEL.1 },
                    "tolerations": tolerations,
                    "containers": [container],
                    "volumes": volumes,
                }
            }
        }
    }));
    bundle.add_yaml("gpu/nvidia-device-plugin.yaml", &docs)
}
