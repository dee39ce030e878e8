//! KK011: kubelets (or Kubespray) use `--cloud-provider=external` but the linted bundle has no
//! AWS cloud controller manager.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::{Class, Object};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports each place that makes kubelets run with an external cloud provider — an EC2NodeClass
whose `userData` passes `--cloud-provider=external`, and Kubespray vars with
`cloud_provider: external` — when nothing in the linted set runs the AWS cloud controller
manager. Any of these counts as one:
- a DaemonSet or Deployment with a container image containing `cloud-controller-manager` and an
  argument `--cloud-provider=aws`;
- Helm values of the `aws-cloud-controller-manager` chart (`image.repository` containing
  `cloud-controller-manager`), or a HelmRelease / HelmChart / Argo CD Application of that chart.

Only a set that looks like a whole bundle is judged: it must hold an EC2NodeClass and at least
one cluster-side manifest Karpenter does not own (a Kubean Cluster, ClusterOperation or
inventory/vars ConfigMap, or a DaemonSet). Linting a node class file on its own, or a few
Karpenter files, never reports this: the CCM is usually installed from another file, and
a finding there would be noise.

## Why
A kubelet started with `--cloud-provider=external` registers its Node with the taint
`node.cloudprovider.kubernetes.io/uninitialized:NoSchedule`, and only a running cloud controller
manager removes it. Karpenter waits for that taint (one of the known ephemeral taints) to go
before it marks the NodeClaim initialized, and there is no initialization timeout: nodes stay
uninitialized, pods do not land on them, consolidation ignores them, and every launch adds
another billed instance that never serves. Kubespray's `cloud_provider: external` does the same
to the control-plane and infra nodes.

## Example
A bundle with Kubean objects, an NVIDIA device plugin DaemonSet and this node class, but no
`aws-cloud-controller-manager`:
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: cpu
spec:
  amiFamily: Custom
  userData: |
    #!/bin/bash
    KUBELET_EXTRA_ARGS=--cloud-provider=external --provider-id=${PROVIDER_ID}
```

## Fix
Install the AWS cloud controller manager (chart `aws-cloud-controller-manager` from
kubernetes.github.io/cloud-provider-aws, or its DaemonSet with `--cloud-provider=aws`) on the
control-plane nodes, tolerating `node.cloudprovider.kubernetes.io/uninitialized`, and lint it
together with the rest of the bundle.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK011",
    name: "external-cloud-provider-without-ccm",
    severity: Severity::Error,
    summary: "Kubelets use --cloud-provider=external but the bundle has no AWS cloud controller manager",
    doc: DOC,
    advice: None,
};

pub struct ExternalCloudProviderWithoutCcm;

const CHART: &str = "aws-cloud-controller-manager";

impl Rule for ExternalCloudProviderWithoutCcm {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        if !looks_like_bundle(ctx) || has_aws_ccm(ctx) {
            return;
        }
        let help = "install the AWS cloud controller manager (chart aws-cloud-controller-manager, \
                    args --cloud-provider=aws) and lint it with the bundle";
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            let Some(u) = userdata::flag_uses(script, "--cloud-provider")
                .into_iter()
                .find(|u| u.value == "external")
            else {
                continue;
            };
            let pos = ctx.pos_in_string(view.obj, &path, u.line, u.col);
            out.push(
                ctx.diag_at(
                    &META,
                    view.obj,
                    pos,
                    "the kubelet runs with --cloud-provider=external but the bundle has no AWS \
                     cloud controller manager: nodes keep the taint \
                     node.cloudprovider.kubernetes.io/uninitialized and Karpenter never sees them \
                     initialized",
                )
                .with_help(help),
            );
        }
        let key = FieldPath::parse("cloud_provider");
        for vars in &ctx.group_vars {
            let value = vars.embedded.doc.value.get("cloud_provider");
            if value.and_then(Value::as_str) != Some("external") {
                continue;
            }
            out.push(
                ctx.diag_at(
                    &META,
                    vars.obj,
                    vars.embedded.doc.pos(&key),
                    "Kubespray sets cloud_provider: external but the bundle has no AWS cloud \
                     controller manager: every node keeps the taint \
                     node.cloudprovider.kubernetes.io/uninitialized",
                )
                .with_help(help),
            );
        }
    }
}

/// An EC2NodeClass and something cluster-side that Karpenter does not own.
fn looks_like_bundle(ctx: &Context<'_>) -> bool {
    let cluster_side = !ctx.kubean_clusters.is_empty()
        || !ctx.cluster_operations.is_empty()
        || !ctx.inventories.is_empty()
        || !ctx.group_vars.is_empty()
        || ctx.workloads.iter().any(|w| w.is_daemonset());
    !ctx.node_classes.is_empty() && cluster_side
}

fn has_aws_ccm(ctx: &Context<'_>) -> bool {
    let workload = ctx.workloads.iter().any(|w| {
        matches!(w.obj.kind.as_str(), "DaemonSet" | "Deployment")
            && ["containers", "initContainers"]
                .into_iter()
                .filter_map(|k| w.pod_spec.get(k).and_then(Value::as_array))
                .flatten()
                .any(is_aws_ccm_container)
    });
    workload || ctx.objects.iter().any(is_ccm_chart)
}

pub(crate) fn is_aws_ccm_container(container: &Value) -> bool {
    let image = container.get("image").and_then(Value::as_str).unwrap_or("");
    if !image.contains("cloud-controller-manager") {
        return false;
    }
    let words: Vec<&str> = ["command", "args"]
        .into_iter()
        .filter_map(|k| container.get(k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    words.contains(&"--cloud-provider=aws")
        || words
            .windows(2)
            .any(|w| w[0] == "--cloud-provider" && w[1] == "aws")
}

/// Values of the aws-cloud-controller-manager chart, or a Helm/GitOps object installing it.
fn is_ccm_chart(obj: &Object) -> bool {
    let v = &obj.doc.value;
    let text = |path: &str| obj.value(&FieldPath::parse(path)).and_then(Value::as_str);
    if obj.class == Class::Other && obj.kind.is_empty() {
        let repo = text("image.repository").unwrap_or("");
        let args_aws = v
            .get("args")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("--cloud-provider=aws")));
        return repo.contains("cloud-controller-manager") || (args_aws && v.get("image").is_some());
    }
    [
        "spec.chart",
        "spec.chart.spec.chart",
        "spec.source.chart",
        "spec.chartRef.name",
    ]
    .iter()
    .any(|p| text(p) == Some(CHART))
}

#[cfg(test)]
mod tests {
    use crate::{Config, Input};

    const NODE_CLASS: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: cpu}\nspec:\n  amiFamily: Custom\n  amiSelectorTerms: [{id: ami-0123456789abcdef0}]\n  role: r\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  userData: |\n    KUBELET_EXTRA_ARGS=--cloud-provider=external\n";
    const DAEMONSET: &str = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers: [{name: c, image: busybox}]\n";
    const CCM_VALUES: &str = "image:\n  repository: registry.k8s.io/provider-aws/cloud-controller-manager\n  tag: v1.35.0\nargs: [--v=2, --cloud-provider=aws]\n";

    fn kk011(files: &[(&str, &str)]) -> usize {
        let inputs: Vec<Input> = files.iter().map(|(n, t)| Input::new(*n, *t)).collect();
        crate::lint(&inputs, &Config::default())
            .unwrap()
            .diagnostics
            .iter()
            .filter(|d| d.code == "KK011")
            .count()
    }

    #[test]
    fn only_a_whole_bundle_is_judged() {
        // A node class alone (or with Karpenter's own objects) is not a bundle.
        assert_eq!(kk011(&[("nc.yaml", NODE_CLASS)]), 0);
        assert_eq!(kk011(&[("nc.yaml", NODE_CLASS), ("ds.yaml", DAEMONSET)]), 1);
        // The chart's values count as the CCM.
        assert_eq!(
            kk011(&[
                ("nc.yaml", NODE_CLASS),
                ("ds.yaml", DAEMONSET),
                ("ccm-values.yaml", CCM_VALUES)
            ]),
            0
        );
    }
}
