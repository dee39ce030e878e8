//! KK013: a NodePool that may launch spot instances needs more than a handful of instance types.

use kk_karpenter::labels::{INSTANCE_FAMILY, INSTANCE_TYPE};
use std::collections::BTreeSet;

use kk_model::FieldPath;
use kk_model::karpenter::NodeSelectorRequirement;

use crate::context::{Context, NodePoolView, capacity_allowed as allows};
use crate::diagnostic::{Diagnostic, Severity};
use crate::gpu::family_of;
use crate::rule::{Rule, RuleMeta};

/// Fewer instance types than this in a spot pool without `minValues` is reported. Four is the
/// minimum seed 002 settles for (two families × two sizes) in a workshop; production spot fleets
/// want more.
pub const MIN_SPOT_INSTANCE_TYPES: usize = 4;

const SIZE: &str = "karpenter.k8s.aws/instance-size";

pub const DOC: &str = r#"
## What
Reports a NodePool whose `karpenter.sh/capacity-type` requirement allows `spot` and whose
requirements allow fewer than 4 instance types, when no requirement sets `minValues`. The
count is the `node.kubernetes.io/instance-type` `In` values when the pool names instance types,
otherwise instance families × instance sizes when both are given with `In` (an upper bound:
not every family comes in every size); other requirements on those keys (`NotIn`, a second
`In`) narrow it. A pool that names only families, or only sizes, is not counted. A pool without
a capacity-type requirement launches on-demand only (Karpenter's default) and is not reported.

## Why
Spot capacity is per instance type and zone, and it runs out: "A single instance type is how
you get InsufficientInstanceCapacity." Karpenter marks a spot offering that failed as
unavailable for three minutes and tries the next one; with two or three types the list is soon
empty. Then the pool falls back to on-demand at on-demand prices (when allowed) or leaves the
pods Pending. Diversifying across families and sizes is what makes spot work; `minValues` makes
Karpenter keep at least that many values of a requirement in every launch request, so a launch
never quietly narrows to one type.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: inference
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["g5.xlarge"]       # one type: one ICE away from nothing
```

## Fix
Allow more families and sizes, and set `minValues` on the widest requirement:
```yaml
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["g5", "g6", "g6e"]
          minValues: 2
        - key: karpenter.k8s.aws/instance-size
          operator: In
          values: ["xlarge", "2xlarge", "4xlarge"]
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK013",
    name: "spot-too-few-instance-types",
    severity: Severity::Warning,
    summary: "Spot NodePool that allows too few instance types and sets no minValues",
    doc: DOC,
    advice: None,
};

pub struct SpotTooFewInstanceTypes;

impl Rule for SpotTooFewInstanceTypes {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            if let Some(d) = check_pool(ctx, view) {
                out.push(d);
            }
        }
    }
}

fn check_pool(ctx: &Context<'_>, view: &NodePoolView<'_>) -> Option<Diagnostic> {
    let reqs = &view.pool.spec.template.spec.requirements;
    if !allows(reqs, "spot") || reqs.iter().any(|r| r.min_values.is_some()) {
        return None;
    }
    let (types, at) = allowed_types(reqs)?;
    if types.is_empty() || types.len() >= MIN_SPOT_INSTANCE_TYPES {
        return None;
    }
    let fallback = if allows(reqs, "on-demand") {
        "Karpenter falls back to on-demand at on-demand prices"
    } else {
        "pods stay Pending until spot capacity returns"
    };
    let shown: Vec<&str> = types.iter().map(String::as_str).collect();
    let path = FieldPath::parse("spec.template.spec.requirements").index(at);
    Some(
        ctx.diag(
            &META,
            view.obj,
            &path,
            format!(
                "spot NodePool allows only {} instance type{} ({}) and sets no minValues: spot \
                 capacity for so few types runs out (InsufficientInstanceCapacity), then {fallback}",
                types.len(),
                if types.len() == 1 { "" } else { "s" },
                shown.join(", ")
            ),
        )
        .with_help(format!(
            "allow at least {MIN_SPOT_INSTANCE_TYPES} instance types (more families and sizes) and \
             set minValues on the widest requirement, e.g. minValues: 2 on {INSTANCE_FAMILY}"
        )),
    )
}

/// Values of every `In` requirement on `key`, intersected, with the index of the first one.
fn in_values(reqs: &[NodeSelectorRequirement], key: &str) -> Option<(BTreeSet<String>, usize)> {
    let mut found: Option<(BTreeSet<String>, usize)> = None;
    for (i, req) in reqs.iter().enumerate() {
        if req.key != key || req.operator != "In" {
            continue;
        }
        let values: BTreeSet<String> = req.values.iter().cloned().collect();
        found = Some(match found {
            None => (values, i),
            Some((have, at)) => (have.intersection(&values).cloned().collect(), at),
        });
    }
    found
}

fn not_in_values(reqs: &[NodeSelectorRequirement], key: &str) -> BTreeSet<String> {
    reqs.iter()
        .filter(|r| r.key == key && r.operator == "NotIn")
        .flat_map(|r| r.values.iter().cloned())
        .collect()
}

/// The instance types the requirements allow at most, and the requirement that names them;
/// `None` when the requirements do not bound the set by name.
fn allowed_types(reqs: &[NodeSelectorRequirement]) -> Option<(BTreeSet<String>, usize)> {
    if reqs.iter().any(|r| {
        [INSTANCE_TYPE, INSTANCE_FAMILY, SIZE].contains(&r.key.as_str())
            && r.operator == "DoesNotExist"
    }) {
        return None;
    }
    let families = in_values(reqs, INSTANCE_FAMILY);
    let sizes = in_values(reqs, SIZE);
    let (candidates, at) = match (in_values(reqs, INSTANCE_TYPE), &families, &sizes) {
        (Some(types), _, _) => types,
        (None, Some((families, at)), Some((sizes, _))) => {
            let product = families
                .iter()
                .flat_map(|f| sizes.iter().map(move |s| format!("{f}.{s}")))
                .collect();
            (product, *at)
        }
        _ => return None,
    };
    let no_types = not_in_values(reqs, INSTANCE_TYPE);
    let no_families = not_in_values(reqs, INSTANCE_FAMILY);
    let no_sizes = not_in_values(reqs, SIZE);
    let types = candidates
        .into_iter()
        .filter(|t| {
            let family = family_of(t);
            let size = t.split_once('.').map(|(_, s)| s).unwrap_or_default();
            !no_types.contains(t)
                && !no_families.contains(family)
                && !no_sizes.contains(size)
                && families.as_ref().is_none_or(|(f, _)| f.contains(family))
                && sizes.as_ref().is_none_or(|(s, _)| s.contains(size))
        })
        .collect();
    Some((types, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_karpenter::labels::CAPACITY_TYPE;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn counts_named_types_or_families_times_sizes() {
        let named = [req(INSTANCE_TYPE, "In", &["g5.xlarge", "g6.xlarge"])];
        assert_eq!(allowed_types(&named).unwrap().0.len(), 2);
        let product = [
            req(INSTANCE_FAMILY, "In", &["g5", "g6"]),
            req(SIZE, "In", &["xlarge", "2xlarge"]),
            req(INSTANCE_TYPE, "NotIn", &["g5.2xlarge"]),
        ];
        let (types, at) = allowed_types(&product).unwrap();
        assert_eq!(types.len(), 3);
        assert_eq!(at, 0);
        let narrowed = [
            req(
                INSTANCE_TYPE,
                "In",
                &["g5.xlarge", "g6.xlarge", "m6i.large"],
            ),
            req(INSTANCE_FAMILY, "In", &["g5", "g6"]),
        ];
        assert_eq!(allowed_types(&narrowed).unwrap().0.len(), 2);
        assert!(allowed_types(&[req(INSTANCE_FAMILY, "In", &["g6"])]).is_none());
    }

    #[test]
    fn capacity_type_defaults_to_on_demand() {
        assert!(!allows(&[], "spot"));
        assert!(allows(&[], "on-demand"));
        assert!(allows(&[req(CAPACITY_TYPE, "In", &["spot"])], "spot"));
        assert!(allows(
            &[req(CAPACITY_TYPE, "NotIn", &["on-demand"])],
            "spot"
        ));
        assert!(allows(&[req(CAPACITY_TYPE, "Exists", &[])], "spot"));
        assert!(!allows(&[req(CAPACITY_TYPE, "In", &["on-demand"])], "spot"));
    }
}
