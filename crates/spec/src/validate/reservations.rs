//! Capacity reservations: a node class's `capacityReservations` terms, and the pool fields
//! that only mean something with them (`reserved`, `capacityReservationType`).
//!
//! The rules mirror the EC2NodeClass CRD's `capacityReservationSelectorTerms` (Karpenter
//! v1.14.1 schema and CEL), stricter where the CRD lets a mistake through: its "id is
//! exclusive" rule only fails when *every* term mixes `id` with other fields.

use super::*;

/// The CRD's `maxItems` on `capacityReservationSelectorTerms`.
const MAX_TERMS: usize = 30;
/// The CRD's `maxProperties` on a term's `tags`.
const MAX_TAGS: usize = 20;
const MATCH_CRITERIA: [&str; 2] = ["open", "targeted"];
const RESERVATION_TYPES: [&str; 2] = ["default", "capacity-block"];

pub(super) fn capacity_reservations(p: &mut Problems, at: &FieldPath, pool: &Pool) {
    let terms = &pool.capacity_reservations;
    let at_terms = at.key("capacityReservations");
    if terms.len() > MAX_TERMS {
        p.push((
            at_terms.clone(),
            format!("{} terms, at most {MAX_TERMS}", terms.len()),
        ));
    }
    for (i, term) in terms.iter().enumerate() {
        term_fields(p, &at_terms.index(i), term);
    }
    let at_types = at.key("instances").key("capacityTypes");
    let reserved = pool
        .instances
        .capacity_types
        .iter()
        .position(|c| c == "reserved");
    if let Some(i) = reserved
        && terms.is_empty()
    {
        p.push((
            at_types.index(i),
            "reserved needs capacityReservations on the pool's node class: without them Karpenter has no reserved offering to launch".into(),
        ));
    }
    if let Some(kind) = &pool.instances.capacity_reservation_type {
        let at_kind = at.key("instances").key("capacityReservationType");
        if !RESERVATION_TYPES.contains(&kind.as_str()) {
            p.push((
                at_kind.clone(),
                format!("{kind:?} must be capacity-block or default"),
            ));
        }
        if reserved.is_none() {
            p.push((
                at_kind,
                "only applies to reserved capacity: add reserved to capacityTypes".into(),
            ));
        }
    }
}

fn term_fields(p: &mut Problems, at: &FieldPath, term: &CapacityReservationTerm) {
    if let Some(id) = &term.id {
        if !RESERVATION_ID.is_match(id) {
            p.push((
                at.key("id"),
                format!("{id:?} is not a capacity reservation ID like cr-0123456789abcdef0"),
            ));
        }
        if !term.tags.is_empty()
            || term.owner_id.is_some()
            || term.instance_match_criteria.is_some()
        {
            p.push((
                at.clone(),
                "id selects one reservation by itself: put tags, ownerID and instanceMatchCriteria in a term of their own".into(),
            ));
        }
        return;
    }
    if term.tags.is_empty() && term.instance_match_criteria.is_none() {
        p.push((
            at.clone(),
            "set id, tags or instanceMatchCriteria (ownerID alone would select every reservation of that account)".into(),
        ));
    }
    if term.tags.len() > MAX_TAGS {
        p.push((
            at.key("tags"),
            format!("{} tags, at most {MAX_TAGS}", term.tags.len()),
        ));
    }
    for (key, value) in &term.tags {
        if key.is_empty() || value.is_empty() {
            p.push((
                at.key("tags").key(key),
                "empty tag keys and values select nothing (use \"*\" for any value)".into(),
            ));
        }
    }
    if let Some(owner) = &term.owner_id
        && !ACCOUNT.is_match(owner)
    {
        p.push((
            at.key("ownerID"),
            format!("{owner:?} is not a 12-digit AWS account ID"),
        ));
    }
    if let Some(criteria) = &term.instance_match_criteria
        && !MATCH_CRITERIA.contains(&criteria.as_str())
    {
        p.push((
            at.key("instanceMatchCriteria"),
            format!("{criteria:?} must be open or targeted"),
        ));
    }
}

/// `terminationGracePeriod`: a Go duration Karpenter accepts (whole units, no `Never`).
pub(super) fn termination_grace_period(p: &mut Problems, at: &FieldPath, pool: &Pool) {
    if let Some(period) = &pool.termination_grace_period
        && !kk_karpenter::duration::is_whole_units(period)
    {
        p.push((
            at.key("terminationGracePeriod"),
            format!("{period:?} is not a duration like 30m or 2h"),
        ));
    }
}
