//! KK002: a GPU NodePool must taint its nodes so only GPU workloads land there.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::sched::{self, Taint};

pub const DOC: &str = r#"
## What
Reports a GPU NodePool whose `spec.template.spec.taints` has no `NoSchedule` (or `NoExecute`)
taint. A pool is a GPU pool when its requirements select GPU instance types
(`karpenter.k8s.aws/instance-gpu-count`, `-gpu-name`, `-gpu-manufacturer`, a GPU
`instance-family` or `instance-category`, a GPU `node.kubernetes.io/instance-type`), when it
limits `nvidia.com/gpu`, or when its template labels carry `node.accelerator`.

## Why
Without the taint any pending pod that fits can be scheduled onto a GPU node: CoreDNS, a
Grafana, a busybox. It keeps the node busy, so consolidation never removes it, and the node
bills GPU prices for CPU work. A `PreferNoSchedule` taint is not enough: the scheduler ignores
it whenever nothing else fits, which is exactly when Karpenter is about to launch a node.

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
          values: ["g6"]
      # no taints: every pod may land here
  limits:
    nvidia.com/gpu: "8"
```

## Fix
Taint the pool and tolerate the taint where GPUs are wanted (GPU workloads and the NVIDIA
device plugin DaemonSet):
```yaml
      taints:
        - key: nvidia.com/gpu
          value: present
          effect: NoSchedule
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK002",
    name: "gpu-pool-untainted",
    severity: Severity::Warning,
    summary: "GPU NodePool without a NoSchedule taint",
    doc: DOC,
    advice: None,
};

pub struct GpuPoolUntainted;

impl Rule for GpuPoolUntainted {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in ctx.gpu_pools() {
            let taints = sched::pool_taints(&view.pool);
            if taints.iter().any(Taint::is_hard) {
                continue;
            }
            let why = view
                .gpu
                .as_ref()
                .map(|g| g.reason.as_str())
                .unwrap_or_default();
            let (path, message) = if taints.is_empty() {
                (
                    FieldPath::parse("spec.template.spec"),
                    format!(
                        "GPU NodePool ({why}) has no NoSchedule taint: any pod that fits can land \
                         on its GPU nodes"
                    ),
                )
            } else {
                let shown: Vec<String> = taints.iter().map(ToString::to_string).collect();
                (
                    FieldPath::parse("spec.template.spec.taints"),
                    format!(
                        "GPU NodePool ({why}) has only soft taints ({}): the scheduler still \
                         places other pods on its GPU nodes",
                        shown.join(", ")
                    ),
                )
            };
            out.push(ctx.diag_key(&META, view.obj, &path, message).with_help(
                "add a taint such as nvidia.com/gpu=present:NoSchedule to \
                 spec.template.spec.taints and tolerate it in GPU workloads and the device plugin",
            ));
        }
    }
}
