//! KK027: NodePools that may launch spot (or reserved) capacity while Karpenter's values name
//! no interruption queue, or name it by URL or ARN.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

const QUEUE: &str = "settings.interruptionQueue";

pub const DOC: &str = r#"
## What
For Karpenter Helm values in the linted set, reports:
- `settings.interruptionQueue` missing or empty while a NodePool's `karpenter.sh/capacity-type`
  requirement allows `spot` or `reserved` (warning);
- `settings.interruptionQueue` that is a queue URL or ARN rather than a queue name (warning).

Without Helm values in the set nothing is reported (the queue may be set elsewhere).

## Why
AWS warns two minutes before it reclaims a spot instance (and before it interrupts an
interruptible capacity reservation), through EventBridge. Karpenter acts on the warning only
when `settings.interruptionQueue` names the SQS queue EventBridge rules feed: it then taints
the node, launches a replacement on another offering while it drains, and marks the reclaimed
offering unavailable for three minutes. Without the queue the node simply disappears with its
pods, and the PodDisruptionBudgets are never consulted. Karpenter looks the queue up by name
(`GetQueueUrl`): a URL or ARN matches no queue, and the controller logs errors instead of
reading events.

## Example
```yaml
# karpenter/values.yaml
settings:
  clusterName: demo
  interruptionQueue: ""
controller:
  env: [{name: AWS_REGION, value: us-east-1}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: inference
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand"]
```

## Fix
Create the queue and its five EventBridge rules (an ElasticCluster spec does it by default:
`render` writes `interruption/` and `apply` creates them) and name the queue:
```yaml
settings:
  interruptionQueue: demo      # the queue's name, not its URL or ARN
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK027",
    name: "spot-without-interruption-queue",
    severity: Severity::Warning,
    summary: "NodePool allows spot or reserved capacity but Karpenter's values name no interruption queue (or name it by URL or ARN)",
    doc: DOC,
    advice: None,
};

pub struct SpotWithoutInterruptionQueue;

impl Rule for SpotWithoutInterruptionQueue {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let reclaimable: Vec<&str> = ctx
            .node_pools
            .iter()
            .filter(|p| p.allows_capacity("spot") || p.allows_capacity("reserved"))
            .map(|p| p.name())
            .collect();
        let path = FieldPath::parse(QUEUE);
        for &obj in &ctx.values {
            let queue = obj.value(&path).and_then(Value::as_str).map(str::trim);
            match queue {
                None | Some("") if !reclaimable.is_empty() => {
                    let at = if obj.value(&path).is_some() {
                        path.clone()
                    } else {
                        FieldPath::parse("settings")
                    };
                    out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &at,
                            format!(
                                "{QUEUE} is {} but NodePool{} {} allow{} spot or reserved capacity: on a reclaim Karpenter gets no two-minute warning, and the node's pods die with it instead of being drained onto a replacement",
                                if queue.is_some() { "empty" } else { "missing" },
                                if reclaimable.len() == 1 { "" } else { "s" },
                                reclaimable.join(", "),
                                if reclaimable.len() == 1 { "s" } else { "" },
                            ),
                        )
                        .with_help("create an SQS queue fed by EventBridge rules for spot interruption, rebalance, state-change, AWS Health and capacity-reservation events, and set settings.interruptionQueue to its name"),
                    );
                }
                Some(q) if q.contains("://") || q.starts_with("arn:") => out.push(
                    ctx.diag(
                        &META,
                        obj,
                        &path,
                        format!(
                            "{QUEUE} {q:?} is a URL or ARN: Karpenter looks the queue up by name (GetQueueUrl) and finds none"
                        ),
                    )
                    .with_help(format!(
                        "set it to the queue's name: {:?}",
                        q.rsplit([':', '/']).next().unwrap_or(q)
                    )),
                ),
                _ => {}
            }
        }
    }
}
