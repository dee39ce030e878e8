//! Offerings as the scheduler sees them: which ones a NodeClaim's requirements allow, and
//! the capacity reservations behind the `reserved` ones.
//!
//! An offering carries requirements of its own (`Offerings.Compatible`, sigs.k8s.io/karpenter
//! v1.15 `pkg/cloudprovider/types.go`): its zone and capacity type and, from the AWS provider
//! (karpenter-provider-aws v1.15 `pkg/providers/instancetype/offering`), the three
//! capacity-reservation labels — `In [value]` on a reserved offering, `DoesNotExist` on the
//! others. So a NodePool requiring `capacity-reservation-type In [capacity-block]` has no
//! on-demand fallback, while one that only allows `reserved` and `on-demand` has.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kk_catalog::{Catalog, Offering};

use crate::labels;
use crate::req::{Operator, Requirement, Requirements};

/// The part of a NodeClaim's requirements an offering is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OfferingFilter {
    zone: Requirement,
    capacity_type: Requirement,
    /// Reservation id, type and interruptible, when the requirements name them.
    reservation: [Option<Requirement>; 3],
}

const RESERVATION_KEYS: [&str; 3] = [
    labels::RESERVATION_ID,
    labels::RESERVATION_TYPE,
    labels::RESERVATION_INTERRUPTIBLE,
];

impl OfferingFilter {
    pub fn new(reqs: &Requirements) -> OfferingFilter {
        OfferingFilter {
            zone: reqs.get(labels::ZONE),
            capacity_type: reqs.get(labels::CAPACITY_TYPE),
            reservation: RESERVATION_KEYS.map(|k| reqs.get_ref(k).cloned()),
        }
    }

    /// Whether the requirements allow `o` (availability is the caller's question).
    pub fn allows(&self, o: &Offering) -> bool {
        if !(self.zone.has(&o.zone) && self.capacity_type.has(o.capacity_type.as_str())) {
            return false;
        }
        let values = reservation_labels(o);
        self.reservation
            .iter()
            .zip(values)
            .all(|(wanted, offered)| match (wanted, offered) {
                (None, _) => true,
                (Some(r), Some(v)) => r.has(v),
                // The offering's `DoesNotExist` meets only another negative requirement.
                (Some(r), None) => matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist),
            })
    }
}

/// The reservation id, type and interruptible labels of an offering (`None`: it has none),
/// borrowed: `allows` runs for every offering a claim looks at.
fn reservation_labels(o: &Offering) -> [Option<&str>; 3] {
    match &o.reservation {
        None => [None, None, None],
        Some(r) => [
            Some(&r.id),
            Some(&r.kind),
            Some(if r.interruptible { "true" } else { "false" }),
        ],
    }
}

/// What an instance type offers for the three reservation labels (`computeRequirements`): the
/// values of its reservations, or `DoesNotExist` without any.
pub fn reservation_requirements(offerings: &[Offering]) -> [(&'static str, Requirement); 3] {
    let mut values: [BTreeSet<String>; 3] = Default::default();
    for o in offerings {
        for (set, v) in values.iter_mut().zip(reservation_labels(o)) {
            set.extend(v.map(str::to_owned));
        }
    }
    let [id, kind, interruptible] = values.map(|v| {
        if v.is_empty() {
            Requirement::does_not_exist()
        } else {
            Requirement::in_values(v)
        }
    });
    [
        (labels::RESERVATION_ID, id),
        (labels::RESERVATION_TYPE, kind),
        (labels::RESERVATION_INTERRUPTIBLE, interruptible),
    ]
}

/// Karpenter's `ReservationManager` for one scheduling loop: how many instances each
/// reservation has left, and which reservations each NodeClaim (by hostname) holds. A claim
/// holds one instance of every reservation it could still launch into, so a reservation of
/// `n` instances backs at most `n` claims of one loop, however they end up.
#[derive(Debug, Clone, Default)]
pub struct Reservations {
    left: HashMap<Arc<str>, u32>,
    held: HashMap<u32, BTreeSet<Arc<str>>>,
}

impl Reservations {
    /// Every reservation of the catalog with its instances left (the smallest count when an id
    /// shows up more than once, as upstream).
    pub fn new(catalog: &Catalog) -> Reservations {
        let mut left: HashMap<Arc<str>, u32> = HashMap::new();
        for it in catalog.types() {
            for r in it.offerings.iter().filter_map(|o| o.reservation.as_ref()) {
                left.entry(r.id.clone())
                    .and_modify(|n| *n = (*n).min(r.capacity))
                    .or_insert(r.capacity);
            }
        }
        Reservations {
            left,
            held: HashMap::new(),
        }
    }

    /// No offering of the catalog is reserved: no claim can hold anything.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    pub fn can_reserve(&self, host: u32, id: &str) -> bool {
        self.holds(host, id) || self.left.get(id).is_some_and(|n| *n > 0)
    }

    fn holds(&self, host: u32, id: &str) -> bool {
        self.held.get(&host).is_some_and(|h| h.contains(id))
    }

    /// `host` now holds exactly `ids`: new ones are taken, the others given back.
    pub fn hold(&mut self, host: u32, ids: &[Arc<str>]) {
        let before = self.held.remove(&host).unwrap_or_default();
        for id in &before {
            if !ids.contains(id) {
                *self.left.entry(id.clone()).or_default() += 1;
            }
        }
        for id in ids {
            if !before.contains(id) {
                let n = self.left.entry(id.clone()).or_default();
                *n = n.saturating_sub(1);
            }
        }
        if !ids.is_empty() {
            self.held.insert(host, ids.iter().cloned().collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_catalog::{CapacityType, Reservation};

    fn offering(ct: CapacityType, reservation: Option<(&str, &str)>) -> Offering {
        Offering {
            zone: Arc::from("zone-a"),
            capacity_type: ct,
            price: 1.0,
            available: true,
            reservation: reservation.map(|(id, kind)| Reservation {
                id: Arc::from(id),
                kind: Arc::from(kind),
                interruptible: false,
                capacity: 1,
            }),
        }
    }

    #[test]
    fn a_capacity_block_requirement_leaves_no_on_demand_fallback() {
        let mut reqs = Requirements::new();
        reqs.set(
            labels::RESERVATION_TYPE,
            Requirement::single("capacity-block"),
        );
        let f = OfferingFilter::new(&reqs);
        assert!(f.allows(&offering(
            CapacityType::Reserved,
            Some(("cr-1", "capacity-block"))
        )));
        assert!(!f.allows(&offering(CapacityType::Reserved, Some(("cr-2", "default")))));
        assert!(!f.allows(&offering(CapacityType::OnDemand, None)));
        let mut not_in = Requirements::new();
        not_in.set(
            labels::RESERVATION_ID,
            Requirement::new(Operator::NotIn, &["cr-1"]).unwrap(),
        );
        let f = OfferingFilter::new(&not_in);
        assert!(f.allows(&offering(CapacityType::OnDemand, None)));
        assert!(!f.allows(&offering(CapacityType::Reserved, Some(("cr-1", "default")))));
        assert!(f.allows(&offering(CapacityType::Reserved, Some(("cr-2", "default")))));
    }

    #[test]
    fn a_reservation_backs_as_many_claims_as_it_has_instances() {
        let mut r = Reservations::default();
        r.left.insert(Arc::from("cr-1"), 1);
        let id: Arc<str> = Arc::from("cr-1");
        assert!(r.can_reserve(1, "cr-1"));
        r.hold(1, std::slice::from_ref(&id));
        assert!(r.can_reserve(1, "cr-1"), "holding is idempotent");
        assert!(!r.can_reserve(2, "cr-1"));
        r.hold(1, &[]);
        assert!(
            r.can_reserve(2, "cr-1"),
            "given back when the claim narrows"
        );
        assert!(!r.can_reserve(2, "cr-unknown"));
    }
}
