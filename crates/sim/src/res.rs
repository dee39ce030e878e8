//! Dense resource vectors: one slot per resource name seen in the input, so fit checks are a
//! few integer comparisons.

use std::collections::BTreeMap;

use kk_catalog::Resources;
use kk_catalog::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};

/// The resources every index has, in their slots.
pub const BASE_NAMES: [&str; 4] = [CPU, MEMORY, EPHEMERAL_STORAGE, PODS];

/// Resource names and their slots: cpu, memory, ephemeral-storage, pods, then the rest sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResIndex {
    names: Vec<String>,
}

pub type Res = Vec<i64>;

impl ResIndex {
    pub fn new<'a, I: IntoIterator<Item = &'a str>>(extra: I) -> ResIndex {
        let mut names: Vec<String> = [CPU, MEMORY, EPHEMERAL_STORAGE, PODS]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let mut rest: Vec<String> = extra
            .into_iter()
            .filter(|n| ![CPU, MEMORY, EPHEMERAL_STORAGE, PODS].contains(n))
            .map(str::to_owned)
            .collect();
        rest.sort();
        rest.dedup();
        names.extend(rest);
        ResIndex { names }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn slot(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    pub fn zero(&self) -> Res {
        vec![0; self.names.len()]
    }

    pub fn from_catalog(&self, r: &Resources) -> Res {
        self.names.iter().map(|n| r.get(n)).collect()
    }

    pub fn from_map(&self, m: &BTreeMap<String, i64>) -> Res {
        // By the map's entries (a pod's are a few; names unknown here are left out): looking
        // every slot's name up in the map was most of the cost of reading a probe's pods.
        let mut r = self.zero();
        for (name, value) in m {
            if let Some(slot) = self.slot(name) {
                r[slot] = *value;
            }
        }
        r
    }

    /// Non-zero entries by name.
    pub fn to_map(&self, r: &[i64]) -> BTreeMap<String, i64> {
        self.names
            .iter()
            .zip(r)
            .filter(|(_, v)| **v != 0)
            .map(|(n, v)| (n.clone(), *v))
            .collect()
    }
}

pub fn add(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

pub fn sub(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_sub(*y);
    }
}

pub fn plus(a: &[i64], b: &[i64]) -> Res {
    a.iter().zip(b).map(|(x, y)| x.saturating_add(*y)).collect()
}

/// Every request at most the available amount.
pub fn fits(req: &[i64], avail: &[i64]) -> bool {
    req.iter().zip(avail).all(|(r, a)| r <= a)
}

pub fn max_into(acc: &mut [i64], v: &[i64]) {
    for (x, y) in acc.iter_mut().zip(v) {
        *x = (*x).max(*y);
    }
}

pub fn min_into(acc: &mut [i64], v: &[i64]) {
    for (x, y) in acc.iter_mut().zip(v) {
        *x = (*x).min(*y);
    }
}
