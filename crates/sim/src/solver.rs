//! The scheduling loop (kubernetes-sigs/karpenter v1.14 `pkg/controllers/provisioning/scheduling`
//! `scheduler.go`, `nodeclaim.go`, `existingnode.go`, `queue.go`, `preferences.go`).
//!
//! Pods are queued by CPU, then memory, descending. Each pod tries existing nodes (by name),
//! then the NodeClaims opened so far (fewest pods first), then a new NodeClaim from each
//! NodePool by weight (equal weights: name descending), the first that accepts winning. A pod
//! that fits nowhere has its preferences relaxed one at a time and is tried again; when even
//! the relaxed pod fails, its original goes back to the end of the queue. The loop ends when the
//! queue cycles without progress.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use kk_catalog::resources::format_quantity;
use kk_catalog::{CapacityType, Catalog, InstanceType};

use crate::labels::{self, HOSTNAME};
use crate::model::{
    Effect, Node, Pod, Pool, Taint, Toleration, TolerationOp, term_requirements, untolerated,
};
use crate::req::{Operator, Requirement, Requirements};
use crate::res::{self, Res, ResIndex};
use crate::topology::{BoundPod, DomainUniverse, Topology};

/// Scheduler settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Instance types kept per NodeClaim (`MaxInstanceTypes`, 600).
    pub max_instance_types: usize,
    /// Instance types the AWS provider sends to CreateFleet (60).
    pub launch_instance_types: usize,
    /// Karpenter's `--preference-policy=Ignore`.
    pub ignore_preferences: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_instance_types: 600,
            launch_instance_types: 60,
            ignore_preferences: false,
        }
    }
}

/// Everything a simulation reads.
#[derive(Debug, Clone)]
pub struct Input {
    pub pools: Vec<Pool>,
    pub pods: Vec<Pod>,
    /// One template pod per DaemonSet.
    pub daemonsets: Vec<Pod>,
    pub nodes: Vec<Node>,
    /// Pods already running on an existing node (by node name).
    pub bound: Vec<(String, Pod)>,
    pub catalog: Catalog,
    pub options: Options,
    /// Problems found while loading that did not stop it.
    pub warnings: Vec<String>,
}

type Bits = Vec<u64>;

/// Up to this many in-flight claims, their order follows Go's `sort.Slice` exactly.
const GO_SORT_EXACT: usize = 1024;

fn bits_full(n: usize) -> Bits {
    let mut b = vec![u64::MAX; n.div_ceil(64)];
    if !n.is_multiple_of(64)
        && let Some(last) = b.last_mut()
    {
        *last = (1u64 << (n % 64)) - 1;
    }
    b
}

fn bits_and(a: &mut Bits, b: &Bits) {
    for (x, y) in a.iter_mut().zip(b) {
        *x &= *y;
    }
}

fn bits_iter(b: &Bits) -> impl Iterator<Item = usize> + '_ {
    b.iter().enumerate().flat_map(|(w, &word)| {
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

fn bits_is_empty(b: &Bits) -> bool {
    b.iter().all(|w| *w == 0)
}

fn bits_set(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

/// One instance type as a NodePool sees it.
#[derive(Debug, Clone)]
struct PType {
    cat: usize,
    /// Allocatable less the overhead of the DaemonSets that would run on it.
    net: Res,
    alloc_ok: bool,
    capacity: Res,
    group: usize,
}

#[derive(Debug)]
struct PPool {
    input: usize,
    name: String,
    taints: Vec<Taint>,
    template: Requirements,
    types: Vec<PType>,
    /// DaemonSet overhead per group of types that run the same DaemonSets.
    group_overhead: Vec<Res>,
    all: Bits,
    compat_cache: HashMap<String, HashMap<Requirement, Bits>>,
    offer_cache: HashMap<Requirement, HashMap<Requirement, Bits>>,
    /// (slot, remaining) for each limited resource; `nodes` separately.
    remaining: Vec<(usize, i64)>,
    remaining_nodes: Option<i64>,
    limits_written: BTreeMap<String, String>,
    within_limits: Option<Bits>,
}

#[derive(Debug, Clone)]
struct Claim {
    pool: usize,
    hostname: String,
    host: u32,
    reqs: Requirements,
    types: Bits,
    requests: Res,
    max_net: Res,
    pods: Vec<usize>,
    host_ports: Vec<(i32, String)>,
    /// Per topology key (`Scheduler::topo_keys`): the interned domain when the claim is
    /// narrowed to exactly one, else `u32::MAX`.
    singles: Vec<u32>,
}

#[derive(Debug, Clone)]
struct ExistingNode {
    node: usize,
    reqs: Requirements,
    taints: Vec<Taint>,
    remaining: Res,
    host: u32,
    pods: Vec<usize>,
    host_ports: Vec<(i32, String)>,
}

#[derive(Debug, Clone)]
struct PodData {
    requests: Res,
    reqs: Requirements,
    strict: Requirements,
}

/// Where a pod went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Existing(usize),
    Claim(usize),
}

/// One step of a traced pod's last scheduling attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub target: String,
    pub outcome: Result<(), String>,
}

/// What happened to one traced pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub attempts: Vec<Attempt>,
    pub relaxations: Vec<String>,
    pub passes: usize,
}

/// Why a pod could not be placed (per NodePool, or for all of them).
#[derive(Debug, Clone, PartialEq)]
pub struct PodError {
    pub general: Option<String>,
    pub pools: Vec<(String, String)>,
}

impl PodError {
    fn general(text: impl Into<String>) -> PodError {
        PodError {
            general: Some(text.into()),
            pools: Vec::new(),
        }
    }

    /// One line: the general reason, the only pool's reason, or `pool: reason; ...`.
    pub fn text(&self) -> String {
        if let Some(g) = &self.general {
            return g.clone();
        }
        match self.pools.as_slice() {
            [(_, reason)] => reason.clone(),
            many => many
                .iter()
                .map(|(p, r)| format!("nodepool {p}: {r}"))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// A NodeClaim the simulation opened, before launch selection.
#[derive(Debug, Clone)]
pub struct ClaimResult {
    pub pool: String,
    pub pool_index: usize,
    pub requirements: Requirements,
    /// Catalog indices, cheapest first, at most `max_instance_types`.
    pub types: Vec<usize>,
    /// Pod requests plus the smallest DaemonSet overhead of the remaining types.
    pub requests: BTreeMap<String, i64>,
    pub pods: Vec<usize>,
}

/// The raw result of a simulation.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub claims: Vec<ClaimResult>,
    /// (node index, pods placed there).
    pub existing: Vec<(usize, Vec<usize>)>,
    /// Pod index → why it stays Pending.
    pub errors: BTreeMap<usize, String>,
    pub warnings: Vec<String>,
    pub trace: Option<Trace>,
    pub placements: Vec<Option<Placement>>,
}

pub(crate) struct Scheduler<'a> {
    input: &'a Input,
    index: ResIndex,
    cat_reqs: Vec<Requirements>,
    pools: Vec<PPool>,
    claims: Vec<Claim>,
    /// In-flight claims in the order upstream's `newNodeClaims` slice has: new claims are
    /// appended, and the slice is re-sorted by pod count with Go's `sort.Slice` before each
    /// pod tries them (reproduced exactly by [`crate::gosort`] up to `GO_SORT_EXACT` claims;
    /// beyond that, as a stable sort, which keeps large plans fast).
    order: Vec<usize>,
    existing: Vec<ExistingNode>,
    topology: Topology,
    data: Vec<PodData>,
    tolerate_prefer_no_schedule: bool,
    trace_pod: Option<usize>,
    trace: Trace,
    warnings: Vec<String>,
    placements: Vec<Option<Placement>>,
    no_pools: bool,
    /// Topology keys other than the hostname.
    topo_keys: Vec<String>,
}

fn region_of(zone: &str) -> Option<String> {
    let b = zone.as_bytes();
    let n = b.len();
    (n >= 3 && b[n - 1].is_ascii_lowercase() && b[n - 2].is_ascii_digit())
        .then(|| zone[..n - 1].to_owned())
}

/// The requirements an instance type offers (`computeRequirements`): its labels, every
/// well-known AWS label it lacks as DoesNotExist, and zones/capacity types from its offerings.
pub fn instance_requirements(it: &InstanceType) -> Requirements {
    let mut r = Requirements::new();
    let aws = it.labels.contains_key(labels::INSTANCE_FAMILY)
        || it.labels.contains_key("karpenter.k8s.aws/instance-cpu");
    if aws {
        for key in labels::AWS_INSTANCE_LABELS {
            r.set(key, Requirement::does_not_exist());
        }
        r.set(labels::WINDOWS_BUILD, Requirement::does_not_exist());
        r.set(
            labels::TENANCY,
            Requirement::in_values(["default", "dedicated"]),
        );
        r.set(labels::RESERVATION_ID, Requirement::does_not_exist());
        r.set(labels::RESERVATION_TYPE, Requirement::does_not_exist());
        r.set(
            labels::RESERVATION_INTERRUPTIBLE,
            Requirement::does_not_exist(),
        );
    }
    for (k, v) in &it.labels {
        r.set(k, Requirement::single(v));
    }
    let avail = it.offerings.iter().filter(|o| o.available);
    let zones: BTreeSet<&str> = avail.clone().map(|o| &*o.zone).collect();
    let cts: BTreeSet<&str> = avail.map(|o| o.capacity_type.as_str()).collect();
    let regions: BTreeSet<String> = zones.iter().filter_map(|z| region_of(z)).collect();
    r.set(labels::ZONE, Requirement::in_values(zones.iter().copied()));
    r.set(
        labels::CAPACITY_TYPE,
        Requirement::in_values(cts.iter().copied()),
    );
    if !regions.is_empty() {
        r.set(labels::REGION, Requirement::in_values(regions));
    }
    r
}

fn is_exotic(it: &InstanceType) -> bool {
    it.size.contains("metal")
        || it.bare_metal
        || [
            "nvidia.com/gpu",
            "amd.com/gpu",
            "aws.amazon.com/neuron",
            "aws.amazon.com/neuroncore",
            "habana.ai/gaudi",
        ]
        .iter()
        .any(|r| it.capacity.get(r) > 0)
}

fn pod_requirements(pod: &Pod, respect: bool) -> (Requirements, Requirements) {
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

/// Removes the heaviest weighted term (ties: the first), as the relaxation steps do.
fn remove_heaviest<T>(terms: &mut Vec<(i32, T)>) -> bool {
    let Some(i) = terms
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.0.cmp(&b.0).then(j.cmp(i)))
        .map(|(i, _)| i)
    else {
        return false;
    };
    terms.remove(i);
    true
}

/// One relaxation step in Karpenter's order; `None` when nothing is left to relax.
fn relax(pod: &mut Pod, tolerate_prefer_no_schedule: bool) -> Option<String> {
    if let Some(terms) = pod.required_terms.as_mut()
        && terms.len() > 1
    {
        terms.remove(0);
        return Some("removed the first required node affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_affinity) {
        return Some("removed the heaviest preferred pod affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_anti_affinity) {
        return Some("removed the heaviest preferred pod anti-affinity term".into());
    }
    if remove_heaviest(&mut pod.preferred_terms) {
        return Some("removed the heaviest preferred node affinity term".into());
    }
    if let Some(i) = pod.spread.iter().position(|s| !s.required) {
        let s = pod.spread.swap_remove(i);
        return Some(format!(
            "removed the ScheduleAnyway topology spread on {}",
            s.topology_key
        ));
    }
    if tolerate_prefer_no_schedule {
        let tol = Toleration {
            key: String::new(),
            operator: TolerationOp::Exists,
            value: String::new(),
            effect: Some(Effect::PreferNoSchedule),
        };
        if !pod.tolerations.iter().any(|t| {
            t.key.is_empty()
                && t.operator == TolerationOp::Exists
                && t.effect.is_none_or(|e| e == Effect::PreferNoSchedule)
        }) {
            pod.tolerations.push(tol);
            return Some("added a toleration for PreferNoSchedule taints".into());
        }
    }
    None
}

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

/// The requirement for `key` once `pod` joins `node`.
fn merged<'r>(node: &'r Requirements, pod: &'r Requirements, key: &str) -> Cow<'r, Requirement> {
    match (node.get_ref(key), pod.get_ref(key)) {
        (Some(n), Some(p)) => Cow::Owned(p.intersection(n)),
        (Some(r), None) | (None, Some(r)) => Cow::Borrowed(r),
        (None, None) => Cow::Borrowed(&crate::req::EXISTS),
    }
}

/// Karpenter's `KnownEphemeralTaints` and `KnownEphemeralTaintKeyPrefixes`.
fn is_known_ephemeral(t: &Taint) -> bool {
    // `Taint.MatchTaint` compares key and effect only.
    let known = [
        ("node.kubernetes.io/not-ready", Effect::NoSchedule),
        ("node.kubernetes.io/not-ready", Effect::NoExecute),
        ("node.kubernetes.io/unreachable", Effect::NoSchedule),
        (
            "node.cloudprovider.kubernetes.io/uninitialized",
            Effect::NoSchedule,
        ),
        ("karpenter.sh/unregistered", Effect::NoExecute),
    ];
    known.iter().any(|(k, e)| t.key == *k && t.effect == *e)
        || t.key.starts_with("readiness.k8s.io/")
}

fn negative(r: &Requirement) -> bool {
    matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
}

/// `base.Compatible(topologyRequirements)` where base = node ∪ pod requirements.
fn check_topology(
    node: &Requirements,
    pod: &Requirements,
    topo: &[(String, Requirement)],
    allow_undefined_well_known: bool,
) -> Result<(), String> {
    for (k, d) in topo {
        let defined = node.has(k) || pod.has(k);
        if !defined {
            if !(negative(d) || allow_undefined_well_known && labels::is_well_known(k)) {
                return Err(format!("topology: label {k:?} does not have known values"));
            }
            continue;
        }
        let existing = merged(node, pod, k);
        let combined = d.intersection(existing.as_ref());
        let negatives = negative(&combined) && negative(existing.as_ref());
        if !(existing.has_intersection(&combined) || negatives) {
            return Err(format!("topology: {k} {combined} not in {existing}"));
        }
    }
    Ok(())
}

impl<'a> Scheduler<'a> {
    pub(crate) fn new(input: &'a Input, trace_pod: Option<usize>) -> Scheduler<'a> {
        let respect = !input.options.ignore_preferences;
        let mut names: BTreeSet<String> = BTreeSet::new();
        for it in input.catalog.types() {
            names.extend(it.capacity.extended.keys().cloned());
        }
        for p in input.pods.iter().chain(&input.daemonsets) {
            names.extend(p.requests.keys().cloned());
        }
        for (_, p) in &input.bound {
            names.extend(p.requests.keys().cloned());
        }
        for n in &input.nodes {
            names.extend(n.allocatable.keys().cloned());
            names.extend(n.capacity.keys().cloned());
        }
        for p in &input.pools {
            names.extend(p.limits.keys().filter(|k| *k != "nodes").cloned());
        }
        let index = ResIndex::new(names.iter().map(String::as_str));
        let cat_reqs: Vec<Requirements> = input
            .catalog
            .types()
            .iter()
            .map(instance_requirements)
            .collect();
        let mut warnings = input.warnings.clone();

        let index_ref = &index;
        let req_of = |p: &Pod| {
            let mut r = index_ref.from_map(&p.requests);
            r[3] = r[3].saturating_add(1);
            r
        };
        let ds_requests: Vec<Res> = input.daemonsets.iter().map(req_of).collect();

        // NodePools by weight, equal weights by name descending (nodepoolutils.OrderByWeight).
        let mut order: Vec<usize> = (0..input.pools.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&input.pools[a], &input.pools[b]);
            pb.weight.cmp(&pa.weight).then(pb.name.cmp(&pa.name))
        });
        let tolerate_prefer_no_schedule = input.pools.iter().any(|p| {
            p.taints
                .iter()
                .any(|t| t.effect == Effect::PreferNoSchedule)
        });

        let mut pools = Vec::new();
        for &pi in &order {
            let pool = &input.pools[pi];
            let mut template = pool.requirements.clone();
            template.add_all(&Requirements::from_labels(&pool.labels));
            template.add(labels::NODEPOOL, Requirement::single(&pool.name));
            template.add(labels::NODECLASS, Requirement::single(&pool.node_class));
            template.add(labels::REGISTERED, Requirement::single("true"));
            template.add(labels::INITIALIZED, Requirement::single("true"));
            let mut group_keys: Vec<Vec<usize>> = Vec::new();
            let mut types = Vec::new();
            for (ci, it) in input.catalog.types().iter().enumerate() {
                let treqs = &cat_reqs[ci];
                // NewScheduler's pre-filter: compatible, fits an empty pod, has an offering.
                if treqs.intersects(&template).is_err() {
                    continue;
                }
                let offered = it.offerings.iter().any(|o| {
                    o.available
                        && template.get(labels::ZONE).has(&o.zone)
                        && template
                            .get(labels::CAPACITY_TYPE)
                            .has(o.capacity_type.as_str())
                });
                let alloc = index.from_catalog(&it.allocatable(&pool.kubelet));
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
                let capacity = index.from_catalog(&it.capacity_with(&pool.kubelet));
                types.push(PType {
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
                continue;
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
            let mut remaining = Vec::new();
            let mut remaining_nodes = None;
            let mut limits_written = BTreeMap::new();
            for (k, v) in &pool.limits {
                limits_written.insert(k.clone(), format_quantity(k, *v));
                if k == "nodes" {
                    remaining_nodes = Some(*v);
                } else if let Some(slot) = index.slot(k) {
                    remaining.push((slot, *v));
                }
            }
            let n = types.len();
            pools.push(PPool {
                input: pi,
                name: pool.name.clone(),
                taints: pool.taints.clone(),
                template,
                types,
                group_overhead,
                all: bits_full(n),
                compat_cache: HashMap::new(),
                offer_cache: HashMap::new(),
                remaining,
                remaining_nodes,
                limits_written,
                within_limits: None,
            });
        }

        // Topology domains for every key a pod constrains.
        let mut keys: BTreeSet<String> = BTreeSet::new();
        for p in input.pods.iter().chain(input.bound.iter().map(|(_, p)| p)) {
            keys.extend(p.spread.iter().map(|s| s.topology_key.clone()));
            for t in p
                .affinity
                .iter()
                .chain(&p.anti_affinity)
                .chain(p.preferred_affinity.iter().map(|(_, t)| t))
                .chain(p.preferred_anti_affinity.iter().map(|(_, t)| t))
            {
                keys.insert(t.topology_key.clone());
            }
        }
        let mut universe: BTreeMap<String, DomainUniverse> = BTreeMap::new();
        for key in &keys {
            let mut u = DomainUniverse::default();
            for &pi in &order {
                let pool = &input.pools[pi];
                let mut base = pool.requirements.clone();
                base.add_all(&Requirements::from_labels(&pool.labels));
                for treqs in &cat_reqs {
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

        let node_index: HashMap<&str, usize> = input
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut bound = Vec::new();
        // Bound pods per node (indices into `input.bound`), for the existing nodes below.
        let mut bound_by_node: Vec<Vec<usize>> = vec![Vec::new(); input.nodes.len()];
        for (bi, (node, pod)) in input.bound.iter().enumerate() {
            match node_index.get(node.as_str()) {
                Some(&i) => {
                    bound_by_node[i].push(bi);
                    bound.push(BoundPod {
                        pod: pod.clone(),
                        node: i,
                    });
                }
                None => warnings.push(format!(
                    "pod {} is bound to node {node}, which is not among the existing nodes; ignored",
                    pod.key()
                )),
            }
        }
        let mut topology = Topology::new(universe, &input.nodes, bound, input.pods.len(), respect);

        let mut s = Scheduler {
            input,
            index: index.clone(),
            cat_reqs,
            pools,
            claims: Vec::new(),
            order: Vec::new(),
            existing: Vec::new(),
            topology: Topology::new(BTreeMap::new(), &[], Vec::new(), 0, respect),
            data: Vec::new(),
            tolerate_prefer_no_schedule,
            trace_pod,
            trace: Trace::default(),
            warnings,
            placements: vec![None; input.pods.len()],
            no_pools: input.pools.is_empty(),
            topo_keys: keys.iter().filter(|k| *k != HOSTNAME).cloned().collect(),
        };

        // Existing nodes, by name; they use up their NodePool's limits with what they advertise.
        // Initialized nodes first, then by name (`sortExistingNodes`).
        let initialized = |n: &Node| {
            n.pool().is_none()
                || n.labels
                    .get(labels::INITIALIZED)
                    .is_some_and(|v| v == "true")
        };
        let mut by_name: Vec<usize> = (0..input.nodes.len()).collect();
        by_name.sort_by(|&a, &b| {
            let (na, nb) = (&input.nodes[a], &input.nodes[b]);
            initialized(nb)
                .cmp(&initialized(na))
                .then(na.name.cmp(&nb.name))
        });
        for ni in by_name {
            let node = &input.nodes[ni];
            // A Karpenter-managed node that is not initialized yet: its well-known ephemeral
            // taints (not-ready, unreachable, uninitialized, unregistered) are expected to go
            // away, so they do not count (`StateNode.Taints`).
            let taints: Vec<Taint> = if initialized(node) {
                node.taints.clone()
            } else {
                let startup: &[Taint] = node
                    .pool()
                    .and_then(|p| input.pools.iter().find(|pool| pool.name == p))
                    .map_or(&[], |p| &p.startup_taints);
                node.taints
                    .iter()
                    .filter(|t| {
                        !is_known_ephemeral(t)
                            && !startup
                                .iter()
                                .any(|s| s.key == t.key && s.effect == t.effect)
                    })
                    .cloned()
                    .collect()
            };
            let hostname = node
                .labels
                .get(HOSTNAME)
                .cloned()
                .unwrap_or_else(|| node.name.clone());
            let mut reqs = Requirements::from_labels(&node.labels);
            reqs.add(HOSTNAME, Requirement::single(&hostname));
            let mut remaining = s.index.from_map(&node.allocatable);
            let mut host_ports = Vec::new();
            let mut daemon_running = s.index.zero();
            for pod in bound_by_node[ni].iter().map(|&i| &input.bound[i].1) {
                let r = req_of(pod);
                res::sub(&mut remaining, &r);
                if pod.owner.starts_with("ds/") {
                    res::add(&mut daemon_running, &r);
                }
                host_ports.extend(pod.host_ports.iter().cloned());
            }
            // DaemonSets that would run here and are not running yet (`NewExistingNode`:
            // compatible DaemonSet requests less the DaemonSet pods already there, at least 0).
            let labels_reqs = Requirements::from_labels(&node.labels);
            let mut daemons = s.index.zero();
            for (di, ds) in input.daemonsets.iter().enumerate() {
                if ds.invalid.is_some() || untolerated(&taints, &ds.tolerations).is_some() {
                    continue;
                }
                let (_, strict) = pod_requirements(ds, false);
                if labels_reqs.compatible(&strict, false).is_ok() {
                    res::add(&mut daemons, &ds_requests[di]);
                }
            }
            res::sub(&mut daemons, &daemon_running);
            for v in &mut daemons {
                *v = (*v).max(0);
            }
            res::sub(&mut remaining, &daemons);
            let host = topology.domain_id(&hostname);
            topology.register_host(host);
            if let Some(pool) = node.pool()
                && let Some(pp) = s.pools.iter_mut().find(|p| p.name == pool)
            {
                let cap = s.index.from_map(if node.capacity.is_empty() {
                    &node.allocatable
                } else {
                    &node.capacity
                });
                for (slot, rem) in &mut pp.remaining {
                    *rem -= cap[*slot];
                }
                if let Some(n) = pp.remaining_nodes.as_mut() {
                    *n -= 1;
                }
            }
            s.existing.push(ExistingNode {
                node: ni,
                reqs,
                taints,
                remaining,
                host,
                pods: Vec::new(),
                host_ports,
            });
        }

        s.data = input
            .pods
            .iter()
            .map(|p| {
                let (reqs, strict) = pod_requirements(p, respect);
                PodData {
                    requests: req_of(p),
                    reqs,
                    strict,
                }
            })
            .collect();
        for (i, p) in input.pods.iter().enumerate() {
            if p.invalid.is_none() {
                topology.update(i, p);
            }
        }
        s.topology = topology;
        s
    }

    fn pod_data(&self, pod: &Pod) -> PodData {
        let (reqs, strict) = pod_requirements(pod, !self.input.options.ignore_preferences);
        let mut requests = self.index.from_map(&pod.requests);
        requests[3] = requests[3].saturating_add(1);
        PodData {
            requests,
            reqs,
            strict,
        }
    }

    pub(crate) fn solve(mut self) -> Outcome {
        let input = self.input;
        let mut errors: BTreeMap<usize, String> = BTreeMap::new();
        let mut queue_pods: Vec<usize> = Vec::new();
        for (i, p) in input.pods.iter().enumerate() {
            match &p.invalid {
                Some(reason) => {
                    errors.insert(i, reason.clone());
                }
                None if self.no_pools => {
                    errors.insert(i, "no nodepools found".into());
                }
                None => queue_pods.push(i),
            }
        }
        // Queue order: CPU, then memory, descending; then creation time; then input order.
        queue_pods.sort_by(|&a, &b| {
            let (da, db) = (&self.data[a].requests, &self.data[b].requests);
            db[0]
                .cmp(&da[0])
                .then(db[1].cmp(&da[1]))
                .then_with(|| input.pods[a].created.cmp(&input.pods[b].created))
                .then(a.cmp(&b))
        });
        let mut queue: VecDeque<usize> = queue_pods.into();
        let mut last_len: HashMap<usize, usize> = HashMap::new();
        while let Some(&pid) = queue.front() {
            if last_len.get(&pid) == Some(&queue.len()) {
                break;
            }
            queue.pop_front();
            if Some(pid) == self.trace_pod {
                self.trace.attempts.clear();
                self.trace.relaxations.clear();
                self.trace.passes += 1;
            }
            match self.try_schedule(pid) {
                Ok(()) => {
                    errors.remove(&pid);
                }
                Err(e) => {
                    errors.insert(pid, e.text());
                    let original = &input.pods[pid];
                    self.topology.update(pid, original);
                    self.data[pid] = self.pod_data(original);
                    queue.push_back(pid);
                    last_len.insert(pid, queue.len());
                }
            }
        }
        self.finish(errors)
    }

    fn try_schedule(&mut self, pid: usize) -> Result<(), PodError> {
        let input = self.input;
        let mut pod: Cow<'_, Pod> = Cow::Borrowed(&input.pods[pid]);
        loop {
            let err = match self.add(pid, &pod) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let Some(step) = relax(pod.to_mut(), self.tolerate_prefer_no_schedule) else {
                return Err(err);
            };
            if Some(pid) == self.trace_pod {
                self.trace.relaxations.push(step);
                self.trace.attempts.clear();
            }
            self.topology.update(pid, &pod);
            self.data[pid] = self.pod_data(&pod);
        }
    }

    fn note(&mut self, pid: usize, target: String, outcome: Result<(), String>) {
        if Some(pid) == self.trace_pod {
            self.trace.attempts.push(Attempt { target, outcome });
        }
    }

    fn add(&mut self, pid: usize, pod: &Pod) -> Result<(), PodError> {
        let traced = self.trace_pod == Some(pid);
        for e in 0..self.existing.len() {
            let r = self.existing_can_add(e, pid, pod);
            if traced {
                let target = format!(
                    "existing node {}",
                    self.input.nodes[self.existing[e].node].name
                );
                self.note(pid, target, r.as_ref().map(|_| ()).map_err(Clone::clone));
            }
            if let Ok(reqs) = r {
                let data = &self.data[pid];
                let node = &mut self.existing[e];
                res::sub(&mut node.remaining, &data.requests);
                node.pods.push(pid);
                node.host_ports.extend(pod.host_ports.iter().cloned());
                let taints = node.taints.clone();
                self.topology.record(pid, pod, &taints, &reqs);
                self.existing[e].reqs = reqs;
                self.placements[pid] = Some(Placement::Existing(e));
                return Ok(());
            }
        }
        // In-flight NodeClaims, fewest pods first, in the order Go's sort leaves them.
        if self.claims.len() <= GO_SORT_EXACT {
            let claims = &self.claims;
            crate::gosort::sort_slice(&mut self.order, |&a, &b| {
                claims[a].pods.len() < claims[b].pods.len()
            });
        }
        let order = std::mem::take(&mut self.order);
        let mut chosen = None;
        // Exact prefilters, prepared once per pod: hostname (anti-)affinity/spread counts, and
        // the topology verdict for claims already narrowed to one domain of a key.
        let host_plan = self.topology.host_plan(pid, pod);
        let keys: Vec<usize> = self
            .topology
            .keys_for(pid, pod)
            .iter()
            .filter_map(|k| self.topo_keys.iter().position(|t| t == k))
            .collect();
        let mut memo: Vec<(usize, u32, bool)> = Vec::new();
        for &c in &order {
            let count = self.claims[c].pods.len();
            if !traced {
                let claim = &self.claims[c];
                if !self.topology.host_ok(&host_plan, claim.host) {
                    continue;
                }
                let mut skip = false;
                for &ki in &keys {
                    let d = claim.singles[ki];
                    if d == u32::MAX {
                        continue;
                    }
                    let ok = match memo.iter().find(|(i, dd, _)| *i == ki && *dd == d) {
                        Some((_, _, ok)) => *ok,
                        None => {
                            let domain = self.topology.domain_name(d).to_owned();
                            let ok = self.topology.key_allows(
                                pid,
                                pod,
                                &self.data[pid].strict,
                                &self.topo_keys[ki],
                                &domain,
                            );
                            memo.push((ki, d, ok));
                            ok
                        }
                    };
                    if !ok {
                        skip = true;
                        break;
                    }
                }
                if skip {
                    continue;
                }
            }
            let r = self.claim_can_add(c, pid, pod, true);
            if traced {
                let target = format!(
                    "in-flight NodeClaim {} (nodepool {}, {count} pods)",
                    self.claims[c].hostname, self.pools[self.claims[c].pool].name
                );
                let outcome = match &r {
                    Ok(_) => Ok(()),
                    Err(reason) => Err(reason.clone().unwrap_or_default()),
                };
                self.note(pid, target, outcome);
            }
            if let Ok(ok) = r {
                chosen = Some((c, ok));
                break;
            }
        }
        self.order = order;
        if let Some((c, (reqs, types))) = chosen {
            self.claim_add(c, pid, pod, reqs, types);
            return Ok(());
        }
        if self.pools.is_empty() {
            return Err(PodError::general(
                "nodepool requirements filtered out all available instance types",
            ));
        }
        let mut errs = Vec::new();
        for p in 0..self.pools.len() {
            let name = self.pools[p].name.clone();
            let target = format!("new NodeClaim from nodepool {name}");
            match self.new_claim(p, pid, pod) {
                Ok(()) => {
                    self.note(pid, target, Ok(()));
                    return Ok(());
                }
                Err(reason) => {
                    self.note(pid, target, Err(reason.clone()));
                    errs.push((name, reason));
                }
            }
        }
        Err(PodError {
            general: None,
            pools: errs,
        })
    }

    fn existing_can_add(
        &mut self,
        e: usize,
        pid: usize,
        pod: &Pod,
    ) -> Result<Requirements, String> {
        let node = &self.existing[e];
        if let Some(t) = untolerated(&node.taints, &pod.tolerations) {
            return Err(format!("untolerated taint {t}"));
        }
        if let Some(p) = pod.host_ports.iter().find(|p| node.host_ports.contains(p)) {
            return Err(format!("host port {}/{} in use", p.0, p.1));
        }
        let data = &self.data[pid];
        if node.remaining.iter().any(|v| *v < 0) || !res::fits(&data.requests, &node.remaining) {
            return Err(format!(
                "exceeds node resources (needs {}, has {})",
                self.describe(&data.requests),
                self.describe(&node.remaining)
            ));
        }
        if let Err(c) = node.reqs.compatible(&data.reqs, false) {
            return Err(format!("incompatible requirements: {c}"));
        }
        let host = node.host;
        if !self.topology.hostname_allows(pid, pod, host) {
            return Err("pod (anti-)affinity or topology spread on kubernetes.io/hostname".into());
        }
        let node = &self.existing[e];
        let topo = self
            .topology
            .domains_for(
                pid,
                pod,
                &data.strict,
                |k| merged(&node.reqs, &data.reqs, k),
                true,
            )
            .map_err(|e| e.to_string())?;
        check_topology(&node.reqs, &data.reqs, &topo, false)?;
        let mut base = node.reqs.clone();
        base.add_all(&data.reqs);
        for (k, d) in topo {
            base.add(&k, d);
        }
        Ok(base)
    }

    fn describe(&self, r: &[i64]) -> String {
        self.index
            .to_map(r)
            .iter()
            .map(|(k, v)| format!("{k}={}", format_quantity(k, *v)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn compat_bits(&mut self, p: usize, reqs: &Requirements) -> Bits {
        let pool = &mut self.pools[p];
        let mut bits = pool.all.clone();
        for (k, r) in reqs.iter() {
            if k == HOSTNAME {
                continue;
            }
            let by_req = pool.compat_cache.entry(k.to_owned()).or_default();
            if !by_req.contains_key(r) {
                let mut b = vec![0u64; pool.all.len()];
                for (i, t) in pool.types.iter().enumerate() {
                    let ok = match self.cat_reqs[t.cat].get_ref(k) {
                        None => true,
                        Some(tr) => {
                            tr.has_intersection(r)
                                || (matches!(
                                    r.operator(),
                                    Operator::NotIn | Operator::DoesNotExist
                                ) && matches!(
                                    tr.operator(),
                                    Operator::NotIn | Operator::DoesNotExist
                                ))
                        }
                    };
                    if ok {
                        bits_set(&mut b, i);
                    }
                }
                by_req.insert(r.clone(), b);
            }
            if let Some(b) = by_req.get(r) {
                bits_and(&mut bits, b);
            }
        }
        bits
    }

    fn offer_bits(&mut self, p: usize, reqs: &Requirements) -> Bits {
        let zr = reqs.get(labels::ZONE);
        let cr = reqs.get(labels::CAPACITY_TYPE);
        let input = self.input;
        let pool = &mut self.pools[p];
        let inner = pool.offer_cache.entry(zr.clone()).or_default();
        if let Some(b) = inner.get(&cr) {
            return b.clone();
        }
        let mut b = vec![0u64; pool.all.len()];
        for (i, t) in pool.types.iter().enumerate() {
            let it = &input.catalog.types()[t.cat];
            if it
                .offerings
                .iter()
                .any(|o| o.available && zr.has(&o.zone) && cr.has(o.capacity_type.as_str()))
            {
                bits_set(&mut b, i);
            }
        }
        inner.insert(cr, b.clone());
        b
    }

    fn max_net(&self, p: usize, types: &Bits) -> Res {
        let pool = &self.pools[p];
        let mut m = vec![i64::MIN; self.index.len()];
        for t in bits_iter(types) {
            res::max_into(&mut m, &pool.types[t].net);
        }
        m
    }

    /// Whether `pod` can join claim `c`. `Err(None)` for a rejection nobody reads (in-flight
    /// claims; upstream drops those errors), `Err(Some(reason))` otherwise.
    #[allow(clippy::type_complexity)]
    fn claim_can_add(
        &mut self,
        c: usize,
        pid: usize,
        pod: &Pod,
        quiet: bool,
    ) -> Result<(Requirements, Bits), Option<String>> {
        let traced = self.trace_pod == Some(pid);
        let say = |s: String| if quiet && !traced { None } else { Some(s) };
        let claim = &self.claims[c];
        let p = claim.pool;
        if let Some(t) = untolerated(&self.pools[p].taints, &pod.tolerations) {
            return Err(say(format!("untolerated taint {t}")));
        }
        if let Some(hp) = pod
            .host_ports
            .iter()
            .find(|hp| claim.host_ports.contains(hp))
        {
            return Err(say(format!("host port {}/{} in use", hp.0, hp.1)));
        }
        // Upstream's order: taints, requirements, topology, instance types. The two cheap
        // screens below (hostname counts, room in the largest remaining type) are necessary
        // conditions of the later steps, so they change no verdict; when the reason is read
        // they come after the requirement check, so the reported cause is upstream's.
        let fast = quiet && !traced;
        let data = &self.data[pid];
        if !fast && let Err(conflict) = claim.reqs.compatible(&data.reqs, true) {
            return Err(Some(format!("incompatible requirements: {conflict}")));
        }
        let host = claim.host;
        if fast && !self.topology.hostname_allows(pid, pod, host) {
            return Err(None);
        }
        let claim = &self.claims[c];
        let data = &self.data[pid];
        let total = res::plus(&claim.requests, &data.requests);
        if fast && !res::fits(&total, &claim.max_net) {
            return Err(None);
        }
        if fast && claim.reqs.compatible(&data.reqs, true).is_err() {
            return Err(None);
        }
        let topo = self
            .topology
            .domains_for(
                pid,
                pod,
                &data.strict,
                |k| merged(&claim.reqs, &data.reqs, k),
                !quiet || traced,
            )
            .map_err(|e| {
                if quiet && !traced {
                    None
                } else {
                    Some(e.to_string())
                }
            })?;
        check_topology(&claim.reqs, &data.reqs, &topo, true)
            .map_err(|e| if quiet && !traced { None } else { Some(e) })?;
        let mut base = claim.reqs.clone();
        base.add_all(&data.reqs);
        for (k, d) in topo {
            base.add(&k, d);
        }
        let claim = &self.claims[c];
        let mut candidates = claim.types.clone();
        if base != claim.reqs {
            let compat = self.compat_bits(p, &base);
            let offer = self.offer_bits(p, &base);
            bits_and(&mut candidates, &compat);
            bits_and(&mut candidates, &offer);
        }
        let pool = &self.pools[p];
        let mut kept = vec![0u64; candidates.len()];
        for t in bits_iter(&candidates) {
            let ty = &pool.types[t];
            if ty.alloc_ok && res::fits(&total, &ty.net) {
                bits_set(&mut kept, t);
            }
        }
        if bits_is_empty(&kept) {
            let reason = if quiet && !traced {
                None
            } else {
                let (_, msg) = self.filter_error(p, &self.claims[c].types.clone(), &base, &total);
                Some(msg)
            };
            return Err(reason);
        }
        if base.has_min_values()
            && let Err(msg) = self.min_values_ok(p, &kept, &base)
        {
            return Err(say(msg));
        }
        Ok((base, kept))
    }

    fn min_values_ok(&self, p: usize, kept: &Bits, reqs: &Requirements) -> Result<(), String> {
        let pool = &self.pools[p];
        let mut short = Vec::new();
        for (k, r) in reqs.iter() {
            let Some(min) = r.min_values else { continue };
            let mut values: BTreeSet<&str> = BTreeSet::new();
            for t in bits_iter(kept) {
                if let Some(tr) = self.cat_reqs[pool.types[t].cat].get_ref(k) {
                    values.extend(tr.values());
                }
            }
            if values.len() < min {
                short.push(format!("{k} has {} of minValues {min}", values.len()));
            }
        }
        if short.is_empty() {
            Ok(())
        } else {
            Err(format!("minValues not met: {}", short.join(", ")))
        }
    }

    /// Why no type in `types` takes `total` under `reqs` (`InstanceTypeFilterError`).
    fn filter_error(
        &mut self,
        p: usize,
        types: &Bits,
        reqs: &Requirements,
        total: &[i64],
    ) -> (bool, String) {
        let compat = self.compat_bits(p, reqs);
        let offer = self.offer_bits(p, reqs);
        let pool = &self.pools[p];
        let (mut req_met, mut fits, mut has_offer) = (false, false, false);
        let (mut req_fit, mut req_offer, mut fit_offer) = (false, false, false);
        let mut best: Vec<i64> = vec![i64::MIN; self.index.len()];
        let mut compatible_count = 0;
        for t in bits_iter(types) {
            let c = compat[t / 64] >> (t % 64) & 1 == 1;
            let o = offer[t / 64] >> (t % 64) & 1 == 1;
            let ty = &pool.types[t];
            let f = ty.alloc_ok && res::fits(total, &ty.net);
            req_met |= c;
            has_offer |= o;
            fits |= f && o;
            req_fit |= c && f && !o;
            req_offer |= c && o && !f;
            fit_offer |= f && o && !c;
            if c && o {
                compatible_count += 1;
                res::max_into(&mut best, &ty.net);
            }
        }
        let need = |this: &Self| {
            let names = this.index.names();
            let mut short: Vec<String> = Vec::new();
            let mut rest: Vec<String> = Vec::new();
            for (i, v) in total.iter().enumerate() {
                if *v <= 0 {
                    continue;
                }
                let s = format!("{}>={}", names[i], format_quantity(&names[i], *v));
                if compatible_count > 0 && *v > best[i] {
                    short.push(s);
                } else {
                    rest.push(s);
                }
            }
            short.extend(rest);
            format!("no instance type has {}", short.join(" and "))
        };
        let offering = || {
            format!(
                "no instance type has an offering in {} {} / {} {}",
                labels::ZONE,
                reqs.get(labels::ZONE),
                labels::CAPACITY_TYPE,
                reqs.get(labels::CAPACITY_TYPE)
            )
        };
        let msg = if !req_met {
            format!("incompatible requirements: no instance type meets {reqs}")
        } else if !has_offer {
            offering()
        } else if !fits {
            need(self)
        } else if req_fit {
            format!("{} among the types that meet the requirements", offering())
        } else if fit_offer || req_offer {
            format!(
                "{} among the types that meet the requirements ({reqs})",
                need(self)
            )
        } else {
            format!("no instance type meets the requirements, has room and an offering ({reqs})")
        };
        (req_met, msg)
    }

    fn claim_add(&mut self, c: usize, pid: usize, pod: &Pod, reqs: Requirements, types: Bits) {
        let max_net = self.max_net(self.claims[c].pool, &types);
        let data = &self.data[pid];
        let claim = &mut self.claims[c];
        let old = claim.pods.len();
        res::add(&mut claim.requests, &data.requests);
        claim.reqs = reqs;
        claim.types = types;
        claim.max_net = max_net;
        claim.pods.push(pid);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        let (host, pool) = (claim.host, claim.pool);
        if old == 0 {
            self.order.push(c);
        }
        if self.claims.len() > GO_SORT_EXACT {
            // What a stable sort by pod count does after this one change: a claim that gained
            // a pod moves to the front of its new count's block; a new one to the end of the
            // one-pod block.
            let pos = self.order.iter().rposition(|&x| x == c).unwrap_or(0);
            self.order.remove(pos);
            let claims = &self.claims;
            let at = if old == 0 {
                self.order.partition_point(|&x| claims[x].pods.len() <= 1)
            } else {
                self.order.partition_point(|&x| claims[x].pods.len() <= old)
            };
            self.order.insert(at, c);
        }
        let claim = &self.claims[c];
        debug_assert_eq!((claim.host, claim.pool), (host, pool));
        let taints = self.pools[pool].taints.clone();
        let reqs = claim.reqs.clone();
        let singles: Vec<u32> = self
            .topo_keys
            .iter()
            .map(|k| {
                reqs.get_ref(k)
                    .and_then(|r| r.single_value())
                    .map_or(u32::MAX, |d| self.topology.domain_id(d))
            })
            .collect();
        self.claims[c].singles = singles;
        self.topology.register_host(host);
        self.topology.record(pid, pod, &taints, &reqs);
        self.placements[pid] = Some(Placement::Claim(c));
    }

    fn within_limits(&mut self, p: usize) -> Bits {
        if let Some(b) = &self.pools[p].within_limits {
            return b.clone();
        }
        let pool = &self.pools[p];
        let mut b = vec![0u64; pool.all.len()];
        for (i, t) in pool.types.iter().enumerate() {
            if pool
                .remaining
                .iter()
                .all(|(slot, rem)| t.capacity[*slot] <= *rem)
            {
                bits_set(&mut b, i);
            }
        }
        self.pools[p].within_limits = Some(b.clone());
        b
    }

    fn limit_error(&self, p: usize) -> String {
        let pool = &self.pools[p];
        let blocking: Vec<&(usize, i64)> = pool
            .remaining
            .iter()
            .filter(|(slot, rem)| pool.types.iter().all(|t| t.capacity[*slot] > *rem))
            .collect();
        let shown: Vec<&(usize, i64)> = if blocking.is_empty() {
            pool.remaining.iter().collect()
        } else {
            blocking
        };
        let names = self.index.names();
        let parts: Vec<String> = shown
            .iter()
            .map(|(slot, _)| {
                let n = &names[*slot];
                format!(
                    "{n}={}",
                    pool.limits_written.get(n).cloned().unwrap_or_default()
                )
            })
            .collect();
        format!("nodepool {} limit {} exceeded", pool.name, parts.join(", "))
    }

    fn new_claim(&mut self, p: usize, pid: usize, pod: &Pod) -> Result<(), String> {
        if self.pools[p].remaining_nodes.is_some_and(|n| n <= 0) {
            let limit = self.pools[p]
                .limits_written
                .get("nodes")
                .cloned()
                .unwrap_or_default();
            return Err(format!(
                "nodepool {} limit nodes={limit} exceeded",
                self.pools[p].name
            ));
        }
        let types = self.within_limits(p);
        if bits_is_empty(&types) {
            return Err(self.limit_error(p));
        }
        let hostname = format!("hostname-placeholder-{:04}", self.claims.len() + 1);
        let host = self.topology.domain_id(&hostname);
        let mut reqs = self.pools[p].template.clone();
        reqs.add(HOSTNAME, Requirement::single(&hostname));
        let max_net = self.max_net(p, &types);
        let claim = Claim {
            pool: p,
            hostname,
            host,
            reqs,
            types,
            requests: self.index.zero(),
            max_net,
            pods: Vec::new(),
            host_ports: Vec::new(),
            singles: vec![u32::MAX; self.topo_keys.len()],
        };
        self.claims.push(claim);
        let c = self.claims.len() - 1;
        match self.claim_can_add(c, pid, pod, false) {
            Ok((reqs, types)) => {
                self.claim_add(c, pid, pod, reqs, types);
                // Pessimistic limits: the claim may launch as its largest remaining type.
                let pool = &mut self.pools[p];
                let claim = &self.claims[c];
                for (slot, rem) in &mut pool.remaining {
                    let max = bits_iter(&claim.types)
                        .map(|t| pool.types[t].capacity[*slot])
                        .max()
                        .unwrap_or(0);
                    *rem -= max;
                }
                if let Some(n) = pool.remaining_nodes.as_mut() {
                    *n -= 1;
                }
                pool.within_limits = None;
                Ok(())
            }
            Err(reason) => {
                self.claims.pop();
                Err(reason.unwrap_or_else(|| "cannot schedule".into()))
            }
        }
    }

    fn finish(mut self, mut errors: BTreeMap<usize, String>) -> Outcome {
        let input = self.input;
        let mut claims = Vec::new();
        let mut price_cache: HashMap<(usize, Requirement, Requirement), Vec<f64>> = HashMap::new();
        for c in 0..self.claims.len() {
            let claim = self.claims[c].clone();
            let pool = &self.pools[claim.pool];
            let mut reqs = claim.reqs.clone();
            reqs.remove(HOSTNAME);
            reqs.remove(labels::REGISTERED);
            reqs.remove(labels::INITIALIZED);
            // Smallest DaemonSet overhead among the groups that still have a type.
            let mut daemon: Option<Res> = None;
            for t in bits_iter(&claim.types) {
                let o = &pool.group_overhead[pool.types[t].group];
                match daemon.as_mut() {
                    None => daemon = Some(o.clone()),
                    Some(d) => res::min_into(d, o),
                }
            }
            let mut requests = claim.requests.clone();
            if let Some(d) = daemon {
                res::add(&mut requests, &d);
            }
            // Cheapest compatible available offering first (OrderByPrice), then truncate.
            let zr = reqs.get(labels::ZONE);
            let cr = reqs.get(labels::CAPACITY_TYPE);
            let prices = price_cache
                .entry((claim.pool, zr.clone(), cr.clone()))
                .or_insert_with(|| {
                    pool.types
                        .iter()
                        .map(|t| {
                            input.catalog.types()[t.cat]
                                .offerings
                                .iter()
                                .filter(|o| {
                                    o.available
                                        && zr.has(&o.zone)
                                        && cr.has(o.capacity_type.as_str())
                                })
                                .map(|o| o.price)
                                .fold(f64::MAX, f64::min)
                        })
                        .collect::<Vec<f64>>()
                });
            let mut types: Vec<(f64, usize)> = bits_iter(&claim.types)
                .map(|t| (prices[t], pool.types[t].cat))
                .collect();
            types.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            types.truncate(input.options.max_instance_types);
            let kept: Vec<usize> = types.iter().map(|(_, ci)| *ci).collect();
            if reqs.has_min_values() {
                let mut short = Vec::new();
                for (k, r) in reqs.iter() {
                    let Some(min) = r.min_values else { continue };
                    let values: BTreeSet<&str> = kept
                        .iter()
                        .filter_map(|ci| self.cat_reqs[*ci].get_ref(k))
                        .flat_map(|r| r.values())
                        .collect();
                    if values.len() < min {
                        short.push(k.to_owned());
                    }
                }
                if !short.is_empty() {
                    for &pid in &claim.pods {
                        errors.insert(
                            pid,
                            format!(
                                "nodepool {} could not meet minValues for {} within {} instance types",
                                pool.name,
                                short.join(", "),
                                input.options.max_instance_types
                            ),
                        );
                        self.placements[pid] = None;
                    }
                    continue;
                }
            }
            claims.push(ClaimResult {
                pool: pool.name.clone(),
                pool_index: pool.input,
                requirements: reqs,
                types: kept,
                requests: self.index.to_map(&requests),
                pods: claim.pods.clone(),
            });
        }
        let existing = self
            .existing
            .iter()
            .map(|e| (e.node, e.pods.clone()))
            .collect();
        let trace = self.trace_pod.map(|_| std::mem::take(&mut self.trace));
        Outcome {
            claims,
            existing,
            errors,
            warnings: self.warnings,
            trace,
            placements: self.placements,
        }
    }
}

/// The launch the AWS provider would make for a claim: after the compatible/available,
/// exotic-instance and spot-price filters, the capacity type (spot when any compatible spot
/// offering remains), then the cheapest offering of the cheapest type among the first
/// `launch_instance_types` by price.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub instance_type: usize,
    pub capacity_type: CapacityType,
    pub zone: String,
    pub price: f64,
    /// Types left after the launch filters (before the 60-type cut).
    pub candidates: usize,
}

fn offers<'c>(
    it: &'c InstanceType,
    zr: &'c Requirement,
    cr: &'c Requirement,
    ct: Option<CapacityType>,
) -> impl Iterator<Item = &'c kk_catalog::Offering> + 'c {
    it.offerings.iter().filter(move |o| {
        o.available
            && zr.has(&o.zone)
            && cr.has(o.capacity_type.as_str())
            && ct.is_none_or(|c| c == o.capacity_type)
    })
}

pub fn launch(
    catalog: &Catalog,
    claim: &ClaimResult,
    alloc: impl Fn(usize) -> BTreeMap<String, i64>,
    options: &Options,
) -> Option<Launch> {
    let reqs = &claim.requirements;
    let zr = reqs.get(labels::ZONE);
    let cr = reqs.get(labels::CAPACITY_TYPE);
    let types = catalog.types();
    let compatible_offer = |ci: usize, ct: Option<CapacityType>| offers(&types[ci], &zr, &cr, ct);
    // CompatibleAvailableFilter.
    let mut kept: Vec<usize> = claim
        .types
        .iter()
        .copied()
        .filter(|&ci| {
            let a = alloc(ci);
            claim
                .requests
                .iter()
                .all(|(k, v)| *v <= a.get(k).copied().unwrap_or(0))
                && compatible_offer(ci, None).next().is_some()
        })
        .collect();
    let min_values = reqs.has_min_values();
    // ExoticInstanceTypeFilter: drop metal and GPU/accelerator types when others remain.
    if !min_values {
        let generic: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|&ci| !is_exotic(&types[ci]))
            .collect();
        if !generic.is_empty() {
            kept = generic;
        }
    }
    let both = cr.has("spot") && cr.has("on-demand");
    // SpotOfferingFilter: no spot offering dearer than the cheapest on-demand one.
    let mut spot_cap = f64::MAX;
    if both && !min_values {
        let cheapest_od = kept
            .iter()
            .flat_map(|&ci| compatible_offer(ci, Some(CapacityType::OnDemand)))
            .map(|o| o.price)
            .fold(f64::MAX, f64::min);
        let any_spot = kept.iter().any(|&ci| {
            compatible_offer(ci, Some(CapacityType::Spot))
                .next()
                .is_some()
        });
        if cheapest_od < f64::MAX && any_spot {
            spot_cap = cheapest_od;
        }
    }
    let capacity_type = if cr.has("spot")
        && kept
            .iter()
            .any(|&ci| compatible_offer(ci, Some(CapacityType::Spot)).any(|o| o.price <= spot_cap))
    {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    };
    let offer_price = |ci: usize| {
        compatible_offer(ci, Some(capacity_type))
            .filter(|o| capacity_type != CapacityType::Spot || o.price <= spot_cap)
            .map(|o| o.price)
            .fold(f64::MAX, f64::min)
    };
    let mut priced: Vec<(f64, usize)> = kept
        .iter()
        .map(|&ci| (offer_price(ci), ci))
        .filter(|(p, _)| *p < f64::MAX)
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let candidates = priced.len();
    priced.truncate(options.launch_instance_types);
    let &(price, ci) = priced.first()?;
    let zone = compatible_offer(ci, Some(capacity_type))
        .filter(|o| o.price == price)
        .map(|o| o.zone.to_string())
        .next()?;
    Some(Launch {
        instance_type: ci,
        capacity_type,
        zone,
        price,
        candidates,
    })
}
