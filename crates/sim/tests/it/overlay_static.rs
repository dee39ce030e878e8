//! NodeOverlays and static pools (issue #28), as Karpenter v1.15 treats them
//! (testbed/karpenter-oracle/overlay_test.go settles the overlay's semantics on its scheduler).

use kk_sim::{LoadOptions, Plan, SourceFile, load, solve};

const GPU_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [g6.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"#;

const OVERLAY: &str = r#"
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: gpu-sharing}
spec:
  requirements:
    - {key: karpenter.sh/nodepool, operator: In, values: [gpu]}
    - {key: karpenter.k8s.aws/instance-gpu-count, operator: In, values: ["1"]}
  capacity: {nvidia.com/gpu: "4"}
"#;

fn shared_gpu_pods(n: usize) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: infer}}
spec:
  replicas: {n}
  selector: {{matchLabels: {{app: infer}}}}
  template:
    metadata: {{labels: {{app: infer}}}}
    spec:
      tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
      containers:
        - name: c
          image: x
          resources: {{requests: {{cpu: 500m, memory: 1Gi, nvidia.com/gpu: "1"}}, limits: {{nvidia.com/gpu: "1"}}}}
"#
    )
}

fn plan(pools: &str, work: &str) -> Plan {
    let input = load(
        &[SourceFile::new("pools.yaml", pools)],
        &[SourceFile::new("work.yaml", work)],
        &[],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}", e[0]));
    solve(&input)
}

fn pods_per_claim(p: &Plan) -> Vec<usize> {
    p.node_claims.iter().map(|c| c.pods.len()).collect()
}

#[test]
fn without_an_overlay_each_time_sliced_pod_gets_a_node() {
    let p = plan(GPU_POOL, &shared_gpu_pods(8));
    assert_eq!(pods_per_claim(&p), vec![1; 8], "{}", p.render_table());
}

#[test]
fn a_capacity_overlay_packs_and_replaces_the_types_count() {
    let pools = format!("{GPU_POOL}{OVERLAY}");
    let p = plan(&pools, &shared_gpu_pods(8));
    assert_eq!(pods_per_claim(&p), vec![4, 4], "{}", p.render_table());
    assert!(p.node_claims.iter().all(|c| c.instance_type == "g6.xlarge"));
    // Replaces, not adds: 5 pods are 4 + 1, as on Karpenter's scheduler.
    let p = plan(&pools, &shared_gpu_pods(5));
    assert_eq!(pods_per_claim(&p), vec![4, 1], "{}", p.render_table());
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("nodeOverlay feature gate")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn an_overlay_of_another_pool_or_a_restricted_resource_does_nothing() {
    let other = OVERLAY.replace("values: [gpu]", "values: [other]");
    let p = plan(&format!("{GPU_POOL}{other}"), &shared_gpu_pods(3));
    assert_eq!(pods_per_claim(&p), vec![1, 1, 1]);
    let cpu = OVERLAY.replace(
        "capacity: {nvidia.com/gpu: \"4\"}",
        "capacity: {cpu: \"64\"}",
    );
    let p = plan(&format!("{GPU_POOL}{cpu}"), &shared_gpu_pods(2));
    assert_eq!(pods_per_claim(&p), vec![1, 1]);
    assert!(p.warnings.iter().any(|w| w.contains("restricted")));
}

#[test]
fn overlaid_capacity_counts_against_the_pools_gpu_limit() {
    let limited = format!("{GPU_POOL}  limits: {{nvidia.com/gpu: \"8\"}}\n");
    let p = plan(&format!("{limited}{OVERLAY}"), &shared_gpu_pods(9));
    assert_eq!(pods_per_claim(&p), vec![4, 4], "{}", p.render_table());
    assert_eq!(p.pending.len(), 1);
}

const STATIC_POOL: &str = r#"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: warm}
spec:
  replicas: 2
  limits: {nodes: "5"}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

const DYNAMIC_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

fn cpu_pods(n: usize, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: {n}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: [{{name: c, image: x, resources: {{requests: {{cpu: {cpu}, memory: 1Gi}}}}}}]\n"
    )
}

#[test]
fn a_static_pool_is_existing_capacity_and_opens_no_claim() {
    let pools = format!("{DYNAMIC_POOL}{STATIC_POOL}");
    // Two m6i.xlarge (4 vCPU) nodes are kept whatever the pods: 4 pods of 1.5 CPU fill them
    // (two each), the fifth gets a claim of the dynamic pool.
    let p = plan(&pools, &cpu_pods(5, "1500m"));
    let placed: usize = p.existing_nodes.iter().map(|e| e.pods.len()).sum();
    assert_eq!(placed, 4, "{}", p.render_table());
    assert!(
        p.existing_nodes
            .iter()
            .all(|e| e.node.starts_with("warm-static-"))
    );
    assert_eq!(p.node_claims.len(), 1);
    assert_eq!(p.node_claims[0].node_pool, "general");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("nodepool warm: static (2 replicas)") && w.contains("m6i.xlarge")),
        "{:?}",
        p.warnings
    );
    // Only static pools: no dynamic NodePool, as Karpenter's provisioner says.
    let p = plan(STATIC_POOL, &cpu_pods(9, "1500m"));
    assert_eq!(p.node_claims.len(), 0);
    assert!(
        p.pending
            .iter()
            .all(|q| q.reason.contains("no nodepools found")),
        "{}",
        p.render_table()
    );
}
