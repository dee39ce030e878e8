//! KK040: `metadataOptions.httpTokens: optional` opens IMDSv1 to every process on the node.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports an EC2NodeClass with `spec.metadataOptions.httpTokens: optional`.

## Why
`optional` turns IMDSv1 back on: the instance metadata service then answers a plain GET
without a session token. Any process that can make the node send one request — a server-side
request forgery in any pod on the host network, a proxy, a misconfigured webhook — reads the
node role's credentials from `/latest/meta-data/iam/security-credentials/`. IMDSv2's PUT for a
token is what SSRF usually cannot do. Karpenter's default (v1.0 to 1.15) is `required`, with a
hop limit of 1 that keeps pods off IMDS entirely; `optional` is usually copied from an old
example or set for one script that reads metadata without a token.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  metadataOptions:
    httpTokens: optional
```

## Fix
Leave `httpTokens` at `required` and give scripts a token (see KK008 for the two `curl` lines).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK040",
    name: "imds-tokens-optional",
    severity: Severity::Warning,
    summary: "metadataOptions.httpTokens optional: IMDSv1 hands the node role to any SSRF",
    doc: DOC,
    advice: None,
};

pub struct ImdsTokensOptional;

impl Rule for ImdsTokensOptional {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            if view.http_tokens() != "optional" {
                continue;
            }
            out.push(
                ctx.diag(
                    &META,
                    view.obj,
                    &FieldPath::parse("spec.metadataOptions.httpTokens"),
                    "httpTokens: optional re-opens IMDSv1: one forged GET from the node reads \
                     the node role's credentials",
                )
                .with_help("set httpTokens: required (Karpenter's default) and send a token"),
            );
        }
    }
}
