//! A cluster's state for the disruption simulation, read from manifests: what the provisioning
//! simulation already reads (NodePools, EC2NodeClasses, Nodes, Pods, DaemonSets — through
//! [`crate::load_with_catalog`]) plus what disruption reads and scheduling does not: the
//! NodePools' `spec.disruption` and `expireAfter`, NodeClaims (creation, conditions
//! `Initialized`/`Drifted`, `lastPodEventTime`, `expireAfter`), annotations
//! (`karpenter.sh/do-not-disrupt`, pod deletion cost), pod owners, phases and start times, and
//! PodDisruptionBudgets.
//!
//! Every kind may come from any file (a `kubectl get … -o yaml` dump works). Objects are not
//! defaulted by an apiserver, so the NodePool CRD's defaults are applied here:
//! `consolidationPolicy: WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`,
//! `budgets: [{nodes: 10%}]`, `template.spec.expireAfter: 720h`.

use std::collections::BTreeMap;

use super::clock::{Cron, parse_duration};
use crate::model::LabelSelector;
use crate::solver::Input;

/// `spec.disruption.consolidationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    WhenEmpty,
    WhenEmptyOrUnderutilized,
    Balanced,
}

/// A disruption reason as budgets name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Empty,
    Drifted,
    Underutilized,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Drifted => "Drifted",
            Reason::Underutilized => "Underutilized",
        }
    }
}

/// `nodes` of a budget: a count or a percentage of the pool's nodes (rounded up).
pub use kk_karpenter::budget::BudgetNodes;

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// `None`: every reason.
    pub reasons: Option<Vec<Reason>>,
    pub nodes: BudgetNodes,
    /// (schedule, duration in seconds): active only within `duration` after a hit.
    pub schedule: Option<(Cron, i64)>,
}

impl Budget {
    /// `Budget.GetAllowedDisruptions`: `i64::from(i32::MAX)` when inactive.
    pub fn allowed(&self, now: i64, nodes: i64) -> i64 {
        if let Some((cron, duration)) = &self.schedule
            && !cron.active(now, *duration)
        {
            return i64::from(i32::MAX);
        }
        self.nodes.allowed(nodes)
    }
}

/// A NodePool's disruption settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    pub name: String,
    pub policy: Policy,
    /// `None`: `consolidateAfter: Never` (consolidation disabled).
    pub consolidate_after: Option<i64>,
    pub budgets: Vec<Budget>,
    /// `template.spec.expireAfter`; `None`: Never.
    pub expire_after: Option<i64>,
    /// `template.spec.terminationGracePeriod` is set.
    pub termination_grace: bool,
    /// `spec.replicas` is set (a static NodePool).
    pub static_pool: bool,
}

impl PoolSettings {
    /// `NodePool.GetAllowedDisruptionsByReason`: the smallest allowance of the budgets that
    /// apply to `reason` and are active now.
    pub fn allowed(&self, now: i64, nodes: i64, reason: Reason) -> i64 {
        self.budgets
            .iter()
            .filter(|b| b.reasons.as_ref().is_none_or(|r| r.contains(&reason)))
            .map(|b| b.allowed(now, nodes))
            .min()
            .unwrap_or(i64::from(i32::MAX))
    }
}

/// What disruption reads of a node and its NodeClaim.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInfo {
    pub name: String,
    /// A NodeClaim was given for it (else one is assumed from the node when it is labelled
    /// `karpenter.sh/nodepool`).
    pub claim: Option<String>,
    pub created: Option<i64>,
    /// NodeClaim `Initialized` transition (else the node's creation).
    pub initialized_at: Option<i64>,
    pub initialized: bool,
    /// NodeClaim `status.lastPodEventTime` (else the newest pod bound to the node).
    pub last_pod_event: Option<i64>,
    /// NodeClaim `spec.expireAfter` (else the NodePool's); `None`: Never.
    pub expire_after: Option<Option<i64>>,
    /// NodeClaim `Drifted=True` since.
    pub drifted_at: Option<i64>,
    pub termination_grace: Option<bool>,
    pub do_not_disrupt: bool,
    pub deleting: bool,
    pub ready: bool,
    /// NodeClaim `status.imageID` (what AMI drift compares).
    pub image_id: Option<String>,
    /// NodeClaim labels (what requirement drift compares; the node's when no NodeClaim).
    pub claim_labels: BTreeMap<String, String>,
    /// NodeClaim `spec.nodeClassRef.name`.
    pub node_class: Option<String>,
    /// The Node's conditions Karpenter's node repair acts on (`kk_karpenter::repair`).
    pub unhealthy: Vec<Unhealthy>,
}

/// A Node condition node repair acts on, as the Node holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unhealthy {
    pub condition: String,
    pub status: String,
    pub reason: String,
    /// `lastTransitionTime`, Unix seconds.
    pub since: Option<i64>,
}

/// What disruption reads of a pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub node: Option<String>,
    /// (apiVersion, kind) of each owner reference.
    pub owners: Vec<(String, String)>,
    pub do_not_disrupt: Option<String>,
    pub started: Option<i64>,
    pub created: Option<i64>,
    pub terminal: bool,
    /// `status.phase` (empty when the pod has no status yet).
    pub phase: String,
    pub terminating: bool,
    pub deletion_cost: Option<f64>,
    pub priority: Option<i64>,
    pub not_ready: bool,
}

impl PodInfo {
    fn owned_by(&self, api: &str, kind: &str) -> bool {
        self.owners.iter().any(|(a, k)| a == api && k == kind)
    }
    pub fn daemon(&self) -> bool {
        self.owned_by("apps/v1", "DaemonSet")
    }
    pub fn mirror(&self) -> bool {
        self.owned_by("v1", "Node")
    }
    pub fn stateful(&self) -> bool {
        self.owned_by("apps/v1", "StatefulSet")
    }
    pub fn active(&self) -> bool {
        !self.terminal && !self.terminating
    }
    /// `pod.IsReschedulable`.
    pub fn reschedulable(&self) -> bool {
        (self.active() || (self.stateful() && self.terminating)) && !self.daemon() && !self.mirror()
    }
    /// `pod.IsDoNotDisruptActive`: `"true"`, or a duration not yet run out since the start.
    pub fn do_not_disrupt_active(&self, now: i64) -> bool {
        match self.do_not_disrupt.as_deref() {
            None => false,
            Some("true") => true,
            Some(d) => match parse_duration(d) {
                Ok(secs) if secs > 0 => self.started.is_none_or(|s| now - s < secs),
                _ => false,
            },
        }
    }
    /// `disruptionutils.EvictionCost`.
    pub fn eviction_cost(&self) -> f64 {
        let mut cost = 1.0;
        if let Some(c) = self.deletion_cost {
            cost += c / 2f64.powi(27);
        }
        if let Some(p) = self.priority {
            cost += p as f64 / 2f64.powi(25);
        }
        cost.clamp(-10.0, 10.0)
    }
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A PodDisruptionBudget as `pdb.Limits` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// `None`: the PDB has no selector (selects nothing).
    pub selector: Option<LabelSelector>,
    pub disruptions_allowed: i64,
    pub fully_blocking: bool,
    pub always_allow_unhealthy: bool,
}

impl Pdb {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

/// The whole state.
#[derive(Debug, Clone)]
pub struct ClusterState {
    /// The provisioning simulation's input: pools, catalog, DaemonSets, nodes, bound and
    /// pending pods.
    pub input: Input,
    pub pools: BTreeMap<String, PoolSettings>,
    pub nodes: BTreeMap<String, NodeInfo>,
    pub pods: BTreeMap<(String, String), PodInfo>,
    pub pdbs: Vec<Pdb>,
    /// NodePools and EC2NodeClasses as read (what a drift prediction compares), by name.
    pub node_pools: BTreeMap<String, serde_json::Value>,
    pub node_classes: BTreeMap<String, serde_json::Value>,
    /// NodeClaims as read (`top` shows the ones still in flight), by name.
    pub node_claims: BTreeMap<String, serde_json::Value>,
    /// The newest timestamp in the inputs (the default "now").
    pub latest: Option<i64>,
    pub warnings: Vec<String>,
}

mod read;

/// A condition of an object as read, and whether it is `True` (the fleet view reads NodeClaims').
pub(crate) use read::{condition, is_true};
pub use read::{load, load_parsed};
