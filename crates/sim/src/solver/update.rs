//! Changing a prepared cluster in place: some nodes gone, added or changed (with the pods now
//! bound to them), the rest as they were. Disruption carries out one command per pass, which
//! touches a few nodes of a thousand; preparing the whole cluster again each pass was most of
//! a whole run's time.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::existing::{existing_template, sort_existing};
use super::prepare::{Prepared, resource_index, topology_keys};
use crate::model::{Node, Pod};
use crate::req::Requirements;
use crate::topology::{BoundPod, Cluster};

/// One node's new state for [`Prepared::update`].
#[derive(Debug, Clone)]
pub struct NodeChange {
    pub name: String,
    /// The node and every pod now bound to it; `None`: the node is gone (its pods with it).
    pub now: Option<(Node, Vec<Pod>)>,
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
        let (old_cluster_nodes, old_bound) = cluster.into_parts();
        let input = self.input.to_mut();
        let old_nodes = std::mem::take(&mut input.nodes);
        let mut by_name: HashMap<String, Option<(Node, Vec<Pod>)>> =
            changes.into_iter().map(|c| (c.name, c.now)).collect();
        let mut added: Vec<(Node, Vec<Pod>)> = Vec::new();
        {
            let existing: BTreeSet<&str> = old_nodes.iter().map(|n| n.name.as_str()).collect();
            let names: Vec<String> = by_name
                .keys()
                .filter(|n| !existing.contains(n.as_str()))
                .cloned()
                .collect();
            for name in names {
                if let Some(Some(now)) = by_name.remove(&name) {
                    added.push(now);
                }
            }
        }
        added.sort_by(|a, b| a.0.name.cmp(&b.0.name));
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
        for (i, (node, cluster_node)) in old_nodes.into_iter().zip(old_cluster_nodes).enumerate() {
            while let Some((next, _)) = added.peek()
                && next.name < node.name
            {
                let (n, pods) = added.next().expect("peeked");
                push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh);
            }
            match by_name.remove(&node.name) {
                None => {
                    kept[i] = Some(nodes.len());
                    nodes.push(node);
                    cluster_nodes.push(cluster_node);
                }
                Some(None) => {}
                Some(Some((n, pods))) => {
                    push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh)
                }
            }
        }
        for (n, pods) in added {
            push_fresh(n, pods, &mut nodes, &mut cluster_nodes, &mut fresh);
        }
        input.nodes = nodes;
        // Bound pods stay grouped by node in node order, each node's in the order given.
        let mut bound: Vec<BoundPod> = old_bound
            .into_iter()
            .filter_map(|bp| {
                let node = kept[bp.node]?;
                Some(BoundPod { pod: bp.pod, node })
            })
            .collect();
        let fresh_nodes: Vec<usize> = fresh.iter().map(|(ni, _)| *ni).collect();
        for (ni, pods) in fresh {
            bound.extend(pods.into_iter().map(|pod| BoundPod { pod, node: ni }));
        }
        bound.sort_by_key(|bp| bp.node);
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
            templates.push(existing_template(
                input,
                &self.index,
                &self.pools,
                ni,
                &pods,
                &self.ds_requests,
            ));
        }
        sort_existing(input, &mut templates);
        self.existing = templates;
        self.cluster = Arc::new(Cluster::from_parts(cluster_nodes, bound));
        true
    }
}
