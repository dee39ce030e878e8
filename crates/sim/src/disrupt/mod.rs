//! `plan --disrupt`: what Karpenter's disruption controller (kubernetes-sigs/karpenter v1.14
//! `pkg/controllers/disruption`) would do to a running cluster — which nodes it would expire,
//! delete as empty, replace because they drifted, or consolidate (several at once, then one at a
//! time), with which replacement, at what $/h, and why it leaves the others alone.
//!
//! Pure and deterministic: the state comes in as text ([`state::load`]), the clock is a
//! parameter ([`Options::now`]), and where upstream breaks ties by Go map order (candidates of
//! equal savings, the order NodePools are visited by single-node consolidation) this module
//! takes name order. Upstream's time limits (multi-node consolidation gives up after 1 minute,
//! single-node after 3) apply only when the caller hands in a clock ([`Options::watch`],
//! `--budget-time`): without one a run is unbounded (see docs/guide/plan.md).

pub mod clock;
pub mod drift;
mod engine;
pub mod reclaim;
pub mod repair;
pub mod report;
pub mod scenario;
pub mod state;

pub use engine::{Clock, Method, Options, Progress, UNDER_CONSOLIDATE_AFTER, Watch};
pub use reclaim::Selector;
pub use report::{CommandOut, Kept, NodeOut, PodMove, ReplacementOut, Report};
pub use state::{ClusterState, load};

/// The annotation that blocks voluntary disruption of a node or of a pod's node.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// Why a simulation could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DisruptError {
    /// `--explain` named a node the state does not hold.
    #[error("node {0} is not among the inputs")]
    UnknownNode(String),
}

/// Runs the disruption controller over `state` at `opts.now` until no method has a command.
pub fn run(state: &ClusterState, opts: &Options) -> Result<Report, DisruptError> {
    run_with(state, opts, false)
}

/// [`run`], preparing the cluster afresh after every command instead of changing the prepared
/// one in place: slower, and what [`run`] must equal (a test compares the two).
pub fn run_rebuilding(state: &ClusterState, opts: &Options) -> Result<Report, DisruptError> {
    run_with(state, opts, true)
}

fn run_with(state: &ClusterState, opts: &Options, rebuild: bool) -> Result<Report, DisruptError> {
    if let Some(node) = &opts.explain
        && !state.nodes.contains_key(node)
        && !state.input.nodes.iter().any(|n| &n.name == node)
    {
        return Err(DisruptError::UnknownNode(node.clone()));
    }
    let nodes_before = state.input.nodes.len();
    let mut e = engine::Engine::new(state, opts);
    e.rebuild = rebuild;
    let price_before: f64 = e.nodes.values().map(|n| n.price).sum();
    e.run();
    let price_after: f64 = e.nodes.values().map(|n| n.price).sum();
    // A reclaim runs no disruption method, so no node was "kept" by one.
    let kept = e
        .nodes
        .iter()
        .filter(|_| opts.reclaim.is_none())
        .filter(|(name, _)| !name.contains("-replacement-") || e.reasons.contains_key(*name))
        .map(|(name, n)| Kept {
            node: name.clone(),
            node_pool: n.pool.clone(),
            reasons: e.reasons.get(name).cloned().unwrap_or_default(),
        })
        .collect();
    let removed: usize = e.commands.iter().map(|c| c.nodes.len()).sum();
    let replacements: usize = e.commands.iter().map(|c| c.replacements.len()).sum();
    let mut warnings = state.warnings.clone();
    if let Some(zone) = opts.reclaim.as_ref().and_then(|r| r.zone.as_deref())
        && state.input.catalog.zones().iter().all(|z| z == zone)
    {
        warnings.push(format!(
            "{zone} is the only zone offered (the nodes' zones, unless --zones names more): nothing can replace what it loses"
        ));
    }
    for w in &e.warnings {
        if !warnings.contains(w) {
            warnings.push(w.clone());
        }
    }
    Ok(Report {
        now: clock::format_time(opts.now),
        totals: report::DisruptTotals {
            nodes_before,
            nodes_after: e.nodes.len(),
            nodes_removed: removed,
            replacements,
            price_per_hour_before: report::round(price_before),
            price_per_hour_after: report::round(price_after),
            savings_per_hour: report::round(price_before - price_after),
        },
        commands: std::mem::take(&mut e.commands),
        kept,
        pending: e
            .stranded
            .iter()
            .map(|(pod, reason)| report::Stranded {
                pod: pod.clone(),
                reason: reason.clone(),
            })
            .collect(),
        explain: opts
            .explain
            .as_ref()
            .map(|_| std::mem::take(&mut e.explained)),
        candidates: std::mem::take(&mut e.first_candidates),
        reclaim: opts.reclaim.as_ref().map(|r| report::ReclaimOut {
            selector: r.to_string(),
            unavailable_offerings: r.offerings(&state.input.catalog).len(),
        }),
        drift: None,
        repairs: repair::repairs(state, opts.now, opts.reboot_for_repair),
        budgets: crate::budget::room(&state.input.pools, |pool| {
            e.nodes
                .values()
                .filter(|n| n.pool.as_deref() == Some(pool))
                .map(|n| n.price)
                .sum()
        }),
        warnings,
    })
}
