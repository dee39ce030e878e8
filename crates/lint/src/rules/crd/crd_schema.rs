//! KK000: what the apiserver would refuse, from the embedded CRDs (kk-crd-check).

use kk_crd_check::{CheckError, ViolationKind};
use kk_model::{FieldPath, PathSeg};
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Validates every Karpenter (`karpenter.sh/v1`, `karpenter.k8s.aws/v1`) and Kubean
(`kubean.io/v1alpha1`) object against the CRDs the cluster serves (Karpenter v1.15.2 and
Kubean), the way the kube-apiserver does on create: types, required fields, enums, patterns,
bounds, unknown fields, then every `x-kubernetes-validations` CEL rule. Each violation is
reported at the field it names. An apiVersion the CRD does not serve (such as
`karpenter.sh/v1beta1`) is reported too.

## Why
`kubectl apply` refuses such an object, usually in the middle of a rollout, and an unknown
field is silently pruned: a misspelt `consolidateAfter` or `httpTokens` never takes effect.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiSelectorTerms:
    - alias: ubuntu@v20260827   # no ubuntu alias: al2, al2023, bottlerocket, windows*
  role: KarpenterNodeRole-demo
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
```

## Fix
Change the field the message names. The message is the apiserver's own (`Required value`,
`Unsupported value`, the CEL rule's message), so `kubectl explain` and the Karpenter docs for
that field apply directly.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK000",
    name: "crd-schema",
    severity: Severity::Error,
    summary: "Karpenter or Kubean object the apiserver would refuse (CRD schema and CEL rules)",
    doc: DOC,
    advice: None,
};

pub struct CrdSchema;

/// API groups whose objects have an embedded CRD.
const GROUPS: &[&str] = &["karpenter.sh", "karpenter.k8s.aws", "kubean.io"];

impl Rule for CrdSchema {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let known = kk_crd_check::known_kinds();
        for obj in ctx.objects {
            let group = obj.api_version.split('/').next().unwrap_or_default();
            if !obj.api_version.contains('/') || !GROUPS.contains(&group) {
                continue;
            }
            match kk_crd_check::validate(&obj.doc.value) {
                Ok(violations) => {
                    for v in violations {
                        let path = if v.path.is_empty() {
                            quoted_path(&obj.doc.value, &v.message)
                        } else {
                            resolve(&obj.doc.value, &v.path)
                        };
                        let not_checked = v.path.is_empty() && v.message.contains("not checked");
                        let d = if v.kind == ViolationKind::UnknownField {
                            ctx.diag_key(&META, obj, &path, v.to_string()).with_help(
                                "the apiserver drops fields its schema does not declare (or refuses \
                                 them with --validate=strict): check the spelling and the level",
                            )
                        } else if not_checked {
                            ctx.diag(&META, obj, &path, v.to_string())
                                .with_severity(Severity::Info)
                        } else {
                            ctx.diag(&META, obj, &path, v.to_string())
                        };
                        out.push(d);
                    }
                }
                Err(CheckError::UnknownKind { api_version, kind }) => {
                    let served: Vec<&str> = known
                        .iter()
                        .filter(|(a, k)| *k == kind && a.starts_with(group))
                        .map(|(a, _)| a.as_str())
                        .collect();
                    // A kind we have no CRD for at all is not ours to judge.
                    if served.is_empty() {
                        continue;
                    }
                    out.push(
                        ctx.diag(
                            &META,
                            obj,
                            &FieldPath::root().key("apiVersion"),
                            format!("apiVersion {api_version} of {kind} is not served"),
                        )
                        .with_help(format!("use apiVersion {}", served.join(" or "))),
                    );
                }
                Err(CheckError::NotAnObject) => {}
            }
        }
    }
}

/// Turns an apiserver path (`spec.limits.cpu`, `spec.limits[cpu]`,
/// `metadata.labels.node.kubernetes.io/x`) into a document path by walking the value, so map
/// keys holding dots resolve. Segments past a missing value are split naively; the position
/// then falls back to the deepest existing ancestor.
pub fn resolve(value: &Value, path: &str) -> FieldPath {
    let mut segs = Vec::new();
    let mut current = Some(value);
    let mut rest = path;
    while !rest.is_empty() {
        rest = rest.strip_prefix('.').unwrap_or(rest);
        if let Some(inner) = rest.strip_prefix('[') {
            let Some(end) = inner.find(']') else { break };
            let key = &inner[..end];
            rest = &inner[end + 1..];
            let seg = match (current, key.parse::<usize>()) {
                (Some(Value::Array(_)), Ok(i)) => PathSeg::Index(i),
                _ => PathSeg::Key(key.to_owned()),
            };
            current = step(current, &seg);
            segs.push(seg);
            continue;
        }
        let boundary = rest.find(['.', '[']).unwrap_or(rest.len());
        // The longest key of the current mapping that the path continues with.
        let key = match current {
            Some(Value::Object(map)) => map
                .keys()
                .filter(|k| {
                    rest.starts_with(k.as_str())
                        && matches!(rest.as_bytes().get(k.len()), None | Some(b'.') | Some(b'['))
                })
                .max_by_key(|k| k.len())
                .cloned(),
            _ => None,
        }
        .unwrap_or_else(|| rest[..boundary].to_owned());
        if key.is_empty() {
            break;
        }
        rest = &rest[key.len()..];
        let seg = PathSeg::Key(key);
        current = step(current, &seg);
        segs.push(seg);
    }
    FieldPath(segs)
}

/// Some violations of nested schemas (`anyOf`) carry an empty path and name the field in the
/// message (`"spec.limits.cpu" must validate ...`): locate that field when it exists.
fn quoted_path(value: &Value, message: &str) -> FieldPath {
    message
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|candidate| resolve(value, candidate))
        .find(|path| !path.is_root() && kk_model::yaml::get(value, path).is_some())
        .unwrap_or_default()
}

fn step<'v>(current: Option<&'v Value>, seg: &PathSeg) -> Option<&'v Value> {
    match (current?, seg) {
        (Value::Object(map), PathSeg::Key(k)) => map.get(k),
        (Value::Array(items), PathSeg::Index(i)) => items.get(*i),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_resolve_against_the_value() {
        let v = json!({"spec": {"limits": {"cpu": 1}, "l": {"node.kubernetes.io/x": "a"},
            "terms": [{"alias": "x"}]}});
        assert_eq!(
            resolve(&v, "spec.limits.cpu").to_string(),
            "spec.limits.cpu"
        );
        assert_eq!(
            resolve(&v, "spec.limits[cpu]").to_string(),
            "spec.limits.cpu"
        );
        assert_eq!(
            resolve(&v, "spec.l.node.kubernetes.io/x"),
            FieldPath::root()
                .key("spec")
                .key("l")
                .key("node.kubernetes.io/x")
        );
        assert_eq!(
            resolve(&v, "spec.terms[0].alias").to_string(),
            "spec.terms[0].alias"
        );
        assert_eq!(
            resolve(&v, "spec.missing.deeper").to_string(),
            "spec.missing.deeper"
        );
        assert!(resolve(&v, "").is_root());
    }
}
