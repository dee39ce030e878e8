//! A fixed-size set of small indices (a NodePool's instance types), one bit each.

/// The set of a NodePool's instance types (by their index in the pool) still open to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    /// The empty set for `n` indices.
    pub(super) fn empty(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }

    /// Every index below `n`.
    pub(super) fn full(n: usize) -> Bits {
        let mut b = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64)
            && let Some(last) = b.last_mut()
        {
            *last = (1u64 << (n % 64)) - 1;
        }
        Bits(b)
    }

    /// An empty set of the same size as `self`.
    pub(super) fn cleared(&self) -> Bits {
        Bits(vec![0; self.0.len()])
    }

    /// Keeps only the indices also in `other`.
    pub(super) fn and(&mut self, other: &Bits) {
        for (x, y) in self.0.iter_mut().zip(&other.0) {
            *x &= *y;
        }
    }

    pub(super) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub(super) fn has(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// The indices in the set, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                if word == 0 {
                    return None;
                }
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                Some(w * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Bits;

    #[test]
    fn full_sets_exactly_the_first_n() {
        for n in [0, 1, 63, 64, 65, 130] {
            let b = Bits::full(n);
            assert_eq!(b.iter().collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
            assert_eq!(b.is_empty(), n == 0);
        }
    }

    #[test]
    fn and_set_has_and_cleared() {
        let mut a = Bits::empty(130);
        assert!(a.is_empty());
        a.set(3);
        a.set(64);
        a.set(129);
        let mut b = a.cleared();
        assert!(b.is_empty());
        b.set(64);
        b.set(100);
        a.and(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![64]);
        assert!(a.has(64) && !a.has(3) && !a.has(129));
    }
}
