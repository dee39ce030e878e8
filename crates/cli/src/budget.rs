//! Spend budgets where prices are needed (issue #51): the budget controller's judge, which
//! prices a cluster's state with kk-sim as `plan` does, and the spec checks only prices can
//! make (a budget that cannot buy even the pool's cheapest node), located like kk-spec's own.

use kk_live::controller::budget::{Judge, PoolVerdict};
use kk_model::FieldPath;
use kk_model::spend::format_per_hour;
use kk_sim::{LoadOptions, SourceFile};

/// The budget controller's judge: kk-sim's ledger over the listed state.
pub struct SimJudge;

impl Judge for SimJudge {
    fn judge(&self, documents: &[(String, String)]) -> Result<Vec<PoolVerdict>, String> {
        let files: Vec<SourceFile> = documents
            .iter()
            .map(|(name, text)| SourceFile::new(name.clone(), text.clone()))
            .collect();
        let state =
            kk_sim::disrupt::load(&files, &LoadOptions::default(), None).map_err(|errors| {
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        Ok(state
            .input
            .pools
            .iter()
            .filter_map(|pool| {
                let account = pool.budget_account.as_ref()?;
                let uid = state
                    .node_pools
                    .get(&pool.name)
                    .and_then(|np| np.pointer("/metadata/uid"))
                    .and_then(|u| u.as_str())
                    .unwrap_or_default()
                    .to_owned();
                Some(PoolVerdict {
                    pool: pool.name.clone(),
                    uid,
                    resource: account.resource.clone(),
                    limit: account.limit.clone(),
                    budget: kk_model::spend::dollars(account.budget),
                    spend: account.spend_per_hour,
                    warn_percent: account.warn_percent,
                    exhausted: account.exhausted(),
                    problem: account.problem.clone(),
                })
            })
            .collect())
    }
}

/// Budget problems only prices reveal: a pool's budget (or the cluster's) below the cheapest
/// node it can launch, a budget on a resource some of its types lack, or on a pool that can
/// launch nothing. Each is located at the budget's field, as kk-spec's errors are.
pub fn spec_problems(cluster: &kk_spec::ElasticCluster) -> Vec<(FieldPath, String)> {
    let spec = &cluster.spec;
    let budgeted: Vec<(usize, String)> = spec
        .budgeted_pools()
        .filter_map(|(pool, resource)| {
            let i = spec.pools.iter().position(|p| p.name == pool.name)?;
            Some((i, resource))
        })
        .collect();
    if budgeted.is_empty() {
        return Vec::new();
    }
    // The rendered NodePools, read as plan reads them (annotations and all).
    let documents: Vec<String> = budgeted
        .iter()
        .filter_map(|(i, _)| {
            serde_json::to_string(&kk_render::node_pool_for(&spec.pools[*i], spec)).ok()
        })
        .collect();
    let file = SourceFile::new("<spec pools>", documents.join("\n---\n"));
    let Ok(input) = kk_sim::load(&[file], &[], &[], &LoadOptions::default()) else {
        // What kk-sim refuses here, render and plan report with their own locations.
        return Vec::new();
    };
    let mut problems = Vec::new();
    let mut cheapest_anywhere: Option<i64> = None;
    for (i, resource) in &budgeted {
        let pool = &spec.pools[*i];
        let at = FieldPath::root()
            .key("spec")
            .key("pools")
            .index(*i)
            .key("budget");
        let Some(sim_pool) = input.pools.iter().find(|p| p.name == pool.name) else {
            continue;
        };
        match kk_sim::budget::rate(&input.catalog, sim_pool, resource) {
            Ok(rate) => {
                cheapest_anywhere = Some(
                    cheapest_anywhere.map_or(rate.cheapest.price, |c| c.min(rate.cheapest.price)),
                );
                let own = pool.budget.as_ref().and_then(|b| b.micro_per_hour());
                if let Some(own) = own
                    && own < rate.cheapest.price
                {
                    problems.push((
                        at.key("perHour"),
                        format!(
                            "{} is less than the cheapest node this pool can launch ({} {}, {}): it could never launch one",
                            format_per_hour(own),
                            rate.cheapest.instance_type,
                            rate.cheapest.capacity_type,
                            format_per_hour(rate.cheapest.price)
                        ),
                    ));
                }
            }
            Err(kk_sim::budget::RateError::ZeroOn(types)) => problems.push((
                at.key("resource"),
                format!(
                    "{} have no {resource}: a limit on {resource} would not hold them back, so the budget could not hold (narrow the pool's types, or budget another resource)",
                    types.join(", ")
                ),
            )),
            Err(kk_sim::budget::RateError::NoOffering) => problems.push((
                at.clone(),
                "the pool's requirements allow no offering, so its budget cannot be priced".into(),
            )),
        }
    }
    if let (Some(cluster_budget), Some(cheapest)) = (
        spec.budget.as_ref().and_then(|b| b.micro_per_hour()),
        cheapest_anywhere,
    ) && cluster_budget < cheapest
    {
        problems.push((
            FieldPath::root().key("spec").key("budget").key("perHour"),
            format!(
                "{} is less than the cheapest node any pool can launch ({}): no pool could launch one",
                format_per_hour(cluster_budget),
                format_per_hour(cheapest)
            ),
        ));
    }
    problems
}
