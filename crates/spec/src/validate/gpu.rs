//! `spec.gpu`: the NVIDIA stack GPU pools need.

use super::*;

pub(super) fn gpu_stack(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let has_gpu_pool = spec
        .pools
        .iter()
        .any(|pool| pool.pool_type == PoolType::Gpu);
    match &spec.gpu {
        None if has_gpu_pool => p.push((
            at.key("gpu"),
            "GPU pools need driverVersion, cudaVersion and devicePluginVersion".into(),
        )),
        Some(gpu) => {
            if gpu.stack == crate::GpuSoftware::Operator {
                operator_config_labels(p, at, spec);
            }
            let at = at.key("gpu");
            operator_version(p, &at, gpu);
            if !IMAGE_TAG.is_match(&gpu.device_plugin_version)
                || crate::versions::is_floating(&gpu.device_plugin_version)
            {
                p.push((
                    at.key("devicePluginVersion"),
                    "must be an image tag like v0.20.0 (`kubean-karpenter versions` lists the known releases)".into(),
                ));
            }
            for (field, value) in [
                ("driverVersion", &gpu.driver_version),
                ("cudaVersion", &gpu.cuda_version),
            ] {
                if value.is_empty() || !value.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    p.push((
                        at.key(field),
                        format!("{value:?} is not a version like 12.4"),
                    ));
                }
            }
        }
        None => {}
    }
}

/// A pinned GPU Operator release must be one the versions table describes (its values keys
/// and images are what render writes), and only means something under the operator.
fn operator_version(p: &mut Problems, at: &FieldPath, gpu: &crate::GpuStack) {
    let Some(version) = &gpu.operator_version else {
        return;
    };
    let at = at.key("operatorVersion");
    if gpu.stack != crate::GpuSoftware::Operator {
        p.push((
            at,
            "only read under stack: operator; set the stack or drop the field".into(),
        ));
        return;
    }
    let operator = crate::versions::component(crate::versions::GPU_OPERATOR);
    if operator.release(version).is_none() {
        p.push((
            at,
            format!(
                "{version:?} is not a GPU Operator release render knows the values of ({}); \
                 `kubean-karpenter versions` lists them",
                operator.known()
            ),
        ));
    }
}

/// Under the GPU Operator render labels a time-sliced pool with the device plugin config it
/// runs; a pool setting that label itself would have its choice silently replaced.
fn operator_config_labels(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let key = kk_karpenter::labels::NVIDIA_DEVICE_PLUGIN_CONFIG;
    for (i, pool) in spec.pools.iter().enumerate() {
        let shares = pool.gpu.as_ref().is_some_and(|g| g.sharing_replicas > 1);
        if pool.pool_type == PoolType::Gpu && shares && pool.labels.contains_key(key) {
            p.push((
                at.key("pools").index(i).key("labels").key(key),
                "set by render from gpu.sharingReplicas under gpu.stack: operator; drop the label"
                    .into(),
            ));
        }
    }
}
