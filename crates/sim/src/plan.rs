//! The plan: NodeClaims with their launch choice, pods left on existing nodes, Pending pods
//! with reasons; as JSON, as a table, and per-pod explanations. `build` makes it from the
//! solver's outcome; the entry points that run the solver (`kk_sim::solve`, `simulate`,
//! `explain`) are in `solve.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use kk_catalog::resources::format_quantity;
use serde::Serialize;

use crate::offerings::OfferingFilter;
use crate::solver::{ClaimResult, Input, Outcome, launch_fitting};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedClaim {
    pub node_pool: String,
    /// The type the launch would most likely get: the cheapest after the AWS launch filters.
    pub instance_type: String,
    /// The NodeClaim's instance-type requirement, cheapest first (at most 600).
    pub instance_type_options: Vec<String>,
    pub capacity_type: String,
    pub zone: String,
    pub pods: Vec<String>,
    pub price_per_hour: f64,
    /// Pod requests plus DaemonSet overhead, as quantities.
    pub requests: BTreeMap<String, String>,
    /// Opened by Karpenter's next loop, for pods that waited for a capacity reservation
    /// ([`crate::next_loop`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub next_loop: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingUse {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// New nodes (NodeClaims).
    pub nodes: usize,
    pub pods_placed: usize,
    pub pods_pending: usize,
    /// Sum of the NodeClaims' prices, US dollars per hour.
    pub price_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub node_claims: Vec<PlannedClaim>,
    pub existing_nodes: Vec<ExistingUse>,
    pub pending: Vec<PendingPod>,
    pub totals: Totals,
    /// Each budgeted pool's spend before and after this plan, against its budget.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetUse>,
    pub warnings: Vec<String>,
}

/// A budgeted pool in a plan: what it spends now, what it would with the plan's claims, and
/// the limit its budget sets (issue #51).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUse {
    pub node_pool: String,
    /// Its budget (its own, or its share of the cluster's), US dollars per hour.
    pub per_hour: f64,
    /// What its existing nodes cost.
    pub spend_per_hour: f64,
    /// That plus the plan's new claims of the pool.
    pub planned_per_hour: f64,
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// Pods left Pending because a launch would pass the budget.
    pub pending: usize,
    /// Why the budget could not be priced (its limit then stays at its use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

pub(crate) fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// What every claim's launch reads, built once per NodePool and once per offering filter
/// instead of per claim and type: thousands of claims share the same few hundred types and a
/// handful of zone and capacity-type requirements.
pub(crate) struct Allocatable<'a> {
    input: &'a Input,
    /// Per NodePool (empty until a claim of it launches): each catalog type's allocatable as
    /// the pool advertises it, as amounts by resource name.
    by_pool: Vec<PoolAllocatable>,
    /// Per offering filter: each catalog type's launchable offerings it allows (indices, in
    /// the type's order).
    offers: HashMap<OfferingFilter, Vec<Vec<usize>>>,
    /// Per catalog type: whether it is exotic (metal, GPU or accelerator).
    exotic: Vec<bool>,
}

/// The catalog types' allocatable in one NodePool: the resource names any type advertises,
/// and per type an amount for each (0 where the type has none), read without a map lookup
/// per claim, type and resource.
#[derive(Debug, Clone, Default)]
struct PoolAllocatable {
    names: Vec<String>,
    /// `names.len()` amounts per catalog type.
    amounts: Vec<i64>,
}

impl<'a> Allocatable<'a> {
    pub(crate) fn new(input: &'a Input) -> Allocatable<'a> {
        Allocatable {
            input,
            by_pool: vec![PoolAllocatable::default(); input.pools.len()],
            offers: HashMap::new(),
            exotic: input
                .catalog
                .types()
                .iter()
                .map(crate::solver::is_exotic)
                .collect(),
        }
    }

    /// Fills what a claim of NodePool `pool` with offering filter `filter` reads.
    fn prepare(&mut self, pool: usize, filter: &OfferingFilter) {
        let input = self.input;
        let types = input.catalog.types();
        if self.by_pool[pool].names.is_empty() && !types.is_empty() {
            // NodeOverlay capacity included: the AWS provider applies the overlays at launch
            // too.
            let advertised: Vec<BTreeMap<String, i64>> = (0..types.len())
                .map(|ci| input.pools[pool].advertised(&input.catalog, ci).0)
                .collect();
            let names: Vec<String> = advertised
                .iter()
                .flat_map(|amounts| amounts.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .cloned()
                .collect();
            let amounts = advertised
                .iter()
                .flat_map(|amounts| names.iter().map(|n| amounts.get(n).copied().unwrap_or(0)))
                .collect();
            self.by_pool[pool] = PoolAllocatable { names, amounts };
        }
        if !self.offers.contains_key(filter) {
            let allowed = types
                .iter()
                .map(|it| {
                    (0..it.offerings.len())
                        .filter(|&i| {
                            it.offerings[i].launchable() && filter.allows(&it.offerings[i])
                        })
                        .collect()
                })
                .collect();
            self.offers.insert(filter.clone(), allowed);
        }
    }

    /// `requests` as (index into NodePool `pool`'s names, amount), the amounts a type must
    /// have; `None` when a positive request names a resource no type has (nothing fits).
    fn wanted(&self, pool: usize, requests: &BTreeMap<String, i64>) -> Option<Vec<(usize, i64)>> {
        let names = &self.by_pool[pool].names;
        let mut wanted = Vec::with_capacity(requests.len());
        for (name, &amount) in requests {
            match names.binary_search(name) {
                Ok(i) => wanted.push((i, amount)),
                // A type without the resource has 0 of it.
                Err(_) if amount <= 0 => {}
                Err(_) => return None,
            }
        }
        Some(wanted)
    }

    /// Whether `wanted` (from [`Allocatable::wanted`]) fits what catalog type `ci` advertises
    /// in NodePool `pool` (prepared).
    fn fits(&self, pool: usize, ci: usize, wanted: &Option<Vec<(usize, i64)>>) -> bool {
        let Some(wanted) = wanted else {
            return false;
        };
        let allocatable = &self.by_pool[pool];
        let amounts = &allocatable.amounts[ci * allocatable.names.len()..];
        wanted.iter().all(|&(i, amount)| amount <= amounts[i])
    }
}

/// A claim's launch (the AWS provider's choice): (instance type, capacity type, zone, price
/// unrounded), empty when nothing launches.
pub(crate) fn claim_launch<'i>(
    input: &'i Input,
    claim: &ClaimResult,
    cache: &mut Allocatable,
) -> (&'i str, &'static str, String, f64) {
    let catalog = &input.catalog;
    let filter = OfferingFilter::new(&claim.requirements);
    cache.prepare(claim.pool_index, &filter);
    let cache = &*cache;
    let allowed = &cache.offers[&filter];
    let types = catalog.types();
    let wanted = cache.wanted(claim.pool_index, &claim.requests);
    let fits = |ci: usize| cache.fits(claim.pool_index, ci, &wanted);
    let offers = |ci: usize| allowed[ci].iter().map(move |&i| &types[ci].offerings[i]);
    let exotic = |ci: usize| cache.exotic[ci];
    match launch_fitting(claim, fits, offers, exotic, &input.options) {
        Some(l) => (
            &catalog.types()[l.instance_type].name,
            l.capacity_type.as_str(),
            l.zone,
            l.price,
        ),
        None => ("", "", String::new(), 0.0),
    }
}

/// A claim's requests as quantities.
pub(crate) fn claim_requests(claim: &ClaimResult) -> BTreeMap<String, String> {
    claim
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), format_quantity(k, *v)))
        .collect()
}

/// One claim of the plan (its launch choice, options, pods and requests) and its launch's
/// price, unrounded.
fn planned_claim(
    input: &Input,
    claim: &ClaimResult,
    allocatable: &mut Allocatable,
) -> (PlannedClaim, f64) {
    let catalog = &input.catalog;
    let (instance_type, capacity_type, zone, price) = claim_launch(input, claim, allocatable);
    let planned = PlannedClaim {
        node_pool: claim.pool.clone(),
        instance_type: instance_type.to_owned(),
        instance_type_options: claim
            .types
            .iter()
            .map(|&ci| catalog.types()[ci].name.clone())
            .collect(),
        capacity_type: capacity_type.to_owned(),
        zone,
        pods: claim.pods.iter().map(|&p| input.pods[p].key()).collect(),
        price_per_hour: round(price),
        requests: claim_requests(claim),
        next_loop: false,
    };
    (planned, price)
}

pub(crate) fn build(input: &Input, outcome: &Outcome) -> Plan {
    let mut allocatable = Allocatable::new(input);
    let mut total = 0.0;
    let mut node_claims = Vec::new();
    for claim in &outcome.claims {
        let (planned, price) = planned_claim(input, claim, &mut allocatable);
        total += price;
        node_claims.push(planned);
    }
    let existing_nodes: Vec<ExistingUse> = outcome
        .existing
        .iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(n, pods)| ExistingUse {
            node: input.nodes[*n].name.clone(),
            node_pool: input.nodes[*n].pool().map(str::to_owned),
            pods: pods.iter().map(|&p| input.pods[p].key()).collect(),
        })
        .collect();
    let pending: Vec<PendingPod> = outcome
        .errors
        .iter()
        .map(|(&p, reason)| PendingPod {
            pod: input.pods[p].key(),
            reason: reason.clone(),
        })
        .collect();
    let placed = node_claims.iter().map(|c| c.pods.len()).sum::<usize>()
        + existing_nodes.iter().map(|e| e.pods.len()).sum::<usize>();
    let budgets = input
        .pools
        .iter()
        .filter_map(|p| p.budget_account.as_ref())
        .map(|account| {
            let new: f64 = node_claims
                .iter()
                .filter(|c| c.node_pool == account.node_pool)
                .map(|c| c.price_per_hour)
                .sum();
            let prefix = format!("budget: nodepool {}'s ", account.node_pool);
            BudgetUse {
                node_pool: account.node_pool.clone(),
                per_hour: kk_model::spend::dollars(account.budget),
                spend_per_hour: account.spend_per_hour,
                planned_per_hour: round(account.spend_per_hour + new),
                resource: account.resource.clone(),
                limit: account.limit.clone(),
                pending: pending
                    .iter()
                    .filter(|p| p.reason.contains(&prefix))
                    .count(),
                problem: account.problem.clone(),
            }
        })
        .collect();
    Plan {
        budgets,
        totals: Totals {
            nodes: node_claims.len(),
            pods_placed: placed,
            pods_pending: pending.len(),
            price_per_hour: round(total),
        },
        node_claims,
        existing_nodes,
        pending,
        warnings: outcome.warnings.clone(),
    }
}

impl Plan {
    /// Totals from the claims, existing nodes and Pending pods.
    pub(crate) fn recount(&mut self) {
        let placed = self.node_claims.iter().map(|c| c.pods.len()).sum::<usize>()
            + self
                .existing_nodes
                .iter()
                .map(|e| e.pods.len())
                .sum::<usize>();
        self.totals = Totals {
            nodes: self.node_claims.len(),
            pods_placed: placed,
            pods_pending: self.pending.len(),
            price_per_hour: round(self.node_claims.iter().map(|c| c.price_per_hour).sum()),
        };
    }
}

/// Why one pod went where it went, or why it stays Pending.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub pod: String,
    /// `existing node NAME`, `NodeClaim #N (nodepool P, TYPE)` or `Pending`.
    pub result: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub requests: BTreeMap<String, String>,
    /// Preferences dropped before the final attempt, in order.
    pub relaxed: Vec<String>,
    /// Scheduling passes the pod went through.
    pub passes: usize,
    /// The final attempt: each candidate tried and why it did not take the pod.
    pub attempts: Vec<ExplainedAttempt>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainedAttempt {
    pub target: String,
    /// `ok` or the reason.
    pub outcome: String,
}

/// `plan --explain` named a pod that is not among the workloads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no pod {pod:?} among the workloads (pods are namespace/name: {})", .known.join(", "))]
pub struct UnknownPod {
    pub pod: String,
    /// The first few pod keys (and `...` when there are more), as a hint.
    pub known: Vec<String>,
}

impl Explanation {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "pod {}", self.pod);
        let req: Vec<String> = self
            .requests
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "  requests: {}", req.join(" "));
        let _ = writeln!(out, "  result:   {}", self.result);
        if let Some(r) = &self.reason {
            let _ = writeln!(out, "  reason:   {r}");
        }
        let _ = writeln!(out, "  passes:   {}", self.passes);
        for r in &self.relaxed {
            let _ = writeln!(out, "  relaxed:  {r}");
        }
        // Group repeated outcomes of in-flight claims so thousands of claims stay readable.
        let mut i = 0;
        let _ = writeln!(out, "  last attempt:");
        while i < self.attempts.len() {
            let a = &self.attempts[i];
            let mut j = i + 1;
            if a.target.starts_with("in-flight") {
                while j < self.attempts.len()
                    && self.attempts[j].target.starts_with("in-flight")
                    && self.attempts[j].outcome == a.outcome
                {
                    j += 1;
                }
            }
            if j - i > 1 {
                let _ = writeln!(out, "    {} in-flight NodeClaims: {}", j - i, a.outcome);
            } else {
                let _ = writeln!(out, "    {}: {}", a.target, a.outcome);
            }
            i = j;
        }
        out
    }
}

impl Plan {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }

    /// [`Plan::to_json`]'s bytes, written as they are made: a plan of 100,000 pods is never
    /// held twice (once built, once as text).
    pub fn write_json<W: std::io::Write>(&self, mut out: W) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut out, self)?;
        out.write_all(b"\n")
    }

    /// The human table: one row per NodeClaim, existing nodes used, Pending pods by reason.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let header = [
            "#",
            "NODEPOOL",
            "INSTANCE TYPE",
            "OPTIONS",
            "CAPACITY",
            "ZONE",
            "PODS",
            "$/H",
        ];
        let mut rows: Vec<Vec<String>> = Vec::new();
        for (i, c) in self.node_claims.iter().enumerate() {
            rows.push(vec![
                (i + 1).to_string(),
                if c.next_loop {
                    format!("{} (next loop)", c.node_pool)
                } else {
                    c.node_pool.clone()
                },
                c.instance_type.clone(),
                c.instance_type_options.len().to_string(),
                c.capacity_type.clone(),
                c.zone.clone(),
                c.pods.len().to_string(),
                format!("{:.4}", c.price_per_hour),
            ]);
        }
        if rows.is_empty() {
            out.push_str("No new NodeClaims.\n");
        } else {
            let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
            for r in &rows {
                for (w, c) in widths.iter_mut().zip(r) {
                    *w = (*w).max(c.len());
                }
            }
            let line = |cells: Vec<String>| {
                let mut l = String::new();
                for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                    if i > 0 {
                        l.push_str("  ");
                    }
                    if i == 0 || i == 3 || i == 6 || i == 7 {
                        let _ = write!(l, "{c:>w$}");
                    } else {
                        let _ = write!(l, "{c:<w$}");
                    }
                }
                l.trim_end().to_owned()
            };
            let _ = writeln!(
                out,
                "{}",
                line(header.iter().map(|h| (*h).to_owned()).collect())
            );
            for r in rows {
                let _ = writeln!(out, "{}", line(r));
            }
        }
        for e in &self.existing_nodes {
            let _ = writeln!(
                out,
                "existing node {}{}: {} pod{}",
                e.node,
                e.node_pool
                    .as_ref()
                    .map(|p| format!(" (nodepool {p})"))
                    .unwrap_or_default(),
                e.pods.len(),
                if e.pods.len() == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(
            out,
            "total: {} new node{}, {} pod{} placed, {} Pending, ${:.4}/h",
            self.totals.nodes,
            if self.totals.nodes == 1 { "" } else { "s" },
            self.totals.pods_placed,
            if self.totals.pods_placed == 1 {
                ""
            } else {
                "s"
            },
            self.totals.pods_pending,
            self.totals.price_per_hour
        );
        for b in &self.budgets {
            let _ = writeln!(
                out,
                "budget of nodepool {}: ${:.4}/h now, ${:.4}/h planned, of ${:.4}/h ({}: limit {}){}",
                b.node_pool,
                b.spend_per_hour,
                b.planned_per_hour,
                b.per_hour,
                b.resource,
                b.limit.as_deref().unwrap_or("none"),
                match (b.pending, &b.problem) {
                    (_, Some(problem)) => format!("; not priced: {problem}"),
                    (0, None) => String::new(),
                    (n, None) => format!("; {n} pod{} wait for it", if n == 1 { "" } else { "s" }),
                }
            );
        }
        if !self.pending.is_empty() {
            let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for p in &self.pending {
                by_reason.entry(&p.reason).or_default().push(&p.pod);
            }
            let _ = writeln!(out, "Pending:");
            for (reason, pods) in by_reason {
                let shown: Vec<&str> = pods.iter().take(3).copied().collect();
                let more = if pods.len() > 3 {
                    format!(", ... ({} more)", pods.len() - 3)
                } else {
                    String::new()
                };
                let _ = writeln!(out, "  {:>4} × {reason}", pods.len());
                let _ = writeln!(out, "         {}{more}", shown.join(", "));
            }
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }
}
