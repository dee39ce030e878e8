//! Preference relaxation (`preferences.go`): when a pod fits nowhere, one preference at a time
//! is dropped, in Karpenter's order, and the pod is tried again.

use crate::model::{Effect, Pod, Toleration, TolerationOp};

/// Removes the heaviest weighted term (ties: the first), as the relaxation steps do.
fn remove_heaviest<T>(terms: &mut Vec<(i32, T)>) -> bool {
    let Some(i) = terms
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.0.cmp(&b.0).then(j.cmp(i)))
        .map(|(i, _)| i)
    else {
        return false;
    };
    terms.remove(i);
    true
}

/// One relaxation step in Karpenter's order; `None` when nothing is left to relax.
pub(super) fn relax(pod: &mut Pod, tolerate_prefer_no_schedule: bool) -> Option<String> {
    if let Some(terms) = pod.required_terms.as_mut()
        && terms.len() > 1
    {
        terms.remove(0);
        return Some("removed the first required node affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_affinity) {
        return Some("removed the heaviest preferred pod affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_anti_affinity) {
        return Some("removed the heaviest preferred pod anti-affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_terms) {
        return Some("removed the heaviest preferred node affinity term".into());
    }
    if let Some(i) = pod.spread.iter().position(|s| !s.required) {
        let s = pod.spread.swap_remove(i);
        return Some(format!(
            "removed the ScheduleAnyway topology spread on {}",
            s.topology_key
        ));
    }
    if tolerate_prefer_no_schedule {
        let tol = Toleration {
            key: String::new(),
            operator: TolerationOp::Exists,
            value: String::new(),
            effect: Some(Effect::PreferNoSchedule),
        };
        if !pod.tolerations.iter().any(|t| {
            t.key.is_empty()
                && t.operator == TolerationOp::Exists
                && t.effect.is_none_or(|e| e == Effect::PreferNoSchedule)
        }) {
            pod.tolerations.push(tol);
            return Some("added a toleration for PreferNoSchedule taints".into());
        }
    }
    None
}
