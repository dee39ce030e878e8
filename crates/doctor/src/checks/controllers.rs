//! The controllers the system cannot work without (Karpenter, the join-token rotator, the CSR
//! approver) run on fixed nodes, never on nodes Karpenter launches. A Deployment of theirs
//! whose pods no existing Node can take never starts: no node joins. Pods of it that are only
//! Pending look like a slow start for a while (`pods-running` gives them a grace); this check
//! says at once, from the Deployment and the Nodes, that they cannot be placed and why.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kk_karpenter::taint::{Effect, Taint};
use kk_spec::names::{CSR_APPROVER, ROTATOR, controller_namespace, is_managed};

use super::placement::{self, Labels};
use super::{check, name_of};
use crate::snapshot::Snapshot;
use crate::{Check, Facts, Status};

/// Node conditions the node lifecycle or the CCM put on and take off by themselves: not a
/// placement rule (pods get tolerations for the NoExecute ones when they are created).
fn transient(key: &str) -> bool {
    key.starts_with("node.kubernetes.io/")
        || key.starts_with("node.cloudprovider.kubernetes.io/")
        || key == "karpenter.sh/unregistered"
}

fn hard_taints(n: &Node) -> Vec<Taint> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| !transient(&t.key))
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: Effect::parse(&t.effect).ok()?,
            })
        })
        .filter(Taint::is_hard)
        .collect()
}

/// Our controllers, in their own namespaces (verify's workloads carry our label too, but run
/// elsewhere), and Karpenter (its chart's name label, in its namespace).
fn is_controller(d: &Deployment, f: &Facts) -> bool {
    let namespace = d.metadata.namespace.as_deref();
    let karpenters = d
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/name"))
        .is_some_and(|n| n == "karpenter");
    our_controller(d).is_some_and(|name| namespace == Some(controller_namespace(name)))
        || (namespace == Some(f.karpenter_namespace.as_str())
            && (is_left_behind(d, f) || karpenters))
}

/// The name of the controller of ours `d` is: the rotator, the CSR approver or the budget
/// controller, with our label.
fn our_controller(d: &Deployment) -> Option<&str> {
    let name = d.metadata.name.as_deref()?;
    (is_managed(d.metadata.labels.as_ref())
        && (name == ROTATOR || name == CSR_APPROVER || name == kk_spec::names::BUDGET))
        .then_some(name)
}

/// One of our controllers still in Karpenter's namespace, where an install before their own
/// namespaces put them: whoever may create pods there can mount its account.
fn is_left_behind(d: &Deployment, f: &Facts) -> bool {
    our_controller(d).is_some_and(|name| {
        d.metadata.namespace.as_deref() == Some(f.karpenter_namespace.as_str())
            && f.karpenter_namespace != controller_namespace(name)
    })
}

pub(super) fn controllers_schedulable(s: &Snapshot, f: &Facts) -> Check {
    match (&s.deployments, &s.nodes) {
        (Ok(deployments), Ok(nodes)) => judge(deployments, nodes, f),
        _ => title().skip("Deployments or Nodes could not be listed"),
    }
}

fn title() -> Check {
    check(
        "controllers-schedulable",
        "Karpenter's, the rotator's and the CSR approver's pods fit an existing Node (infra label, taints tolerated)",
    )
}

fn judge(deployments: &[Deployment], nodes: &[Node], f: &Facts) -> Check {
    let mut c = title();
    let controllers: Vec<&Deployment> =
        deployments.iter().filter(|d| is_controller(d, f)).collect();
    if controllers.is_empty() {
        return c.skip("no Deployment of Karpenter or kubean-karpenter in the cluster");
    }
    let fix = "label and taint the infra workers as the spec says (Kubespray's node_labels node-role.kubernetes.io/infra and node_taints = kubean.infraTaints, then re-run Kubean's scale.yml), or correct the Deployment's nodeSelector and tolerations by re-applying the bundle";
    for d in controllers {
        let name = name_of(&d.metadata);
        if is_left_behind(d, f) {
            c.worse(
                Status::Warn,
                format!(
                    "Deployment {name}: still in Karpenter's namespace, where whoever may create pods can mount its service account"
                ),
                "re-run `kubean-karpenter apply SPEC`: it starts the controller in its own namespace, waits until it is available, then removes this one",
            );
            continue;
        }
        let Some(pod) = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
            continue;
        };
        if d.spec.as_ref().and_then(|s| s.replicas) == Some(0) {
            c = c.saw(format!("Deployment {name}: scaled to 0"));
            continue;
        }
        let mut fits = Vec::new();
        let mut refusals: Vec<String> = Vec::new();
        for n in nodes {
            let node = n.metadata.name.clone().unwrap_or_default();
            if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                refusals.push(format!("{node} is cordoned"));
                continue;
            }
            let labels: BTreeMap<String, String> = n.metadata.labels.clone().unwrap_or_default();
            match placement::refuses(pod, &hard_taints(n), &labels, Labels::All) {
                None => fits.push(node),
                Some(r) => refusals.push(format!("{node} {r}")),
            }
        }
        if fits.is_empty() {
            let said = if nodes.is_empty() {
                "there is no Node".to_owned()
            } else {
                refusals.truncate(5);
                refusals.join("; ")
            };
            c.worse(
                Status::Fail,
                format!("Deployment {name}: no Node can run its pods: {said}"),
                fix,
            );
        } else {
            let available = d
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            fits.truncate(3);
            c = c.saw(format!(
                "Deployment {name}: its pods fit {} ({available} available)",
                fits.join(", ")
            ));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
        )
        .unwrap()
    }

    fn rotator() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "kubean-karpenter-rotator", "namespace": "kubean-karpenter-rotator",
                         "labels": {"app.kubernetes.io/managed-by": "kubean-karpenter"}},
            "spec": {"replicas": 2, "selector": {}, "template": {"spec": {
                "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                "containers": [{"name": "c"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn verifys_workloads_elsewhere_are_not_controllers() {
        let mut inflate = rotator();
        inflate.metadata.namespace = Some("default".into());
        let f = Facts {
            karpenter_namespace: "karpenter".into(),
            ..Facts::default()
        };
        assert!(is_controller(&rotator(), &f));
        assert!(!is_controller(&inflate, &f));
    }

    #[test]
    fn a_rotator_left_in_karpenters_namespace_is_a_warning_to_re_apply() {
        let mut old = rotator();
        old.metadata.namespace = Some("karpenter".into());
        let f = Facts {
            karpenter_namespace: "karpenter".into(),
            ..Facts::default()
        };
        let infra = node(
            "infra-1",
            json!({"node-role.kubernetes.io/infra": ""}),
            json!([]),
        );
        let c = judge(&[old], &[infra], &f);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.evidence[0].contains("still in Karpenter's namespace"),
            "{c:?}"
        );
    }

    fn judged(nodes: Vec<Node>) -> Check {
        let f = Facts {
            karpenter_namespace: "karpenter".into(),
            ..Facts::default()
        };
        judge(&[rotator()], &nodes, &f)
    }

    #[test]
    fn a_rotator_that_fits_no_node_fails_and_an_infra_node_makes_it_ok() {
        let worker = node("w", json!({"karpenter.sh/nodepool": "p"}), json!([]));
        let c = judged(vec![worker.clone()]);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.evidence[0].contains("w lacks the label(s) node-role.kubernetes.io/infra="),
            "{c:?}"
        );
        let tainted_wrong = node(
            "i",
            json!({"node-role.kubernetes.io/infra": ""}),
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        );
        let c = judged(vec![worker.clone(), tainted_wrong]);
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.evidence[0].contains("does not tolerate dedicated=infra:NoSchedule"),
            "{c:?}"
        );
        // An unreachable infra node is still a place for them (the taint is the node's health).
        let infra = node(
            "infra-1",
            json!({"node-role.kubernetes.io/infra": ""}),
            json!([{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
        );
        let c = judged(vec![worker, infra]);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.evidence[0].contains("fit infra-1"), "{c:?}");
    }
}
