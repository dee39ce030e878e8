//! GPU stacks and sharing on the lab (issue #28), with the real Karpenter: the seed 002 flow
//! under `gpu.stack: operator`, a time-sliced GPU pool whose NodeOverlay lets Karpenter pack
//! four pods onto one GPU, and a warm static pool that keeps its replicas.
//!
//! Stand-in: the lab applies bundles with `--skip-helm` (the charts' registries are out of
//! reach), so the GPU Operator's release never runs. `operator_stand_in` applies what the
//! operator would run on a GPU node in its place: the device plugin DaemonSet
//! (`gpu-operator/nvidia-device-plugin-daemonset`), with the values' `daemonsets.tolerations`,
//! on the nodes the values' node-feature-discovery worker selects (the operator deploys its
//! operands where NFD found an NVIDIA GPU), mounting the rendered config ConfigMap as the
//! operator's config manager does. The lab's kubelet then advertises the node's GPUs times the
//! replicas of the config the node's `nvidia.com/device-plugin.config` label names
//! (testbed/cmd/lab-kubelet).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kk_model::yaml::{LoadLimits, load_documents};
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::{Value, json};

use crate::harness::{
    Lab, OPERATOR_DEVICE_PLUGIN_DAEMONSET, assert_no_orphan_no_duplicate, claims_of, is_true, live,
    pod_available,
};

const MIN: Duration = Duration::from_secs(60);
const GPU_POOL: &str = "workload-gpu-l4";
const WARM_POOL: &str = "warm";
/// The GPU Operator v25.10.1 chart's device plugin image (docs/guide/gpus-and-training.md).
const OPERATOR_DEVICE_PLUGIN: &str = "nvcr.io/nvidia/k8s-device-plugin:v0.18.1";

/// The lab spec under `gpu.stack: operator`, the nodeOverlay and staticCapacity gates on, the
/// GPU pool time-sliced four ways, and a warm pool of two on-demand m6i.large.
fn spec_edit(spec: String) -> String {
    let edits = [
        (
            "    devicePluginVersion: v0.20.0\n",
            "    devicePluginVersion: v0.20.0\n    stack: operator\n",
        ),
        (
            "    isolatedVPC: true\n",
            "    isolatedVPC: true\n    featureGates: {nodeOverlay: true, staticCapacity: true}\n",
        ),
        (
            "gpu: {manufacturer: nvidia, names: [l4], count: 1}",
            "gpu: {manufacturer: nvidia, names: [l4], count: 1, sharingReplicas: 4}",
        ),
    ];
    let mut spec = spec;
    for (from, to) in edits {
        assert!(spec.contains(from), "the lab spec no longer has {from:?}");
        spec = spec.replacen(from, to, 1);
    }
    spec.push_str(
        "    - name: warm
      type: cpu
      nodeClass: kubean-aws-warm
      ami: {id: ami-0c0ffee0c0ffee001}
      instances:
        types: [m6i.large]
        capacityTypes: [on-demand]
        arch: [amd64]
      replicas: 2
      limits: {nodes: 3}
      kubelet:
        maxPods: 110
",
    );
    spec
}

/// Applies the GPU Operator's device plugin in the operator's place (see the header), from the
/// bundle's operator values.
fn operator_stand_in(lab: &Lab, bundle: &Path) {
    let text = std::fs::read_to_string(bundle.join("gpu/gpu-operator-values.yaml")).unwrap();
    let values: Value = load_documents(&text, LoadLimits::default())
        .unwrap()
        .remove(0)
        .value;
    let name = OPERATOR_DEVICE_PLUGIN_DAEMONSET;
    let labels = json!({"app": name});
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": values["node-feature-discovery"]["worker"]["nodeSelector"],
                    "tolerations": values["daemonsets"]["tolerations"],
                    "containers": [{
                        "name": "nvidia-device-plugin",
                        "image": OPERATOR_DEVICE_PLUGIN,
                        "volumeMounts": [
                            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                            {"name": "available-configs", "mountPath": "/available-configs"},
                        ],
                    }],
                    "volumes": [
                        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                        {"name": "available-configs",
                         "configMap": {"name": values["devicePlugin"]["config"]["name"]}},
                    ],
                },
            },
        },
    });
    let api: Api<DaemonSet> = Api::namespaced(lab.client.clone(), "gpu-operator");
    lab.server_side_apply(&api, name, &daemonset);
}

/// A Deployment of `replicas` pods asking one `nvidia.com/gpu` each on the GPU pool.
fn gpu_deployment(lab: &Lab, replicas: i32) {
    let name = "shared-gpu";
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": GPU_POOL},
                    "tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "cuda",
                        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }],
                },
            },
        },
    });
    let api: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    lab.server_side_apply(&api, name, &deployment);
}

fn names(claims: &[DynamicObject]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|nc| nc.metadata.name.clone())
        .collect()
}

/// The seed 002 flow with the GPU Operator: the bundle's CUDA pod and three more pods, one
/// GPU each, on a pool that time-slices its L4 four ways. With the NodeOverlay render writes,
/// Karpenter plans one g6 node for the four (without it, four nodes: one GPU each); the
/// operator's device plugin (stand-in) advertises 4 `nvidia.com/gpu`, the node initializes and
/// all four run on it. The warm static pool holds its two nodes and replaces one deleted.
#[test]
fn operator_stack_packs_four_time_sliced_pods_on_one_gpu_node_and_a_static_pool_keeps_its_replicas()
{
    let Some(mut lab) = Lab::require("GPU operator stack, sharing overlay, static pool") else {
        return;
    };
    let (spec, bundle) = lab.render(spec_edit);
    assert!(
        bundle.join("nodeoverlays/workload-gpu-l4.yaml").exists(),
        "render wrote no NodeOverlay for the time-sliced pool"
    );
    assert!(
        !bundle.join("gpu/nvidia-device-plugin.yaml").exists(),
        "the operator stack has no bare device plugin"
    );
    // Pending before Karpenter starts, so its first batch holds all four GPU pods. A fresh
    // Karpenter: one kept from an earlier test planned the pods pending at deploy before it
    // had read the new NodeOverlay, one NodeClaim per pod (a loaded cold CI run, 2026-12-07).
    gpu_deployment(&lab, 3);
    lab.fresh_karpenter();
    lab.deploy(&spec, &bundle);
    operator_stand_in(&lab, &bundle);

    let nodes = lab.wait("four GPU pods Running", 5 * MIN, |l| {
        let pods: Vec<_> = l
            .pods("default")
            .into_iter()
            .filter(|p| {
                let name = p.metadata.name.as_deref().unwrap_or("");
                name.starts_with("shared-gpu") || name == "cuda-vectoradd-workload-gpu-l4"
            })
            .collect();
        let nodes: std::collections::BTreeSet<String> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        (pods.len() == 4 && pods.iter().all(pod_available)).then_some(nodes)
    });
    assert_eq!(
        nodes.len(),
        1,
        "the four GPU pods share one node: {nodes:?}"
    );
    let node = nodes.into_iter().next().unwrap();
    let gpu_claims = claims_of(&lab, GPU_POOL);
    assert_eq!(
        gpu_claims.len(),
        1,
        "one NodeClaim for four time-sliced pods (the overlay's 4 GPUs), not one per pod: {:?}",
        names(&gpu_claims)
    );
    assert!(is_true(&gpu_claims[0], "Initialized"));
    let advertised = lab
        .nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        .and_then(|n| n.status?.allocatable?.get("nvidia.com/gpu").cloned())
        .map(|q| q.0);
    assert_eq!(
        advertised.as_deref(),
        Some("4"),
        "the time-sliced L4 advertises 4"
    );
    live(&format!(
        "   4 GPU pods on {node}, one NodeClaim ({})",
        names(&gpu_claims).join(", ")
    ));

    // The warm pool: its two nodes, and a deleted one replaced.
    let warm = lab.wait("two warm NodeClaims Initialized", 3 * MIN, |l| {
        let claims = claims_of(l, WARM_POOL);
        (claims.len() == 2 && claims.iter().all(|nc| is_true(nc, "Initialized")))
            .then(|| names(&claims))
    });
    let claims_api = lab.dynamic("karpenter.sh", "v1", "NodeClaim");
    lab.rt
        .block_on(claims_api.delete(&warm[0], &DeleteParams::default()))
        .unwrap();
    live(&format!("   deleted the warm NodeClaim {}", warm[0]));
    let after = lab.wait(
        "the warm pool back at two Initialized NodeClaims",
        4 * MIN,
        |l| {
            let claims = claims_of(l, WARM_POOL);
            let now = names(&claims);
            (claims.len() == 2
                && claims.iter().all(|nc| is_true(nc, "Initialized"))
                && !now.contains(&warm[0]))
            .then_some(now)
        },
    );
    assert!(
        after.contains(&warm[1]),
        "the other warm node was kept: {after:?}"
    );
    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}
