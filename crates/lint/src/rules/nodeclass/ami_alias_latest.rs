//! KK007: an AMI selector that follows AWS's release train (`@latest`, a "recommended" SSM
//! parameter) turns every AMI release into drift.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports `amiSelectorTerms[].alias` ending in `@latest` (`al2023@latest`, `bottlerocket@latest`),
and `amiSelectorTerms[].ssmParameter` naming a `.../recommended/...` public parameter, which
AWS moves the same way.

## Why
Karpenter resolves the selector continuously. When AWS publishes a new AMI the node class's
resolved AMI changes, every node launched from the old one is drifted, and Karpenter replaces
them all on AWS's release schedule instead of yours. On a GPU fleet the new AMI can bring a
new NVIDIA driver that breaks images built against the old CUDA version. The Karpenter docs
call `@latest` a pre-production setting.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiSelectorTerms:
    - alias: al2023@latest
```

## Fix
Pin a release and upgrade deliberately:
```yaml
  amiSelectorTerms:
    - alias: al2023@v20260827
```
The current release for a Kubernetes version is the SSM parameter
`/aws/service/eks/optimized-ami/<version>/amazon-linux-2023/x86_64/nvidia/recommended/release_version`
(`v` + its date suffix). With `amiFamily: Custom`, select your own AMI by `id` or by tags.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK007",
    name: "ami-alias-latest",
    severity: Severity::Warning,
    summary: "AMI selector that follows the latest release (alias @latest): every AMI release replaces every node",
    doc: DOC,
    advice: Some(crate::diagnostic::Advice {
        alternative: "following `@latest`",
        cost: "every AMI release (for GPU classes, a new NVIDIA driver) drifting and replacing every node of the class on AWS's schedule",
    }),
};

pub struct AmiAliasLatest;

impl Rule for AmiAliasLatest {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            let gpu = ctx.pools_of_class(view.name()).any(|p| p.gpu.is_some());
            let fleet = if gpu {
                "every GPU node of this class (a driver bump can break CUDA images)"
            } else {
                "every node of this class"
            };
            for (i, term) in view.class.spec.ami_selector_terms.iter().enumerate() {
                let base = FieldPath::parse("spec.amiSelectorTerms").index(i);
                if let Some(alias) = term.alias.as_deref().filter(|a| a.ends_with("@latest")) {
                    let family = alias.trim_end_matches("@latest");
                    out.push(
                        ctx.diag(
                            &META,
                            view.obj,
                            &base.key("alias"),
                            format!(
                                "alias {alias} follows every AMI release: each release drifts and \
                                 replaces {fleet}"
                            ),
                        )
                        .with_help(format!(
                            "pin a release, e.g. {family}@v20260827, and upgrade deliberately"
                        )),
                    );
                }
                if let Some(param) = term
                    .ssm_parameter
                    .as_deref()
                    .filter(|p| p.contains("/recommended"))
                {
                    out.push(
                        ctx.diag(
                            &META,
                            view.obj,
                            &base.key("ssmParameter"),
                            format!(
                                "ssmParameter {param} moves with every AMI release: each release \
                                 drifts and replaces {fleet}"
                            ),
                        )
                        .with_help(
                            "select a pinned AMI by id, or a versioned alias like al2023@v20260827",
                        ),
                    );
                }
            }
        }
    }
}
