//! KK033: a time-sliced GPU pool that no NodeOverlay (with its feature gate on) describes to
//! Karpenter's scheduler.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::{Context, NodePoolView, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::GpuVendor;
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};
use crate::rules::gpu::gpu_limit_ignores_sharing::{applicable, gpus_per_node, sharing_configs};

const GPU: &str = "nvidia.com/gpu";
const NODEPOOL: &str = "karpenter.sh/nodepool";
const GATE: &str = "settings.featureGates.nodeOverlay";

pub const DOC: &str = r#"
## What
Reports a GPU NodePool whose GPUs the NVIDIA device plugin shares R ways (time-slicing or MPS,
read as KK005 reads it) when Karpenter is not told: no NodeOverlay (karpenter.sh/v1alpha1)
selecting the pool sets its `nvidia.com/gpu` capacity, or one does but the linted Karpenter
values leave `settings.featureGates.nodeOverlay` off (alpha, off by default), so Karpenter
ignores it. An overlay selects the pool when its requirements name no `karpenter.sh/nodepool`,
or one that admits the pool.

## Why
A node's time-sliced GPUs exist only once the device plugin runs on it. When Karpenter plans a
new node it uses the instance type's physical count, so for pods asking one `nvidia.com/gpu`
each it launches one node per pod: with R = 4, N pending pods get N nodes where N/4 would do,
four times the nodes and the GPU-hours. Consolidation may pack them later, but not under
`WhenEmpty` (the GPU pools' usual policy), and every scale-up pays again. A NodeOverlay with
`capacity: {nvidia.com/gpu: R × G}` makes the scheduler plan the node as it will be: checked
against Karpenter v1.15's own scheduler (testbed/karpenter-oracle/overlay_test.go), it packs R
pods per GPU onto one node; the overlay's value **replaces** the type's count, so it must be
R × G, not R × G − G.

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
metadata: {name: inference}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - {key: karpenter.k8s.aws/instance-gpu-count, operator: In, values: ["1"]}
```

## Fix
In the spec: set `karpenter.featureGates.nodeOverlay: true`; render then writes a NodeOverlay
per time-sliced pool (`nodeoverlays/<pool>.yaml`). By hand: enable the gate in the chart's
values and add
`{apiVersion: karpenter.sh/v1alpha1, kind: NodeOverlay, spec: {requirements: [{key: karpenter.sh/nodepool, operator: In, values: [inference]}], capacity: {nvidia.com/gpu: "4"}}}`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK033",
    name: "gpu-sharing-without-overlay",
    severity: Severity::Warning,
    summary: "time-sliced GPU NodePool that Karpenter plans at its physical GPU count (no NodeOverlay, or its gate off): one node per pod",
    doc: DOC,
    advice: None,
};

pub struct GpuSharingWithoutOverlay;

/// Whether a NodeOverlay's requirements admit the pool by name.
fn selects(overlay: &Object, pool: &str) -> bool {
    let requirements = overlay
        .doc
        .value
        .pointer("/spec/requirements")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    requirements
        .iter()
        .filter(|r| r.get("key").and_then(Value::as_str) == Some(NODEPOOL))
        .all(|r| {
            let values: Vec<&str> = r
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match r.get("operator").and_then(Value::as_str) {
                Some("In") => values.contains(&pool),
                Some("NotIn") => !values.contains(&pool),
                Some("Exists") => true,
                _ => false,
            }
        })
}

fn sets_gpu(overlay: &Object) -> bool {
    overlay
        .doc
        .value
        .pointer("/spec/capacity")
        .and_then(|c| c.get(GPU))
        .is_some()
}

impl Rule for GpuSharingWithoutOverlay {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let sharing = sharing_configs(ctx.objects);
        if sharing.is_empty() {
            return;
        }
        let overlays: Vec<&Object> = ctx
            .objects
            .iter()
            .filter(|o| o.kind == "NodeOverlay" && sets_gpu(o))
            .collect();
        // The gate as the linted values set it; no values linted: not known, not reported.
        let gate_off = ctx.values.iter().find_map(|v| {
            let on = v.value(&FieldPath::parse(GATE)) == Some(&Value::Bool(true));
            (!on).then_some(*v)
        });
        let plugins: Vec<&WorkloadView<'_>> = ctx.device_plugins().collect();
        for view in ctx.gpu_pools() {
            if view
                .gpu
                .as_ref()
                .is_some_and(|g| g.vendor == GpuVendor::Amd)
            {
                continue;
            }
            let Some(config) = applicable(view, &sharing, &plugins) else {
                continue;
            };
            let covered = overlays.iter().any(|o| selects(o, view.name()));
            if covered && gate_off.is_none() {
                continue;
            }
            out.push(finding(ctx, view, config, covered, gate_off));
        }
    }
}

fn finding(
    ctx: &Context<'_>,
    view: &NodePoolView<'_>,
    config: &crate::rules::gpu::gpu_limit_ignores_sharing::Sharing,
    covered: bool,
    gate_off: Option<&Object>,
) -> Diagnostic {
    let r = config.replicas;
    let g = gpus_per_node(view).unwrap_or(1);
    let source = format!(
        "{} {r} ways (ConfigMap {}, {})",
        config.how, config.config_map, config.key
    );
    let cost = format!(
        "Karpenter plans a new node at its physical {g} GPU{}, not the {} it will advertise, so pods asking one {GPU} each get one node per {g} pod{} instead of per {}: {r}× the nodes and GPU-hours on every scale-up (consolidation may pack them later, never under WhenEmpty)",
        if g == 1 { "" } else { "s" },
        r * g,
        if g == 1 { "" } else { "s" },
        r * g,
    );
    let help = format!(
        "set karpenter.featureGates.nodeOverlay: true in the spec (render adds a NodeOverlay per time-sliced pool), or enable the gate and add a NodeOverlay selecting karpenter.sh/nodepool In [{}] with capacity {GPU}: \"{}\"",
        view.name(),
        r * g
    );
    let path = FieldPath::parse("metadata.name");
    match (covered, gate_off) {
        (true, Some(values)) => ctx
            .diag(
                &META,
                values,
                &FieldPath::parse("settings"),
                format!(
                    "NodePool {} time-slices its GPUs ({source}) and a NodeOverlay sets its {GPU}, but {GATE} is not true, so Karpenter ignores the overlay: {cost}",
                    view.name()
                ),
            )
            .with_help(help),
        _ => ctx
            .diag(
                &META,
                view.obj,
                &path,
                format!(
                    "NodePool {} time-slices its GPUs ({source}) but no NodeOverlay sets its {GPU}: {cost}",
                    view.name()
                ),
            )
            .with_help(help),
    }
}
