//! The node health agent on the testbed's real apiserver (#50): its identity — the rendered
//! service account with a token bound to one Node, as the kubelet mounts it into the
//! DaemonSet's pod — writes that Node's health conditions and nothing else. Every attack a
//! stolen agent token could try is performed and refused: another Node's conditions, a label,
//! an annotation, a taint, capacity, the kubelet's own `Ready`, deleting a Node, reading a
//! Secret, and writing with a token bound to no Node. Then the agent itself runs against a
//! kernel log file (a stand-in for `/dev/kmsg`, which a test cannot write) and turns a fatal
//! XID into `AcceleratedHardwareReady=False` while a warning XID changes no condition.

use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Event, Node, Secret, ServiceAccount};
use kk_live::controller::health_agent::{HealthAgent, HealthAgentConfig, Watch};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::*;

const AGENT: &str = kk_spec::names::HEALTH_AGENT;

fn require_testbed() -> Option<kk_testkit::testbed::Testbed> {
    kk_testkit::testbed::require(&repo(), "the node health agent's identity")
}

fn forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            eprintln!("refused as expected: {what}: {}", s.message);
        }
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

/// A Node as a kubelet registers it, with a Ready condition and GPU capacity.
async fn node(admin: &Client, name: &str) -> Node {
    let nodes: Api<Node> = Api::all(admin.clone());
    let created = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": "gpu-inference" } },
                "spec": { "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }] },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let status = json!({ "status": {
        "capacity": { "cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "1" },
        "allocatable": { "cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "1" },
        "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                         "lastHeartbeatTime": "2026-12-07T00:00:00Z", "lastTransitionTime": "2026-12-07T00:00:00Z" }],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    created
}

/// A token of the agent's service account, bound to `node` (as the kubelet's projected
/// token is bound to the pod, and through it to the node) or to nothing.
async fn agent_token(admin: &Client, node: Option<&Node>) -> String {
    let accounts: Api<ServiceAccount> =
        Api::namespaced(admin.clone(), kk_spec::names::controller_namespace(AGENT));
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(600),
            bound_object_ref: node.map(|n| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: n.metadata.name.clone(),
                uid: n.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let issued: TokenRequest = accounts
        .create_subresource("token", AGENT, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token
}

fn condition(kind: &str, status: &str, reason: &str) -> Value {
    json!({ "status": { "conditions": [{
        "type": kind, "status": status, "reason": reason, "message": "test",
        "lastHeartbeatTime": "2026-12-07T00:00:00Z", "lastTransitionTime": "2026-12-07T00:00:00Z",
    }]}})
}

fn strategic(patch: &Value) -> Patch<&Value> {
    Patch::Strategic(patch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_token_writes_its_own_nodes_conditions_and_nothing_else() {
    let Some(testbed) = require_testbed() else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let (mine, other) = (
        format!("ip-10-0-1-{}", unique()),
        format!("ip-10-0-2-{}", unique()),
    );
    let mine_node = node(&admin, &mine).await;
    node(&admin, &other).await;
    let token = agent_token(&admin, Some(&mine_node)).await;
    let agent = kk_testkit::clients::bearer(&testbed.kubeconfig, &token).await;
    let nodes: Api<Node> = Api::all(agent.clone());
    let pp = PatchParams::default();
    // The policy takes effect within moments of being applied: wait until it refuses a dry run.
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let probe = condition("AcceleratedHardwareReady", "False", "NvidiaXID79Error");
        match nodes.patch_status(&other, &dry, &strategic(&probe)).await {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the policy never took effect: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Allowed: its own Node's AcceleratedHardwareReady.
    nodes
        .patch_status(
            &mine,
            &pp,
            &strategic(&condition(
                "AcceleratedHardwareReady",
                "True",
                "NvidiaGPUIsReady",
            )),
        )
        .await
        .expect("the agent writes its own node's condition");

    forbidden(
        "another Node's conditions",
        nodes
            .patch_status(
                &other,
                &pp,
                &strategic(&condition(
                    "AcceleratedHardwareReady",
                    "False",
                    "NvidiaXID79Error",
                )),
            )
            .await,
    );
    forbidden(
        "the kubelet's Ready condition",
        nodes
            .patch_status(
                &mine,
                &pp,
                &strategic(&condition("Ready", "False", "Stolen")),
            )
            .await,
    );
    forbidden(
        "a label through the status subresource",
        nodes
            .patch_status(
                &mine,
                &pp,
                &Patch::Merge(&json!({"metadata": {"labels": {"karpenter.sh/nodepool": "other"}}})),
            )
            .await,
    );
    forbidden(
        "an annotation through the status subresource",
        nodes
            .patch_status(
                &mine,
                &pp,
                &Patch::Merge(
                    &json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
                ),
            )
            .await,
    );
    forbidden(
        "capacity",
        nodes
            .patch_status(
                &mine,
                &pp,
                &Patch::Merge(&json!({"status": {"capacity": {"nvidia.com/gpu": "8"}}})),
            )
            .await,
    );
    forbidden(
        "a taint (the Node itself)",
        nodes
            .patch(&mine, &pp, &Patch::Merge(&json!({"spec": {"taints": []}})))
            .await,
    );
    forbidden(
        "deleting a Node",
        nodes.delete(&other, &DeleteParams::default()).await,
    );
    forbidden(
        "reading Secrets",
        Api::<Secret>::namespaced(agent.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
    );
    // A token of the same account bound to no Node names no node: refused everywhere.
    let unbound = agent_token(&admin, None).await;
    let unbound = kk_testkit::clients::bearer(&testbed.kubeconfig, &unbound).await;
    forbidden(
        "a token bound to no Node",
        Api::<Node>::all(unbound)
            .patch_status(
                &mine,
                &pp,
                &strategic(&condition(
                    "AcceleratedHardwareReady",
                    "False",
                    "NvidiaXID79Error",
                )),
            )
            .await,
    );

    // The conditions of both Nodes are as the allowed write left them.
    let admin_nodes: Api<Node> = Api::all(admin.clone());
    let kinds = |n: &Node| -> Vec<(String, String)> {
        let mut kinds: Vec<(String, String)> = n
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        kinds.sort();
        kinds
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        kinds(&admin_nodes.get(&mine).await.unwrap()),
        [
            pair("AcceleratedHardwareReady", "True"),
            pair("Ready", "True")
        ]
    );
    assert_eq!(
        kinds(&admin_nodes.get(&other).await.unwrap()),
        [pair("Ready", "True")]
    );
    for name in [&mine, &other] {
        let _ = admin_nodes.delete(name, &DeleteParams::default()).await;
    }
}

/// A running agent: how to stop it, its task, and where its `/metrics` listens.
type Running = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), kk_live::controller::health_agent::HealthAgentError>>,
    std::net::SocketAddr,
);

/// The agent for `node` as the DaemonSet's pod runs it (its account's token bound to the node),
/// reading `log`, until the returned sender is dropped or sent to.
async fn start_agent(
    testbed: &kk_testkit::testbed::Testbed,
    admin: &Client,
    node: &Node,
    log: &std::path::Path,
) -> Running {
    let mut config = kube_config(testbed).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(agent_token(admin, Some(node)).await.into()),
        ..Default::default()
    };
    let mut agent = HealthAgent::new(
        config,
        HealthAgentConfig {
            node: node.metadata.name.clone().unwrap(),
            kernel_log: log.to_owned(),
            watch: Watch {
                gpu: true,
                kernel: false,
            },
            boot_id: "boot-1".into(),
            poll: Duration::from_millis(100),
        },
    )
    .unwrap();
    let metrics = agent.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.run(async {
        let _ = stopped.await;
    }));
    (stop, running, metrics)
}

/// The agent (the library the `--health-agent` mode runs) against a kernel log file: a file
/// stands in for `/dev/kmsg`, which a test cannot write; everything else is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_xid_turns_the_node_unhealthy_and_a_warning_does_not() {
    let Some(testbed) = require_testbed() else {
        return;
    };
    let admin = admin(&testbed).await;
    install_rotator(&admin).await;
    let name = format!("ip-10-0-3-{}", unique());
    let node = node(&admin, &name).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kmsg");
    std::fs::write(
        &log,
        "6,100,1000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n",
    )
    .unwrap();
    let (stop, running, metrics) = start_agent(&testbed, &admin, &node, &log).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let gpu_condition = || async {
        nodes
            .get(&name)
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "AcceleratedHardwareReady")
    };
    let wait_for = |want: &'static str| {
        let gpu_condition = &gpu_condition;
        async move {
            for _ in 0..100 {
                if let Some(c) = gpu_condition().await
                    && c.status == want
                {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!(
                "AcceleratedHardwareReady never became {want}: {:?}",
                gpu_condition().await
            );
        }
    };
    let healthy = wait_for("True").await;
    assert_eq!(healthy.reason.as_deref(), Some("NvidiaGPUIsReady"));

    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        file,
        "4,101,2000,-;NVRM: Xid (PCI:0000:00:1e): 13, pid=77, name=python, Graphics Exception"
    )
    .unwrap();
    file.flush().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_warning = gpu_condition().await.unwrap();
    assert_eq!(
        after_warning.status, "True",
        "a warning XID changes no condition"
    );

    writeln!(file, "3,102,3000,-;NVRM: Xid (PCI:0000:00:1e): 79, pid=1896, name=python, GPU has fallen off the bus.").unwrap();
    file.flush().unwrap();
    let sick = wait_for("False").await;
    assert_eq!(sick.reason.as_deref(), Some("NvidiaXID79Error"));
    let message = sick.message.unwrap_or_default();
    assert!(
        message.contains("XID 79") && message.contains("GPU has fallen off the bus"),
        "{message}"
    );
    assert!(
        kk_karpenter::repair::policy_for(
            "AcceleratedHardwareReady",
            "False",
            "NvidiaXID79Error",
            false
        )
        .is_some(),
        "Karpenter repairs what the agent wrote"
    );
    // Both faults are Events on the Node.
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let mut reasons = Vec::new();
    for _ in 0..50 {
        reasons = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<Vec<_>>();
        if reasons.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reasons.sort();
    assert_eq!(reasons, ["NvidiaXID13Warning", "NvidiaXID79Error"]);
    // And in the agent's metrics, labelled with the node and its pool.
    let (code, body) = http_get(metrics, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    for line in [
        format!(
            "kubean_karpenter_node_health_condition{{node=\"{name}\",nodepool=\"gpu-inference\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaXID79Error\"}} 0"
        ),
        format!(
            "kubean_karpenter_node_health_findings_total{{node=\"{name}\",nodepool=\"gpu-inference\",reason=\"NvidiaXID13Warning\",severity=\"warning\"}} 1"
        ),
        format!(
            "kubean_karpenter_node_health_findings_total{{node=\"{name}\",nodepool=\"gpu-inference\",reason=\"NvidiaXID79Error\",severity=\"fatal\"}} 1"
        ),
    ] {
        assert!(body.lines().any(|l| l == line), "no {line} in\n{body}");
    }

    // A restart in the same boot keeps the condition even with a log that lost the line.
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    std::fs::write(
        &log,
        "6,200,1000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n",
    )
    .unwrap();
    let (stop, running, _) = start_agent(&testbed, &admin, &node, &log).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = gpu_condition().await.unwrap();
    assert_eq!(
        (kept.status.as_str(), kept.reason.as_deref()),
        ("False", Some("NvidiaXID79Error"))
    );
    assert_eq!(
        kept.last_transition_time, sick.last_transition_time,
        "Karpenter's clock is not restarted"
    );
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
}
