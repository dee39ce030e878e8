//! What the reserved-capacity and training rules share: where a pool asks for `reserved`
//! capacity or capacity blocks, whether it is a training pool, and which catalog types its
//! requirements admit.

use kk_catalog::{InstanceType, catalog};
use kk_karpenter::labels::{CAPACITY_TYPE, INSTANCE_FAMILY, INSTANCE_TYPE, RESERVATION_TYPE};
use kk_karpenter::{Operator, Requirement};
use kk_model::FieldPath;

use crate::context::{Context, NodePoolView};
use crate::gpu::family_of;

fn requirements_path() -> FieldPath {
    FieldPath::parse("spec.template.spec.requirements")
}

/// Where the pool names `reserved` in a `karpenter.sh/capacity-type In [...]` requirement.
/// Only an explicit `In` counts: `Exists` or `NotIn [spot]` admit reserved offerings too, but
/// no one wrote them to ask for reservations.
pub fn reserved_value(view: &NodePoolView<'_>) -> Option<FieldPath> {
    let reqs = &view.pool.spec.template.spec.requirements;
    reqs.iter().enumerate().find_map(|(i, req)| {
        if req.key != CAPACITY_TYPE || req.operator != "In" {
            return None;
        }
        let j = req.values.iter().position(|v| v == "reserved")?;
        Some(requirements_path().index(i).key("values").index(j))
    })
}

/// Where the pool keeps its reserved offerings to capacity blocks: a
/// `karpenter.k8s.aws/capacity-reservation-type` requirement `In [capacity-block]` or
/// `NotIn [default]`.
pub fn capacity_block_requirement(view: &NodePoolView<'_>) -> Option<FieldPath> {
    let reqs = &view.pool.spec.template.spec.requirements;
    reqs.iter().enumerate().find_map(|(i, req)| {
        let values = &req.values;
        let blocks = match req.operator.as_str() {
            "In" => values.iter().any(|v| v == "capacity-block"),
            "NotIn" => {
                values.iter().any(|v| v == "default")
                    && !values.iter().any(|v| v == "capacity-block")
            }
            _ => false,
        };
        (req.key == RESERVATION_TYPE && blocks).then(|| requirements_path().index(i))
    })
}

/// Whether the pool's node class (when it is among the linted objects) selects reservations.
/// `None` when the node class is not there to say.
pub fn class_has_reservations(ctx: &Context<'_>, view: &NodePoolView<'_>) -> Option<bool> {
    ctx.node_class(view.node_class_name()).map(|class| {
        !class
            .class
            .spec
            .capacity_reservation_selector_terms
            .is_empty()
    })
}

/// Families of training-class GPU types (A100, H100, H200, B200 and later): p4d, p4de, p5,
/// p5e, p5en, p6-….
fn is_training_family(family: &str) -> bool {
    family
        .strip_prefix('p')
        .and_then(|rest| rest.chars().next())
        .is_some_and(|generation| ('4'..='9').contains(&generation))
}

/// Why a GPU pool counts as a training pool: it launches p4/p5/p6 types, or reserved capacity
/// from reservations its node class selects. `None` for any other pool.
pub fn training_evidence(ctx: &Context<'_>, view: &NodePoolView<'_>) -> Option<String> {
    view.gpu.as_ref()?;
    for req in &view.pool.spec.template.spec.requirements {
        if req.operator != "In" {
            continue;
        }
        let families: Vec<&str> = match req.key.as_str() {
            INSTANCE_FAMILY => req.values.iter().map(String::as_str).collect(),
            INSTANCE_TYPE => req.values.iter().map(|v| family_of(v)).collect(),
            _ => continue,
        };
        if let Some(family) = families.into_iter().find(|f| is_training_family(f)) {
            return Some(format!("it launches {family} instances"));
        }
    }
    if reserved_value(view).is_some() && class_has_reservations(ctx, view) == Some(true) {
        return Some("it launches into capacity reservations".into());
    }
    None
}

/// The catalog's instance types that every requirement on an instance-type label admits
/// (capacity type, zone and reservation requirements are offering properties, not checked).
pub fn admitted_types(view: &NodePoolView<'_>) -> Vec<&'static InstanceType> {
    let reqs: Vec<(&str, Requirement)> = view
        .pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter(|r| {
            !matches!(
                r.key.as_str(),
                CAPACITY_TYPE
                    | RESERVATION_TYPE
                    | "karpenter.k8s.aws/capacity-reservation-id"
                    | "topology.kubernetes.io/zone"
                    | "kubernetes.io/os"
            )
        })
        .filter_map(|r| {
            let op = Operator::parse(&r.operator).ok()?;
            Some((r.key.as_str(), Requirement::new(op, &r.values).ok()?))
        })
        .collect();
    catalog()
        .types()
        .iter()
        .filter(|t| reqs.iter().all(|(key, req)| req.matches(t.label(key))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_families_are_p4_and_later() {
        for family in ["p4d", "p4de", "p5", "p5e", "p5en", "p6-b200"] {
            assert!(is_training_family(family), "{family}");
        }
        for family in ["p3", "p3dn", "g6", "m6i", "p"] {
            assert!(!is_training_family(family), "{family}");
        }
    }
}
