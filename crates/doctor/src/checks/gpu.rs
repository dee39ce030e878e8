//! GPU nodes: `nvidia.com/gpu` advertised and the device plugin running on each, and — before
//! any exists — a device plugin that will run on each GPU pool's next node.

use super::age;
use super::check;
use super::created;
use super::gpu_plugin::{
    is_device_plugin, is_device_plugin_pod, is_nfd_worker, operator_set_labels,
};
use super::gpus;
use super::name_of;
use super::node_taints;
use super::pool_of;
use super::secs;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kk_karpenter::taint::{Effect, Taint};
use kk_spec::GpuSoftware;
use kube_core::DynamicObject;

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
            is_device_plugin_pod(p)
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)
        });
        let running = plugin
            .is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if !running {
            let a = age(s.now, created(&n.metadata));
            c.worse(
                if a > f.grace { Status::Fail } else { Status::Warn },
                match plugin {
                    None => format!(
                        "Node {name} (taints {:?}): no NVIDIA device plugin pod on it",
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
                match f.gpu_stack {
                    GpuSoftware::DevicePlugin => "the DaemonSet must tolerate exactly the GPU pools' taints: apply gpu/nvidia-device-plugin.yaml as rendered (a hand-edited toleration list is the usual cause)",
                    GpuSoftware::Operator => "the GPU Operator's daemonsets must tolerate exactly the GPU pools' taints and node-feature-discovery must label the node (nvidia.com/gpu.present): install the chart with gpu/gpu-operator-values.yaml as rendered (a hand-edited toleration list is the usual cause)",
                },
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

/// A NodePool's hard taints (what a pod must tolerate to run on its nodes from the start).
fn pool_taints(pool: &DynamicObject) -> Vec<Taint> {
    pool.data["spec"]["template"]["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t["key"].as_str()?.to_owned(),
                value: t["value"].as_str().unwrap_or_default().to_owned(),
                effect: Effect::parse(t["effect"].as_str()?).ok()?,
            })
        })
        .filter(Taint::is_hard)
        .collect()
}

/// The labels every node of a NodePool carries: its template labels and each requirement
/// `In` a single value.
fn pool_node_labels(pool: &DynamicObject) -> BTreeMap<String, String> {
    let template = &pool.data["spec"]["template"];
    let mut labels: BTreeMap<String, String> = template["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    for r in template["spec"]["requirements"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let values = r["values"].as_array();
        if r["operator"] == "In"
            && let (Some(key), Some([one])) = (r["key"].as_str(), values.map(Vec::as_slice))
            && let Some(one) = one.as_str()
        {
            labels.insert(key.to_owned(), one.to_owned());
        }
    }
    labels
}

/// Why `d`'s pods would not run on a node of the pool (`None`: they would).
fn refuses(d: &DaemonSet, taints: &[Taint], labels: &BTreeMap<String, String>) -> Option<String> {
    use super::placement::Refusal;
    let refusal = super::placement::refuses(
        d.spec.as_ref()?.template.spec.as_ref()?,
        taints,
        labels,
        super::placement::Labels::Some,
    )?;
    Some(match refusal {
        Refusal::Unselected(unmatched) => format!(
            "selects {} and the pool's nodes are not labelled so",
            unmatched.join(", ")
        ),
        other => other.to_string(),
    })
}

/// Why the device plugin `d` would not run on a pool's node (`None`: it would). The GPU
/// Operator's plugin selects labels the operator sets once node-feature-discovery's worker has
/// labelled the node, so for it those labels count as there when such a worker runs there.
fn plugin_refuses(
    d: &DaemonSet,
    all: &[DaemonSet],
    taints: &[Taint],
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    let set_later = operator_set_labels(d);
    if set_later.is_empty() {
        return refuses(d, taints, labels);
    }
    let mut later = labels.clone();
    later.extend(set_later);
    if let Some(why) = refuses(d, taints, &later) {
        return Some(why);
    }
    let mut workers_why = Vec::new();
    for w in all.iter().filter(|w| is_nfd_worker(w)) {
        match refuses(w, taints, labels) {
            None => return None,
            Some(why) => workers_why.push(format!("{} {why}", name_of(&w.metadata))),
        }
    }
    Some(if workers_why.is_empty() {
        "selects labels the GPU Operator sets after node-feature-discovery labels the node, and no node-feature-discovery worker DaemonSet is in the cluster".to_owned()
    } else {
        format!(
            "selects labels the GPU Operator sets after node-feature-discovery labels the node, and its worker would not run there: {}",
            workers_why.join("; ")
        )
    })
}

/// Before any GPU node exists: will the next one a GPU pool launches get a device plugin? A
/// node without one never advertises `nvidia.com/gpu`, never initializes, and is billed until
/// Karpenter gives up on it.
pub(super) fn device_plugin_for_pools(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "device-plugin-for-gpu-pools",
        "each GPU pool's next node gets a device plugin: a DaemonSet that tolerates the pool's taints and selects its nodes",
    );
    if f.gpu_pools.is_empty() {
        return c.skip("the spec has no GPU pool");
    }
    let Ok(daemonsets) = &s.daemonsets else {
        return c.skip("DaemonSets could not be listed");
    };
    let Ok(pools) = &s.nodepools else {
        return c.skip("NodePools could not be listed");
    };
    let plugins: Vec<&DaemonSet> = daemonsets.iter().filter(|d| is_device_plugin(d)).collect();
    let fix = match f.gpu_stack {
        GpuSoftware::DevicePlugin => {
            "apply gpu/nvidia-device-plugin.yaml as rendered (it tolerates exactly the GPU pools' taints and selects node.accelerator=nvidia-gpu), or install the GPU Operator with those tolerations; until then every GPU node Karpenter launches is billed and never initializes"
        }
        GpuSoftware::Operator => {
            "install the GPU Operator chart with gpu/gpu-operator-values.yaml as rendered (ORDER.md step 7: its daemonsets tolerate exactly the GPU pools' taints); until then every GPU node Karpenter launches is billed and never initializes"
        }
    };
    for name in &f.gpu_pools {
        let Some(pool) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
        else {
            continue; // nodepools-present reports a missing pool
        };
        let (taints, labels) = (pool_taints(pool), pool_node_labels(pool));
        let mut why = Vec::new();
        let mut fits = None;
        for d in &plugins {
            match plugin_refuses(d, daemonsets, &taints, &labels) {
                None => {
                    fits = Some(name_of(&d.metadata));
                    break;
                }
                Some(w) => why.push(format!("DaemonSet {} {w}", name_of(&d.metadata))),
            }
        }
        match fits {
            Some(d) => c = c.saw(format!("NodePool {name}: DaemonSet {d} runs on its nodes")),
            None if plugins.is_empty() => c.worse(
                Status::Fail,
                format!("NodePool {name}: no device-plugin DaemonSet in the cluster"),
                fix,
            ),
            None => c.worse(
                Status::Fail,
                format!(
                    "NodePool {name}: no device plugin would run on its nodes: {}",
                    why.join("; ")
                ),
                fix,
            ),
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {"template": {
                "metadata": {"labels": {"node.accelerator": "nvidia-gpu"}},
                "spec": {
                    "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"},
                               {"key": "soft", "effect": "PreferNoSchedule"}],
                    "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g6"]},
                                     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
                }}}
        }))
        .unwrap()
    }

    fn plugin(tolerations: serde_json::Value, selector: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "nvidia-device-plugin", "namespace": "kube-system"},
            "spec": {"selector": {}, "template": {"spec": {
                "tolerations": tolerations, "nodeSelector": selector,
                "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_pools_nodes_carry_its_template_labels_and_single_valued_requirements() {
        let labels = pool_node_labels(&pool());
        assert_eq!(labels["node.accelerator"], "nvidia-gpu");
        assert_eq!(labels["karpenter.k8s.aws/instance-family"], "g6");
        assert!(
            !labels.contains_key("karpenter.sh/capacity-type"),
            "two values: not a label it surely has"
        );
        let taints = pool_taints(&pool());
        assert_eq!(taints.len(), 1, "PreferNoSchedule keeps nothing off");
    }

    #[test]
    fn the_rendered_plugin_runs_and_a_mismatch_says_why() {
        let (taints, labels) = (pool_taints(&pool()), pool_node_labels(&pool()));
        let good = plugin(
            json!([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
            json!({"node.accelerator": "nvidia-gpu"}),
        );
        assert!(is_device_plugin(&good));
        assert_eq!(refuses(&good, &taints, &labels), None);
        let wrong_taint = plugin(
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
            json!({"node.accelerator": "nvidia-gpu"}),
        );
        assert_eq!(
            refuses(&wrong_taint, &taints, &labels).as_deref(),
            Some("does not tolerate gpu=true:NoSchedule")
        );
        let wrong_label = plugin(
            json!([{"operator": "Exists"}]),
            json!({"nvidia.com/gpu.present": "true"}),
        );
        assert!(
            refuses(&wrong_label, &taints, &labels)
                .unwrap()
                .contains("selects nvidia.com/gpu.present=true")
        );
    }

    fn operator_daemonset(
        name: &str,
        image: &str,
        tolerations: serde_json::Value,
        selector: serde_json::Value,
    ) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "gpu-operator"},
            "spec": {"selector": {}, "template": {"spec": {
                "tolerations": tolerations, "nodeSelector": selector,
                "containers": [{"name": "c", "image": image}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_operators_plugin_runs_where_its_nfd_worker_does() {
        let (taints, labels) = (pool_taints(&pool()), pool_node_labels(&pool()));
        let tolerates =
            json!([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
        let plugin = operator_daemonset(
            "nvidia-device-plugin-daemonset",
            "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
            tolerates.clone(),
            json!({"nvidia.com/gpu.deploy.device-plugin": "true"}),
        );
        assert!(is_device_plugin(&plugin));
        let worker = |tolerations: serde_json::Value| {
            operator_daemonset(
                "gpu-operator-node-feature-discovery-worker",
                "registry.k8s.io/nfd/node-feature-discovery:v0.18.2",
                tolerations,
                json!({"node.accelerator": "nvidia-gpu"}),
            )
        };
        let good = [plugin.clone(), worker(tolerates.clone())];
        assert_eq!(plugin_refuses(&plugin, &good, &taints, &labels), None);
        let untolerated = [plugin.clone(), worker(json!([]))];
        let why = plugin_refuses(&plugin, &untolerated, &taints, &labels).unwrap();
        assert!(why.contains("its worker would not run there"), "{why}");
        assert!(
            why.contains("does not tolerate gpu=true:NoSchedule"),
            "{why}"
        );
        let alone = [plugin.clone()];
        assert!(
            plugin_refuses(&plugin, &alone, &taints, &labels)
                .unwrap()
                .contains("no node-feature-discovery worker")
        );
        // The operator's labels stand in only for themselves: a plugin that does not tolerate
        // the pool is still refused, worker or not.
        let intolerant = operator_daemonset(
            "nvidia-device-plugin-daemonset",
            "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
            json!([]),
            json!({"nvidia.com/gpu.deploy.device-plugin": "true"}),
        );
        assert_eq!(
            plugin_refuses(&intolerant, &good, &taints, &labels).as_deref(),
            Some("does not tolerate gpu=true:NoSchedule")
        );
    }
}
