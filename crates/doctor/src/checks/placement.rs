//! Whether a pod template would be placed on a node, judged from the node's labels and hard
//! taints: the tolerations, the nodeSelector and the required node affinity, as the scheduler
//! filters them (TaintToleration, NodeAffinity). Shared by the checks that predict where a
//! DaemonSet's or a Deployment's pods can run before any pod tries.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec};
use kk_karpenter::taint::{Taint, Toleration};

/// Why the pod would not be placed.
#[derive(Debug, PartialEq)]
pub(super) enum Refusal {
    /// These hard taints are not tolerated.
    Untolerated(Vec<String>),
    /// These `key=value` nodeSelector entries are not on the node.
    Unselected(Vec<String>),
    /// No term of the required node affinity matches (the first term, written out).
    Affinity(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Untolerated(t) => write!(f, "does not tolerate {}", t.join(", ")),
            Refusal::Unselected(s) => write!(f, "lacks the label(s) {} it selects", s.join(", ")),
            Refusal::Affinity(a) => write!(f, "matches no required node affinity term ({a})"),
        }
    }
}

fn tolerations(pod: &PodSpec) -> Vec<Toleration> {
    pod.tolerations
        .iter()
        .flatten()
        .filter_map(|t| {
            Toleration::from_fields(
                t.key.as_deref(),
                t.operator.as_deref(),
                t.value.as_deref(),
                t.effect.as_deref(),
            )
            .ok()
        })
        .collect()
}

fn matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<i64>().ok());
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((number(value), number(values.first())), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((number(value), number(values.first())), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

fn written(r: &NodeSelectorRequirement) -> String {
    match r.values.as_deref() {
        Some(v) if !v.is_empty() => format!("{} {} [{}]", r.key, r.operator, v.join(", ")),
        _ => format!("{} {}", r.key, r.operator),
    }
}

/// Which labels the caller knows a node has.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Labels {
    /// All of them (a Node that exists): the required node affinity is judged too.
    All,
    /// Only some (a NodePool's next node: labels added at runtime, e.g. by feature discovery,
    /// are unknown), so only the nodeSelector is judged.
    Some,
}

/// Why `pod` would not be placed on a node with these `labels` and hard `taints` (`None`: it
/// would be).
pub(super) fn refuses(
    pod: &PodSpec,
    taints: &[Taint],
    labels: &BTreeMap<String, String>,
    known: Labels,
) -> Option<Refusal> {
    let tolerations = tolerations(pod);
    let untolerated: Vec<String> = taints
        .iter()
        .filter(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
        .map(ToString::to_string)
        .collect();
    if !untolerated.is_empty() {
        return Some(Refusal::Untolerated(untolerated));
    }
    let unselected: Vec<String> = pod
        .node_selector
        .iter()
        .flatten()
        .filter(|(k, v)| labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !unselected.is_empty() {
        return Some(Refusal::Unselected(unselected));
    }
    let terms = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    // Terms are ORed, a term's expressions ANDed; an empty list of terms matches nothing, but
    // the API server refuses one, so only written terms are judged.
    if known == Labels::All
        && !terms.is_empty()
        && !terms.iter().any(|term| {
            term.match_expressions
                .iter()
                .flatten()
                .all(|r| matches(r, labels))
        })
    {
        let first = terms[0]
            .match_expressions
            .iter()
            .flatten()
            .map(written)
            .collect::<Vec<_>>()
            .join(", ");
        return Some(Refusal::Affinity(first));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_karpenter::taint::Effect;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> PodSpec {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(spec).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn taints_selectors_and_affinity_each_refuse_with_their_reason() {
        let infra = Taint {
            key: "CriticalAddonsOnly".into(),
            value: "true".into(),
            effect: Effect::NoSchedule,
        };
        let p = pod(json!({
            "nodeSelector": {"node-role.kubernetes.io/infra": ""},
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}},
        }));
        let node = labels(&[("node-role.kubernetes.io/infra", "")]);
        assert_eq!(
            refuses(&p, std::slice::from_ref(&infra), &node, Labels::All),
            None
        );
        assert_eq!(
            refuses(&p, &[], &labels(&[]), Labels::All),
            Some(Refusal::Unselected(vec![
                "node-role.kubernetes.io/infra=".into()
            ]))
        );
        let karpenter_node = labels(&[
            ("node-role.kubernetes.io/infra", ""),
            ("karpenter.sh/nodepool", "p"),
        ]);
        assert_eq!(
            refuses(&p, &[], &karpenter_node, Labels::All),
            Some(Refusal::Affinity(
                "karpenter.sh/nodepool DoesNotExist".into()
            ))
        );
        assert_eq!(
            refuses(&p, &[], &karpenter_node, Labels::Some),
            None,
            "affinity unknown: not judged"
        );
        let bare = pod(json!({}));
        assert!(
            matches!(refuses(&bare, &[infra], &node, Labels::All), Some(Refusal::Untolerated(t)) if t[0].starts_with("CriticalAddonsOnly"))
        );
    }
}
