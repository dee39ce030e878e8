//! The seed stories (shared/reference/seeds/002: GPU capacity) as fixtures in fixtures/sim/.

use std::path::PathBuf;

use kk_sim::{LoadOptions, Plan, SourceFile, explain, load, solve};

fn fixture(name: &str) -> SourceFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sim")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    SourceFile::new(format!("fixtures/sim/{name}"), text)
}

fn plan(workloads: &[&str], nodes: &[&str], opts: &LoadOptions) -> (kk_sim::Input, Plan) {
    let pools = [fixture("pools.yaml")];
    let work: Vec<SourceFile> = workloads.iter().map(|w| fixture(w)).collect();
    let nodes: Vec<SourceFile> = nodes.iter().map(|n| fixture(n)).collect();
    let input = load(&pools, &work, &nodes, opts).unwrap_or_else(|e| {
        panic!(
            "{}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let plan = solve(&input);
    (input, plan)
}

#[test]
fn fifty_gpu_replicas_stop_at_the_limit_of_six() {
    let (_, plan) = plan(&["gpu-50.yaml"], &[], &LoadOptions::default());
    assert_eq!(plan.node_claims.len(), 6, "{}", plan.render_table());
    for c in &plan.node_claims {
        assert_eq!(c.node_pool, "gpu");
        assert_eq!(c.pods.len(), 1, "one GPU per node, one GPU pod per node");
        assert!(
            ["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"]
                .contains(&c.instance_type.as_str())
        );
        assert!(c.instance_type_options.len() <= 4);
    }
    assert_eq!(plan.pending.len(), 44);
    for p in &plan.pending {
        // Both pools are tried; the GPU pool is at its limit, the CPU pool has no GPU type.
        assert_eq!(
            p.reason,
            "nodepool gpu: nodepool gpu limit nvidia.com/gpu=6 exceeded; nodepool default: no instance type has nvidia.com/gpu>=1 and cpu>=2 and memory>=8Gi and pods>=1",
            "{}",
            p.pod
        );
        assert!(p.pod.starts_with("inference/vllm-"));
    }
    assert_eq!(plan.totals.nodes, 6);
    assert_eq!(plan.totals.pods_pending, 44);
}

#[test]
fn a_cpu_deployment_never_lands_on_the_tainted_gpu_pool() {
    let (_, plan) = plan(
        &["cpu-app.yaml", "gpu-50.yaml"],
        &[],
        &LoadOptions::default(),
    );
    let web: Vec<_> = plan
        .node_claims
        .iter()
        .filter(|c| c.pods.iter().any(|p| p.starts_with("default/web-")))
        .collect();
    assert!(!web.is_empty());
    for c in &web {
        assert_eq!(c.node_pool, "default", "{}", plan.render_table());
        assert!(c.pods.iter().all(|p| p.starts_with("default/web-")));
    }
    assert!(
        plan.pending
            .iter()
            .all(|p| !p.pod.starts_with("default/web-"))
    );
}

#[test]
fn without_a_cpu_pool_the_cpu_pod_is_pending_on_the_taint() {
    let pools = [fixture("pools.yaml")];
    let work = [fixture("gpu-only-cpu-app.yaml")];
    let mut input = load(&pools, &work, &[], &LoadOptions::default()).unwrap();
    input.pools.retain(|p| p.name == "gpu");
    let plan = solve(&input);
    assert!(plan.node_claims.is_empty());
    assert_eq!(plan.pending.len(), 1);
    assert_eq!(
        plan.pending[0].reason,
        "untolerated taint nvidia.com/gpu=present:NoSchedule"
    );
}

#[test]
fn a_time_sliced_node_counts_four_against_the_limit() {
    let (_, plan) = plan(
        &["gpu-50.yaml"],
        &["node-sliced.yaml"],
        &LoadOptions::default(),
    );
    // The sliced node takes 4 pods; 6 − 4 = 2 GPUs of limit remain: 2 new nodes.
    assert_eq!(plan.existing_nodes.len(), 1);
    assert_eq!(plan.existing_nodes[0].pods.len(), 4);
    assert_eq!(plan.node_claims.len(), 2, "{}", plan.render_table());
    assert_eq!(plan.pending.len(), 44);
    assert!(plan.pending.iter().all(|p| {
        p.reason
            .starts_with("nodepool gpu: nodepool gpu limit nvidia.com/gpu=6 exceeded;")
    }));
}

#[test]
fn spot_is_chosen_when_both_capacity_types_are_allowed() {
    let (_, plan) = plan(&["cpu-app.yaml"], &[], &LoadOptions::default());
    assert!(!plan.node_claims.is_empty());
    for c in &plan.node_claims {
        assert_eq!(c.capacity_type, "spot");
        assert!(c.price_per_hour > 0.0);
    }
    // On-demand only: the same pods launch on-demand, dearer.
    let pools = [fixture("pools.yaml")];
    let work = [fixture("cpu-app.yaml")];
    let mut input = load(&pools, &work, &[], &LoadOptions::default()).unwrap();
    for p in &mut input.pools {
        p.requirements.set(
            "karpenter.sh/capacity-type",
            kk_sim::Requirement::single("on-demand"),
        );
    }
    let od = solve(&input);
    assert!(
        od.node_claims
            .iter()
            .all(|c| c.capacity_type == "on-demand")
    );
    assert!(od.totals.price_per_hour > plan.totals.price_per_hour);
}

#[test]
fn two_gpus_fit_no_one_gpu_type() {
    let (_, plan) = plan(&["gpu-2.yaml"], &[], &LoadOptions::default());
    assert_eq!(plan.pending.len(), 1);
    let reason = &plan.pending[0].reason;
    assert!(
        reason.contains("nodepool gpu: no instance type has nvidia.com/gpu>=2 and "),
        "{reason}"
    );
    assert!(reason.contains("nodepool default: "), "{reason}");
}

#[test]
fn scale_overrides_replicas() {
    let opts = LoadOptions {
        scale: vec!["inference/deploy/vllm=3".into()],
        ..LoadOptions::default()
    };
    let (_, plan) = plan(&["gpu-50.yaml"], &[], &opts);
    assert_eq!(plan.node_claims.len(), 3);
    assert!(plan.pending.is_empty());
    let bad = LoadOptions {
        scale: vec!["deploy/nope=3".into()],
        ..LoadOptions::default()
    };
    let err = load(
        &[fixture("pools.yaml")],
        &[fixture("gpu-50.yaml")],
        &[],
        &bad,
    )
    .unwrap_err();
    assert!(
        err[0].to_string().contains("no deploy named nope"),
        "{}",
        err[0]
    );
}

#[test]
fn explain_names_the_limit() {
    let (input, plan) = plan(&["gpu-50.yaml"], &[], &LoadOptions::default());
    let pending = &plan.pending[0].pod;
    let e = explain(&input, pending).unwrap();
    assert_eq!(e.result, "Pending");
    assert!(
        e.reason
            .as_deref()
            .unwrap_or("")
            .contains("nodepool gpu limit nvidia.com/gpu=6 exceeded")
    );
    let text = e.render();
    assert!(
        text.contains(
            "new NodeClaim from nodepool gpu: nodepool gpu limit nvidia.com/gpu=6 exceeded"
        ),
        "{text}"
    );
    let placed = &plan.node_claims[0].pods[0];
    let e = explain(&input, placed).unwrap();
    assert!(
        e.result.starts_with("NodeClaim #1 (nodepool gpu"),
        "{}",
        e.result
    );
    assert!(explain(&input, "inference/nope").is_err());
}

#[test]
fn output_is_deterministic() {
    let (_, a) = plan(
        &["cpu-app.yaml", "gpu-50.yaml"],
        &["node-sliced.yaml"],
        &LoadOptions::default(),
    );
    let (_, b) = plan(
        &["cpu-app.yaml", "gpu-50.yaml"],
        &["node-sliced.yaml"],
        &LoadOptions::default(),
    );
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.render_table(), b.render_table());
}

#[test]
fn errors_name_file_position_and_field() {
    let bad = SourceFile::new(
        "bad.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  selector: {}\n  template:\n    spec:\n      containers:\n        - name: c\n          resources:\n            requests: {cpu: lots}\n",
    );
    let err = load(
        &[fixture("pools.yaml")],
        &[bad],
        &[],
        &LoadOptions::default(),
    )
    .unwrap_err();
    let text = err[0].to_string();
    assert!(text.starts_with("bad.yaml:11:"), "{text}");
    assert!(
        text.contains("spec.template.spec.containers[0].resources.requests[cpu]"),
        "{text}"
    );
    let bad = SourceFile::new(
        "bad.yaml",
        "kind: Pod\nmetadata: {name: p}\nspec:\n  containers: 3\n",
    );
    let err = load(&[], &[bad], &[], &LoadOptions::default()).unwrap_err();
    assert!(err[0].to_string().contains("spec.containers"), "{}", err[0]);
}
