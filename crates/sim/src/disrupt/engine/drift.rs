//! Drift (`drift.go`): drifted candidates, oldest drift first and empty ones before busy ones,
//! replaced one at a time. (StaticDrift, which comes before it, is not modelled: `reconcile` in
//! `mod.rs` only warns about drifted nodes of static NodePools.)

use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use super::Replacement;
use crate::disrupt::state::Reason;

impl Engine<'_> {
    pub(super) fn drift(&mut self, mut candidates: Vec<Candidate>) -> Option<Command> {
        candidates.sort_by_key(|c| (self.nodes[&c.name].info.drifted_at, c.name.clone()));
        let (empty, busy): (Vec<Candidate>, Vec<Candidate>) =
            candidates.into_iter().partition(|c| c.reschedulable == 0);
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
                    let mut replacements = Vec::new();
                    for claim in sim.claims {
                        match self.do_launch(&claim) {
                            Some(launch) => replacements.push(Replacement { claim, launch }),
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
                    return Some(Command {
                        method: Method::Drift,
                        candidates: vec![c],
                        replacements,
                        moves: sim.moves,
                        stranded: Vec::new(),
                    });
                }
            }
        }
        None
    }
}
