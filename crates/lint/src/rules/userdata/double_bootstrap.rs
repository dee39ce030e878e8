//! KK039: userData that runs its own bootstrap on a family Karpenter bootstraps itself.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports a command in the `userData` of an `al2` or `al2023` EC2NodeClass that runs
`/etc/eks/bootstrap.sh` or `nodeadm init`.

## Why
For these families Karpenter (v1.0 to 1.15) merges your userData with its own bootstrap: on
AL2 it appends a part that runs `/etc/eks/bootstrap.sh` with the cluster's endpoint, CA,
NodeClaim labels and taints; on AL2023 it adds a `NodeConfig` that `nodeadm` applies at boot.
A second bootstrap of yours runs beside it: on AL2 the kubelet is configured twice (the last
writer wins, often without Karpenter's `karpenter.sh/unregistered` taint or labels, and the
node never registers as its NodeClaim); on AL2023 `/etc/eks/bootstrap.sh` does not exist (the
script fails) and a second `nodeadm init` races the first. Custom bootstraps belong to
`amiFamily: Custom`.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2@v20250101
  userData: |
    #!/bin/bash
    /etc/eks/bootstrap.sh my-cluster --kubelet-extra-args '--max-pods=110'
```

## Fix
Give Karpenter the settings instead (`spec.kubelet` for kubelet flags, a `NodeConfig` part for
AL2023) and keep only your own preparation in userData; or switch to `amiFamily: Custom` and
own the whole bootstrap (see KK010).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK039",
    name: "double-bootstrap",
    severity: Severity::Error,
    summary: "userData runs bootstrap.sh or nodeadm init on a family Karpenter already bootstraps",
    doc: DOC,
    advice: None,
};

pub struct DoubleBootstrap;

/// The bootstrap this command runs, if any.
fn bootstrap_of(command: &str) -> Option<&'static str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        let w = w.trim_matches(|c| c == '"' || c == '\'');
        if w.ends_with("/etc/eks/bootstrap.sh") {
            return Some("/etc/eks/bootstrap.sh");
        }
        if (w == "nodeadm" || w.ends_with("/nodeadm"))
            && words.get(i + 1).is_some_and(|n| *n == "init")
        {
            return Some("nodeadm init");
        }
    }
    None
}

impl Rule for DoubleBootstrap {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let family = view.family();
            let (name, theirs) = match family.as_deref() {
                Some("al2") => ("al2", "Karpenter appends its own /etc/eks/bootstrap.sh run"),
                Some("al2023") => (
                    "al2023",
                    "Karpenter's NodeConfig already makes nodeadm join",
                ),
                _ => continue,
            };
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            for cmd in userdata::commands(script) {
                let Some(bootstrap) = bootstrap_of(&cmd.text) else {
                    continue;
                };
                let extra = if name == "al2023" && bootstrap == "/etc/eks/bootstrap.sh" {
                    " (and AL2023 has no bootstrap.sh: the command fails)"
                } else {
                    ""
                };
                out.push(
                    ctx.diag_at(
                        &META,
                        view.obj,
                        ctx.pos_in_string(view.obj, &path, cmd.line, cmd.col),
                        format!(
                            "{bootstrap} in the userData of an {name} node class: {theirs}, so \
                             the node bootstraps twice{extra}"
                        ),
                    )
                    .with_help(
                        "pass kubelet settings through spec.kubelet (or a NodeConfig part), or use \
                         amiFamily: Custom and own the bootstrap",
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bootstrap_of;

    #[test]
    fn bootstrap_commands() {
        assert_eq!(
            bootstrap_of("/etc/eks/bootstrap.sh demo --kubelet-extra-args x"),
            Some("/etc/eks/bootstrap.sh")
        );
        assert_eq!(
            bootstrap_of("sudo /usr/bin/nodeadm init --config-source file:///x"),
            Some("nodeadm init")
        );
        assert_eq!(bootstrap_of("echo nodeadm is there"), None);
        assert_eq!(bootstrap_of("cat /etc/eks/bootstrap.sh.log"), None);
    }
}
