//! What `plan --disrupt` prints: the commands in order, the nodes left alone and why, totals;
//! as a table or serialized (JSON/YAML), and one node's story (`--explain NODE`).

use std::fmt::Write as _;

use serde::Serialize;

pub(super) fn round(x: f64) -> f64 {
    // `+ 0.0` turns −0 into 0.
    (x * 1e6).round() / 1e6 + 0.0
}

/// A node a command removes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOut {
    pub name: String,
    pub node_pool: String,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    pub price_per_hour: f64,
}

/// The NodeClaim a command launches instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplacementOut {
    /// The name this simulation gives the new node (`<pool>-replacement-<n>`).
    pub name: String,
    pub node_pool: String,
    /// The type the launch would most likely get (as `plan` reports it).
    pub instance_type: String,
    /// The instance types the NodeClaim allows after the consolidation price filters,
    /// cheapest first.
    pub instance_type_options: Vec<String>,
    pub capacity_type: String,
    pub zone: String,
    pub price_per_hour: f64,
    /// Pods the simulation put on it.
    pub pods: Vec<String>,
}

/// One disruption command.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandOut {
    /// The controller pass that issued it (0: expiration or a reclaim, before the first pass).
    pub round: usize,
    /// Expiration, Interruption, Emptiness, Drift, MultiNodeConsolidation or
    /// SingleNodeConsolidation.
    pub method: String,
    /// Expired, Reclaimed, Empty, Drifted or Underutilized.
    pub reason: String,
    /// delete or replace.
    pub decision: String,
    pub nodes: Vec<NodeOut>,
    pub replacements: Vec<ReplacementOut>,
    pub pods_moved: usize,
    /// Pods moved onto nodes that were already there (listed for reclaims only: there, where
    /// each pod goes is the question; replacements list their own pods).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moved_to_existing: Vec<PodMove>,
    pub price_per_hour_before: f64,
    pub price_per_hour_after: f64,
    pub savings_per_hour: f64,
}

/// A pod and the node it was moved to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMove {
    pub pod: String,
    pub node: String,
}

/// What `--reclaim` took away.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimOut {
    pub selector: String,
    /// Catalog offerings (type × zone × capacity type) marked unavailable.
    pub unavailable_offerings: usize,
}

/// A node no command removed, with why (per method, from the last pass).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stranded {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptTotals {
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub nodes_removed: usize,
    pub replacements: usize,
    /// Every node with a known price, before and after (US dollars per hour).
    pub price_per_hour_before: f64,
    pub price_per_hour_after: f64,
    pub savings_per_hour: f64,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The simulated instant (RFC 3339).
    pub now: String,
    pub commands: Vec<CommandOut>,
    pub kept: Vec<Kept>,
    /// Pods of expired (or reclaimed) nodes that found no place.
    pub pending: Vec<Stranded>,
    /// With `--reclaim`: what was taken away (the disruption loop does not run then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimOut>,
    pub totals: DisruptTotals,
    /// The first pass's candidates per method evaluated (only when asked for: the oracle
    /// comparison reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<(String, Vec<String>)>,
    /// `--explain NODE`: that node's story, pass by pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<String>>,
    /// With a change not applied yet: the nodes it drifts, and in which order they go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<super::drift::DriftOut>,
    /// Nodes node repair acts on (reported, not simulated: see `disrupt::repair`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<super::repair::RepairOut>,
    /// Budgeted pools: spend before and after, and the room each leaves under its budget.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<crate::budget::BudgetRoom>,
    pub warnings: Vec<String>,
}

fn money(x: f64) -> String {
    format!("${:.4}", round(x))
}

impl Report {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The `--explain` story as text.
    pub fn render_explain(&self, node: &str) -> String {
        let mut out = format!("node {node} at {}\n", self.now);
        for line in self.explain.iter().flatten() {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(k) = self.kept.iter().find(|k| k.node == node) {
            let _ = writeln!(out, "kept; in the last pass:");
            for r in &k.reasons {
                let _ = writeln!(out, "  - {r}");
            }
        }
        out
    }

    pub fn render_table(&self) -> String {
        let mut out = String::new();
        match &self.reclaim {
            Some(r) => {
                let _ = writeln!(
                    out,
                    "Reclaim of {} at {}: {} offering(s) unavailable, as Karpenter's unavailable-offerings cache marks them",
                    r.selector, self.now, r.unavailable_offerings
                );
            }
            None => {
                let _ = writeln!(out, "Disruption at {}", self.now);
            }
        }
        if let Some(d) = &self.drift {
            d.render(&mut out);
        }
        if self.commands.is_empty() && self.reclaim.is_some() {
            let _ = writeln!(out, "\nNo node runs on that capacity: nothing moves.");
        } else if self.commands.is_empty() {
            let _ = writeln!(
                out,
                "\nNo disruption: Karpenter would leave every node in place."
            );
        } else {
            let _ = writeln!(
                out,
                "\n{:>5}  {:<24} {:<8} {:<44} {:<36} {:>10} {:>10}",
                "ROUND",
                "METHOD",
                "DECISION",
                "NODES REMOVED",
                "REPLACEMENT",
                "$/H BEFORE",
                "$/H AFTER"
            );
            for c in &self.commands {
                let nodes = c
                    .nodes
                    .iter()
                    .map(
                        |n| match (n.instance_type.as_str(), n.capacity_type.as_str()) {
                            ("", "") => n.name.clone(),
                            (t, c) => format!("{} ({t} {c})", n.name),
                        },
                    )
                    .collect::<Vec<_>>();
                let repl = c
                    .replacements
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} {} {}",
                            r.node_pool, r.instance_type, r.capacity_type, r.zone
                        )
                    })
                    .collect::<Vec<_>>();
                let rows = nodes.len().max(repl.len()).max(1);
                for i in 0..rows {
                    if i == 0 {
                        let _ = writeln!(
                            out,
                            "{:>5}  {:<24} {:<8} {:<44} {:<36} {:>10} {:>10}",
                            c.round,
                            c.method,
                            c.decision,
                            nodes.first().map_or("", String::as_str),
                            repl.first().map_or("-", String::as_str),
                            money(c.price_per_hour_before),
                            money(c.price_per_hour_after)
                        );
                    } else {
                        let _ = writeln!(
                            out,
                            "{:>5}  {:<24} {:<8} {:<44} {:<36}",
                            "",
                            "",
                            "",
                            nodes.get(i).map_or("", String::as_str),
                            repl.get(i).map_or("", String::as_str)
                        );
                    }
                }
            }
        }
        if !self.repairs.is_empty() {
            let _ = writeln!(
                out,
                "\nNode repair (with Karpenter's nodeRepair on; reported, not simulated: a repair launches a replacement first, then drains for at most its policy's bound):"
            );
            let _ = writeln!(
                out,
                "{:<32} {:<18} {:<40} {:<8} {:<22} EVICTS",
                "NODE", "NODEPOOL", "CONDITION", "ACTION", "DUE"
            );
            for r in &self.repairs {
                let due = match (&r.blocked, &r.due) {
                    (Some(_), _) => "blocked".to_owned(),
                    (None, Some(d)) if r.due_now => format!("now ({d})"),
                    (None, Some(d)) => d.clone(),
                    (None, None) => "-".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "{:<32} {:<18} {:<40} {:<8} {:<22} {}",
                    r.node,
                    r.node_pool.as_deref().unwrap_or("-"),
                    format!("{}={} {}", r.condition, r.status, r.reason),
                    r.action,
                    due,
                    if r.evicts.is_empty() {
                        "-".to_owned()
                    } else {
                        r.evicts.join(", ")
                    }
                );
                if let Some(why) = &r.blocked {
                    let _ = writeln!(out, "  blocked: {why}");
                }
            }
        }
        let existing: Vec<&PodMove> = self
            .commands
            .iter()
            .flat_map(|c| &c.moved_to_existing)
            .collect();
        let onto_new: Vec<(&str, &ReplacementOut)> = self
            .commands
            .iter()
            .filter(|c| c.method == "Interruption")
            .flat_map(|c| &c.replacements)
            .flat_map(|r| r.pods.iter().map(move |p| (p.as_str(), r)))
            .collect();
        if !existing.is_empty() || !onto_new.is_empty() {
            let _ = writeln!(out, "\nWhere the pods go:");
            for m in existing {
                let _ = writeln!(out, "  {} -> {} (already running)", m.pod, m.node);
            }
            for (pod, r) in onto_new {
                let _ = writeln!(
                    out,
                    "  {pod} -> {} (new: {} {} {}, {}/h)",
                    r.name,
                    r.instance_type,
                    r.capacity_type,
                    r.zone,
                    money(r.price_per_hour)
                );
            }
        }
        let t = &self.totals;
        if self.reclaim.is_some() {
            let _ = writeln!(
                out,
                "\nNodes: {} -> {} ({} reclaimed, {} new)   $/h: {} -> {}",
                t.nodes_before,
                t.nodes_after,
                t.nodes_removed,
                t.replacements,
                money(t.price_per_hour_before),
                money(t.price_per_hour_after),
            );
        } else {
            let _ = writeln!(
                out,
                "\nNodes: {} -> {} ({} removed, {} replacements)   $/h: {} -> {} (saves {}/h, {}/month)",
                t.nodes_before,
                t.nodes_after,
                t.nodes_removed,
                t.replacements,
                money(t.price_per_hour_before),
                money(t.price_per_hour_after),
                money(t.savings_per_hour),
                money(t.savings_per_hour * 730.0)
            );
        }
        for b in &self.budgets {
            let cheapest = b.cheapest.as_deref().unwrap_or("node");
            let _ = writeln!(
                out,
                "budget of nodepool {}: {}/h of {}/h now (room for {} more {cheapest}), {}/h after (room for {}){}",
                b.node_pool,
                money(b.spend_before),
                money(b.per_hour),
                b.room_before,
                money(b.spend_after),
                b.room_after,
                if b.room_after > b.room_before {
                    ": these commands free room under the budget"
                } else {
                    ""
                }
            );
        }
        if !self.kept.is_empty() {
            let _ = writeln!(out, "\nKept:");
            for k in &self.kept {
                let _ = writeln!(
                    out,
                    "  {} ({}): {}",
                    k.node,
                    k.node_pool.as_deref().unwrap_or("unmanaged"),
                    if k.reasons.is_empty() {
                        "no method found a cheaper arrangement".to_owned()
                    } else {
                        k.reasons.join("; ")
                    }
                );
            }
        }
        if !self.pending.is_empty() {
            let after = if self.reclaim.is_some() {
                "the reclaim"
            } else {
                "expiration"
            };
            let _ = writeln!(out, "\nPending after {after}:");
            for p in &self.pending {
                let _ = writeln!(out, "  {}: {}", p.pod, p.reason);
            }
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }
}
