//! GPU nodes: `nvidia.com/gpu` advertised and the device plugin running on each.

use super::age;
use super::check;
use super::created;
use super::gpus;
use super::name_of;
use super::node_taints;
use super::pool_of;
use super::secs;
use crate::doctor::Check;
use crate::doctor::Facts;
use crate::doctor::Status;
use crate::doctor::gather::Snapshot;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::Pod;

fn gpu_nodes<'a>(s: &'a Snapshot, f: &Facts) -> Vec<&'a Node> {
    s.nodes
        .as_ref()
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| {
                    pool_of(n.metadata.labels.as_ref())
                        .is_some_and(|p| f.gpu_pools.iter().any(|g| g == p))
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn gpu_advertised(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "gpu-advertised",
        "every GPU-pool Node advertises nvidia.com/gpu — checklist: kubectl describe <gpu-node> | grep nvidia.com/gpu",
    );
    if f.gpu_pools.is_empty() {
        return c.skip("the spec has no GPU pool");
    }
    let nodes = gpu_nodes(s, f);
    for n in &nodes {
        let a = age(s.now, created(&n.metadata));
        if gpus(n).is_none() {
            c.worse(
                if a > f.grace { Status::Fail } else { Status::Warn },
                format!(
                    "Node {} ({} old): status.allocatable has no nvidia.com/gpu",
                    name_of(&n.metadata),
                    secs(a)
                ),
                "the device plugin must run on the node (device-plugin-on-gpu-nodes) and containerd must use the NVIDIA runtime (the GPU userData checks it at boot)",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{} GPU Node(s) advertise nvidia.com/gpu",
            nodes.len()
        ));
    }
    c
}

fn is_plugin(p: &Pod) -> bool {
    p.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("nvidia-device-plugin"))
}

pub(super) fn device_plugin(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "device-plugin-on-gpu-nodes",
        "the NVIDIA device plugin runs on every GPU-pool Node",
    );
    if f.gpu_pools.is_empty() {
        return c.skip("the spec has no GPU pool");
    }
    let Ok(pods) = &s.pods else {
        return c.skip("Pods could not be listed");
    };
    let nodes = gpu_nodes(s, f);
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let plugin = pods.iter().find(|p| {
            is_plugin(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)
        });
        let running = plugin
            .is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if !running {
            let a = age(s.now, created(&n.metadata));
            c.worse(
                if a > f.grace { Status::Fail } else { Status::Warn },
                match plugin {
                    None => format!(
                        "Node {name} (taints {:?}): no nvidia-device-plugin pod on it",
                        node_taints(n)
                    ),
                    Some(p) => format!(
                        "Node {name}: pod {} is {}",
                        name_of(&p.metadata),
                        p.status
                            .as_ref()
                            .and_then(|s| s.phase.clone())
                            .unwrap_or_default()
                    ),
                },
                "the DaemonSet must tolerate exactly the GPU pools' taints: apply gpu/nvidia-device-plugin.yaml as rendered (a hand-edited toleration list is the usual cause)",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "a Running device-plugin pod on each of {} GPU Node(s)",
            nodes.len()
        ));
    }
    c
}
