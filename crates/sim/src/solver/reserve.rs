//! Which capacity reservations a NodeClaim holds (`nodeclaim.go` `offeringsToReserve`, in the
//! strict mode the provisioner runs: `DisableReservedCapacityFallback`).
//!
//! A claim holds one instance of every compatible reservation that still has room. Strict
//! mode makes three situations a *reserved-offering error*, which fails the pod for this loop
//! without relaxing it and stops it from trying NodePools of lower weight: a compatible
//! reservation has room but other claims of this loop hold all of it; every compatible option
//! is a full reservation; or the pod would narrow a claim away from all its reservations. A
//! later loop sees the launches and falls back to on-demand or spot.

use std::sync::Arc;

use super::Scheduler;
use super::bits::Bits;
use crate::offerings::OfferingFilter;
use crate::req::Requirements;

/// Why a pod may not be added to a claim because of reservations (upstream's texts).
pub(super) const HELD_BY_OTHERS: &str = "one or more instance types with compatible reserved offerings are available, but could not be reserved";
const ALL_FULL: &str =
    "all compatible reserved offerings are full and no on-demand or spot fallback is available";
const NARROWED_AWAY: &str = "satisfying updated nodeclaim constraints would remove all compatible reserved offering options";

impl Scheduler<'_> {
    /// The reservations claim `c` would hold with requirements `reqs` and instance types
    /// `types` (its pool's indices), or the reserved-offering error.
    pub(super) fn offerings_to_reserve(
        &self,
        c: usize,
        reqs: &Requirements,
        types: &Bits,
    ) -> Result<Vec<Arc<str>>, String> {
        // Without reservations the walk below can only find fallbacks: skip it, it is most of
        // a large plan's time (every pod against every in-flight claim).
        if self.reservations.is_empty() {
            return Ok(Vec::new());
        }
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let filter = OfferingFilter::new(reqs);
        let (mut with_room, mut full, mut fallback) = (false, false, false);
        let mut reserve: Vec<Arc<str>> = Vec::new();
        for t in types.iter() {
            let it = &self.input.catalog.types()[pool.types[t].cat];
            for o in it
                .offerings
                .iter()
                .filter(|o| o.available && filter.allows(o))
            {
                let Some(r) = &o.reservation else {
                    fallback = true;
                    continue;
                };
                if r.capacity == 0 {
                    full = true;
                    continue;
                }
                with_room = true;
                if self.reservations.can_reserve(claim.host, &r.id) && !reserve.contains(&r.id) {
                    reserve.push(r.id.clone());
                }
            }
        }
        if with_room && reserve.is_empty() {
            return Err(HELD_BY_OTHERS.into());
        }
        if full && !with_room && !fallback {
            return Err(ALL_FULL.into());
        }
        if !claim.reserved.is_empty() && reserve.is_empty() {
            return Err(NARROWED_AWAY.into());
        }
        Ok(reserve)
    }
}
