//! KK004: every NodePool needs `spec.limits`; a GPU NodePool needs a limit on its GPUs.

use kk_model::FieldPath;

use crate::context::{Context, NodePoolView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool without `spec.limits` (or with an empty one), as a warning, and a GPU
NodePool whose limits do not cap its GPUs, as an error: an NVIDIA pool needs an
`nvidia.com/gpu` limit, an AMD pool an `amd.com/gpu` limit, a pool whose vendor cannot be told
either one. A pool counts as a GPU pool as in KK002 (GPU requirements, a GPU limit, or a
`node.accelerator` label). Static pools (`spec.replicas`) launch a fixed number of nodes and
are skipped, and so is the limit a spend budget owns: a NodePool annotated
`kubean-karpenter.io/budget-resource: <resource>` gets that limit from kubean-karpenter's budget
controller, which writes it in the cluster (render leaves it out of the file on purpose).

## Why
Limits are the only ceiling Karpenter has. Without them a runaway Deployment (50 replicas
instead of 5), a pod that requests more than any node has left, or a crash-looping Job makes
Karpenter launch nodes until the account's EC2 quota stops it. On a GPU pool each of those
nodes bills GPU prices: "Set this on every GPU pool you ever create." A `cpu` or `memory` limit
does not cap GPUs either: a `p5.48xlarge` has 8 GPUs for 192 vCPUs, so a CPU limit sized for
CPU pools still lets through many GPUs.

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
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["g5", "g6"]
  limits:
    cpu: "500"          # no nvidia.com/gpu limit
```

## Fix
Give every pool a ceiling, and every GPU pool a GPU ceiling (Karpenter counts what nodes
advertise, so mind time-slicing, see KK005):
```yaml
  limits:
    cpu: "500"
    nvidia.com/gpu: "6"
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK004",
    name: "pool-without-limits",
    severity: Severity::Warning,
    summary: "NodePool without spec.limits, or GPU NodePool without a limit on its GPUs",
    doc: DOC,
    advice: None,
};

pub struct PoolWithoutLimits;

impl Rule for PoolWithoutLimits {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            if view.pool.spec.replicas.is_some() {
                continue;
            }
            if let Some(d) = check_pool(ctx, view) {
                out.push(d);
            }
        }
    }
}

/// The GPU resources a pool of this vendor may be limited by.
fn gpu_resources(vendor: GpuVendor) -> &'static [&'static str] {
    match vendor {
        GpuVendor::Nvidia => &["nvidia.com/gpu"],
        GpuVendor::Amd => &["amd.com/gpu"],
        GpuVendor::Unknown => &["nvidia.com/gpu", "amd.com/gpu"],
    }
}

fn check_pool(ctx: &Context<'_>, view: &NodePoolView<'_>) -> Option<Diagnostic> {
    let mut limits = view.pool.spec.limits.clone();
    // The budget controller writes this limit in the cluster: it is there, just not here.
    if let Some(resource) = view
        .pool
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kk_model::spend::annotation::RESOURCE))
    {
        limits.insert(resource.clone(), serde_json::Value::Null);
    }
    let limits = &limits;
    let has_limits_key = view.obj.value(&FieldPath::parse("spec.limits")).is_some();
    let (path, where_) = if has_limits_key {
        (FieldPath::parse("spec.limits"), "an empty spec.limits")
    } else {
        (FieldPath::parse("spec"), "no spec.limits")
    };
    match &view.gpu {
        Some(gpu) => {
            let wanted = gpu_resources(gpu.vendor);
            if wanted.iter().any(|r| limits.contains_key(*r)) {
                return None;
            }
            let resource = wanted.join(" or ");
            let message = if limits.is_empty() {
                format!(
                    "GPU NodePool ({}) has {where_}: nothing caps how many GPU nodes Karpenter \
                     launches for pending pods",
                    gpu.reason
                )
            } else {
                let set: Vec<&str> = limits.keys().map(String::as_str).collect();
                format!(
                    "GPU NodePool ({}) limits {} but not {resource}: a CPU or memory ceiling \
                     lets through far more GPUs than meant (a p5.48xlarge is 8 GPUs for 192 \
                     vCPUs)",
                    gpu.reason,
                    set.join(", ")
                )
            };
            let example = wanted[0];
            Some(
                ctx.diag_key(&META, view.obj, &path, message)
                    .with_severity(Severity::Error)
                    .with_help(format!(
                        "add a GPU ceiling to spec.limits, e.g. {example}: \"8\" (Karpenter counts \
                         what nodes advertise: with time-slicing, count the shared replicas)"
                    )),
            )
        }
        None if limits.is_empty() => Some(
            ctx.diag_key(
                &META,
                view.obj,
                &path,
                format!(
                    "NodePool has {where_}: nothing caps how many nodes Karpenter launches (a \
                     runaway Deployment scales the bill until the EC2 quota stops it)"
                ),
            )
            .with_help("add spec.limits, e.g. cpu: \"500\" and memory: 1000Gi"),
        ),
        None => None,
    }
}
