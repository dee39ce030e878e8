//! KK021: an EC2NodeClass whose userData joins with `kubeadm join` but whose AMI selector picks
//! an EKS-optimized image, which has no kubeadm.

use kk_karpenter::ami;
use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports each `amiSelectorTerms[]` entry of an EC2NodeClass that selects an EKS-optimized AMI —
an `alias` (`al2023@v20260827`, `al2@...`, `bottlerocket@...`) or an `ssmParameter` under
`/aws/service/eks/` or `/aws/service/bottlerocket/` — when the class's `userData` runs
`kubeadm join`.

## Why
EKS-optimized images are built to join EKS through their own bootstrap: the AL2023 image installs
`kubelet` and `nodeadm` but no `kubeadm`, and its kubelet unit reads the arguments nodeadm writes,
not a kubeadm drop-in; Bottlerocket does not run a shell userData at all. A `kubeadm join`
userData fails there (`kubeadm: command not found`), the node never registers, and Karpenter
terminates it after its 15-minute registration timeout and launches another one, in a loop.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiFamily: Custom
  amiSelectorTerms:
    - alias: al2023@v20260827
  userData: |
    #!/bin/bash
    kubeadm join api.demo.internal:6443 --token "$TOKEN" --discovery-token-ca-cert-hash "$HASH"
```

## Fix
Select a kubeadm-ready image you built (kubeadm, kubelet, containerd; for GPU pools the NVIDIA
driver and container runtime) by `id` or by tags:
```yaml
  amiSelectorTerms:
    - id: ami-0123456789abcdef0
```
Or keep the EKS-optimized image and join the way it is built to: a nodeadm `NodeConfig` userData
whose kubelet authenticates with the node's IAM identity. In an ElasticCluster spec that is
`joinMethod: iam` on the pool (validate refuses `joinMethod: kubeadm-token` with `ami.alias` or
`ami.ssmRelease`, with the same test as this rule).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK021",
    name: "kubeadm-join-on-eks-ami",
    severity: Severity::Error,
    summary: "userData joins with kubeadm but the AMI selector picks an EKS-optimized image, which has no kubeadm",
    doc: DOC,
    advice: None,
};

pub struct KubeadmJoinOnEksAmi;

impl Rule for KubeadmJoinOnEksAmi {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            if !userdata::joins_with_kubeadm(script) {
                continue;
            }
            let help = "select a kubeadm-ready image by id (ami.id in the spec), or join the EKS \
                        image with nodeadm and the node's IAM identity (joinMethod: iam)";
            for (i, term) in view.class.spec.ami_selector_terms.iter().enumerate() {
                let base = FieldPath::parse("spec.amiSelectorTerms").index(i);
                let found = match (&term.alias, &term.ssm_parameter) {
                    (Some(alias), _) if ami::alias_is_eks_optimized(alias) => {
                        Some(("alias", format!("alias {alias}")))
                    }
                    (_, Some(param)) if ami::ssm_parameter_is_eks_optimized(param) => {
                        Some(("ssmParameter", format!("ssmParameter {param}")))
                    }
                    _ => None,
                };
                let Some((field, what)) = found else {
                    continue;
                };
                out.push(
                    ctx.diag(
                        &META,
                        view.obj,
                        &base.key(field),
                        format!(
                            "{what} selects an EKS-optimized AMI, which has no kubeadm, but the \
                             userData runs kubeadm join: the node never registers and is replaced \
                             every 15 minutes"
                        ),
                    )
                    .with_help(help),
                );
            }
        }
    }
}
