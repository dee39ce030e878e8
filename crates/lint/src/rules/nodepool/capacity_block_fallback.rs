//! KK030 (info): a capacity-block pool, with or without an on-demand fallback, and what it costs.

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::reservations::{admitted_types, capacity_block_requirement, reserved_value};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
An information, not a fault: for a NodePool whose reserved offerings are capacity blocks for
ML (a `karpenter.k8s.aws/capacity-reservation-type` requirement `In [capacity-block]` or
`NotIn [default]`, with `reserved` among its capacity types), says which of the two choices it
made when the blocks are full or over, and what that choice costs:
- **with a fallback** (`on-demand` or `spot` allowed too): the next node launches there, at the
  catalog's list price (the most expensive type the pool admits is named);
- **without**: pods stay Pending until a block has room again.

## Why
Karpenter prefers a reservation (priced at on-demand ÷ 10,000,000) whenever one has room. A
node launched while the blocks are full (a scale-up, or the replacement of a failed, drifted or
expired node) lands on the fallback and stays there after the blocks free up: `WhenEmpty`
never moves a busy node back. At p5.48xlarge's $55 an hour that is the most expensive line on
the bill, and nothing in the objects shows it. Without the fallback the cost is time: jobs
wait. A capacity block also ends at a fixed time: Karpenter deletes its nodes 40 minutes
before (aws/karpenter-provider-aws
`pkg/controllers/capacityreservation/expiration/controller.go`), and their pods go to the
fallback, or wait.

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
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["reserved", "on-demand"]
        - key: karpenter.k8s.aws/capacity-reservation-type
          operator: NotIn
          values: ["default"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["p5.48xlarge"]
```

## Fix
Nothing to fix: choose. Keep the fallback and watch the pool's
`karpenter.sh/capacity-type=on-demand` nodes (drain them when the blocks have room), or drop
`on-demand` to queue for the blocks. Once chosen, silence the note with a
`# kubean-karpenter-lint: disable=KK030` comment or `disable: [KK030]` in the lint config.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK030",
    name: "capacity-block-fallback",
    severity: Severity::Info,
    summary: "Capacity-block NodePool: what happens, and costs, when the blocks are full",
    doc: DOC,
    advice: None,
};

pub struct CapacityBlockFallback;

impl Rule for CapacityBlockFallback {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let Some(path) = capacity_block_requirement(view) else {
                continue;
            };
            if reserved_value(view).is_none() {
                continue;
            }
            let fallback: Vec<&str> = ["on-demand", "spot"]
                .into_iter()
                .filter(|c| view.allows_capacity(c))
                .collect();
            let message = if fallback.is_empty() {
                "capacity blocks only, no fallback: while every block is full, and after a \
                 block ends (its nodes are deleted 40 minutes before), this pool's pods stay \
                 Pending"
                    .to_owned()
            } else {
                format!(
                    "capacity blocks first, {} fallback: a node launched while the blocks are \
                     full stays {} after they free up (WhenEmpty never moves a busy node){}",
                    fallback.join(" and "),
                    fallback.join("/"),
                    priciest(view)
                )
            };
            out.push(
                ctx.diag(&META, view.obj, &path, message)
                    .with_help(if fallback.is_empty() {
                        "allow on-demand to launch at list price instead of waiting"
                    } else {
                        "watch the pool's nodes with karpenter.sh/capacity-type=on-demand, or drop \
                     on-demand to wait for the blocks instead"
                    }),
            );
        }
    }
}

/// ", at up to $55.04/h (p5.48xlarge on-demand, us-east-1)" for the priciest admitted type.
fn priciest(view: &crate::context::NodePoolView<'_>) -> String {
    admitted_types(view)
        .into_iter()
        .filter_map(|t| Some((t.on_demand_price?, t.name.as_str())))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(price, name)| format!(", at up to ${price:.2}/h ({name} on-demand, us-east-1)"))
        .unwrap_or_default()
}
