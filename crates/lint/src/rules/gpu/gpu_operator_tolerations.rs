//! KK034: the NVIDIA GPU Operator's daemonsets and its node-feature-discovery worker must
//! tolerate every GPU pool's taints.

use kk_model::FieldPath;
use serde_json::{Value, json};

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};
use crate::sched;

pub const DOC: &str = r#"
## What
For every NVIDIA GPU NodePool and every linted GPU Operator values document (Helm values with
a top-level `devicePlugin` beside `daemonsets`, `driver`, `toolkit`, `gfd` or `dcgmExporter`),
checks that two toleration lists tolerate each of the pool's `NoSchedule`/`NoExecute` taints:
- `daemonsets.tolerations`, which the operator puts on every operand DaemonSet (device plugin,
  GPU feature discovery, DCGM exporter, validator), replacing their own;
- `node-feature-discovery.worker.tolerations`, the NFD worker's, which labels the node's NVIDIA
  PCI device; the operator deploys its operands only on nodes so labelled.

A list the values leave out counts as the chart's default (NVIDIA/gpu-operator v25.10.1
`values.yaml`): `nvidia.com/gpu` `Exists` `NoSchedule` only.

## Why
The operator's device plugin registers `nvidia.com/gpu`, and Karpenter does not call a node
initialized before every extended resource of its instance type is registered. An operand
that does not tolerate the pool's taint never runs there, and without the NFD worker the
operator never even selects the node: either way the node stays uninitialized, billed, and the
GPU pod that asked for it stays Pending. No timeout ends it.

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
        - {key: team, value: research, effect: NoSchedule}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["g6"]}
---
# gpu-operator values
devicePlugin: {enabled: true}
daemonsets:
  tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}   # not team=research
```

## Fix
List every GPU pool's taints in both `daemonsets.tolerations` and
`node-feature-discovery.worker.tolerations` (`kubean-karpenter render` with `gpu.stack:
operator` writes exactly those into `gpu/gpu-operator-values.yaml`).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK034",
    name: "gpu-operator-tolerations",
    severity: Severity::Error,
    summary: "GPU Operator values whose daemonsets or node-feature-discovery worker do not tolerate a GPU pool's taints",
    doc: DOC,
    advice: None,
};

pub struct GpuOperatorTolerations;

/// The toleration lists the operator's pods on a GPU node take, and what each is.
const LISTS: [(&str, &str); 2] = [
    (
        "daemonsets.tolerations",
        "the operator's daemonsets (device plugin, GFD, DCGM exporter) never run there",
    ),
    (
        "node-feature-discovery.worker.tolerations",
        "the node-feature-discovery worker never runs there, and without its labels the operator skips the node",
    ),
];

/// The chart's default for either list.
fn chart_default() -> Value {
    json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
}

impl Rule for GpuOperatorTolerations {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for values in &ctx.gpu_operator_values {
            for (list, what) in LISTS {
                check_list(ctx, values, list, what, out);
            }
        }
    }
}

fn check_list(
    ctx: &Context<'_>,
    values: &Object,
    list: &str,
    what: &str,
    out: &mut Vec<Diagnostic>,
) {
    let path = FieldPath::parse(list);
    let given = values.value(&path).cloned();
    let tolerations = sched::tolerations(&json!({
        "tolerations": given.clone().unwrap_or_else(chart_default)
    }));
    for pool in ctx.gpu_pools() {
        if pool
            .gpu
            .as_ref()
            .is_some_and(|g| g.vendor == GpuVendor::Amd)
        {
            continue;
        }
        let untolerated = sched::untolerated_taints(&pool.pool, &tolerations);
        let Some(first) = untolerated.first() else {
            continue;
        };
        let shown: Vec<String> = untolerated.iter().map(ToString::to_string).collect();
        let default = if given.is_none() {
            " (unset: the chart's default tolerates only nvidia.com/gpu:NoSchedule)"
        } else {
            ""
        };
        out.push(
            ctx.diag_key(
                &META,
                values,
                &path,
                format!(
                    "{list} does not tolerate taint {} of GPU NodePool {}{default}: {what}, so its \
                     nodes never register nvidia.com/gpu and stay uninitialized",
                    shown.join(", "),
                    pool.name()
                ),
            )
            .with_help(format!(
                "add to {list}: {{key: {}, operator: Exists, effect: {}}}",
                first.key, first.effect
            )),
        );
    }
}
