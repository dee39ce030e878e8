//! Preparation (`NewScheduler`): the resource index, each NodePool's template and the instance
//! types it may launch (with the DaemonSet overhead each would carry), the topology domains
//! every constrained key can take, the existing nodes, and each pod's requirements.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::bits::Bits;
use super::existing::{ExistingTemplate, existing_templates};
use super::launch::instance_requirements;
use super::limits::Limits;
use super::outcome::Trace;
use super::{Input, PodData, PoolInstanceType, PreparedPool, Scheduler};
use crate::labels::{self, HOSTNAME};
use crate::model::{Effect, Pod, Taint, Toleration, TolerationOp, term_requirements, untolerated};
use crate::req::{Operator, Requirement, Requirements};
use crate::res::{self, Res, ResIndex};
use crate::topology::{BoundPod, Cluster, DomainUniverse, Topology};

/// A pod's requirements with its heaviest preferred node-affinity term (when preferences are
/// respected) and without (`strict`): its node selector and first required term.
pub(super) fn pod_requirements(pod: &Pod, respect: bool) -> (Requirements, Requirements) {
    let mut strict = Requirements::from_labels(&pod.node_selector);
    if let Some(first) = pod.required_terms.as_ref().and_then(|t| t.first()) {
        strict.add_all(&term_requirements(first));
    }
    if !respect || pod.preferred_terms.is_empty() {
        return (strict.clone(), strict);
    }
    let mut all = strict.clone();
    let heaviest = pod
        .preferred_terms
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.0.cmp(&b.0).then(j.cmp(i)))
        .map(|(_, t)| &t.1);
    if let Some(term) = heaviest {
        all.add_all(&term_requirements(term));
    }
    (all, strict)
}

/// Whether a DaemonSet would run on a node of this template and instance type (its pod,
/// tolerating PreferNoSchedule, relaxed term by term as `isDaemonPodCompatible` does).
fn daemon_compatible_with_template(
    template: &Requirements,
    taints: &[Taint],
    type_reqs: &Requirements,
    ds: &Pod,
) -> bool {
    let mut pod = ds.clone();
    pod.tolerations.push(Toleration {
        key: String::new(),
        operator: TolerationOp::Exists,
        value: String::new(),
        effect: Some(Effect::PreferNoSchedule),
    });
    if untolerated(taints, &pod.tolerations).is_some() {
        return false;
    }
    loop {
        let (_, strict) = pod_requirements(&pod, false);
        if template.is_compatible(&strict, true) && type_reqs.intersects(&strict).is_ok() {
            return true;
        }
        match pod.required_terms.as_mut() {
            Some(terms) if terms.len() > 1 => {
                terms.remove(0);
            }
            _ => return false,
        }
    }
}

/// A pod's requests as a resource vector, counting the pod itself in the `pods` slot.
pub(super) fn pod_requests(index: &ResIndex, pod: &Pod) -> Res {
    let mut r = index.from_map(&pod.requests);
    r[3] = r[3].saturating_add(1);
    r
}

/// Every resource name anything in the input mentions, its bound pods given apart (the
/// input's, or a prepared cluster's).
pub(super) fn resource_index<'p>(
    input: &'p Input,
    bound: impl Iterator<Item = &'p Pod>,
) -> ResIndex {
    // Borrowed: every bound pod is read, and copying its keys showed in the profile.
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for it in input.catalog.types() {
        names.extend(it.capacity.extended.keys().map(String::as_str));
    }
    for p in input.pods.iter().chain(&input.daemonsets) {
        names.extend(p.requests.keys().map(String::as_str));
    }
    for p in bound {
        names.extend(p.requests.keys().map(String::as_str));
    }
    for n in &input.nodes {
        names.extend(n.allocatable.keys().map(String::as_str));
        names.extend(n.capacity.keys().map(String::as_str));
    }
    for p in &input.pools {
        names.extend(
            p.limits
                .keys()
                .filter(|k| *k != "nodes")
                .map(String::as_str),
        );
        names.extend(
            p.capacity_overlay
                .values()
                .flat_map(|r| r.keys().map(String::as_str)),
        );
    }
    ResIndex::new(names.iter().copied())
}

/// NodePools by weight, equal weights by name descending (nodepoolutils.OrderByWeight);
/// static pools are not the provisioner's (`NewScheduler` filters them out).
fn pools_by_weight(input: &Input) -> Vec<usize> {
    let mut order: Vec<usize> = (0..input.pools.len())
        .filter(|&pi| input.pools[pi].replicas.is_none())
        .collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&input.pools[a], &input.pools[b]);
        pb.weight.cmp(&pa.weight).then(pb.name.cmp(&pa.name))
    });
    order
}

/// The NodePool's NodeClaim template and the instance types it may launch, each with the
/// DaemonSet overhead it would carry; `None` (with a warning) when no type is left.
fn prepare_pool(
    input: &Input,
    pi: usize,
    index: &ResIndex,
    cat_reqs: &[Requirements],
    ds_requests: &[Res],
    warnings: &mut Vec<String>,
) -> Option<PreparedPool> {
    let pool = &input.pools[pi];
    let mut template = pool.requirements.clone();
    template.add_all(&Requirements::from_labels(&pool.labels));
    template.add(labels::NODEPOOL, Requirement::single(&pool.name));
    template.add(labels::NODECLASS, Requirement::single(&pool.node_class));
    template.add(labels::REGISTERED, Requirement::single("true"));
    template.add(labels::INITIALIZED, Requirement::single("true"));
    let template_offers = crate::offerings::OfferingFilter::new(&template);
    let mut group_keys: Vec<Vec<usize>> = Vec::new();
    let mut types = Vec::new();
    for (ci, it) in input.catalog.types().iter().enumerate() {
        let treqs = &cat_reqs[ci];
        // NewScheduler's pre-filter: compatible, fits an empty pod, has an offering.
        if treqs.intersects(&template).is_err() {
            continue;
        }
        let offered = it
            .offerings
            .iter()
            .any(|o| o.available && template_offers.allows(o));
        let mut alloc = index.from_catalog(&it.allocatable(&pool.kubelet));
        let overlay = pool.capacity_overlay.get(&ci);
        for (resource, value) in overlay.into_iter().flatten() {
            // NodeOverlay capacity replaces the type's (no overhead on extended resources).
            if let Some(slot) = index.slot(resource) {
                alloc[slot] = *value;
            }
        }
        let alloc_ok = alloc.iter().all(|v| *v >= 0);
        if !offered || !alloc_ok {
            continue;
        }
        let compatible: Vec<usize> = input
            .daemonsets
            .iter()
            .enumerate()
            .filter(|(_, ds)| {
                ds.invalid.is_none()
                    && daemon_compatible_with_template(&template, &pool.taints, treqs, ds)
            })
            .map(|(i, _)| i)
            .collect();
        let group = match group_keys.iter().position(|g| *g == compatible) {
            Some(g) => g,
            None => {
                group_keys.push(compatible);
                group_keys.len() - 1
            }
        };
        let mut capacity = index.from_catalog(&it.capacity_with(&pool.kubelet));
        for (resource, value) in overlay.into_iter().flatten() {
            if let Some(slot) = index.slot(resource) {
                capacity[slot] = *value;
            }
        }
        types.push(PoolInstanceType {
            cat: ci,
            net: alloc,
            alloc_ok,
            capacity,
            group,
        });
    }
    if types.is_empty() {
        warnings.push(format!(
            "nodepool {}: its requirements filter out every instance type; it launches nothing",
            pool.name
        ));
        return None;
    }
    // Strict minValues (Karpenter's default policy): NewScheduler drops a template whose
    // pre-filtered types cannot meet a minValues (scheduler.go, `filterInstanceTypesByRequirements`
    // on the template, sigs.k8s.io/karpenter v1.15.0); BestEffort keeps it, and each new claim
    // lowers the short minValues instead.
    let kept: Vec<&Requirements> = types.iter().map(|t| &cat_reqs[t.cat]).collect();
    if input.options.min_values_policy == super::MinValuesPolicy::Strict
        && let Some(short) = min_values_short(&template, &kept)
    {
        warnings.push(format!(
            "nodepool {}: its instance types cannot meet minValues ({short}); it launches nothing",
            pool.name
        ));
        return None;
    }
    let group_overhead: Vec<Res> = group_keys
        .iter()
        .map(|g| {
            let mut o = index.zero();
            for &d in g {
                res::add(&mut o, &ds_requests[d]);
            }
            o
        })
        .collect();
    for t in &mut types {
        res::sub(&mut t.net, &group_overhead[t.group]);
    }
    let n = types.len();
    Some(PreparedPool {
        input: pi,
        name: pool.name.clone(),
        taints: pool.taints.clone(),
        template,
        types,
        group_overhead,
        all: Bits::full(n),
        compat_cache: HashMap::new(),
        offer_cache: HashMap::new(),
        limits: Limits::new(&pool.limits, pool.budget_account.as_ref(), index),
    })
}

/// Every topology key a pod constrains (spread, required and preferred (anti-)affinity), the
/// bound pods given apart.
pub(super) fn topology_keys<'p>(
    input: &'p Input,
    bound: impl Iterator<Item = &'p Pod>,
) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = BTreeSet::new();
    for p in input.pods.iter().chain(bound) {
        for key in pod_topology_keys(p) {
            if !keys.contains(key) {
                keys.insert(key.to_owned());
            }
        }
    }
    keys
}

/// The topology keys one pod constrains.
pub(super) fn pod_topology_keys(p: &Pod) -> impl Iterator<Item = &str> + Clone {
    p.spread.iter().map(|s| s.topology_key.as_str()).chain(
        p.affinity
            .iter()
            .chain(&p.anti_affinity)
            .chain(p.preferred_affinity.iter().map(|(_, t)| t))
            .chain(p.preferred_anti_affinity.iter().map(|(_, t)| t))
            .map(|t| t.topology_key.as_str()),
    )
}

/// The domains each key can take on a node some NodePool may launch, with that pool's taints.
fn domain_universe(
    input: &Input,
    order: &[usize],
    cat_reqs: &[Requirements],
    keys: &BTreeSet<String>,
) -> BTreeMap<String, DomainUniverse> {
    let mut universe: BTreeMap<String, DomainUniverse> = BTreeMap::new();
    for key in keys {
        let mut u = DomainUniverse::default();
        for &pi in order {
            let pool = &input.pools[pi];
            let mut base = pool.requirements.clone();
            base.add_all(&Requirements::from_labels(&pool.labels));
            for treqs in cat_reqs {
                if !base.has(key) && !treqs.has(key) {
                    continue;
                }
                let r = base.get(key).intersection(&treqs.get(key));
                for d in r.values() {
                    u.insert(d, &pool.taints);
                }
            }
            if let Some(r) = base.get_ref(key)
                && r.operator() == Operator::In
            {
                for d in r.values() {
                    u.insert(d, &pool.taints);
                }
            }
        }
        universe.insert(key.clone(), u);
    }
    universe
}

/// Pods already bound to an existing node, and those bound to a node that is not one (warned
/// about, left out of the cluster). An owned input's bound pods move into the result (its
/// `bound` is left empty): a disruption pass prepares 20,000 of them, and copying them twice
/// showed in its profile.
fn bound_pods(
    input: &mut Cow<'_, Input>,
    warnings: &mut Vec<String>,
) -> (Vec<BoundPod>, Vec<(String, Pod)>) {
    let pairs: Vec<(String, Pod)> = match input {
        Cow::Owned(owned) => std::mem::take(&mut owned.bound),
        Cow::Borrowed(shared) => shared.bound.clone(),
    };
    let node_index: HashMap<&str, usize> = input
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut bound = Vec::with_capacity(pairs.len());
    let mut orphans = Vec::new();
    for (node, pod) in pairs {
        match node_index.get(node.as_str()) {
            Some(&i) => bound.push(BoundPod { pod, node: i }),
            None => {
                warnings.push(format!(
                    "pod {} is bound to node {node}, which is not among the existing nodes; ignored",
                    pod.key()
                ));
                orphans.push((node, pod));
            }
        }
    }
    (bound, orphans)
}

/// What every simulation of one cluster shares (`NewScheduler`'s work that does not depend on
/// the pods to schedule): the resource index, the NodePools' instance-type tables, the topology
/// domains, and the existing nodes with their bound pods. Disruption builds it once per pass
/// and simulates each probe ("these nodes gone, their pods to place") against it.
pub struct Prepared<'a> {
    pub(super) input: Cow<'a, Input>,
    pub(super) index: ResIndex,
    cat_reqs: Vec<Requirements>,
    pub(super) pools: Vec<PreparedPool>,
    warnings: Vec<String>,
    pub(super) universe: Arc<BTreeMap<String, DomainUniverse>>,
    topo_keys: Vec<String>,
    pub(super) cluster: Arc<Cluster>,
    pub(super) existing: Vec<ExistingTemplate>,
    tolerate_prefer_no_schedule: bool,
    /// Each DaemonSet's requests (by index into the input's).
    pub(super) ds_requests: Vec<Res>,
    /// Bound pods whose node is not among the input's, by node name (warned about).
    pub(super) orphans: Vec<(String, Pod)>,
}

impl<'a> Prepared<'a> {
    /// Prepares `input`: its nodes and bound pods are the cluster; its pods only widen the
    /// resource index and topology keys (a probe may schedule any of them, or any bound pod).
    pub fn new(mut input: Cow<'a, Input>) -> Prepared<'a> {
        let index = resource_index(&input, input.bound.iter().map(|(_, p)| p));
        let cat_reqs: Vec<Requirements> = input
            .catalog
            .types()
            .iter()
            .map(instance_requirements)
            .collect();
        let mut warnings = input.warnings.clone();
        let ds_requests: Vec<Res> = input
            .daemonsets
            .iter()
            .map(|p| pod_requests(&index, p))
            .collect();
        let order = pools_by_weight(&input);
        let tolerate_prefer_no_schedule = input.pools.iter().any(|p| {
            p.taints
                .iter()
                .any(|t| t.effect == Effect::PreferNoSchedule)
        });
        let mut pools = Vec::new();
        for &pi in &order {
            if let Some(p) =
                prepare_pool(&input, pi, &index, &cat_reqs, &ds_requests, &mut warnings)
            {
                pools.push(p);
            }
        }
        let keys = topology_keys(&input, input.bound.iter().map(|(_, p)| p));
        let universe = domain_universe(&input, &order, &cat_reqs, &keys);
        let (bound, orphans) = bound_pods(&mut input, &mut warnings);
        let existing = existing_templates(&input, &index, &pools, &bound, &ds_requests);
        let cluster = Cluster::new(&input.nodes, bound);
        Prepared {
            index,
            cat_reqs,
            pools,
            warnings,
            universe: Arc::new(universe),
            topo_keys: keys.iter().filter(|k| *k != HOSTNAME).cloned().collect(),
            cluster: Arc::new(cluster),
            existing,
            tolerate_prefer_no_schedule,
            ds_requests,
            orphans,
            input,
        }
    }

    /// The prepared input (its nodes are what `Placement::Existing` indexes map through; an
    /// owned input's bound pods have moved into the cluster).
    pub fn input(&self) -> &Input {
        &self.input
    }

    /// Schedules `pods` with the nodes marked in `gone` (by index into the input's nodes)
    /// removed, together with their bound pods: what preparing the cluster without them would
    /// give.
    pub fn simulate(&self, pods: &[Pod], gone: &[bool]) -> super::Outcome {
        self.scheduler(pods, gone, None).solve()
    }

    pub(super) fn scheduler<'s>(
        &'s self,
        pods: &'s [Pod],
        gone: &[bool],
        trace_pod: Option<usize>,
    ) -> Scheduler<'s> {
        let input: &'s Input = &self.input;
        let respect = !input.options.ignore_preferences;
        let topology = Topology::new(
            self.universe.clone(),
            self.cluster.clone(),
            gone.to_vec(),
            pods.len(),
            respect,
        );
        let mut s = Scheduler {
            input,
            pods,
            index: self.index.clone(),
            cat_reqs: &self.cat_reqs,
            pools: self.pools.clone(),
            claims: Vec::new(),
            order: Vec::new(),
            screens: super::Screens::new(self.index.len(), self.topo_keys.len()),
            existing: Vec::with_capacity(self.existing.len()),
            rooms: Vec::with_capacity(self.existing.len() * self.index.len()),
            topology,
            data: Vec::new(),
            tolerate_prefer_no_schedule: self.tolerate_prefer_no_schedule,
            trace_pod,
            trace: Trace::default(),
            warnings: self.warnings.clone(),
            placements: vec![None; pods.len()],
            // Static pools do not count: Karpenter finds no dynamic NodePool.
            no_pools: input.pools.iter().all(|p| p.replicas.is_some()),
            topo_keys: self.topo_keys.clone(),
            reservations: crate::offerings::Reservations::new(&input.catalog),
        };
        s.add_existing_nodes(&self.existing, gone);
        s.data = pods.iter().map(|p| s.pod_data(p)).collect();
        for (i, p) in pods.iter().enumerate() {
            if p.invalid.is_none() {
                s.topology.update(i, p);
            }
        }
        s
    }
}

impl Scheduler<'_> {
    /// A pod's requests and requirements as the scheduler reads them.
    pub(super) fn pod_data(&self, pod: &Pod) -> PodData {
        let (reqs, strict) = pod_requirements(pod, !self.input.options.ignore_preferences);
        PodData {
            requests: pod_requests(&self.index, pod),
            reqs,
            strict,
        }
    }
}

/// The first `minValues` of `reqs` that the given instance types' requirements do not meet, as
/// `key has N of minValues M`; `None` when all are met.
pub(super) fn min_values_short(reqs: &Requirements, types: &[&Requirements]) -> Option<String> {
    min_values_counts(reqs, types)
        .into_iter()
        .find(|(_, have, min)| have < min)
        .map(|(k, have, min)| format!("{k} has {have} of minValues {min}"))
}

/// Each key of `reqs` with a `minValues`: how many distinct values the types offer for it,
/// counting only values the requirement allows (sigs.k8s.io/karpenter v1.15.0
/// `SatisfiesMinValues`; v1.14 counted every value), and its `minValues`.
pub(super) fn min_values_counts<'a>(
    reqs: &'a Requirements,
    types: &[&Requirements],
) -> Vec<(&'a str, usize, usize)> {
    let mut out = Vec::new();
    for (k, r) in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        let mut values: BTreeSet<&str> = BTreeSet::new();
        for tr in types {
            if let Some(v) = tr.get_ref(k) {
                values.extend(v.values().filter(|value| r.has(value)));
            }
        }
        out.push((k, values.len(), min));
    }
    out
}
