//! KK035: `amiFamily: Custom` with no `userData`: the instance boots and never joins.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports an EC2NodeClass with `amiFamily: Custom` and no `spec.userData` (or an empty one).

## Why
With `Custom` Karpenter generates no bootstrap at all (it holds for every Karpenter v1 release,
1.0 to 1.15): the launch template's user data is exactly `spec.userData`. Without it nothing
starts a kubelet that joins this cluster, so every instance Karpenter launches boots, never
registers, and is terminated after Karpenter's registration timeout (15 minutes) — then the
next one is launched, billed and terminated the same way.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: custom
spec:
  amiFamily: Custom
  amiSelectorTerms:
    - id: ami-0123456789abcdef0
```

## Fix
Give the bootstrap the AMI needs (for a kubeadm-built cluster, the join with the
`karpenter.sh/unregistered:NoExecute` taint and Karpenter's provider ID: see KK010), or use a
family Karpenter bootstraps itself (`alias: al2023@v20260827`).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK035",
    name: "custom-family-without-userdata",
    severity: Severity::Error,
    summary: "amiFamily Custom without userData: instances boot and never join",
    doc: DOC,
    advice: None,
};

pub struct CustomFamilyWithoutUserData;

impl Rule for CustomFamilyWithoutUserData {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            let custom = view
                .class
                .spec
                .ami_family
                .as_deref()
                .is_some_and(|f| f.eq_ignore_ascii_case("custom"));
            let empty = view
                .class
                .spec
                .user_data
                .as_deref()
                .is_none_or(|u| u.trim().is_empty());
            if custom && empty {
                out.push(
                    ctx.diag(
                        &META,
                        view.obj,
                        &FieldPath::parse("spec.amiFamily"),
                        "amiFamily Custom has no userData: Karpenter adds no bootstrap, so its \
                         instances boot, never join, and are replaced every 15 minutes",
                    )
                    .with_help(
                        "add the userData that joins this cluster, or select a family Karpenter \
                         bootstraps (alias al2023@v<YYYYMMDD>)",
                    ),
                );
            }
        }
    }
}
