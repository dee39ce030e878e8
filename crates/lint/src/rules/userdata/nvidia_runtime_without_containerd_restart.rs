//! KK023: userData that makes nvidia containerd's runtime with `nvidia-ctk` but never restarts
//! containerd afterwards.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports an EC2NodeClass whose `userData` runs `nvidia-ctk runtime configure` for containerd
when no later command restarts containerd (`systemctl restart containerd`, `reload-or-restart`,
`try-restart`, or `kill`/`stop` followed by a start).

## Why
`nvidia-ctk runtime configure` only rewrites containerd's config file. On an AMI whose
containerd is enabled, containerd is already running when cloud-init runs the userData, and
`systemctl enable --now containerd` (or `start`) leaves a running unit alone: the NVIDIA runtime
never takes effect. The device plugin then finds no GPU (it crash-loops with
`--fail-on-init-error=true`, or idles without it), the node never advertises `nvidia.com/gpu`,
and Karpenter, which waits for every extended resource of the instance type, never initializes
it. There is no initialization timeout: the node stays, billed.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiFamily: Custom
  userData: |
    #!/bin/bash
    nvidia-ctk runtime configure --runtime=containerd --set-as-default
    systemctl enable --now containerd
    kubeadm join api.demo.internal:6443 --token "$TOKEN" --discovery-token-ca-cert-hash "$HASH"
```

## Fix
Restart containerd after configuring it, and check the running containerd uses the runtime
before joining:
```bash
nvidia-ctk runtime configure --runtime=containerd --set-as-default
systemctl restart containerd
crictl --runtime-endpoint unix:///run/containerd/containerd.sock info | grep -q '"defaultRuntimeName": *"nvidia"'
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK023",
    name: "nvidia-runtime-without-containerd-restart",
    severity: Severity::Error,
    summary: "userData configures the NVIDIA runtime in containerd's config but never restarts containerd",
    doc: DOC,
    advice: None,
};

pub struct NvidiaRuntimeWithoutRestart;

/// `systemctl <verb> ... containerd[.service]` that makes a running containerd reread its config.
fn restarts_containerd(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    let Some(at) = words.iter().position(|w| w.ends_with("systemctl")) else {
        return false;
    };
    let rest = &words[at + 1..];
    let verb = rest.iter().find(|w| !w.starts_with('-')).copied();
    matches!(verb, Some("restart" | "reload-or-restart" | "try-restart"))
        && rest.iter().any(|w| {
            matches!(
                w.trim_matches(['"', '\'']),
                "containerd" | "containerd.service"
            )
        })
}

impl Rule for NvidiaRuntimeWithoutRestart {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            let commands = userdata::commands(script);
            let Some(i) = commands.iter().position(|c| {
                c.text.contains("nvidia-ctk")
                    && c.text.contains("runtime")
                    && c.text.contains("configure")
                    && !c.text.contains("--runtime=docker")
                    && !c.text.contains("--runtime=crio")
            }) else {
                continue;
            };
            if commands[i + 1..]
                .iter()
                .any(|c| restarts_containerd(&c.text))
            {
                continue;
            }
            let configure = &commands[i];
            let pos = ctx.pos_in_string(view.obj, &path, configure.line, configure.col);
            out.push(
                ctx.diag_at(
                    &META,
                    view.obj,
                    pos,
                    format!(
                        "userData line {}: nvidia-ctk rewrites containerd's config, but no later \
                         command restarts containerd: the running containerd keeps its old \
                         runtime, the device plugin finds no GPU and the node never initializes",
                        configure.line
                    ),
                )
                .with_help("add `systemctl restart containerd` after nvidia-ctk, then check `crictl info` reports defaultRuntimeName nvidia"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::restarts_containerd;

    #[test]
    fn restart_forms() {
        assert!(restarts_containerd("systemctl restart containerd"));
        assert!(restarts_containerd(
            "/usr/bin/systemctl --no-block restart containerd.service"
        ));
        assert!(restarts_containerd(
            "systemctl restart containerd || fail \"x\""
        ));
        assert!(!restarts_containerd("systemctl enable --now containerd"));
        assert!(!restarts_containerd("systemctl restart kubelet"));
    }
}
