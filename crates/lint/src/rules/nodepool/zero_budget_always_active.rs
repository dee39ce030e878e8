//! KK043: a `nodes: "0"` disruption budget that is always active.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool disruption budget with `nodes: "0"` (or `"0%"`) and no `schedule`, for all
reasons (no `reasons` list, or one naming `Drifted`).

## Why
A budget without a schedule is active all the time (Karpenter v1.0 to 1.15). `nodes: "0"`
then forbids every voluntary disruption it covers, forever: no consolidation, and — when it
covers drift — no drift replacement either, so every AMI release, node-class or template
change marks nodes drifted and they pile up, each still running the old AMI, until someone
edits the budget. Expiry (`expireAfter`) still replaces nodes, without a budget's pacing.
That is sometimes meant (a freeze); usually it is a maintenance window whose `schedule` and
`duration` were forgotten.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  disruption:
    budgets:
      - nodes: "0"
```

## Fix
Give the freeze a window: `schedule: "0 9 * * mon-fri"` with `duration: 8h` (times in UTC),
or limit it to the reasons you mean (`reasons: [Underutilized]`), or allow a few:
`nodes: "10%"`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK043",
    name: "zero-budget-always-active",
    severity: Severity::Warning,
    summary: "a nodes \"0\" disruption budget with no schedule: drifted nodes pile up forever",
    doc: DOC,
    advice: None,
};

pub struct ZeroBudgetAlwaysActive;

fn is_zero(nodes: &str) -> bool {
    let n = nodes.trim().trim_end_matches('%');
    !n.is_empty() && n.bytes().all(|b| b == b'0')
}

impl Rule for ZeroBudgetAlwaysActive {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let Some(disruption) = view.pool.spec.disruption.as_ref() else {
                continue;
            };
            for (i, budget) in disruption.budgets.iter().enumerate() {
                let drift =
                    budget.reasons.is_empty() || budget.reasons.iter().any(|r| r == "Drifted");
                if !is_zero(&budget.nodes) || budget.schedule.is_some() || !drift {
                    continue;
                }
                let path = FieldPath::parse("spec.disruption.budgets")
                    .index(i)
                    .key("nodes");
                let covers = if budget.reasons.is_empty() {
                    "every reason"
                } else {
                    "drift"
                };
                out.push(
                    ctx.diag(
                        &META,
                        view.obj,
                        &path,
                        format!(
                            "budget nodes: {:?} has no schedule, so it is always active and \
                             blocks {covers}: drifted nodes are never replaced until it is lifted",
                            budget.nodes
                        ),
                    )
                    .with_help(
                        "add schedule and duration for a window, narrow reasons, or allow a few \
                         nodes (\"10%\")",
                    ),
                );
            }
        }
    }
}
