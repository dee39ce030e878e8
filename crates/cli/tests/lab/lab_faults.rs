//! Faults on the lab (issue #30): a component killed or an AWS call refused while the system is
//! working, then the invariants checked — no pod that should run is lost, no node runs without
//! its NodeClaim, no instance is left running without one. The process faults go through
//! `testbed/lab signal` (kill -9 / SIGSTOP by pid); the AWS ones through moto's fault switches
//! (`Lab::fault`).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::harness::{Lab, assert_no_orphan_no_duplicate, is_true, live, pod_available};

const MIN: Duration = Duration::from_secs(60);

/// Scales the CPU pool's load to `replicas` and waits for a NodeClaim that is Launched and not
/// yet Registered: the window where a fault could orphan an instance. Its name.
fn in_flight(lab: &mut Lab, replicas: i32) -> String {
    lab.scale("inflate-workload-general", replicas);
    lab.wait("a NodeClaim launched but not registered", 2 * MIN, |l| {
        l.nodeclaims()
            .into_iter()
            .find(|nc| is_true(nc, "Launched") && !is_true(nc, "Registered"))
            .and_then(|nc| nc.metadata.name.clone())
    })
}

/// Waits until the CPU pool's `replicas` pods are Running and ready, then every claim Initialized.
fn all_landed(lab: &mut Lab, replicas: usize, timeout: Duration) {
    lab.wait("every inflate pod Running and ready", timeout, |l| {
        let pods = l.general_pods();
        (pods.len() == replicas && pods.iter().all(pod_available)).then_some(())
    });
    lab.wait("every NodeClaim Initialized", 2 * MIN, |l| {
        let claims = l.nodeclaims();
        (!claims.is_empty() && claims.iter().all(|nc| is_true(nc, "Initialized"))).then_some(())
    });
}

/// Karpenter killed (SIGKILL, no shutdown) while a NodeClaim is launched but its node has not
/// registered, then started again: the new process takes the claim over from the API server,
/// the node registers to it, the pods land; no second instance or Node for the same pods, no
/// instance left over.
#[test]
fn karpenter_killed_mid_launch_and_restarted_leaves_no_orphan_and_no_duplicate() {
    let Some((mut lab, _spec, bundle)) =
        Lab::deployed("faults: Karpenter killed mid-launch", |s| s)
    else {
        return;
    };
    let in_flight = in_flight(&mut lab, 3);
    lab.signal("karpenter", "KILL");
    live(&format!(
        "   killed Karpenter with {in_flight} launched, not registered"
    ));
    std::thread::sleep(Duration::from_secs(2));
    lab.lab(&["karpenter", bundle.to_str().unwrap()]);
    all_landed(&mut lab, 3, 4 * MIN);
    let claims = assert_no_orphan_no_duplicate(&lab);
    assert!(
        lab.nodeclaims()
            .iter()
            .any(|nc| nc.metadata.name.as_deref() == Some(in_flight.as_str())),
        "the claim in flight at the kill ({in_flight}) was taken over, not replaced: {claims:?}"
    );
    lab.print_phases();
}

/// The lab processes (the pids file's lines) that are no longer running.
fn dead_processes(lab: &Lab) -> Vec<String> {
    let pids = std::fs::read_to_string(lab.state().join("pids")).unwrap();
    pids.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, pid)| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        .map(|(name, pid)| format!("{name} (pid {pid})"))
        .collect()
}

/// The API server restarted (SIGTERM, then started again with the same flags, as an upgrade
/// replaces its static pod) while a NodeClaim is launched and its node is joining. Karpenter,
/// the CCM, the controller-manager, the scheduler, our controllers and the joining kubelet
/// retry through the outage: every pod lands, every claim initializes, no process died, and
/// no instance or Node is left without its claim or doubled.
#[test]
fn apiserver_restarted_mid_launch_loses_no_pod_and_leaves_no_orphan() {
    let Some((mut lab, _spec, _bundle)) =
        Lab::deployed("faults: API server restarted mid-launch", |s| s)
    else {
        return;
    };
    let in_flight = in_flight(&mut lab, 3);
    let restarted = Instant::now();
    lab.lab(&["restart", "kube-apiserver"]);
    lab.wait("the API server answering again", 2 * MIN, |l| {
        let nodes: Api<Node> = Api::all(l.client.clone());
        l.rt.block_on(nodes.list(&ListParams::default()))
            .ok()
            .map(|_| ())
    });
    let back = restarted.elapsed();
    live(&format!(
        "   API server back {:.1}s after the restart began, {in_flight} launched and not registered",
        back.as_secs_f64()
    ));
    all_landed(&mut lab, 3, 5 * MIN);
    live(&format!(
        "   every pod ready {:.0}s after the restart began",
        restarted.elapsed().as_secs_f64()
    ));
    assert_eq!(
        dead_processes(&lab),
        Vec::<String>::new(),
        "a lab process died across the API server's restart"
    );
    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}

/// EC2 out of capacity for the pool's cheapest type: moto answers CreateFleet with
/// InsufficientInstanceCapacity for every m6i.large override (spot and on-demand, in the
/// response's Errors, as EC2 does) and launches from the others. Karpenter falls back to
/// another offering, the pods land, and nothing is left without its NodeClaim.
#[test]
fn insufficient_capacity_for_the_cheapest_type_falls_back_to_another_offering() {
    let Some((mut lab, _spec, _bundle)) = Lab::deployed("faults: no capacity for m6i.large", |s| s)
    else {
        return;
    };
    let log = lab.state().join("logs/moto.log");
    let refusals = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("CreateFleet refused m6i.large")
            .count()
    };
    let before = refusals();
    lab.fault_with("insufficient-capacity", "m6i.large\n");
    // One pod (1 CPU) fits the cheapest type, so Karpenter's fleet request lists m6i.large.
    lab.scale("inflate-workload-general", 1);
    lab.wait("the inflate pod Running and ready", 4 * MIN, |l| {
        let pods = l.general_pods();
        (pods.len() == 1 && pods.iter().all(pod_available)).then_some(())
    });
    assert!(
        refusals() > before,
        "Karpenter never asked for m6i.large: the fault proved nothing"
    );
    let types: Vec<String> = lab
        .nodeclaims()
        .iter()
        .filter(|nc| {
            nc.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"))
                .map(String::as_str)
                == Some("workload-general")
        })
        .filter_map(|nc| {
            nc.metadata
                .labels
                .as_ref()?
                .get("node.kubernetes.io/instance-type")
                .cloned()
        })
        .collect();
    assert!(!types.is_empty(), "no workload-general NodeClaim");
    assert!(
        types.iter().all(|t| t != "m6i.large"),
        "a claim of the refused type: {types:?}"
    );
    live(&format!("   fell back to {types:?}"));
    assert_no_orphan_no_duplicate(&lab);
}
