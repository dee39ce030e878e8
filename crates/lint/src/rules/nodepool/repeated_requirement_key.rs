//! KK042: one requirement key written twice in a NodePool's requirements.

use std::collections::BTreeMap;

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a key that appears in more than one entry of a NodePool's
`spec.template.spec.requirements`.

## Why
Karpenter (v1.0 to 1.15, `scheduling.NewNodeSelectorRequirements`) adds every entry to one set
of requirements, intersecting entries of the same key. Two entries that were meant as a
union — `instance-family In [m6i]` and `instance-family In [c6i]` — intersect to nothing and the
pool can launch no instance type at all (its NodeClaims fail "no instance type satisfied
resources and requirements"); a later entry meant to widen an earlier one narrows it instead.
Exactly when the intersection is what you meant (`Gt 4` and `Lt 64`), write it so it says so:
the rule still reports it, with the intersection, for a reader to confirm.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: [m6i]
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: [c6i]
```

## Fix
One entry per key, values joined: `values: [m6i, c6i]`. For a range, keep `Gt`/`Lt` but
consider one comment saying it is a range.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK042",
    name: "repeated-requirement-key",
    severity: Severity::Warning,
    summary: "a requirement key written twice in one NodePool: Karpenter intersects the entries",
    doc: DOC,
    advice: None,
};

pub struct RepeatedRequirementKey;

impl Rule for RepeatedRequirementKey {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let reqs = &view.pool.spec.template.spec.requirements;
            let mut first: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, req) in reqs.iter().enumerate() {
                let Some(&earlier) = first.get(req.key.as_str()) else {
                    first.insert(&req.key, i);
                    continue;
                };
                let both_in = req.operator == "In" && reqs[earlier].operator == "In";
                let common: Vec<&str> = reqs[earlier]
                    .values
                    .iter()
                    .filter(|v| req.values.contains(v))
                    .map(String::as_str)
                    .collect();
                let effect = if both_in && common.is_empty() {
                    "they share no value, so the pool can launch nothing".to_owned()
                } else if both_in {
                    format!("only [{}] remain", common.join(", "))
                } else {
                    "both must hold at once".to_owned()
                };
                let path = FieldPath::parse("spec.template.spec.requirements")
                    .index(i)
                    .key("key");
                out.push(
                    ctx.diag(
                        &META,
                        view.obj,
                        &path,
                        format!(
                            "{} is also required by entry {earlier}: Karpenter intersects the \
                             two ({effect})",
                            req.key
                        ),
                    )
                    .with_help("write one entry per key, with every value it may take"),
                );
            }
        }
    }
}
