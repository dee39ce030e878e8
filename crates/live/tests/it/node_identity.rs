//! The node identity policy (render's `cloud/node-identity-policy.yaml`, issue 47 item 7),
//! enforced by the testbed's real apiserver (Node authorizer and NodeRestriction on). Attacks
//! are made as a node (the admin impersonating `system:node:<name>` in `system:nodes`: what a
//! compromised kubelet is); Karpenter's own writes are the admin's. A CPU node of the example's
//! `workload-general` pool tries to move itself into the GPU pool by its labels and to advertise
//! GPUs; a node registers with labels its pool does not give; and what real nodes and
//! Karpenter do still goes through.
//!
//! One test function: the policy has a fixed name.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Node;
use kk_testkit::testbed::{Testbed, require};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CPU_POOL: &str = "workload-general";
const GPU_POOL: &str = "workload-gpu-l4";

/// The node's view of Nodes (the admin impersonating it).
async fn node_api(testbed: &Testbed, name: &str) -> Api<Node> {
    Api::all(as_node(testbed, name).await)
}

/// The labels Karpenter gives a node of the example's `pool` (the template's and its own).
fn pool_labels(pool: &str) -> Value {
    let mut labels = json!({
        "karpenter.sh/nodepool": pool,
        "karpenter.sh/capacity-type": "spot",
        "node.lifecycle": "karpenter",
    });
    if pool == GPU_POOL {
        labels["node.accelerator"] = json!("nvidia-gpu");
        labels["gpu.workload"] = json!("inference");
    } else {
        labels["workload-tier"] = json!("general");
    }
    labels
}

/// The Node a kubelet registers for instance `name`: tainted, its own providerID, `labels`, and
/// `capacity` in its status.
fn registering(name: &str, labels: Value, capacity: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "providerID": format!("aws:///us-east-1a/{name}"),
            "taints": [{ "key": "karpenter.sh/unregistered", "effect": "NoExecute" }],
        },
        "status": { "capacity": capacity, "allocatable": capacity },
    }))
    .unwrap()
}

fn plain_capacity() -> Value {
    json!({ "cpu": "4", "memory": "16Gi", "pods": "110" })
}

/// Karpenter registering the node: its claim's labels and `karpenter.sh/registered`, taint gone.
fn karpenter_registers(pool: &str) -> Value {
    let mut labels = pool_labels(pool);
    labels["karpenter.sh/registered"] = json!("true");
    json!({ "metadata": { "labels": labels }, "spec": { "taints": null } })
}

fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("kubean-karpenter-node-identity") =>
        {
            eprintln!("refused as expected: {what}: {}", s.message);
        }
        other => panic!("{what}: expected the node identity policy's 403, got {other:?}"),
    }
}

fn admitted<T>(what: &str, result: Result<T, kube::Error>) {
    if let Err(e) = result {
        panic!("{what}: expected to be admitted, got {e:?}");
    }
}

fn merge(patch: Value) -> Patch<Value> {
    Patch::Merge(patch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_move_itself_into_the_gpu_pool_or_advertise_gpus() {
    let Some(testbed) = require(&repo(), "node identity policy") else {
        return;
    };
    let admin = admin(&testbed).await;
    let spec = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
        .unwrap()
        .spec
        .spec;
    let objects: Vec<(String, Value)> = kk_render::node_identity::manifests(&spec)
        .into_iter()
        .map(|o| ("cloud/node-identity-policy.yaml".to_owned(), o))
        .collect();
    let options = kk_live::apply::ApplyOptions {
        force_conflicts: true,
        ..Default::default()
    };
    kk_live::apply::apply_all(&admin, &objects, &options)
        .await
        .unwrap();
    let nodes_admin: Api<Node> = Api::all(admin.clone());
    let params = PatchParams::default();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };

    // The policy takes effect within moments: wait until a GPU-advertising registration is refused.
    let probe = instance();
    let probe_nodes = node_api(&testbed, &probe).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let gpus = json!({ "cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "8" });
    while probe_nodes
        .create(
            &dry,
            &registering(&probe, pool_labels(GPU_POOL), gpus.clone()),
        )
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the policy never took effect");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A CPU node registers as a real kubelet does, and Karpenter registers it.
    let cpu = instance();
    let cpu_nodes = node_api(&testbed, &cpu).await;
    admitted(
        "a CPU node registers with its pool's labels",
        cpu_nodes
            .create(
                &PostParams::default(),
                &registering(&cpu, pool_labels(CPU_POOL), plain_capacity()),
            )
            .await,
    );
    admitted(
        "Karpenter registers the CPU node",
        nodes_admin
            .patch(&cpu, &params, &merge(karpenter_registers(CPU_POOL)))
            .await,
    );

    // 1. The compromised CPU node relabels itself into the GPU pool, one way after another.
    for (what, labels) in [
        (
            "move itself into the GPU pool (karpenter.sh/nodepool)",
            json!({ "karpenter.sh/nodepool": GPU_POOL }),
        ),
        (
            "label itself an accelerator node (node.accelerator)",
            json!({ "node.accelerator": "nvidia-gpu" }),
        ),
        (
            "take the GPU pool's workload label (gpu.workload)",
            json!({ "gpu.workload": "inference" }),
        ),
        (
            "change its capacity type to on-demand",
            json!({ "karpenter.sh/capacity-type": "on-demand" }),
        ),
        (
            "claim another instance type",
            json!({ "node.kubernetes.io/instance-type": "p5.48xlarge" }),
        ),
        (
            "drop its pool label (to look like a node of no pool)",
            json!({ "karpenter.sh/nodepool": null }),
        ),
        (
            "claim a GPU count (karpenter.k8s.aws/instance-gpu-count)",
            json!({ "karpenter.k8s.aws/instance-gpu-count": "8" }),
        ),
    ] {
        refused(
            what,
            cpu_nodes
                .patch(
                    &cpu,
                    &params,
                    &merge(json!({ "metadata": { "labels": labels } })),
                )
                .await,
        );
    }
    // The same through the status subresource, which carries metadata too.
    refused(
        "move into the GPU pool through nodes/status",
        cpu_nodes
            .patch_status(
                &cpu,
                &params,
                &merge(json!({ "metadata": { "labels": { "karpenter.sh/nodepool": GPU_POOL } } })),
            )
            .await,
    );

    // 2. It advertises GPUs (or Neuron devices) it does not have.
    for (what, status) in [
        (
            "advertise 8 nvidia.com/gpu",
            json!({ "capacity": { "nvidia.com/gpu": "8" }, "allocatable": { "nvidia.com/gpu": "8" } }),
        ),
        (
            "advertise allocatable GPUs only (the scheduler reads allocatable)",
            json!({ "allocatable": { "nvidia.com/gpu": "8" } }),
        ),
        (
            "advertise a MIG slice",
            json!({ "capacity": { "nvidia.com/mig-1g.10gb": "7" } }),
        ),
        (
            "advertise Neuron cores",
            json!({ "allocatable": { "aws.amazon.com/neuroncore": "32" } }),
        ),
    ] {
        refused(
            what,
            cpu_nodes
                .patch_status(&cpu, &params, &merge(json!({ "status": status })))
                .await,
        );
    }
    let stored = nodes_admin.get(&cpu).await.unwrap();
    let labels = stored.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("karpenter.sh/nodepool").map(String::as_str),
        Some(CPU_POOL)
    );
    assert!(!labels.contains_key("node.accelerator"));
    let capacity = stored.status.and_then(|s| s.capacity).unwrap_or_default();
    assert!(!capacity.contains_key("nvidia.com/gpu"), "{capacity:?}");

    // What its kubelet really does goes through: a heartbeat, a zero GPU count (a device plugin
    // that finds none), a label of its own outside the pool's.
    admitted(
        "heartbeat",
        cpu_nodes
            .patch_status(
                &cpu,
                &params,
                &merge(json!({ "status": { "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }] } })),
            )
            .await,
    );
    admitted(
        "zero GPUs",
        cpu_nodes
            .patch_status(
                &cpu,
                &params,
                &merge(json!({ "status": { "capacity": { "nvidia.com/gpu": "0" } } })),
            )
            .await,
    );
    admitted(
        "a label outside the pool's",
        cpu_nodes
            .patch(
                &cpu,
                &params,
                &merge(json!({ "metadata": { "labels": { "example.com/rack": "r7" } } })),
            )
            .await,
    );

    // 3. A node registers with labels its pool does not give.
    let rogue = instance();
    let rogue_nodes = node_api(&testbed, &rogue).await;
    let mut lying = pool_labels(CPU_POOL);
    lying["node.accelerator"] = json!("nvidia-gpu");
    refused(
        "register in the CPU pool with the accelerator label",
        rogue_nodes
            .create(&dry, &registering(&rogue, lying, plain_capacity()))
            .await,
    );
    refused(
        "register with GPUs before Karpenter registers it",
        rogue_nodes
            .create(
                &dry,
                &registering(&rogue, pool_labels(CPU_POOL), gpus.clone()),
            )
            .await,
    );
    // Claiming a pool that is not ours passes registration; Karpenter's own registration update,
    // which writes the claim's pool, is then refused: the node stays tainted until Karpenter
    // gives up on its claim.
    let mut elsewhere = pool_labels(GPU_POOL);
    elsewhere["karpenter.sh/nodepool"] = json!("not-ours");
    admitted(
        "register claiming a pool that is not ours",
        rogue_nodes
            .create(
                &PostParams::default(),
                &registering(&rogue, elsewhere, plain_capacity()),
            )
            .await,
    );
    refused(
        "Karpenter registers it into the CPU pool, GPU labels and all",
        nodes_admin
            .patch(&rogue, &params, &merge(karpenter_registers(CPU_POOL)))
            .await,
    );

    // 4. A GPU node: no GPUs while unregistered, its GPUs once Karpenter has registered it.
    let gpu = instance();
    let gpu_nodes = node_api(&testbed, &gpu).await;
    admitted(
        "a GPU node registers",
        gpu_nodes
            .create(
                &PostParams::default(),
                &registering(&gpu, pool_labels(GPU_POOL), plain_capacity()),
            )
            .await,
    );
    let one_gpu = merge(json!({ "status": {
        "capacity": { "nvidia.com/gpu": "1" }, "allocatable": { "nvidia.com/gpu": "1" },
    } }));
    refused(
        "advertise GPUs before Karpenter registers it",
        gpu_nodes.patch_status(&gpu, &params, &one_gpu).await,
    );
    admitted(
        "Karpenter registers the GPU node",
        nodes_admin
            .patch(&gpu, &params, &merge(karpenter_registers(GPU_POOL)))
            .await,
    );
    admitted(
        "a registered GPU node advertises its GPU",
        gpu_nodes.patch_status(&gpu, &params, &one_gpu).await,
    );

    // 5. A node from before the policy that already advertises a GPU keeps it (its heartbeats
    // carry it) but cannot raise it.
    let old = instance();
    let mut before: Node = registering(&old, pool_labels(CPU_POOL), gpus.clone());
    before.spec.as_mut().unwrap().taints = None;
    let old_nodes = node_api(&testbed, &old).await;
    admitted(
        "an older node, made by an admin",
        nodes_admin.create(&PostParams::default(), &before).await,
    );
    admitted(
        "its heartbeat with the GPUs it had",
        old_nodes
            .patch_status(
                &old,
                &params,
                &merge(json!({ "status": { "capacity": { "nvidia.com/gpu": "8" } } })),
            )
            .await,
    );
    refused(
        "raise them",
        old_nodes
            .patch_status(
                &old,
                &params,
                &merge(json!({ "status": { "capacity": { "nvidia.com/gpu": "16" } } })),
            )
            .await,
    );

    // A Kubean-built node (named after its DNS name) is not the policy's.
    let kubean = "ip-10-0-1-6.ec2.internal";
    let kubean_nodes = node_api(&testbed, kubean).await;
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": kubean, "labels": { "node.accelerator": "nvidia-gpu" } },
        "status": { "capacity": { "nvidia.com/gpu": "4" } },
    }))
    .unwrap();
    admitted(
        "a Kubean node registers as before",
        kubean_nodes.create(&dry, &node).await,
    );

    for name in [&cpu, &rogue, &gpu, &old] {
        let _ = nodes_admin.delete(name, &DeleteParams::default()).await;
    }
    delete_admission_policies(&admin, &objects).await;
}
