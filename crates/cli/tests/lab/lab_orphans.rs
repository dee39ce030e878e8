//! Finding #6 of issue 24 on the lab: a terminated instance's kubelet credentials register
//! its Node again after Karpenter removed it. The CSR approver (the rendered Deployment, run by
//! the lab under its own service account) removes that Node once its grace has passed and
//! records an Event, while the Node of a live NodeClaim, launched by the real Karpenter,
//! stays through the same passes. The impostor's first try, a Node without Karpenter's
//! `karpenter.sh/unregistered` taint, is refused by the node registration policy. Last, a
//! join-token holder's CSR for an instance no NodeClaim names is denied, and the approver's
//! `/metrics` (scraped) count that denial and the live node's approval.

use crate::harness as lab;

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Event, Node};
use kk_testkit::clients;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use lab::{Lab, claim_of, is_true};
use serde_json::json;

const MIN: Duration = Duration::from_secs(60);
/// The approver's grace in this test (the rendered default is 5m).
const GRACE: &str = "20s";

/// A client that is the kubelet of instance `name` (`system:node:<name>` in `system:nodes`):
/// what its stolen client certificate or IAM session authenticates as.
fn as_node(lab: &Lab, name: &str) -> kube::Client {
    lab.rt.block_on(clients::impersonating(
        lab.var("KUBECONFIG"),
        &format!("system:node:{name}"),
        &["system:nodes", "system:authenticated"],
    ))
}

/// An instance ID no NodeClaim names (the terminated instance).
fn gone_instance() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!("i-0{:016x}", nanos ^ u64::from(std::process::id()))
}

#[test]
fn a_node_registered_again_with_a_terminated_instances_credentials_is_removed_and_live_nodes_stay()
{
    let Some(mut lab) = Lab::require("orphan Node removal") else {
        return;
    };
    let (spec, bundle) = lab.render(|s| s);
    let approver = bundle.join("rotator/csr-approver.yaml");
    let text = std::fs::read_to_string(&approver).unwrap();
    assert!(text.contains("--orphan-node-grace=5m"), "{text}");
    std::fs::write(
        &approver,
        text.replace(
            "--orphan-node-grace=5m",
            &format!("--orphan-node-grace={GRACE}"),
        ),
    )
    .unwrap();
    lab.deploy(&spec, &bundle);

    // A live node: the real Karpenter launches it for a pending pod.
    lab.scale("inflate-workload-general", 1);
    let claim = lab.wait("NodeClaim Initialized", 4 * MIN, |l| {
        claim_of(l, "workload-general").filter(|nc| is_true(nc, "Initialized"))
    });
    let live = claim.data["status"]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();

    // The impostor first tries to register without Karpenter's taint, to draw pods at once:
    // the node registration policy (cloud/node-registration-policy.yaml) refuses it.
    let gone = gone_instance();
    let nodes: Api<Node> = Api::all(as_node(&lab, &gone));
    let untainted: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": gone},
        "spec": {"providerID": format!("aws:///us-east-1a/{gone}")},
    }))
    .unwrap();
    match lab
        .rt
        .block_on(nodes.create(&PostParams::default(), &untainted))
    {
        Err(kube::Error::Api(e))
            if e.code == 403 && e.message.contains("kubean-karpenter-node-registration") =>
        {
            lab::live(&format!(
                "  refused: an untainted impostor Node: {}",
                e.message
            ));
        }
        other => {
            panic!("an instance Node without karpenter.sh/unregistered must be refused: {other:?}")
        }
    }

    // Then registered as the node registration policy demands (Karpenter's taint, its own
    // providerID), Ready, by the identity of an instance that no longer exists.
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": gone, "labels": {"kubernetes.io/hostname": gone}},
        "spec": {
            "providerID": format!("aws:///us-east-1a/{gone}"),
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
    }))
    .unwrap();
    lab.rt
        .block_on(nodes.create(&PostParams::default(), &node))
        .expect("the stolen node identity registers its Node");
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "impostor", "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    lab.rt
        .block_on(nodes.patch_status(&gone, &PatchParams::default(), &Patch::Merge(&status)))
        .unwrap();
    lab.wait("impostor Node registered (Ready)", MIN, |l| {
        l.nodes()
            .into_iter()
            .any(|n| n.metadata.name.as_deref() == Some(gone.as_str()))
            .then_some(())
    });

    lab.wait(
        "the approver removed the impostor Node (its grace passed)",
        2 * MIN,
        |l| {
            (!l.nodes()
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(gone.as_str())))
            .then_some(())
        },
    );
    let events: Api<Event> = Api::namespaced(lab.client.clone(), "default");
    let event = lab
        .rt
        .block_on(events.list(&ListParams::default()))
        .unwrap()
        .items
        .into_iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some(gone.as_str())
                && e.reason.as_deref() == Some("KubeanKarpenterOrphanNode")
        })
        .expect("a Warning Event on the removed Node");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .message
            .as_deref()
            .is_some_and(|m| m.contains("no NodeClaim names")),
        "{event:?}"
    );

    // The live node went through the same passes (its age is past the grace by now).
    let still = lab.nodes();
    assert!(
        still
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(live.as_str())),
        "the approver removed the live node {live}: {:?}",
        still.iter().map(|n| &n.metadata.name).collect::<Vec<_>>()
    );
    assert!(claim_of(&lab, "workload-general").is_some_and(|nc| is_true(&nc, "Initialized")));

    // A join-token holder asks for a client certificate for an instance no NodeClaim names:
    // denied. The approver's /metrics count that denial and the live node's approval.
    let csr = format!("kk-lab-denied-{}", gone.trim_start_matches("i-"));
    submit_token_csr(&lab, &csr, &gone);
    let reason = lab.wait("the approver denied the stray CSR", MIN, |l| {
        let api: Api<CertificateSigningRequest> = Api::all(l.client.clone());
        let c = l.rt.block_on(api.get(&csr)).ok()?;
        let cond = c.status?.conditions?.into_iter().next()?;
        (cond.type_ == "Denied").then(|| cond.reason.unwrap_or_default())
    });
    assert_eq!(reason, "KubeanKarpenterRefused");
    let metrics = scrape_approver(&lab);
    let count = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in the approver's /metrics:\n{metrics}"))
    };
    let approved = count(
        "kubean_karpenter_csr_decisions_total{condition=\"Approved\",reason=\"KubeanKarpenterNodeClaim\"}",
    );
    let refused = count(
        "kubean_karpenter_csr_decisions_total{condition=\"Denied\",reason=\"KubeanKarpenterRefused\"}",
    );
    lab::live(&format!(
        "  approver /metrics: approved {approved}, refused {refused}"
    ));
    assert!(
        approved >= 1.0,
        "the live node's CSR was approved: {approved}"
    );
    assert!(refused >= 1.0, "the stray CSR was denied: {refused}");
    lab.print_phases();
}

/// Files a kubelet client CSR for `instance` as a holder of our join token would (impersonated:
/// a bootstrap-token user in the join group).
fn submit_token_csr(lab: &Lab, name: &str, instance: &str) {
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-new",
            "-nodes",
            "-keyout",
            "/dev/null",
            "-newkey",
            "ec",
        ])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1", "-subj"])
        .arg(format!("/O=system:nodes/CN=system:node:{instance}"))
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = lab.rt.block_on(clients::impersonating(
        lab.var("KUBECONFIG"),
        "system:bootstrap:kklab1",
        &[kk_live::token::JOIN_TOKEN_GROUP, "system:authenticated"],
    ));
    let body: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "request": k8s_openapi::ByteString(out.stdout),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        }
    }))
    .unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(client);
    lab.rt
        .block_on(api.create(&PostParams::default(), &body))
        .expect("a join-token holder may file a CSR");
}

/// The lab's CSR approver's /metrics (its address is the first line of its log).
fn scrape_approver(lab: &Lab) -> String {
    let log = lab.state().join("logs/csr-approver.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let addr = text
        .lines()
        .find_map(|l| l.strip_prefix("serving /metrics, /healthz and /readyz on "))
        .unwrap_or_else(|| panic!("no metrics address in {}", log.display()))
        .to_owned();
    let out = std::process::Command::new("curl")
        .args([
            "-fsS",
            "--max-time",
            "10",
            &format!("http://{addr}/metrics"),
        ])
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "GET /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
