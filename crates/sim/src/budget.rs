//! Spend limits in dollars (issue #51): a pool's budget becomes a limit on one resource
//! Karpenter already enforces. One function, [`narrow`], for plan, `plan --disrupt`, top and
//! the budget controller, so that the limit `plan` predicts is the one the controller writes.
//!
//! The limit on a budgeted pool's resource `r` is `used + ⌊headroom × units / price⌋`, where
//! `used` is what Karpenter counts of `r` on the pool's nodes, `headroom` the budget less what
//! the pool already spends (in-flight claims at their dearest allowed offering), and
//! `units / price` the pool's dearest offering per unit of `r`: whatever types Karpenter picks
//! within the limit, their price stays within the budget. It never falls below `used` (what is
//! running is never "over" a limit Karpenter would then refuse replacements against), and
//! never rises above the spec's own `limits[r]` (the ceiling).
//!
//! Prices are the catalog's (what `plan` prices with), rounded up to whole micro-dollars; a
//! reserved offering counts at its type's on-demand price, never at the near-zero price
//! Karpenter sorts reservations by.

use std::collections::BTreeMap;

use kk_catalog::resources::{format_quantity, quantity_units};
use kk_catalog::{CapacityType, Catalog, InstanceType};
use kk_model::quantity::Quantity;
use kk_model::spend::{self, annotation, format_per_hour, micro_from_dollars};
use serde::Serialize;
use serde_json::Value;

use crate::labels;
use crate::model::Pool;
pub use crate::model::{PoolBudget, PoolLedger, PricedNode};
use crate::offerings::OfferingFilter;
use crate::req::Requirements;
use crate::solver::{Input, instance_requirements};

/// Reads a NodePool's budget annotations: `Ok(None)` without them, else the budget or the
/// annotation that is wrong and why.
pub fn read_annotations(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<PoolBudget>, (String, String)> {
    let Some(resource) = annotations.get(annotation::RESOURCE) else {
        if let Some(key) = [annotation::PER_HOUR, annotation::CLUSTER_PER_HOUR]
            .into_iter()
            .find(|k| annotations.contains_key(*k))
        {
            return Err((
                key.to_owned(),
                format!(
                    "a budget needs {} (the limit key it narrows)",
                    annotation::RESOURCE
                ),
            ));
        }
        return Ok(None);
    };
    let dollars = |key: &str| -> Result<Option<i64>, (String, String)> {
        annotations
            .get(key)
            .map(|text| {
                spend::parse_dollars(text).ok_or_else(|| {
                    (
                        key.to_owned(),
                        format!("{text:?} is not US dollars per hour (\"0.20\", \"40\")"),
                    )
                })
            })
            .transpose()
    };
    let per_hour = dollars(annotation::PER_HOUR)?;
    let cluster_per_hour = dollars(annotation::CLUSTER_PER_HOUR)?;
    if per_hour.is_none() && cluster_per_hour.is_none() {
        return Err((
            annotation::RESOURCE.to_owned(),
            format!(
                "names a resource but no budget ({} or {})",
                annotation::PER_HOUR,
                annotation::CLUSTER_PER_HOUR
            ),
        ));
    }
    let warn_percent = match annotations.get(annotation::WARN_AT) {
        None => 80,
        Some(text) => spend::parse_percent(text).ok_or_else(|| {
            (
                annotation::WARN_AT.to_owned(),
                format!("{text:?} is not a share from 1% to 100%"),
            )
        })?,
    };
    let ceiling = annotations
        .get(annotation::CEILING)
        .map(|text| {
            Quantity::parse(text)
                .ok()
                .filter(|q| !q.is_negative())
                .map(|q| quantity_units(resource, &q))
                .ok_or_else(|| {
                    (
                        annotation::CEILING.to_owned(),
                        format!("{text:?} is not a quantity"),
                    )
                })
        })
        .transpose()?;
    Ok(Some(PoolBudget {
        per_hour,
        warn_percent,
        resource: resource.clone(),
        ceiling,
        cluster_per_hour,
    }))
}

/// How a pool's offerings price its budget's resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    /// The dearest offering per unit: what one unit of limit may cost.
    pub dearest: PricedNode,
    /// The cheapest node the pool can launch.
    pub cheapest: PricedNode,
}

/// Why a pool's budget cannot be priced (its limit then stays where its use is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateError {
    /// The pool's requirements allow no available offering.
    NoOffering,
    /// Types the pool may launch that bring none of the resource: a limit on it would not hold
    /// them back.
    ZeroOn(Vec<String>),
}

impl std::fmt::Display for RateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RateError::NoOffering => write!(f, "its requirements allow no offering to price"),
            RateError::ZeroOn(types) => write!(
                f,
                "{} bring none of the budget's resource, so a limit on it would not hold them back",
                types.join(", ")
            ),
        }
    }
}

/// The requirements every node of `pool` carries (its template, as the provisioner builds it).
fn template(pool: &Pool) -> Requirements {
    let mut template = pool.requirements.clone();
    template.add_all(&Requirements::from_labels(&pool.labels));
    template.add(
        labels::NODEPOOL,
        crate::req::Requirement::single(&pool.name),
    );
    template
}

/// An offering's price as a budget charges it: reserved at its type's on-demand price.
fn charged(it: &InstanceType, capacity_type: CapacityType, price: f64) -> i64 {
    match capacity_type {
        CapacityType::Reserved => micro_from_dollars(it.on_demand_price.unwrap_or(price)),
        _ => micro_from_dollars(price),
    }
}

/// What a node of catalog type `ci` in `pool` brings of `resource` (NodeOverlay capacity over
/// the type's).
fn units_of(pool: &Pool, catalog: &Catalog, ci: usize, resource: &str) -> i64 {
    pool.capacity_overlay
        .get(&ci)
        .and_then(|o| o.get(resource).copied())
        .unwrap_or_else(|| {
            catalog.types()[ci]
                .capacity_with(&pool.kubelet)
                .get(resource)
        })
}

/// Prices `resource` over the offerings `pool` may launch.
pub fn rate(catalog: &Catalog, pool: &Pool, resource: &str) -> Result<Rate, RateError> {
    let template = template(pool);
    let filter = OfferingFilter::new(&template);
    let mut dearest: Option<PricedNode> = None;
    let mut cheapest: Option<PricedNode> = None;
    let mut zero = Vec::new();
    for (ci, it) in catalog.types().iter().enumerate() {
        if instance_requirements(it).intersects(&template).is_err() {
            continue;
        }
        let units = units_of(pool, catalog, ci, resource);
        for o in it
            .offerings
            .iter()
            .filter(|o| o.available && filter.allows(o))
        {
            if units <= 0 {
                zero.push(it.name.clone());
                break;
            }
            let node = PricedNode {
                instance_type: it.name.clone(),
                capacity_type: o.capacity_type.as_str().to_owned(),
                price: charged(it, o.capacity_type, o.price),
                units,
            };
            // price/units compared without division.
            let dearer = |a: &PricedNode, b: &PricedNode| {
                (a.price as i128) * (b.units as i128) > (b.price as i128) * (a.units as i128)
            };
            if dearest.as_ref().is_none_or(|d| dearer(&node, d)) {
                dearest = Some(node.clone());
            }
            if cheapest
                .as_ref()
                .is_none_or(|c| (node.price, &node.instance_type) < (c.price, &c.instance_type))
            {
                cheapest = Some(node);
            }
        }
    }
    if !zero.is_empty() {
        zero.dedup();
        return Err(RateError::ZeroOn(zero));
    }
    match (dearest, cheapest) {
        (Some(dearest), Some(cheapest)) => Ok(Rate { dearest, cheapest }),
        _ => Err(RateError::NoOffering),
    }
}

/// What one node or NodeClaim holds of its pool's budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub pool: String,
    /// What Karpenter counts of each resource on it (catalog units).
    pub capacity: BTreeMap<String, i64>,
    /// Micro-dollars per hour.
    pub price: i64,
}

/// The price of a node labelled with its instance type, zone and capacity type.
fn labelled_price(catalog: &Catalog, labels_of: &BTreeMap<String, String>) -> Option<i64> {
    let it = catalog.get(labels_of.get(labels::INSTANCE_TYPE)?)?;
    let capacity_type = labels_of
        .get(labels::CAPACITY_TYPE)
        .map(String::as_str)
        .unwrap_or("on-demand");
    let zone = labels_of.get(labels::ZONE).map(String::as_str);
    let on_demand = || {
        zone.and_then(|z| it.offering(z, CapacityType::OnDemand))
            .or_else(|| it.cheapest(Some(CapacityType::OnDemand)))
            .map(|o| o.price)
            .or(it.on_demand_price)
    };
    let dollars = match capacity_type {
        "spot" => zone
            .and_then(|z| it.offering(z, CapacityType::Spot))
            .or_else(|| it.cheapest(Some(CapacityType::Spot)))
            .map(|o| o.price)?,
        _ => on_demand()?,
    };
    Some(micro_from_dollars(dollars))
}

/// The dearest offering a NodeClaim not yet launched may still become (its requirements'
/// instance types, zones and capacity types): what it may cost once it is.
fn dearest_allowed(catalog: &Catalog, requirements: &Requirements) -> Option<i64> {
    let types = requirements.get(labels::INSTANCE_TYPE);
    let filter = OfferingFilter::new(requirements);
    catalog
        .types()
        .iter()
        .filter(|it| types.has(&it.name))
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| filter.allows(o))
                .map(|o| charged(it, o.capacity_type, o.price))
        })
        .max()
}

/// Holdings of the existing nodes of `input` (what `plan` starts from).
pub fn holdings_from_nodes(input: &Input) -> Vec<Holding> {
    input
        .nodes
        .iter()
        .filter_map(|n| {
            Some(Holding {
                pool: n.pool()?.to_owned(),
                capacity: n.capacity.clone(),
                price: labelled_price(&input.catalog, &n.labels).unwrap_or(0),
            })
        })
        .collect()
}

/// Holdings of a cluster's NodeClaims (`karpenter.sh/v1` objects as read) and of the pools'
/// Nodes no claim names: what Karpenter
/// counts of each (the Node's capacity once it has one, else the claim's), priced by its
/// labels, or, not launched yet, at the dearest offering its requirements allow. A claim
/// being deleted holds nothing: Karpenter no longer counts it.
pub fn holdings_from_claims<'a>(
    catalog: &Catalog,
    claims: impl IntoIterator<Item = &'a Value>,
    nodes: &[crate::model::Node],
) -> Vec<Holding> {
    let by_name: BTreeMap<&str, &crate::model::Node> =
        nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let claims: Vec<&Value> = claims.into_iter().collect();
    let claimed: std::collections::BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.pointer("/status/nodeName").and_then(Value::as_str))
        .collect();
    // A pool's Node without a NodeClaim (a dump without claims) still costs what it is.
    let unclaimed = nodes
        .iter()
        .filter(|n| !claimed.contains(n.name.as_str()))
        .filter_map(|n| {
            Some(Holding {
                pool: n.pool()?.to_owned(),
                capacity: n.capacity.clone(),
                price: labelled_price(catalog, &n.labels).unwrap_or(0),
            })
        })
        .collect::<Vec<_>>();
    claims
        .into_iter()
        .filter(|c| {
            c.pointer("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null)
        })
        .filter_map(|c| {
            let labels_of: BTreeMap<String, String> = c
                .pointer("/metadata/labels")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            let pool = labels_of.get(labels::NODEPOOL)?.clone();
            let node = c
                .pointer("/status/nodeName")
                .and_then(Value::as_str)
                .and_then(|n| by_name.get(n));
            let mut capacity: BTreeMap<String, i64> = c
                .pointer("/status/capacity")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| {
                            let q = Quantity::parse(v.as_str()?).ok()?;
                            Some((k.clone(), quantity_units(k, &q)))
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let Some(node) = node {
                for (k, v) in &node.capacity {
                    if *v != 0 {
                        capacity.insert(k.clone(), *v);
                    }
                }
            }
            // The claim's labels once launched, else its Node's, else (still launching) the
            // dearest offering its requirements allow.
            let price = labelled_price(catalog, &labels_of)
                .or_else(|| node.and_then(|n| labelled_price(catalog, &n.labels)))
                .or_else(|| dearest_allowed(catalog, &claim_requirements(c)));
            Some(Holding {
                pool,
                capacity,
                price: price.unwrap_or(0),
            })
        })
        .chain(unclaimed)
        .collect()
}

/// A NodeClaim's `spec.requirements` (In lists only matter here).
fn claim_requirements(claim: &Value) -> Requirements {
    let mut r = Requirements::new();
    for req in claim
        .pointer("/spec/requirements")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(key), Some(op)) = (
            req.get("key").and_then(Value::as_str),
            req.get("operator").and_then(Value::as_str),
        ) else {
            continue;
        };
        let values: Vec<String> = req
            .get("values")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        if let Ok(op) = crate::req::Operator::parse(op)
            && let Ok(requirement) = crate::req::Requirement::new(op, &values)
        {
            r.add(key, requirement);
        }
    }
    r
}

impl PoolLedger {
    /// Why a launch of this pool would pass its budget, for a Pending pod: the budget, what
    /// it buys at the pool's dearest offering, and what was spent before.
    pub fn reason(&self) -> String {
        let mut text = format!(
            "budget: nodepool {}'s {} buys {}={}",
            self.node_pool,
            format_per_hour(self.budget),
            self.resource,
            self.limit.as_deref().unwrap_or(&self.used),
        );
        if let Some(dearest) = &self.dearest {
            text.push_str(&format!(
                " at its dearest offering ({} {}, {} for {}={})",
                dearest.instance_type,
                dearest.capacity_type,
                format_per_hour(dearest.price),
                self.resource,
                format_quantity(&self.resource, dearest.units)
            ));
        }
        text.push_str(&format!(
            ", {} of it spent on its nodes",
            format_per_hour(self.spend)
        ));
        text
    }

    /// What a person reads when a pod waits on this budget in a live cluster: the spend and
    /// the node that would pass it.
    pub fn exhausted(&self) -> Option<String> {
        let next = self.blocked_next.as_ref()?;
        Some(format!(
            "nodepool {} spends {} of its budget {}; its next node ({} {}, {}) would pass it",
            self.node_pool,
            format_per_hour(self.spend),
            format_per_hour(self.budget),
            next.instance_type,
            next.capacity_type,
            format_per_hour(next.price)
        ))
    }
}

/// A budgeted pool's spend before and after a disruption plan, and the room each leaves in
/// nodes of its cheapest type (`plan --disrupt`: when consolidation frees room under a budget).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRoom {
    pub node_pool: String,
    pub per_hour: f64,
    pub spend_before: f64,
    pub spend_after: f64,
    /// The pool's cheapest node, and how many more of it fit under the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cheapest: Option<String>,
    pub room_before: i64,
    pub room_after: i64,
}

/// [`BudgetRoom`] of each budgeted pool of `pools`, given its spend (US dollars per hour) after.
pub fn room(pools: &[Pool], spend_after: impl Fn(&str) -> f64) -> Vec<BudgetRoom> {
    pools
        .iter()
        .filter_map(|p| p.budget_account.as_ref())
        .map(|account| {
            let after = micro_from_dollars(spend_after(&account.node_pool));
            let nodes = |spend: i64| match &account.cheapest {
                Some(c) if c.price > 0 => ((account.budget - spend).max(0) / c.price).max(0),
                _ => 0,
            };
            BudgetRoom {
                node_pool: account.node_pool.clone(),
                per_hour: spend::dollars(account.budget),
                spend_before: account.spend_per_hour,
                spend_after: spend::dollars(after),
                cheapest: account
                    .cheapest
                    .as_ref()
                    .map(|c| format!("{} {}", c.instance_type, c.capacity_type)),
                room_before: nodes(account.spend),
                room_after: nodes(after),
            }
        })
        .collect()
}

/// Every budgeted pool's account, and the fleet's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub pools: Vec<PoolLedger>,
    /// The whole fleet's budget and spend, $/h.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_per_hour: Option<f64>,
    pub cluster_spend_per_hour: f64,
}

/// Each budgeted pool's limit given what `holdings` hold. The cluster's budget is split among
/// the dynamic pools it covers in proportion to their own budgets (a pool without one weighs
/// as much as the cluster's).
pub fn ledger(pools: &[Pool], catalog: &Catalog, holdings: &[Holding]) -> Ledger {
    let spend_of = |pool: &str| -> i64 {
        holdings
            .iter()
            .filter(|h| h.pool == pool)
            .map(|h| h.price)
            .sum()
    };
    let budgeted: Vec<(&Pool, &PoolBudget)> = pools
        .iter()
        .filter(|p| p.replicas.is_none())
        .filter_map(|p| p.budget.as_ref().map(|b| (p, b)))
        .collect();
    let cluster = budgeted.iter().find_map(|(_, b)| b.cluster_per_hour);
    let cluster_spend: i64 = holdings.iter().map(|h| h.price).sum();
    let weight = |b: &PoolBudget| b.per_hour.or(b.cluster_per_hour).unwrap_or(0) as i128;
    let total_weight: i128 = budgeted
        .iter()
        .filter(|(_, b)| b.cluster_per_hour.is_some())
        .map(|(_, b)| weight(b))
        .sum();
    let mut out = Ledger {
        cluster_per_hour: cluster.map(spend::dollars),
        cluster_spend_per_hour: spend::dollars(cluster_spend),
        ..Ledger::default()
    };
    for (pool, budget) in budgeted {
        let spend = spend_of(&pool.name);
        let used: i64 = holdings
            .iter()
            .filter(|h| h.pool == pool.name)
            .map(|h| h.capacity.get(&budget.resource).copied().unwrap_or(0))
            .sum();
        let mut headroom = budget.per_hour.map(|b| b - spend);
        let mut effective = budget.per_hour;
        if let (Some(c), true) = (budget.cluster_per_hour, total_weight > 0) {
            let share = ((c - cluster_spend) as i128 * weight(budget) / total_weight) as i64;
            headroom = Some(headroom.map_or(share, |h| h.min(share)));
            // The budget a message names: the pool's own, or its share of the fleet's.
            let fleet_share = (c as i128 * weight(budget) / total_weight) as i64;
            effective = Some(effective.map_or(fleet_share, |b| b.min(fleet_share)));
        }
        let headroom = headroom.unwrap_or(0).max(0);
        let (limit, blocked_next, problem, dearest, cheapest) =
            match rate(catalog, pool, &budget.resource) {
                Ok(rate) => {
                    let room = (headroom as i128 * rate.dearest.units as i128
                        / rate.dearest.price.max(1) as i128) as i64;
                    let mut limit = used + room;
                    if let Some(ceiling) = budget.ceiling {
                        limit = limit.min(ceiling);
                    }
                    let limit = limit.max(used);
                    let blocked =
                        (limit - used < rate.cheapest.units).then(|| rate.cheapest.clone());
                    (
                        Some(limit),
                        blocked,
                        None,
                        Some(rate.dearest),
                        Some(rate.cheapest),
                    )
                }
                Err(e) => (Some(used), None, Some(e.to_string()), None, None),
            };
        out.pools.push(PoolLedger {
            node_pool: pool.name.clone(),
            resource: budget.resource.clone(),
            per_hour: budget.per_hour.map(spend::dollars),
            warn_percent: budget.warn_percent,
            spend_per_hour: spend::dollars(spend),
            used: format_quantity(&budget.resource, used),
            limit: limit.map(|l| format_quantity(&budget.resource, l)),
            blocked_next,
            problem,
            dearest,
            cheapest,
            limit_units: limit,
            spend,
            budget: effective.unwrap_or(0),
        });
    }
    out
}

/// Narrows each budgeted pool's `limits[resource]` to its ledger limit (the lower of it and
/// any limit already there), and keeps the account on the pool for Pending reasons.
pub fn narrow(input: &mut Input, holdings: &[Holding]) -> Ledger {
    let ledger = ledger(&input.pools, &input.catalog, holdings);
    for account in &ledger.pools {
        let Some(pool) = input.pools.iter_mut().find(|p| p.name == account.node_pool) else {
            continue;
        };
        if let Some(limit) = account.limit_units {
            let slot = pool.limits.entry(account.resource.clone()).or_insert(limit);
            *slot = (*slot).min(limit);
        }
        pool.budget_account = Some(account.clone());
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_catalog::OfferingConfig;

    fn catalog() -> Catalog {
        Catalog::aws(&OfferingConfig::default()).unwrap()
    }

    fn pool(name: &str, types: &[&str], capacity_types: &[&str], budget: PoolBudget) -> Pool {
        let mut requirements = Requirements::new();
        let op = crate::req::Operator::In;
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        requirements.add(
            labels::INSTANCE_TYPE,
            crate::req::Requirement::new(op, &list(types)).unwrap(),
        );
        requirements.add(
            labels::CAPACITY_TYPE,
            crate::req::Requirement::new(op, &list(capacity_types)).unwrap(),
        );
        Pool {
            name: name.into(),
            weight: 0,
            node_class: "default".into(),
            requirements,
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            limits: BTreeMap::new(),
            kubelet: Default::default(),
            replicas: None,
            capacity_overlay: BTreeMap::new(),
            budget: Some(budget),
            budget_account: None,
        }
    }

    fn budget(per_hour: &str) -> PoolBudget {
        PoolBudget {
            per_hour: spend::parse_dollars(per_hour),
            warn_percent: 80,
            resource: "cpu".into(),
            ceiling: None,
            cluster_per_hour: None,
        }
    }

    fn holding(pool: &str, cpu: i64, price: i64) -> Holding {
        Holding {
            pool: pool.into(),
            capacity: BTreeMap::from([("cpu".to_owned(), cpu)]),
            price,
        }
    }

    #[test]
    fn twenty_cents_buy_two_m6i_large_and_no_third() {
        let c = catalog();
        let p = pool("lab", &["m6i.large"], &["on-demand"], budget("0.20"));
        let empty = ledger(std::slice::from_ref(&p), &c, &[]);
        // $0.096 per 2 cpu: 0.20 / 0.048 = 4.1666 cpu.
        assert_eq!(empty.pools[0].limit_units, Some(4166));
        assert_eq!(empty.pools[0].blocked_next, None);
        let two = [holding("lab", 2000, 96_000), holding("lab", 2000, 96_000)];
        let full = ledger(std::slice::from_ref(&p), &c, &two);
        // $0.008 left buys 166m: less than a node.
        assert_eq!(full.pools[0].limit_units, Some(4166));
        assert_eq!(
            full.pools[0].blocked_next.as_ref().map(|n| n.price),
            Some(96_000)
        );
        assert_eq!(
            full.pools[0].exhausted().unwrap(),
            "nodepool lab spends $0.1920/h of its budget $0.2000/h; its next node (m6i.large on-demand, $0.0960/h) would pass it"
        );
        assert_eq!(
            full.pools[0].reason(),
            "budget: nodepool lab's $0.2000/h buys cpu=4166m at its dearest offering (m6i.large on-demand, $0.0960/h for cpu=2), $0.1920/h of it spent on its nodes"
        );
    }

    #[test]
    fn a_limit_never_falls_below_what_runs_nor_rises_past_the_ceiling() {
        let c = catalog();
        let p = pool("lab", &["m6i.large"], &["on-demand"], budget("0.10"));
        let over = [holding("lab", 2000, 96_000), holding("lab", 2000, 96_000)];
        assert_eq!(
            ledger(std::slice::from_ref(&p), &c, &over).pools[0].limit_units,
            Some(4000)
        );
        let mut capped = budget("40");
        capped.ceiling = Some(6000);
        let p = pool("lab", &["m6i.large"], &["on-demand"], capped);
        assert_eq!(
            ledger(std::slice::from_ref(&p), &c, &[]).pools[0].limit_units,
            Some(6000)
        );
    }

    #[test]
    fn a_mixed_pool_is_limited_at_its_dearest_unit() {
        let c = catalog();
        // Spot at 0.4 × on-demand: on-demand is the dearest per cpu.
        let p = pool(
            "mixed",
            &["m6i.large", "m6i.xlarge"],
            &["spot", "on-demand"],
            budget("0.20"),
        );
        let rate = rate(&c, &p, "cpu").unwrap();
        assert_eq!(rate.dearest.capacity_type, "on-demand");
        assert_eq!(rate.cheapest.capacity_type, "spot");
        assert_eq!(rate.cheapest.instance_type, "m6i.large");
    }

    #[test]
    fn the_cluster_budget_is_shared_by_the_pools_own_budgets() {
        let c = catalog();
        let mut a = budget("0.30");
        a.cluster_per_hour = spend::parse_dollars("0.40");
        let mut b = budget("0.10");
        b.cluster_per_hour = spend::parse_dollars("0.40");
        let pools = [
            pool("a", &["m6i.large"], &["on-demand"], a),
            pool("b", &["m6i.large"], &["on-demand"], b),
        ];
        let l = ledger(&pools, &c, &[]);
        // a: min(0.30, 3/4 × 0.40) = 0.30 → 6.25 cpu; b: min(0.10, 1/4 × 0.40) → 2.083 cpu.
        assert_eq!(l.pools[0].limit_units, Some(6250));
        assert_eq!(l.pools[1].limit_units, Some(2083));
        assert_eq!(l.cluster_per_hour, Some(0.4));
    }

    #[test]
    fn claims_being_deleted_hold_nothing_and_claims_in_flight_hold_their_dearest_offering() {
        let c = catalog();
        let claims: Vec<Value> = serde_json::from_str(
            r#"[
              {"metadata": {"name": "a", "labels": {"karpenter.sh/nodepool": "lab",
                 "node.kubernetes.io/instance-type": "m6i.large", "karpenter.sh/capacity-type": "spot",
                 "topology.kubernetes.io/zone": "us-east-1a"}},
               "status": {"capacity": {"cpu": "2", "memory": "8Gi"}}},
              {"metadata": {"name": "b", "labels": {"karpenter.sh/nodepool": "lab"}},
               "spec": {"requirements": [
                 {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.large", "m6i.xlarge"]},
                 {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
              {"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z",
                 "labels": {"karpenter.sh/nodepool": "lab", "node.kubernetes.io/instance-type": "m6i.large"}}}
            ]"#,
        )
        .unwrap();
        let h = holdings_from_claims(&c, &claims, &[]);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].capacity.get("cpu"), Some(&2000));
        assert_eq!(h[0].price, 38_400);
        assert_eq!(h[1].price, 192_000);
        assert!(h[1].capacity.is_empty());
    }

    #[test]
    fn bad_annotations_name_the_annotation() {
        let read = |pairs: &[(&str, &str)]| {
            read_annotations(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[(annotation::PER_HOUR, "0.20")]).unwrap_err().0,
            annotation::PER_HOUR
        );
        assert_eq!(
            read(&[(annotation::RESOURCE, "cpu"), (annotation::PER_HOUR, "abc")])
                .unwrap_err()
                .0,
            annotation::PER_HOUR
        );
        let ok = read(&[
            (annotation::RESOURCE, "nvidia.com/gpu"),
            (annotation::PER_HOUR, "20"),
            (annotation::CEILING, "8"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(ok.ceiling, Some(8));
        assert_eq!(ok.per_hour, Some(20 * spend::MICRO));
    }
}
