//! `gpu.stack: operator`: the NVIDIA GPU Operator's Helm values instead of the bare device
//! plugin, its namespace, and the device plugin configs it picks per node.
//!
//! Values keys as NVIDIA/gpu-operator `deployments/gpu-operator/values.yaml` and
//! `templates/clusterpolicy.yaml` define them, the same in every release the versions table
//! lists (v25.10.1, v26.3.3, v26.7.0):
//! - `driver` and `toolkit` off: the GPU AMIs bake the driver and the NVIDIA container runtime
//!   in (the userData checks both and makes `nvidia` containerd's runtime before joining);
//! - `devicePlugin`, `gfd` (GPU feature discovery) and `dcgmExporter` on (its ServiceMonitor
//!   only under `monitoring.prometheusOperator`); `migManager` off: the
//!   spec configures no MIG, and a MIG manager would repartition p4d/p5 GPUs behind it;
//! - `daemonsets.tolerations`: the operator replaces every operand DaemonSet's tolerations
//!   with this list, so they tolerate exactly the GPU pools' taints, as our device plugin does;
//! - node selection: the operands run where the operator set `nvidia.com/gpu.present`, which
//!   it derives from node-feature-discovery's NVIDIA PCI labels. NFD's worker selects our GPU
//!   label (`node.accelerator: nvidia-gpu`) and tolerates the same taints, so the operands land
//!   on exactly the nodes our device plugin DaemonSet would.
//!
//! Time-slicing: one ConfigMap (ours, in `gpu/`, so lint sees it) with one device plugin
//! config per replica count the pools ask for and a plain default; each time-sliced pool's
//! NodePool carries `nvidia.com/device-plugin.config: <key>`, which the operator's config
//! manager reads on the node. Pools may so time-slice differently.

use std::collections::BTreeSet;

use kk_karpenter::labels::NVIDIA_DEVICE_PLUGIN_CONFIG;
use kk_spec::{ClusterSpec, ElasticCluster, GpuSoftware, Pool, PoolType, versions};
use serde_json::{Map, Value, json};

use crate::gpu::{gpu_pools, gpu_tolerations};
use crate::names::{ACCELERATOR_LABEL, MANAGED_BY};
use crate::{Bundle, HelmRelease, RenderError};

/// The operator's release namespace (NVIDIA's documented default).
pub const NAMESPACE: &str = "gpu-operator";
/// The device plugin DaemonSet the operator creates in [`NAMESPACE`].
pub const DEVICE_PLUGIN_DAEMONSET: &str = "nvidia-device-plugin-daemonset";
const CONFIG_MAP: &str = "nvidia-device-plugin-configs";
/// The config of nodes without the label: no sharing.
const DEFAULT_CONFIG: &str = "no-sharing";

/// The data key of the config time-slicing each GPU `replicas` ways.
fn config_key(replicas: i64) -> String {
    format!("time-slicing-{replicas}")
}

fn sharing(pool: &Pool) -> Option<i64> {
    pool.gpu
        .as_ref()
        .filter(|_| pool.pool_type == PoolType::Gpu)
        .map(|g| g.sharing_replicas)
        .filter(|&r| r > 1)
}

fn is_operator(spec: &ClusterSpec) -> bool {
    spec.gpu
        .as_ref()
        .is_some_and(|g| g.stack == GpuSoftware::Operator)
}

/// The NodePool template label picking a time-sliced pool's config, under the operator only.
pub fn config_label(spec: &ClusterSpec, pool: &Pool) -> Option<(String, String)> {
    let replicas = sharing(pool).filter(|_| is_operator(spec))?;
    Some((NVIDIA_DEVICE_PLUGIN_CONFIG.to_owned(), config_key(replicas)))
}

/// The operator's namespace; privileged, as its operands (host paths, device access) need.
/// No managed-by label: pruning our objects must never delete the namespace the chart is in.
fn namespace() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": { "pod-security.kubernetes.io/enforce": "privileged" },
        },
    })
}

/// The device plugin configs, one per replica count asked for, when any pool time-slices.
fn config_map(spec: &ClusterSpec) -> Option<Value> {
    let counts: BTreeSet<i64> = gpu_pools(spec).into_iter().filter_map(sharing).collect();
    if counts.is_empty() {
        return None;
    }
    let mut data = Map::new();
    data.insert(DEFAULT_CONFIG.into(), json!("version: v1\n"));
    for replicas in counts {
        data.insert(
            config_key(replicas),
            json!(format!(
                "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
            )),
        );
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": CONFIG_MAP, "namespace": NAMESPACE, "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
        "data": data,
    }))
}

/// The DCGM exporter's ServiceMonitor where the spec says the Prometheus Operator runs, with the
/// labels its Prometheus selects monitors by; off elsewhere (v26.7.0 turned it on by default,
/// and a cluster without the CRD would only log that it skipped it).
fn dcgm_service_monitor(spec: &ClusterSpec) -> Value {
    match spec.monitoring.as_ref().filter(|m| m.prometheus_operator) {
        Some(monitoring) => json!({ "enabled": true, "additionalLabels": monitoring.labels }),
        None => json!({ "enabled": false }),
    }
}

fn values(spec: &ClusterSpec, shared: bool) -> Value {
    let tolerations = gpu_tolerations(spec);
    let mut device_plugin = json!({ "enabled": true });
    if shared {
        device_plugin["config"] =
            json!({ "create": false, "name": CONFIG_MAP, "default": DEFAULT_CONFIG });
    }
    let mut values = json!({
        "driver": { "enabled": false },
        "toolkit": { "enabled": false },
        "devicePlugin": device_plugin,
        "gfd": { "enabled": true },
        "dcgmExporter": { "enabled": true, "serviceMonitor": dcgm_service_monitor(spec) },
        "migManager": { "enabled": false },
        "daemonsets": { "tolerations": tolerations },
        "node-feature-discovery": {
            "worker": {
                "nodeSelector": { ACCELERATOR_LABEL.0: ACCELERATOR_LABEL.1 },
                "tolerations": tolerations,
            },
        },
    });
    crate::helm::image_overrides(spec, versions::GPU_OPERATOR, &mut values);
    values
}

/// The operator's Helm release (step 7): `gpu.operatorVersion`, else the table's chart
/// version, in its own namespace, which `namespaces/` creates.
fn release(version: &str) -> HelmRelease {
    let chart = versions::component(versions::GPU_OPERATOR).chart.as_ref();
    HelmRelease {
        name: "gpu-operator".into(),
        namespace: NAMESPACE.into(),
        chart: chart.map_or("gpu-operator", |c| c.name.as_str()).into(),
        repo: chart.map(|c| c.repository.clone()),
        version: version.into(),
        values_file: crate::helm::GPU_OPERATOR_VALUES.into(),
        create_namespace: false,
    }
}

/// The operator's namespace, its Helm release and the device plugin configs; nothing without
/// a GPU pool.
pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let spec = &cluster.spec;
    if gpu_pools(spec).is_empty() {
        return Ok(());
    }
    bundle.add_yaml(&format!("namespaces/{NAMESPACE}.yaml"), &[namespace()])?;
    let config = config_map(spec);
    if let Some(config) = &config {
        bundle.add_yaml(
            "gpu/gpu-operator-device-plugin-configs.yaml",
            std::slice::from_ref(config),
        )?;
    }
    let version = kk_spec::images::chart_release(spec, versions::GPU_OPERATOR);
    bundle.add_release(release(version), values(spec, config.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(stack: &str) -> ClusterSpec {
        let text = kk_spec::EXAMPLE.replace(
            "devicePluginVersion: v0.20.0",
            &format!("devicePluginVersion: v0.20.0\n    stack: {stack}"),
        );
        kk_spec::parse_spec(&text, "example.yaml")
            .expect("example parses")
            .spec
            .spec
    }

    #[test]
    fn only_time_sliced_pools_under_the_operator_get_a_config_label() {
        for (stack, labelled) in [("operator", true), ("device-plugin", false)] {
            let mut spec = spec(stack);
            let gpu = spec.pools.iter_mut().find(|p| p.gpu.is_some()).unwrap();
            gpu.gpu.as_mut().unwrap().sharing_replicas = 3;
            let pool = gpu.clone();
            assert_eq!(
                config_label(&spec, &pool),
                labelled.then(|| (
                    NVIDIA_DEVICE_PLUGIN_CONFIG.to_owned(),
                    "time-slicing-3".to_owned()
                )),
                "{stack}"
            );
            let unshared = spec
                .pools
                .iter()
                .find(|p| p.gpu.is_some() && p.name != pool.name);
            if let Some(unshared) =
                unshared.filter(|p| p.gpu.as_ref().unwrap().sharing_replicas == 1)
            {
                assert_eq!(config_label(&spec, unshared), None);
            }
        }
    }

    #[test]
    fn without_sharing_no_config_map_and_no_config_in_the_values() {
        let spec = spec("operator");
        assert!(config_map(&spec).is_none());
        let v = values(&spec, false);
        assert!(v["devicePlugin"].get("config").is_none());
        assert_eq!(v["driver"]["enabled"], false);
        assert_eq!(v["toolkit"]["enabled"], false);
        assert_eq!(
            v["daemonsets"]["tolerations"],
            v["node-feature-discovery"]["worker"]["tolerations"]
        );
    }

    #[test]
    fn a_mirror_and_an_override_reach_the_operator_values_in_the_form_its_chart_reads() {
        let mut spec = spec("operator");
        // Without a mirror or an override the chart's own defaults stay.
        assert!(
            values(&spec, false)["devicePlugin"]
                .get("repository")
                .is_none()
        );
        spec.registry = Some(kk_spec::Registry {
            mirror: "mirror.local:5000".into(),
            files_repo: None,
        });
        let digest = format!("sha256:{}", "a".repeat(64));
        spec.images.insert(
            "nvidia-gpu-operator/dcgm-exporter".into(),
            kk_spec::ImageOverride {
                digest: Some(digest.clone()),
                ..Default::default()
            },
        );
        let v = values(&spec, false);
        // The operator joins repository/image:version.
        assert_eq!(v["devicePlugin"]["repository"], "mirror.local:5000/nvidia");
        assert_eq!(v["devicePlugin"]["image"], "k8s-device-plugin");
        assert_eq!(v["devicePlugin"]["version"], "v0.20.0");
        assert_eq!(v["devicePlugin"]["enabled"], true);
        // v26.x has no CUDA init container; v25.10.1 pulled one, and a pin brings it back.
        assert!(v["operator"].get("initContainer").is_none());
        assert_eq!(
            v["dcgmExporter"]["version"],
            format!("4.6.0-4.8.3-distroless@{digest}")
        );
        // Node Feature Discovery's subchart reads repository:tag.
        assert_eq!(
            v["node-feature-discovery"]["image"]["repository"],
            "mirror.local:5000/nfd/node-feature-discovery"
        );
        assert_eq!(v["node-feature-discovery"]["image"]["tag"], "v0.19.0");
        assert!(
            v["node-feature-discovery"]["worker"]
                .get("nodeSelector")
                .is_some()
        );
        spec.gpu.as_mut().unwrap().operator_version = Some("v25.10.1".into());
        let v = values(&spec, false);
        assert_eq!(v["devicePlugin"]["version"], "v0.18.1");
        assert_eq!(v["operator"]["initContainer"]["image"], "cuda");
        assert_eq!(v["node-feature-discovery"]["image"]["tag"], "v0.18.2");
    }

    #[test]
    fn the_dcgm_service_monitor_follows_the_prometheus_operator() {
        let mut spec = spec("operator");
        assert_eq!(
            values(&spec, false)["dcgmExporter"]["serviceMonitor"],
            json!({"enabled": false})
        );
        spec.monitoring = Some(kk_spec::Monitoring {
            prometheus_operator: true,
            labels: [("release".to_owned(), "kps".to_owned())].into(),
            gpu_initialized_within_minutes: 15,
        });
        assert_eq!(
            values(&spec, false)["dcgmExporter"]["serviceMonitor"],
            json!({"enabled": true, "additionalLabels": {"release": "kps"}})
        );
    }
}
