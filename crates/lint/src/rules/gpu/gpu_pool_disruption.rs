//! KK006: GPU pools should consolidate only empty nodes, and only a few nodes at a time.

use kk_model::FieldPath;
use kk_model::karpenter::Budget;
use serde_json::Value;

use crate::context::{Context, NodePoolView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

/// The CRD's default for `spec.disruption.consolidationPolicy`.
const DEFAULT_POLICY: &str = "WhenEmptyOrUnderutilized";
/// The CRD's default for `spec.disruption.budgets` (`- nodes: 10%`).
const DEFAULT_BUDGET: &str = "10%";

pub const DOC: &str = r#"
## What
Reports two things about a GPU NodePool (GPU as in KK002; static pools with `spec.replicas`
are skipped):
- its `spec.disruption.consolidationPolicy` is `WhenEmptyOrUnderutilized` or `Balanced`, or is
  not set, which means `WhenEmptyOrUnderutilized` (the CRD default). Not reported when
  `consolidateAfter: Never` or an always-active budget of `nodes: "0"` for `Underutilized`
  turns that consolidation off.
- it has no disruption budget. Without `spec.disruption.budgets` the CRD default
  `- nodes: 10%` applies: Karpenter may disrupt 10% of the pool's GPU nodes at once (rounded up,
  so at least one), for consolidation, drift and expiry alike. An empty list (`budgets: []`)
  is worse: no budget at all, every node at once.

## Why
Consolidation of underutilized nodes replaces a running node with a cheaper one or packs its
pods elsewhere. For a model server that took eight minutes to load, that means killing it
mid-request to save twelve cents: "For GPU fleets, be deliberate about disruption." GPU fleets
consolidate only empty nodes (`WhenEmpty`). A budget bounds how many GPU nodes drift (a new AMI
or userData) or expiry replace at once; the default is a percentage nobody chose, and a GPU
fleet wants a small absolute number.

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
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["g6"]
  limits:
    nvidia.com/gpu: "6"
  # no disruption: consolidationPolicy WhenEmptyOrUnderutilized, budgets [{nodes: 10%}]
```

## Fix
```yaml
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets:
      - nodes: "1"
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK006",
    name: "gpu-pool-disruption",
    severity: Severity::Warning,
    summary: "GPU NodePool that consolidates underutilized nodes or has no disruption budget",
    doc: DOC,
    advice: Some(crate::diagnostic::Advice {
        alternative: "`WhenEmptyOrUnderutilized` (the CRD default) with its default 10% budget",
        cost: "a running model server or training job replaced to save the difference between two instance prices, up to a tenth of the pool at once",
    }),
};

pub struct GpuPoolDisruption;

impl Rule for GpuPoolDisruption {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in ctx.gpu_pools() {
            if view.pool.spec.replicas.is_some() {
                continue;
            }
            consolidation(ctx, view, out);
            budgets(ctx, view, out);
        }
    }
}

/// Where to point when `spec.disruption.<field>` is missing: the disruption block, or `spec`.
fn missing_at(view: &NodePoolView<'_>) -> FieldPath {
    let disruption = FieldPath::parse("spec.disruption");
    if view.obj.value(&disruption).is_some() {
        disruption
    } else {
        FieldPath::parse("spec")
    }
}

fn why<'v>(view: &'v NodePoolView<'_>) -> &'v str {
    view.gpu
        .as_ref()
        .map(|g| g.reason.as_str())
        .unwrap_or_default()
}

/// An always-active budget that allows no underutilization disruption.
fn blocks_underutilized(budget: &Budget) -> bool {
    budget.schedule.is_none()
        && matches!(budget.nodes.trim(), "0" | "0%")
        && (budget.reasons.is_empty() || budget.reasons.iter().any(|r| r == "Underutilized"))
}

fn consolidation(ctx: &Context<'_>, view: &NodePoolView<'_>, out: &mut Vec<Diagnostic>) {
    let disruption = view.pool.spec.disruption.as_ref();
    if disruption.and_then(|d| d.consolidate_after.as_deref()) == Some("Never") {
        return;
    }
    if disruption.is_some_and(|d| d.budgets.iter().any(blocks_underutilized)) {
        return;
    }
    let set = disruption.and_then(|d| d.consolidation_policy.as_deref());
    let policy = set.unwrap_or(DEFAULT_POLICY);
    if policy != DEFAULT_POLICY && policy != "Balanced" {
        return;
    }
    let (path, how) = match set {
        Some(_) => (
            FieldPath::parse("spec.disruption.consolidationPolicy"),
            format!("consolidationPolicy {policy}"),
        ),
        None => (
            missing_at(view),
            format!("no consolidationPolicy, so the default {DEFAULT_POLICY},"),
        ),
    };
    let d = ctx.diag(
        &META,
        view.obj,
        &path,
        format!(
            "GPU NodePool ({}) has {how} which lets Karpenter replace or drain running GPU \
             nodes it deems underutilized, killing model servers and jobs mid-request",
            why(view)
        ),
    );
    let d = if set.is_some() {
        d
    } else {
        // Pointing at `spec:` or `disruption:`, the key reads better than the block's start.
        ctx.diag_key(&META, view.obj, &path, d.message)
    };
    out.push(d.with_help("set spec.disruption.consolidationPolicy: WhenEmpty"));
}

fn budgets(ctx: &Context<'_>, view: &NodePoolView<'_>, out: &mut Vec<Diagnostic>) {
    let path = FieldPath::parse("spec.disruption.budgets");
    let help =
        "add spec.disruption.budgets: [{nodes: \"1\"}] (a small absolute number of GPU nodes)";
    match view.obj.value(&path) {
        None | Some(Value::Null) => out.push(
            ctx.diag_key(
                &META,
                view.obj,
                &missing_at(view),
                format!(
                    "GPU NodePool ({}) has no disruption budget: the CRD default (nodes: \
                     {DEFAULT_BUDGET}) lets Karpenter disrupt {DEFAULT_BUDGET} of its GPU nodes \
                     at once (consolidation, drift, expiry)",
                    why(view)
                ),
            )
            .with_help(help),
        ),
        Some(Value::Array(items)) if items.is_empty() => out.push(
            ctx.diag_key(
                &META,
                view.obj,
                &path,
                format!(
                    "GPU NodePool ({}) has an empty budgets list: no budget at all, Karpenter may \
                     disrupt every GPU node at once (the {DEFAULT_BUDGET} default applies only \
                     when budgets is absent)",
                    why(view)
                ),
            )
            .with_help(help),
        ),
        _ => {}
    }
}
