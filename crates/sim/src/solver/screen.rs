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
    /// Whether `positions` and `domains` follow the in-flight order: from the first move made
    /// one at a time until the order is re-sorted as a whole.
    tracking: bool,
    /// Per claim: its position in the in-flight order (while tracking).
    positions: Vec<usize>,
    /// Per topology key: per position of the in-flight order, the claim's single domain as a
    /// code into `kinds` (0: none, or one past the codes kept). A pod constrained on a key
    /// reads these in order and passes over runs of claims narrowed to domains it may not
    /// take without visiting them one by one.
    domains: Vec<Vec<u16>>,
    /// Per topology key: the single domains claims were narrowed to, code `i + 1` for `i`.
    kinds: Vec<Vec<u32>>,
}

/// Distinct single domains coded per key; a domain past these is coded 0 (not screened by
/// position; the claim's own check still sees it).
const CODED_DOMAINS: usize = 1024;

/// Moves the item at `from` to `to`, shifting those between by one: what `remove(from)` then
/// `insert(to, ..)` leave, moving only the items between.
pub(super) fn shift<T>(items: &mut [T], from: usize, to: usize) {
    if from <= to {
        items[from..=to].rotate_left(1);
    } else {
        items[to..=from].rotate_right(1);
    }
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
    ///
    /// `order` is the order after the move, `c` the claim that moved; its screening data is
    /// set already.
    pub(super) fn follow(
        &mut self,
        order: &[usize],
        c: usize,
        pushed: bool,
        moved: Option<(usize, usize)>,
        occupied: impl Fn(bool, usize) -> bool,
    ) {
        let Some((from, to)) = moved else {
            self.forget();
            return;
        };
        for (inverse, g, bits) in &mut self.occupied {
            if pushed {
                bits.push(false);
            }
            shift(bits, from, to);
            bits[to] = occupied(*inverse, *g);
        }
        if !self.tracking {
            self.tracking = true;
            let claims = order.iter().max().map_or(0, |&m| m + 1);
            self.positions = vec![0; claims];
            for (position, &claim) in order.iter().enumerate() {
                self.positions[claim] = position;
            }
            self.kinds.resize(self.keys, Vec::new());
            self.domains = (0..self.keys)
                .map(|key| order.iter().map(|&claim| self.code(claim, key)).collect())
                .collect();
            return;
        }
        if self.positions.len() <= c {
            self.positions.resize(c + 1, 0);
        }
        for key in 0..self.keys {
            let single = self.code(c, key);
            let column = &mut self.domains[key];
            if pushed {
                column.push(0);
            }
            shift(column, from, to);
            column[to] = single;
        }
        let first = from.min(to);
        for (offset, &claim) in order[first..=from.max(to)].iter().enumerate() {
            self.positions[claim] = first + offset;
        }
    }

    /// Stops following the in-flight order (it is about to be, or was, re-sorted as a whole).
    pub(super) fn forget(&mut self) {
        self.occupied.clear();
        self.tracking = false;
    }

    /// Whether [`Screens::domain_at`] and [`Screens::position`] follow the in-flight order.
    pub(super) fn tracking(&self) -> bool {
        self.tracking
    }

    /// Where claim `c` (already in it) stands in the in-flight `order`.
    pub(super) fn position(&self, c: usize, order: &[usize]) -> usize {
        if self.tracking
            && let Some(&position) = self.positions.get(c)
        {
            debug_assert_eq!(order[position], c);
            return position;
        }
        order.iter().rposition(|&x| x == c).unwrap_or(0)
    }

    /// Claim `c`'s single domain for key `key` as a code into `kinds` (added when new).
    fn code(&mut self, c: usize, key: usize) -> u16 {
        let single = self.single(c, key);
        if single == u32::MAX {
            return 0;
        }
        let kinds = &mut self.kinds[key];
        match kinds.iter().position(|&d| d == single) {
            Some(i) => (i + 1) as u16,
            None if kinds.len() < CODED_DOMAINS => {
                kinds.push(single);
                kinds.len() as u16
            }
            None => 0,
        }
    }

    /// The single domains claims were narrowed to for key `key`: code `i + 1` is the `i`th.
    pub(super) fn kinds(&self, key: usize) -> &[u32] {
        &self.kinds[key]
    }

    /// Whether the claim at `position` of the in-flight order is narrowed, on one of `keys`
    /// (indices into the keys), to a domain `refused` (per key, by code) marks; only while
    /// tracking.
    #[inline]
    pub(super) fn refused(&self, keys: &[usize], refused: &[Vec<bool>], position: usize) -> bool {
        keys.iter()
            .zip(refused)
            .any(|(&key, verdicts)| verdicts[usize::from(self.domains[key][position])])
    }
}
