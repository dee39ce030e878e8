//! KK015: Karpenter Helm values for a non-EKS control plane: `settings.clusterEndpoint`,
//! `settings.eksControlPlane`, `settings.clusterCABundle`, and static access keys.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Checks the `settings` of Karpenter Helm values against a self-managed (Kubean) control plane:
- `settings.clusterEndpoint` missing, empty, or not an absolute URL (error);
- `settings.eksControlPlane: true` while the linted set holds Kubean objects or the endpoint is
  not an EKS endpoint (`*.eks.amazonaws.com`) (error);
- `settings.clusterCABundle` missing or empty (warning);
- `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` in `controller.env` taken from a Secret
  (`valueFrom.secretKeyRef`): long-lived static keys, where an instance profile would do (info).
  Literal key values are KK009's.

Values that look like EKS (`eksControlPlane: true`, no Kubean objects, an EKS endpoint or none)
are only checked for static keys.

## Why
- Without `clusterEndpoint` Karpenter asks EKS for it (`eks:DescribeCluster` with
  `clusterName`); off EKS that call fails and the controller exits at start.
- `eksControlPlane: true` makes Karpenter read the Kubernetes version from EKS as well; off EKS
  that fails, and AMI selection and drift checks fail with it.
- Without `clusterCABundle` Karpenter falls back to the CA its own API client trusts; the value
  it settles on is part of what it hashes for drift and what it passes to non-Custom bootstraps,
  so set the cluster CA explicitly (the seed's `<BASE64_CLUSTER_CA_BUNDLE>`).
- Static keys never expire and are copied wherever the Secret goes. When the infra workers
  that host the controller are EC2 instances, their instance profile gives the controller
  short-lived credentials instead (the seed's recommendation).

## Example
```yaml
settings:
  clusterName: demo
  clusterEndpoint: ""
  eksControlPlane: true
controller:
  env:
    - name: AWS_ACCESS_KEY_ID
      valueFrom:
        secretKeyRef: {name: karpenter-aws-credentials, key: AWS_ACCESS_KEY_ID}
```

## Fix
```yaml
settings:
  clusterName: demo
  clusterEndpoint: https://api.demo.internal:6443
  clusterCABundle: LS0tLS1CRUdJTi...   # base64 of the cluster CA PEM
  eksControlPlane: false
```
and grant the Karpenter controller policy to the infra workers' instance profile instead of
wiring access keys into `controller.env`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK015",
    name: "values-control-plane",
    severity: Severity::Error,
    summary: "Karpenter values lack clusterEndpoint or clusterCABundle, claim an EKS control plane off EKS, or wire in static access keys",
    doc: DOC,
    advice: None,
};

pub struct ValuesControlPlane;

const ENDPOINT: &str = "settings.clusterEndpoint";
const CA: &str = "settings.clusterCABundle";
const EKS: &str = "settings.eksControlPlane";

/// A finding at the value of `path`, or at the key of its parent when it is not there.
fn diag_at_field(ctx: &Context<'_>, obj: &Object, path: &str, message: String) -> Diagnostic {
    let path = FieldPath::parse(path);
    match (obj.value(&path), path.parent()) {
        (None, Some(parent)) if !parent.is_root() => ctx.diag_key(&META, obj, &parent, message),
        _ => ctx.diag(&META, obj, &path, message),
    }
}

fn text<'v>(obj: &'v Object, path: &str) -> Option<&'v str> {
    obj.value(&FieldPath::parse(path)).and_then(Value::as_str)
}

/// `https://host[:port][/path]` → `host`.
fn url_host(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+')
    {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or(host)
    } else {
        host.split(':').next().unwrap_or(host)
    };
    (!host.is_empty()).then_some(host)
}

fn is_eks_endpoint(endpoint: &str) -> bool {
    url_host(endpoint).is_some_and(|h| h.to_ascii_lowercase().ends_with(".eks.amazonaws.com"))
}

impl Rule for ValuesControlPlane {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let kubean = !ctx.kubean_clusters.is_empty()
            || !ctx.cluster_operations.is_empty()
            || !ctx.inventories.is_empty()
            || !ctx.group_vars.is_empty();
        for &obj in &ctx.values {
            let endpoint = text(obj, ENDPOINT).map(str::trim).unwrap_or("");
            let eks_flag = match obj.value(&FieldPath::parse(EKS)) {
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
                _ => false,
            };
            let looks_eks =
                eks_flag && !kubean && (endpoint.is_empty() || is_eks_endpoint(endpoint));
            if !looks_eks {
                check_endpoint(ctx, obj, endpoint, out);
                if eks_flag {
                    let why = if kubean {
                        "the linted set holds Kubean objects, so the control plane is not EKS"
                            .to_owned()
                    } else {
                        format!("{endpoint} is not an EKS endpoint (*.eks.amazonaws.com)")
                    };
                    out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &FieldPath::parse(EKS),
                            format!(
                                "settings.eksControlPlane is true but {why}: Karpenter asks EKS \
                                 for the cluster's Kubernetes version and fails"
                            ),
                        )
                        .with_help("set settings.eksControlPlane: false"),
                    );
                }
                let ca = text(obj, CA).map(str::trim).unwrap_or("");
                if ca.is_empty() {
                    let state = if obj.value(&FieldPath::parse(CA)).is_some() {
                        "empty"
                    } else {
                        "missing"
                    };
                    out.push(
                        diag_at_field(
                            ctx,
                            obj,
                            CA,
                            format!(
                                "settings.clusterCABundle is {state}: Karpenter falls back to the \
                                 CA its own API client trusts instead of the cluster CA"
                            ),
                        )
                        .with_severity(Severity::Warning)
                        .with_help(
                            "set settings.clusterCABundle to the base64 of the cluster CA \
                             certificate (PEM)",
                        ),
                    );
                }
            }
            check_static_keys(ctx, obj, out);
        }
    }
}

fn check_endpoint(ctx: &Context<'_>, obj: &Object, endpoint: &str, out: &mut Vec<Diagnostic>) {
    let problem = if endpoint.is_empty() {
        let state = match obj.value(&FieldPath::parse(ENDPOINT)) {
            None => "missing",
            Some(Value::String(_)) | Some(Value::Null) => "empty",
            Some(_) => "not a string",
        };
        format!("settings.clusterEndpoint is {state}")
    } else if url_host(endpoint).is_none() {
        format!("settings.clusterEndpoint {endpoint:?} is not an absolute URL (https://host:port)")
    } else {
        return;
    };
    out.push(
        diag_at_field(
            ctx,
            obj,
            ENDPOINT,
            format!(
                "{problem}: off EKS Karpenter calls eks:DescribeCluster to find the API server \
                 and exits when it fails"
            ),
        )
        .with_help("set settings.clusterEndpoint to the API server URL nodes join, e.g. https://api.example.internal:6443"),
    );
}

fn check_static_keys(ctx: &Context<'_>, obj: &Object, out: &mut Vec<Diagnostic>) {
    let env_path = FieldPath::parse("controller.env");
    let Some(Value::Array(env)) = obj.value(&env_path) else {
        return;
    };
    let from_secret = env.iter().enumerate().find_map(|(i, e)| {
        let name = e.get("name").and_then(Value::as_str)?;
        if !matches!(name, "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY") {
            return None;
        }
        let secret = e.get("valueFrom")?.get("secretKeyRef")?;
        let secret_name = secret.get("name").and_then(Value::as_str).unwrap_or("?");
        Some((i, name, secret_name))
    });
    if let Some((i, name, secret)) = from_secret {
        out.push(
            ctx.diag(
                &META,
                obj,
                &env_path.index(i),
                format!(
                    "controller.env takes {name} from Secret {secret}: static, long-lived AWS \
                     keys for the Karpenter controller"
                ),
            )
            .with_severity(Severity::Info)
            .with_help(
                "if the infra workers are EC2 instances, grant the controller policy to their \
                 instance profile and drop the access keys",
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            url_host("https://api.demo.internal:6443"),
            Some("api.demo.internal")
        );
        assert_eq!(url_host("https://[::1]:6443/x"), Some("[::1]"));
        assert_eq!(url_host("api.demo.internal:6443"), None);
        assert_eq!(url_host("https://"), None);
        assert!(is_eks_endpoint(
            "https://0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
        ));
        assert!(!is_eks_endpoint("https://api.demo.internal:6443"));
    }
}
