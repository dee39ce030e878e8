//! doctor's `drift` check against the testbed's real apiserver (Karpenter's CRDs, no Karpenter):
//! drifted NodeClaims written as Karpenter writes them, and what holds each — a pod with
//! `karpenter.sh/do-not-disrupt`, a PDB that allows no disruption, a Drifted budget of zero —
//! next to one being replaced.

use std::process::Command;

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kk_testkit::repo;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

fn node(name: &str, pool: &str, disrupted: bool) -> Node {
    let taints = if disrupted {
        json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool,
            "kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}"), "taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn condition(kind: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": kind, "message": "",
           "lastTransitionTime": "2026-12-01T00:00:00Z"})
}

fn pod(name: &str, node: &str, do_not_disrupt: bool) -> Pod {
    let annotations = if do_not_disrupt {
        json!({"karpenter.sh/do-not-disrupt": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap()
}

#[test]
fn doctor_names_what_holds_each_drifted_node() {
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "doctor: drift held") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = testbed.admin().await;
        let pp = PostParams::default();
        let dynamic = |kind: &str, plural: &str| -> Api<DynamicObject> {
            let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", kind);
            Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural))
        };
        let pools = dynamic("NodePool", "nodepools");
        for (pool, nodes) in [("drift-tb", "1"), ("drift-tb-held", "0")] {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
                "spec": {"disruption": {"consolidateAfter": "10m", "budgets": [{"nodes": nodes, "reasons": ["Drifted"]}]},
                         "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
                                               "requirements": []}}}
            }))
            .unwrap();
            if let Err(e) = pools.create(&pp, &obj).await {
                assert!(e.to_string().contains("already exists"), "NodePool {pool}: {e}");
            }
        }
        let nodes: Api<Node> = Api::all(client.clone());
        let claims = dynamic("NodeClaim", "nodeclaims");
        // (node, pool, being replaced)
        let fleet = [
            ("drift-tb-pinned", "drift-tb", false),
            ("drift-tb-pdb", "drift-tb", false),
            ("drift-tb-going", "drift-tb", true),
            ("drift-tb-held-a", "drift-tb-held", false),
        ];
        for (name, pool, going) in fleet {
            let _ = nodes.create(&pp, &node(name, pool, going)).await;
            let claim: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
                         "requirements": []}
            }))
            .unwrap();
            let _ = claims.create(&pp, &claim).await;
            let status = json!({"status": {"nodeName": name,
                "providerID": format!("aws:///us-east-1a/i-{name}"),
                "conditions": [condition("Initialized"), condition("Drifted")]}});
            claims
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
        // No controller-manager on the testbed: the default ServiceAccount pod admission wants.
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        let _ = sas.create(&pp, &sa).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let _ = pods
            .create(&pp, &pod("drift-tb-batch", "drift-tb-pinned", true))
            .await;
        let _ = pods
            .create(&pp, &pod("drift-tb-db", "drift-tb-pdb", false))
            .await;
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "drift-tb-db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "drift-tb-db"}}}
        }))
        .unwrap();
        let _ = pdbs.create(&pp, &pdb).await;
        // What the disruption controller would write: one healthy pod, none may go.
        let status = json!({"status": {"currentHealthy": 1, "desiredHealthy": 1,
            "disruptionsAllowed": 0, "expectedPods": 1}});
        pdbs.patch_status("drift-tb-db", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    });

    let spec = repo().join("fixtures/specs/static-minimal.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("doctor")
        .arg(&spec)
        .arg("--kubeconfig")
        .arg(&testbed.kubeconfig)
        .args(["-o", "json"])
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor -o json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "drift")
        .unwrap_or_else(|| panic!("no drift check: {report:#}"))
        .clone();
    let evidence = check["evidence"].to_string();
    assert_eq!(check["status"], "warn", "{check:#}");
    assert!(
        evidence.contains("drift-tb-pinned")
            && evidence.contains(
                "pod default/drift-tb-batch has the karpenter.sh/do-not-disrupt annotation"
            ),
        "{evidence}"
    );
    assert!(
        evidence
            .contains("PDB default/drift-tb-db allows no disruption now (pod default/drift-tb-db)"),
        "{evidence}"
    );
    assert!(
        evidence.contains("pool drift-tb: drift in progress, replacing drift-tb-going"),
        "{evidence}"
    );
    assert!(
        evidence.contains("pool drift-tb-held: 1 drifted node(s) wait and none is being replaced"),
        "{evidence}"
    );
    assert!(!check["fix"].as_str().unwrap_or("").is_empty());
}
