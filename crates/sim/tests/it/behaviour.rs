//! Scheduler behaviours checked against what kubernetes-sigs/karpenter v1.14 does.

use kk_sim::{LoadOptions, Plan, SourceFile, load, solve};

const POOLS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: alpha}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: beta}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

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

fn pod(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: {name}}}}}\nspec:\n  containers: [{{name: c, image: x, resources: {{requests: {{cpu: 500m, memory: 256Mi}}}}}}]\n{extra}---\n"
    )
}

#[test]
fn equal_weights_go_by_name_descending_and_weight_wins() {
    let p = plan(POOLS, &pod("a", ""));
    assert_eq!(
        p.node_claims[0].node_pool, "beta",
        "equal weights: name descending"
    );
    let weighted = POOLS.replacen("spec:\n  template:", "spec:\n  weight: 10\n  template:", 1);
    let p = plan(&weighted, &pod("a", ""));
    assert_eq!(p.node_claims[0].node_pool, "alpha", "higher weight first");
}

#[test]
fn queue_is_cpu_then_memory_descending_and_claims_fill_fewest_pods_first() {
    let work = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: big}\nspec:\n  replicas: 3\n  selector: {}\n  template:\n    metadata: {labels: {app: big}}\n    spec:\n      containers: [{name: c, image: x, resources: {requests: {cpu: '2', memory: 1Gi}}}]\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            - {labelSelector: {matchLabels: {app: big}}, topologyKey: kubernetes.io/hostname}\n---\n".to_owned()
        + &pod("small-1", "")
        + &pod("small-2", "")
        + &pod("small-3", "");
    let p = plan(POOLS, &work);
    // Three anti-affine big pods make three claims; the small pods then spread over them,
    // one each (fewest pods first), instead of opening a fourth claim.
    assert_eq!(p.node_claims.len(), 3, "{}", p.render_table());
    for c in &p.node_claims {
        assert_eq!(c.pods.len(), 2, "{:?}", c.pods);
        assert!(c.pods[0].starts_with("default/big-"));
    }
}

#[test]
fn preferences_are_relaxed_when_they_cannot_be_met() {
    let extra = "  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n        - weight: 50\n          preference: {matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [p5]}]}\n";
    let p = plan(POOLS, &pod("a", extra));
    assert_eq!(
        p.node_claims.len(),
        1,
        "the unsatisfiable preference is dropped"
    );
    let extra = "  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n        - weight: 50\n          preference: {matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}]}\n";
    let p = plan(POOLS, &pod("a", extra));
    assert_eq!(
        p.node_claims[0].node_pool, "alpha",
        "a satisfiable preference is honoured"
    );
}

#[test]
fn required_node_affinity_terms_are_tried_in_turn() {
    let extra = "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [p5]}]\n          - matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}]\n";
    let p = plan(POOLS, &pod("a", extra));
    assert_eq!(p.node_claims[0].node_pool, "alpha");
    assert!(p.node_claims[0].instance_type.starts_with("m6i."));
}

#[test]
fn zone_spread_spreads_and_gt_lt_select_sizes() {
    let work = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: s}\nspec:\n  replicas: 3\n  selector: {}\n  template:\n    metadata: {labels: {app: s}}\n    spec:\n      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]\n      nodeSelector: {karpenter.k8s.aws/instance-family: m6i}\n      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n              - matchExpressions: [{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ['7']}, {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ['33']}]\n      topologySpreadConstraints:\n        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: s}}}\n";
    let p = plan(POOLS, work);
    let mut zones: Vec<&str> = p.node_claims.iter().map(|c| c.zone.as_str()).collect();
    zones.sort();
    assert_eq!(
        zones,
        ["us-east-1a", "us-east-1b", "us-east-1c"],
        "{}",
        p.render_table()
    );
    for c in &p.node_claims {
        assert!(
            ["m6i.2xlarge", "m6i.4xlarge", "m6i.8xlarge"].contains(&c.instance_type.as_str()),
            "{}",
            c.instance_type
        );
    }
}

#[test]
fn prefer_no_schedule_is_tolerated_after_relaxation() {
    let pools = POOLS.replacen(
        "      requirements:",
        "      taints: [{key: soft, value: x, effect: PreferNoSchedule}]\n      requirements:",
        2,
    );
    let p = plan(&pools, &pod("a", ""));
    assert_eq!(p.node_claims.len(), 1, "{}", p.render_table());
}

#[test]
fn gpu_types_only_when_nothing_else_fits() {
    let pools = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: any}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6, m6i]}
"#;
    let p = plan(pools, &pod("cpu", ""));
    assert!(
        p.node_claims[0].instance_type.starts_with("m6i."),
        "{}",
        p.render_table()
    );
    assert!(
        p.node_claims[0]
            .instance_type_options
            .iter()
            .any(|t| t.starts_with("g6."))
    );
    let gpu = "apiVersion: v1\nkind: Pod\nmetadata: {name: g}\nspec:\n  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]\n";
    let p = plan(pools, gpu);
    assert!(p.node_claims[0].instance_type.starts_with("g6."));
}

/// A Node whose kubelet has not reported status yet (a live cluster has them while nodes join)
/// is read with a warning and advertises nothing, as in Karpenter's cluster state: the pod gets
/// a NodeClaim instead of the node.
#[test]
fn a_node_without_status_is_read_with_a_warning_and_holds_nothing() {
    let nodes = r#"
apiVersion: v1
kind: Node
metadata:
  name: joining
  labels: {kubernetes.io/arch: amd64, topology.kubernetes.io/zone: us-east-1a}
"#;
    let input = load(
        &[SourceFile::new("pools.yaml", POOLS)],
        &[SourceFile::new("work.yaml", pod("p", ""))],
        &[SourceFile::new("nodes.yaml", nodes)],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}", e[0]));
    assert!(
        input
            .warnings
            .iter()
            .any(|w| w.contains("nodes.yaml: Node joining reports no status.allocatable")),
        "{:?}",
        input.warnings
    );
    let plan = solve(&input);
    assert!(
        plan.existing_nodes.iter().all(|n| n.pods.is_empty()),
        "{plan:?}"
    );
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
}
