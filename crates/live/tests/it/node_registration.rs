//! The node registration policy (render's `cloud/node-registration-policy.yaml`, finding #5 of
//! issue 24), enforced by the testbed's real apiserver (Node authorizer and NodeRestriction
//! on). Every call is made as a node: the admin impersonates `system:node:<name>` in
//! `system:nodes`, which is what a holder of the node role or of a join credential becomes.
//! Each attack a rogue instance would try is refused (dropping its taint later by the
//! apiserver's own NodeRestriction); a proper registration, Karpenter removing
//! its taint, and a Kubean-built node (exempt) go through.
//!
//! One test function: the policy has a fixed name.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Node;
use kk_testkit::testbed::require;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn node(name: &str, provider_id: Option<&str>, tainted: bool) -> Node {
    node_with_effect(name, provider_id, tainted.then_some("NoExecute"))
}

/// A Node tainted `karpenter.sh/unregistered` with `effect`, or untainted.
fn node_with_effect(name: &str, provider_id: Option<&str>, effect: Option<&str>) -> Node {
    let mut spec = json!({});
    if let Some(id) = provider_id {
        spec["providerID"] = json!(id);
    }
    if let Some(effect) = effect {
        spec["taints"] = json!([{ "key": "karpenter.sh/unregistered", "effect": effect }]);
    }
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).unwrap()
}

fn refused_by_policy(what: &str, result: Result<Node, kube::Error>) {
    match result {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("kubean-karpenter-node-registration") =>
        {
            eprintln!("refused as expected: {what}: {}", s.message);
        }
        other => panic!("{what}: expected the policy's 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_registers_only_tainted_as_its_own_instance_and_cannot_untaint_itself() {
    let Some(testbed) = require(&repo(), "node registration policy") else {
        return;
    };
    let admin = admin(&testbed).await;
    let objects: Vec<(String, Value)> = kk_render::node_registration::manifests()
        .into_iter()
        .map(|o| ("cloud/node-registration-policy.yaml".to_owned(), o))
        .collect();
    kk_live::apply::apply_all(
        &admin,
        &objects,
        &kk_live::apply::ApplyOptions {
            force_conflicts: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let nodes_admin: Api<Node> = Api::all(admin.clone());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };

    // The policy takes effect within moments: wait until an untainted registration is refused.
    let probe = instance();
    let probe_nodes: Api<Node> = Api::all(as_node(&testbed, &probe).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while probe_nodes
        .create(
            &dry,
            &node(&probe, Some(&format!("aws:///us-east-1a/{probe}")), false),
        )
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the policy never took effect");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let me = instance();
    let mine = format!("aws:///us-east-1a/{me}");
    let nodes: Api<Node> = Api::all(as_node(&testbed, &me).await);
    let create = |n: Node| {
        let nodes = nodes.clone();
        async move { nodes.create(&PostParams::default(), &n).await }
    };
    // 1. Ready to take pods at once: no karpenter.sh/unregistered taint.
    refused_by_policy(
        "register without the unregistered taint",
        create(node(&me, Some(&mine), false)).await,
    );
    // 1b. The right key with an effect that filters nothing (issue 47 item 4): PreferNoSchedule
    // only discourages the scheduler, NoSchedule still admits tolerating or directly bound
    // pods and keeps running ones; only NoExecute is what Karpenter registers with.
    for effect in ["PreferNoSchedule", "NoSchedule"] {
        refused_by_policy(
            &format!("register with karpenter.sh/unregistered:{effect}"),
            create(node_with_effect(&me, Some(&mine), Some(effect))).await,
        );
    }
    // The same Node with NoExecute, as a dry run (the real create comes below): admitted, so
    // the refusals above differ from success only in the effect.
    nodes
        .create(&dry, &node_with_effect(&me, Some(&mine), Some("NoExecute")))
        .await
        .expect("karpenter.sh/unregistered:NoExecute is admitted");
    // 2. Posing as another instance, or as none.
    refused_by_policy(
        "register with another instance's providerID",
        create(node(
            &me,
            Some(&format!("aws:///us-east-1a/{}", instance())),
            true,
        ))
        .await,
    );
    refused_by_policy(
        "register with a providerID that only ends like the name",
        create(node(&me, Some(&format!("aws:///us-east-1a/x{me}")), true)).await,
    );
    refused_by_policy(
        "register without a providerID",
        create(node(&me, None, true)).await,
    );
    // What a real node does goes through.
    create(node(&me, Some(&mine), true))
        .await
        .expect("a proper registration");
    // 3. The node drops the taint itself (it has no NodeClaim, so Karpenter never would):
    // NodeRestriction refuses it (a node may not change its taints), no policy of ours needed.
    let untaint = json!({ "spec": { "taints": [] } });
    match nodes
        .patch(&me, &PatchParams::default(), &Patch::Merge(&untaint))
        .await
    {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("not allowed to modify taints") =>
        {
            eprintln!(
                "refused as expected (NodeRestriction): untaint itself: {}",
                s.message
            )
        }
        other => panic!("untaint itself: expected NodeRestriction's 403, got {other:?}"),
    }
    let stored = nodes_admin.get(&me).await.unwrap();
    assert!(
        stored
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/unregistered")),
        "the taint is still there"
    );
    // Karpenter (here the admin, not a node) removes it once a NodeClaim owns the instance.
    nodes_admin
        .patch(&me, &PatchParams::default(), &Patch::Merge(&untaint))
        .await
        .expect("Karpenter may untaint");

    // A Kubean-built node is named after its private DNS name and has no providerID until the
    // cloud controller manager sets it: the policy leaves it alone.
    let kubean = "ip-10-0-1-5.ec2.internal";
    let kubean_nodes: Api<Node> = Api::all(as_node(&testbed, kubean).await);
    kubean_nodes
        .create(&dry, &node(kubean, None, false))
        .await
        .expect("a Kubean node registers as before");

    let _ = nodes_admin.delete(&me, &DeleteParams::default()).await;
    delete_admission_policies(&admin, &objects).await;
}
