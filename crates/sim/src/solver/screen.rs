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
