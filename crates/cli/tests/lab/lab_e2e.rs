//! End to end on the lab (`testbed/lab up`): the rendered bundle, applied with the CLI,
//! drives the real Karpenter controller, CCM, kubeadm and kubelets; every test prints its
//! phase timings. The seed's failure points are reproduced on purpose, each asserting the
//! symptom a user would see. Where moto cannot refuse a call (it enforces no IAM) the lab
//! injects the refusal; where NVML cannot run, the lab's kubelet stands in (lab-kubelet).

use crate::harness as lab;
use crate::lab_top;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject};
use lab::{Lab, claim_of, condition, edit_store, is_true};
use serde_json::json;

const MIN: Duration = Duration::from_secs(60);

fn claim_named(lab: &Lab, name: &str) -> Option<DynamicObject> {
    lab.nodeclaims()
        .into_iter()
        .find(|nc| nc.metadata.name.as_deref() == Some(name))
}

fn provider_id(nc: &DynamicObject) -> Option<String> {
    nc.data["status"]["providerID"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn node_for(lab: &Lab, provider_id: &str) -> Option<Node> {
    lab.nodes()
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// The pods of the CPU pool's inflate Deployment (verify/), in the default namespace.
fn inflate_pods(lab: &Lab) -> Vec<Pod> {
    lab.pods("default")
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("inflate-"))
        })
        .collect()
}

fn instance_state(lab: &Lab, provider_id: &str) -> String {
    let id = provider_id.rsplit('/').next().unwrap();
    lab.aws(&format!("print(ec2.describe_instances(InstanceIds=['{id}'])['Reservations'][0]['Instances'][0]['State']['Name'])"))
}

/// Follows one pool's NodeClaim from creation to an initialized Node; returns its provider ID.
fn follow_to_initialized(lab: &mut Lab, pool: &str) -> String {
    let name = lab
        .wait("NodeClaim created", MIN, |l| claim_of(l, pool))
        .metadata
        .name
        .unwrap();
    let pid = lab.wait("NodeClaim Launched (CreateFleet in moto)", MIN, |l| {
        claim_named(l, &name)
            .filter(|nc| is_true(nc, "Launched"))
            .and_then(|nc| provider_id(&nc))
    });
    lab.wait("instance running in moto", MIN, |l| {
        (instance_state(l, &pid) == "running").then_some(())
    });
    let node = lab.wait(
        "Node registered with the instance's provider ID",
        3 * MIN,
        |l| node_for(l, &pid),
    );
    let id = pid.rsplit('/').next().unwrap();
    assert_eq!(
        node.metadata.name.as_deref(),
        Some(id),
        "node named after the instance ID"
    );
    assert!(
        pid.starts_with("aws:///") && pid.split('/').count() == 5,
        "provider ID aws:///<az>/<id>: {pid}"
    );
    lab.wait(
        "CCM initialized the Node (uninitialized taint gone)",
        2 * MIN,
        |l| {
            node_for(l, &pid)
                .filter(|n| !has_taint(n, "node.cloudprovider.kubernetes.io/uninitialized"))
        },
    );
    lab.wait("NodeClaim Registered", MIN, |l| {
        claim_named(l, &name).filter(|nc| is_true(nc, "Registered"))
    });
    lab.wait("NodeClaim Initialized", 2 * MIN, |l| {
        claim_named(l, &name).filter(|nc| is_true(nc, "Initialized"))
    });
    assert_eq!(
        claim_named(lab, &name).unwrap().metadata.name.unwrap(),
        name,
        "the same NodeClaim all along"
    );
    pid
}

#[test]
fn seed_story_cpu_pool_scales_up_joins_initializes_and_consolidates_to_zero() {
    let Some((mut lab, _, _)) = Lab::deployed("seed story, CPU pool", |s| s) else {
        return;
    };
    // Watched in `top` all along: the pane must follow the story without a key pressed.
    let screen = lab_top::Screen::start(&lab, 100, 40);
    // (Lab nodes are named after their instance IDs.)
    let general_node = |p: &str| {
        p.lines()
            .any(|l| l.starts_with("i-") && l.contains("workload-general"))
    };
    screen.wait_for("no node of the CPU pool yet", MIN, |p| {
        p.contains("NODE ") && !general_node(p)
    });
    lab.scale("inflate-workload-general", 2);
    lab.wait("inflate pods Pending (Unschedulable)", MIN, |l| {
        let pods = inflate_pods(l);
        (pods.len() == 2 && pods.iter().all(unschedulable)).then_some(())
    });
    let pending = lab_top::agrees_with_the_api(&lab);
    lab::live(&format!("  top's Pending pods: {}", pending["pending"]));
    let pid = follow_to_initialized(&mut lab, "workload-general");
    let node = node_for(&lab, &pid).unwrap();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("workload-tier").map(String::as_str),
        Some("general"),
        "pool label from the kubelet flags"
    );
    assert!(
        labels.contains_key("node.kubernetes.io/instance-type"),
        "CCM labels: {labels:?}"
    );
    lab.wait("inflate pods Running on the new node", MIN, |l| {
        let pods = inflate_pods(l);
        (pods.len() == 2 && pods.iter().all(running)).then_some(())
    });
    let id = pid.rsplit('/').next().unwrap().to_owned();
    let running = lab_top::agrees_with_the_api(&lab);
    let row = running["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == id.as_str())
        .unwrap();
    assert_eq!(row["pods"], 2, "the two inflate pods: {row}");
    assert!(
        row["cpu"]["requested"].as_i64().unwrap() >= 2000,
        "two 1-CPU inflate pods: {row}"
    );
    let pane = screen.wait_for("the launched node, initialized", MIN, |p| {
        p.lines().any(|l| {
            l.starts_with(&id) && l.contains("workload-general") && l.contains("initialized")
        })
    });
    lab::live(&format!("  top's pane:\n{pane}"));

    lab.scale("inflate-workload-general", 0);
    lab.wait(
        "Karpenter consolidated the empty node (NodeClaim gone)",
        4 * MIN,
        |l| claim_of(l, "workload-general").is_none().then_some(()),
    );
    lab.wait("instance terminated in moto", MIN, |l| {
        matches!(
            instance_state(l, &pid).as_str(),
            "shutting-down" | "terminated"
        )
        .then_some(())
    });
    screen.wait_for("the node gone again", MIN, |p| !p.contains(&id));
    screen.quit();
    lab.print_phases();
}

#[test]
fn seed_story_gpu_pool_runs_the_cuda_pod_once_the_device_plugin_advertises_the_gpu() {
    // NVML cannot run here: the lab's kubelet advertises nvidia.com/gpu once the device-plugin
    // container runs AND the node's containerd runs nvidia as its default runtime. The CUDA
    // sample prints nothing on the fake runtime, so "passed" means: Running on a node that
    // advertises the GPU it asked for.
    let Some((mut lab, _, _)) = Lab::deployed("seed story, GPU pool", |s| s) else {
        return;
    };
    let pid = follow_to_initialized(&mut lab, "workload-gpu-l4");
    let node = node_for(&lab, &pid).unwrap();
    let gpus = node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("nvidia.com/gpu").cloned());
    assert_eq!(
        gpus.map(|q| q.0),
        Some("1".to_owned()),
        "g6.xlarge advertises one GPU"
    );
    lab.wait("CUDA pod Running on the GPU node", MIN, |l| {
        l.pods("default")
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some("cuda-vectoradd-workload-gpu-l4"))
            .filter(running)
    });
    lab.print_phases();
}

/// Waits until the pool's NodeClaim is Launched; its provider ID.
fn launched(lab: &mut Lab, pool: &str) -> String {
    lab.wait("NodeClaim Launched", MIN, |l| {
        claim_of(l, pool)
            .filter(|nc| is_true(nc, "Launched"))
            .and_then(|nc| provider_id(&nc))
    })
}

/// Asserts that no NodeClaim of the pool becomes Registered for `window`.
fn never_registered(lab: &Lab, pool: &str, window: Duration) {
    lab.never("the NodeClaim became Registered", window, |l| {
        claim_of(l, pool)
            .filter(|nc| is_true(nc, "Registered"))
            .map(|nc| nc.metadata.name)
    });
}

/// The failure symptom shared by every join failure: the instance runs, the NodeClaim is
/// Launched, the console says why, and the NodeClaim never becomes Registered.
fn assert_never_registers(lab: &mut Lab, pool: &str, console_says: &str) {
    let pid = launched(lab, pool);
    lab.wait(&format!("console says {console_says:?}"), 2 * MIN, |l| {
        l.console(&pid).contains(console_says).then_some(())
    });
    never_registered(lab, pool, Duration::from_secs(20));
    assert!(node_for(lab, &pid).is_none(), "no Node for {pid}");
    lab.print_phases();
}

#[test]
fn failure_expired_token_in_the_store_leaves_the_nodeclaim_launched_and_not_registered() {
    let Some((mut lab, _, _)) = Lab::deployed("failure: expired token", |s| s) else {
        return;
    };
    edit_store(
        &lab,
        "/kubean-karpenter/lab/join",
        "KK_EXPIRATION",
        "2026-01-01T00:00:00Z",
    );
    lab.scale("inflate-workload-general", 1);
    assert_never_registers(
        &mut lab,
        "workload-general",
        "expired at 2026-01-01T00:00:00Z",
    );
}

/// A store writer publishes another CA's hash (finding #12): the node pins the CA hash baked
/// into its userData at render time, ignores the store's, and joins the real cluster. (The
/// userData sandbox proves the pinned hash byte for byte: `userdata_sandbox.rs`
/// `a_store_writer_cannot_make_a_node_trust_another_ca`.)
#[test]
fn a_forged_ca_hash_in_the_store_is_ignored_and_the_node_joins() {
    let Some((mut lab, _, _)) = Lab::deployed("a forged CA hash in the store", |s| s) else {
        return;
    };
    let forged = format!("sha256:{}", "0".repeat(64));
    edit_store(
        &lab,
        "/kubean-karpenter/lab/join",
        "KK_CA_CERT_HASH",
        &forged,
    );
    lab.scale("inflate-workload-general", 1);
    follow_to_initialized(&mut lab, "workload-general");
}

#[test]
fn failure_gpu_ami_without_the_nvidia_container_runtime_fails_its_boot() {
    let Some(mut lab) = Lab::require("failure: NVIDIA runtime missing") else {
        return;
    };
    // lab-kit/amis.json: ami-0c0ffee0c0ffee003 is a GPU image without the NVIDIA toolkit.
    let (spec, bundle) =
        lab.render(|s| s.replace("ami-0c0ffee0c0ffee002", "ami-0c0ffee0c0ffee003"));
    lab.deploy(&spec, &bundle);
    assert_never_registers(
        &mut lab,
        "workload-gpu-l4",
        "nvidia-container-runtime not found",
    );
}

#[test]
fn failure_passrole_refused_fails_the_nodeclass_validation_and_launches_nothing() {
    // moto enforces no IAM: the lab makes it refuse CreateFleet as EC2 does when the
    // controller may not pass the node role (testbed/moto_seeded.py install_faults).
    // Karpenter v1.14 checks its rights with a dry-run CreateFleet when it validates an
    // EC2NodeClass, so the user sees the class not Ready and pods Pending, and nothing is
    // launched. (A NodeClaim may still be created when the pods were Pending before the
    // class's validation ran — the lab deploys Karpenter after apply's AWS side — but its
    // launch is refused and it never reaches Launched.)
    let Some(mut lab) = Lab::require("failure: iam:PassRole missing") else {
        return;
    };
    let (spec, bundle) = lab.render(|s| s);
    lab.fault("passrole-denied");
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", 1);
    let classes = lab.dynamic("karpenter.k8s.aws", "v1", "EC2NodeClass");
    let message = lab.wait(
        "EC2NodeClass validation failed (ValidationSucceeded=False)",
        MIN,
        |l| {
            let nc = l.rt.block_on(classes.get("kubean-aws-cpu")).ok()?;
            nc.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "ValidationSucceeded" && c["status"] == "False")
                .and_then(|c| c["message"].as_str().map(str::to_owned))
        },
    );
    assert!(message.contains("ec2:CreateFleet"), "{message}");
    lab.never(
        "a NodeClaim was launched for the pending pod",
        Duration::from_secs(20),
        |l| {
            claim_of(l, "workload-general")
                .filter(|nc| is_true(nc, "Launched"))
                .map(|nc| nc.metadata.name)
        },
    );
    assert!(
        inflate_pods(&lab).iter().all(unschedulable),
        "the inflate pod stays Pending"
    );
    lab.print_phases();
}

#[test]
fn failure_device_plugin_that_does_not_tolerate_the_pool_taint_never_reaches_the_gpu_node() {
    let Some((mut lab, _, _)) = Lab::deployed("failure: device plugin toleration mismatch", |s| s)
    else {
        return;
    };
    // What a hand-edited plugin manifest does: tolerate only the upstream default taint.
    lab.rt
        .block_on(kk_testkit::lab::device_plugin_tolerates_only_the_upstream_taint(&lab.client));
    let pid = lab.wait("GPU NodeClaim Registered", 3 * MIN, |l| {
        claim_of(l, "workload-gpu-l4")
            .filter(|nc| is_true(nc, "Registered"))
            .and_then(|nc| provider_id(&nc))
    });
    let node = node_for(&lab, &pid).unwrap().metadata.name.unwrap();
    lab.never(
        "a device-plugin pod ran on the GPU node",
        Duration::from_secs(20),
        |l| {
            l.pods("kube-system")
                .into_iter()
                .find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                })
                .map(|p| p.metadata.name)
        },
    );
    let nc = claim_of(&lab, "workload-gpu-l4").unwrap();
    assert_ne!(
        condition(&nc, "Initialized").as_deref(),
        Some("True"),
        "a GPU node without its plugin never initializes"
    );
    lab.print_phases();
}

const SSM_JOIN: &str = "  join:\n    mode: ssm\n    storeName: /kubean-karpenter/lab/join\n";

#[test]
fn join_mode_secrets_manager_node_joins_with_the_token_the_rotator_keeps_there() {
    let Some(mut lab) = Lab::require("join mode secrets-manager") else {
        return;
    };
    let (spec, bundle) =
        lab.render(|s| s.replace(SSM_JOIN, "  join:\n    mode: secrets-manager\n"));
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", 1);
    let user_data =
        std::fs::read_to_string(bundle.join("nodeclasses/kubean-aws-cpu.yaml")).unwrap();
    assert!(
        user_data.contains("aws secretsmanager get-secret-value"),
        "the node reads Secrets Manager"
    );
    follow_to_initialized(&mut lab, "workload-general");
    lab.print_phases();
}

#[test]
fn join_mode_static_node_joins_with_the_token_in_its_user_data() {
    let Some(mut lab) = Lab::require("join mode static") else {
        return;
    };
    let token = ("labsta", "0123456789abcdef");
    let (spec, bundle) = lab.render(|s| {
        s.replace(
            SSM_JOIN,
            &format!(
                "  join:\n    mode: static\n    allowInsecureStatic: true\n    token: {}.{}\n",
                token.0, token.1
            ),
        )
    });
    // ORDER.md step 4 in static mode: create exactly this token, as kubeadm does.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(lab.client.clone(), "kube-system");
    let name = format!("bootstrap-token-{}", token.0);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": name, "namespace": "kube-system"},
        "stringData": {
            "token-id": token.0, "token-secret": token.1,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        },
    });
    lab.server_side_apply(&secrets, &name, &secret);
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", 1);
    follow_to_initialized(&mut lab, "workload-general");
    lab.print_phases();
}

#[test]
fn failure_api_port_blocked_from_the_nodes_leaves_the_nodeclaim_launched_and_not_registered() {
    // The security group does not admit the API port from the nodes: the lab rejects TCP to
    // the API server's port inside each new instance's network namespace.
    let Some((mut lab, _, _)) = Lab::deployed("failure: API port blocked", |s| s) else {
        return;
    };
    lab.fault("api-port-blocked");
    lab.scale("inflate-workload-general", 1);
    let api = lab.var("KK_LAB_API_SERVER");
    let pid = launched(&mut lab, "workload-general");
    lab.wait("the node tries to join", MIN, |l| {
        l.console(&pid)
            .contains(&format!("joining {api}"))
            .then_some(())
    });
    never_registered(&lab, "workload-general", Duration::from_secs(45));
    assert!(
        !lab.console(&pid).contains("kubean-karpenter: joined"),
        "{}",
        lab.console(&pid)
    );
    assert!(node_for(&lab, &pid).is_none());
    lab.print_phases();
}

/// A figure, not a test (run it with `--ignored`): how many emulated nodes the lab holds on
/// this machine. Scales the inflate Deployment to KK_LAB_NODES_WANTED × 3 replicas (three fit
/// an m6i.xlarge) and reports the time until all run, the node count, and the lab's memory.
#[test]
#[ignore = "a benchmark of the lab's capacity, minutes long"]
fn lab_capacity_many_nodes() {
    let Some(mut lab) = Lab::require("lab capacity") else {
        return;
    };
    let wanted = Lab::nodes_wanted();
    let (spec, bundle) = lab.render(|s| s.replace("sizes: [large, xlarge]", "sizes: [xlarge]"));
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", wanted * 3);
    lab.wait("all inflate pods Running", 15 * MIN, |l| {
        let pods = inflate_pods(l);
        (pods.len() == (wanted * 3) as usize && pods.iter().all(running)).then_some(())
    });
    let nodes = lab.nodes().len();
    let state = format!("{}/", lab.state().display());
    let rss_kib: u64 = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            std::fs::read_to_string(e.path().join("status"))
                .ok()
                .map(|s| (e.path(), s))
        })
        .filter(|(p, _)| {
            std::fs::read(p.join("cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).contains(&state)
                    || String::from_utf8_lossy(&c).contains("lab-kubelet")
            })
        })
        .filter_map(|(_, s)| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum();
    eprintln!(
        "  {nodes} nodes, {} pods Running; lab processes' resident memory {:.1} GiB",
        wanted * 3,
        rss_kib as f64 / 1048576.0
    );
    lab.print_phases();
}

/// A digest of the token line in the SSM store (the token itself never reaches test output).
const STORED_TOKEN_DIGEST: &str = "import hashlib
v = ssm.get_parameter(Name='/kubean-karpenter/lab/join', WithDecryption=True)['Parameter']['Value']
print(hashlib.sha256([l for l in v.splitlines() if l.startswith('KK_TOKEN=')][0].encode()).hexdigest())";

#[test]
fn join_survives_a_token_rotation_while_the_node_boots() {
    // The node read the store and is joining when a new token replaces it there: the token it
    // holds must stay valid (superseded tokens are deleted only after the overlap).
    let Some((mut lab, spec, _)) = Lab::deployed("token rotated while a node boots", |s| s) else {
        return;
    };
    lab.scale("inflate-workload-general", 1);
    let api = lab.var("KK_LAB_API_SERVER");
    let pid = launched(&mut lab, "workload-general");
    let before = lab.aws(STORED_TOKEN_DIGEST);
    lab.wait("the node read its token and is joining", MIN, |l| {
        l.console(&pid)
            .contains(&format!("joining {api}"))
            .then_some(())
    });
    lab.cli(&[
        "token",
        "create",
        "--publish",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    let after = lab.aws(STORED_TOKEN_DIGEST);
    assert_ne!(before, after, "the store holds a new token");
    follow_to_initialized(&mut lab, "workload-general");
    lab.print_phases();
}

#[test]
fn failure_kubeadm_userdata_on_an_eks_optimized_ami_never_joins() {
    // An EKS-optimized AL2023 image ships kubelet and nodeadm, not kubeadm (the lab's
    // eks-al2023 AMI profile): our kubeadm userData on it fails as it would on AWS. `validate`
    // refuses ami.alias/ssmRelease pools for this reason; an ami.id cannot be told apart.
    let Some(mut lab) = Lab::require("failure: kubeadm userData on an EKS AMI") else {
        return;
    };
    let profiles: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab::repo().join("testbed/lab-kit/ami-profiles.json")).unwrap(),
    )
    .unwrap();
    let eks_ami = profiles
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, p)| *p == "eks-al2023")
        .unwrap()
        .0
        .clone();
    let (spec, bundle) = lab.render(|s| s.replace("ami-0c0ffee0c0ffee001", &eks_ami));
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", 1);
    assert_never_registers(&mut lab, "workload-general", "kubeadm: command not found");
}

/// Issue 16: the controller runs from the built image, not from this build's binary. Given
/// `KK_LAB_IMAGE` = dist/image's OCI layout (dist/out/kubean-karpenter-<version>-oci; the test
/// is skipped without it: building the image takes a release build), the spec names that
/// layout's manifest digest, and `testbed/lab controller` runs the image the rendered Deployment
/// names: unpacked by umoci, its entrypoint as its user (65532), chrooted into its read-only
/// root, no capabilities, no_new_privs. That process publishes the join token and approves the
/// node's CSRs: a CPU node launches, joins and initializes.
#[test]
fn the_controller_runs_from_the_images_binary_and_a_node_joins() {
    let Some(layout) = std::env::var_os("KK_LAB_IMAGE").map(std::path::PathBuf::from) else {
        eprintln!(
            "SKIP the controller from the image: set KK_LAB_IMAGE to dist/image's OCI layout \
             (dist/build && sudo dist/image)"
        );
        return;
    };
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap().to_owned();
    assert!(digest.starts_with("sha256:"), "{index}");
    let Some(mut lab) = Lab::require("controller from the image's binary") else {
        return;
    };
    let (spec, bundle) = lab.render(|s| {
        let line = s
            .lines()
            .find(|l| l.trim_start().starts_with("digest: sha256:"))
            .expect("the lab spec names the controller image's digest")
            .to_owned();
        let indent = &line[..line.len() - line.trim_start().len()];
        s.replacen(&line, &format!("{indent}digest: {digest}"), 1)
    });
    let rendered = std::fs::read_to_string(bundle.join("rotator/join-token-rotator.yaml")).unwrap();
    assert!(
        rendered.contains(&format!("@{digest}")),
        "the Deployment runs {digest}"
    );
    lab.deploy_with(&spec, &bundle, layout.to_str().unwrap());

    // The running controller is the image's binary, confined as its securityContext says.
    let pids = std::fs::read_to_string(lab.state().join("pids")).unwrap();
    let pid = pids
        .lines()
        .filter_map(|l| l.strip_prefix("controller "))
        .next_back()
        .expect("a controller process")
        .trim()
        .to_owned();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let image_bin = lab.state().join("controller-image/rootfs/kubean-karpenter");
    assert_eq!(
        exe, image_bin,
        "the controller process runs the image's binary"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in {status}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(line("Uid:"), ["65532"; 4], "runs as the image's user");
    assert_eq!(line("Gid:"), ["65532"; 4]);
    assert_eq!(line("CapEff:"), ["0000000000000000"], "no capabilities");
    assert_eq!(line("CapPrm:"), ["0000000000000000"]);
    assert_eq!(line("NoNewPrivs:"), ["1"]);
    let root = std::fs::read_link(format!("/proc/{pid}/root")).unwrap();
    assert_eq!(root, lab.state().join("controller-image/rootfs"));
    // Its root is read-only: the mount it sees at / (mountinfo is relative to its root) says ro.
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root_mount = mounts
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("no mount at {}:\n{mounts}", root.display()));
    assert!(
        root_mount
            .split(' ')
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{root_mount}"
    );

    // It works: the token it published and the CSRs it approves let a node join.
    lab.scale("inflate-workload-general", 1);
    follow_to_initialized(&mut lab, "workload-general");
    lab.wait("inflate pod Running on the new node", MIN, |l| {
        let pods = inflate_pods(l);
        (pods.len() == 1 && pods.iter().all(running)).then_some(())
    });
    lab.print_phases();
}
