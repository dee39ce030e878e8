//! KK017: a NodePool's nodeClassRef must name an EC2NodeClass that exists.

use std::collections::BTreeSet;

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Class;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool whose `spec.template.spec.nodeClassRef` (group `karpenter.k8s.aws`, kind
`EC2NodeClass`) names an EC2NodeClass that is not among the linted objects. Runs only when at
least one EC2NodeClass is linted, so checking a directory of NodePools alone stays quiet.

## Why
Karpenter cannot launch anything for such a pool: it reports the NodePool `NodeClassReady=False`
and pods that only this pool could serve stay Pending. The apiserver accepts the NodePool, so
nothing fails at apply time.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: kubean-aws-gpus      # the EC2NodeClass is kubean-aws-gpu
```

## Fix
Correct the name, or add the EC2NodeClass to the manifests you apply (and lint) with the pool.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK017",
    name: "missing-nodeclass",
    severity: Severity::Error,
    summary: "NodePool whose nodeClassRef names an EC2NodeClass that does not exist",
    doc: DOC,
    advice: None,
};

pub struct MissingNodeClass;

impl Rule for MissingNodeClass {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        // Raw objects, so a node class that fails to deserialise still counts as present.
        let names: BTreeSet<&str> = ctx
            .objects
            .iter()
            .filter(|o| o.class == Class::EC2NodeClass)
            .map(|o| o.name.as_str())
            .collect();
        if names.is_empty() {
            return;
        }
        for view in &ctx.node_pools {
            let r = &view.pool.spec.template.spec.node_class_ref;
            if r.group != "karpenter.k8s.aws" || r.kind != "EC2NodeClass" {
                continue;
            }
            if names.contains(r.name.as_str()) {
                continue;
            }
            let path = FieldPath::parse("spec.template.spec.nodeClassRef.name");
            let mut d = ctx.diag(
                &META,
                view.obj,
                &path,
                format!(
                    "nodeClassRef names EC2NodeClass {:?}, which is not defined: Karpenter \
                     launches nothing for this pool",
                    r.name
                ),
            );
            d = match closest(&r.name, &names) {
                Some(near) => d.with_help(format!("did you mean {near:?}?")),
                None => d.with_help(format!(
                    "defined EC2NodeClasses: {}",
                    names.iter().copied().collect::<Vec<_>>().join(", ")
                )),
            };
            out.push(d);
        }
    }
}

/// The defined name within a few edits of `name`, if one is clearly closest.
fn closest<'a>(name: &str, names: &BTreeSet<&'a str>) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (edit_distance(name, n), *n))
        .filter(|(d, n)| *d <= 3.max(n.len() / 4))
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            row.push((prev[j] + cost).min(prev[j + 1] + 1).min(row[j] + 1));
        }
        prev = row;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_near_name() {
        let names = BTreeSet::from(["kubean-aws-gpu", "kubean-aws-cpu", "other"]);
        assert_eq!(closest("kubean-aws-gpus", &names), Some("kubean-aws-gpu"));
        assert_eq!(closest("zzzzzzzzzzzzzz", &names), None);
    }
}
