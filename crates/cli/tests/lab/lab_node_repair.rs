//! Sick GPU nodes replaced (#50), with the real Karpenter 1.15 and node repair on (render turns
//! the gate on because the lab's GPU pool runs the health agent). Two GPU nodes; the health
//! agent runs for each as `kubean-karpenter controller --health-agent`, authenticated as the
//! rendered agent's service account with a token bound to its node.
//!
//! Stand-ins, and why: the lab's kubelets run no containers, so each agent runs as a process of
//! this test (its identity and admission policy are the DaemonSet pod's); it reads a kernel log
//! file the test writes `NVRM: Xid` lines into (a test cannot write `/dev/kmsg`); and one
//! node's "reboot" is its condition set back to True by the admin, what the agent writes on the
//! node's next boot.
//!
//! The story: a warning XID changes nothing; a fatal XID 79 on both nodes turns both
//! `AcceleratedHardwareReady=False` with the XID in the reason; with 2 of 2 nodes sick the
//! pool's breaker (more than 20 %) holds repair past the 10-minute toleration; once one node is
//! healthy again, Karpenter replaces the other — a new NodeClaim Initialized, the GPU pod
//! Running on it, the sick NodeClaim gone.

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Event, Node, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::{Lab, claims_of, is_true, live, pod_available};

const MIN: Duration = Duration::from_secs(60);
const POOL: &str = "workload-gpu-l4";
const AGENT: &str = kk_spec::names::HEALTH_AGENT;

/// A Deployment of one pod asking one GPU on the pool (a controller-owned pod, which repair
/// reschedules; the bundle's bare CUDA verify pod runs on the other node).
fn gpu_deployment(lab: &Lab) {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "repair-gpu", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "repair-gpu"}},
            "template": {
                "metadata": {"labels": {"app": "repair-gpu"}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": POOL},
                    "tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }],
                },
            },
        },
    });
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(lab.client.clone(), "default");
    lab.server_side_apply(&api, "repair-gpu", &deployment);
}

fn gpu_nodes(lab: &Lab) -> Vec<Node> {
    lab.nodes()
        .into_iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"))
                == Some(&POOL.to_owned())
                && n.status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get("nvidia.com/gpu"))
                    .is_some_and(|q| q.0 == "1")
        })
        .collect()
}

fn gpu_condition(lab: &Lab, node: &str) -> Option<(String, String)> {
    lab.nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))?
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "AcceleratedHardwareReady")
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

/// The agent for `node`: its kubeconfig (the lab's server and CA, a token of the agent's
/// account bound to the node), its kernel log, and the running process.
struct Agent {
    log: std::path::PathBuf,
    child: Child,
}

impl Agent {
    fn start(lab: &Lab, node: &Node) -> Agent {
        let name = node.metadata.name.clone().unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(
            lab.client.clone(),
            kk_spec::names::controller_namespace(AGENT),
        );
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(name.clone()),
                    uid: node.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let issued: TokenRequest = lab
            .rt
            .block_on(accounts.create_subresource("token", AGENT, &PostParams::default(), &request))
            .unwrap();
        let admin = std::fs::read_to_string(lab.var("KUBECONFIG")).unwrap();
        let mut kubeconfig: serde_json::Value =
            kk_model::yaml::load_documents(&admin, Default::default())
                .unwrap()
                .remove(0)
                .value;
        kubeconfig["users"] =
            json!([{"name": "agent", "user": {"token": issued.status.unwrap().token}}]);
        for context in kubeconfig["contexts"].as_array_mut().unwrap() {
            context["context"]["user"] = json!("agent");
        }
        let dir = lab.dir.path().join(format!("agent-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("kubeconfig");
        std::fs::write(&config, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
        let log = dir.join("kmsg");
        std::fs::write(
            &log,
            "6,1,1000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n",
        )
        .unwrap();
        let boot = dir.join("boot_id");
        std::fs::write(&boot, "lab-boot-1\n").unwrap();
        let child = lab
            .command(env!("CARGO_BIN_EXE_kubean-karpenter"))
            .args([
                "controller",
                "--health-agent",
                "--node",
                &name,
                "--watch=gpu",
                "--metrics-addr=off",
            ])
            .arg("--kubeconfig")
            .arg(&config)
            .arg("--kernel-log")
            .arg(&log)
            .arg("--boot-id-file")
            .arg(&boot)
            .arg("--poll=200ms")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
            .spawn()
            .unwrap();
        Agent { log, child }
    }

    fn kernel(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_fatal_xid_gets_the_gpu_node_replaced_once_the_breaker_lets_repair_act() {
    let Some((mut lab, _, bundle)) = Lab::deployed("node repair of a sick GPU node", |s| s) else {
        return;
    };
    let values = std::fs::read_to_string(bundle.join("karpenter/values.yaml")).unwrap();
    assert!(
        values.contains("nodeRepair: true"),
        "render turns node repair on: {values}"
    );
    gpu_deployment(&lab);
    let nodes = lab.wait("two GPU nodes advertise their GPU", 5 * MIN, |l| {
        let n = gpu_nodes(l);
        (n.len() == 2).then_some(n)
    });
    let sick_pod_node = lab.wait("the Deployment's GPU pod Running", 2 * MIN, |l| {
        l.pods("default")
            .into_iter()
            .find(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|m| m.get("app"))
                    .map(String::as_str)
                    == Some("repair-gpu")
                    && pod_available(p)
            })
            .and_then(|p| p.spec?.node_name)
    });
    let (a, b) = if nodes[0].metadata.name.as_deref() == Some(sick_pod_node.as_str()) {
        (&nodes[0], &nodes[1])
    } else {
        (&nodes[1], &nodes[0])
    };
    let (a_name, b_name) = (
        a.metadata.name.clone().unwrap(),
        b.metadata.name.clone().unwrap(),
    );
    let claim_a = claims_of(&lab, POOL)
        .into_iter()
        .find(|nc| nc.data["status"]["nodeName"] == a_name.as_str())
        .and_then(|nc| nc.metadata.name)
        .expect("node A's NodeClaim");
    let agents = [Agent::start(&lab, a), Agent::start(&lab, b)];
    for node in [&a_name, &b_name] {
        lab.wait(
            &format!("{node}: the agent says the GPU is healthy"),
            MIN,
            |l| gpu_condition(l, node).filter(|(s, _)| s == "True"),
        );
    }

    agents[0].kernel(
        "4,2,2000,-;NVRM: Xid (PCI:0000:00:1e): 13, pid=42, name=python, Graphics Exception",
    );
    lab.never(
        "a warning XID changed the condition",
        Duration::from_secs(5),
        |l| gpu_condition(l, &a_name).filter(|(s, _)| s != "True"),
    );

    for agent in &agents {
        agent.kernel("3,3,3000,-;NVRM: Xid (PCI:0000:00:1e): 79, pid=42, name=python, GPU has fallen off the bus.");
    }
    for node in [&a_name, &b_name] {
        let (_, reason) = lab.wait(
            &format!("{node}: AcceleratedHardwareReady=False"),
            MIN,
            |l| gpu_condition(l, node).filter(|(s, _)| s == "False"),
        );
        assert_eq!(reason, "NvidiaXID79Error");
    }
    live(
        "   both GPU nodes sick: 2 of 2 is over the 20 % breaker; waiting past the 10-minute toleration",
    );
    lab.never(
        "Karpenter repaired a node while the breaker was tripped",
        10 * MIN + 45 * Duration::from_secs(1),
        |l| {
            let claims = claims_of(l, POOL);
            (claims.len() != 2
                || claims
                    .iter()
                    .any(|nc| nc.metadata.deletion_timestamp.is_some()))
            .then(|| {
                claims
                    .iter()
                    .map(|nc| nc.metadata.name.clone())
                    .collect::<Vec<_>>()
            })
        },
    );
    let events: Api<Event> = Api::all(lab.client.clone());
    let blocked = lab
        .rt
        .block_on(events.list(&ListParams::default()))
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NodeRepairBlocked"))
        .count();
    live(&format!("   NodeRepairBlocked events: {blocked}"));
    assert!(
        blocked > 0,
        "Karpenter says why it holds: NodeRepairBlocked"
    );

    // Node B reboots: its agent starts the new boot healthy (here: the admin writes what it would).
    drop(agents.into_iter().nth(1));
    let healthy = json!({"status": {"conditions": [{
        "type": "AcceleratedHardwareReady", "status": "True", "reason": "NvidiaGPUIsReady",
        "message": "kubean-karpenter health agent: no fault in this boot's kernel log",
        "lastTransitionTime": kk_live::token::rfc3339(kk_live::token::Timestamp::now()),
        "lastHeartbeatTime": kk_live::token::rfc3339(kk_live::token::Timestamp::now()),
    }]}});
    let nodes_api: Api<Node> = Api::all(lab.client.clone());
    lab.rt
        .block_on(nodes_api.patch_status(
            &b_name,
            &PatchParams::default(),
            &Patch::Strategic(&healthy),
        ))
        .unwrap();

    lab.wait(
        "Karpenter launches a replacement for the sick node",
        3 * MIN,
        |l| {
            claims_of(l, POOL).into_iter().find(|nc| {
                nc.metadata.name.as_deref() != Some(claim_a.as_str())
                    && nc.data["status"]["nodeName"] != a_name.as_str()
                    && nc.data["status"]["nodeName"] != b_name.as_str()
            })
        },
    );
    let new_node = lab.wait("the replacement Initialized", 5 * MIN, |l| {
        claims_of(l, POOL)
            .into_iter()
            .filter(|nc| is_true(nc, "Initialized"))
            .filter_map(|nc| nc.data["status"]["nodeName"].as_str().map(str::to_owned))
            .find(|n| *n != a_name && *n != b_name)
    });
    lab.wait("the sick NodeClaim is gone", 5 * MIN, |l| {
        (!claims_of(l, POOL)
            .iter()
            .any(|nc| nc.metadata.name.as_deref() == Some(claim_a.as_str())))
        .then_some(())
    });
    lab.wait("the GPU pod Running on the replacement", 3 * MIN, |l| {
        l.pods("default").into_iter().find(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|m| m.get("app"))
                .map(String::as_str)
                == Some("repair-gpu")
                && pod_available(p)
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(new_node.as_str())
        })
    });
    assert!(
        claims_of(&lab, POOL)
            .iter()
            .any(|nc| nc.data["status"]["nodeName"] == b_name.as_str()),
        "the healthy node stays"
    );
    lab.print_phases();
}
