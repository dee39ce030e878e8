//! `verify` on the lab (`testbed/lab up`): a passing run over the CPU and GPU pools with real
//! phase timings, and runs against the deliberately broken labs of lab_e2e.rs, each stopping
//! at the phase the break stops and naming the likely cause. On the lab's fake container
//! runtime the CUDA sample runs no code and logs nothing, so the GPU pool is verified with
//! `--cuda-proof scheduled`: passed means the vectoradd pod runs on a Node that advertises the
//! nvidia.com/gpu it asked for (verify says so in its result).

use crate::harness as lab;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use lab::{Lab, edit_store};
use serde_json::Value;

use crate::harness::JOIN_STORE as STORE;

/// `verify` with the spec and `extra` flags: (exit code, JSON result).
fn verify(lab: &Lab, spec: &std::path::Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "verify",
        spec.to_str().unwrap(),
        "-o",
        "json",
        "--cuda-proof",
        "scheduled",
    ];
    args.extend_from_slice(extra);
    let out = lab.cli_output(&args);
    let code = out.status.code().unwrap_or(-1);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify exited {code}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, result)
}

/// Nothing verify created is left (its label on Deployments and Pods).
fn assert_cleaned_up(lab: &Lab, result: &Value) {
    let selector = format!(
        "kubean-karpenter.io/verify-run={}",
        result["runId"].as_str().unwrap()
    );
    let lp = ListParams::default().labels(&selector);
    // verify deletes its Deployment in the foreground: gone, or going while the garbage
    // collector removes its ReplicaSet and pods first.
    let deployments: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    assert!(
        lab.rt
            .block_on(deployments.list(&lp))
            .unwrap()
            .items
            .iter()
            .all(|d| d.metadata.deletion_timestamp.is_some()),
        "verify left its Deployment behind"
    );
    let pods: Api<Pod> = Api::namespaced(lab.client.clone(), "default");
    let left: Vec<Pod> = lab.rt.block_on(pods.list(&lp)).unwrap().items;
    assert!(
        left.iter().all(|p| p.metadata.deletion_timestamp.is_some()),
        "verify left pods behind: {:?}",
        left.iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}

fn pool<'a>(result: &'a Value, name: &str) -> &'a Value {
    result["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == name)
        .unwrap_or_else(|| panic!("no pool {name} in {result:#}"))
}

/// The pool stalled at `phase`, with `hint` among its likely causes or evidence.
fn assert_stalled(result: &Value, name: &str, phase: &str, hint: &str) {
    let p = pool(result, name);
    assert_eq!(p["outcome"]["result"], "stalled", "{p:#}");
    assert_eq!(p["outcome"]["phase"], phase, "{p:#}");
    let said = format!(
        "{}{}",
        p["outcome"]["likelyCauses"], p["outcome"]["evidence"]
    );
    assert!(
        said.contains(hint),
        "stall at {phase} should mention {hint:?}: {p:#}"
    );
}

/// Deletes the bundle's own smoke pods (`verify/`, which apply starts), then every NodeClaim
/// until none and no Karpenter Node has been seen for longer than the lab Karpenter's longest
/// provisioning batch (`BATCH_MAX_DURATION=5s` in testbed/lab): a batch begun before the pods
/// went may still launch a node for them. Otherwise the GPU node launched for the bundle's
/// vectoradd pod may be up with room by the time verify's GPU pod comes, and verify rightly
/// proves no scale-up.
fn without_capacity(lab: &mut Lab) {
    const QUIET: Duration = Duration::from_secs(8);
    let pods: Api<Pod> = Api::namespaced(lab.client.clone(), "default");
    let claims = lab.dynamic("karpenter.sh", "v1", "NodeClaim");
    lab.rt
        .block_on(pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default().labels("kubean-karpenter.io/verify"),
        ))
        .unwrap();
    let mut empty_since: Option<std::time::Instant> = None;
    lab.wait(
        "no NodeClaim or Karpenter Node for 8s",
        Duration::from_secs(180),
        |l| {
            let karpenter_nodes = l
                .nodes()
                .iter()
                .filter(|n| {
                    n.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|m| m.contains_key("karpenter.sh/nodepool"))
                })
                .count();
            if l.nodeclaims().is_empty() && karpenter_nodes == 0 {
                let since = *empty_since.get_or_insert_with(std::time::Instant::now);
                return (since.elapsed() >= QUIET).then_some(());
            }
            empty_since = None;
            let _ = l.rt.block_on(
                claims.delete_collection(&DeleteParams::default(), &ListParams::default()),
            );
            None
        },
    );
}

#[test]
fn verify_proves_cpu_and_gpu_scale_up_and_cleans_up() {
    let Some((mut lab, spec, _)) = Lab::deployed("verify: passing run", |s| s) else {
        return;
    };
    without_capacity(&mut lab);
    let (code, result) = verify(&lab, &spec, &["--timeout", "3m"]);
    eprintln!("{result:#}");
    assert_eq!(code, 0, "{result:#}");
    assert_eq!(result["passed"], true);
    let cpu: Vec<&str> = pool(&result, "workload-general")["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        cpu,
        [
            "pods Pending (Unschedulable)",
            "NodeClaim created",
            "NodeClaim Launched",
            "NodeClaim Registered",
            "NodeClaim Initialized",
            "pods Running"
        ]
    );
    let gpu = pool(&result, "workload-gpu-l4");
    assert_eq!(
        gpu["phases"].as_array().unwrap().last().unwrap()["phase"],
        "nvidia.com/gpu advertised"
    );
    assert!(
        gpu["outcome"]["note"]
            .as_str()
            .unwrap()
            .contains("CUDA log not checked"),
        "the result says what passed means on a fake runtime"
    );
    assert_cleaned_up(&lab, &result);
}

#[test]
fn verify_stops_at_registered_and_names_the_expired_token() {
    let Some((lab, spec, _)) = Lab::deployed("verify: expired token", |s| s) else {
        return;
    };
    // A store holds an expired token when its rotator is down: a running one replaces the
    // token at its next tick (1m), which can fall inside verify's wait and heal the lab before
    // doctor looks. The next test's deploy starts the rotator again.
    lab.signal("controller", "KILL");
    edit_store(&lab, STORE, "KK_EXPIRATION", "2026-01-01T00:00:00Z");
    let (code, result) = verify(
        &lab,
        &spec,
        &["--pool", "workload-general", "--timeout", "40s"],
    );
    assert_eq!(code, 1, "{result:#}");
    assert_stalled(
        &result,
        "workload-general",
        "NodeClaim Registered",
        "doctor join-store failed",
    );
    assert_stalled(
        &result,
        "workload-general",
        "NodeClaim Registered",
        "2026-01-01T00:00:00Z",
    );
    assert_cleaned_up(&lab, &result);
}

#[test]
fn verify_stops_at_registered_and_names_the_closed_api_port() {
    let Some((lab, spec, _)) = Lab::deployed("verify: API port blocked", |s| s) else {
        return;
    };
    lab.fault("api-port-blocked");
    let (code, result) = verify(
        &lab,
        &spec,
        &["--pool", "workload-general", "--timeout", "40s"],
    );
    assert_eq!(code, 1, "{result:#}");
    assert_stalled(
        &result,
        "workload-general",
        "NodeClaim Registered",
        "API port closed from the node security group",
    );
    assert_cleaned_up(&lab, &result);
}

#[test]
fn verify_stops_before_a_nodeclaim_and_names_pass_role() {
    let Some(lab) = Lab::require("verify: iam:PassRole refused") else {
        return;
    };
    let (spec, bundle) = lab.render(|s| s);
    lab.fault("passrole-denied");
    lab.deploy(&spec, &bundle);
    let (code, result) = verify(
        &lab,
        &spec,
        &["--pool", "workload-general", "--timeout", "40s"],
    );
    assert_eq!(code, 1, "{result:#}");
    // Karpenter validates the node class (and finds PassRole refused) on its own loop: usually
    // before the pods are Pending, so no NodeClaim is created; on a loaded machine one may be
    // created first and deleted when its launch is refused. Either way verify stalls before a
    // launched NodeClaim and names the refusal.
    let phase = pool(&result, "workload-general")["outcome"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ["NodeClaim created", "NodeClaim Launched"].contains(&phase.as_str()),
        "{result:#}"
    );
    assert_stalled(&result, "workload-general", &phase, "iam:PassRole");
    assert_stalled(
        &result,
        "workload-general",
        &phase,
        "doctor karpenter-ready failed",
    );
    assert_cleaned_up(&lab, &result);
}

#[test]
fn verify_stops_at_initialized_and_names_the_device_plugin() {
    let Some((lab, spec, _)) = Lab::deployed("verify: device plugin toleration mismatch", |s| s)
    else {
        return;
    };
    lab.rt
        .block_on(kk_testkit::lab::device_plugin_tolerates_only_the_upstream_taint(&lab.client));
    let (code, result) = verify(
        &lab,
        &spec,
        &["--pool", "workload-gpu-l4", "--timeout", "60s"],
    );
    assert_eq!(code, 1, "{result:#}");
    assert_stalled(
        &result,
        "workload-gpu-l4",
        "NodeClaim Initialized",
        "doctor device-plugin-on-gpu-nodes failed",
    );
    assert_cleaned_up(&lab, &result);
    let _ = Duration::ZERO;
}

#[test]
fn verify_interruption_reclaims_its_own_spot_node_and_times_the_drain_and_replacement() {
    let Some((lab, spec, _)) = Lab::deployed("verify: --interruption", |s| s) else {
        return;
    };
    // verify's spot warning marks the offering unavailable in Karpenter's memory.
    lab.karpenter_remembers();
    let (code, result) = verify(
        &lab,
        &spec,
        &[
            "--pool",
            "workload-general",
            "--interruption",
            "--timeout",
            "3m",
        ],
    );
    eprintln!("{result:#}");
    assert_eq!(code, 0, "{result:#}");
    let cpu = pool(&result, "workload-general");
    let phases: Vec<&str> = cpu["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases[6..],
        [
            "spot warning sent (sqs:SendMessage)",
            "NodeClaim deleted (interruption)",
            "Node tainted karpenter.sh/disrupted",
            "replacement NodeClaim Launched",
            "replacement NodeClaim Registered",
            "pods Running on the replacement",
            "old NodeClaim gone (instance terminated)",
        ]
    );
    let at = |name: &str| {
        cpu["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"] == name)
            .unwrap()["atSeconds"]
            .as_f64()
            .unwrap()
    };
    let chain =
        at("old NodeClaim gone (instance terminated)") - at("spot warning sent (sqs:SendMessage)");
    eprintln!("  verify --interruption: warning to old NodeClaim gone in {chain:.1}s");
    assert!(
        chain <= 120.0,
        "the reclaim took {chain}s, longer than the two-minute warning"
    );
    let note = cpu["outcome"]["note"].as_str().unwrap();
    assert!(
        note.contains("for the whole cluster for 3 minutes") && note.contains("(spot)"),
        "{note}"
    );
    assert_cleaned_up(&lab, &result);
}

#[test]
fn verify_interruption_refuses_a_node_it_did_not_launch() {
    // A spot node that verify did not launch, with room for verify's pod: the CPU pool on
    // spot xlarge only.
    let Some((mut lab, spec, _)) =
        Lab::deployed("verify: --interruption on existing capacity", |s| {
            s.replacen(
                "sizes: [large, xlarge]\n        capacityTypes: [spot, on-demand]",
                "sizes: [xlarge]\n        capacityTypes: [spot]",
                1,
            )
        })
    else {
        return;
    };
    lab.scale("inflate-workload-general", 1);
    let theirs = lab.wait(
        "a node of the pool's own inflate Deployment",
        Duration::from_secs(180),
        |l| lab::claim_of(l, "workload-general").filter(|nc| lab::is_true(nc, "Initialized")),
    );
    let (code, result) = verify(
        &lab,
        &spec,
        &[
            "--pool",
            "workload-general",
            "--interruption",
            "--timeout",
            "2m",
        ],
    );
    eprintln!("{result:#}");
    assert_eq!(code, 1, "{result:#}");
    let outcome = &pool(&result, "workload-general")["outcome"];
    assert_eq!(outcome["result"], "error", "{outcome:#}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("--interruption refused"),
        "{outcome:#}"
    );
    let name = theirs.metadata.name.unwrap();
    let still = lab::claim_of(&lab, "workload-general").unwrap();
    assert_eq!(still.metadata.name.unwrap(), name, "the node is untouched");
    assert!(still.metadata.deletion_timestamp.is_none());
    assert_cleaned_up(&lab, &result);
}
