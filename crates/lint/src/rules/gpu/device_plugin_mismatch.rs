//! KK003: the NVIDIA device plugin DaemonSet must run on every node of every GPU pool.

use kk_model::FieldPath;

use crate::context::{Context, NodePoolView, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::rule::{Rule, RuleMeta};
use crate::sched::{self, Reach};

pub const DOC: &str = r#"
## What
For every NVIDIA GPU NodePool, checks that a device plugin DaemonSet (a DaemonSet whose image
contains `k8s-device-plugin`) tolerates each of the pool's `NoSchedule`/`NoExecute` taints and
that its `nodeSelector` and required node affinity match every node of the pool (the pool's
template labels, its requirements, `karpenter.sh/nodepool`, and the `--node-labels` of its
node class's userData). Runs only when a device plugin DaemonSet is among the linted objects.

## Why
Karpenter does not consider a node initialized until every extended resource its instance type
advertises (`nvidia.com/gpu`) is registered, and only the device plugin registers it. If the
plugin's pods cannot run on the node, the node stays uninitialized forever: billed, never
consolidated, and the GPU pod that triggered it stays Pending. There is no timeout.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    metadata:
      labels: {node.accelerator: nvidia-gpu}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      taints:
        - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["g6"]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nvidia-device-plugin
  namespace: kube-system
spec:
  selector:
    matchLabels: {name: nvidia-device-plugin}
  template:
    metadata:
      labels: {name: nvidia-device-plugin}
    spec:
      nodeSelector: {accelerator: nvidia}    # the pool's nodes carry node.accelerator
      tolerations:
        - {key: gpu, operator: Exists}       # the pool's taint is nvidia.com/gpu
      containers:
        - name: plugin
          image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0
```

## Fix
Tolerate every taint of every GPU pool (`{key: nvidia.com/gpu, operator: Exists, effect:
NoSchedule}`), and select nodes by a label every GPU pool sets in
`spec.template.metadata.labels` (for example `node.accelerator: nvidia-gpu`), or by
`karpenter.k8s.aws/instance-gpu-manufacturer In [nvidia]` in a required node affinity.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK003",
    name: "device-plugin-mismatch",
    severity: Severity::Error,
    summary: "NVIDIA device plugin DaemonSet that does not tolerate a GPU pool's taints or does not select its nodes",
    doc: DOC,
    advice: None,
};

pub struct DevicePluginMismatch;

/// Why one device plugin DaemonSet does not run on every node of one pool.
struct Problem {
    path: FieldPath,
    on_key: bool,
    message: String,
    help: String,
}

impl Rule for DevicePluginMismatch {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let plugins: Vec<&WorkloadView<'_>> = ctx.device_plugins().collect();
        if plugins.is_empty() {
            return;
        }
        for pool in ctx.gpu_pools() {
            if pool
                .gpu
                .as_ref()
                .is_some_and(|g| g.vendor == GpuVendor::Amd)
            {
                continue;
            }
            let per_plugin: Vec<(&WorkloadView<'_>, Vec<Problem>)> =
                plugins.iter().map(|p| (*p, problems(p, pool))).collect();
            if per_plugin.iter().any(|(_, problems)| problems.is_empty()) {
                continue;
            }
            if let [(plugin, problems)] = per_plugin.as_slice() {
                for p in problems {
                    let d = if p.on_key {
                        ctx.diag_key(&META, plugin.obj, &p.path, &p.message)
                    } else {
                        ctx.diag(&META, plugin.obj, &p.path, &p.message)
                    };
                    out.push(d.with_help(&p.help));
                }
                continue;
            }
            // Several plugins, none fits: the pool is what lacks a plugin.
            let reasons: Vec<String> = per_plugin
                .iter()
                .map(|(plugin, problems)| {
                    format!("{}: {}", plugin.obj.label(), problems[0].message)
                })
                .collect();
            out.push(
                ctx.diag_key(
                    &META,
                    pool.obj,
                    &FieldPath::parse("spec.template.spec"),
                    format!(
                        "no NVIDIA device plugin DaemonSet runs on every node of GPU NodePool {}; \
                         its nodes never initialize ({})",
                        pool.name(),
                        reasons.join("; ")
                    ),
                )
                .with_help("make one device plugin DaemonSet tolerate this pool's taints and select its nodes"),
            );
        }
    }
}

fn problems(plugin: &WorkloadView<'_>, pool: &NodePoolView<'_>) -> Vec<Problem> {
    let mut found = Vec::new();
    let tolerations = sched::tolerations(plugin.pod_spec);
    let untolerated = sched::untolerated_taints(&pool.pool, &tolerations);
    if !untolerated.is_empty() {
        let shown: Vec<String> = untolerated.iter().map(ToString::to_string).collect();
        let has_list = plugin.pod_spec.get("tolerations").is_some();
        let path = if has_list {
            plugin.pod_spec_path.key("tolerations")
        } else {
            plugin.pod_spec_path.clone()
        };
        let first = &untolerated[0];
        found.push(Problem {
            path,
            on_key: true,
            message: format!(
                "device plugin does not tolerate taint {} of GPU NodePool {}: it never runs \
                 there, so those nodes never register nvidia.com/gpu and stay uninitialized",
                shown.join(", "),
                pool.name()
            ),
            help: format!(
                "add to tolerations: {{key: {}, operator: Exists, effect: {}}}",
                first.key, first.effect
            ),
        });
    }
    if let Some(miss) = sched::placement_miss(plugin.pod_spec, &plugin.pod_spec_path, &pool.labels)
    {
        let (how, reason) = match &miss.reach {
            Reach::Partial(r) => ("matches only some nodes", r.clone()),
            Reach::Never(r) => ("does not match the nodes", r.clone()),
            Reach::All | Reach::Unknown => ("does not match the nodes", String::new()),
        };
        found.push(Problem {
            path: miss.path,
            on_key: false,
            message: format!(
                "device plugin {} {how} of GPU NodePool {} ({reason}): GPU nodes without the \
                 plugin never initialize",
                miss.what,
                pool.name()
            ),
            help: format!(
                "select by a label NodePool {} sets in spec.template.metadata.labels, or drop \
                 the constraint",
                pool.name()
            ),
        });
    }
    found
}
