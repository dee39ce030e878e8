//! What the scan over in-flight NodeClaims reads of each claim before the full check, kept in
//! flat arrays by claim index: its hostname domain, its requests and the room of its largest
//! remaining type, and the one domain it is narrowed to per topology key. At 100,000 pods of
//! Karpenter's benchmark shapes a pod may pass over 20,000 claims; reading these from each
//! claim's own allocations was a cache miss per claim and a third of the solve.

use crate::res::Res;

/// The screening data of every claim that holds a pod (claims are screened only once they
/// are in the in-flight order, which only claims with a pod are).
#[derive(Debug, Clone, Default)]
pub(super) struct Screens {
    /// Resources per claim (the length of a [`Res`]).
    resources: usize,
    /// Topology keys other than the hostname per claim.
    keys: usize,
    hosts: Vec<u32>,
    /// Per claim: its requests, then the most its remaining types hold (`max_net`).
    room: Vec<i64>,
    /// Per claim and key: the interned domain when narrowed to exactly one, else `u32::MAX`.
    singles: Vec<u32>,
    /// Hostname groups (inverse?, group) with, per position of the in-flight order, whether
    /// that claim's host already counts a pod of the group. Kept only while the order is
    /// maintained one move at a time (more than `GO_SORT_EXACT` claims): a pod that may not
    /// join a host the group counts at all skips those positions without screening them.
    occupied: Vec<(bool, usize, Vec<bool>)>,
}

impl Screens {
    pub(super) fn new(resources: usize, keys: usize) -> Screens {
        Screens {
            resources,
            keys,
            ..Screens::default()
        }
    }

    /// Sets claim `c`'s entry (claims get theirs in index order, each when it takes its first
    /// pod, and a claim is never dropped after that).
    pub(super) fn set(
        &mut self,
        c: usize,
        host: u32,
        requests: &Res,
        max_net: &Res,
        singles: &[u32],
    ) {
        if c == self.hosts.len() {
            self.hosts.push(host);
            self.room.resize(self.room.len() + 2 * self.resources, 0);
            self.singles
                .resize(self.singles.len() + self.keys, u32::MAX);
        }
        self.hosts[c] = host;
        let room = &mut self.room[c * 2 * self.resources..(c + 1) * 2 * self.resources];
        let (held, most) = room.split_at_mut(self.resources);
        held.copy_from_slice(requests);
        most.copy_from_slice(max_net);
        self.singles[c * self.keys..(c + 1) * self.keys].copy_from_slice(singles);
    }

    pub(super) fn host(&self, c: usize) -> u32 {
        self.hosts[c]
    }

    /// Whether `requests` more fit claim `c`'s largest remaining type: `claim_can_add`'s
    /// resource check, on the same saturating sums.
    pub(super) fn has_room(&self, c: usize, requests: &[i64]) -> bool {
        let room = &self.room[c * 2 * self.resources..(c + 1) * 2 * self.resources];
        let (held, most) = room.split_at(self.resources);
        held.iter()
            .zip(requests)
            .zip(most)
            .all(|((h, r), m)| h.saturating_add(*r) <= *m)
    }

    /// The domain claim `c` is narrowed to for key `key` (index into the keys), if one.
    pub(super) fn single(&self, c: usize, key: usize) -> u32 {
        self.singles[c * self.keys + key]
    }
}

impl Screens {
    /// The tracked occupancy of hostname group `g` (`inverse`: an inverse anti-affinity
    /// group) by position of `order`, built from `occupied(host)` when not tracked yet.
    pub(super) fn occupancy(
        &mut self,
        inverse: bool,
        g: usize,
        order: &[usize],
        occupied: impl Fn(u32) -> bool,
    ) -> usize {
        if let Some(i) = self
            .occupied
            .iter()
            .position(|(inv, group, _)| *inv == inverse && *group == g)
        {
            return i;
        }
        let bits = order.iter().map(|&c| occupied(self.hosts[c])).collect();
        self.occupied.push((inverse, g, bits));
        self.occupied.len() - 1
    }

    /// The first position at or after `from` whose claim tracked group `i` leaves free.
    pub(super) fn next_free(&self, i: usize, from: usize) -> Option<usize> {
        let bits = &self.occupied[i].2;
        bits.get(from..)?.iter().position(|&b| !b).map(|k| from + k)
    }

    /// Follows a claim's move in the in-flight order (appended when `pushed`; then, when
    /// `moved`, removed from position `.0` and inserted at `.1`), with `occupied(inverse, g)`
    /// for whether its host now counts a pod of each tracked group. Without a move (the
    /// order re-sorted as a whole) the tracking is dropped.
    pub(super) fn follow(
        &mut self,
        pushed: bool,
        moved: Option<(usize, usize)>,
        occupied: impl Fn(bool, usize) -> bool,
    ) {
        let Some((from, to)) = moved else {
            self.occupied.clear();
            return;
        };
        for (inverse, g, bits) in &mut self.occupied {
            if pushed {
                bits.push(false);
            }
            bits.remove(from);
            bits.insert(to, occupied(*inverse, *g));
        }
    }
}
