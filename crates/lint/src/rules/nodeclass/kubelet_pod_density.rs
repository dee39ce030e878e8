//! KK012: `spec.kubelet.maxPods` unset where pod density is not ENI-based, or `spec.kubelet`
//! (maxPods, kubeReserved, systemReserved) different from the kubelet flags in the userData.

use std::collections::BTreeMap;

use kk_model::quantity::Quantity;
use kk_model::{FieldPath, Pos};
use serde_json::Value;

use crate::context::{Context, NodeClassView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports an EC2NodeClass whose `spec.kubelet` does not describe the kubelet its nodes really run:
- `spec.kubelet.maxPods` unset on a cluster that does not use the AWS VPC CNI: the linted
  Kubespray vars set `kube_network_plugin` to something else (Kubespray's default is calico), or,
  when no Kubespray vars are linted, the class is `amiFamily: Custom` (its userData starts a
  self-managed kubelet);
- `maxPods`, `kubeReserved` or `systemReserved` different from the `--max-pods`,
  `--kube-reserved` or `--system-reserved` flags in the class's own `userData` (quantities are
  compared by value: `1Gi` equals `1024Mi`);
- for `amiFamily: Custom` userData that starts the kubelet (`kubeadm join`,
  `KUBELET_EXTRA_ARGS`): a `spec.kubelet` value with no matching flag, so the kubelet keeps its
  own default (110 pods, nothing reserved).

## Why
Karpenter picks instance types from what it believes a node can hold. Without `maxPods` it
assumes VPC-CNI density, one pod per secondary ENI address (`ENIs × (IPs per ENI − 1) + 2`: 29
on an m6i.large, 234 on an m7i.8xlarge), while a kubeadm kubelet on Calico or Cilium allows 110
whatever the size. Karpenter then overstates large instances (pods stay pending on a full node
it thought had room) and understates small ones (it launches more nodes than needed). Reserved
resources work the same way: what `spec.kubelet` says is what Karpenter subtracts from capacity;
with `amiFamily: Custom` nothing passes those values to the kubelet but the userData.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: cpu
spec:
  amiFamily: Custom
  kubelet:
    maxPods: 64
  userData: |
    #!/bin/bash
    echo "KUBELET_EXTRA_ARGS=--max-pods=110" >/etc/sysconfig/kubelet
    kubeadm join api.example.internal:6443 --token "$TOKEN" \
      --discovery-token-ca-cert-hash "$CA_CERT_HASH"
```

## Fix
Set `spec.kubelet.maxPods` (and `kubeReserved` / `systemReserved` if you reserve anything) and
pass the same values to the kubelet in userData:
```yaml
  kubelet:
    maxPods: 110
    kubeReserved: {cpu: 100m, memory: 512Mi}
```
```bash
KUBELET_EXTRA_ARGS=... --max-pods=110 --kube-reserved=cpu=100m,memory=512Mi
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK012",
    name: "kubelet-pod-density",
    severity: Severity::Warning,
    summary: "spec.kubelet maxPods is unset off the VPC CNI, or maxPods / reserved resources differ from the userData's kubelet flags",
    doc: DOC,
    advice: None,
};

pub struct KubeletPodDensity;

/// The kubelet's own `--max-pods` default.
const KUBELET_DEFAULT_MAX_PODS: i64 = 110;

/// Why the cluster is not on the VPC CNI, or `None` when that is not known (or it is).
fn non_vpc_cni_evidence(ctx: &Context<'_>, view: &NodeClassView<'_>) -> Option<String> {
    if ctx.group_vars.is_empty() {
        return (view.class.spec.ami_family.as_deref() == Some("Custom"))
            .then(|| "amiFamily Custom and no Kubespray vars linted".to_owned());
    }
    let plugins: Vec<String> = ctx
        .group_vars
        .iter()
        .map(|v| {
            v.embedded
                .doc
                .value
                .get("kube_network_plugin")
                .and_then(Value::as_str)
                .unwrap_or("calico")
                .to_owned()
        })
        .collect();
    if plugins
        .iter()
        .any(|p| p.contains("vpc-cni") || p.contains("vpc_cni"))
    {
        return None;
    }
    Some(format!("kube_network_plugin is {}", plugins[0]))
}

/// A `k=v,k=v` kubelet map flag value.
fn parse_map(value: &str) -> BTreeMap<String, String> {
    value
        .split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// Whether two resource maps say the same, quantities compared by value.
fn same_map(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k).is_some_and(|w| {
                v == w
                    || matches!((Quantity::parse(v), Quantity::parse(w)), (Ok(x), Ok(y)) if x == y)
            })
        })
}

fn show_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Rule for KubeletPodDensity {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let ud_path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let kubelet = view.class.spec.kubelet.as_ref();
            let max_pods = kubelet.and_then(|k| k.max_pods);
            let script = view.class.spec.user_data.as_deref().unwrap_or("");
            let custom = view.class.spec.ami_family.as_deref() == Some("Custom");
            // A Custom userData that starts the kubelet itself: the only place spec.kubelet can
            // reach the kubelet. A KubeletConfiguration file in it is not compared.
            let starts_kubelet = custom
                && (userdata::joins_with_kubeadm(script) || script.contains("KUBELET_EXTRA_ARGS"));
            let config_file = script.contains("maxPods:") || script.contains("kubeReserved:");
            let at_flag =
                |u: &userdata::FlagUse| ctx.pos_in_string(view.obj, &ud_path, u.line, u.col);
            let at_field = |field: &str| -> Pos {
                view.obj
                    .doc
                    .pos(&FieldPath::parse("spec.kubelet").key(field))
            };

            // maxPods
            let flags = userdata::flag_uses(script, "--max-pods");
            let flag = flags.last();
            match (max_pods, flag) {
                (Some(want), Some(u))
                    if u.value.parse::<i64>().ok() != Some(want) && !u.value.contains('$') =>
                {
                    out.push(
                        ctx.diag_at(
                            &META,
                            view.obj,
                            at_flag(u),
                            format!(
                                "userData starts the kubelet with --max-pods={} but \
                                 spec.kubelet.maxPods is {want}: Karpenter packs nodes for {want} \
                                 pods while the kubelet admits {}",
                                u.value, u.value
                            ),
                        )
                        .with_help("make spec.kubelet.maxPods and --max-pods the same number"),
                    );
                }
                (None, Some(u)) if !u.value.contains('$') => {
                    out.push(
                        ctx.diag_at(
                            &META,
                            view.obj,
                            at_flag(u),
                            format!(
                                "userData starts the kubelet with --max-pods={} but \
                                 spec.kubelet.maxPods is unset: Karpenter assumes ENI-based pod \
                                 density instead",
                                u.value
                            ),
                        )
                        .with_help(format!("set spec.kubelet.maxPods: {}", u.value)),
                    );
                }
                (Some(want), None)
                    if starts_kubelet && !config_file && want != KUBELET_DEFAULT_MAX_PODS =>
                {
                    out.push(
                        ctx.diag_at(
                            &META,
                            view.obj,
                            at_field("maxPods"),
                            format!(
                                "spec.kubelet.maxPods is {want} but the userData starts the \
                                 kubelet without --max-pods, so it admits \
                                 {KUBELET_DEFAULT_MAX_PODS} pods"
                            ),
                        )
                        .with_help(format!("add --max-pods={want} to KUBELET_EXTRA_ARGS")),
                    );
                }
                (None, None) => {
                    if let Some(evidence) = non_vpc_cni_evidence(ctx, view) {
                        let kubelet_key = FieldPath::parse("spec.kubelet");
                        let at = if view.obj.value(&kubelet_key).is_some() {
                            kubelet_key
                        } else {
                            FieldPath::parse("spec")
                        };
                        out.push(
                            ctx.diag_key(
                                &META,
                                view.obj,
                                &at,
                                format!(
                                    "spec.kubelet.maxPods is unset ({evidence}): Karpenter \
                                     assumes VPC-CNI ENI-based pod density, not the kubelet's \
                                     limit (110 unless --max-pods says otherwise)"
                                ),
                            )
                            .with_help(
                                "set spec.kubelet.maxPods (110 unless the kubelet is told \
                                 otherwise) and pass the same --max-pods to the kubelet",
                            ),
                        );
                    }
                }
                _ => {}
            }

            // kubeReserved / systemReserved
            for (field, flag_name) in [
                ("kubeReserved", "--kube-reserved"),
                ("systemReserved", "--system-reserved"),
            ] {
                let empty = BTreeMap::new();
                let spec_map = kubelet
                    .map(|k| {
                        if field == "kubeReserved" {
                            &k.kube_reserved
                        } else {
                            &k.system_reserved
                        }
                    })
                    .unwrap_or(&empty);
                let flags = userdata::flag_uses(script, flag_name);
                match flags.last() {
                    Some(u) if !u.value.contains('$') => {
                        let flag_map = parse_map(&u.value);
                        if !same_map(spec_map, &flag_map) {
                            let spec_text = if spec_map.is_empty() {
                                "unset".to_owned()
                            } else {
                                show_map(spec_map)
                            };
                            out.push(
                                ctx.diag_at(
                                    &META,
                                    view.obj,
                                    at_flag(u),
                                    format!(
                                        "userData starts the kubelet with {flag_name}={} but \
                                         spec.kubelet.{field} is {spec_text}: Karpenter computes \
                                         allocatable resources the node does not have",
                                        u.value
                                    ),
                                )
                                .with_help(format!(
                                    "make spec.kubelet.{field} and {flag_name} say the same"
                                )),
                            );
                        }
                    }
                    None if !spec_map.is_empty() && starts_kubelet && !config_file => {
                        out.push(
                            ctx.diag_at(
                                &META,
                                view.obj,
                                at_field(field),
                                format!(
                                    "spec.kubelet.{field} is {} but the userData starts the \
                                     kubelet without {flag_name}, so it reserves nothing there",
                                    show_map(spec_map)
                                ),
                            )
                            .with_help(format!(
                                "add {flag_name}={} to KUBELET_EXTRA_ARGS",
                                show_map(spec_map)
                            )),
                        );
                    }
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_maps_compare_by_quantity() {
        let a = parse_map("cpu=100m,memory=1Gi");
        let b = parse_map("memory=1024Mi,cpu=0.1");
        assert!(same_map(&a, &b));
        assert!(!same_map(&a, &parse_map("cpu=100m")));
        assert!(!same_map(&a, &parse_map("cpu=200m,memory=1Gi")));
    }
}

#[cfg(test)]
mod evidence_tests {
    use crate::{Config, Input};

    fn class(family: &str) -> String {
        format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: c}}\nspec:\n  {family}\n  amiSelectorTerms: [{{alias: al2023@v20260827}}]\n  role: r\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n"
        )
    }

    fn vars(plugin: &str) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: v}}\ndata:\n  group_vars.yml: |\n    kube_network_plugin: {plugin}\n"
        )
    }

    fn kk012(files: &[String]) -> usize {
        let inputs: Vec<Input> = files
            .iter()
            .enumerate()
            .map(|(i, t)| Input::new(format!("{i}.yaml"), t.clone()))
            .collect();
        crate::lint(&inputs, &Config::default())
            .unwrap()
            .diagnostics
            .iter()
            .filter(|d| d.code == "KK012")
            .count()
    }

    #[test]
    fn unset_max_pods_needs_evidence() {
        // No vars: only Custom classes are assumed off the VPC CNI.
        assert_eq!(kk012(&[class("amiFamily: Custom")]), 1);
        assert_eq!(kk012(&[class("amiFamily: AL2023")]), 0);
        // Vars decide for every class.
        assert_eq!(kk012(&[class("amiFamily: AL2023"), vars("calico")]), 1);
        assert_eq!(kk012(&[class("amiFamily: Custom"), vars("aws-vpc-cni")]), 0);
    }
}
