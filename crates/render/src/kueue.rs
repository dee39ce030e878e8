//! `kueue/`: job queues for the GPU pools that ask for one (`queue`), as Kueue v0.19.2
//! (`kueue.x-k8s.io/v1beta2`) objects: a ResourceFlavor for the pool's nodes, a ClusterQueue
//! whose quota is the pool's limits, and a LocalQueue in each namespace named. Training jobs
//! then wait in the queue instead of sitting Pending past the pool's limit.
//!
//! Not in the apply order: a cluster without Kueue has no such kinds, so ORDER.md has them
//! applied once Kueue is installed.

use kk_spec::{ElasticCluster, Pool};
use serde_json::{Value, json};

use crate::names::MANAGED_BY;
use crate::{Bundle, RenderError};

pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";
/// The Kueue release whose CRDs the objects are checked against.
pub const KUEUE_VERSION: &str = "v0.19.2";

fn labels() -> Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1 })
}

/// The flavor: the pool's nodes (Karpenter labels each with its NodePool) and its taints, which
/// a workload must tolerate to be admitted to it.
fn flavor(pool: &Pool) -> Value {
    let mut node_labels = serde_json::Map::new();
    node_labels.insert(
        kk_karpenter::labels::NODEPOOL.into(),
        pool.name.clone().into(),
    );
    for (key, value) in &pool.labels {
        node_labels.insert(key.clone(), value.clone().into());
    }
    let taints: Vec<Value> = pool
        .taints
        .iter()
        .map(|t| match &t.value {
            Some(value) => json!({ "key": t.key, "value": value, "effect": t.effect }),
            None => json!({ "key": t.key, "effect": t.effect }),
        })
        .collect();
    let mut spec = json!({ "nodeLabels": node_labels });
    if !taints.is_empty() {
        spec["nodeTaints"] = Value::Array(taints);
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": { "name": pool.name, "labels": labels() },
        "spec": spec,
    })
}

/// The quota: every limit of the pool, on its one flavor.
fn cluster_queue(pool: &Pool, namespaces: &[String]) -> Value {
    let resources: Vec<Value> = pool
        .limits
        .iter()
        .map(|(name, quota)| json!({ "name": name, "nominalQuota": quota.as_text() }))
        .collect();
    json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": { "name": pool.name, "labels": labels() },
        "spec": {
            "namespaceSelector": { "matchExpressions": [
                { "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces }
            ] },
            "resourceGroups": [{
                "coveredResources": pool.limits.keys().collect::<Vec<_>>(),
                "flavors": [{ "name": pool.name, "resources": resources }],
            }],
        },
    })
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    for pool in &cluster.spec.pools {
        let Some(queue) = &pool.queue else {
            continue;
        };
        let mut docs = vec![flavor(pool), cluster_queue(pool, &queue.namespaces)];
        for namespace in &queue.namespaces {
            docs.push(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": { "name": namespace, "labels": labels() },
            }));
            docs.push(json!({
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": { "name": pool.name, "namespace": namespace, "labels": labels() },
                "spec": { "clusterQueue": pool.name },
            }));
        }
        bundle.add_yaml(&format!("kueue/{}.yaml", pool.name), &docs)?;
    }
    Ok(())
}
