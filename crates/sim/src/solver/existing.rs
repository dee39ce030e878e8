//! Existing nodes (`existingnode.go`): what each has left once its bound pods and the
//! DaemonSets that would still run there are counted, and whether a pod can join one.

use std::sync::Arc;

use super::fit::with_topology;
use super::prepare::{pod_requests, pod_requirements};
use super::{ExistingNode, Input, PreparedPool, Scheduler};
use crate::labels::{self, HOSTNAME};
use crate::model::{Effect, Node, Pod, Taint, untolerated};
use crate::req::{Requirement, Requirements};
use crate::res::{self, Res, ResIndex};
use crate::topology::BoundPod;

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

/// An existing node as every simulation of the cluster starts it: what it has left once its
/// bound pods and the DaemonSets that would still run there are counted.
#[derive(Debug, Clone)]
pub(super) struct ExistingTemplate {
    pub node: ExistingNode,
    /// What its bound pods and DaemonSets leave of its allocatable.
    pub remaining: Res,
    /// The prepared NodePool it uses up, and by how much (what it advertises).
    pub charge: Option<(usize, Res)>,
}

/// Whether the scheduler counts a node as initialized (or it is not Karpenter's).
fn initialized(n: &Node) -> bool {
    n.pool().is_none()
        || n.labels
            .get(labels::INITIALIZED)
            .is_some_and(|v| v == "true")
}

/// How `sortExistingNodes` orders two existing nodes (by index into the input's): initialized
/// ones first, each part by name.
pub(super) fn existing_order(input: &Input, a: usize, b: usize) -> std::cmp::Ordering {
    let (na, nb) = (&input.nodes[a], &input.nodes[b]);
    initialized(nb)
        .cmp(&initialized(na))
        .then(na.name.cmp(&nb.name))
}

/// The existing nodes, by name, initialized ones first (`sortExistingNodes`), as templates.
pub(super) fn existing_templates(
    input: &Input,
    index: &ResIndex,
    pools: &[PreparedPool],
    bound: &[BoundPod],
    ds_requests: &[Res],
) -> Vec<ExistingTemplate> {
    // Bound pods per node, indexed once: filtering `bound` per node is quadratic at scale.
    let mut bound_by_node: Vec<Vec<&Pod>> = vec![Vec::new(); input.nodes.len()];
    for bp in bound {
        bound_by_node[bp.node].push(&bp.pod);
    }
    let mut out: Vec<ExistingTemplate> = bound_by_node
        .iter()
        .enumerate()
        .map(|(ni, pods)| existing_template(input, index, pools, ni, pods, ds_requests))
        .collect();
    out.sort_by(|a, b| existing_order(input, a.node.node, b.node.node));
    out
}

/// One existing node (`input.nodes[ni]`, with its bound pods) as every simulation starts it.
pub(super) fn existing_template(
    input: &Input,
    index: &ResIndex,
    pools: &[PreparedPool],
    ni: usize,
    bound: &[&Pod],
    ds_requests: &[Res],
) -> ExistingTemplate {
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
    let mut remaining = index.from_map(&node.allocatable);
    let mut host_ports = Vec::new();
    let mut daemon_running = index.zero();
    for pod in bound.iter().copied() {
        let r = pod_requests(index, pod);
        res::sub(&mut remaining, &r);
        if pod.owner.starts_with("ds/") {
            res::add(&mut daemon_running, &r);
        }
        host_ports.extend(pod.host_ports.iter().cloned());
    }
    // DaemonSets that would run here and are not running yet (`NewExistingNode`:
    // compatible DaemonSet requests less the DaemonSet pods already there, at least 0).
    let labels_reqs = Requirements::from_labels(&node.labels);
    let mut daemons = index.zero();
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
    let charge = node.pool().and_then(|pool| {
        let pp = pools.iter().position(|p| p.name == pool)?;
        let cap = index.from_map(if node.capacity.is_empty() {
            &node.allocatable
        } else {
            &node.capacity
        });
        Some((pp, cap))
    });
    ExistingTemplate {
        node: ExistingNode {
            node: ni,
            reqs: Arc::new(reqs),
            taints,
            host: 0,
            pods: Vec::new(),
            host_ports,
        },
        remaining,
        charge,
    }
}

impl Scheduler<'_> {
    /// Adds the existing nodes not `gone`; each uses up its NodePool's limits.
    pub(super) fn add_existing_nodes(&mut self, templates: &[ExistingTemplate], gone: &[bool]) {
        for t in templates {
            if gone.get(t.node.node).copied().unwrap_or(false) {
                continue;
            }
            let host = self.topology.existing_host(t.node.node);
            self.topology.register_host(host);
            if let Some((pool, cap)) = &t.charge {
                self.pools[*pool].limits.charge_node(cap);
            }
            let mut node = t.node.clone();
            node.host = host;
            self.rooms.extend_from_slice(&t.remaining);
            self.existing.push(node);
        }
    }

    /// The requirements the node would have once `pod` joins it, or why it cannot. `detail`
    /// off (the pod is not traced): a rejection is `Err(None)` and nothing is formatted, as
    /// nothing reads why an existing node refused an untraced pod.
    pub(super) fn existing_can_add(
        &mut self,
        e: usize,
        pid: usize,
        pod: &Pod,
        detail: bool,
    ) -> Result<Requirements, Option<String>> {
        let node = &self.existing[e];
        let data = &self.data[pid];
        let slots = self.index.len();
        let room = &self.rooms[e * slots..(e + 1) * slots];
        let fits = |remaining: &[i64]| {
            !remaining.iter().any(|v| *v < 0) && res::fits(&data.requests, remaining)
        };
        // Untraced, only whether every check passes matters: the cheapest, and the one most
        // nodes fail (a full node), goes first.
        if !detail && !fits(room) {
            return Err(None);
        }
        if let Some(t) = untolerated(&node.taints, &pod.tolerations) {
            return Err(detail.then(|| format!("untolerated taint {t}")));
        }
        if let Some(p) = pod.host_ports.iter().find(|p| node.host_ports.contains(p)) {
            return Err(detail.then(|| format!("host port {}/{} in use", p.0, p.1)));
        }
        // Untraced, the first check already said it fits.
        if detail && !fits(room) {
            return Err(Some(format!(
                "exceeds node resources (needs {}, has {})",
                self.describe(&data.requests),
                self.describe(room)
            )));
        }
        if let Err(c) = node.reqs.compatible(&data.reqs, false) {
            return Err(detail.then(|| format!("incompatible requirements: {c}")));
        }
        let host = node.host;
        if !self.topology.hostname_allows(pid, pod, host) {
            return Err(detail.then(|| {
                "pod (anti-)affinity or topology spread on kubernetes.io/hostname".into()
            }));
        }
        with_topology(
            &mut self.topology,
            pid,
            pod,
            data,
            &self.existing[e].reqs,
            detail,
            false,
        )
    }
}
