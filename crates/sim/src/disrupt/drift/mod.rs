//! Drift from a change not applied yet (`plan --disrupt --nodeclass/--nodepool/--spec`): which
//! nodes the new NodePools and EC2NodeClasses would drift, as Karpenter decides it
//! (kubernetes-sigs/karpenter v1.14 `pkg/controllers/nodeclaim/disruption/drift.go`, the AWS
//! provider's `pkg/cloudprovider/drift.go`), checked in Karpenter's order, the first that holds
//! being the reason:
//!
//! 1. NodePool static drift: the fields its hash covers differ ([`fields::node_pool`]);
//! 2. requirement drift: the NodeClaim's labels no longer satisfy the new requirements;
//! 3. EC2NodeClass static drift ([`fields::node_class`]);
//! 4. AMI drift: the NodeClaim's image is not among the new class's AMIs for its instance type.
//!
//! [`apply`] marks those nodes `Drifted` now (nodes already drifted keep their time) and puts the
//! new objects in place, so the disruption engine then replaces them as Karpenter would:
//! under each pool's `Drifted` budgets, empty nodes first, one command per pass.

mod ami;
mod fields;

use std::collections::BTreeMap;

use kk_karpenter::Requirements;
use kk_karpenter::drift::{DriftReason, REPLACEMENT_ORDER};
use serde::Serialize;
use serde_json::Value;

use super::clock::format_time;
use super::state::{ClusterState, NodeInfo, Reason};
use crate::labels;

/// A node the change drifts (or that had drifted already).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedNode {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    pub node_pool: String,
    /// Karpenter's reason: NodePoolDrifted, RequirementsDrifted, NodeClassDrift or AMIDrift;
    /// `Drifted` for a node the state already shows drifted.
    pub reason: String,
    pub detail: String,
    /// No pod to move: Karpenter takes it before the others.
    pub empty: bool,
    /// It had drifted before the change (its own `Drifted` time).
    pub already_drifted: bool,
}

/// One pool's drift.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolDrift {
    pub node_pool: String,
    /// Its initialized nodes Karpenter manages.
    pub nodes: usize,
    pub drifted: usize,
    /// How many it replaces at once: the smallest active `Drifted` budget, less nodes
    /// already NotReady or being deleted (never more than the drifted nodes).
    pub at_once: i64,
}

/// Nodes whose replacement order Karpenter does not fix among themselves.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderGroup {
    pub empty: bool,
    pub drifted_at: String,
    pub nodes: Vec<String>,
}

/// The drift a change causes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftOut {
    /// What the change alters, object by object.
    pub changes: Vec<String>,
    pub nodes: Vec<DriftedNode>,
    pub pools: Vec<PoolDrift>,
    /// The replacement order, group by group; within a group it is not determined.
    pub order: Vec<OrderGroup>,
    pub order_rule: String,
    /// Nodes the change leaves alone.
    pub unchanged: Vec<String>,
}

/// The NodePool or EC2NodeClass a change names: as it is, and as it would be.
struct Pair<'a> {
    old: &'a Value,
    new: &'a Value,
}

fn pair<'a>(
    live: &'a BTreeMap<String, Value>,
    proposed: &'a BTreeMap<String, Value>,
    name: &str,
) -> Option<Pair<'a>> {
    Some(Pair {
        old: live.get(name)?,
        new: proposed.get(name)?,
    })
}

/// Whether a node has no pod Karpenter would move (`IsReschedulable`).
fn is_empty(state: &ClusterState, node: &str) -> bool {
    !state.input.bound.iter().any(|(n, p)| {
        n == node
            && state
                .pods
                .get(&(p.namespace.clone(), p.name.clone()))
                .is_some_and(|i| i.reschedulable())
    })
}

/// The first reason the change drifts `node` for, with what changed.
fn reason(
    state: &ClusterState,
    proposed: &ClusterState,
    info: &NodeInfo,
    pool: &str,
    warnings: &mut Vec<String>,
) -> Option<(DriftReason, String)> {
    if let Some(p) = pair(&state.node_pools, &proposed.node_pools, pool) {
        let changed = fields::differences(
            "spec.template",
            &fields::node_pool(p.old),
            &fields::node_pool(p.new),
        );
        if !changed.is_empty() {
            return Some((DriftReason::NodePoolDrifted, changed.join(", ")));
        }
        if let Some(new_pool) = proposed.input.pools.iter().find(|x| x.name == pool) {
            let claim = Requirements::from_labels(&info.claim_labels);
            if let Err(conflict) = claim.compatible(&new_pool.requirements, false) {
                return Some((DriftReason::RequirementsDrifted, conflict.to_string()));
            }
        }
    }
    let class = info.node_class.clone().or_else(|| {
        state
            .node_pools
            .get(pool)?
            .pointer("/spec/template/spec/nodeClassRef/name")?
            .as_str()
            .map(str::to_owned)
    })?;
    let p = pair(&state.node_classes, &proposed.node_classes, &class)?;
    let changed = fields::differences(
        "spec",
        &fields::node_class(p.old),
        &fields::node_class(p.new),
    );
    if !changed.is_empty() {
        return Some((DriftReason::NodeClassDrift, changed.join(", ")));
    }
    let instance_type = info.claim_labels.get(labels::INSTANCE_TYPE)?;
    let it = state
        .input
        .catalog
        .types()
        .iter()
        .find(|t| &t.name == instance_type);
    ami::drifted(&class, p.old, p.new, info.image_id.as_deref(), it, warnings)
        .map(|detail| (DriftReason::AmiDrift, detail))
}

/// What the change alters, for the report.
fn changes(
    state: &ClusterState,
    proposed: &ClusterState,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, new) in &proposed.node_pools {
        let Some(old) = state.node_pools.get(name) else {
            warnings.push(format!(
                "NodePool {name} is new: no node of it runs, nothing drifts from it"
            ));
            continue;
        };
        let changed = fields::differences(
            "spec.template",
            &fields::node_pool(old),
            &fields::node_pool(new),
        );
        let reqs = old.pointer("/spec/template/spec/requirements")
            != new.pointer("/spec/template/spec/requirements");
        let mut what = changed;
        if reqs {
            what.push(
                "spec.template.spec.requirements (checked against each node's labels)".into(),
            );
        }
        if what.is_empty() {
            what.push("nothing Karpenter's drift looks at".into());
        }
        out.push(format!("NodePool {name}: {}", what.join(", ")));
    }
    for (name, new) in &proposed.node_classes {
        let Some(old) = state.node_classes.get(name) else {
            warnings.push(format!(
                "EC2NodeClass {name} is new: no node of it runs, nothing drifts from it"
            ));
            continue;
        };
        let mut what =
            fields::differences("spec", &fields::node_class(old), &fields::node_class(new));
        if let Some(ami) = ami::describe_change(old, new) {
            what.push(ami);
        }
        if what.is_empty() {
            what.push("nothing Karpenter's drift looks at".into());
        }
        out.push(format!("EC2NodeClass {name}: {}", what.join(", ")));
    }
    out
}

/// Marks the nodes `proposed` (NodePools and EC2NodeClasses read like a state) drifts at `now`,
/// puts its NodePools in place of the state's, and says what it did.
pub fn apply(state: &mut ClusterState, proposed: &ClusterState, now: i64) -> DriftOut {
    let mut warnings = Vec::new();
    let changes = changes(state, proposed, &mut warnings);
    let mut nodes = Vec::new();
    let mut unchanged = Vec::new();
    let mut marks = Vec::new();
    for (name, info) in &state.nodes {
        let Some(pool) = info
            .claim_labels
            .get(labels::NODEPOOL)
            .or_else(|| {
                state
                    .input
                    .nodes
                    .iter()
                    .find(|n| &n.name == name)?
                    .labels
                    .get(labels::NODEPOOL)
            })
            .cloned()
        else {
            continue;
        };
        let empty = is_empty(state, name);
        if let Some(at) = info.drifted_at {
            nodes.push(DriftedNode {
                node: name.clone(),
                node_claim: info.claim.clone(),
                node_pool: pool,
                reason: "Drifted".into(),
                detail: format!("drifted before the change, at {}", format_time(at)),
                empty,
                already_drifted: true,
            });
            continue;
        }
        match reason(state, proposed, info, &pool, &mut warnings) {
            Some((why, detail)) => {
                marks.push(name.clone());
                nodes.push(DriftedNode {
                    node: name.clone(),
                    node_claim: info.claim.clone(),
                    node_pool: pool,
                    reason: why.as_str().into(),
                    detail,
                    empty,
                    already_drifted: false,
                });
            }
            None => unchanged.push(name.clone()),
        }
    }
    for name in &marks {
        if let Some(info) = state.nodes.get_mut(name) {
            info.drifted_at = Some(now);
        }
    }
    put_in_place(state, proposed, &mut warnings);
    let pools = pool_drift(state, &nodes, now);
    let order = order(state, &nodes);
    for w in warnings {
        if !state.warnings.contains(&w) {
            state.warnings.push(w);
        }
    }
    DriftOut {
        changes,
        nodes,
        pools,
        order,
        order_rule: REPLACEMENT_ORDER.into(),
        unchanged,
    }
}

/// The new NodePools replace the state's (their replacements launch from them; budgets and
/// consolidation settings apply at once). A NodePool whose EC2NodeClass the change leaves out
/// keeps the kubelet settings it had.
fn put_in_place(state: &mut ClusterState, proposed: &ClusterState, warnings: &mut Vec<String>) {
    for new in &proposed.input.pools {
        let Some(slot) = state.input.pools.iter_mut().find(|p| p.name == new.name) else {
            continue;
        };
        let mut new = new.clone();
        if !proposed.node_classes.contains_key(&new.node_class) {
            new.kubelet = slot.kubelet.clone();
        }
        *slot = new;
    }
    for (name, settings) in &proposed.pools {
        if state.pools.contains_key(name) {
            state.pools.insert(name.clone(), settings.clone());
        }
    }
    for name in proposed.node_classes.keys() {
        let kubelet_changed = state.node_classes.get(name).is_some_and(|old| {
            old.pointer("/spec/kubelet") != proposed.node_classes[name].pointer("/spec/kubelet")
        });
        let pools_left: Vec<&str> = state
            .input
            .pools
            .iter()
            .filter(|p| &p.node_class == name && !proposed.node_pools.contains_key(&p.name))
            .map(|p| p.name.as_str())
            .collect();
        if kubelet_changed && !pools_left.is_empty() {
            warnings.push(format!(
                "EC2NodeClass {name}: its kubelet settings change, but replacements of NodePool(s) {} are sized with the old ones (pass those NodePools too)",
                pools_left.join(", ")
            ));
        }
    }
}

fn pool_drift(state: &ClusterState, nodes: &[DriftedNode], now: i64) -> Vec<PoolDrift> {
    let mut out = Vec::new();
    for (name, settings) in &state.pools {
        let drifted = nodes.iter().filter(|n| &n.node_pool == name).count();
        if drifted == 0 {
            continue;
        }
        let members: Vec<&NodeInfo> = state
            .nodes
            .values()
            .filter(|i| i.initialized)
            .filter(|i| {
                state
                    .input
                    .nodes
                    .iter()
                    .any(|n| n.name == i.name && n.pool() == Some(name.as_str()))
            })
            .collect();
        let disrupting = members.iter().filter(|i| !i.ready || i.deleting).count() as i64;
        let allowed = settings.allowed(now, members.len() as i64, Reason::Drifted);
        out.push(PoolDrift {
            node_pool: name.clone(),
            nodes: members.len(),
            drifted,
            at_once: (allowed - disrupting).clamp(0, drifted as i64),
        });
    }
    out
}

/// Empty first, then by drift time; nodes of one group share both.
fn order(state: &ClusterState, nodes: &[DriftedNode]) -> Vec<OrderGroup> {
    let mut keyed: BTreeMap<(bool, i64), Vec<String>> = BTreeMap::new();
    for n in nodes {
        let at = state.nodes[&n.node].drifted_at.unwrap_or(0);
        keyed
            .entry((!n.empty, at))
            .or_default()
            .push(n.node.clone());
    }
    keyed
        .into_iter()
        .map(|((busy, at), nodes)| OrderGroup {
            empty: !busy,
            drifted_at: format_time(at),
            nodes,
        })
        .collect()
}

impl DriftOut {
    /// The table's drift section: what changed, which nodes drift and why, per pool how many
    /// at once, and the order.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "\nChange:");
        for c in &self.changes {
            let _ = writeln!(out, "  {c}");
        }
        if self.nodes.is_empty() {
            let _ = writeln!(out, "\nDrift: no node drifts.");
            return;
        }
        let _ = writeln!(
            out,
            "\n{:<44} {:<20} {:<20} {:<6} DETAIL",
            "DRIFTED NODE", "NODEPOOL", "REASON", "EMPTY"
        );
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "{:<44} {:<20} {:<20} {:<6} {}",
                n.node,
                n.node_pool,
                n.reason,
                if n.empty { "yes" } else { "no" },
                n.detail
            );
        }
        for p in &self.pools {
            let _ = writeln!(
                out,
                "NodePool {}: {} of {} nodes drift, {} at a time (Drifted budget), one replacement per pass",
                p.node_pool, p.drifted, p.nodes, p.at_once
            );
        }
        let _ = writeln!(out, "Order ({}):", self.order_rule);
        for (i, g) in self.order.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {}. {}{} (drifted {}): {}",
                i + 1,
                if g.empty { "empty" } else { "with pods" },
                if g.nodes.len() > 1 {
                    ", any order among them"
                } else {
                    ""
                },
                g.drifted_at,
                g.nodes.join(", ")
            );
        }
    }
}
