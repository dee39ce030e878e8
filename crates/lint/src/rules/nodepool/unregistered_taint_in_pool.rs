//! KK037: `karpenter.sh/unregistered` written into a NodePool's taints or startup taints.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool whose `spec.template.spec.taints` or `startupTaints` carry the key
`karpenter.sh/unregistered`, whatever the effect.

## Why
`karpenter.sh/unregistered:NoExecute` is Karpenter's own registration taint (v1.0 and later):
the node registers with it and Karpenter removes it — that one entry, key and effect — once a
NodeClaim owns the node. Written into the pool's template it becomes part of the node's
desired taints: as `taints`, Karpenter keeps putting it back; as a `startupTaint` (or with
another effect, e.g. `NoSchedule`), nothing removes it, since Karpenter removes only the
`NoExecute` entry it added and startup taints belong to a daemon of yours. Either way no pod
without a toleration for it ever runs on the pool's nodes, and consolidation sees them empty.

## Example
```yaml
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      startupTaints:
        - key: karpenter.sh/unregistered
          effect: NoSchedule
```

## Fix
Delete the entry: Karpenter adds and removes the registration taint itself. A custom-AMI
userData registers the kubelet with `karpenter.sh/unregistered:NoExecute` (see KK010); the
pool never names it.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK037",
    name: "unregistered-taint-in-pool",
    severity: Severity::Error,
    summary: "karpenter.sh/unregistered in a NodePool's taints or startup taints: its nodes never take pods",
    doc: DOC,
    advice: None,
};

pub struct UnregisteredTaintInPool;

const KEY: &str = "karpenter.sh/unregistered";

impl Rule for UnregisteredTaintInPool {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let spec = &view.pool.spec.template.spec;
            for (field, taints) in [
                ("taints", &spec.taints),
                ("startupTaints", &spec.startup_taints),
            ] {
                for (i, taint) in taints.iter().enumerate() {
                    if taint.key != KEY {
                        continue;
                    }
                    let path = FieldPath::parse("spec.template.spec")
                        .key(field)
                        .index(i)
                        .key("key");
                    out.push(
                        ctx.diag(
                            &META,
                            view.obj,
                            &path,
                            format!(
                                "{KEY}:{} in {field}: Karpenter adds and removes only its own \
                                 NoExecute registration taint, so this one stays and no pod \
                                 without a toleration for it runs on the pool's nodes",
                                taint.effect
                            ),
                        )
                        .with_help("delete it: Karpenter manages the registration taint itself"),
                    );
                }
            }
        }
    }
}
