//! KK031: an EFA pool that names instance types without EFA, or admits none with EFA.

use std::collections::BTreeSet;

use kk_catalog::{catalog, resources::EFA};
use kk_karpenter::labels::{INSTANCE_TYPE, NODEPOOL};
use kk_model::FieldPath;
use serde_json::Value;

use crate::context::{Context, NodePoolView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::reservations::admitted_types;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool that uses EFA — the AWS EFA device plugin DaemonSet (image
`aws-efa-k8s-device-plugin`) selects its nodes by `karpenter.sh/nodepool` — when
- a `node.kubernetes.io/instance-type In [...]` value is a type without EFA interfaces in the
  EC2 catalog, or
- none of the instance types its requirements admit has EFA.

The catalog's EFA count is EC2's `MaximumEfaInterfaces` (the `efa` column of
`shared/data/ec2`), which is also the `vpc.amazonaws.com/efa` capacity Karpenter gives a type.

## Why
Karpenter attaches EFA interfaces only to types that have them, and only when the pods request
`vpc.amazonaws.com/efa` (aws/karpenter-provider-aws `pkg/providers/instance/instance.go`,
`getEFACountForInstance`). A pod that requests EFA never fits a type without it: with no EFA
type in the pool it stays Pending for ever; a named type without EFA is a type the job can never
use, usually a typo or a family mix-up (`g6.xlarge` has no EFA, `g6.8xlarge` and up do).

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: training
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: training}
      requirements:
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["p5.48xlarge", "g6.xlarge"]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: aws-efa-k8s-device-plugin, namespace: kube-system}
spec:
  selector: {matchLabels: {name: efa}}
  template:
    metadata: {labels: {name: efa}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: karpenter.sh/nodepool, operator: In, values: [training]}
      containers:
        - name: efa
          image: 602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20
```

## Fix
Keep EFA pools to EFA types (p4d, p5, p5e, p5en, g6.8xlarge and up, …: `kubean-karpenter
catalog` lists them), or move the pool out of the EFA device plugin's selection (in the
ElasticCluster spec: `efa: false`).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK031",
    name: "efa-pool-without-efa-types",
    severity: Severity::Warning,
    summary: "EFA NodePool that names instance types without EFA, or admits no EFA type",
    doc: DOC,
    advice: None,
};

pub struct EfaPoolWithoutEfaTypes;

impl Rule for EfaPoolWithoutEfaTypes {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let efa_pools = efa_pools(ctx);
        for view in ctx
            .node_pools
            .iter()
            .filter(|v| efa_pools.contains(v.name()))
        {
            check_pool(ctx, view, out);
        }
    }
}

fn has_efa(name: &str) -> Option<bool> {
    catalog().get(name).map(|t| t.capacity.get(EFA) > 0)
}

fn check_pool(ctx: &Context<'_>, view: &NodePoolView<'_>, out: &mut Vec<Diagnostic>) {
    let base = FieldPath::parse("spec.template.spec.requirements");
    let mut named = false;
    for (i, req) in view.pool.spec.template.spec.requirements.iter().enumerate() {
        if req.key != INSTANCE_TYPE || req.operator != "In" {
            continue;
        }
        named = true;
        for (j, value) in req.values.iter().enumerate() {
            if has_efa(value) == Some(false) {
                out.push(
                    ctx.diag(
                        &META,
                        view.obj,
                        &base.index(i).key("values").index(j),
                        format!(
                            "{value} has no EFA interface, yet the EFA device plugin serves this \
                             pool: a pod requesting vpc.amazonaws.com/efa never lands on it"
                        ),
                    )
                    .with_help(
                        "name EFA instance types only (kubean-karpenter catalog shows them)",
                    ),
                );
            }
        }
    }
    if named {
        return;
    }
    let types = admitted_types(view);
    if !types.is_empty() && types.iter().all(|t| t.capacity.get(EFA) == 0) {
        out.push(
            ctx.diag_key(
                &META,
                view.obj,
                &base,
                format!(
                    "none of the {} instance types these requirements admit has EFA, yet the \
                     EFA device plugin serves this pool: a pod requesting \
                     vpc.amazonaws.com/efa stays Pending",
                    types.len()
                ),
            )
            .with_help("admit EFA instance types (p4d, p5, g6.8xlarge and up, …)"),
        );
    }
}

/// Pools the EFA device plugin selects by `karpenter.sh/nodepool` (node selector or required
/// node affinity `In`).
fn efa_pools(ctx: &Context<'_>) -> BTreeSet<String> {
    let mut pools = BTreeSet::new();
    for workload in &ctx.workloads {
        if !workload.is_daemonset()
            || !workload
                .images()
                .any(|i| i.contains("aws-efa-k8s-device-plugin"))
        {
            continue;
        }
        let spec = workload.pod_spec;
        if let Some(pool) = spec["nodeSelector"][NODEPOOL].as_str() {
            pools.insert(pool.to_owned());
        }
        let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        for expression in terms
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["matchExpressions"].as_array().into_iter().flatten())
        {
            if expression["key"] == NODEPOOL && expression["operator"] == "In" {
                pools.extend(
                    expression["values"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
        }
    }
    pools
}
