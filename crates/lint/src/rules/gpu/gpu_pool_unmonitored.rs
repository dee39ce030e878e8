//! KK046: a GPU pool whose nodes no health agent watches.

use kk_model::FieldPath;

use crate::context::{Context, NodePoolView, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::rule::{Rule, RuleMeta};
use crate::sched;

pub const DOC: &str = r#"
## What
For every NVIDIA GPU NodePool, checks that a node health agent runs on its nodes: a DaemonSet
that tolerates the pool's `NoSchedule`/`NoExecute` taints, selects its nodes, and is one of
kubean-karpenter's health agent (`controller --health-agent`), the EKS node monitoring agent
(`eks-node-monitoring-agent`) or node-problem-detector. Runs only when a device plugin
DaemonSet is among the linted objects (the objects then say what runs on GPU nodes).

## Why
A GPU that fails with a fatal XID (79: fallen off the bus, 48: double-bit ECC, 74: NVLink, …)
leaves a node that is still Ready and still advertises `nvidia.com/gpu`: every pod scheduled
there fails. Karpenter's node repair replaces such a node, but only once something sets the
node condition it reads (`AcceleratedHardwareReady=False`). On EKS the node monitoring agent
does; on a self-managed cluster nothing does unless a health agent runs on the pool.

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
        - {key: nvidia.com/gpu, effect: NoSchedule}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["g6"]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvidia-device-plugin, namespace: kube-system}
spec:
  selector: {matchLabels: {name: nvidia-device-plugin}}
  template:
    metadata: {labels: {name: nvidia-device-plugin}}
    spec:
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
        - {name: plugin, image: "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
# ... and no health agent: a sick GPU is found by the users whose jobs fail.
```

## Fix
Describe the pool in an ElasticCluster spec with `spec.controller` set: `render` runs
kubean-karpenter's health agent on every GPU pool (`health: {gpu: true}` is the default) and
turns Karpenter's `nodeRepair` on. Or run another agent that sets `AcceleratedHardwareReady`
on the pool's nodes.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK046",
    name: "gpu-pool-unmonitored",
    severity: Severity::Warning,
    summary: "GPU NodePool whose nodes no health agent watches: a GPU that fails stays Ready and Karpenter never repairs it",
    doc: DOC,
    advice: None,
};

pub struct GpuPoolUnmonitored;

/// A DaemonSet that writes node health conditions.
fn is_health_agent(w: &WorkloadView<'_>) -> bool {
    if !w.is_daemonset() {
        return false;
    }
    let ours = ["containers", "initContainers"]
        .into_iter()
        .filter_map(|k| w.pod_spec.get(k).and_then(|v| v.as_array()))
        .flatten()
        .filter_map(|c| c.get("args").and_then(|a| a.as_array()))
        .flatten()
        .any(|a| a.as_str() == Some("--health-agent"));
    ours || w
        .images()
        .any(|i| i.contains("eks-node-monitoring-agent") || i.contains("node-problem-detector"))
}

/// Whether the agent runs on every node of the pool.
fn covers(agent: &WorkloadView<'_>, pool: &NodePoolView<'_>) -> bool {
    let tolerations = sched::tolerations(agent.pod_spec);
    sched::untolerated_taints(&pool.pool, &tolerations).is_empty()
        && sched::placement_miss(agent.pod_spec, &agent.pod_spec_path, &pool.labels).is_none()
}

impl Rule for GpuPoolUnmonitored {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        if ctx.device_plugins().next().is_none() {
            return;
        }
        let agents: Vec<&WorkloadView<'_>> = ctx
            .workloads
            .iter()
            .filter(|w| is_health_agent(w))
            .collect();
        for pool in ctx.gpu_pools() {
            if pool
                .gpu
                .as_ref()
                .is_some_and(|g| g.vendor == GpuVendor::Amd)
            {
                continue;
            }
            if agents.iter().any(|a| covers(a, pool)) {
                continue;
            }
            let why = if agents.is_empty() {
                "no health agent DaemonSet is among the objects".to_owned()
            } else {
                format!(
                    "{} do(es) not tolerate its taints or select its nodes",
                    agents
                        .iter()
                        .map(|a| a.obj.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            out.push(
                ctx.diag_key(
                    &META,
                    pool.obj,
                    &FieldPath::parse("spec.template.spec"),
                    format!(
                        "nothing watches the GPUs of NodePool {} ({why}): a GPU with a fatal XID stays Ready, fails every pod sent there, and Karpenter's node repair never hears of it",
                        pool.name()
                    ),
                )
                .with_help("render the pool from an ElasticCluster spec with spec.controller set (the health agent runs on GPU pools by default), or run a node health agent that tolerates this pool's taints"),
            );
        }
    }
}
