//! KK041: a Neuron (Inferentia/Trainium) NodePool without the `aws.amazon.com/neuron` taint.

use kk_model::FieldPath;
use kk_model::karpenter::NodePool;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool that asks for AWS Neuron instances (an `inf*` or `trn*` instance family,
category or type, an `aws` accelerator manufacturer, an Inferentia/Trainium accelerator name,
or a `aws.amazon.com/neuron*` limit) and has no `NoSchedule`/`NoExecute` taint with the key
`aws.amazon.com/neuron`. KK002 is the same rule for GPU pools.

## Why
Without the taint any pod that fits lands on these nodes: an `inf2.48xlarge` costs about
$13/hour and a `trn1.32xlarge` about $21/hour, and once ordinary pods sit on them Karpenter's
consolidation keeps them for those pods. The taint is what the Neuron device plugin and the
Neuron scheduler extension expect (their DaemonSets tolerate `aws.amazon.com/neuron`), and what
workloads requesting `aws.amazon.com/neuron` or `neuroncore` tolerate. Holds for every
Karpenter v1 release.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: inferentia
spec:
  template:
    spec:
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: [inf2]
```

## Fix
```yaml
      taints:
        - key: aws.amazon.com/neuron
          value: "true"
          effect: NoSchedule
```
and tolerate it in the Neuron workloads and the device plugin.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK041",
    name: "neuron-pool-untainted",
    severity: Severity::Warning,
    summary: "Neuron (Inferentia/Trainium) NodePool without the aws.amazon.com/neuron taint",
    doc: DOC,
    advice: None,
};

pub struct NeuronPoolUntainted;

const TAINT_KEY: &str = "aws.amazon.com/neuron";

fn neuron_family(value: &str) -> bool {
    let family = value
        .split('.')
        .next()
        .unwrap_or(value)
        .to_ascii_lowercase();
    ["inf", "trn"].iter().any(|p| {
        family
            .strip_prefix(p)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Why `pool` is a Neuron pool, with the path that says so.
pub fn neuron_evidence(pool: &NodePool) -> Option<(String, FieldPath)> {
    let base = FieldPath::parse("spec.template.spec.requirements");
    for (i, req) in pool.spec.template.spec.requirements.iter().enumerate() {
        if req.operator != "In" {
            continue;
        }
        let hit = match req.key.as_str() {
            "karpenter.k8s.aws/instance-family" | "node.kubernetes.io/instance-type" => {
                req.values.iter().any(|v| neuron_family(v))
            }
            "karpenter.k8s.aws/instance-category" => {
                req.values.iter().any(|v| v == "inf" || v == "trn")
            }
            "karpenter.k8s.aws/instance-accelerator-manufacturer" => {
                req.values.iter().any(|v| v == "aws")
            }
            "karpenter.k8s.aws/instance-accelerator-name" => req.values.iter().any(|v| {
                let v = v.to_ascii_lowercase();
                v.starts_with("inferentia") || v.starts_with("trainium")
            }),
            _ => false,
        };
        if hit {
            return Some((
                format!("requirement {} In [{}]", req.key, req.values.join(", ")),
                base.index(i),
            ));
        }
    }
    pool.spec
        .limits
        .keys()
        .find(|k| k.starts_with("aws.amazon.com/neuron"))
        .map(|k| {
            (
                format!("limit {k}"),
                FieldPath::root().key("spec").key("limits").key(k),
            )
        })
}

impl Rule for NeuronPoolUntainted {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let Some((why, _)) = neuron_evidence(&view.pool) else {
                continue;
            };
            let tainted = view.pool.spec.template.spec.taints.iter().any(|t| {
                t.key == TAINT_KEY && (t.effect == "NoSchedule" || t.effect == "NoExecute")
            });
            if tainted {
                continue;
            }
            out.push(
                ctx.diag_key(
                    &META,
                    view.obj,
                    &FieldPath::parse("spec.template.spec"),
                    format!(
                        "Neuron NodePool ({why}) has no {TAINT_KEY} NoSchedule taint: any pod \
                         that fits can land on its Inferentia/Trainium nodes"
                    ),
                )
                .with_help(format!(
                    "add {TAINT_KEY}=true:NoSchedule to spec.template.spec.taints and tolerate it \
                     in Neuron workloads and the device plugin"
                )),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::neuron_family;

    #[test]
    fn neuron_families() {
        for f in ["inf1", "inf2", "trn1", "trn1n", "trn2", "inf2.48xlarge"] {
            assert!(neuron_family(f), "{f}");
        }
        for f in ["g6", "m6i", "p5", "i4i", "t3", "informal", "trn"] {
            assert!(!neuron_family(f), "{f}");
        }
    }
}
