//! `kubean-karpenter plan --disrupt --from-cluster` against the testbed's real apiserver (with
//! Karpenter's CRDs): the state is listed through the kubeconfig, and nothing is written.

use std::process::Command;

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kk_testkit::repo;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "karpenter.sh/nodepool": "disrupt-tb", "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true", "karpenter.sh/capacity-type": "on-demand",
            "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a",
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {"capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                   "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

#[test]
fn from_cluster_lists_the_state_and_changes_nothing() {
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "plan --disrupt --from-cluster")
    else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (client, versions) = rt.block_on(async {
        let client = testbed.admin().await;
        let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
        let pools: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "nodepools"));
        let pool: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "disrupt-tb"},
            "spec": {"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s",
                                    "budgets": [{"nodes": "100%"}]},
                     "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
                                           "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}
        }))
        .unwrap();
        let pp = PostParams::default();
        let _ = pools.create(&pp, &pool).await;
        let nodes: Api<Node> = Api::all(client.clone());
        for n in ["disrupt-tb-empty", "disrupt-tb-busy"] {
            let _ = nodes.create(&pp, &node(n)).await;
        }
        // The testbed runs no controller-manager: the namespace's default ServiceAccount, which
        // pod admission looks up, is made here.
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        let _ = sas.create(&pp, &sa).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "disrupt-tb-app", "labels": {"app": "tb"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "tb", "uid": "00000000-0000-0000-0000-000000000001"}]},
            "spec": {"nodeName": "disrupt-tb-busy",
                     "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}
        }))
        .unwrap();
        if let Err(e) = pods.create(&pp, &pod).await {
            eprintln!("create pod: {e}");
        }
        let mut versions = Vec::new();
        for n in ["disrupt-tb-empty", "disrupt-tb-busy"] {
            versions.push(nodes.get(n).await.unwrap().metadata.resource_version);
        }
        versions.push(pods.get("disrupt-tb-app").await.unwrap().metadata.resource_version);
        (client, versions)
    });

    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["plan", "--disrupt", "--from-cluster", "--kubeconfig"])
        .arg(&testbed.kubeconfig)
        .args(["--at", "1m", "-o", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let removed: Vec<&str> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["nodes"].as_array().unwrap())
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert!(removed.contains(&"disrupt-tb-empty"), "{stdout}");
    assert!(!removed.contains(&"disrupt-tb-busy"), "{stdout}");
    let kept = v["kept"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["node"] == "disrupt-tb-busy")
        .expect("busy node kept");
    assert!(
        kept["reasons"]
            .to_string()
            .contains("WhenEmpty, but node is not empty"),
        "{kept}"
    );

    // Read-only: the objects are as they were (same resourceVersion, still there).
    rt.block_on(async {
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut after = Vec::new();
        for n in ["disrupt-tb-empty", "disrupt-tb-busy"] {
            after.push(nodes.get(n).await.unwrap().metadata.resource_version);
        }
        after.push(
            pods.get("disrupt-tb-app")
                .await
                .unwrap()
                .metadata
                .resource_version,
        );
        assert_eq!(
            after, versions,
            "plan --disrupt --from-cluster wrote to the cluster"
        );
    });
}
