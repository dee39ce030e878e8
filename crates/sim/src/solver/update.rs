//! Changing a prepared cluster in place: some nodes gone, added or changed (with the pods now
//! bound to them), the rest as they were. Disruption carries out one command per pass, which
//! touches a few nodes of a thousand; preparing the whole cluster again each pass was most of
//! a whole run's time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::existing::{existing_order, existing_template};
use super::prepare::{Prepared, pod_topology_keys, resource_index, topology_keys};
use crate::model::{Node, Pod};
use crate::req::Requirements;
use crate::res::{BASE_NAMES, ResIndex};
use crate::topology::{BoundPod, Cluster, DomainUniverse};

/// A node and every pod bound to it.
type NodeWithPods = (Node, Vec<Pod>);

/// One node's new state for [`Prepared::update`].
#[derive(Debug, Clone)]
pub struct NodeChange {
    pub name: String,
    /// The node and every pod now bound to it; `None`: the node is gone (its pods with it).
    pub now: Option<NodeWithPods>,
}

impl Prepared<'_> {
    /// Applies `changes`: a changed node keeps its place, a new one goes before the first
    /// node whose name sorts after it, a gone one leaves with its bound pods. For an input
    /// whose nodes are in name order (disruption's), the result is what preparing the changed
    /// cluster afresh gives. `false` when it could not be, and `self` is then not to be used:
    /// the change alters the resource names or topology keys the cluster mentions (every
    /// table depends on them), or a new node takes the name an unplaced bound pod waits for.
    pub fn update(&mut self, changes: Vec<NodeChange>) -> bool {
        if changes
            .iter()
            .any(|c| c.now.is_some() && self.orphans.iter().any(|(node, _)| *node == c.name))
        {
            return false;
        }
        let cluster = std::mem::replace(&mut self.cluster, Arc::new(Cluster::new(&[], Vec::new())));
        let Ok(cluster) = Arc::try_unwrap(cluster) else {
            return false;
        };
        let (old_cluster_nodes, old_bound, hosts) = cluster.into_parts();
        let input = self.input.to_mut();
        let old_nodes = std::mem::take(&mut input.nodes);
        let mut by_name: HashMap<String, Option<NodeWithPods>> =
            changes.into_iter().map(|c| (c.name, c.now)).collect();
        // Per old node: unchanged (`None`), gone (`Some(None)`) or changed.
        let status: Vec<Option<Option<NodeWithPods>>> =
            old_nodes.iter().map(|n| by_name.remove(&n.name)).collect();
        let mut added: Vec<NodeWithPods> = by_name.into_values().flatten().collect();
        added.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        // What leaves, to tell whether the resource names and topology keys could change.
        let mut dropped_nodes: Vec<Node> = Vec::new();
        let mut added = added.into_iter().peekable();
        // Unchanged nodes: old index → new. Changed and added ones: new index, their pods.
        let mut kept: Vec<Option<usize>> = vec![None; old_nodes.len()];
        let mut fresh: Vec<(usize, Vec<Pod>)> = Vec::new();
        let mut nodes = Vec::with_capacity(old_nodes.len() + added.len());
        let mut cluster_nodes = Vec::with_capacity(nodes.capacity());
        let push_fresh = |node: Node,
                          pods: Vec<Pod>,
                          nodes: &mut Vec<Node>,
                          cluster_nodes: &mut Vec<(Node, Requirements)>,
                          fresh: &mut Vec<(usize, Vec<Pod>)>| {
            fresh.push((nodes.len(), pods));
            cluster_nodes.push((node.clone(), Requirements::from_labels(&node.labels)));
            nodes.push(node);
        };
        let olds = old_nodes.into_iter().zip(old_cluster_nodes).zip(status);
        for (i, ((node, cluster_node), status)) in olds.enumerate() {
            while let Some((next, _)) = added.peek()
                && next.name < node.name
            {
                let (n, pods) = added.next().expect("peeked");
                push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh);
            }
            match status {
                None => {
                    kept[i] = Some(nodes.len());
                    nodes.push(node);
                    cluster_nodes.push(cluster_node);
                }
                Some(None) => dropped_nodes.push(node),
                Some(Some((n, pods))) => {
                    dropped_nodes.push(node);
                    push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh);
                }
            }
        }
        for (n, pods) in added {
            push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh);
        }
        input.nodes = nodes;
        // Bound pods stay grouped by node in node order, each node's in the order given.
        let mut dropped_pods: Vec<Pod> = Vec::new();
        let mut bound: Vec<BoundPod> = Vec::with_capacity(old_bound.len());
        for bp in old_bound {
            match kept[bp.node] {
                Some(node) => bound.push(BoundPod { pod: bp.pod, node }),
                None => dropped_pods.push(bp.pod),
            }
        }
        let fresh_nodes: Vec<usize> = fresh.iter().map(|(ni, _)| *ni).collect();
        let first_fresh = bound.len();
        for (ni, pods) in fresh {
            bound.extend(pods.into_iter().map(|pod| BoundPod { pod, node: ni }));
        }
        let same = {
            let fresh_pods = bound[first_fresh..].iter().map(|bp| &bp.pod);
            let fresh_nodes = fresh_nodes.iter().map(|&ni| &input.nodes[ni]);
            mentions_unchanged(
                &self.index,
                &self.universe,
                (fresh_nodes, fresh_pods),
                (&dropped_nodes, &dropped_pods),
            )
        };
        bound.sort_by_key(|bp| bp.node);
        if !same {
            // What a fresh preparation would read the same way, or else give up.
            let mentioned = bound
                .iter()
                .map(|bp| &bp.pod)
                .chain(self.orphans.iter().map(|(_, p)| p));
            if resource_index(input, mentioned.clone()) != self.index
                || !topology_keys(input, mentioned)
                    .into_iter()
                    .eq(self.universe.keys().cloned())
            {
                return false;
            }
        }
        // The existing nodes' templates: the unchanged ones renumbered, the rest made anew.
        let mut templates = std::mem::take(&mut self.existing);
        templates.retain_mut(|t| match kept[t.node.node] {
            Some(ni) => {
                t.node.node = ni;
                true
            }
            None => false,
        });
        for ni in fresh_nodes {
            let start = bound.partition_point(|bp| bp.node < ni);
            let end = bound.partition_point(|bp| bp.node <= ni);
            let pods: Vec<&Pod> = bound[start..end].iter().map(|bp| &bp.pod).collect();
            let template = existing_template(
                input,
                &self.index,
                &self.pools,
                ni,
                &pods,
                &self.ds_requests,
            );
            let at = templates.partition_point(|t| {
                existing_order(input, t.node.node, ni) == std::cmp::Ordering::Less
            });
            templates.insert(at, template);
        }
        self.existing = templates;
        self.cluster = Arc::new(Cluster::from_parts(cluster_nodes, bound, hosts));
        true
    }
}

/// Whether a change surely leaves the resource names and topology keys as they were:
/// everything the fresh nodes and pods mention is already known, and everything the dropped
/// ones mention is mentioned again by a fresh one (or is a resource every index has). `false`
/// only means a full look is needed.
fn mentions_unchanged<'n>(
    index: &ResIndex,
    universe: &BTreeMap<String, DomainUniverse>,
    (fresh_nodes, fresh_pods): (
        impl Iterator<Item = &'n Node> + Clone,
        impl Iterator<Item = &'n Pod> + Clone,
    ),
    (dropped_nodes, dropped_pods): (&[Node], &[Pod]),
) -> bool {
    let node_resources = |n: &'n Node| {
        n.allocatable
            .keys()
            .chain(n.capacity.keys())
            .map(String::as_str)
    };
    let fresh_resources = fresh_nodes.flat_map(node_resources).chain(
        fresh_pods
            .clone()
            .flat_map(|p| p.requests.keys().map(String::as_str)),
    );
    let known = index.names();
    if !fresh_resources
        .clone()
        .all(|r| known.iter().any(|k| k == r))
    {
        return false;
    }
    let fresh_keys = fresh_pods.flat_map(pod_topology_keys);
    if !fresh_keys.clone().all(|k| universe.contains_key(k)) {
        return false;
    }
    let dropped_resources = dropped_nodes
        .iter()
        .flat_map(|n| n.allocatable.keys().chain(n.capacity.keys()))
        .chain(dropped_pods.iter().flat_map(|p| p.requests.keys()));
    for r in dropped_resources {
        if !BASE_NAMES.contains(&r.as_str()) && !fresh_resources.clone().any(|f| f == r) {
            return false;
        }
    }
    dropped_pods
        .iter()
        .flat_map(pod_topology_keys)
        .all(|k| fresh_keys.clone().any(|f| f == k))
}
