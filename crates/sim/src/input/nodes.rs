//! Existing Nodes: labels, taints and what each advertises (`status.allocatable`, `capacity`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use serde_json::Value;

use super::InputError;
use super::read::{Ctx, join, quantity, taint};
use crate::labels;
use crate::model::Node;

pub(super) fn read_node(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
    warnings: &mut Vec<String>,
) -> Option<Node> {
    let node: core::Node = ctx.typed(value)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        ctx.err(&join(prefix, "metadata.name"), "a node needs a name");
        return None;
    }
    let mut labels_map = node.metadata.labels.clone().unwrap_or_default();
    labels_map
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| name.clone());
    let mut taints = Vec::new();
    for (i, t) in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        taints.extend(taint(ctx, &join(prefix, &format!("spec.taints[{i}]")), t));
    }
    let status = node.status.as_ref();
    let mut read = |which: &str,
                    list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let mut out = BTreeMap::new();
        for (k, q) in list.into_iter().flatten() {
            if let Some(v) = quantity(ctx, &join(prefix, &format!("status.{which}[{k}]")), k, &q.0)
            {
                out.insert(k.clone(), v);
            }
        }
        out
    };
    let mut allocatable = read("allocatable", status.and_then(|s| s.allocatable.as_ref()));
    let mut capacity = read("capacity", status.and_then(|s| s.capacity.as_ref()));
    if allocatable.is_empty() && capacity.is_empty() {
        // A Node whose kubelet has not reported yet (a live cluster has them while nodes join):
        // Karpenter's cluster state gives it no allocatable, so nothing is placed on it.
        warnings.push(format!(
            "{}: Node {name} reports no status.allocatable or status.capacity yet: taken as advertising nothing",
            ctx.file
        ));
    }
    if allocatable.is_empty() {
        allocatable = capacity.clone();
    }
    if capacity.is_empty() {
        capacity = allocatable.clone();
    }
    Some(Node {
        name,
        labels: labels_map,
        taints,
        allocatable,
        capacity,
    })
}

/// A node name given twice is an error (the file is not known by then).
pub(super) fn check_unique(nodes: &[Node], errors: &mut Vec<InputError>) {
    let mut node_names = BTreeSet::new();
    for n in nodes {
        if !node_names.insert(n.name.clone()) {
            errors.push(InputError {
                file: "<nodes>".into(),
                pos: None,
                field: String::new(),
                message: format!("node {} is defined twice", n.name),
            });
        }
    }
}
