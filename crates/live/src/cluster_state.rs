//! A cluster's state for `plan --disrupt --from-cluster`, read-only: `list` of NodePools,
//! EC2NodeClasses, NodeClaims (karpenter.sh/v1, karpenter.k8s.aws/v1), Nodes, Pods,
//! DaemonSets and PodDisruptionBudgets in every namespace — the same objects as
//! `kubectl get … -A -o yaml`. Nothing is written. A kind the cluster does not serve (no
//! Karpenter CRDs) reads as none.
//!
//! Returned as (name, JSON text) pairs: `List` documents of at most 2,000 objects each (the
//! planner's reader limits a document's size), every item with its `apiVersion` and `kind`.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

/// (group, version, kind, plural) of each kind read (and `top` watches).
pub(crate) const KINDS: [(&str, &str, &str, &str); 7] = [
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses"),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    ("", "v1", "Node", "nodes"),
    ("", "v1", "Pod", "pods"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
];

/// Objects per `List` document.
const CHUNK: usize = 2000;

/// Lists every kind the disruption plan reads. `Err` on anything but "not served".
pub async fn read_state(client: &Client) -> Result<Vec<(String, String)>, kube::Error> {
    read_kinds(client, &KINDS).await.map_err(|(_, e)| e)
}

/// Lists each of `kinds` (group, version, kind, plural) as `List` documents; a kind the
/// cluster does not serve reads as none. `Err` names the plural whose list failed.
pub(crate) async fn read_kinds(
    client: &Client,
    kinds: &[(&'static str, &'static str, &'static str, &'static str)],
) -> Result<Vec<(String, String)>, (&'static str, kube::Error)> {
    let mut out = Vec::new();
    for &(group, version, kind, plural) in kinds {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err((plural, e)),
        };
        let api_version = resource.api_version.clone();
        let items: Vec<Value> = list
            .items
            .into_iter()
            .filter_map(|o| typed(o, &api_version, kind))
            .collect();
        out.extend(list_document(plural, items));
    }
    Ok(out)
}

/// `items` as `List` documents of at most [`CHUNK`] objects, named `cluster:<plural>#<i>`.
pub(crate) fn list_document(plural: &str, items: Vec<Value>) -> Vec<(String, String)> {
    items
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, chunk)| {
            let text = json!({"apiVersion": "v1", "kind": "List", "items": chunk}).to_string();
            (format!("cluster:{plural}#{i}"), text)
        })
        .collect()
}

/// An object as JSON with its `apiVersion` and `kind` (a list's items carry neither).
pub(crate) fn typed(o: DynamicObject, api_version: &str, kind: &str) -> Option<Value> {
    let mut v = serde_json::to_value(o).ok()?;
    let m = v.as_object_mut()?;
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!(kind));
    Some(v)
}
