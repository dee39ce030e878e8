//! KK018: GPU workloads that tolerate no GPU pool, and tolerate-everything workloads that can
//! land on GPU nodes.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::{Context, NodePoolView, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::rule::{Rule, RuleMeta};
use crate::sched::{self, Reach, Taint, Toleration, TolerationOp};

pub const DOC: &str = r#"
## What
Two checks of workloads (the pod template of a Deployment, StatefulSet, DaemonSet, ReplicaSet,
Job or CronJob, or a Pod) against the GPU NodePools linted with them:

- A workload that requests `nvidia.com/gpu` (in `requests` or `limits` of a container) but
  tolerates the `NoSchedule`/`NoExecute` taints of no NVIDIA GPU pool, or whose `nodeSelector`
  / required node affinity excludes every GPU pool whose taints it tolerates.
- A workload other than a DaemonSet that tolerates every taint (a toleration with
  `operator: Exists` and no `key`), requests no GPU, and whose `nodeSelector` and required node
  affinity do not keep it off a tainted GPU pool.

Runs only when GPU NodePools are among the linted objects. When the Kubespray vars enable the
`ExtendedResourceToleration` admission plugin (`kube_apiserver_enable_admission_plugins`),
GPU workloads count as tolerating `nvidia.com/gpu` taints, as the plugin adds that toleration.

## Why
Karpenter only launches a node for a pending pod when some NodePool's taints are all tolerated
by the pod. A GPU pod that tolerates none of them is never placed: it stays Pending with no
error beyond "untolerated taint", and no GPU node is ever started for it.

A pod that tolerates everything ignores the taint that keeps general pods off GPU nodes. It
lands on GPU nodes (about $1/hour and up) for CPU work, takes CPU and memory the GPU pods need,
and keeps a `WhenEmpty` GPU pool from ever consolidating the node. DaemonSets are expected to
tolerate everything (device plugins, CNI, log agents) and are not reported.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      taints:
        - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["g6"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: cuda
spec:
  tolerations:
    - {key: gpu, operator: Exists}         # the pool's taint is nvidia.com/gpu
  containers:
    - name: cuda
      image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
      resources:
        limits: {nvidia.com/gpu: 1}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: batch
spec:
  selector: {matchLabels: {app: batch}}
  template:
    metadata: {labels: {app: batch}}
    spec:
      tolerations:
        - operator: Exists                 # tolerates the GPU taint too
      containers:
        - {name: batch, image: busybox}
```

## Fix
Give GPU workloads a toleration for their pool's taint (`{key: nvidia.com/gpu, operator:
Exists, effect: NoSchedule}`) and, to pick the pool, a `nodeSelector` such as
`karpenter.sh/nodepool: gpu`. Replace tolerate-everything tolerations in ordinary workloads by
the taints they really need, or keep them off GPU nodes with a `nodeSelector` on a CPU pool's
label or a required node affinity `node.accelerator DoesNotExist`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK018",
    name: "gpu-workload-tolerations",
    severity: Severity::Error,
    summary: "GPU workload that tolerates no GPU pool's taints, or a tolerate-everything workload that can land on GPU nodes",
    doc: DOC,
    advice: None,
};

pub struct GpuWorkloadTolerations;

impl Rule for GpuWorkloadTolerations {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let pools: Vec<GpuPool<'_, '_>> = ctx
            .gpu_pools()
            .map(|view| GpuPool {
                view,
                taints: hard_taints(view),
                nvidia: view.gpu.as_ref().is_none_or(|g| g.vendor != GpuVendor::Amd),
            })
            .collect();
        if pools.is_empty() {
            return;
        }
        let injected = extended_resource_toleration(ctx);
        for workload in &ctx.workloads {
            // A pod bound to a node by name skips the scheduler and Karpenter.
            if workload
                .pod_spec
                .get("nodeName")
                .is_some_and(|n| !n.is_null())
            {
                continue;
            }
            let mut tolerations = sched::tolerations(workload.pod_spec);
            match gpu_request(workload) {
                Some(request) => {
                    tolerations.extend(injected.clone());
                    gpu_workload(ctx, workload, &request, &tolerations, &pools, out);
                }
                None if !workload.is_daemonset() => {
                    tolerates_all(ctx, workload, &tolerations, &pools, out);
                }
                None => {}
            }
        }
    }
}

/// The toleration the `ExtendedResourceToleration` admission plugin adds to pods that request
/// `nvidia.com/gpu`, when the Kubespray vars enable the plugin.
fn extended_resource_toleration(ctx: &Context<'_>) -> Option<Toleration> {
    let enabled = ctx.group_vars.iter().any(|vars| {
        vars.embedded
            .doc
            .value
            .get("kube_apiserver_enable_admission_plugins")
            .and_then(Value::as_array)
            .is_some_and(|plugins| {
                plugins
                    .iter()
                    .any(|p| p.as_str() == Some("ExtendedResourceToleration"))
            })
    });
    enabled.then(|| Toleration {
        key: "nvidia.com/gpu".into(),
        operator: TolerationOp::Exists,
        value: String::new(),
        effect: None,
    })
}

/// A GPU pool with its `NoSchedule`/`NoExecute` taints, worked out once per run.
struct GpuPool<'p, 'a> {
    view: &'p NodePoolView<'a>,
    taints: Vec<Taint>,
    /// Not an AMD pool: nodes that advertise `nvidia.com/gpu`.
    nvidia: bool,
}

impl GpuPool<'_, '_> {
    fn name(&self) -> &str {
        self.view.name()
    }

    fn tolerated_by(&self, tolerations: &[Toleration]) -> bool {
        self.untolerated(tolerations).next().is_none()
    }

    fn untolerated<'t>(&'t self, tolerations: &'t [Toleration]) -> impl Iterator<Item = &'t Taint> {
        kk_karpenter::taint::untolerated_hard(&self.taints, tolerations)
    }
}

/// The path of the first `nvidia.com/gpu` request or limit above zero.
fn gpu_request(workload: &WorkloadView<'_>) -> Option<FieldPath> {
    for list in ["containers", "initContainers"] {
        let Some(containers) = workload.pod_spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            for section in ["limits", "requests"] {
                let count = container
                    .get("resources")
                    .and_then(|r| r.get(section))
                    .and_then(|s| s.get("nvidia.com/gpu"));
                if count.is_some_and(is_positive) {
                    return Some(
                        workload
                            .pod_spec_path
                            .key(list)
                            .index(i)
                            .key("resources")
                            .key(section)
                            .key("nvidia.com/gpu"),
                    );
                }
            }
        }
    }
    None
}

/// A count above zero (`1`, `"2"`); anything unreadable counts, since it asks for a GPU.
fn is_positive(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.as_f64().is_some_and(|f| f > 0.0),
        Value::String(s) => s.trim().parse::<f64>().map_or(true, |f| f > 0.0),
        Value::Null => false,
        _ => true,
    }
}

fn hard_taints(pool: &NodePoolView<'_>) -> Vec<Taint> {
    sched::pool_taints(&pool.pool)
        .into_iter()
        .filter(Taint::is_hard)
        .collect()
}

/// Whether the pod's nodeSelector and required node affinity can reach some node of the pool.
fn reaches(workload: &WorkloadView<'_>, pool: &NodePoolView<'_>) -> bool {
    !matches!(
        sched::placement_miss(workload.pod_spec, &workload.pod_spec_path, &pool.labels),
        Some(miss) if matches!(miss.reach, Reach::Never(_))
    )
}

/// `a, b, c, d, ... (12 in all)`.
fn shorten(items: &[String], max: usize) -> String {
    if items.len() <= max {
        items.join("; ")
    } else {
        format!("{}; ... ({} in all)", items[..max].join("; "), items.len())
    }
}

fn gpu_workload(
    ctx: &Context<'_>,
    workload: &WorkloadView<'_>,
    request: &FieldPath,
    tolerations: &[Toleration],
    pools: &[GpuPool<'_, '_>],
    out: &mut Vec<Diagnostic>,
) {
    let nvidia: Vec<&GpuPool<'_, '_>> = pools.iter().filter(|p| p.nvidia).collect();
    if nvidia.is_empty()
        || nvidia
            .iter()
            .any(|p| p.tolerated_by(tolerations) && reaches(workload, p.view))
    {
        return;
    }
    let tolerated: Vec<&GpuPool<'_, '_>> = nvidia
        .iter()
        .copied()
        .filter(|p| p.tolerated_by(tolerations))
        .collect();
    let kind = &workload.obj.kind;
    if tolerated.is_empty() {
        let listing: Vec<String> = nvidia
            .iter()
            .map(|p| {
                let taints: Vec<String> = p
                    .untolerated(tolerations)
                    .map(ToString::to_string)
                    .collect();
                format!("{}: {}", p.name(), taints.join(", "))
            })
            .collect();
        let path = if workload.pod_spec.get("tolerations").is_some() {
            workload.pod_spec_path.key("tolerations")
        } else {
            request.clone()
        };
        let help = match nvidia[0].untolerated(tolerations).next() {
            Some(Taint { key, value, effect }) if !value.is_empty() => format!(
                "add to tolerations: {{key: {key}, operator: Equal, value: {value:?}, effect: {effect}}}"
            ),
            Some(Taint { key, effect, .. }) => {
                format!("add to tolerations: {{key: {key}, operator: Exists, effect: {effect}}}")
            }
            None => "tolerate the taints of a GPU NodePool".to_owned(),
        };
        out.push(
            ctx.diag_key(
                &META,
                workload.obj,
                &path,
                format!(
                    "{kind} requests nvidia.com/gpu but tolerates no GPU NodePool's taints ({}): \
                     Karpenter cannot place it and it stays Pending",
                    shorten(&listing, 4)
                ),
            )
            .with_help(help),
        );
        return;
    }
    // Tolerated, but the node selection rules each of those pools out.
    let misses: Vec<sched::Miss> = tolerated
        .iter()
        .filter_map(|p| {
            sched::placement_miss(workload.pod_spec, &workload.pod_spec_path, &p.view.labels)
        })
        .collect();
    let reasons: Vec<String> = misses
        .iter()
        .filter_map(|miss| match &miss.reach {
            Reach::Never(why) => Some(format!("{} ({why})", miss.what)),
            _ => None,
        })
        .collect();
    let names: Vec<String> = tolerated.iter().map(|p| p.name().to_owned()).collect();
    let path = misses
        .first()
        .map(|m| m.path.clone())
        .unwrap_or_else(|| request.clone());
    out.push(
        ctx.diag(
            &META,
            workload.obj,
            &path,
            format!(
                "{kind} requests nvidia.com/gpu and tolerates GPU NodePool{} {}, but its node \
                 selection excludes {}: {}; Karpenter cannot place it and it stays Pending",
                if names.len() == 1 { "" } else { "s" },
                shorten(&names, 4).replace("; ", ", "),
                if names.len() == 1 { "it" } else { "them" },
                shorten(&reasons, 4)
            ),
        )
        .with_help(
            "select a label the GPU NodePool's nodes carry (e.g. karpenter.sh/nodepool: <pool>)",
        ),
    );
}

fn tolerates_all(
    ctx: &Context<'_>,
    workload: &WorkloadView<'_>,
    tolerations: &[Toleration],
    pools: &[GpuPool<'_, '_>],
    out: &mut Vec<Diagnostic>,
) {
    // Index into the tolerations as written (a malformed entry keeps its place).
    let Some(wildcard) = workload
        .pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .and_then(|items| {
            items.iter().position(|v| {
                sched::toleration(v)
                    .is_some_and(|t| t.key.is_empty() && t.operator == TolerationOp::Exists)
            })
        })
    else {
        return;
    };
    let landing: Vec<String> = pools
        .iter()
        .filter(|p| !p.taints.is_empty())
        .filter(|p| p.tolerated_by(tolerations) && reaches(workload, p.view))
        .map(|p| p.name().to_owned())
        .collect();
    if landing.is_empty() {
        return;
    }
    out.push(
        ctx.diag(
            &META,
            workload.obj,
            &workload.pod_spec_path.key("tolerations").index(wildcard),
            format!(
                "{} tolerates every taint (operator: Exists without a key) and nothing in its \
                 nodeSelector or node affinity keeps it off GPU NodePool{} {}: CPU pods land on \
                 GPU nodes and keep them from consolidating",
                workload.obj.kind,
                if landing.len() == 1 { "" } else { "s" },
                shorten(&landing, 4).replace("; ", ", ")
            ),
        )
        .with_severity(Severity::Warning)
        .with_help(
            "tolerate only the taints this workload needs, or keep it off GPU nodes with a \
             nodeSelector on a CPU pool (karpenter.sh/nodepool: <pool>) or a required node \
             affinity node.accelerator DoesNotExist",
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpu_counts() {
        assert!(is_positive(&json!(1)));
        assert!(is_positive(&json!("2")));
        assert!(!is_positive(&json!(0)));
        assert!(!is_positive(&json!("0")));
        assert!(!is_positive(&Value::Null));
    }
}
