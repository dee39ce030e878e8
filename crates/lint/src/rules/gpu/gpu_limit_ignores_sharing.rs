//! KK005: a GPU pool's `nvidia.com/gpu` limit must count the replicas time-slicing advertises.

use kk_karpenter::labels::INSTANCE_GPU_COUNT;
use std::collections::BTreeSet;

use kk_model::FieldPath;
use kk_model::quantity::Quantity;
use kk_model::yaml::{LoadLimits, load_documents};
use serde_json::Value;

use crate::context::{Context, NodePoolView, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::input::{Class, Object};
use crate::rule::{Rule, RuleMeta};
use crate::sched;

const GPU: &str = "nvidia.com/gpu";
/// The node label with which the GPU Operator picks one config of a multi-config ConfigMap.
use kk_karpenter::labels::NVIDIA_DEVICE_PLUGIN_CONFIG as CONFIG_LABEL;
/// Bounds on the device plugin configs parsed out of ConfigMap values (real ones are a few
/// hundred bytes and values): bytes and YAML values per data value, YAML values per run.
const MAX_CONFIG_BYTES: usize = 64 * 1024;
const MAX_CONFIG_NODES: usize = 10_000;
const MAX_CONFIG_NODES_TOTAL: usize = 100_000;

pub const DOC: &str = r#"
## What
Reports a GPU NodePool whose `spec.limits` `nvidia.com/gpu` ignores GPU sharing. Sharing is
read from the NVIDIA device plugin's config in a linted ConfigMap: a data value holding
`sharing.timeSlicing.resources` (or `sharing.mps.resources`) with `name: nvidia.com/gpu` and
`replicas: R` (not renamed). Which config applies to a pool:
- the one its template label `nvidia.com/device-plugin.config: <data key>` names (GPU Operator);
- else the configs mounted (a `configMap` volume) by the NVIDIA device plugin DaemonSets that
  run on the pool's nodes;
- else, when no linted device plugin runs there, the configs no linted plugin mounts.

The pool is checked only when those configs agree on one R. With G GPUs per node (the largest
`karpenter.k8s.aws/instance-gpu-count` `In` value; 1 at least when the pool does not say), each
node advertises R × G `nvidia.com/gpu`, and the rule reports a limit L that
- is smaller than R × G: one node already advertises more than the whole limit, or
- is not a multiple of R × G (only when G is known): the pool stops at a node count that
  matches neither the limit nor what its author counted.

## Why
Karpenter counts what nodes advertise: "a node time-sliced 4 ways consumes 4" of the limit.
When it launches a node it checks the instance type's physical GPUs against what is left of
the limit; once the node registers, it counts the R × G the device plugin advertises. A limit
sized in physical GPUs therefore caps the pool at a fraction of the nodes meant, and a limit
below R × G puts the pool over its limit from its first node on, so it never scales past it.
"A limit that ignores sharing is a limit you'll hit by surprise."

## Example
```yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: nvidia-device-plugin-time-slicing, namespace: kube-system}
data:
  config.yaml: |
    version: v1
    sharing:
      timeSlicing:
        resources:
          - name: nvidia.com/gpu
            replicas: 4
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: shared
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - {key: karpenter.k8s.aws/instance-gpu-count, operator: In, values: ["1"]}
  limits:
    nvidia.com/gpu: "3"      # three physical GPUs meant; one node advertises 4
```

## Fix
Count advertised GPUs: for N nodes, set the limit to N × R × G (here `"12"` for three nodes).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK005",
    name: "gpu-limit-ignores-sharing",
    severity: Severity::Warning,
    summary: "GPU NodePool whose nvidia.com/gpu limit ignores the replicas time-slicing advertises",
    doc: DOC,
    advice: None,
};

pub struct GpuLimitIgnoresSharing;

/// One `nvidia.com/gpu` sharing entry of a device plugin config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sharing {
    /// `kube-system/nvidia-device-plugin-time-slicing`.
    pub(crate) config_map: String,
    name: String,
    namespace: Option<String>,
    /// The data key holding the config (`any`, `config.yaml`).
    pub(crate) key: String,
    pub(crate) replicas: u64,
    /// `time-slicing` or `MPS`.
    pub(crate) how: &'static str,
}

impl Rule for GpuLimitIgnoresSharing {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let sharing = sharing_configs(ctx.objects);
        if sharing.is_empty() {
            return;
        }
        let plugins: Vec<&WorkloadView<'_>> = ctx.device_plugins().collect();
        for view in ctx.gpu_pools() {
            if view
                .gpu
                .as_ref()
                .is_some_and(|g| g.vendor == GpuVendor::Amd)
            {
                continue;
            }
            if let Some(d) = check_pool(ctx, view, &sharing, &plugins) {
                out.push(d);
            }
        }
    }
}

/// Whether the device plugin mounts the ConfigMap holding `config`.
fn mounts(plugin: &WorkloadView<'_>, config: &Sharing) -> bool {
    let same_namespace = match (&plugin.obj.namespace, &config.namespace) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    same_namespace
        && plugin
            .pod_spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("configMap")?.get("name")?.as_str())
            .any(|name| name == config.name)
}

/// Whether the device plugin runs on every node of the pool (or it cannot be told).
fn runs_on(plugin: &WorkloadView<'_>, pool: &NodePoolView<'_>) -> bool {
    let tolerations = sched::tolerations(plugin.pod_spec);
    let tolerated = sched::untolerated_taints(&pool.pool, &tolerations).is_empty();
    tolerated
        && sched::placement_miss(plugin.pod_spec, &plugin.pod_spec_path, &pool.labels).is_none()
}

/// The sharing config that applies to the pool: the one its config label names (GPU Operator);
/// else those the device plugins running on the pool mount; else, when no linted plugin runs
/// there, those no linted plugin mounts. Applies only when the candidates agree on one count.
pub(crate) fn applicable<'s>(
    view: &NodePoolView<'_>,
    sharing: &'s [Sharing],
    plugins: &[&WorkloadView<'_>],
) -> Option<&'s Sharing> {
    let label = view
        .pool
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.get(CONFIG_LABEL));
    let candidates: Vec<&Sharing> = match label {
        Some(key) => sharing.iter().filter(|s| s.key == *key).collect(),
        None => {
            let running: Vec<&&WorkloadView<'_>> =
                plugins.iter().filter(|p| runs_on(p, view)).collect();
            if running.is_empty() {
                sharing
                    .iter()
                    .filter(|s| !plugins.iter().any(|p| mounts(p, s)))
                    .collect()
            } else {
                sharing
                    .iter()
                    .filter(|s| running.iter().any(|p| mounts(p, s)))
                    .collect()
            }
        }
    };
    let counts: BTreeSet<u64> = candidates.iter().map(|s| s.replicas).collect();
    if counts.len() == 1 {
        candidates.first().copied()
    } else {
        None
    }
}

/// The largest GPU count per node the pool's requirements allow with `In`.
pub(crate) fn gpus_per_node(view: &NodePoolView<'_>) -> Option<u64> {
    view.pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == INSTANCE_GPU_COUNT && r.operator == "In")
        .flat_map(|r| r.values.iter())
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .max()
}

/// The limit as a whole number of devices (fractions and junk are KK000's business).
fn whole_limit(value: &Value) -> Option<u128> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let q = Quantity::parse(&text).ok()?;
    if q.milli <= 0 || q.milli % 1000 != 0 {
        return None;
    }
    u128::try_from(q.milli / 1000).ok()
}

fn check_pool(
    ctx: &Context<'_>,
    view: &NodePoolView<'_>,
    sharing: &[Sharing],
    plugins: &[&WorkloadView<'_>],
) -> Option<Diagnostic> {
    let limit = whole_limit(view.pool.spec.limits.get(GPU)?)?;
    let config = applicable(view, sharing, plugins)?;
    // Both small in practice; bounded so that no sum below can overflow.
    let r = u128::from(u32::try_from(config.replicas).ok()?);
    let g = match gpus_per_node(view) {
        Some(g) => Some(u128::from(u32::try_from(g).ok()?)),
        None => None,
    };
    let per_node = r * g.unwrap_or(1);
    let path = FieldPath::parse("spec.limits").key(GPU);
    let source = format!(
        "{} {} ways (ConfigMap {}, {})",
        config.how, r, config.config_map, config.key
    );
    let per_node_text = match g {
        Some(g) => format!("{r} × {g} = {per_node}"),
        None => format!("at least {r}"),
    };
    let message = if limit < per_node {
        format!(
            "limit {GPU}: {limit} is less than one node advertises ({per_node_text}, {source}): \
             Karpenter counts what nodes advertise, so the pool is over its limit from its first \
             node on and never scales past it"
        )
    } else if g.is_some() && limit % per_node != 0 {
        let g = g.unwrap_or(1);
        // A launch is allowed while what is counted plus the new node's physical GPUs fits.
        let nodes = (limit - g) / per_node + 1;
        let advertised = nodes * per_node;
        let outcome = if advertised > limit {
            format!("{advertised}, over the limit")
        } else {
            format!("{advertised}, {} short of it", limit - advertised)
        };
        format!(
            "limit {GPU}: {limit} is not a multiple of what one node advertises \
             ({per_node_text}, {source}): Karpenter counts what nodes advertise, so the pool stops \
             at {nodes} node{} advertising {outcome}",
            if nodes == 1 { "" } else { "s" }
        )
    } else {
        return None;
    };
    let lower = (limit / per_node).max(1) * per_node;
    let upper = limit.div_ceil(per_node) * per_node;
    let suggestion = if lower == upper || limit < per_node {
        format!("{upper}")
    } else {
        format!("{lower} or {upper}")
    };
    Some(ctx.diag(&META, view.obj, &path, message).with_help(format!(
        "count advertised GPUs: N nodes need a limit of N × {per_node}, e.g. {GPU}: \
             \"{suggestion}\""
    )))
}

/// Every `nvidia.com/gpu` sharing entry in the linted ConfigMaps.
pub(crate) fn sharing_configs(objects: &[Object]) -> Vec<Sharing> {
    let mut found = Vec::new();
    let mut nodes_left = MAX_CONFIG_NODES_TOTAL;
    for obj in objects.iter().filter(|o| o.class == Class::ConfigMap) {
        let Some(Value::Object(data)) = obj.doc.value.get("data") else {
            continue;
        };
        let config_map = match &obj.namespace {
            Some(ns) => format!("{ns}/{}", obj.name),
            None => obj.name.clone(),
        };
        for (key, text) in data {
            let Some(text) = text.as_str() else { continue };
            if nodes_left == 0 || text.len() > MAX_CONFIG_BYTES || !text.contains("sharing") {
                continue;
            }
            let cap = nodes_left.min(MAX_CONFIG_NODES);
            let limits = LoadLimits {
                max_bytes: MAX_CONFIG_BYTES,
                max_depth: 32,
                max_nodes: cap,
                ..LoadLimits::default()
            };
            let Ok(docs) = load_documents(text, limits) else {
                // Unparseable or over its bound (an alias bomb): no config, and no finding.
                nodes_left -= cap;
                continue;
            };
            for doc in docs {
                nodes_left = nodes_left.saturating_sub(doc.values());
                for (how, field) in [("time-slicing", "timeSlicing"), ("MPS", "mps")] {
                    let Some(shared) = doc.value.get("sharing").and_then(|s| s.get(field)) else {
                        continue;
                    };
                    let renamed = shared.get("renameByDefault") == Some(&Value::Bool(true));
                    for res in shared
                        .get("resources")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if res.get("name").and_then(Value::as_str) != Some(GPU)
                            || renamed
                            || res
                                .get("rename")
                                .and_then(Value::as_str)
                                .is_some_and(|r| !r.is_empty() && r != GPU)
                        {
                            continue;
                        }
                        let replicas = match res.get("replicas") {
                            Some(Value::Number(n)) => n.as_u64(),
                            Some(Value::String(s)) => s.trim().parse().ok(),
                            _ => None,
                        };
                        if let Some(replicas) = replicas.filter(|r| *r > 1) {
                            found.push(Sharing {
                                config_map: config_map.clone(),
                                name: obj.name.clone(),
                                namespace: obj.namespace.clone(),
                                key: key.clone(),
                                replicas,
                                how,
                            });
                        }
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_whole_devices() {
        assert_eq!(whole_limit(&Value::String("8".into())), Some(8));
        assert_eq!(whole_limit(&serde_json::json!(12)), Some(12));
        assert_eq!(whole_limit(&Value::String("1500m".into())), None);
        assert_eq!(whole_limit(&Value::String("0".into())), None);
        assert_eq!(whole_limit(&Value::String("lots".into())), None);
        assert_eq!(whole_limit(&Value::Bool(true)), None);
    }
}
