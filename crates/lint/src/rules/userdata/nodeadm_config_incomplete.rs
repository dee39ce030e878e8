//! KK025: a Custom-AMI EC2NodeClass whose userData is a nodeadm `NodeConfig` that leaves out what
//! only EKS or Karpenter's AL2023 family would otherwise supply.

use kk_model::FieldPath;
use kk_model::yaml::{self, LoadLimits};
use serde_json::Value;

use crate::context::{Context, NodeClassView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
For each EC2NodeClass with `amiFamily: Custom` whose `userData` carries a nodeadm `NodeConfig`
(`apiVersion: node.eks.aws/v1alpha1`, alone or as an `application/node.eks.aws` MIME part),
reports:
- a missing `spec.cluster.name`, `apiServerEndpoint`, `certificateAuthority` or `cidr` (error);
- a kubelet that does not register with `karpenter.sh/unregistered:NoExecute`
  (`--register-with-taints` in `spec.kubelet.flags`, or `registerWithTaints` in
  `spec.kubelet.config`) (error);
- no `spec.kubelet.config.clusterDNS` (warning).

## Why
Off EKS an EC2NodeClass that runs nodeadm must be `amiFamily: Custom` (Karpenter's `AL2023`
family calls `eks:DescribeCluster`, which a self-managed control plane does not answer, and the
class never becomes Ready), and with `Custom` Karpenter merges nothing into the userData:
- nodeadm refuses to configure a node without the four cluster fields (on EKS, Karpenter's own
  AL2023 bootstrap fills them from DescribeCluster);
- Karpenter only registers a Node that carries `karpenter.sh/unregistered:NoExecute`; without
  it the NodeClaim never becomes Registered, and the instance is terminated after 15 minutes and
  replaced, forever;
- without `clusterDNS` nodeadm guesses the tenth address of `cidr` (EKS's CoreDNS Service), but
  a Kubespray cluster's pods resolve through node-local DNS on 169.254.25.10: a wrong guess leaves
  every pod on the node without working DNS.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: eks
spec:
  amiFamily: Custom
  amiSelectorTerms:
    - alias: al2023@v20260827
  userData: |
    apiVersion: node.eks.aws/v1alpha1
    kind: NodeConfig
    spec:
      cluster:
        name: demo
        apiServerEndpoint: https://api.demo.internal:6443
```

## Fix
Give nodeadm everything EKS would have, and register the way Karpenter expects (an
ElasticCluster pool with `joinMethod: iam` renders exactly this):
```yaml
    spec:
      cluster:
        name: demo                 # the aws-iam-authenticator cluster ID
        apiServerEndpoint: https://api.demo.internal:6443
        certificateAuthority: LS0t...
        cidr: 10.233.0.0/18
      kubelet:
        config:
          clusterDNS: [169.254.25.10]
        flags:
          - --register-with-taints=karpenter.sh/unregistered:NoExecute
```
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK025",
    name: "nodeadm-config-incomplete",
    severity: Severity::Error,
    summary: "a Custom-AMI nodeadm NodeConfig misses cluster details, the unregistered taint or clusterDNS",
    doc: DOC,
    advice: None,
};

pub struct NodeadmConfigIncomplete;

const API_VERSION: &str = "node.eks.aws/v1alpha1";
const CLUSTER_FIELDS: [&str; 4] = ["name", "apiServerEndpoint", "certificateAuthority", "cidr"];

/// One NodeConfig found in a userData, with the userData line its YAML starts on.
struct Found {
    value: Value,
    first_line: usize,
}

/// The YAML bodies nodeadm would read: every `application/node.eks.aws` part of a MIME
/// document, or the whole userData when it is not MIME. Returns (first line, text).
fn bodies(user_data: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = user_data.lines().collect();
    // The boundary parameter of a top-level multipart Content-Type header.
    let boundary = lines
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-type: multipart/")
        })
        .find_map(|l| {
            let at = l.to_ascii_lowercase().find("boundary=")?;
            let value = l[at + "boundary=".len()..].split(';').next()?.trim();
            Some(value.trim_matches('"').to_owned())
        });
    let Some(boundary) = boundary else {
        return vec![(1, user_data.to_owned())];
    };
    let delimiter = format!("--{boundary}");
    let is_delimiter =
        |l: &str| l.trim_end() == delimiter || l.trim_end() == format!("{delimiter}--");
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !is_delimiter(lines[i]) {
            i += 1;
            continue;
        }
        // A part: headers up to the first blank line, then the body up to the next delimiter.
        let mut j = i + 1;
        let mut nodeadm = false;
        while j < lines.len() && !lines[j].trim().is_empty() {
            let header = lines[j].to_ascii_lowercase();
            nodeadm |=
                header.starts_with("content-type:") && header.contains("application/node.eks.aws");
            j += 1;
        }
        let start = (j + 1).min(lines.len());
        let mut end = start;
        while end < lines.len() && !is_delimiter(lines[end]) {
            end += 1;
        }
        if nodeadm {
            out.push((start + 1, lines[start..end].join("\n")));
        }
        i = end.max(i + 1);
    }
    out
}

fn node_configs(user_data: &str) -> Vec<Found> {
    let mut out = Vec::new();
    for (first_line, text) in bodies(user_data) {
        let Ok(docs) = yaml::load_documents(&text, LoadLimits::default()) else {
            continue;
        };
        for doc in docs {
            if doc.value.get("apiVersion").and_then(Value::as_str) == Some(API_VERSION)
                && doc.value.get("kind").and_then(Value::as_str) == Some("NodeConfig")
            {
                let line = doc.pos(&FieldPath::root()).line;
                out.push(Found {
                    value: doc.value,
                    first_line: first_line + line.saturating_sub(1),
                });
            }
        }
    }
    out
}

fn text_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

fn registers_unregistered(config: &Value) -> bool {
    let flags = text_at(config, &["spec", "kubelet", "flags"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|f| f.strip_prefix("--register-with-taints="))
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.trim()
                .strip_prefix("karpenter.sh/unregistered")
                .is_some_and(|rest| rest.ends_with(":NoExecute"))
        });
    let config_taints = text_at(config, &["spec", "kubelet", "config", "registerWithTaints"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            t.get("key").and_then(Value::as_str) == Some("karpenter.sh/unregistered")
                && t.get("effect").and_then(Value::as_str) == Some("NoExecute")
        });
    flags || config_taints
}

impl Rule for NodeadmConfigIncomplete {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for (view, user_data) in super::custom_ami_user_data(ctx) {
            let configs = node_configs(user_data);
            if configs.is_empty() {
                continue;
            }
            check_class(ctx, view, &configs, out);
        }
    }
}

fn check_class(
    ctx: &Context<'_>,
    view: &NodeClassView<'_>,
    configs: &[Found],
    out: &mut Vec<Diagnostic>,
) {
    // nodeadm merges every NodeConfig it finds: judge the union, report at the first one.
    let line = configs[0].first_line;
    let at = |message: String| {
        let pos = ctx.pos_in_string(view.obj, &FieldPath::parse("spec.userData"), line, 1);
        ctx.diag_at(&META, view.obj, pos, message)
    };
    let has = |path: &[&str]| {
        configs.iter().any(|c| {
            text_at(&c.value, path).is_some_and(|v| match v {
                Value::String(s) => !s.trim().is_empty(),
                Value::Null => false,
                _ => true,
            })
        })
    };
    let missing: Vec<&str> = CLUSTER_FIELDS
        .iter()
        .copied()
        .filter(|f| !has(&["spec", "cluster", f]))
        .collect();
    if !missing.is_empty() {
        out.push(at(format!(
            "NodeConfig has no spec.cluster.{}: with amiFamily Custom nothing fills it in, and \
             nodeadm refuses to configure the node",
            missing.join(", spec.cluster.")
        ))
        .with_help("set name (the aws-iam-authenticator cluster ID), apiServerEndpoint, certificateAuthority and cidr"));
    }
    if !configs.iter().any(|c| registers_unregistered(&c.value)) {
        out.push(at(
            "NodeConfig's kubelet does not register with karpenter.sh/unregistered:NoExecute: \
             Karpenter never marks the node Registered and replaces it after 15 minutes"
                .into(),
        )
        .with_help("add --register-with-taints=karpenter.sh/unregistered:NoExecute to spec.kubelet.flags"));
    }
    if !has(&["spec", "kubelet", "config", "clusterDNS"]) {
        out.push(
            at(
                "NodeConfig sets no kubelet clusterDNS: nodeadm guesses the tenth address of \
                spec.cluster.cidr, not Kubespray's node-local DNS (169.254.25.10)"
                    .into(),
            )
            .with_severity(Severity::Warning)
            .with_help(
                "set spec.kubelet.config.clusterDNS: [169.254.25.10] (Kubespray's nodelocaldns_ip)",
            ),
        );
    }
}
