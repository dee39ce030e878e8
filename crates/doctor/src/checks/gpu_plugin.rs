//! Which DaemonSets and pods are an NVIDIA device plugin, by what they are rather than by our
//! name: ours (`kube-system/nvidia-device-plugin`, `gpu.stack: device-plugin`), the GPU
//! Operator's (`gpu-operator/nvidia-device-plugin-daemonset`, `gpu.stack: operator`) or a
//! hand-made one.
//!
//! A device plugin is a container of NVIDIA's `k8s-device-plugin` image (any registry or
//! mirror, any tag; not `aws-efa-k8s-device-plugin`) that mounts the kubelet's device-plugins
//! directory, where it registers `nvidia.com/gpu`. The same image also runs GPU feature
//! discovery and the operator's MPS control daemon, which mount no such directory and
//! advertise nothing. The two DaemonSet names we render or install count as well, so a
//! plugin whose image was renamed is still found.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

const IMAGE: &str = "k8s-device-plugin";
const KUBELET_DEVICE_PLUGINS: &str = "/var/lib/kubelet/device-plugins";

/// The DaemonSet names that are a device plugin whatever their image.
fn known_names() -> [&'static str; 2] {
    [
        kk_render::gpu::NAME,
        kk_render::gpu_operator::DEVICE_PLUGIN_DAEMONSET,
    ]
}

/// `nvcr.io/nvidia/k8s-device-plugin:v0.18.1@sha256:…` → `k8s-device-plugin`.
fn image_name(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split(':').next().unwrap_or(last)
}

fn runs_device_plugin(spec: &PodSpec) -> bool {
    let plugin_dirs: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| {
            v.host_path
                .as_ref()
                .is_some_and(|h| h.path.trim_end_matches('/') == KUBELET_DEVICE_PLUGINS)
        })
        .map(|v| v.name.as_str())
        .collect();
    spec.containers.iter().any(|c| {
        c.image.as_deref().is_some_and(|i| image_name(i) == IMAGE)
            && c.volume_mounts
                .iter()
                .flatten()
                .any(|m| plugin_dirs.contains(&m.name.as_str()))
    })
}

/// A DaemonSet that runs NVIDIA's device plugin.
pub(super) fn is_device_plugin(d: &DaemonSet) -> bool {
    let named = d
        .metadata
        .name
        .as_deref()
        .is_some_and(|n| known_names().contains(&n));
    named
        || d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(runs_device_plugin)
}

/// A pod of an NVIDIA device plugin (its own spec, or a DaemonSet owner of a known name).
pub(super) fn is_device_plugin_pod(p: &Pod) -> bool {
    let owned = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && known_names().contains(&o.name.as_str()));
    owned || p.spec.as_ref().is_some_and(runs_device_plugin)
}

/// The entries of `d`'s node selector that the GPU Operator sets on a node itself
/// (`nvidia.com/gpu.present`, `nvidia.com/gpu.deploy.<operand>`) once node-feature-discovery
/// has labelled its NVIDIA PCI device: no NodePool carries them, yet the node will.
pub(super) fn operator_set_labels(d: &DaemonSet) -> Vec<(String, String)> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.node_selector.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            k.as_str() == "nvidia.com/gpu.present" || k.starts_with("nvidia.com/gpu.deploy.")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// node-feature-discovery's worker DaemonSet (the GPU Operator's subchart, or a standalone
/// install): what labels a node's PCI devices, which the operator's labels follow from.
pub(super) fn is_nfd_worker(d: &DaemonSet) -> bool {
    let named = d
        .metadata
        .name
        .as_deref()
        .is_some_and(|n| n.ends_with("worker"));
    named
        && d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| {
                p.containers.iter().any(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|i| image_name(i) == "node-feature-discovery")
                })
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A pod spec with one container of `image`, mounting `path` when given.
    fn spec(image: &str, path: Option<&str>) -> Value {
        let mounts = path.map_or(json!([]), |_| json!([{"name": "dp", "mountPath": "/dp"}]));
        let volumes = path.map_or(
            json!([]),
            |p| json!([{"name": "dp", "hostPath": {"path": p}}]),
        );
        json!({"containers": [{"name": "c", "image": image, "volumeMounts": mounts}], "volumes": volumes})
    }

    fn daemonset(name: &str, namespace: &str, spec: Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {}, "template": {"spec": spec}}
        }))
        .unwrap()
    }

    fn pod(name: &str, owner: Option<&str>, spec: Value) -> Pod {
        let owners = owner.map_or(
            json!([]),
            |o| json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": o, "uid": "u"}]),
        );
        serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": owners}, "spec": spec}),
        )
        .unwrap()
    }

    const PLUGINS: &str = "/var/lib/kubelet/device-plugins";

    #[test]
    fn ours_and_the_operators_daemonsets_are_device_plugins() {
        let ours = daemonset(
            "nvidia-device-plugin",
            "kube-system",
            spec("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", Some(PLUGINS)),
        );
        let operators = daemonset(
            "nvidia-device-plugin-daemonset",
            "gpu-operator",
            spec("nvcr.io/nvidia/k8s-device-plugin:v0.18.1", Some(PLUGINS)),
        );
        assert!(is_device_plugin(&ours));
        assert!(is_device_plugin(&operators));
    }

    #[test]
    fn a_plugin_is_found_by_what_it_runs_under_any_name_or_mirror() {
        let mirrored = daemonset(
            "gpu-plugin",
            "infra",
            spec(
                "registry.corp/nvcr.io/nvidia/k8s-device-plugin:v0.17.4@sha256:abc",
                Some("/var/lib/kubelet/device-plugins/"),
            ),
        );
        assert!(is_device_plugin(&mirrored));
    }

    #[test]
    fn gfd_the_mps_daemon_and_the_efa_plugin_are_not_nvidia_device_plugins() {
        let gfd = daemonset(
            "gpu-feature-discovery",
            "gpu-operator",
            spec(
                "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
                Some("/etc/kubernetes/node-feature-discovery/features.d"),
            ),
        );
        let mps = daemonset(
            "nvidia-device-plugin-mps-control-daemon",
            "gpu-operator",
            spec(
                "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
                Some("/run/nvidia/mps"),
            ),
        );
        let efa = daemonset(
            "aws-efa-k8s-device-plugin",
            "kube-system",
            spec(
                "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20",
                Some(PLUGINS),
            ),
        );
        for d in [gfd, mps, efa] {
            assert!(!is_device_plugin(&d), "{:?}", d.metadata.name);
        }
    }

    #[test]
    fn the_operators_plugin_pods_count_and_its_other_operands_do_not() {
        let plugin = pod(
            "nvidia-device-plugin-daemonset-x7k2p",
            Some("nvidia-device-plugin-daemonset"),
            spec("nvcr.io/nvidia/k8s-device-plugin:v0.18.1", Some(PLUGINS)),
        );
        let mps = pod(
            "nvidia-device-plugin-mps-control-daemon-q9w8e",
            Some("nvidia-device-plugin-mps-control-daemon"),
            spec(
                "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
                Some("/run/nvidia/mps"),
            ),
        );
        let gfd = pod(
            "gpu-feature-discovery-m2v4z",
            Some("gpu-feature-discovery"),
            spec("nvcr.io/nvidia/k8s-device-plugin:v0.18.1", None),
        );
        let by_spec = pod(
            "hand-made-abcde",
            None,
            spec("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", Some(PLUGINS)),
        );
        assert!(is_device_plugin_pod(&plugin));
        assert!(is_device_plugin_pod(&by_spec));
        assert!(!is_device_plugin_pod(&mps));
        assert!(!is_device_plugin_pod(&gfd));
    }
}
