//! Emptiness (`emptiness.go`): empty candidates deleted together, as the budgets allow, with
//! no replacement.

use super::Candidate;
use super::Command;
use super::Engine;
use super::Method;
use crate::disrupt::state::Reason;

impl Engine<'_> {
    pub(super) fn emptiness(&mut self, candidates: Vec<Candidate>) -> Option<Command> {
        let mut candidates = candidates;
        Self::sort_by_savings(&mut candidates);
        let mut budget = self.budgets(Reason::Empty);
        let mut chosen = Vec::new();
        for c in candidates {
            let left = budget.entry(c.pool.clone()).or_default();
            if *left == 0 {
                self.note(
                    &c.name,
                    Some(Method::Emptiness),
                    format!(
                        "disruption budget of nodepool {} exhausted for reason Empty",
                        c.pool
                    ),
                );
                continue;
            }
            *left -= 1;
            chosen.push(c);
        }
        (!chosen.is_empty()).then(|| Command {
            method: Method::Emptiness,
            candidates: chosen,
            replacements: Vec::new(),
            moves: Vec::new(),
            stranded: Vec::new(),
        })
    }
}
