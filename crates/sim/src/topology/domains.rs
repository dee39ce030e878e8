//! The domains of topology keys: the ones NodePools offer, with the taints of the pools that
//! offer them (Karpenter's `topologydomaingroup.go`), and the dense ids every domain name is
//! interned to, so that groups count pods in vectors rather than maps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::Taint;

/// Domains of one topology key across NodePools, with the taints of the pools offering them.
#[derive(Debug, Clone, Default)]
pub struct DomainUniverse {
    /// domain → taint sets of the pools that offer it (one empty set: untainted).
    pub domains: BTreeMap<String, Vec<Vec<Taint>>>,
}

impl DomainUniverse {
    /// `TopologyDomainGroup.Insert`.
    pub fn insert(&mut self, domain: &str, taints: &[Taint]) {
        match self.domains.get_mut(domain) {
            None => {
                self.domains
                    .insert(domain.to_owned(), vec![taints.to_vec()]);
            }
            Some(sets) => {
                if taints.is_empty() {
                    *sets = vec![Vec::new()];
                } else if !sets[0].is_empty() {
                    sets.push(taints.to_vec());
                }
            }
        }
    }
}

/// Interned domain names.
#[derive(Debug, Default, Clone)]
pub(super) struct Interner {
    /// Shared with `ids`: one allocation per name (a probe interns a thousand hostnames).
    pub(super) names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    /// Room for `n` names before growing.
    pub(super) fn with_capacity(n: usize) -> Interner {
        Interner {
            names: Vec::with_capacity(n),
            ids: HashMap::with_capacity(n),
        }
    }

    pub(super) fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        let shared: Arc<str> = Arc::from(name);
        self.names.push(shared.clone());
        self.ids.insert(shared, id);
        id
    }

    /// Room for `n` more names in the list (the map keeps the capacity it was made with
    /// when cloned).
    pub(super) fn reserve(&mut self, n: usize) {
        self.names.reserve(n);
    }

    pub(super) fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}
