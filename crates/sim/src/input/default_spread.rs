//! Karpenter's default pod topology spread (core v1.15.0, `--scheduler-config`
//! `podTopologySpread.defaultConstraints`, which mirrors kube-scheduler's `List` defaulting): a
//! pod with no topology spread constraints of its own gets each default constraint, with a
//! label selector deduced as kube-scheduler deduces it — the selectors of the Services in its
//! namespace that select it, and of its controlling ReplicaSet or StatefulSet. A pod with
//! constraints of its own keeps them (no merging); a pod whose deduced selector is empty (a
//! bare pod, a Job's, no Service) gets none. ReplicationControllers are not read.
//!
//! A Deployment read from a manifest stands for the ReplicaSet it creates: its selector, without
//! the `pod-template-hash` that ReplicaSet adds (it only tells this Deployment's pods from
//! another workload's with the same labels, which a valid cluster does not have).

use std::collections::BTreeMap;

use crate::model::{LabelSelector, SpreadConstraint};
use crate::req::Operator;

use super::workloads::Workload;

/// A ReplicaSet or StatefulSet known only as an owner (a cluster dump's, a scenario's): what
/// its pods' `ownerReferences` point at.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerSelector {
    pub namespace: String,
    /// `ReplicaSet` or `StatefulSet`.
    pub kind: String,
    pub name: String,
    pub uid: Option<String>,
    pub selector: LabelSelector,
}

/// A Service: its namespace and `spec.selector`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ServiceSelector {
    pub namespace: String,
    pub selector: BTreeMap<String, String>,
}

/// How a workload's pods reach a controller whose selector counts.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Controller {
    /// The workload is (or stands for) the controller: a ReplicaSet, a StatefulSet, a
    /// Deployment's ReplicaSet.
    Own(LabelSelector),
    /// A pod's controlling `ownerReference` to a ReplicaSet or StatefulSet.
    Reference {
        kind: String,
        name: String,
        uid: Option<String>,
    },
}

/// The controller kinds whose selector a default constraint takes.
pub(super) fn counts(kind: &str) -> bool {
    matches!(kind, "ReplicaSet" | "StatefulSet")
}

/// A controller's selector as kube-scheduler adds it: its `matchLabels` become `In`
/// expressions, ANDed with its own expressions.
fn as_expressions(selector: &LabelSelector) -> Vec<(String, Operator, Vec<String>)> {
    let mut out: Vec<(String, Operator, Vec<String>)> = selector
        .match_labels
        .iter()
        .map(|(k, v)| (k.clone(), Operator::In, vec![v.clone()]))
        .collect();
    out.extend(selector.match_expressions.iter().cloned());
    out
}

/// Gives each workload's pods without constraints of their own the default constraints, with
/// the selector deduced for them.
pub(super) fn inject(
    workloads: &mut [Workload],
    services: &[ServiceSelector],
    owners: &[OwnerSelector],
    defaults: &[SpreadConstraint],
) {
    if defaults.is_empty() {
        return;
    }
    let own: Vec<(String, String, String, LabelSelector)> = workloads
        .iter()
        .filter_map(|w| match &w.controller {
            Some(Controller::Own(s)) => Some((
                w.namespace.clone(),
                w.controller_kind().to_owned(),
                w.name.clone(),
                s.clone(),
            )),
            _ => None,
        })
        .collect();
    for w in workloads.iter_mut().filter(|w| !w.daemon) {
        let namespace = w.namespace.clone();
        let controller = w.controller.clone();
        let Some(template) = w.template.as_mut() else {
            continue;
        };
        if !template.spread.is_empty() {
            continue;
        }
        let mut selector = LabelSelector::default();
        for service in services.iter().filter(|s| s.namespace == namespace) {
            if !service.selector.is_empty()
                && service
                    .selector
                    .iter()
                    .all(|(k, v)| template.labels.get(k) == Some(v))
            {
                selector.match_labels.extend(service.selector.clone());
            }
        }
        let owner = match &controller {
            Some(Controller::Own(s)) => Some(s.clone()),
            Some(Controller::Reference { kind, name, uid }) => owners
                .iter()
                .find(|o| {
                    o.namespace == namespace
                        && &o.kind == kind
                        && &o.name == name
                        && (uid.is_none() || o.uid.is_none() || &o.uid == uid)
                })
                .map(|o| o.selector.clone())
                .or_else(|| {
                    own.iter()
                        .find(|(ns, k, n, _)| *ns == namespace && k == kind && n == name)
                        .map(|(_, _, _, s)| s.clone())
                }),
            None => None,
        };
        if let Some(owner) = owner {
            selector.match_expressions.extend(as_expressions(&owner));
            selector.match_expressions.sort();
        }
        if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
            continue;
        }
        template.spread = defaults
            .iter()
            .map(|c| SpreadConstraint {
                selector: Some(selector.clone()),
                ..c.clone()
            })
            .collect();
    }
}

/// Karpenter's scheduler configuration (`SCHEDULER_CONFIG`,
/// `{podTopologySpread: {defaultConstraints: [...]}}`) → its default constraints, checked as
/// Karpenter checks them at start-up: a positive maxSkew, a topology key, DoNotSchedule or
/// ScheduleAnyway, no labelSelector or matchLabelKeys (the selector is deduced), no two with
/// the same topology key and whenUnsatisfiable. Errors name the field.
pub fn default_constraints(config: &serde_json::Value) -> Result<Vec<SpreadConstraint>, String> {
    let Some(object) = config.as_object() else {
        return Err("not an object with podTopologySpread".into());
    };
    if let Some(other) = object.keys().find(|k| *k != "podTopologySpread") {
        return Err(format!(
            "{other}: not a field Karpenter's scheduler configuration has"
        ));
    }
    let Some(spread) = object.get("podTopologySpread") else {
        return Ok(Vec::new());
    };
    if let Some(other) = spread
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| *k != "defaultConstraints")
    {
        return Err(format!(
            "podTopologySpread.{other}: not a field Karpenter reads (it has no defaultingType: \
             kube-scheduler's System defaults are not mirrored)"
        ));
    }
    let items = spread
        .get("defaultConstraints")
        .map(|v| {
            v.as_array()
                .cloned()
                .ok_or("podTopologySpread.defaultConstraints: not a list")
        })
        .transpose()?
        .unwrap_or_default();
    let mut parsed = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let c: k8s_openapi::api::core::v1::TopologySpreadConstraint = serde_json::from_value(item)
            .map_err(|e| format!("podTopologySpread.defaultConstraints[{i}]: {e}"))?;
        parsed.push(c);
    }
    let written: Vec<kk_karpenter::default_spread::Written<'_>> = parsed
        .iter()
        .map(|c| kk_karpenter::default_spread::Written {
            max_skew: i64::from(c.max_skew),
            topology_key: &c.topology_key,
            when_unsatisfiable: &c.when_unsatisfiable,
            min_domains: c.min_domains.map(i64::from),
            node_affinity_policy: c.node_affinity_policy.as_deref(),
            node_taints_policy: c.node_taints_policy.as_deref(),
            has_selector: c.label_selector.is_some(),
            has_match_label_keys: c.match_label_keys.as_ref().is_some_and(|k| !k.is_empty()),
        })
        .collect();
    if let Some(problem) = kk_karpenter::default_spread::problems(&written).first() {
        let field = match problem.field {
            "" => String::new(),
            field => format!(".{field}"),
        };
        return Err(format!(
            "podTopologySpread.defaultConstraints[{}]{field}: {}",
            problem.index, problem.message
        ));
    }
    parsed
        .iter()
        .enumerate()
        .map(|(i, c)| {
            super::pods::spread_constraint(c)
                .map_err(|(f, m)| format!("podTopologySpread.defaultConstraints[{i}]{f}: {m}"))
        })
        .collect()
}
