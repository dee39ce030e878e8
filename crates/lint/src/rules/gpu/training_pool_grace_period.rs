//! KK029: a training pool without `terminationGracePeriod`.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::reservations::training_evidence;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a training NodePool without `spec.template.spec.terminationGracePeriod`. A training
pool is a GPU pool (as in KK002) that launches p4, p5 or later `p` families (A100, H100,
H200, B200), or that asks for `reserved` capacity from reservations its EC2NodeClass selects.
Consolidating such a pool's busy nodes (`WhenEmptyOrUnderutilized`, `Balanced`) is KK006's
finding, which covers every GPU pool.

## Why
A training job holds eight GPUs for hours or days and survives a disruption only by
checkpointing. When Karpenter disrupts one of its nodes (drift after an AMI or userData change,
`expireAfter`, a capacity block's end, an interruption), two things can go wrong without a
grace period:
- a PodDisruptionBudget or a `karpenter.sh/do-not-disrupt` pod blocks the drain for ever: the
  node never drifts to the new image, and a capacity block's end still takes it from under the
  job;
- nothing states how long a job may take to write its checkpoint.
With `terminationGracePeriod`, Karpenter drains the node, waits at most that long for its
pods, then removes it. Capacity-block
nodes are deleted 40 minutes before the block ends, so keep the checkpoint inside that.
The field is part of the NodePool's drift hash: adding it replaces the pool's nodes once.

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
          values: ["p5.48xlarge"]
      taints: [{key: nvidia.com/gpu, value: training, effect: NoSchedule}]
  disruption:
    consolidationPolicy: WhenEmpty
    budgets: [{nodes: "1"}]
```

## Fix
```yaml
spec:
  template:
    spec:
      terminationGracePeriod: 2h   # in the ElasticCluster spec: terminationGracePeriod on the pool
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK029",
    name: "training-pool-grace-period",
    severity: Severity::Warning,
    summary: "Training GPU NodePool without terminationGracePeriod",
    doc: DOC,
    advice: None,
};

pub struct TrainingPoolGracePeriod;

impl Rule for TrainingPoolGracePeriod {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            if view
                .pool
                .spec
                .template
                .spec
                .termination_grace_period
                .is_some()
            {
                continue;
            }
            let Some(why) = training_evidence(ctx, view) else {
                continue;
            };
            out.push(
                ctx.diag_key(
                    &META,
                    view.obj,
                    &FieldPath::parse("spec.template.spec"),
                    format!(
                        "training pool ({why}) has no terminationGracePeriod: a \
                         PodDisruptionBudget or do-not-disrupt pod can block its drift for \
                         ever, and no time is set aside for a job's checkpoint"
                    ),
                )
                .with_help(
                    "set spec.template.spec.terminationGracePeriod (e.g. 2h) to how long a \
                     job may take to checkpoint",
                ),
            );
        }
    }
}
