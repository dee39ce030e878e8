//! One topology group (Karpenter's `topologygroup.go`): the pods a constraint's selector
//! selects, counted per domain of its key, and the domains a pod may take next under it —
//! the least-loaded domain within the skew for a spread, a domain that already has a selected
//! pod for affinity, an empty one for anti-affinity.

use std::collections::BTreeSet;

use super::{NodeFilter, Topology};
use crate::labels::HOSTNAME;
use crate::model::{LabelSelector, Pod, Taint};
use crate::req::{Operator, Requirement, Requirements};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Spread,
    Affinity,
    AntiAffinity,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Spread => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
        }
    }
}

/// Namespaces a group's selector applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Namespaces {
    All,
    Some(BTreeSet<String>),
}

impl Namespaces {
    pub(super) fn has(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Some(set) => set.contains(ns),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub kind: Kind,
    pub key: String,
    pub(super) namespaces: Namespaces,
    pub(super) max_skew: i32,
    pub(super) min_domains: Option<i32>,
    pub(super) selector: Option<LabelSelector>,
    pub(super) filter: NodeFilter,
}

const UNREGISTERED: i32 = i32::MIN;

#[derive(Debug, Clone)]
pub struct Group {
    pub key: GroupKey,
    selector: Option<LabelSelector>,
    /// Count per interned domain id; `UNREGISTERED` when the domain is not known to the group.
    counts: Vec<i32>,
    registered: Vec<u32>,
    empty: usize,
}

impl Group {
    /// A group that knows no domain yet.
    pub(super) fn new(key: GroupKey) -> Group {
        Group {
            selector: key.selector.clone(),
            key,
            counts: Vec::new(),
            registered: Vec::new(),
            empty: 0,
        }
    }

    pub(super) fn count(&self, id: u32) -> Option<i32> {
        match self.counts.get(id as usize) {
            Some(&c) if c != UNREGISTERED => Some(c),
            _ => None,
        }
    }

    pub(super) fn register(&mut self, id: u32) {
        let i = id as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, UNREGISTERED);
        }
        if self.counts[i] == UNREGISTERED {
            self.counts[i] = 0;
            self.registered.push(id);
            self.empty += 1;
        }
    }

    pub(super) fn record(&mut self, id: u32) {
        self.register(id);
        let c = &mut self.counts[id as usize];
        if *c == 0 {
            self.empty -= 1;
        }
        *c += 1;
    }

    pub fn selects(&self, pod: &Pod) -> bool {
        self.key.namespaces.has(&pod.namespace)
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    pub(super) fn counts_pod(&self, pod: &Pod, taints: &[Taint], reqs: &Requirements) -> bool {
        self.selects(pod) && self.key.filter.matches(taints, reqs)
    }
}

/// The next domains a pod may take under one group, by the group's kind.
impl Topology {
    fn sorted_registered(&self, group: &Group) -> Vec<u32> {
        let mut ids = group.registered.clone();
        ids.sort_by(|a, b| self.interner.names[*a as usize].cmp(&self.interner.names[*b as usize]));
        ids
    }

    pub(super) fn next_domains(
        &self,
        is_inverse: bool,
        g: usize,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let group = if is_inverse {
            &self.inverse[g]
        } else {
            &self.groups[g]
        };
        match group.key.kind {
            Kind::Spread => self.next_spread(group, pod, pod_domains, node_domains),
            Kind::Affinity => self.next_affinity(group, pod, pod_domains, node_domains),
            Kind::AntiAffinity => self.next_anti(group, pod_domains, node_domains),
        }
    }

    fn name(&self, id: u32) -> &str {
        &self.interner.names[id as usize]
    }

    fn min_count(&self, group: &Group, pod_domains: &Requirement) -> i64 {
        if group.key.key == HOSTNAME {
            return 0;
        }
        let mut min = i64::from(i32::MAX);
        let mut supported = 0;
        for &id in &group.registered {
            if pod_domains.has(self.name(id)) {
                supported += 1;
                min = min.min(i64::from(group.counts[id as usize]));
            }
        }
        if group.key.min_domains.is_some_and(|m| supported < m) {
            min = 0;
        }
        min
    }

    /// Pods of `group` counted in a domain; `None` for a domain the group has never seen.
    fn domain_count(&self, group: &Group, domain: &str) -> Option<i32> {
        self.interner.get(domain).and_then(|id| group.count(id))
    }

    fn next_spread(
        &self,
        group: &Group,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let own = i64::from(group.selects(pod));
        let skew = i64::from(group.key.max_skew);
        if group.key.key == HOSTNAME
            && let Some(host) = node_domains.single_value()
        {
            let count = self.domain_count(group, host).unwrap_or(0);
            return if i64::from(count) + own <= skew {
                Requirement::single(host)
            } else {
                Requirement::does_not_exist()
            };
        }
        let min = self.min_count(group, pod_domains);
        let mut best: Option<(i64, u32)> = None;
        let mut consider = |id: u32, count: i32| {
            let count = i64::from(count) + own;
            if count - min <= skew && best.is_none_or(|(c, _)| count < c) {
                best = Some((count, id));
            }
        };
        if node_domains.operator() == Operator::In {
            for d in node_domains.values() {
                if let Some(id) = self.interner.get(d)
                    && let Some(c) = group.count(id)
                {
                    consider(id, c);
                }
            }
        } else {
            for id in self.sorted_registered(group) {
                if node_domains.has(self.name(id)) {
                    consider(id, group.counts[id as usize]);
                }
            }
        }
        match best {
            Some((_, id)) => Requirement::single(self.name(id)),
            None => Requirement::does_not_exist(),
        }
    }

    fn any_compatible_pod_domain(&self, group: &Group, pod_domains: &Requirement) -> bool {
        group
            .registered
            .iter()
            .any(|&id| group.counts[id as usize] > 0 && pod_domains.has(self.name(id)))
    }

    fn next_affinity(
        &self,
        group: &Group,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let bootstrap = |this: &Self| {
            group.selects(pod)
                && (group.registered.len() == group.empty
                    || !this.any_compatible_pod_domain(group, pod_domains))
        };
        if group.key.key == HOSTNAME
            && let Some(host) = node_domains.single_value()
        {
            if !pod_domains.has(host) {
                return Requirement::does_not_exist();
            }
            let count = self.domain_count(group, host).unwrap_or(0);
            if count > 0 || bootstrap(self) {
                return Requirement::single(host);
            }
            return Requirement::does_not_exist();
        }
        let mut options: BTreeSet<String> = BTreeSet::new();
        if node_domains.operator() == Operator::In {
            for d in node_domains.values() {
                if pod_domains.has(d) && self.domain_count(group, d).is_some_and(|c| c > 0) {
                    options.insert(d.to_owned());
                }
            }
        } else {
            for &id in &group.registered {
                let d = self.name(id);
                if group.counts[id as usize] > 0 && pod_domains.has(d) && node_domains.has(d) {
                    options.insert(d.to_owned());
                }
            }
        }
        if !options.is_empty() {
            return Requirement::in_values(options);
        }
        if bootstrap(self) {
            let sorted = self.sorted_registered(group);
            let both = pod_domains.intersection(node_domains);
            if let Some(&id) = sorted.iter().find(|&&id| both.has(self.name(id))) {
                options.insert(self.name(id).to_owned());
            }
            if let Some(&id) = sorted.iter().find(|&&id| pod_domains.has(self.name(id))) {
                options.insert(self.name(id).to_owned());
            }
        }
        Requirement::in_values(options)
    }

    fn next_anti(
        &self,
        group: &Group,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        if group.key.key == HOSTNAME
            && let Some(host) = node_domains.single_value()
        {
            let count = self.domain_count(group, host).unwrap_or(0);
            return if count == 0 {
                Requirement::single(host)
            } else {
                Requirement::does_not_exist()
            };
        }
        let mut options = BTreeSet::new();
        if node_domains.operator() == Operator::In
            && node_domains.len().is_some_and(|n| n < group.empty)
        {
            for d in node_domains.values() {
                if pod_domains.has(d) && self.domain_count(group, d).is_some_and(|c| c == 0) {
                    options.insert(d.to_owned());
                }
            }
        } else {
            for &id in &group.registered {
                let d = self.name(id);
                if group.counts[id as usize] == 0 && node_domains.has(d) && pod_domains.has(d) {
                    options.insert(d.to_owned());
                }
            }
        }
        Requirement::in_values(options)
    }
}
