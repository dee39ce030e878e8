//! KK024: the join-token rotator (`kubean-karpenter controller`) without credentials of its
//! own, so it acts with the infra workers' instance role, which every pod there can use.

use serde_json::Value;

use crate::context::{Context, WorkloadView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Finds the kubean-karpenter controller (the join-token rotator and CSR approver: a container
whose first argument is `controller`, or the Deployment `kubean-karpenter-rotator`) whose
containers carry no AWS credentials of their own: no `AWS_ACCESS_KEY_ID` and no web identity
(`AWS_ROLE_ARN` with `AWS_WEB_IDENTITY_TOKEN_FILE`). It then takes the instance role of the node
it runs on, through IMDS.

## Why
The controller runs on the Kubean infra workers, next to Karpenter. With
`karpenter.credentials.source: instanceProfile` the rotator's policy (write the join store)
joins Karpenter's (launch and terminate instances, pass the node role) on the infra workers'
instance role, and for pods to reach IMDS those instances need an IMDSv2 hop limit of 2. Then
**every** pod scheduled on an infra worker can fetch the role's credentials from
`169.254.169.254`: any compromised or merely misconfigured pod there can read and overwrite the
join token and launch instances. Per-component credentials keep each identity to the one
component that needs it.

## Example
```yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: kubean-karpenter-rotator, namespace: karpenter}
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
Set `karpenter.credentials.source: staticSecret` in the spec: `render` then gives the rotator
its own Secret `kubean-karpenter-rotator-aws-credentials` (an IAM user holding only
`iam/rotator-policy.json`) and Karpenter its own, and wires each into its component:
```yaml
          env:
            - name: AWS_ACCESS_KEY_ID
              valueFrom: {secretKeyRef: {name: kubean-karpenter-rotator-aws-credentials, key: AWS_ACCESS_KEY_ID}}
            - name: AWS_SECRET_ACCESS_KEY
              valueFrom: {secretKeyRef: {name: kubean-karpenter-rotator-aws-credentials, key: AWS_SECRET_ACCESS_KEY}}
```
Keeping the instance profile is a decision to trust every pod on the infra workers: then keep
workloads off them (taints) and the hop limit at 2 only there.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK024",
    name: "shared-infra-identity",
    // Info: the instance profile is the recommended default (KK015 nudges Karpenter towards
    // it); this names what that choice trusts, it does not fail a lint run by default.
    severity: Severity::Info,
    summary: "The join-token rotator has no AWS credentials of its own and shares the infra workers' instance role with every pod there",
    doc: DOC,
};

pub struct SharedInfraIdentity;

fn containers<'a>(wl: &WorkloadView<'a>) -> Vec<&'a Value> {
    wl.pod_spec
        .get("containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

fn is_controller(wl: &WorkloadView<'_>) -> bool {
    wl.obj.name == "kubean-karpenter-rotator"
        || containers(wl).iter().any(|c| {
            c.get("args")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                == Some("controller")
                && c.get("image")
                    .and_then(Value::as_str)
                    .is_some_and(|i| i.contains("kubean-karpenter"))
        })
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

impl Rule for SharedInfraIdentity {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
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
                        "container {name} of {} has no AWS credentials of its own: it uses the instance role of {nodes}, which every pod there can fetch from IMDS (hop limit 2); give it its own Secret (spec karpenter.credentials.source: staticSecret)",
                        wl.obj.label()
                    ),
                ));
            }
        }
    }
}
