//! The simulator's own view of pods, taints, node pools and nodes: only what scheduling reads.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use kk_catalog::KubeletOverrides;
use serde::Serialize;

pub use kk_karpenter::taint::{Effect, Taint, Toleration, TolerationOp, untolerated};

use crate::req::{Operator, Requirement, Requirements};

/// A label selector (`matchLabels` + `matchExpressions`). `None` on a term selects nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    /// (key, operator In/NotIn/Exists/DoesNotExist, sorted values).
    pub match_expressions: Vec<(String, Operator, Vec<String>)>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|(k, op, values)| {
                let v = labels.get(k);
                match op {
                    Operator::In => v.is_some_and(|v| values.contains(v)),
                    Operator::NotIn => v.is_none_or(|v| !values.contains(v)),
                    Operator::Exists => v.is_some(),
                    Operator::DoesNotExist => v.is_none(),
                    _ => false,
                }
            })
    }
}

/// One node selector requirement as written (key, operator, values).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SelectorReq {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl SelectorReq {
    pub fn requirement(&self) -> Requirement {
        // Validated on load; an invalid bound cannot reach here, but stay total.
        Requirement::new(self.operator, &self.values)
            .unwrap_or_else(|_| Requirement::does_not_exist())
    }
}

/// A node selector term: requirements ANDed together.
pub type Term = Vec<SelectorReq>;

pub fn term_requirements(term: &[SelectorReq]) -> Requirements {
    let mut r = Requirements::new();
    for s in term {
        r.add(&s.key, s.requirement());
    }
    r
}

/// A pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodAffinityTerm {
    /// `None` selects no pod (the term is a no-op, as upstream).
    pub selector: Option<LabelSelector>,
    pub topology_key: String,
    /// Namespaces the selector applies to; empty = the pod's own.
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    Honor,
    Ignore,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    /// true: DoNotSchedule; false: ScheduleAnyway (a preference).
    pub required: bool,
    pub selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    pub node_affinity_policy: Policy,
    pub node_taints_policy: Policy,
    pub match_label_keys: Vec<String>,
}

/// One pod to place: its namespace and name, and the spec it shares with the other replicas of
/// its workload (a Deployment of 100,000 replicas holds one spec, not 100,000 copies). Reads go
/// through to the spec; a write (relaxing a preference) copies it first.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub spec: Arc<PodSpec>,
    /// `metadata.uid` of a pod object (the oracle's `pod-<namespace>-<name>` when it has none):
    /// Karpenter's queue orders pods of equal size and age by it. `None` for a workload's
    /// replicas, which the queue keeps in input order.
    pub uid: Option<Arc<str>>,
}

/// Everything the scheduler reads of a pod but its name.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSpec {
    /// `kind/name` of the workload it came from (`deploy/web`), for grouping in output.
    pub owner: String,
    pub labels: BTreeMap<String, String>,
    /// Requests in catalog units (cpu millicores, memory bytes, counts), `pods` excluded.
    pub requests: BTreeMap<String, i64>,
    pub tolerations: Vec<Toleration>,
    pub node_selector: BTreeMap<String, String>,
    /// `None`: no required node affinity. Terms are ORed.
    pub required_terms: Option<Vec<Term>>,
    pub preferred_terms: Vec<(i32, Term)>,
    pub affinity: Vec<PodAffinityTerm>,
    pub preferred_affinity: Vec<(i32, PodAffinityTerm)>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    pub spread: Vec<SpreadConstraint>,
    /// `metadata.creationTimestamp` when given (RFC 3339 sorts as text).
    pub created: Option<String>,
    /// Host ports the pod binds (`hostPort`, protocol), for conflicts on one node.
    pub host_ports: Vec<(i32, String)>,
    /// Why Karpenter would not provision for this pod at all, if it would not.
    pub invalid: Option<String>,
}

impl Pod {
    pub fn new(namespace: String, name: String, spec: PodSpec) -> Pod {
        Pod {
            namespace,
            name,
            spec: Arc::new(spec),
            uid: None,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl Deref for Pod {
    type Target = PodSpec;
    fn deref(&self) -> &PodSpec {
        &self.spec
    }
}

impl DerefMut for Pod {
    /// Copy on write: the other replicas keep the spec they share.
    fn deref_mut(&mut self) -> &mut PodSpec {
        Arc::make_mut(&mut self.spec)
    }
}

/// A NodePool with its EC2NodeClass settings resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    pub weight: i64,
    pub node_class: String,
    /// Requirements from `spec.template.spec.requirements` (with minValues).
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// `spec.template.spec.startupTaints`: ignored for scheduling, and on existing nodes of
    /// the pool that are not initialized yet.
    pub startup_taints: Vec<Taint>,
    /// `spec.limits` in catalog units; `nodes` is a node count.
    pub limits: BTreeMap<String, i64>,
    pub kubelet: KubeletOverrides,
    /// `spec.replicas`: a static pool (the StaticCapacity gate). The provisioner opens no
    /// NodeClaim for it; its nodes are existing capacity that never consolidates.
    pub replicas: Option<i64>,
    /// NodeOverlay capacity per catalog type index: resource → the value that replaces the
    /// type's (input/overlays.rs).
    pub capacity_overlay: BTreeMap<usize, BTreeMap<String, i64>>,
    /// Its spend budget, from its annotations (budget.rs).
    pub budget: Option<PoolBudget>,
    /// Its budget's account once the budget's limit is set (`budget::narrow`): why a launch
    /// past it stays Pending.
    pub budget_account: Option<PoolLedger>,
}

impl Pool {
    /// What a new node of catalog type `ci` advertises in this pool, (allocatable, capacity):
    /// the catalog's with the pool's kubelet settings, NodeOverlay capacity replacing the
    /// type's value (an overlaid extended resource has no overhead, so allocatable is it too).
    pub fn advertised(
        &self,
        catalog: &kk_catalog::Catalog,
        ci: usize,
    ) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        let it = &catalog.types()[ci];
        let to_map = |r: kk_catalog::Resources| {
            r.iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        };
        let mut allocatable = to_map(it.allocatable(&self.kubelet));
        let mut capacity = to_map(it.capacity_with(&self.kubelet));
        for (resource, value) in self.capacity_overlay.get(&ci).into_iter().flatten() {
            allocatable.insert(resource.clone(), *value);
            capacity.insert(resource.clone(), *value);
        }
        (allocatable, capacity)
    }
}

/// A node that already exists (its allocatable is what it advertises, e.g. a time-sliced GPU).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: BTreeMap<String, i64>,
    pub capacity: BTreeMap<String, i64>,
}

impl Node {
    pub fn pool(&self) -> Option<&str> {
        self.labels.get(crate::labels::NODEPOOL).map(String::as_str)
    }
}

// Spend budgets (issue #51): what budget.rs reads and computes, kept here with the pool.

/// A NodePool's budget as its annotations carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolBudget {
    /// The pool's own budget, micro-dollars per hour (`None`: only the cluster's applies).
    pub per_hour: Option<i64>,
    pub warn_percent: u8,
    /// The limit key the budget narrows.
    pub resource: String,
    /// The spec's own `limits[resource]`, catalog units.
    pub ceiling: Option<i64>,
    /// The whole fleet's budget, micro-dollars per hour.
    pub cluster_per_hour: Option<i64>,
}

/// The offering a budget is priced against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PricedNode {
    pub instance_type: String,
    pub capacity_type: String,
    /// Micro-dollars per hour.
    pub price: i64,
    /// Units of the budget's resource it brings.
    pub units: i64,
}

/// One budgeted pool's account.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolLedger {
    pub node_pool: String,
    pub resource: String,
    /// The pool's own budget, $/h.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_hour: Option<f64>,
    pub warn_percent: u8,
    /// What its nodes and claims cost, $/h.
    pub spend_per_hour: f64,
    /// What Karpenter counts of the resource (catalog units as a quantity).
    pub used: String,
    /// The limit the budget allows, as a quantity; `None` when it could not be priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The next node it would launch, when one more would pass the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_next: Option<PricedNode>,
    /// Why its budget could not be priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The offering that prices a unit of its limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dearest: Option<PricedNode>,
    /// The cheapest node it can launch (what "room" is counted in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cheapest: Option<PricedNode>,
    #[serde(skip)]
    pub limit_units: Option<i64>,
    #[serde(skip)]
    pub spend: i64,
    #[serde(skip)]
    pub budget: i64,
}
