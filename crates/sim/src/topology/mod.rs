//! Topology spread, pod affinity and pod anti-affinity, as Karpenter's scheduler tracks them,
//! in the same four parts: this file is `topology.go` (the groups of every pod, and the
//! domains topology allows a pod onto), [`group`] is `topologygroup.go` (one group's counts and
//! its next domains), [`domains`] is `topologydomaingroup.go` (the domains NodePools offer,
//! with their taints), and [`node_filter`] is `topologynodefilter.go` (which nodes a spread
//! counts).
//!
//! One group counts, per domain of a topology key, the pods its selector selects. Pods that
//! share a constraint share a group (keyed by type, key, namespaces, skew, node filter and
//! selector). Anti-affinity is tracked both ways: the pod with the term owns a group, and an
//! "inverse" group remembers where the pods with the term are, so the pods they repel avoid them.
//!
//! Domains are interned to ids and counted in dense vectors: the hostname key grows one domain
//! per NodeClaim, and the hot check ("is this claim's hostname free for this anti-affinity?") is
//! an array read. Where upstream iterates a Go map (random order), domains are visited in
//! lexical order, so ties go to the lexically first domain. The parts share those dense
//! indices, visible to the submodules only.

mod domains;
mod group;
mod node_filter;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use domains::DomainUniverse;
use domains::Interner;
pub use group::{Group, GroupKey, Kind, Namespaces};
pub use node_filter::NodeFilter;

use crate::labels::HOSTNAME;
use crate::model::{Node, Pod, PodAffinityTerm, Policy, Taint, untolerated};
use crate::req::{Operator, Requirement, Requirements};

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

/// The existing nodes (with their labels as requirements) and the pods bound to them: shared,
/// unchanged, by every simulation of one cluster.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<(Node, Requirements)>,
    bound: Vec<BoundPod>,
    /// The bound pods with required anti-affinity (by index into `bound`), which every
    /// simulation starts from: found once, not once per simulation.
    anti: Vec<usize>,
    /// Every node's hostname (its hostname label, else its name) interned, which each
    /// simulation's interner starts as a copy of: a probe used to hash and allocate a
    /// thousand hostnames.
    hosts: Interner,
    /// Each node's id in `hosts`.
    host_ids: Vec<u32>,
}

impl Cluster {
    pub fn new(nodes: &[Node], bound: Vec<BoundPod>) -> Cluster {
        let nodes: Vec<_> = nodes
            .iter()
            .map(|n| (n.clone(), Requirements::from_labels(&n.labels)))
            .collect();
        let hosts = Hosts(Interner::with_capacity(2 * nodes.len() + 64));
        Cluster::from_parts(nodes, bound, hosts)
    }

    /// A cluster from nodes whose labels are already read as requirements, interning their
    /// hostnames into `hosts` (a changed cluster's: most are there already).
    pub fn from_parts(
        nodes: Vec<(Node, Requirements)>,
        bound: Vec<BoundPod>,
        hosts: Hosts,
    ) -> Cluster {
        let anti = (0..bound.len())
            .filter(|&i| !bound[i].pod.anti_affinity.is_empty())
            .collect();
        let Hosts(mut hosts) = hosts;
        let host_ids = nodes
            .iter()
            .map(|(n, _)| hosts.id(n.labels.get(HOSTNAME).unwrap_or(&n.name)))
            .collect();
        Cluster {
            nodes,
            bound,
            anti,
            hosts,
            host_ids,
        }
    }

    /// The nodes (with their labels as requirements), the bound pods and the interned
    /// hostnames, to change and put back together with [`Cluster::from_parts`].
    pub fn into_parts(self) -> (Vec<(Node, Requirements)>, Vec<BoundPod>, Hosts) {
        (self.nodes, self.bound, Hosts(self.hosts))
    }

    pub fn bound(&self) -> &[BoundPod] {
        &self.bound
    }
}

/// A cluster's interned hostnames, handed on to the cluster a change makes of it: a gone
/// node's name stays (an id no group registers unless the name comes back), so that a
/// change interns only the names it brings instead of a thousand afresh.
#[derive(Debug)]
pub struct Hosts(Interner);

pub struct Topology {
    interner: Interner,
    universe: Arc<BTreeMap<String, DomainUniverse>>,
    cluster: Arc<Cluster>,
    /// Per node of the cluster: removed for this simulation (its bound pods with it).
    gone: Vec<bool>,
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
    /// `gone` marks nodes of `cluster` left out (missing entries: kept).
    pub fn new(
        universe: Arc<BTreeMap<String, DomainUniverse>>,
        cluster: Arc<Cluster>,
        gone: Vec<bool>,
        pod_count: usize,
        respect_preferences: bool,
    ) -> Topology {
        let mut interner = cluster.hosts.clone();
        interner.reserve(cluster.nodes.len() + 64);
        let mut t = Topology {
            // Every existing node's hostname (interned once per cluster), and the domains the
            // groups bring.
            interner,
            universe,
            cluster: cluster.clone(),
            gone,
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
        for bp in cluster.anti.iter().map(|&i| &cluster.bound[i]) {
            if t.is_gone(bp.node) {
                continue;
            }
            let node_labels = &cluster.nodes[bp.node].0.labels;
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

    fn is_gone(&self, node: usize) -> bool {
        self.gone.get(node).copied().unwrap_or(false)
    }

    /// The interned hostname of the cluster's node at `node` (an index into its nodes).
    pub fn existing_host(&self, node: usize) -> u32 {
        self.cluster.host_ids[node]
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
        let mut g = Group::new(key);
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
        let cluster = self.cluster.clone();
        for (ni, (node, reqs)) in cluster.nodes.iter().enumerate() {
            if self.is_gone(ni) || !g.key.filter.matches(&node.taints, reqs) {
                continue;
            }
            if let Some(domain) = node.labels.get(&g.key.key) {
                let id = self.interner.id(domain);
                g.register(id);
            }
        }
        for bp in &cluster.bound {
            if self.is_gone(bp.node) || !g.selects(&bp.pod) {
                continue;
            }
            let (node, reqs) = &cluster.nodes[bp.node];
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

    /// Pods group `g` (`inverse`: of the inverse anti-affinity groups) counts on host `host`.
    pub fn host_count(&self, inverse: bool, g: usize, host: u32) -> i32 {
        let group = if inverse {
            &self.inverse[g]
        } else {
            &self.groups[g]
        };
        group.count(host).unwrap_or(0)
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

    /// The name of an interned domain.
    pub fn domain_name(&self, id: u32) -> &str {
        &self.interner.names[id as usize]
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
