//! The fleet as `top` shows it: each node with its pool, type, capacity type, zone, age, $/h
//! and what its pods request of what it advertises; each pool with its nodes, $/h and the use
//! of its limits; the NodeClaims still in flight; the Pending pods grouped by plan's reason.
//!
//! Built from a cluster's state ([`Fleet::from_cluster`]) and from the provisioning plan
//! run on that same state, so a Pending pod's reason is the one `plan --explain` gives.
//! Prices come from the catalog as `plan` prices them; a `reserved` node is priced as
//! Karpenter prices reserved capacity, on-demand ÷ 10⁷. Pure: the caller reads the cluster.

use std::collections::BTreeMap;

use kk_catalog::resources::{self as r, GPU_RESOURCES};
use kk_catalog::{CapacityType, Catalog};
use serde::Serialize;
use serde_json::Value;

use crate::disrupt::state::{ClusterState, condition, is_true};
use crate::labels;
use crate::plan::Plan;
use crate::solver::Input;
use kk_model::quantity::Quantity;

/// A NodeClaim not registered after this long is worth a look (Karpenter's own registration
/// TTL is 15 minutes; the alert in monitoring/ fires at the same mark).
pub const STUCK_AFTER_SECONDS: i64 = 15 * 60;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    pub nodes: Vec<NodeRow>,
    pub pools: Vec<PoolRow>,
    pub node_claims_in_flight: Vec<ClaimRow>,
    pub pending: Vec<PendingGroup>,
    pub totals: FleetTotals,
}

/// Requested of allocatable, in the resource's own unit (CPU in millicores, memory in bytes,
/// GPUs in devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Use {
    pub requested: i64,
    pub allocatable: i64,
}

impl Use {
    /// Requested ÷ allocatable in 0..=1 (0 when nothing is advertised).
    pub fn fraction(self) -> f64 {
        if self.allocatable <= 0 {
            0.0
        } else {
            (self.requested as f64 / self.allocatable as f64).clamp(0.0, 1.0)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<i64>,
    /// US dollars per hour from the catalog; `None` for a type or zone it does not price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
    pub cpu: Use,
    pub memory: Use,
    pub gpu: Use,
    /// Non-DaemonSet pods bound to it and not finished.
    pub pods: usize,
    /// `initialized`, `registered`, `not-ready`, `unhealthy`, `drifted`, `disrupting`,
    /// `do-not-disrupt`, or `unmanaged` for a node no NodePool owns.
    pub state: String,
    /// The conditions node repair acts on (`AcceleratedHardwareReady=False NvidiaXID79Error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
}

impl NodeRow {
    /// `od`, `sp`, `rs` (`-` for anything else): the capacity type in two columns.
    pub fn capacity_type_short(&self) -> &'static str {
        match self.capacity_type.as_str() {
            "spot" => "sp",
            "on-demand" => "od",
            "reserved" => "rs",
            _ => "-",
        }
    }

    /// `us-east-1a` → `1a`: the zone without the region every node shares (`-` when unknown).
    pub fn zone_short(&self) -> String {
        if self.zone.is_empty() {
            return "-".into();
        }
        let last = self.zone.rsplit('-').next().unwrap_or(&self.zone);
        last.chars().take(2).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub name: String,
    pub nodes: usize,
    pub price_per_hour: f64,
    /// Per limited resource (and `nodes`): what the pool's nodes hold of the limit, counted
    /// as Karpenter counts them (node capacity).
    pub limits: BTreeMap<String, Use>,
    /// Its spend budget against what it spends (issue #51).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetRow>,
}

/// A budgeted pool's spend against its budget, as the budget controller reckons it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRow {
    /// US dollars per hour: its budget (its own, or its share of the cluster's).
    pub per_hour: f64,
    /// What its nodes and NodeClaims cost.
    pub spend_per_hour: f64,
    pub warn_percent: u8,
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// One more node would pass the budget: launches wait.
    pub at_budget: bool,
}

impl BudgetRow {
    fn of(account: &crate::model::PoolLedger) -> BudgetRow {
        BudgetRow {
            per_hour: kk_model::spend::dollars(account.budget),
            spend_per_hour: account.spend_per_hour,
            warn_percent: account.warn_percent,
            resource: account.resource.clone(),
            limit: account.limit.clone(),
            at_budget: account.blocked_next.is_some(),
        }
    }

    /// Spend has reached the warning share of the budget.
    pub fn warns(&self) -> bool {
        self.per_hour > 0.0
            && self.spend_per_hour >= self.per_hour * f64::from(self.warn_percent) / 100.0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// `launching`, `launched`, `registered` (and not yet initialized), or `deleting`.
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<i64>,
    pub stuck: bool,
    /// For a stuck claim: the condition message Karpenter wrote, and the doctor check that
    /// explains the usual cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likely_cause: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingGroup {
    pub reason: String,
    pub pods: Vec<String>,
    /// The pods only wait: for the NodeClaim plan would launch, or for the kube-scheduler to
    /// bind them to an existing node (not a reason they cannot run).
    #[serde(skip)]
    pub waiting: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetTotals {
    pub nodes: usize,
    pub price_per_hour: f64,
    pub price_per_month: f64,
    pub pending_pods: usize,
    pub node_claims_in_flight: usize,
}

/// CPU, memory and GPU (every GPU resource summed) requested of allocatable, from lookups by
/// resource name.
fn resource_uses(
    requested: impl Fn(&str) -> i64,
    allocatable: impl Fn(&str) -> i64,
) -> (Use, Use, Use) {
    let of = |name: &str| Use {
        requested: requested(name),
        allocatable: allocatable(name),
    };
    let gpu = GPU_RESOURCES.iter().fold(Use::default(), |acc, g| Use {
        requested: acc.requested + requested(g),
        allocatable: acc.allocatable + allocatable(g),
    });
    (of(r::CPU), of(r::MEMORY), gpu)
}

/// Hours in an average month (365.25 × 24 ÷ 12), what `$/month` multiplies by.
pub const HOURS_PER_MONTH: f64 = 730.5;

/// To a millionth; `+ 0.0` turns the `-0.0` an empty float sum gives into `0`.
fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6 + 0.0
}

/// The catalog's price for one offering as `plan` prices it.
pub fn offering_price(
    catalog: &Catalog,
    instance_type: &str,
    zone: &str,
    capacity_type: &str,
) -> Option<f64> {
    let it = catalog.get(instance_type)?;
    let on_demand = |zone: &str| {
        it.offering(zone, CapacityType::OnDemand)
            .or_else(|| it.cheapest(Some(CapacityType::OnDemand)))
            .map(|o| o.price)
    };
    match capacity_type {
        "reserved" => on_demand(zone).map(|p| p / kk_catalog::RESERVED_PRICE_DIVISOR),
        "spot" => it
            .offering(zone, CapacityType::Spot)
            .or_else(|| it.cheapest(Some(CapacityType::Spot)))
            .map(|o| o.price),
        _ => on_demand(zone),
    }
}

/// Whether `v`'s condition `kind` is `True`.
fn holds(v: &Value, kind: &str) -> bool {
    is_true(condition(v, kind))
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

impl Fleet {
    /// The view of `state` at `now` (Unix seconds); `plan` is the provisioning plan run on
    /// `state.input`, which gives the Pending pods' reasons. `pool` keeps one NodePool.
    pub fn from_cluster(state: &ClusterState, plan: &Plan, now: i64, pool: Option<&str>) -> Fleet {
        let input = &state.input;
        let keep = |p: Option<&str>| pool.is_none_or(|want| p == Some(want));

        let mut requested: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
        let mut pod_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (node, pod) in &input.bound {
            let per = requested.entry(node.as_str()).or_default();
            for (k, v) in &pod.requests {
                *per.entry(k.as_str()).or_default() += v;
            }
            let daemon = state
                .pods
                .get(&(pod.namespace.clone(), pod.name.clone()))
                .is_some_and(|p| p.daemon());
            if !daemon {
                *pod_counts.entry(node.as_str()).or_default() += 1;
            }
        }

        let mut nodes = Vec::new();
        for node in &input.nodes {
            let node_pool = node.pool().map(str::to_owned);
            if !keep(node_pool.as_deref()) {
                continue;
            }
            let label = |k: &str| node.labels.get(k).cloned().unwrap_or_default();
            let (instance_type, capacity_type, zone) = (
                label(labels::INSTANCE_TYPE),
                label(labels::CAPACITY_TYPE),
                label(labels::ZONE),
            );
            let info = state.nodes.get(&node.name);
            let req = requested.get(node.name.as_str());
            let used = |name: &str| req.and_then(|m| m.get(name)).copied().unwrap_or(0);
            let alloc = |name: &str| node.allocatable.get(name).copied().unwrap_or(0);
            let (cpu, memory, gpu) = resource_uses(used, alloc);
            let state_word = match info {
                _ if node_pool.is_none() => "unmanaged",
                Some(i) if i.deleting => "disrupting",
                Some(i) if !i.unhealthy.is_empty() => "unhealthy",
                Some(i) if i.do_not_disrupt => "do-not-disrupt",
                Some(i) if i.drifted_at.is_some() => "drifted",
                Some(i) if !i.ready => "not-ready",
                Some(i) if i.initialized => "initialized",
                _ => "registered",
            };
            nodes.push(NodeRow {
                price_per_hour: offering_price(
                    &input.catalog,
                    &instance_type,
                    &zone,
                    &capacity_type,
                )
                .map(round),
                age_seconds: info.and_then(|i| i.created).map(|c| (now - c).max(0)),
                cpu,
                memory,
                gpu,
                pods: pod_counts.get(node.name.as_str()).copied().unwrap_or(0),
                state: state_word.to_owned(),
                health: info.filter(|i| !i.unhealthy.is_empty()).map(|i| {
                    i.unhealthy
                        .iter()
                        .map(|u| format!("{}={} {}", u.condition, u.status, u.reason))
                        .collect::<Vec<_>>()
                        .join("; ")
                }),
                name: node.name.clone(),
                node_pool,
                instance_type,
                capacity_type,
                zone,
            });
        }

        // By pool (unmanaged nodes last), then name.
        nodes.sort_by(|a, b| {
            (a.node_pool.is_none(), &a.node_pool, &a.name).cmp(&(
                b.node_pool.is_none(),
                &b.node_pool,
                &b.name,
            ))
        });
        let pools = input
            .pools
            .iter()
            .filter(|p| keep(Some(&p.name)))
            .map(|p| {
                let members: Vec<_> = input
                    .nodes
                    .iter()
                    .filter(|n| n.pool() == Some(p.name.as_str()))
                    .collect();
                let price = nodes
                    .iter()
                    .filter(|n| n.node_pool.as_deref() == Some(p.name.as_str()))
                    .filter_map(|n| n.price_per_hour)
                    .sum::<f64>();
                let limits = p
                    .limits
                    .iter()
                    .map(|(k, limit)| {
                        let held = if k == "nodes" {
                            members.len() as i64
                        } else {
                            members
                                .iter()
                                .map(|n| n.capacity.get(k).copied().unwrap_or(0))
                                .sum()
                        };
                        (
                            k.clone(),
                            Use {
                                requested: held,
                                allocatable: *limit,
                            },
                        )
                    })
                    .collect();
                PoolRow {
                    name: p.name.clone(),
                    nodes: members.len(),
                    price_per_hour: round(price),
                    limits,
                    budget: p.budget_account.as_ref().map(BudgetRow::of),
                }
            })
            .collect();

        let node_claims_in_flight = claims_in_flight(state, now, keep);
        // An unbound pod some other agent reports Running is not waiting for a node.
        let waiting = |key: &String| {
            key.split_once('/').is_none_or(|(ns, name)| {
                state
                    .pods
                    .get(&(ns.to_owned(), name.to_owned()))
                    .is_none_or(|p| p.phase.is_empty() || p.phase == "Pending")
            })
        };
        let pending = pending_groups(plan, true, waiting);
        let price: f64 = nodes.iter().filter_map(|n| n.price_per_hour).sum();
        let totals = FleetTotals {
            nodes: nodes.len(),
            price_per_hour: round(price),
            price_per_month: round(price * HOURS_PER_MONTH),
            pending_pods: pending.iter().map(|g| g.pods.len()).sum(),
            node_claims_in_flight: node_claims_in_flight.len(),
        };
        Fleet {
            nodes,
            pools,
            node_claims_in_flight,
            pending,
            totals,
        }
    }

    /// The view of a plan: its NodeClaims as nodes (named `#1`, `#2`…, state `planned`), each
    /// with what its pods and DaemonSets request of the likely type's allocatable; its pools;
    /// its Pending pods by reason (what `plan --html` draws).
    pub fn from_plan(plan: &Plan, input: &Input) -> Fleet {
        let mut nodes = Vec::new();
        for (i, c) in plan.node_claims.iter().enumerate() {
            let pool = input.pools.iter().find(|p| p.name == c.node_pool);
            // What the likely type advertises in its pool (NodeOverlay capacity included).
            let ci = input
                .catalog
                .types()
                .iter()
                .position(|it| it.name == c.instance_type);
            let alloc = pool
                .zip(ci)
                .map(|(p, ci)| p.advertised(&input.catalog, ci).0);
            let allocatable = |name: &str| {
                alloc
                    .as_ref()
                    .map_or(0, |a| a.get(name).copied().unwrap_or(0))
            };
            let requested = |name: &str| {
                c.requests
                    .get(name)
                    .and_then(|q| Quantity::parse(q).ok())
                    .map_or(0, |q| r::quantity_units(name, &q))
            };
            let (cpu, memory, gpu) = resource_uses(requested, allocatable);
            nodes.push(NodeRow {
                name: format!("#{}", i + 1),
                node_pool: Some(c.node_pool.clone()),
                instance_type: c.instance_type.clone(),
                capacity_type: c.capacity_type.clone(),
                zone: c.zone.clone(),
                age_seconds: None,
                price_per_hour: Some(c.price_per_hour),
                cpu,
                memory,
                gpu,
                pods: c.pods.len(),
                state: "planned".into(),
                health: None,
            });
        }
        let mut pools = Vec::new();
        for p in &input.pools {
            let mine: Vec<&NodeRow> = nodes
                .iter()
                .filter(|n| n.node_pool.as_deref() == Some(p.name.as_str()))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let price: f64 = mine.iter().filter_map(|n| n.price_per_hour).sum();
            pools.push(PoolRow {
                name: p.name.clone(),
                nodes: mine.len(),
                price_per_hour: round(price),
                limits: BTreeMap::new(),
                budget: p.budget_account.as_ref().map(BudgetRow::of),
            });
        }
        let pending = pending_groups(plan, false, |_| true);
        let price = plan.totals.price_per_hour;
        let totals = FleetTotals {
            nodes: nodes.len(),
            price_per_hour: round(price),
            price_per_month: round(price * HOURS_PER_MONTH),
            pending_pods: pending.iter().map(|g| g.pods.len()).sum(),
            node_claims_in_flight: 0,
        };
        Fleet {
            nodes,
            pools,
            node_claims_in_flight: Vec::new(),
            pending,
            totals,
        }
    }
}

/// NodeClaims whose node has not initialized: launching (no provider ID yet), launched (an
/// instance, no Node), registered (a Node, not initialized), or being deleted.
fn claims_in_flight(
    state: &ClusterState,
    now: i64,
    keep: impl Fn(Option<&str>) -> bool,
) -> Vec<ClaimRow> {
    let mut rows = Vec::new();
    for (name, v) in &state.node_claims {
        let node_pool = text(v, "/metadata/labels/karpenter.sh~1nodepool").map(str::to_owned);
        if !keep(node_pool.as_deref()) || holds(v, "Initialized") {
            continue;
        }
        let deleting = v
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|x| !x.is_null());
        let phase = if deleting {
            "deleting"
        } else if holds(v, "Registered") {
            "registered"
        } else if holds(v, "Launched") {
            "launched"
        } else {
            "launching"
        };
        let age = text(v, "/metadata/creationTimestamp")
            .and_then(|t| crate::disrupt::clock::parse_time(t).ok())
            .map(|c| (now - c).max(0));
        let stuck = !deleting && age.is_some_and(|a| a >= STUCK_AFTER_SECONDS);
        let likely_cause = stuck.then(|| likely_cause(v, phase));
        rows.push(ClaimRow {
            name: name.clone(),
            node_pool,
            instance_type: text(v, "/metadata/labels/node.kubernetes.io~1instance-type")
                .map(str::to_owned),
            phase: phase.to_owned(),
            age_seconds: age,
            stuck,
            likely_cause,
        });
    }
    rows
}

/// What a stuck claim's phase usually means, with the doctor check that tells for sure.
fn likely_cause(v: &Value, phase: &str) -> String {
    let message = ["Launched", "Registered", "Initialized"]
        .iter()
        .filter_map(|k| condition(v, k))
        .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
        .find_map(|c| {
            c.get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
        });
    let cause = match phase {
        "launching" => {
            "no instance yet: the launch is failing (capacity, IAM, subnets); see doctor's aws checks"
        }
        "launched" => {
            "an instance but no Node: it did not join (join token, CA hash, API endpoint, security group); see doctor's join and nodes checks"
        }
        _ => {
            "a Node that never initialized: a startup taint nobody removes or no device plugin for its GPUs; see doctor's gpu and nodes checks"
        }
    };
    match message {
        Some(m) => format!("{m} — {cause}"),
        None => cause.to_owned(),
    }
}

/// The pods `keep` admits by plan's reason; with `waiting`, also those plan places (on a new
/// NodeClaim, or on an existing node the kube-scheduler has yet to bind them to).
fn pending_groups(plan: &Plan, waiting: bool, keep: impl Fn(&String) -> bool) -> Vec<PendingGroup> {
    // By reason: (the pods only wait, the pods).
    let mut groups: BTreeMap<String, (bool, Vec<String>)> = BTreeMap::new();
    let mut add = |waits: bool, reason: String, pods: &[String]| {
        let pods: Vec<String> = pods.iter().filter(|p| keep(p)).cloned().collect();
        if !pods.is_empty() {
            let group = groups.entry(reason).or_insert((waits, Vec::new()));
            group.1.extend(pods);
        }
    };
    for p in &plan.pending {
        add(false, p.reason.clone(), std::slice::from_ref(&p.pod));
    }
    if waiting {
        for e in &plan.existing_nodes {
            let reason = format!(
                "fits on existing node {}: the kube-scheduler binds it, Karpenter launches nothing",
                e.node
            );
            add(true, reason, &e.pods);
        }
        for c in &plan.node_claims {
            let reason = format!(
                "waiting for a node: NodePool {} launches {} ({})",
                c.node_pool, c.instance_type, c.capacity_type
            );
            add(true, reason, &c.pods);
        }
    }
    groups
        .into_iter()
        .map(|(reason, (waiting, mut pods))| {
            pods.sort();
            PendingGroup {
                reason,
                pods,
                waiting,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_is_a_fraction_of_what_is_advertised() {
        assert_eq!(
            Use {
                requested: 500,
                allocatable: 2000
            }
            .fraction(),
            0.25
        );
        assert_eq!(
            Use {
                requested: 5,
                allocatable: 0
            }
            .fraction(),
            0.0
        );
        assert_eq!(
            Use {
                requested: 3000,
                allocatable: 2000
            }
            .fraction(),
            1.0
        );
    }

    #[test]
    fn reserved_is_priced_like_karpenter_and_spot_below_on_demand() {
        let catalog = kk_catalog::catalog();
        let on_demand = offering_price(catalog, "p5.48xlarge", "us-east-1a", "on-demand").unwrap();
        let reserved = offering_price(catalog, "p5.48xlarge", "us-east-1a", "reserved").unwrap();
        assert!((reserved - on_demand / 1e7).abs() < 1e-12);
        let spot = offering_price(catalog, "m5.large", "us-east-1a", "spot").unwrap();
        assert!(spot < offering_price(catalog, "m5.large", "us-east-1a", "on-demand").unwrap());
        assert_eq!(
            offering_price(catalog, "no.such-type", "us-east-1a", "on-demand"),
            None
        );
    }
}
