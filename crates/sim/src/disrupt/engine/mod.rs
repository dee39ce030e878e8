//! The disruption loop (kubernetes-sigs/karpenter v1.14 `pkg/controllers/disruption`):
//! candidates (`types.go` `NewCandidate`, `helpers.go` `GetCandidates`), budgets
//! (`BuildDisruptionBudgetMapping`), the methods in the controller's order — Emptiness,
//! StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation — and the replacement
//! simulation (`SimulateScheduling`), which re-runs this crate's provisioning scheduler.
//! One file per method, as upstream has: `emptiness.rs`, `drift.rs`,
//! `multi_node_consolidation.rs`, `single_node_consolidation.rs` (StaticDrift is not modelled;
//! `reconcile` only warns of it); `consolidate.rs` holds what the consolidations share.
//!
//! One *round* is one `Reconcile`: the first method that yields a command wins, the command is
//! carried out at once (nodes gone, pods moved where the simulation put them, a replacement
//! node up and initialized), and the next round starts on the new state at the same instant.
//! Before the first round, nodes past `expireAfter` are removed (expiration is forceful: not
//! subject to budgets, `do-not-disrupt` or PDBs) and their pods re-provisioned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::report::CommandOut;
use super::state::{ClusterState, NodeInfo, PodInfo, Reason};
use crate::labels;
use crate::model::{Node, Pod};
use crate::solver::{ClaimResult, Input, Launch};

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
    /// Instead of the disruption loop: this capacity is reclaimed and unavailable.
    pub reclaim: Option<super::reclaim::Selector>,
    /// A clock for time limits and progress (`--budget-time`); `None`: unbounded.
    pub watch: Option<Watch>,
    /// Karpenter's `rebootForRepair` (AWS gate): repairs of reboot-class XIDs reboot.
    pub reboot_for_repair: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expiration,
    /// A reclaim (`--reclaim`): Karpenter's interruption controller, not its disruption loop.
    Interruption,
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
            Method::Interruption => "Interruption",
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
            Method::StaticDrift | Method::Drift | Method::Expiration | Method::Interruption => {
                Reason::Drifted
            }
            Method::MultiNode | Method::SingleNode => Reason::Underutilized,
        }
    }
    fn eventual(self) -> bool {
        matches!(self, Method::Drift | Method::StaticDrift)
    }
}

/// A node of the working state.
#[derive(Debug, Clone)]
pub(super) struct WorkingNode {
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
struct Candidate {
    name: String,
    pool: String,
    price: f64,
    it: Option<usize>,
    capacity_type: Option<String>,
    zone: Option<String>,
    /// Reschedulable pods (`pod.IsReschedulable`).
    reschedulable: usize,
    /// Pods the simulation moves (`IsCurrentlyReschedulable`), by index into the node's bound
    /// pods (unchanged until a command is carried out); shared, as every method that
    /// considers the candidate copies it.
    moving: Arc<[usize]>,
    /// `RescheduleDisruptionCost`.
    cost: f64,
}

impl Candidate {
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
struct Replacement {
    claim: ClaimResult,
    launch: Launch,
}

#[derive(Debug, Clone)]
struct Command {
    method: Method,
    candidates: Vec<Candidate>,
    replacements: Vec<Replacement>,
    moves: Vec<(Pod, Dest)>,
    /// Pods of removed nodes that found no place (expiration only).
    stranded: Vec<(String, String)>,
}

pub(super) struct Engine<'a> {
    state: &'a ClusterState,
    /// `state.pods` by borrowed (namespace, name): looked up for every bound pod of every
    /// candidate, each pass, where the owned-key map would allocate the key each time.
    pod_infos: HashMap<(&'a str, &'a str), &'a PodInfo>,
    opts: &'a Options,
    input: Input,
    pub nodes: BTreeMap<String, WorkingNode>,
    pub bound: BTreeMap<String, Vec<Pod>>,
    pending: Vec<Pod>,
    /// The state prepared for probes, for consolidation (true) or not; a command changes it
    /// in place (`update_prepared`).
    prepared: Option<(bool, crate::solver::Prepared<'static>)>,
    /// Prepare the state afresh after every command instead (what the in-place change must
    /// equal; a test compares the two).
    pub rebuild: bool,
    /// Per node: `NewCandidate`'s answer for graceful methods and for Drift, kept until a
    /// command touches the node.
    candidate_cache: HashMap<String, [Option<Result<Candidate, String>>; 2]>,
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

mod apply;
mod candidates;
mod consolidate;
mod drift;
mod emptiness;
mod multi_node_consolidation;
mod reclaim;
mod simulate;
mod single_node_consolidation;
mod watch;

pub use watch::{Clock, Progress, Watch};

fn price_of(catalog: &kk_catalog::Catalog, it: usize, zone: Option<&str>, ct: Option<&str>) -> f64 {
    catalog.types()[it]
        .offerings
        .iter()
        .find(|o| Some(&*o.zone) == zone && Some(o.capacity_type.as_str()) == ct)
        .map_or(0.0, |o| o.price)
}

impl<'a> Engine<'a> {
    pub fn new(state: &'a ClusterState, opts: &'a Options) -> Engine<'a> {
        // The cluster's nodes and pods live in `nodes`, `bound` and `pending`; `input` keeps
        // the rest (each prepared state fills them in).
        let input = Input {
            pools: state.input.pools.clone(),
            pods: Vec::new(),
            daemonsets: state.input.daemonsets.clone(),
            nodes: Vec::new(),
            bound: Vec::new(),
            catalog: state.input.catalog.clone(),
            options: state.input.options.clone(),
            warnings: state.input.warnings.clone(),
        };
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
                WorkingNode {
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
        let pod_infos = state
            .pods
            .iter()
            .map(|((ns, name), info)| ((ns.as_str(), name.as_str()), info))
            .collect();
        Engine {
            pending: state.input.pods.clone(),
            state,
            pod_infos,
            opts,
            input,
            nodes,
            bound,
            prepared: None,
            rebuild: false,
            candidate_cache: HashMap::new(),
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

    fn info(&self, p: &Pod) -> Option<&'a PodInfo> {
        self.pod_infos
            .get(&(p.namespace.as_str(), p.name.as_str()))
            .copied()
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
    fn under_consolidate_after(&self, n: &WorkingNode) -> Option<i64> {
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
        // Only drifted nodes are eventual candidates of any use (StaticDrift, Drift).
        let eventual = if self.nodes.values().any(|n| n.info.drifted_at.is_some()) {
            self.candidates(Method::Drift, false)
        } else {
            Vec::new()
        };
        let totals = self.totals(&graceful);
        let state = self.state;
        for m in methods {
            let pool_of = |c: &Candidate| &state.pools[&c.pool];
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
            let command = match m {
                Method::Emptiness => self.emptiness(chosen),
                Method::Drift => self.drift(chosen),
                Method::MultiNode => self.multi_node(chosen, &totals),
                Method::SingleNode => self.single_node(chosen, &totals),
                _ => None,
            };
            if let Some(command) = command {
                self.apply(command);
                return true;
            }
        }
        false
    }

    pub fn run(&mut self) {
        if let Some(selector) = &self.opts.reclaim {
            self.reclaim(selector);
            return;
        }
        self.expire();
        let mut watch = watch::Stopwatch::start(self.opts.watch.as_ref());
        loop {
            self.round += 1;
            let (round, commands) = (self.round, self.commands.len());
            let removed: usize = self.commands.iter().map(|c| c.nodes.len()).sum();
            watch.tick(|| {
                format!("pass {round}: {commands} commands so far, {removed} nodes removed")
            });
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
