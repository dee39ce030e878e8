//! KK022: the AWS cloud controller manager's cluster ID (`KubernetesClusterID` of its cloud
//! config) is missing or differs from Karpenter's `clusterName`.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::{Context, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};
use crate::rules::cluster::external_cloud_provider_without_ccm::is_aws_ccm_container;

pub const DOC: &str = r#"
## What
For each AWS cloud controller manager (a DaemonSet or Deployment whose container image contains
`cloud-controller-manager` and whose arguments include `--cloud-provider=aws`):
- without `--cloud-config`, a warning: its cluster ID must then come from a
  `kubernetes.io/cluster/<name>` tag on the instance it runs on;
- with `--cloud-config` on a mounted ConfigMap of the linted set, an error when the file sets
  neither `KubernetesClusterID` nor `KubernetesClusterTag` under `[Global]`, or when it differs
  from `settings.clusterName` of the Karpenter Helm values in the set.

## Why
cloud-provider-aws refuses to start without a cluster ID ("AWS cloud failed to find ClusterID",
`pkg/providers/v1/tags.go`): it reads it from its cloud config, or from the
`kubernetes.io/cluster/<id>` tag of its own instance, and exits before
`--allow-untagged-cloud` is looked at. A stopped CCM never removes the
`node.cloudprovider.kubernetes.io/uninitialized` taint, so no node, Karpenter's included, is
ever initialized. Karpenter tags every instance it launches `kubernetes.io/cluster/<clusterName>`;
a CCM with another ID filters its load balancers and security groups by another tag than the
one on those instances.

## Example
```yaml
settings:
  clusterName: demo
controller: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ccm-config, namespace: kube-system}
data:
  cloud.conf: |
    [Global]
    KubernetesClusterID = staging
```
with the CCM DaemonSet mounting `ccm-config` and passing
`--cloud-config=/etc/aws/cloud.conf`.

## Fix
Give the CCM a cloud config with `KubernetesClusterID` equal to Karpenter's `clusterName`
(`kubean-karpenter render` writes one into `cloud/aws-cloud-controller-manager.yaml`), and tag
the instances Karpenter does not launch (control plane, etcd, infra) with
`kubernetes.io/cluster/<clusterName>=owned`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK022",
    name: "ccm-cluster-id",
    severity: Severity::Error,
    summary: "The AWS cloud controller manager's cluster ID is missing or differs from Karpenter's clusterName",
    doc: DOC,
    advice: None,
};

pub struct CcmClusterId;

impl Rule for CcmClusterId {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let cluster_names: Vec<&str> = ctx
            .values
            .iter()
            .filter_map(|v| v.value(&FieldPath::parse("settings.clusterName")))
            .filter_map(Value::as_str)
            .collect();
        for workload in &ctx.workloads {
            if !matches!(workload.obj.kind.as_str(), "DaemonSet" | "Deployment") {
                continue;
            }
            let Some(containers) = workload
                .pod_spec
                .get("containers")
                .and_then(Value::as_array)
            else {
                continue;
            };
            for (i, container) in containers.iter().enumerate() {
                if !is_aws_ccm_container(container) {
                    continue;
                }
                let at = workload.pod_spec_path.key("containers").index(i);
                check_container(ctx, workload, container, &at, &cluster_names, out);
            }
        }
    }
}

fn check_container(
    ctx: &Context<'_>,
    workload: &WorkloadView<'_>,
    container: &Value,
    at: &FieldPath,
    cluster_names: &[&str],
    out: &mut Vec<Diagnostic>,
) {
    let words: Vec<&str> = ["command", "args"]
        .into_iter()
        .filter_map(|k| container.get(k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let path = words.iter().enumerate().find_map(|(i, w)| {
        w.strip_prefix("--cloud-config=")
            .or_else(|| (*w == "--cloud-config").then(|| words.get(i + 1).copied())?)
    });
    let Some(path) = path else {
        let mut d = ctx
            .diag(
                &META,
                workload.obj,
                &at.key("args"),
                "the AWS cloud controller manager has no --cloud-config: it takes its cluster ID \
                 from a kubernetes.io/cluster/<name> tag on the instance it runs on, and exits at \
                 start where that tag is missing",
            )
            .with_help(
                "mount a cloud config with [Global] KubernetesClusterID = <Karpenter clusterName> \
                 and pass --cloud-config",
            );
        d.severity = Severity::Warning;
        out.push(d);
        return;
    };
    let Some((config_map, key)) = mounted_config_map(ctx, workload, container, path) else {
        return;
    };
    let data_path = FieldPath::parse("data").key(key);
    let Some(text) = config_map.value(&data_path).and_then(Value::as_str) else {
        return;
    };
    match cluster_id(text) {
        None => out.push(
            ctx.diag(
                &META,
                config_map,
                &data_path,
                format!(
                    "the cloud config {path} sets no KubernetesClusterID under [Global]: the AWS \
                     cloud controller manager exits at start unless its instance carries a \
                     kubernetes.io/cluster/<name> tag"
                ),
            )
            .with_help("add KubernetesClusterID = <Karpenter clusterName> under [Global]"),
        ),
        Some(id) => {
            for name in cluster_names.iter().filter(|n| **n != id) {
                out.push(
                    ctx.diag(
                        &META,
                        config_map,
                        &data_path,
                        format!(
                            "the AWS cloud controller manager's cluster ID is {id:?} but \
                             Karpenter's clusterName is {name:?}: Karpenter tags its instances \
                             kubernetes.io/cluster/{name}, which the CCM does not count as its \
                             cluster's"
                        ),
                    )
                    .with_help(format!("set KubernetesClusterID = {name}")),
                );
            }
        }
    }
}

/// The ConfigMap (of the linted set, same namespace) and key mounted at `path`.
fn mounted_config_map<'a>(
    ctx: &Context<'a>,
    workload: &WorkloadView<'_>,
    container: &Value,
    path: &'a str,
) -> Option<(&'a Object, &'a str)> {
    let mounts = container.get("volumeMounts")?.as_array()?;
    let (volume, rest) = mounts.iter().find_map(|m| {
        let dir = m.get("mountPath")?.as_str()?.trim_end_matches('/');
        let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
        Some((m.get("name")?.as_str()?, rest))
    })?;
    let volumes = workload.pod_spec.get("volumes")?.as_array()?;
    let config_map = volumes
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(volume))?
        .get("configMap")?;
    let name = config_map.get("name")?.as_str()?;
    // A projected `items` entry maps a key to another file name.
    let key = config_map
        .get("items")
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .find(|i| i.get("path").and_then(Value::as_str) == Some(rest))?
                .get("key")?
                .as_str()
        })
        .unwrap_or(rest);
    let namespace = workload.obj.namespace.as_deref();
    let object = ctx
        .objects
        .iter()
        .find(|o| o.kind == "ConfigMap" && o.name == name && o.namespace.as_deref() == namespace)?;
    let key = object
        .value(&FieldPath::parse("data"))?
        .as_object()?
        .keys()
        .find(|k| k.as_str() == key)?;
    Some((object, key.as_str()))
}

/// `KubernetesClusterID` (or the legacy `KubernetesClusterTag`) of the `[Global]` section of a
/// gcfg cloud config. gcfg section and variable names are case-insensitive.
fn cluster_id(text: &str) -> Option<String> {
    let mut in_global = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_global = line
                .trim_matches(['[', ']'])
                .trim()
                .eq_ignore_ascii_case("global");
            continue;
        }
        if !in_global || line.starts_with(['#', ';']) {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        let value = value.trim().trim_matches('"');
        if (name.eq_ignore_ascii_case("KubernetesClusterID")
            || name.eq_ignore_ascii_case("KubernetesClusterTag"))
            && !value.is_empty()
        {
            found = Some(value.to_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::cluster_id;

    #[test]
    fn reads_the_global_cluster_id() {
        assert_eq!(
            cluster_id("[Global]\nKubernetesClusterID = demo\n").as_deref(),
            Some("demo")
        );
        assert_eq!(
            cluster_id("[global]\n  kubernetesclustertag=\"old\"\n").as_deref(),
            Some("old")
        );
        assert_eq!(cluster_id("[Other]\nKubernetesClusterID = x\n"), None);
        assert_eq!(cluster_id("[Global]\n# KubernetesClusterID = x\n"), None);
    }
}
