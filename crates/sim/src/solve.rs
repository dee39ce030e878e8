//! The entry points that run the provisioning simulation: [`solve`] (the plan, with
//! Karpenter's next loop for pods that waited for a capacity reservation), [`simulate`] (the
//! raw outcome) and [`explain`] (one pod). The plan's types and rendering are in
//! [`crate::plan`], the next loop in [`crate::next_loop`]; this module uses both, and neither
//! uses it.

use std::collections::BTreeMap;

use kk_catalog::resources::format_quantity;

use crate::plan::{ExplainedAttempt, Explanation, Plan, UnknownPod, build};
use crate::solver::{Input, Outcome, Placement};

/// Runs the simulation.
/// Pods that wait for a capacity reservation another NodeClaim of the same loop holds are
/// placed by Karpenter's next loop, simulated too ([`crate::next_loop`]).
pub fn solve(input: &Input) -> Plan {
    let outcome = crate::solver::solve(input, None);
    let mut plan = build(input, &outcome);
    if !outcome.waiting.is_empty() {
        let next = crate::next_loop::next_input(input, &outcome, &plan);
        let second = crate::solver::solve(&next, None);
        let second_plan = build(&next, &second);
        crate::next_loop::merge(&mut plan, &next, &second, second_plan);
        plan.warnings.push(format!(
            "{} pod(s) waited for a capacity reservation another NodeClaim of the same loop holds; NodeClaims marked \"next loop\" are where Karpenter's next loop, seconds later, puts them",
            outcome.waiting.len()
        ));
    }
    plan
}

/// The raw outcome (indices into the input), for tests and tools.
pub fn simulate(input: &Input) -> Outcome {
    crate::solver::solve(input, None)
}

/// Explains one pod (`namespace/name`); `Err` when no such pod.
pub fn explain(input: &Input, pod: &str) -> Result<Explanation, UnknownPod> {
    let pid = input
        .pods
        .iter()
        .position(|p| p.key() == pod || (p.namespace == "default" && p.name == pod))
        .ok_or_else(|| {
            let mut names: Vec<String> = input.pods.iter().take(5).map(|p| p.key()).collect();
            if input.pods.len() > 5 {
                names.push("...".into());
            }
            UnknownPod {
                pod: pod.to_owned(),
                known: names,
            }
        })?;
    let outcome = crate::solver::solve(input, Some(pid));
    let plan = build(input, &outcome);
    let trace = outcome.trace.clone().unwrap_or_default();
    let key = input.pods[pid].key();
    // The claim of `plan` holding the pod, as the result reads it.
    let claim_of = |plan: &Plan, loop_note: &str| match plan
        .node_claims
        .iter()
        .enumerate()
        .find(|(_, c)| c.pods.contains(&key))
    {
        Some((i, c)) => format!(
            "NodeClaim #{}{loop_note} (nodepool {}, {} {} in {}, {} options)",
            i + 1,
            c.node_pool,
            c.instance_type,
            c.capacity_type,
            c.zone,
            c.instance_type_options.len()
        ),
        None => "Pending".into(),
    };
    let result = match outcome.placements[pid] {
        Some(Placement::Existing(e)) => {
            format!("existing node {}", input.nodes[outcome.existing[e].0].name)
        }
        Some(Placement::Claim(_)) => claim_of(&plan, ""),
        // The reason below is the first loop's; the next loop places it.
        None if outcome.waiting.contains(&pid) => {
            claim_of(&solve(input), " in Karpenter's next loop")
        }
        None => "Pending".into(),
    };
    let p = &input.pods[pid];
    let mut requests: BTreeMap<String, String> = p
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), format_quantity(k, *v)))
        .collect();
    requests.insert("pods".into(), "1".into());
    Ok(Explanation {
        pod: p.key(),
        result,
        reason: outcome.errors.get(&pid).cloned(),
        requests,
        relaxed: trace.relaxations,
        passes: trace.passes,
        attempts: trace
            .attempts
            .into_iter()
            .map(|a| ExplainedAttempt {
                target: a.target,
                outcome: match a.outcome {
                    Ok(()) => "ok".into(),
                    Err(e) => e,
                },
            })
            .collect(),
    })
}
