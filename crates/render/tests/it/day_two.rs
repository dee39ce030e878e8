//! Day two: the Kubean ClusterOperations for upgrade, scale, node removal and certificate
//! renewal (snapshots, the real kubean CRD), and `upgrade plan`: a safe plan, and the orders
//! and targets it refuses.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kk_render::kubean_ops::{Operation, render_operation};
use kk_render::upgrade::{self, Order, ResolvedAmi, UpgradeRequest};
use kk_spec::{ElasticCluster, parse_spec};

fn spec(name: &str) -> ElasticCluster {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs")
        .join(name);
    let text = std::fs::read_to_string(path).unwrap();
    parse_spec(&text, name).unwrap().spec
}

fn with_version(mut cluster: ElasticCluster, version: &str) -> ElasticCluster {
    cluster.spec.kubernetes_version = version.into();
    cluster
}

fn example() -> ElasticCluster {
    parse_spec(kk_spec::EXAMPLE, "example").unwrap().spec
}

fn assert_crd_valid(object: &serde_json::Value) {
    let violations = kk_crd_check::validate(object).unwrap();
    assert!(
        violations.is_empty(),
        "{}",
        violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[test]
fn kubean_operations_match_their_snapshots_and_the_crd() {
    let cluster = with_version(example(), "1.36.3");
    let infra = cluster
        .spec
        .kubean
        .nodes
        .iter()
        .find(|n| n.roles == [kk_spec::NodeRole::Infra])
        .expect("the example has an infra-only node")
        .name
        .clone();
    let operations = [
        (
            "upgrade",
            Operation::Upgrade {
                from: Some("1.35.5".into()),
            },
        ),
        (
            "scale",
            Operation::AddNode {
                node: infra.clone(),
            },
        ),
        ("remove-node", Operation::RemoveNode { node: infra }),
        ("renew-certs", Operation::RenewCertificates),
    ];
    for (name, operation) in operations {
        let rendered = render_operation(&cluster, &operation).unwrap();
        assert_crd_valid(&rendered.object);
        let text = format!(
            "# when: {}\n# effect: {}\n{}",
            rendered.when,
            rendered.effect,
            serde_saphyr::to_string(&rendered.object).unwrap()
        );
        insta::assert_snapshot!(format!("kubean-op-{name}"), text);
    }
}

#[test]
fn kubean_operations_refuse_what_would_break_the_cluster() {
    let cluster = example();
    let refuse = |op: Operation| render_operation(&cluster, &op).unwrap_err();
    let upgrade = |to: &str, from: &str| {
        render_operation(
            &with_version(example(), to),
            &Operation::Upgrade {
                from: Some(from.into()),
            },
        )
        .unwrap_err()
    };
    // The example pins Kubean v0.37.0 (1.34.0–1.36.3) at Kubernetes 1.35.5.
    let e = upgrade("1.36.9", "1.35.5");
    assert_eq!(e.field, "spec.kubean.sprayJobImage");
    assert!(
        e.message.contains("installs Kubernetes 1.34.0–1.36.3 only"),
        "{e}"
    );
    let e = upgrade("1.35.1", "1.35.5");
    assert!(e.message.contains("not newer"), "{e}");
    let e = upgrade("1.36.3", "1.34.9");
    assert_eq!(e.field, "spec.kubernetesVersion");
    assert!(e.message.contains("skips a minor"), "{e}");
    // Without --from only the Kubean release is checked.
    assert!(
        render_operation(
            &with_version(example(), "1.36.3"),
            &Operation::Upgrade { from: None }
        )
        .is_ok()
    );
    let e = refuse(Operation::AddNode {
        node: "nope".into(),
    });
    assert_eq!(e.field, "spec.kubean.nodes");
    let control_plane = cluster.spec.kubean.nodes[0].name.clone();
    let e = refuse(Operation::AddNode {
        node: control_plane.clone(),
    });
    assert!(e.message.contains("scale.yml adds workers only"), "{e}");
    let single = spec("iam-eks.yaml");
    let only = single.spec.kubean.nodes[0].name.clone();
    let e = render_operation(&single, &Operation::RemoveNode { node: only }).unwrap_err();
    assert!(e.message.contains("is the last"), "{e}");
}

fn request(to: &str, order: Order) -> UpgradeRequest {
    UpgradeRequest {
        to: to.into(),
        order,
        resolved: BTreeMap::new(),
        nodes: BTreeMap::new(),
        replace_seconds: upgrade::DEFAULT_REPLACE_SECONDS,
    }
}

/// iam-eks: Kubernetes 1.35.4, Kubean v0.37.0, one pool per pin form (ssmRelease, alias, id).
#[test]
fn a_minor_upgrade_plan_moves_the_control_plane_first_then_pool_by_pool() {
    let cluster = spec("iam-eks.yaml");
    let mut req = request("1.36.x", Order::ControlPlaneFirst);
    req.nodes = [("eks-gpu".to_owned(), 4), ("eks-general".to_owned(), 5)].into();
    req.resolved.insert(
        "eks-general".into(),
        ResolvedAmi {
            date: "20260827".into(),
            image_id: "ami-0aaaaaaaaaaaaaaaa".into(),
            release_version: Some("1.36.3-20260827".into()),
        },
    );
    let plan = upgrade::plan(&cluster, &req).unwrap();
    assert_eq!((plan.from.as_str(), plan.to.as_str()), ("1.35.4", "1.36.3"));
    let titles: Vec<&str> = plan.steps.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "Kubean upgrades the control plane to 1.36.3",
            "Components matched to the control plane's minor (1.36)",
            "Pool eks-general: AMI to a 1.36 release",
            "Pool kubeadm-general: custom image with a 1.36 kubelet",
        ]
    );
    // The alias pool drifts with the control plane, one node at a time (budget "1"):
    // 4 nodes, 4 waves of 30 s.
    let first = &plan.steps[0];
    assert_eq!(first.drift.len(), 1);
    let gpu = &first.drift[0];
    assert_eq!(
        (gpu.pool.as_str(), gpu.at_once, gpu.seconds),
        ("eks-gpu", Some(1), Some(120))
    );
    assert!(
        first
            .changes
            .iter()
            .any(|c| c.contains("drift by themselves") && c.contains("eks-gpu"))
    );
    assert!(
        first.safe_because.iter().any(
            |c| c.contains("ssmRelease 1.35.4-20260827 keeps its 1.35 kubelet: 1 minor behind")
        )
    );
    // The ssmRelease pool is re-pinned to the resolved release; no budget: Karpenter's 10%.
    let general = &plan.steps[2];
    assert!(
        general.changes[0]
            .contains("ami.ssmRelease 1.35.4-20260827 -> 1.36.3-20260827 (ami-0aaaaaaaaaaaaaaaa)")
    );
    let d = &general.drift[0];
    assert_eq!(d.budget, "10% (Karpenter's default)");
    assert_eq!((d.at_once, d.seconds), (Some(1), Some(150)));
    // The text and JSON views say the same.
    let text = upgrade::to_text(&plan);
    assert!(text.contains("3. Pool eks-general"), "{text}");
    let json = plan.to_json();
    assert_eq!(json["steps"][0]["drift"][0]["atOnce"], 1);
    insta::assert_snapshot!("upgrade-plan-iam-eks", text);
}

#[test]
fn an_order_or_target_that_breaks_skew_is_refused_with_the_fix() {
    let cluster = spec("iam-eks.yaml");
    // Workers first: a 1.36 kubelet against a 1.35 API server.
    let refused = upgrade::plan(&cluster, &request("1.36.3", Order::WorkersFirst)).unwrap_err();
    let fields: Vec<&str> = refused.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(
        fields,
        ["spec.pools[0].ami", "spec.pools[2].ami"],
        "the alias pool follows the control plane"
    );
    assert!(
        refused[0]
            .message
            .contains("never newer than the API server")
    );
    assert!(
        refused[0]
            .message
            .contains("upgrade the control plane first")
    );
    // A pool whose pinned kubelet would fall more than three minors behind.
    let mut old = cluster.clone();
    old.spec.pools[0].ami.ssm_release = Some("1.32.9-20260827".into());
    let refused = upgrade::plan(&old, &request("1.36.3", Order::ControlPlaneFirst)).unwrap_err();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].field, "spec.pools[0].ami.ssmRelease");
    assert!(
        refused[0].message.contains("more than three minors older"),
        "{}",
        refused[0]
    );
    assert!(
        refused[0]
            .message
            .contains("first move this pool to a release whose kubelet is 1.33–1.35"),
        "{}",
        refused[0]
    );
    // Two minors at once, and a patch the pinned Kubean does not install.
    let refused = upgrade::plan(&cluster, &request("1.37", Order::ControlPlaneFirst)).unwrap_err();
    assert_eq!(refused[0].field, "spec.kubean.sprayJobImage", "{refused:?}");
    let refused =
        upgrade::plan(&cluster, &request("1.36.7", Order::ControlPlaneFirst)).unwrap_err();
    assert!(
        refused[0]
            .message
            .contains("Kubean v0.37.0 installs Kubernetes 1.34.0–1.36.3 only"),
        "{refused:?}"
    );
}

/// A spec pinning the GPU Operator two release lines back: the plan walks NVIDIA's supported
/// path one line per step after the Kubernetes steps, and says nothing once on the default.
#[test]
fn an_old_gpu_operator_pin_is_upgraded_one_release_line_at_a_time() {
    let mut cluster = example();
    let gpu = cluster.spec.gpu.as_mut().unwrap();
    gpu.stack = kk_spec::GpuSoftware::Operator;
    gpu.operator_version = Some("v25.10.1".into());
    let plan = upgrade::plan(&cluster, &request("1.36.x", Order::ControlPlaneFirst)).unwrap();
    let operator: Vec<&upgrade::Step> = plan
        .steps
        .iter()
        .filter(|s| s.title.starts_with("GPU Operator"))
        .collect();
    let titles: Vec<&str> = operator.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "GPU Operator v25.10.1 -> v26.3.3 (NVIDIA: deprecated)",
            "GPU Operator v26.3.3 -> v26.7.0 (NVIDIA: supported)",
        ]
    );
    assert_eq!(
        plan.steps.last().map(|s| s.title.as_str()),
        titles.last().copied(),
        "after the Kubernetes steps"
    );
    assert!(
        operator[0]
            .commands
            .iter()
            .any(|c| c.contains("operatorVersion: v26.3.3"))
    );
    cluster.spec.gpu.as_mut().unwrap().operator_version = None;
    assert!(upgrade::gpu_operator_steps(&cluster.spec).is_empty());
    cluster.spec.gpu.as_mut().unwrap().operator_version = Some("v26.7.0".into());
    assert!(upgrade::gpu_operator_steps(&cluster.spec).is_empty());
}
