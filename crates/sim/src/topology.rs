//! Topology spread, pod affinity and pod anti-affinity, as Karpenter's `topology.go`,
//! `topologygroup.go`, `topologydomaingroup.go` and `topologynodefilter.go` track them.
//!
//! One group counts, per domain of a topology key, the pods its selector selects. Pods that
//! share a constraint share a group (keyed by type, key, namespaces, skew, node filter and
//! selector). Anti-affinity is tracked both ways: the pod with the term owns a group, and an
//! "inverse" group remembers where the pods with the term are, so the pods they repel avoid them.
//!
//! Domains are interned to ids and counted in dense vectors: the hostname key grows one domain
//! per NodeClaim, and the hot check ("is this claim's hostname free for this anti-affinity?") is
//! an array read. Where upstream iterates a Go map (random order), domains are visited in
//! lexical order, so ties go to the lexically first domain.
//!
//! Over 700 lines on purpose: groups, domain interning and the checks share private dense
//! indices and one invariant (counts match recorded pods); split, they would have to expose both.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::labels::HOSTNAME;
use crate::model::{
    LabelSelector, Node, Pod, PodAffinityTerm, Policy, SpreadConstraint, Taint, Toleration,
    term_requirements, untolerated,
};
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
    fn has(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Some(set) => set.contains(ns),
        }
    }
}

/// Which nodes count for a spread constraint (`TopologyNodeFilter`). The default value (no
/// policies) matches every node, as upstream's zero value does for (anti-)affinity.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeFilter {
    requirements: Vec<Requirements>,
    taint_policy: Option<Policy>,
    affinity_policy: Option<Policy>,
    tolerations: Vec<Toleration>,
}

impl NodeFilter {
    fn for_spread(pod: &Pod, s: &SpreadConstraint) -> NodeFilter {
        let selector = Requirements::from_labels(&pod.node_selector);
        let requirements = match &pod.required_terms {
            None => vec![selector],
            Some(terms) => terms
                .iter()
                .map(|t| {
                    let mut r = selector.clone();
                    r.add_all(&term_requirements(t));
                    r
                })
                .collect(),
        };
        NodeFilter {
            requirements,
            taint_policy: Some(s.node_taints_policy),
            affinity_policy: Some(s.node_affinity_policy),
            tolerations: pod.tolerations.clone(),
        }
    }

    pub fn matches(&self, taints: &[Taint], reqs: &Requirements) -> bool {
        let affinity = self.affinity_policy != Some(Policy::Honor)
            || self.requirements.is_empty()
            || self
                .requirements
                .iter()
                .any(|r| reqs.compatible(r, false).is_ok());
        let taints_ok = self.taint_policy != Some(Policy::Honor)
            || untolerated(taints, &self.tolerations).is_none();
        affinity && taints_ok
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub kind: Kind,
    pub key: String,
    namespaces: Namespaces,
    max_skew: i32,
    min_domains: Option<i32>,
    selector: Option<LabelSelector>,
    filter: NodeFilter,
}

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
    fn count(&self, id: u32) -> Option<i32> {
        match self.counts.get(id as usize) {
            Some(&c) if c != UNREGISTERED => Some(c),
            _ => None,
        }
    }

    fn register(&mut self, id: u32) {
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

    fn record(&mut self, id: u32) {
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

    fn counts_pod(&self, pod: &Pod, taints: &[Taint], reqs: &Requirements) -> bool {
        self.selects(pod) && self.key.filter.matches(taints, reqs)
    }
}

/// Interned domain names.
#[derive(Debug, Default)]
struct Interner {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

/// A topology requirement that cannot be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    pub kind: Kind,
    pub key: String,
    pub pod_domains: Requirement,
    pub node_domains: Requirement,
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unsatisfiable {} constraint on {} (pod domains {}, node domains {})",
            self.kind.as_str(),
            self.key,
            self.pod_domains,
            self.node_domains
        )
    }
}

/// A pod bound to an existing node before the simulation starts.
#[derive(Debug, Clone)]
pub struct BoundPod {
    pub pod: Pod,
    pub node: usize,
}

pub struct Topology {
    interner: Interner,
    universe: BTreeMap<String, DomainUniverse>,
    nodes: Vec<(Node, Requirements)>,
    bound: Vec<BoundPod>,
    pub groups: Vec<Group>,
    ids: HashMap<GroupKey, usize>,
    inverse: Vec<Group>,
    inverse_ids: HashMap<GroupKey, usize>,
    owned: Vec<Vec<usize>>,
    inverse_owned: Vec<Vec<usize>>,
    respect_preferences: bool,
    /// Per pod: (group count when computed, groups that select it).
    selecting: Vec<(usize, Vec<usize>)>,
    inverse_selecting: Vec<(usize, Vec<usize>)>,
}

fn namespaces(pod: &Pod, term: &PodAffinityTerm) -> Namespaces {
    if term.namespaces.iter().any(|n| n == "*") {
        return Namespaces::All;
    }
    if term.namespaces.is_empty() {
        return Namespaces::Some([pod.namespace.clone()].into());
    }
    Namespaces::Some(term.namespaces.iter().cloned().collect())
}

impl Topology {
    pub fn new(
        universe: BTreeMap<String, DomainUniverse>,
        nodes: &[Node],
        bound: Vec<BoundPod>,
        pod_count: usize,
        respect_preferences: bool,
    ) -> Topology {
        let nodes = nodes
            .iter()
            .map(|n| (n.clone(), Requirements::from_labels(&n.labels)))
            .collect();
        let mut t = Topology {
            interner: Interner::default(),
            universe,
            nodes,
            bound,
            groups: Vec::new(),
            ids: HashMap::new(),
            inverse: Vec::new(),
            inverse_ids: HashMap::new(),
            owned: vec![Vec::new(); pod_count],
            inverse_owned: vec![Vec::new(); pod_count],
            respect_preferences,
            selecting: vec![(usize::MAX, Vec::new()); pod_count],
            inverse_selecting: vec![(usize::MAX, Vec::new()); pod_count],
        };
        // Existing pods with required anti-affinity repel the pods they select.
        for i in 0..t.bound.len() {
            if t.bound[i].pod.anti_affinity.is_empty() {
                continue;
            }
            let bp = t.bound[i].clone();
            let node_labels = t.nodes[bp.node].0.labels.clone();
            for term in &bp.pod.anti_affinity {
                let g = t.inverse_group(&bp.pod, term);
                if let Some(domain) = node_labels.get(&term.topology_key) {
                    let id = t.interner.id(domain);
                    t.inverse[g].record(id);
                }
            }
        }
        t
    }

    /// Interns a domain name (e.g. a new NodeClaim's hostname).
    pub fn domain_id(&mut self, name: &str) -> u32 {
        self.interner.id(name)
    }

    /// A group as `NewTopologyGroup` builds it; with `count_domains`, also as `countDomains`
    /// fills it. Inverse anti-affinity groups skip that step (`updateInverseAntiAffinity`
    /// records only the owner's own domain), so their domains are the NodePools' domains the
    /// owner tolerates plus the owners' domains: a domain only an existing node has, or only
    /// a pool whose taints the owner does not tolerate, is never free for the pods it repels.
    fn new_group(&mut self, key: GroupKey, creator: &Pod, count_domains: bool) -> Group {
        let mut g = Group {
            selector: key.selector.clone(),
            key,
            counts: Vec::new(),
            registered: Vec::new(),
            empty: 0,
        };
        // Domains from the NodePools' instance types, filtered by the creator's tolerations
        // unless the taint policy is Ignore (upstream's zero-value filter is not Ignore).
        let ignore_taints = g.key.filter.taint_policy == Some(Policy::Ignore);
        let domains: Vec<String> = self
            .universe
            .get(&g.key.key)
            .map(|u| {
                u.domains
                    .iter()
                    .filter(|(_, sets)| {
                        ignore_taints
                            || sets
                                .iter()
                                .any(|taints| untolerated(taints, &creator.tolerations).is_none())
                    })
                    .map(|(d, _)| d.clone())
                    .collect()
            })
            .unwrap_or_default();
        for d in domains {
            let id = self.interner.id(&d);
            g.register(id);
        }
        if !count_domains {
            return g;
        }
        // countDomains: existing nodes' domains, then existing pods the group selects.
        for (node, reqs) in &self.nodes {
            if !g.key.filter.matches(&node.taints, reqs) {
                continue;
            }
            if let Some(domain) = node.labels.get(&g.key.key) {
                let id = self.interner.id(domain);
                g.register(id);
            }
        }
        for bp in &self.bound {
            if !g.selects(&bp.pod) {
                continue;
            }
            let (node, reqs) = &self.nodes[bp.node];
            let domain = match node.labels.get(&g.key.key) {
                Some(d) => d.clone(),
                None if g.key.key == HOSTNAME => node.name.clone(),
                None => continue,
            };
            if !g.key.filter.matches(&node.taints, reqs) {
                continue;
            }
            let id = self.interner.id(&domain);
            g.record(id);
        }
        g
    }

    fn group(&mut self, key: GroupKey, creator: &Pod) -> usize {
        if let Some(&i) = self.ids.get(&key) {
            return i;
        }
        let g = self.new_group(key.clone(), creator, true);
        self.groups.push(g);
        self.ids.insert(key, self.groups.len() - 1);
        self.groups.len() - 1
    }

    fn inverse_group(&mut self, pod: &Pod, term: &PodAffinityTerm) -> usize {
        let key = GroupKey {
            kind: Kind::AntiAffinity,
            key: term.topology_key.clone(),
            namespaces: namespaces(pod, term),
            max_skew: i32::MAX,
            min_domains: None,
            selector: term.selector.clone(),
            filter: NodeFilter::default(),
        };
        if let Some(&i) = self.inverse_ids.get(&key) {
            return i;
        }
        let g = self.new_group(key.clone(), pod, false);
        self.inverse.push(g);
        self.inverse_ids.insert(key, self.inverse.len() - 1);
        self.inverse.len() - 1
    }

    /// Makes `pod` (in its current, possibly relaxed form) the owner of exactly the groups its
    /// constraints describe (`Topology.Update`).
    pub fn update(&mut self, id: usize, pod: &Pod) {
        self.owned[id].clear();
        let has_anti = !pod.anti_affinity.is_empty()
            || (self.respect_preferences && !pod.preferred_anti_affinity.is_empty());
        if has_anti {
            for term in &pod.anti_affinity {
                let g = self.inverse_group(pod, term);
                if !self.inverse_owned[id].contains(&g) {
                    self.inverse_owned[id].push(g);
                }
            }
        }
        let mut keys = Vec::new();
        for s in &pod.spread {
            if !self.respect_preferences && !s.required {
                continue;
            }
            let mut selector = s.selector.clone();
            if let Some(sel) = selector.as_mut() {
                for k in &s.match_label_keys {
                    if let Some(v) = pod.labels.get(k) {
                        sel.match_expressions
                            .push((k.clone(), Operator::In, vec![v.clone()]));
                    }
                }
                sel.match_expressions.sort();
                sel.match_expressions.dedup();
            }
            keys.push(GroupKey {
                kind: Kind::Spread,
                key: s.topology_key.clone(),
                namespaces: Namespaces::Some([pod.namespace.clone()].into()),
                max_skew: s.max_skew,
                min_domains: s.min_domains,
                selector,
                filter: NodeFilter::for_spread(pod, s),
            });
        }
        for (kind, required, preferred) in [
            (Kind::Affinity, &pod.affinity, &pod.preferred_affinity),
            (
                Kind::AntiAffinity,
                &pod.anti_affinity,
                &pod.preferred_anti_affinity,
            ),
        ] {
            let preferred = preferred
                .iter()
                .filter(|_| self.respect_preferences)
                .map(|(_, t)| t);
            for term in required.iter().chain(preferred) {
                keys.push(self.term_key(kind, pod, term));
            }
        }
        for key in keys {
            let g = self.group(key, pod);
            if !self.owned[id].contains(&g) {
                self.owned[id].push(g);
            }
        }
    }

    fn term_key(&self, kind: Kind, pod: &Pod, term: &PodAffinityTerm) -> GroupKey {
        GroupKey {
            kind,
            key: term.topology_key.clone(),
            namespaces: namespaces(pod, term),
            max_skew: i32::MAX,
            min_domains: None,
            selector: term.selector.clone(),
            filter: NodeFilter::default(),
        }
    }

    fn selecting(&mut self, id: usize, pod: &Pod) -> &[usize] {
        if self.selecting[id].0 != self.groups.len() {
            let list = (0..self.groups.len())
                .filter(|&g| self.groups[g].selects(pod))
                .collect();
            self.selecting[id] = (self.groups.len(), list);
        }
        &self.selecting[id].1
    }

    fn ensure_inverse_selecting(&mut self, id: usize, pod: &Pod) {
        if self.inverse_selecting[id].0 != self.inverse.len() {
            let list = (0..self.inverse.len())
                .filter(|&g| self.inverse[g].selects(pod))
                .collect();
            self.inverse_selecting[id] = (self.inverse.len(), list);
        }
    }

    /// A cheap necessary condition for placing `pod` on the node with hostname id `host`:
    /// hostname anti-affinity and hostname spreads the pod owns, and hostname anti-affinities
    /// that repel it, must leave that host free. Exact for those groups (upstream special-cases
    /// a single hostname domain the same way), so a `false` here is final.
    pub fn hostname_allows(&mut self, id: usize, pod: &Pod, host: u32) -> bool {
        for &g in &self.owned[id] {
            let group = &self.groups[g];
            if group.key.key != HOSTNAME {
                continue;
            }
            let count = group.count(host).unwrap_or(0);
            match group.key.kind {
                Kind::AntiAffinity if count > 0 => return false,
                Kind::Spread => {
                    let own = i32::from(group.selects(pod));
                    if i64::from(count) + i64::from(own) > i64::from(group.key.max_skew) {
                        return false;
                    }
                }
                _ => {}
            }
        }
        self.ensure_inverse_selecting(id, pod);
        for &g in &self.inverse_selecting[id].1 {
            let group = &self.inverse[g];
            if group.key.key == HOSTNAME && group.count(host).unwrap_or(0) > 0 {
                return false;
            }
        }
        true
    }

    /// The hostname checks of [`Topology::hostname_allows`], prepared once per pod so each
    /// candidate host costs a few array reads: (inverse?, group, highest allowed count).
    pub fn host_plan(&mut self, id: usize, pod: &Pod) -> Vec<(bool, usize, i64)> {
        let mut plan = Vec::new();
        for &g in &self.owned[id] {
            let group = &self.groups[g];
            if group.key.key != HOSTNAME {
                continue;
            }
            match group.key.kind {
                Kind::AntiAffinity => plan.push((false, g, 0)),
                Kind::Spread => plan.push((
                    false,
                    g,
                    i64::from(group.key.max_skew) - i64::from(group.selects(pod)),
                )),
                Kind::Affinity => {}
            }
        }
        self.ensure_inverse_selecting(id, pod);
        for &g in &self.inverse_selecting[id].1 {
            if self.inverse[g].key.key == HOSTNAME {
                plan.push((true, g, 0));
            }
        }
        plan
    }

    pub fn host_ok(&self, plan: &[(bool, usize, i64)], host: u32) -> bool {
        plan.iter().all(|&(inverse, g, limit)| {
            let group = if inverse {
                &self.inverse[g]
            } else {
                &self.groups[g]
            };
            i64::from(group.count(host).unwrap_or(0)) <= limit
        })
    }

    /// Keys other than the hostname that the pod's topology constrains.
    pub fn keys_for(&mut self, id: usize, pod: &Pod) -> Vec<String> {
        self.ensure_inverse_selecting(id, pod);
        let mut keys: Vec<String> = self.owned[id]
            .iter()
            .map(|&g| &self.groups[g].key.key)
            .chain(
                self.inverse_selecting[id]
                    .1
                    .iter()
                    .map(|&g| &self.inverse[g].key.key),
            )
            .filter(|k| *k != HOSTNAME)
            .cloned()
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Whether topology lets `pod` onto a node whose `key` is exactly `domain` (the groups on
    /// `key` only). Exact for such nodes, so a candidate with that single domain can be
    /// skipped on `false` without the full check.
    pub fn key_allows(
        &mut self,
        id: usize,
        pod: &Pod,
        pod_reqs: &Requirements,
        key: &str,
        domain: &str,
    ) -> bool {
        self.ensure_inverse_selecting(id, pod);
        let node = Requirement::single(domain);
        let pod_domains = pod_reqs.get_or_exists(key);
        let owned = self.owned[id].iter().map(|&g| (false, g));
        let inverse = self.inverse_selecting[id].1.iter().map(|&g| (true, g));
        for (is_inverse, g) in owned.chain(inverse) {
            let group = if is_inverse {
                &self.inverse[g]
            } else {
                &self.groups[g]
            };
            if group.key.key != key {
                continue;
            }
            let d = self.next_domains(is_inverse, g, pod, pod_domains, &node);
            if !d.has(domain) {
                return false;
            }
        }
        true
    }

    /// The domains topology allows for `pod`, per key (several groups on one key intersect),
    /// given the node-side requirement of each key from `node_key`. The same choices as
    /// [`Topology::add_requirements`], without building the combined requirements: callers
    /// check these against the node first and clone only on success.
    pub fn domains_for<'r>(
        &mut self,
        id: usize,
        pod: &Pod,
        pod_reqs: &Requirements,
        node_key: impl Fn(&str) -> Cow<'r, Requirement>,
        detail: bool,
    ) -> Result<Vec<(String, Requirement)>, Box<TopologyError>> {
        let mut out: Vec<(String, Requirement)> = Vec::new();
        self.ensure_inverse_selecting(id, pod);
        let owned = self.owned[id].iter().map(|&g| (false, g));
        let inverse = self.inverse_selecting[id].1.iter().map(|&g| (true, g));
        for (is_inverse, g) in owned.chain(inverse) {
            let group = if is_inverse {
                &self.inverse[g]
            } else {
                &self.groups[g]
            };
            let key = &group.key.key;
            let pod_domains = pod_reqs.get_or_exists(key);
            let node_domains = node_key(key);
            let domains = self.next_domains(is_inverse, g, pod, pod_domains, &node_domains);
            if domains.is_empty() {
                return Err(Box::new(TopologyError {
                    kind: group.key.kind,
                    key: key.clone(),
                    pod_domains: if detail {
                        pod_domains.clone()
                    } else {
                        Requirement::exists()
                    },
                    node_domains: if detail {
                        node_domains.into_owned()
                    } else {
                        Requirement::exists()
                    },
                }));
            }
            match out.iter_mut().find(|(k, _)| k == key) {
                Some((_, d)) => *d = d.intersection(&domains),
                None => out.push((key.clone(), domains)),
            }
        }
        Ok(out)
    }

    fn sorted_registered(&self, group: &Group) -> Vec<u32> {
        let mut ids = group.registered.clone();
        ids.sort_by(|a, b| self.interner.names[*a as usize].cmp(&self.interner.names[*b as usize]));
        ids
    }

    fn next_domains(
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

    /// The name of an interned domain.
    pub fn domain_name(&self, id: u32) -> &str {
        &self.interner.names[id as usize]
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

    /// Registers a new hostname (a new NodeClaim) with every hostname group.
    pub fn register_host(&mut self, host: u32) {
        for g in self.groups.iter_mut().chain(self.inverse.iter_mut()) {
            if g.key.key == HOSTNAME {
                g.register(host);
            }
        }
    }

    /// Records that `pod` now runs on a node with `reqs` and `taints` (`Topology.Record`).
    pub fn record(&mut self, id: usize, pod: &Pod, taints: &[Taint], reqs: &Requirements) {
        let selecting: Vec<usize> = self.selecting(id, pod).to_vec();
        for g in selecting {
            if !self.groups[g].key.filter.matches(taints, reqs) {
                continue;
            }
            let key = self.groups[g].key.key.clone();
            let Some(domains) = reqs.get_ref(&key) else {
                continue;
            };
            let values: Vec<String> = if self.groups[g].key.kind == Kind::AntiAffinity {
                domains.values().map(str::to_owned).collect()
            } else {
                domains
                    .single_value()
                    .map(str::to_owned)
                    .into_iter()
                    .collect()
            };
            for v in values {
                let id = self.interner.id(&v);
                self.groups[g].record(id);
            }
        }
        for g in self.inverse_owned[id].clone() {
            let key = self.inverse[g].key.key.clone();
            if let Some(domains) = reqs.get_ref(&key) {
                let values: Vec<String> = domains.values().map(str::to_owned).collect();
                for v in values {
                    let did = self.interner.id(&v);
                    self.inverse[g].record(did);
                }
            }
        }
    }

    /// The groups a pod owns (for explanations).
    pub fn owned(&self, id: usize) -> impl Iterator<Item = &GroupKey> {
        self.owned[id].iter().map(|&g| &self.groups[g].key)
    }

    /// Whether `pod` would count for the group at `g` (tests).
    pub fn counts(&self, g: usize, pod: &Pod, taints: &[Taint], reqs: &Requirements) -> bool {
        self.groups[g].counts_pod(pod, taints, reqs)
    }
}
