//! KK024: the join-token rotator (`kubean-karpenter controller`) or Karpenter using the infra
//! workers' instance role from its own pod network, which needs IMDS hop limit 2 and so lends
//! that role to every pod on the infra workers.

use serde_json::Value;

use crate::context::{Context, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Finds a controller that calls AWS with the infra workers' instance role **from its own pod
network**: the kubean-karpenter rotator (a container whose first argument is `controller`, or
the Deployment `kubean-karpenter-rotator`; the CSR approver alone, `--csr-approver-only`,
the node health agent, `--health-agent`, and the budget controller, `--budget-only`, call no AWS) and Karpenter (its Helm values for a self-managed control plane; on EKS its role comes from
IRSA or Pod Identity), when they carry no AWS credentials of their own (no
`AWS_ACCESS_KEY_ID`, no web identity: `AWS_ROLE_ARN` with `AWS_WEB_IDENTITY_TOKEN_FILE`) and do
not run on the host network (`hostNetwork: true`).

## Why
A pod in its own network namespace reaches IMDS only through one more hop than the node itself:
the infra workers then need an IMDSv2 hop limit of 2, and with it **every** pod scheduled there
can fetch the role's credentials from `169.254.169.254`: Karpenter's (launch and terminate
instances, pass the node role) and the rotator's (write the join store). Any compromised or
merely misconfigured pod on an infra worker could launch instances as nodes and overwrite the
join token. On the host network the controllers reach IMDS with the hop limit at 1, which keeps
every other pod's answer from IMDS one hop short (`doctor`'s `infra-imds-hop-limit` checks the
instances).

## Example
```yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: kubean-karpenter-rotator, namespace: kubean-karpenter-rotator}
spec:
  template:
    spec:
      nodeSelector: {node-role.kubernetes.io/infra: ""}
      containers:
        - name: rotator
          image: ghcr.io/kubean-karpenter/kubean-karpenter:0.1.0
          args: [controller, --cluster=demo, --store=ssm]
```

## Fix
What `render` does with `karpenter.credentials.source: instanceProfile`: run the controller on
the host network (the rotator's metrics move to port 8093, clear of Karpenter's 8080 and 8081)
and keep the infra workers' hop limit at 1:
```yaml
    spec:
      hostNetwork: true
      dnsPolicy: Default
```
and `hostNetwork: true` / `dnsPolicy: Default` in Karpenter's values; then
`aws ec2 modify-instance-metadata-options --instance-id <infra worker> --http-tokens required
--http-put-response-hop-limit 1`. Or give each controller its own credentials
(`karpenter.credentials.source: staticSecret`: Secrets of their own, wired into each component).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK024",
    name: "shared-infra-identity",
    // An error since issue 24's finding 4: the pod-network form needs hop limit 2, which hands
    // Karpenter's rights to every pod on the infra workers.
    severity: Severity::Error,
    summary: "A controller uses the infra workers' instance role from its own pod network, which needs IMDS hop limit 2 and lets every pod there use that role",
    doc: DOC,
    advice: None,
};

pub struct SharedInfraIdentity;

fn containers<'a>(wl: &WorkloadView<'a>) -> Vec<&'a Value> {
    wl.pod_spec
        .get("containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

fn args(container: &Value) -> Vec<&str> {
    container
        .get("args")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The rotator, which uses AWS; the CSR approver alone (`--csr-approver-only`), the health
/// agent (`--health-agent`) and the budget controller (`--budget-only`) use none.
fn is_controller(wl: &WorkloadView<'_>) -> bool {
    let approver_only = containers(wl).iter().any(|c| {
        let a = args(c);
        a.contains(&"--csr-approver-only")
            || a.contains(&"--health-agent")
            || a.contains(&"--budget-only")
    });
    !approver_only
        && (wl.obj.name == "kubean-karpenter-rotator"
            || containers(wl).iter().any(|c| {
                args(c).first() == Some(&"controller")
                    && c.get("image")
                        .and_then(Value::as_str)
                        .is_some_and(|i| i.contains("kubean-karpenter"))
            }))
}

fn env_names(container: &Value) -> Vec<&str> {
    container
        .get("env")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn has_own_credentials(container: &Value) -> bool {
    let names = env_names(container);
    names.contains(&"AWS_ACCESS_KEY_ID")
        || (names.contains(&"AWS_ROLE_ARN") && names.contains(&"AWS_WEB_IDENTITY_TOKEN_FILE"))
}

/// Karpenter's values: credentials of its own in `controller.env`, or the host network.
fn check_values(ctx: &Context<'_>, obj: &crate::input::Object, out: &mut Vec<Diagnostic>) {
    let v = &obj.doc.value;
    let own = v["controller"]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("name").and_then(Value::as_str))
        .any(|n| n == "AWS_ACCESS_KEY_ID" || n == "AWS_ROLE_ARN");
    let host_network = v.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    // On EKS the role comes from IRSA or Pod Identity, not from the node.
    let eks = matches!(&v["settings"]["eksControlPlane"], Value::Bool(true))
        || v["serviceAccount"]["annotations"]
            .get("eks.amazonaws.com/role-arn")
            .is_some();
    if own || host_network || eks {
        return;
    }
    let message = "Karpenter has no AWS credentials of its own and is not on the host network: it needs the infra workers' instance role through IMDS hop limit 2, which lets every pod there launch instances and pass the node role; set hostNetwork: true and dnsPolicy: Default (and hop limit 1), or give it its own Secret (spec karpenter.credentials.source: staticSecret)".to_owned();
    let path = kk_model::FieldPath::parse("hostNetwork");
    out.push(if obj.value(&path).is_some() {
        ctx.diag(&META, obj, &path, message)
    } else {
        ctx.diag(&META, obj, &kk_model::FieldPath::root(), message)
    });
}

impl Rule for SharedInfraIdentity {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for values in &ctx.values {
            check_values(ctx, values, out);
        }
        for wl in &ctx.workloads {
            if !is_controller(wl) {
                continue;
            }
            let on_infra = wl
                .pod_spec
                .get("nodeSelector")
                .and_then(Value::as_object)
                .is_some_and(|s| s.contains_key("node-role.kubernetes.io/infra"));
            let nodes = if on_infra {
                "the infra workers"
            } else {
                "its node"
            };
            let host_network = wl
                .pod_spec
                .get("hostNetwork")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if host_network {
                continue;
            }
            for (i, c) in containers(wl).iter().enumerate() {
                if has_own_credentials(c) {
                    continue;
                }
                let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
                let path = wl.pod_spec_path.key("containers").index(i);
                out.push(ctx.diag(
                    &META,
                    wl.obj,
                    &path,
                    format!(
                        "container {name} of {} has no AWS credentials of its own and is not on the host network: it needs the instance role of {nodes} through IMDS hop limit 2, which lets every pod there fetch it; set hostNetwork: true (and hop limit 1), or give it its own Secret (spec karpenter.credentials.source: staticSecret)",
                        wl.obj.label()
                    ),
                ));
            }
        }
    }
}
