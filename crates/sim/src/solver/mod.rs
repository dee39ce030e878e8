//! The scheduling loop (kubernetes-sigs/karpenter v1.14 `pkg/controllers/provisioning/scheduling`
//! `scheduler.go`, `nodeclaim.go`, `existingnode.go`, `queue.go`, `preferences.go`).
//!
//! Pods are queued by CPU, then memory, descending. Each pod tries existing nodes (by name),
//! then the NodeClaims opened so far (fewest pods first), then a new NodeClaim from each
//! NodePool by weight (equal weights: name descending), the first that accepts winning. A pod
//! that fits nowhere has its preferences relaxed one at a time and is tried again; when even
//! the relaxed pod fails, its original goes back to the end of the queue. The loop ends when the
//! queue cycles without progress.
//!
//! Module map: `queue.rs` runs the loop and tries each target; `prepare.rs`
//! turns the input into per-NodePool instance-type tables and topology domains;
//! `existing.rs` holds the existing nodes; `claims.rs` the in-flight and new NodeClaims;
//! `limits.rs` the NodePool limits; `relax.rs` preference relaxation; `fit.rs` the checks
//! existing nodes and claims share; `outcome.rs` what the loop returns; `update.rs` changes a prepared cluster in place; `bits.rs` the set of
//! instance types a claim still has; `reserve.rs` which capacity reservations a claim
//! holds (strict mode, as the provisioner runs it); `launch.rs` the AWS provider's part (what a type offers,
//! which one a claim launches as).

use std::collections::HashMap;
use std::sync::Arc;

use kk_catalog::Catalog;

use crate::model::{Node, Pod, Pool, Taint};
use crate::offerings::Reservations;
use crate::req::{Requirement, Requirements};
use crate::res::{Res, ResIndex};
use crate::topology::Topology;

mod bits;
mod claims;
mod existing;
mod fit;
mod launch;
mod limits;
mod outcome;
mod prepare;
mod queue;
mod relax;
mod reserve;
mod screen;
mod update;

use bits::Bits;
use limits::Limits;
use screen::Screens;

pub(crate) use launch::is_exotic;
pub use launch::{Launch, instance_requirements, launch, launch_fitting};
pub use outcome::{Attempt, ClaimResult, Outcome, Placement, PodError, Trace};
pub use prepare::Prepared;
pub use update::NodeChange;

/// Scheduler settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Instance types kept per NodeClaim (`MaxInstanceTypes`, 600).
    pub max_instance_types: usize,
    /// Instance types the AWS provider sends to CreateFleet (60).
    pub launch_instance_types: usize,
    /// Karpenter's `--preference-policy=Ignore`.
    pub ignore_preferences: bool,
    /// Karpenter's `--min-values-policy` (`settings.minValuesPolicy`).
    pub min_values_policy: MinValuesPolicy,
}

/// What Karpenter does when a NodePool's instance types cannot meet a `minValues`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// The pool launches nothing (Karpenter's default).
    #[default]
    Strict,
    /// A new NodeClaim lowers each short `minValues` to what its types offer; pods joining a
    /// claim later are held to the claim's (lowered) values.
    BestEffort,
}

impl MinValuesPolicy {
    /// `Strict` / `BestEffort`, as Karpenter's flag and chart spell them.
    pub fn parse(text: &str) -> Option<MinValuesPolicy> {
        match text {
            "Strict" => Some(MinValuesPolicy::Strict),
            "BestEffort" => Some(MinValuesPolicy::BestEffort),
            _ => None,
        }
    }

    /// A JSON field holding the policy: `None` when absent or null; the error names the value.
    pub fn from_json(value: Option<&serde_json::Value>) -> Result<Option<MinValuesPolicy>, String> {
        match value {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v
                .as_str()
                .and_then(MinValuesPolicy::parse)
                .map(Some)
                .ok_or_else(|| format!("{v} is not Strict or BestEffort")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_instance_types: 600,
            launch_instance_types: 60,
            ignore_preferences: false,
            min_values_policy: MinValuesPolicy::Strict,
        }
    }
}

/// Everything a simulation reads.
#[derive(Debug, Clone)]
pub struct Input {
    pub pools: Vec<Pool>,
    pub pods: Vec<Pod>,
    /// One template pod per DaemonSet.
    pub daemonsets: Vec<Pod>,
    pub nodes: Vec<Node>,
    /// Pods already running on an existing node (by node name).
    pub bound: Vec<(String, Pod)>,
    pub catalog: Catalog,
    pub options: Options,
    /// Problems found while loading that did not stop it.
    pub warnings: Vec<String>,
}

/// Up to this many in-flight claims, their order follows Go's `sort.Slice` exactly.
const GO_SORT_EXACT: usize = 1024;

/// One instance type as a NodePool sees it.
#[derive(Debug, Clone)]
struct PoolInstanceType {
    cat: usize,
    /// Allocatable less the overhead of the DaemonSets that would run on it.
    net: Res,
    alloc_ok: bool,
    capacity: Res,
    group: usize,
}

#[derive(Debug, Clone)]
struct PreparedPool {
    input: usize,
    name: String,
    taints: Vec<Taint>,
    template: Requirements,
    types: Vec<PoolInstanceType>,
    /// DaemonSet overhead per group of types that run the same DaemonSets.
    group_overhead: Vec<Res>,
    all: Bits,
    compat_cache: HashMap<String, HashMap<Requirement, Bits>>,
    offer_cache: HashMap<crate::offerings::OfferingFilter, Bits>,
    limits: Limits,
}

#[derive(Debug, Clone)]
struct Claim {
    pool: usize,
    hostname: String,
    host: u32,
    reqs: Requirements,
    types: Bits,
    requests: Res,
    max_net: Res,
    pods: Vec<usize>,
    host_ports: Vec<(i32, String)>,
    /// The capacity reservations the claim holds an instance of (`reservedOfferings`).
    reserved: Vec<Arc<str>>,
}

#[derive(Debug, Clone)]
struct ExistingNode {
    node: usize,
    /// Shared with the prepared template until a pod joins: every probe starts from a copy
    /// of every existing node, and most nodes take no pod.
    reqs: Arc<Requirements>,
    taints: Vec<Taint>,
    host: u32,
    pods: Vec<usize>,
    host_ports: Vec<(i32, String)>,
}

#[derive(Debug, Clone)]
struct PodData {
    requests: Res,
    reqs: Requirements,
    strict: Requirements,
}

pub(crate) struct Scheduler<'a> {
    input: &'a Input,
    /// The pods to schedule (the input's, or a probe's).
    pods: &'a [Pod],
    index: ResIndex,
    cat_reqs: &'a [Requirements],
    pools: Vec<PreparedPool>,
    claims: Vec<Claim>,
    /// In-flight claims in the order upstream's `newNodeClaims` slice has: new claims are
    /// appended, and the slice is re-sorted by pod count with Go's `sort.Slice` before each
    /// pod tries them (reproduced exactly by [`crate::gosort`] up to `GO_SORT_EXACT` claims;
    /// beyond that, as a stable sort, which keeps large plans fast).
    order: Vec<usize>,
    /// What the scan over `order` reads of each claim first.
    screens: Screens,
    existing: Vec<ExistingNode>,
    /// Each existing node's room (what its pods leave), side by side in one vector
    /// (`index.len()` slots a node): most pods fit on few of a thousand nodes, and screening
    /// them here reads one array, where a vector per node cost an allocation per node and
    /// probe.
    rooms: Vec<i64>,
    topology: Topology,
    data: Vec<PodData>,
    tolerate_prefer_no_schedule: bool,
    trace_pod: Option<usize>,
    trace: Trace,
    warnings: Vec<String>,
    placements: Vec<Option<Placement>>,
    no_pools: bool,
    /// Topology keys other than the hostname.
    topo_keys: Vec<String>,
    reservations: Reservations,
}

/// One provisioning simulation of `input` (with `trace_pod`'s attempts recorded).
pub(crate) fn solve(input: &Input, trace_pod: Option<usize>) -> Outcome {
    let prepared = Prepared::new(std::borrow::Cow::Borrowed(input));
    prepared.scheduler(&input.pods, &[], trace_pod).solve()
}
