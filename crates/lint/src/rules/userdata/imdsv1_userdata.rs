//! KK008: userData that reads instance metadata without an IMDSv2 token, on a node class where
//! IMDSv2 is required (Karpenter's default).

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports each `curl`/`wget` command in an EC2NodeClass's `userData` that reads the instance
metadata service (`/latest/meta-data/`, `/latest/dynamic/`, `/latest/user-data`) without an
`X-aws-ec2-metadata-token` header, when `spec.metadataOptions.httpTokens` is `required` or not
set (Karpenter's default is `required`).

## Why
With `httpTokens: required` IMDS answers token-less (IMDSv1) requests with `401 Unauthorized`.
The seed runbook's userData reads the instance ID and zone that way: `curl -s` prints nothing,
the provider ID becomes `aws:////`, the kubelet registers under a name Karpenter never matches,
and after 15 minutes Karpenter deletes the NodeClaim and terminates the instance. Every launch
repeats it.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: cpu
spec:
  amiFamily: Custom
  userData: |
    #!/bin/bash
    INSTANCE_ID="$(curl -s http://169.254.169.254/latest/meta-data/instance-id)"
```

## Fix
Fetch a session token first and send it with every metadata request:
```bash
TOKEN="$(curl -sS -X PUT http://169.254.169.254/latest/api/token \
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600')"
INSTANCE_ID="$(curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" \
  http://169.254.169.254/latest/meta-data/instance-id)"
```
Setting `metadataOptions.httpTokens: optional` also works, but re-opens IMDSv1 to every process
on the node.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK008",
    name: "imdsv1-userdata",
    severity: Severity::Error,
    summary: "userData reads instance metadata with IMDSv1 while httpTokens is required (the default)",
    doc: DOC,
    advice: None,
};

pub struct ImdsV1UserData;

/// Metadata paths that need a token under IMDSv2 (the token endpoint itself does not).
const METADATA_PATHS: &[&str] = &["/latest/meta-data", "/latest/dynamic", "/latest/user-data"];

impl Rule for ImdsV1UserData {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            let tokens = view.http_tokens();
            if tokens != "required" {
                continue;
            }
            let explicit = view
                .class
                .spec
                .metadata_options
                .as_ref()
                .is_some_and(|m| m.http_tokens.is_some());
            let setting = if explicit {
                "metadataOptions.httpTokens is required"
            } else {
                "httpTokens defaults to required"
            };
            for cmd in userdata::commands(script) {
                if !is_imdsv1_call(&cmd.text) {
                    continue;
                }
                let pos = ctx.pos_in_string(view.obj, &path, cmd.line, cmd.col);
                out.push(
                    ctx.diag_at(
                        &META,
                        view.obj,
                        pos,
                        format!(
                            "userData line {} reads instance metadata without an IMDSv2 token, but \
                             {setting}: IMDS answers 401 and the node never joins",
                            cmd.line
                        ),
                    )
                    .with_help(
                        "get a token with curl -X PUT http://169.254.169.254/latest/api/token -H \
                         'X-aws-ec2-metadata-token-ttl-seconds: 21600' and pass it as -H \
                         \"X-aws-ec2-metadata-token: $TOKEN\"",
                    ),
                );
            }
        }
    }
}

/// A curl/wget command that reads a metadata path and sends no session token.
fn is_imdsv1_call(command: &str) -> bool {
    let fetches = command
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .any(|w| w == "curl" || w == "wget");
    fetches
        && METADATA_PATHS.iter().any(|p| command.contains(p))
        && !command
            .to_ascii_lowercase()
            .contains("x-aws-ec2-metadata-token:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_less_calls_only() {
        assert!(is_imdsv1_call(
            "INSTANCE_ID=\"$(curl -s http://169.254.169.254/latest/meta-data/instance-id)\""
        ));
        assert!(is_imdsv1_call(
            "wget -qO- $IMDS/latest/dynamic/instance-identity/document"
        ));
        assert!(!is_imdsv1_call(
            "curl -sS -H \"X-aws-ec2-metadata-token: $T\" \"$IMDS/latest/meta-data/$1\""
        ));
        assert!(!is_imdsv1_call(
            "curl -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600'"
        ));
        assert!(!is_imdsv1_call("echo /latest/meta-data"));
    }
}
