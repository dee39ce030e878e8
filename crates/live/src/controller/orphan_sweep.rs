//! Removes instance-named Nodes nothing owns (finding #6 of issue 24).
//!
//! A terminated instance's kubelet credentials (a client certificate, or an IAM session that
//! outlives the instance) can register its Node again after Karpenter removed it. The CCM's
//! node-lifecycle controller looks only at NotReady Nodes, so a Ready impostor would stay and
//! draw pods. The approver's leader therefore deletes every Node named like an EC2 instance
//! (`i-` + 8 or 17 hex digits, the names Karpenter's nodes carry; Kubean-built nodes are never
//! named so, `validate` refuses it) that no NodeClaim names, once it is older than a grace
//! period, and records a Warning Event for it. Karpenter's own nodes are named by their
//! NodeClaim's `status.providerID` from launch on, before their kubelet registers.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};

use kk_spec::names::{instance_id, is_instance_name};

use super::csr_approver::nodeclaims_api;
use crate::token::{TokenError, format_duration};

/// The Event reason on a removed Node.
pub const REASON: &str = "KubeanKarpenterOrphanNode";
/// Where the Events go (Nodes are cluster-scoped; kubectl shows their Events from `default`).
const EVENT_NAMESPACE: &str = "default";

/// A Node to remove, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub name: String,
    pub uid: String,
    pub why: String,
}

/// The instance-named Nodes older than `grace` at `now` that no NodeClaim names, neither by
/// `status.nodeName` nor by the instance in `status.providerID`.
pub fn orphaned(
    nodes: &[Node],
    claims: &[DynamicObject],
    now: jiff::Timestamp,
    grace: Duration,
) -> Vec<Orphan> {
    let owned = |node: &str, provider_instance: Option<&str>| {
        claims.iter().any(|c| {
            let status = &c.data["status"];
            status["nodeName"].as_str() == Some(node)
                || status["providerID"]
                    .as_str()
                    .and_then(instance_id)
                    .is_some_and(|id| id == node || Some(id) == provider_instance)
        })
    };
    let mut out = Vec::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        if !is_instance_name(name) || node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let provider_instance = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(instance_id);
        if owned(name, provider_instance) {
            continue;
        }
        let Some(created) = node.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        let age = now.duration_since(created);
        if age.as_secs_f64() < grace.as_secs_f64() {
            continue;
        }
        out.push(Orphan {
            name: name.to_owned(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            why: format!(
                "no NodeClaim names instance {name} and its Node is {} old (grace {}): a terminated instance's credentials, or a node that never had a NodeClaim",
                format_duration(Duration::from_secs(age.as_secs().max(0) as u64)),
                format_duration(grace)
            ),
        });
    }
    out
}

/// One pass: deletes the [`orphaned`] Nodes (each only if it is still the same object) and
/// records a Warning Event for each; returns their names.
pub async fn remove_orphaned_nodes(
    client: &Client,
    grace: Duration,
) -> Result<Vec<String>, TokenError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| TokenError::from_kube("list Nodes", e))?;
    if !listed
        .items
        .iter()
        .any(|n| n.metadata.name.as_deref().is_some_and(is_instance_name))
    {
        return Ok(Vec::new());
    }
    // NodeClaims after Nodes: a NodeClaim created between the two lists is then seen.
    let claims = nodeclaims_api(client)
        .list(&ListParams::default())
        .await
        .map_err(|e| TokenError::from_kube("list NodeClaims", e))?;
    let now = jiff::Timestamp::now();
    let mut removed = Vec::new();
    for orphan in orphaned(&listed.items, &claims.items, now, grace) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(orphan.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match nodes.delete(&orphan.name, &params).await {
            Ok(_) => {}
            // Gone or replaced since the list: nothing to do now.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => continue,
            Err(e) => {
                return Err(TokenError::from_kube(
                    format!("delete orphaned Node {}", orphan.name),
                    e,
                ));
            }
        }
        tracing::warn!(node = %orphan.name, why = %orphan.why, "removed a Node no NodeClaim owns");
        record_event(client, &orphan, now).await;
        removed.push(orphan.name);
    }
    Ok(removed)
}

/// A Warning Event on the removed Node; failing to record it does not undo the removal.
async fn record_event(client: &Client, orphan: &Orphan, now: jiff::Timestamp) {
    let events: Api<Event> = Api::namespaced(client.clone(), EVENT_NAMESPACE);
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", orphan.name)),
            namespace: Some(EVENT_NAMESPACE.to_owned()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(orphan.name.clone()),
            uid: Some(orphan.uid.clone()),
            ..Default::default()
        },
        reason: Some(REASON.into()),
        message: Some(format!("removed: {}", orphan.why)),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubean-karpenter-csr-approver".into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::warn!(node = %orphan.name, error = %e, "could not record the Event for a removed Node");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, age_secs: i64, provider: Option<&str>) -> Node {
        let created = jiff::Timestamp::from_second(1_000_000 - age_secs).unwrap();
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"providerID": provider},
        }))
        .unwrap();
        n.metadata.creation_timestamp = Some(Time(created));
        n
    }

    fn claim(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"}, "status": status,
        }))
        .unwrap()
    }

    fn names(orphans: Vec<Orphan>) -> Vec<String> {
        orphans.into_iter().map(|o| o.name).collect()
    }

    const NOW: i64 = 1_000_000;
    const GRACE: Duration = Duration::from_secs(300);

    #[test]
    fn an_unowned_instance_node_past_its_grace_is_an_orphan_and_nothing_else_is() {
        let now = jiff::Timestamp::from_second(NOW).unwrap();
        let nodes = [
            node(
                "i-0aaaaaaaaaaaaaaaa",
                600,
                Some("aws:///us-east-1a/i-0aaaaaaaaaaaaaaaa"),
            ),
            node("i-0bbbbbbbbbbbbbbbb", 600, None),
            // Young: its NodeClaim may not have been written yet.
            node("i-0cccccccccccccccc", 60, None),
            // Owned through providerID, through nodeName, and through its own providerID.
            node("i-0dddddddddddddddd", 600, None),
            node("i-0eeeeeeeeeeeeeeee", 600, None),
            node(
                "i-0ffffffffffffffff",
                600,
                Some("aws:///us-east-1a/i-0123456789abcdef0"),
            ),
            // A Kubean-built node: never ours to remove.
            node("control-plane-1", 99_999, None),
        ];
        let claims = [
            claim(json!({"providerID": "aws:///us-east-1b/i-0dddddddddddddddd"})),
            claim(json!({"nodeName": "i-0eeeeeeeeeeeeeeee"})),
            claim(json!({"providerID": "aws:///us-east-1a/i-0123456789abcdef0"})),
            claim(json!({})),
        ];
        assert_eq!(
            names(orphaned(&nodes, &claims, now, GRACE)),
            ["i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb"]
        );
        // Without NodeClaims every instance Node past its grace goes.
        assert_eq!(orphaned(&nodes, &[], now, GRACE).len(), 5);
    }

    #[test]
    fn a_node_being_deleted_is_left_alone() {
        let now = jiff::Timestamp::from_second(NOW).unwrap();
        let mut n = node("i-0aaaaaaaaaaaaaaaa", 600, None);
        n.metadata.deletion_timestamp = Some(Time(now));
        assert!(orphaned(&[n], &[], now, GRACE).is_empty());
    }
}
