//! Capacity reservations, as `aws ec2 describe-capacity-reservations` prints them
//! (`{"CapacityReservations": [...]}`, JSON or YAML): each active one becomes a `reserved`
//! offering of its type and zone, with `AvailableInstanceCount` instances left, as Karpenter's
//! AWS provider builds it (karpenter-provider-aws v1.15 `pkg/providers/capacityreservation`,
//! which asks EC2 for `state=active` only; `pkg/providers/instancetype/offering`).

use kk_catalog::{Catalog, Reservation};
use serde_json::Value;

use super::read::{Ctx, parse_documents};
use super::{InputError, SourceFile};

/// Adds the reservations of `file` to `catalog`; returns warnings (reservations skipped).
pub fn add_reservations(
    file: &SourceFile,
    catalog: &mut Catalog,
    errors: &mut Vec<InputError>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for doc in &parse_documents(file, true, errors) {
        let mut ctx = Ctx {
            file: &file.name,
            doc,
            errors,
        };
        let Some(list) = doc
            .value
            .get("CapacityReservations")
            .and_then(Value::as_array)
        else {
            ctx.err(
                "",
                "expected the output of `aws ec2 describe-capacity-reservations`: a CapacityReservations list",
            );
            continue;
        };
        for (i, r) in list.iter().enumerate() {
            let at = format!("CapacityReservations[{i}]");
            let text = |ctx: &mut Ctx, key: &str| -> Option<String> {
                let v = r.get(key).and_then(Value::as_str).map(str::to_owned);
                if v.is_none() {
                    ctx.err(&format!("{at}.{key}"), format!("missing {key}"));
                }
                v
            };
            let (Some(id), Some(instance_type), Some(zone)) = (
                text(&mut ctx, "CapacityReservationId"),
                text(&mut ctx, "InstanceType"),
                text(&mut ctx, "AvailabilityZone"),
            ) else {
                continue;
            };
            let Some(count) = r
                .get("AvailableInstanceCount")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
            else {
                ctx.err(
                    &format!("{at}.AvailableInstanceCount"),
                    "expected the number of instances still available",
                );
                continue;
            };
            let state = r.get("State").and_then(Value::as_str).unwrap_or("active");
            if state != "active" {
                warnings.push(format!(
                    "{}: capacity reservation {id} is {state}: Karpenter only uses active ones; skipped",
                    file.name
                ));
                continue;
            }
            let kind = r
                .get("ReservationType")
                .and_then(Value::as_str)
                .unwrap_or("default");
            if !matches!(kind, "default" | "capacity-block") {
                ctx.err(
                    &format!("{at}.ReservationType"),
                    format!("{kind:?} is neither default nor capacity-block"),
                );
                continue;
            }
            // A reservation in a zone its type is not offered in gives no launchable offering.
            let offered = catalog
                .get(&instance_type)
                .is_some_and(|it| it.offerings.iter().any(|o| *o.zone == *zone));
            let reservation = Reservation {
                id: id.as_str().into(),
                kind: kind.into(),
                interruptible: r
                    .get("Interruptible")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                capacity: count,
            };
            if !catalog.add_reservation(&instance_type, &zone, reservation, None, offered) {
                ctx.err(
                    &format!("{at}.InstanceType"),
                    format!("unknown instance type {instance_type:?}"),
                );
            } else if !offered {
                warnings.push(format!(
                    "{}: capacity reservation {id}: {instance_type} has no offering in {zone} (not one of the plan's zones?); it is not used",
                    file.name
                ));
            }
        }
    }
    warnings
}
