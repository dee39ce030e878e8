//! The disruption loop (kubernetes-sigs/karpenter v1.14 `pkg/controllers/disruption`):
//! candidates (`types.go` `NewCandidate`, `helpers.go` `GetCandidates`), budgets
//! (`BuildDisruptionBudgetMapping`), the methods in the controller's order — Emptiness,
//! StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation — and the replacement
//! simulation (`SimulateScheduling`), which re-runs this crate's provisioning scheduler.
//!
//! One *round* is one `Reconcile`: the first method that yields a command wins, the command is
//! carried out at once (nodes gone, pods moved where the simulation put them, a replacement
//! node up and initialized), and the next round starts on the new state at the same instant.
//! Before the first round, nodes past `expireAfter` are removed (expiration is forceful: not
//! subject to budgets, `do-not-disrupt` or PDBs) and their pods re-provisioned.

use std::collections::{BTreeMap, BTreeSet};

use kk_catalog::CapacityType;

use super::report::{CommandOut, NodeOut, ReplacementOut};
use super::state::{ClusterState, NodeInfo, PodInfo, Policy, Reason};
use crate::labels;
use crate::model::{Effect, Node, Pod, Taint, Toleration, TolerationOp, untolerated};
use crate::plan::simulate;
use crate::req::{Requirement, Requirements};
use crate::solver::{ClaimResult, Input, Launch, Placement, launch};

/// `MinInstanceTypesForSpotToSpotConsolidation`.
const SPOT_TO_SPOT_MIN_TYPES: usize = 15;
/// Multi-node consolidation looks at the first 100 candidates (`maxParallel`).
const MULTI_NODE_MAX: usize = 100;
/// `v1.BalancedK`.
const BALANCED_K: f64 = 2.0;
/// The taint this simulation puts on nodes still inside `consolidateAfter`, so that pods moved
/// off a candidate avoid them and pending pods do not (`isUnderConsolidateAfter` in
/// `scheduler.go`).
pub const UNDER_CONSOLIDATE_AFTER: &str = "disrupt.kubean-karpenter.io/under-consolidate-after";

/// Settings of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Unix seconds.
    pub now: i64,
    /// Karpenter's `SpotToSpotConsolidation` feature gate (off by default).
    pub spot_to_spot: bool,
    /// Keep every round's reasons for this node.
    pub explain: Option<String>,
    /// Stop after this many rounds.
    pub max_rounds: usize,
    /// Record, for the first pass, each evaluated method's candidates (the oracle compares them).
    pub first_pass_candidates: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expiration,
    Emptiness,
    StaticDrift,
    Drift,
    MultiNode,
    SingleNode,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Expiration => "Expiration",
            Method::Emptiness => "Emptiness",
            Method::StaticDrift => "StaticDrift",
            Method::Drift => "Drift",
            Method::MultiNode => "MultiNodeConsolidation",
            Method::SingleNode => "SingleNodeConsolidation",
        }
    }
    fn reason(self) -> Reason {
        match self {
            Method::Emptiness => Reason::Empty,
            Method::StaticDrift | Method::Drift | Method::Expiration => Reason::Drifted,
            Method::MultiNode | Method::SingleNode => Reason::Underutilized,
        }
    }
    fn eventual(self) -> bool {
        matches!(self, Method::Drift | Method::StaticDrift)
    }
}

/// A node of the working state.
#[derive(Debug, Clone)]
pub(super) struct WNode {
    pub node: Node,
    pub info: NodeInfo,
    pub pool: Option<String>,
    /// Karpenter manages it (a NodeClaim, given or assumed from the nodepool label).
    pub managed: bool,
    pub it: Option<usize>,
    pub price: f64,
}

/// A disruption candidate.
#[derive(Debug, Clone)]
struct Cand {
    name: String,
    pool: String,
    price: f64,
    it: Option<usize>,
    capacity_type: Option<String>,
    zone: Option<String>,
    /// Reschedulable pods (`pod.IsReschedulable`).
    resched: usize,
    /// Pods the simulation moves (`IsCurrentlyReschedulable`).
    moving: Vec<Pod>,
    /// `RescheduleDisruptionCost`.
    cost: f64,
}

impl Cand {
    fn empty(&self) -> bool {
        self.cost <= 1.0
    }
    fn savings_ratio(&self) -> f64 {
        self.price / self.cost
    }
}

/// Where the simulation put a moved pod.
#[derive(Debug, Clone)]
enum Dest {
    Existing(String),
    Claim(usize),
}

struct Sim {
    claims: Vec<ClaimResult>,
    moves: Vec<(Pod, Dest)>,
}

/// A replacement about to be launched.
#[derive(Debug, Clone)]
struct Repl {
    claim: ClaimResult,
    launch: Launch,
}

#[derive(Debug, Clone)]
struct Cmd {
    method: Method,
    cands: Vec<Cand>,
    repls: Vec<Repl>,
    moves: Vec<(Pod, Dest)>,
    /// Pods of removed nodes that found no place (expiration only).
    stranded: Vec<(String, String)>,
}

pub(super) struct Engine<'a> {
    state: &'a ClusterState,
    opts: &'a Options,
    input: Input,
    pub nodes: BTreeMap<String, WNode>,
    pub bound: BTreeMap<String, Vec<Pod>>,
    pending: Vec<Pod>,
    bound_dirty: bool,
    pub commands: Vec<CommandOut>,
    pub reasons: BTreeMap<String, Vec<String>>,
    pub explained: Vec<String>,
    pub stranded: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// First pass: (method, sorted candidate names) per method evaluated.
    pub first_candidates: Vec<(String, Vec<String>)>,
    next_name: usize,
    round: usize,
}

fn price_of(catalog: &kk_catalog::Catalog, it: usize, zone: Option<&str>, ct: Option<&str>) -> f64 {
    catalog.types()[it]
        .offerings
        .iter()
        .find(|o| Some(&*o.zone) == zone && Some(o.capacity_type.as_str()) == ct)
        .map_or(0.0, |o| o.price)
}

/// `Offerings.WorstLaunchPrice`: the dearest compatible available spot offering, else the
/// dearest on-demand one.
fn worst_launch_price(it: &kk_catalog::InstanceType, reqs: &Requirements) -> f64 {
    let zr = reqs.get(labels::ZONE);
    let cr = reqs.get(labels::CAPACITY_TYPE);
    for ct in [CapacityType::Spot, CapacityType::OnDemand] {
        let worst = it
            .offerings
            .iter()
            .filter(|o| {
                o.available
                    && o.capacity_type == ct
                    && zr.has(&o.zone)
                    && cr.has(o.capacity_type.as_str())
            })
            .map(|o| o.price)
            .fold(f64::NAN, f64::max);
        if !worst.is_nan() {
            return worst;
        }
    }
    f64::MAX
}

fn cheapest_available(it: &kk_catalog::InstanceType) -> Option<f64> {
    it.offerings
        .iter()
        .filter(|o| o.available)
        .map(|o| o.price)
        .reduce(f64::min)
}

impl<'a> Engine<'a> {
    pub fn new(state: &'a ClusterState, opts: &'a Options) -> Engine<'a> {
        let input = state.input.clone();
        let catalog = &input.catalog;
        let mut nodes = BTreeMap::new();
        for n in &state.input.nodes {
            let info = state
                .nodes
                .get(&n.name)
                .cloned()
                .unwrap_or_else(|| NodeInfo {
                    name: n.name.clone(),
                    ready: true,
                    ..NodeInfo::default()
                });
            let pool = n.pool().map(str::to_owned);
            let it = n
                .labels
                .get(labels::INSTANCE_TYPE)
                .and_then(|t| catalog.types().iter().position(|x| &x.name == t));
            let price = it.map_or(0.0, |i| {
                price_of(
                    catalog,
                    i,
                    n.labels.get(labels::ZONE).map(String::as_str),
                    n.labels.get(labels::CAPACITY_TYPE).map(String::as_str),
                )
            });
            nodes.insert(
                n.name.clone(),
                WNode {
                    managed: pool.is_some(),
                    node: n.clone(),
                    info,
                    pool,
                    it,
                    price,
                },
            );
        }
        let mut bound: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
        for (node, p) in &state.input.bound {
            bound.entry(node.clone()).or_default().push(p.clone());
        }
        Engine {
            pending: state.input.pods.clone(),
            state,
            opts,
            input,
            nodes,
            bound,
            bound_dirty: true,
            commands: Vec::new(),
            reasons: BTreeMap::new(),
            explained: Vec::new(),
            stranded: Vec::new(),
            warnings: Vec::new(),
            first_candidates: Vec::new(),
            next_name: 0,
            round: 0,
        }
    }

    fn info(&self, p: &Pod) -> Option<&PodInfo> {
        self.state.pods.get(&(p.namespace.clone(), p.name.clone()))
    }

    fn note(&mut self, node: &str, method: Option<Method>, reason: String) {
        let text = match method {
            Some(m) => format!("{}: {reason}", m.name()),
            None => reason,
        };
        if self.opts.explain.as_deref() == Some(node) {
            self.explained.push(format!("round {}: {text}", self.round));
        }
        let v = self.reasons.entry(node.to_owned()).or_default();
        if !v.contains(&text) {
            v.push(text);
        }
    }

    /// `IsUnderConsolidateAfter` for a node.
    fn under_consolidate_after(&self, n: &WNode) -> Option<i64> {
        let pool = self.state.pools.get(n.pool.as_deref()?)?;
        let after = pool.consolidate_after.filter(|a| *a > 0)?;
        if !n.managed || !n.info.initialized {
            return None;
        }
        let since = n.info.last_pod_event.or(n.info.initialized_at).unwrap_or(0);
        (self.opts.now - since < after).then_some(since + after)
    }

    fn pool_kubelet(&self, pool: &str) -> Option<&kk_catalog::KubeletOverrides> {
        self.input
            .pools
            .iter()
            .find(|p| p.name == pool)
            .map(|p| &p.kubelet)
    }

    /// `SimulateScheduling`: the candidates' nodes gone, their pods (and the pending ones)
    /// scheduled over the rest plus new NodeClaims. `Err` names the pods that found no place.
    fn simulate(&mut self, cands: &[&Cand], consolidation: bool) -> Result<Sim, String> {
        let gone: BTreeSet<&str> = cands.iter().map(|c| c.name.as_str()).collect();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (name, n) in &self.nodes {
            if gone.contains(name.as_str()) {
                continue;
            }
            let mut node = n.node.clone();
            if consolidation && self.under_consolidate_after(n).is_some() {
                node.taints.push(Taint {
                    key: UNDER_CONSOLIDATE_AFTER.into(),
                    value: String::new(),
                    effect: Effect::NoSchedule,
                });
            }
            nodes.push(node);
        }
        if self.bound_dirty {
            self.input.bound = self
                .bound
                .iter()
                .flat_map(|(n, pods)| pods.iter().map(move |p| (n.clone(), p.clone())))
                .collect();
            self.bound_dirty = false;
        }
        let mut pods = self.pending.clone();
        if consolidation {
            for p in &mut pods {
                p.tolerations.push(Toleration {
                    key: UNDER_CONSOLIDATE_AFTER.into(),
                    operator: TolerationOp::Exists,
                    value: String::new(),
                    effect: None,
                });
            }
        }
        let first_moved = pods.len();
        for c in cands {
            pods.extend(c.moving.iter().cloned());
        }
        self.input.nodes = nodes;
        self.input.pods = pods;
        let outcome = simulate(&self.input);
        let mut failed = Vec::new();
        for (&pi, reason) in outcome.errors.range(first_moved..) {
            failed.push(format!("{}: {reason}", self.input.pods[pi].key()));
        }
        let mut moves = Vec::new();
        for pi in first_moved..self.input.pods.len() {
            match outcome.placements[pi] {
                Some(Placement::Existing(ni)) => {
                    let node = &self.input.nodes[ni];
                    let initialized = node.pool().is_none()
                        || node
                            .labels
                            .get(labels::INITIALIZED)
                            .is_some_and(|v| v == "true");
                    if !initialized {
                        failed.push(format!(
                            "{}: would schedule against uninitialized node/{}",
                            self.input.pods[pi].key(),
                            node.name
                        ));
                    }
                    moves.push((
                        self.input.pods[pi].clone(),
                        Dest::Existing(node.name.clone()),
                    ));
                }
                Some(Placement::Claim(ci)) => {
                    moves.push((self.input.pods[pi].clone(), Dest::Claim(ci)));
                }
                None => {}
            }
        }
        if !failed.is_empty() {
            let n = failed.len();
            failed.truncate(3);
            let more = if n > 3 {
                format!(" (and {} more)", n - 3)
            } else {
                String::new()
            };
            return Err(format!(
                "pods would not reschedule: {}{more}",
                failed.join("; ")
            ));
        }
        Ok(Sim {
            claims: outcome.claims,
            moves,
        })
    }

    fn do_launch(&self, claim: &ClaimResult) -> Option<Launch> {
        let kubelet = self.input.pools[claim.pool_index].kubelet.clone();
        let catalog = &self.input.catalog;
        let alloc = |ci: usize| {
            catalog.types()[ci]
                .allocatable(&kubelet)
                .iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        };
        launch(catalog, claim, alloc, &self.input.options)
    }

    /// `NewCandidate` for every node: the candidates, and why the others are not.
    fn candidates(&mut self, method: Method, record: bool) -> Vec<Cand> {
        let now = self.opts.now;
        let mut out = Vec::new();
        let mut notes = Vec::new();
        for (name, n) in &self.nodes {
            let why = |s: &str| (name.clone(), s.to_owned());
            if !n.managed {
                notes.push(why("node isn't managed by karpenter"));
                continue;
            }
            if !n.info.initialized {
                notes.push(why("node isn't initialized"));
                continue;
            }
            if n.info.deleting {
                notes.push(why("node is deleting or marked for deletion"));
                continue;
            }
            if n.info.do_not_disrupt {
                notes.push(why(
                    "disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation",
                ));
                continue;
            }
            let pool_name = n.pool.clone().unwrap_or_default();
            let Some(pool) = self.state.pools.get(&pool_name) else {
                notes.push((
                    name.clone(),
                    format!("NodePool not found (NodePool={pool_name})"),
                ));
                continue;
            };
            let pods = self.bound.get(name).map(Vec::as_slice).unwrap_or(&[]);
            let eventual_ok =
                method.eventual() && n.info.termination_grace.unwrap_or(pool.termination_grace);
            let mut blocked = None;
            for p in pods {
                let Some(info) = self.info(p) else { continue };
                if info.active() && info.do_not_disrupt_active(now) {
                    blocked = Some(format!(
                        "pod {} has \"karpenter.sh/do-not-disrupt\" annotation",
                        info.key()
                    ));
                    break;
                }
            }
            if blocked.is_none() {
                'pods: for p in pods {
                    let Some(info) = self.info(p) else { continue };
                    let tolerates_disrupted = untolerated(
                        &[Taint {
                            key: "karpenter.sh/disrupted".into(),
                            value: String::new(),
                            effect: Effect::NoSchedule,
                        }],
                        &p.tolerations,
                    )
                    .is_none();
                    if !info.active()
                        || tolerates_disrupted
                        || info.mirror()
                        || info.do_not_disrupt_active(now)
                    {
                        continue;
                    }
                    let matching: Vec<_> =
                        self.state.pdbs.iter().filter(|d| d.selects(info)).collect();
                    if matching.len() > 1 {
                        blocked = Some(format!(
                            "eviction does not support multiple PDBs ({}) for pod {}",
                            matching
                                .iter()
                                .map(|d| d.key())
                                .collect::<Vec<_>>()
                                .join(", "),
                            info.key()
                        ));
                        break;
                    }
                    for d in matching {
                        if d.always_allow_unhealthy && info.not_ready {
                            continue 'pods;
                        }
                        if d.disruptions_allowed == 0 {
                            blocked = Some(format!(
                                "pdb {} prevents pod evictions (pod {})",
                                d.key(),
                                info.key()
                            ));
                            break 'pods;
                        }
                    }
                }
            }
            if let Some(b) = blocked
                && !eventual_ok
            {
                notes.push((name.clone(), b));
                continue;
            }
            let mut resched = 0;
            let mut cost = 1.0;
            let mut moving = Vec::new();
            for p in pods {
                let Some(info) = self.info(p) else { continue };
                if !info.reschedulable() {
                    continue;
                }
                resched += 1;
                cost += info.eviction_cost().max(0.0);
                let fully_blocked = self.state.pdbs.iter().any(|d| {
                    d.selects(info)
                        && d.fully_blocking
                        && !(d.always_allow_unhealthy && info.not_ready)
                });
                if (!info.active() || !info.do_not_disrupt_active(now)) && !fully_blocked {
                    moving.push(p.clone());
                }
            }
            out.push(Cand {
                name: name.clone(),
                pool: pool_name,
                price: n.price,
                it: n.it,
                capacity_type: n.node.labels.get(labels::CAPACITY_TYPE).cloned(),
                zone: n.node.labels.get(labels::ZONE).cloned(),
                resched,
                moving,
                cost,
            });
        }
        if record {
            for (n, r) in notes {
                self.note(&n, None, r);
            }
        }
        out
    }

    /// `BuildDisruptionBudgetMapping`.
    fn budgets(&self, reason: Reason) -> BTreeMap<String, i64> {
        let mut count: BTreeMap<&str, i64> = BTreeMap::new();
        let mut disrupting: BTreeMap<&str, i64> = BTreeMap::new();
        for n in self.nodes.values() {
            if !n.managed || !n.info.initialized {
                continue;
            }
            let Some(p) = n.pool.as_deref() else { continue };
            *count.entry(p).or_default() += 1;
            if !n.info.ready || n.info.deleting {
                *disrupting.entry(p).or_default() += 1;
            }
        }
        self.state
            .pools
            .values()
            .map(|p| {
                let n = count.get(p.name.as_str()).copied().unwrap_or(0);
                let allowed = p.allowed(self.opts.now, n, reason);
                let d = disrupting.get(p.name.as_str()).copied().unwrap_or(0);
                (p.name.clone(), (allowed - d).max(0))
            })
            .collect()
    }

    /// Per-pool totals for the Balanced policy (`computeNodePoolTotals`; the pool's cost is
    /// every node's price, as the cluster cost tracker has it).
    fn totals(&self, cands: &[Cand]) -> BTreeMap<String, (f64, f64)> {
        let by_name: BTreeMap<&str, &Cand> = cands.iter().map(|c| (c.name.as_str(), c)).collect();
        let mut t: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for (name, n) in &self.nodes {
            let Some(pool) = &n.pool else { continue };
            let e = t.entry(pool.clone()).or_default();
            e.0 += n.price;
            e.1 += match by_name.get(name.as_str()) {
                Some(c) => c.cost,
                None => {
                    1.0 + self
                        .bound
                        .get(name)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| self.info(p))
                        .filter(|i| i.reschedulable())
                        .map(|i| i.eviction_cost().max(0.0))
                        .sum::<f64>()
                }
            };
        }
        t
    }

    fn balanced(&self, pool: &str) -> bool {
        self.state
            .pools
            .get(pool)
            .is_some_and(|p| p.policy == Policy::Balanced)
    }

    /// `EvaluateBalancedMove`: every Balanced pool of the command must score ≥ 1/k.
    fn approve(
        &self,
        cmd_cands: &[Cand],
        savings: f64,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Result<(), String> {
        let source: f64 = cmd_cands.iter().map(|c| c.price).sum();
        let pools: BTreeSet<&str> = cmd_cands.iter().map(|c| c.pool.as_str()).collect();
        for pool in &pools {
            if !self.balanced(pool) {
                continue;
            }
            let in_pool: Vec<&Cand> = cmd_cands.iter().filter(|c| c.pool == *pool).collect();
            let dcost: f64 = in_pool.iter().map(|c| c.cost).sum();
            let pcost: f64 = in_pool.iter().map(|c| c.price).sum();
            let s = if source > 0.0 && pools.len() > 1 {
                savings * pcost / source
            } else {
                savings
            };
            let (tc, td) = totals.get(*pool).copied().unwrap_or((0.0, 0.0));
            let score = if tc <= 0.0 || td <= 0.0 || s / tc <= 0.0 {
                0.0
            } else if dcost / td == 0.0 {
                f64::INFINITY
            } else {
                (s / tc) / (dcost / td)
            };
            if score < 1.0 / BALANCED_K {
                return Err(format!(
                    "Balanced policy of nodepool {pool}: score {score:.3} below 1/{BALANCED_K} (savings {:.1}% of the pool's cost, disruption {:.1}% of its disruption cost)",
                    100.0 * s / tc.max(f64::MIN_POSITIVE),
                    100.0 * dcost / td.max(f64::MIN_POSITIVE)
                ));
            }
        }
        Ok(())
    }

    /// `consolidation.ShouldDisrupt` (and Emptiness's): `Err` is why not.
    fn consolidatable(&self, c: &Cand, method: Method) -> Result<(), String> {
        let pool = &self.state.pools[&c.pool];
        if pool.static_pool {
            return Err("static NodePool".into());
        }
        let n = &self.nodes[&c.name];
        if method == Method::Emptiness {
            if pool.consolidate_after.is_none() {
                return Err(format!("NodePool {:?} has consolidation disabled", c.pool));
            }
            if !c.empty() {
                return Err(format!("not empty ({} reschedulable pods)", c.resched));
            }
        } else {
            if c.it.is_none() {
                return Err(format!(
                    "Instance Type {:?} not found",
                    n.node
                        .labels
                        .get(labels::INSTANCE_TYPE)
                        .cloned()
                        .unwrap_or_default()
                ));
            }
            if c.capacity_type.is_none() {
                return Err(format!(
                    "Node does not have label {:?}",
                    labels::CAPACITY_TYPE
                ));
            }
            if c.zone.is_none() {
                return Err(format!("Node does not have label {:?}", labels::ZONE));
            }
            if pool.consolidate_after.is_none() {
                return Err(format!("NodePool {:?} has consolidation disabled", c.pool));
            }
            if c.empty() {
                return Err("empty: left to Emptiness".into());
            }
            if pool.policy == Policy::WhenEmpty {
                return Err(format!(
                    "NodePool {:?} has consolidation policy WhenEmpty, but node is not empty",
                    c.pool
                ));
            }
        }
        if let Some(at) = self.under_consolidate_after(n) {
            return Err(format!(
                "consolidateAfter not elapsed: consolidatable at {}",
                super::clock::format_time(at)
            ));
        }
        Ok(())
    }

    /// `computeConsolidation` (with `computeSpotToSpotConsolidation`).
    fn consolidate(&mut self, cands: &[&Cand], method: Method) -> Result<Cmd, String> {
        let sim = self.simulate(cands, true)?;
        let owned: Vec<Cand> = cands.iter().map(|c| (*c).clone()).collect();
        if sim.claims.is_empty() {
            return Ok(Cmd {
                method,
                cands: owned,
                repls: Vec::new(),
                moves: sim.moves,
                stranded: Vec::new(),
            });
        }
        if sim.claims.len() != 1 {
            return Err(format!(
                "can't remove without creating {} nodes",
                sim.claims.len()
            ));
        }
        let price: f64 = cands.iter().map(|c| c.price).sum();
        let mut claim = sim.claims[0].clone();
        let catalog = &self.input.catalog;
        let all_spot = cands
            .iter()
            .all(|c| c.capacity_type.as_deref() == Some("spot"));
        if all_spot && claim.requirements.get(labels::CAPACITY_TYPE).has("spot") {
            if !self.opts.spot_to_spot {
                return Err(
                    "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                        .into(),
                );
            }
            claim
                .requirements
                .add(labels::CAPACITY_TYPE, Requirement::single("spot"));
            let zr = claim.requirements.get(labels::ZONE);
            claim.types.retain(|&ci| {
                catalog.types()[ci].offerings.iter().any(|o| {
                    o.available && o.capacity_type == CapacityType::Spot && zr.has(&o.zone)
                })
            });
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < price);
            if claim.types.is_empty() {
                return Err("can't replace with a cheaper node".into());
            }
            if cands.len() == 1 {
                if claim.types.len() < SPOT_TO_SPOT_MIN_TYPES {
                    return Err(format!(
                        "SpotToSpotConsolidation requires {SPOT_TO_SPOT_MIN_TYPES} cheaper instance type options than the current candidate to consolidate, got {}",
                        claim.types.len()
                    ));
                }
                claim.types.truncate(SPOT_TO_SPOT_MIN_TYPES);
            }
        } else {
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < price);
            if claim.types.is_empty() {
                return Err("can't replace with a cheaper node".into());
            }
            let ct = claim.requirements.get(labels::CAPACITY_TYPE);
            if ct.has("spot") && ct.has("on-demand") {
                claim
                    .requirements
                    .add(labels::CAPACITY_TYPE, Requirement::single("spot"));
            }
        }
        if method == Method::MultiNode {
            // filterOutSameInstanceType: no replacement dearer than a candidate's own type.
            let mut max_price = f64::MAX;
            for c in cands {
                let Some(it) = c.it else { continue };
                if claim.types.contains(&it) {
                    max_price = max_price.min(price_of(
                        catalog,
                        it,
                        c.zone.as_deref(),
                        c.capacity_type.as_deref(),
                    ));
                }
            }
            let reqs = claim.requirements.clone();
            claim
                .types
                .retain(|&ci| worst_launch_price(&catalog.types()[ci], &reqs) < max_price);
            if claim.types.is_empty() {
                return Err("only replaceable by the same instance type".into());
            }
        }
        let launch = self
            .do_launch(&claim)
            .ok_or("no launchable offering for the replacement")?;
        Ok(Cmd {
            method,
            cands: owned,
            repls: vec![Repl { claim, launch }],
            moves: sim.moves,
            stranded: Vec::new(),
        })
    }

    /// `Command.EstimatedSavings`: the candidates' prices less the cheapest available offering
    /// of the replacement's first option.
    fn savings(&self, cmd: &Cmd) -> f64 {
        let source: f64 = cmd.cands.iter().map(|c| c.price).sum();
        let dest: f64 = cmd
            .repls
            .iter()
            .filter_map(|r| r.claim.types.first())
            .filter_map(|&ci| cheapest_available(&self.input.catalog.types()[ci]))
            .sum();
        source - dest
    }

    fn sort_by_savings(cands: &mut [Cand]) {
        // Upstream sorts with sort.Slice on candidates in map order (ties random); here ties
        // keep name order.
        cands.sort_by(|a, b| {
            b.savings_ratio()
                .total_cmp(&a.savings_ratio())
                .then(a.name.cmp(&b.name))
        });
    }

    fn emptiness(&mut self, cands: Vec<Cand>) -> Option<Cmd> {
        let mut cands = cands;
        Self::sort_by_savings(&mut cands);
        let mut budget = self.budgets(Reason::Empty);
        let mut chosen = Vec::new();
        for c in cands {
            let left = budget.entry(c.pool.clone()).or_default();
            if *left == 0 {
                self.note(
                    &c.name,
                    Some(Method::Emptiness),
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Empty",
                        c.pool
                    ),
                );
                continue;
            }
            *left -= 1;
            chosen.push(c);
        }
        (!chosen.is_empty()).then(|| Cmd {
            method: Method::Emptiness,
            cands: chosen,
            repls: Vec::new(),
            moves: Vec::new(),
            stranded: Vec::new(),
        })
    }

    fn drift(&mut self, mut cands: Vec<Cand>) -> Option<Cmd> {
        cands.sort_by_key(|c| (self.nodes[&c.name].info.drifted_at, c.name.clone()));
        let (empty, busy): (Vec<Cand>, Vec<Cand>) = cands.into_iter().partition(|c| c.resched == 0);
        let budget = self.budgets(Reason::Drifted);
        for c in empty.into_iter().chain(busy) {
            if budget.get(&c.pool).copied().unwrap_or(0) == 0 {
                self.note(
                    &c.name,
                    Some(Method::Drift),
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Drifted",
                        c.pool
                    ),
                );
                continue;
            }
            match self.simulate(&[&c], false) {
                Err(e) => self.note(&c.name, Some(Method::Drift), e),
                Ok(sim) => {
                    let mut repls = Vec::new();
                    for claim in sim.claims {
                        match self.do_launch(&claim) {
                            Some(launch) => repls.push(Repl { claim, launch }),
                            None => {
                                self.note(
                                    &c.name,
                                    Some(Method::Drift),
                                    "no launchable offering for a replacement".into(),
                                );
                                continue;
                            }
                        }
                    }
                    return Some(Cmd {
                        method: Method::Drift,
                        cands: vec![c],
                        repls,
                        moves: sim.moves,
                        stranded: Vec::new(),
                    });
                }
            }
        }
        None
    }

    fn multi_node(
        &mut self,
        mut cands: Vec<Cand>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Cmd> {
        Self::sort_by_savings(&mut cands);
        let mut budget = self.budgets(Reason::Underutilized);
        let mut ok = Vec::new();
        for c in cands {
            let left = budget.entry(c.pool.clone()).or_default();
            if *left == 0 {
                continue;
            }
            *left -= 1;
            ok.push(c);
        }
        if ok.len() < 2 {
            return None;
        }
        // firstNConsolidationOption: binary search on the prefix length.
        let mut lo = 1usize;
        let mut hi = if ok.len() <= MULTI_NODE_MAX {
            ok.len() - 1
        } else {
            MULTI_NODE_MAX
        };
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let batch: Vec<&Cand> = ok[..=mid].iter().collect();
            let valid = match self.consolidate(&batch, Method::MultiNode) {
                Ok(cmd) => {
                    let s = self.savings(&cmd);
                    self.approve(&cmd.cands, s, totals).is_ok().then_some(cmd)
                }
                Err(_) => None,
            };
            match valid {
                Some(cmd) => {
                    best = Some(cmd);
                    lo = mid + 1;
                }
                None => {
                    if mid == 0 {
                        break;
                    }
                    hi = mid - 1;
                }
            }
        }
        best
    }

    fn single_node(
        &mut self,
        mut cands: Vec<Cand>,
        totals: &BTreeMap<String, (f64, f64)>,
    ) -> Option<Cmd> {
        Self::sort_by_savings(&mut cands);
        // shuffleCandidates: round-robin over the NodePools (upstream: map order; here by name).
        let mut by_pool: BTreeMap<String, Vec<Cand>> = BTreeMap::new();
        for c in cands {
            by_pool.entry(c.pool.clone()).or_default().push(c);
        }
        let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
        let mut order = Vec::new();
        for i in 0..longest {
            for list in by_pool.values() {
                if let Some(c) = list.get(i) {
                    order.push(c.clone());
                }
            }
        }
        let budget = self.budgets(Reason::Underutilized);
        for c in order {
            let m = Some(Method::SingleNode);
            if budget.get(&c.pool).copied().unwrap_or(0) == 0 {
                self.note(
                    &c.name,
                    m,
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Underutilized",
                        c.pool
                    ),
                );
                continue;
            }
            if self.balanced(&c.pool)
                && let Some(&(tc, td)) = totals.get(&c.pool)
                && tc > 0.0
            {
                let score = if td <= 0.0 || c.price / tc <= 0.0 {
                    0.0
                } else {
                    (c.price / tc) / (c.cost / td)
                };
                if score < 1.0 / BALANCED_K {
                    self.note(&c.name, m, format!("Balanced policy: the node cannot pass the score threshold ({score:.3} < 1/{BALANCED_K})"));
                    continue;
                }
            }
            match self.consolidate(&[&c], Method::SingleNode) {
                Err(e) => self.note(&c.name, m, e),
                Ok(cmd) => {
                    let s = self.savings(&cmd);
                    if let Err(e) = self.approve(&cmd.cands, s, totals) {
                        self.note(&c.name, m, e);
                        continue;
                    }
                    return Some(cmd);
                }
            }
        }
        None
    }

    /// Expired nodes go first, all at once, whatever blocks graceful disruption.
    fn expire(&mut self) {
        let now = self.opts.now;
        let expired: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                let Some(pool) = n.pool.as_deref() else {
                    return false;
                };
                let after = n
                    .info
                    .expire_after
                    .unwrap_or_else(|| self.state.pools.get(pool).and_then(|p| p.expire_after));
                n.managed && matches!((after, n.info.created), (Some(a), Some(c)) if now >= c + a)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        let cands: Vec<Cand> = expired
            .iter()
            .map(|name| {
                let n = &self.nodes[name];
                let moving: Vec<Pod> = self
                    .bound
                    .get(name)
                    .into_iter()
                    .flatten()
                    .filter(|p| self.info(p).is_some_and(PodInfo::reschedulable))
                    .cloned()
                    .collect();
                Cand {
                    name: name.clone(),
                    pool: n.pool.clone().unwrap_or_default(),
                    price: n.price,
                    it: n.it,
                    capacity_type: n.node.labels.get(labels::CAPACITY_TYPE).cloned(),
                    zone: n.node.labels.get(labels::ZONE).cloned(),
                    resched: moving.len(),
                    cost: 1.0,
                    moving,
                }
            })
            .collect();
        let refs: Vec<&Cand> = cands.iter().collect();
        // Provisioning for the evicted pods: failures stay Pending.
        let (claims, moves, stranded) = match self.simulate(&refs, false) {
            Ok(sim) => (sim.claims, sim.moves, Vec::new()),
            Err(_) => {
                // Re-run to learn which pods are placed; keep those, strand the rest.
                let outcome = simulate(&self.input);
                let first = self.pending.len();
                let mut moves = Vec::new();
                let mut stranded = Vec::new();
                for pi in first..self.input.pods.len() {
                    let p = self.input.pods[pi].clone();
                    match outcome.placements[pi] {
                        Some(Placement::Existing(ni)) => {
                            moves.push((p, Dest::Existing(self.input.nodes[ni].name.clone())));
                        }
                        Some(Placement::Claim(ci)) => moves.push((p, Dest::Claim(ci))),
                        None => stranded.push((
                            p.key(),
                            outcome.errors.get(&pi).cloned().unwrap_or_default(),
                        )),
                    }
                }
                (outcome.claims, moves, stranded)
            }
        };
        let mut repls = Vec::new();
        for claim in claims {
            if let Some(launch) = self.do_launch(&claim) {
                repls.push(Repl { claim, launch });
            }
        }
        let cmd = Cmd {
            method: Method::Expiration,
            cands,
            repls,
            moves,
            stranded,
        };
        self.apply(cmd);
    }

    /// Carries a command out and records it.
    fn apply(&mut self, cmd: Cmd) {
        let now = self.opts.now;
        let catalog = self.input.catalog.clone();
        let before: f64 = cmd.cands.iter().map(|c| c.price).sum();
        let mut nodes_out = Vec::new();
        for c in &cmd.cands {
            let n = self.nodes.remove(&c.name).expect("candidate exists");
            self.bound.remove(&c.name);
            nodes_out.push(NodeOut {
                name: c.name.clone(),
                node_pool: c.pool.clone(),
                instance_type: n
                    .node
                    .labels
                    .get(labels::INSTANCE_TYPE)
                    .cloned()
                    .unwrap_or_default(),
                capacity_type: c.capacity_type.clone().unwrap_or_default(),
                zone: c.zone.clone().unwrap_or_default(),
                price_per_hour: super::report::round(c.price),
            });
        }
        let mut repl_names = Vec::new();
        let mut repls_out = Vec::new();
        for r in &cmd.repls {
            self.next_name += 1;
            let name = format!("{}-replacement-{}", r.claim.pool, self.next_name);
            let it = &catalog.types()[r.launch.instance_type];
            let kubelet = self
                .pool_kubelet(&r.claim.pool)
                .cloned()
                .unwrap_or_default();
            let pool = self.input.pools.iter().find(|p| p.name == r.claim.pool);
            let mut lbls: BTreeMap<String, String> = it
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            for (k, req) in r.claim.requirements.iter() {
                if let Some(v) = req.single_value()
                    && !lbls.contains_key(k)
                {
                    lbls.insert(k.to_owned(), v.to_owned());
                }
            }
            if let Some(p) = pool {
                lbls.extend(p.labels.clone());
            }
            for (k, v) in [
                (labels::NODEPOOL, r.claim.pool.clone()),
                (labels::INSTANCE_TYPE, it.name.clone()),
                (labels::ZONE, r.launch.zone.clone()),
                (
                    labels::CAPACITY_TYPE,
                    r.launch.capacity_type.as_str().to_owned(),
                ),
                (labels::HOSTNAME, name.clone()),
                (labels::REGISTERED, "true".into()),
                (labels::INITIALIZED, "true".into()),
            ] {
                lbls.insert(k.to_owned(), v);
            }
            let to_map = |r: kk_catalog::Resources| {
                r.iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect::<BTreeMap<_, _>>()
            };
            let node = Node {
                name: name.clone(),
                labels: lbls,
                taints: pool.map(|p| p.taints.clone()).unwrap_or_default(),
                allocatable: to_map(it.allocatable(&kubelet)),
                capacity: to_map(it.capacity.clone()),
            };
            let expire = self
                .state
                .pools
                .get(&r.claim.pool)
                .and_then(|p| p.expire_after);
            self.nodes.insert(
                name.clone(),
                WNode {
                    node,
                    info: NodeInfo {
                        name: name.clone(),
                        claim: Some(name.clone()),
                        created: Some(now),
                        initialized_at: Some(now),
                        initialized: true,
                        last_pod_event: Some(now),
                        expire_after: Some(expire),
                        ready: true,
                        ..NodeInfo::default()
                    },
                    pool: Some(r.claim.pool.clone()),
                    managed: true,
                    it: Some(r.launch.instance_type),
                    price: r.launch.price,
                },
            );
            repl_names.push(name.clone());
            repls_out.push(ReplacementOut {
                name,
                node_pool: r.claim.pool.clone(),
                instance_type: it.name.clone(),
                instance_type_options: r
                    .claim
                    .types
                    .iter()
                    .map(|&ci| catalog.types()[ci].name.clone())
                    .collect(),
                capacity_type: r.launch.capacity_type.as_str().to_owned(),
                zone: r.launch.zone.clone(),
                price_per_hour: super::report::round(r.launch.price),
                pods: Vec::new(),
            });
        }
        let mut moved = 0;
        for (p, dest) in cmd.moves {
            moved += 1;
            let target = match dest {
                Dest::Existing(n) => n,
                Dest::Claim(k) => {
                    if let Some(out) = repls_out.get_mut(k) {
                        out.pods.push(p.key());
                    }
                    match repl_names.get(k) {
                        Some(n) => n.clone(),
                        None => continue,
                    }
                }
            };
            if let Some(n) = self.nodes.get_mut(&target) {
                n.info.last_pod_event = Some(now);
            }
            self.bound.entry(target).or_default().push(p);
        }
        for (pod, reason) in &cmd.stranded {
            self.stranded.push((pod.clone(), reason.clone()));
        }
        for r in &mut repls_out {
            r.pods.sort();
        }
        self.bound_dirty = true;
        let after: f64 = cmd.repls.iter().map(|r| r.launch.price).sum();
        if let Some(x) = &self.opts.explain
            && cmd.cands.iter().any(|c| &c.name == x)
        {
            self.explained.push(format!(
                "round {}: {}: {} (with {} other node(s)){}",
                self.round,
                cmd.method.name(),
                if cmd.repls.is_empty() {
                    "deleted"
                } else {
                    "replaced"
                },
                cmd.cands.len() - 1,
                if repl_names.is_empty() {
                    String::new()
                } else {
                    format!(" by {}", repl_names.join(", "))
                }
            ));
        }
        self.commands.push(CommandOut {
            round: self.round,
            method: cmd.method.name().to_owned(),
            reason: if cmd.method == Method::Expiration {
                "Expired".to_owned()
            } else {
                cmd.method.reason().as_str().to_owned()
            },
            decision: if cmd.repls.is_empty() {
                "delete"
            } else {
                "replace"
            }
            .to_owned(),
            nodes: nodes_out,
            replacements: repls_out,
            pods_moved: moved,
            price_per_hour_before: super::report::round(before),
            price_per_hour_after: super::report::round(after),
            savings_per_hour: super::report::round(before - after),
        });
    }

    /// One `Reconcile`: the first method with a command wins. False when none has one.
    fn reconcile(&mut self) -> bool {
        self.reasons.clear();
        let methods = [
            Method::Emptiness,
            Method::StaticDrift,
            Method::Drift,
            Method::MultiNode,
            Method::SingleNode,
        ];
        let graceful = self.candidates(Method::Emptiness, true);
        let eventual = self.candidates(Method::Drift, false);
        let totals = self.totals(&graceful);
        for m in methods {
            let pool_of = |c: &Cand| self.state.pools[&c.pool].clone();
            let mut chosen = Vec::new();
            match m {
                Method::StaticDrift => {
                    for c in &eventual {
                        if pool_of(c).static_pool && self.nodes[&c.name].info.drifted_at.is_some() {
                            self.warnings.push(format!(
                                "node {}: drifted node of a static NodePool; static drift is not modelled",
                                c.name
                            ));
                        }
                    }
                }
                Method::Drift => {
                    for c in &eventual {
                        if self.nodes[&c.name].info.drifted_at.is_some() {
                            if pool_of(c).static_pool {
                                continue;
                            }
                            chosen.push(c.clone());
                        }
                    }
                }
                _ => {
                    for c in &graceful {
                        match self.consolidatable(c, m) {
                            Ok(()) => chosen.push(c.clone()),
                            Err(e) => {
                                let quiet = e.starts_with("empty: left")
                                    || (m == Method::Emptiness && e.starts_with("not empty"))
                                    || (m == Method::MultiNode);
                                if !quiet {
                                    self.note(&c.name, Some(m), e);
                                }
                            }
                        }
                    }
                }
            }
            if self.opts.first_pass_candidates && self.round == 1 {
                let mut names: Vec<String> = chosen.iter().map(|c| c.name.clone()).collect();
                names.sort();
                self.first_candidates.push((m.name().to_owned(), names));
            }
            if chosen.is_empty() {
                continue;
            }
            let cmd = match m {
                Method::Emptiness => self.emptiness(chosen),
                Method::Drift => self.drift(chosen),
                Method::MultiNode => self.multi_node(chosen, &totals),
                Method::SingleNode => self.single_node(chosen, &totals),
                _ => None,
            };
            if let Some(cmd) = cmd {
                self.apply(cmd);
                return true;
            }
        }
        false
    }

    pub fn run(&mut self) {
        self.expire();
        loop {
            self.round += 1;
            if self.round > self.opts.max_rounds {
                self.warnings.push(format!(
                    "stopped after {} rounds; more disruption may follow",
                    self.opts.max_rounds
                ));
                break;
            }
            if !self.reconcile() {
                break;
            }
        }
    }
}
