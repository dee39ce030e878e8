//! `kubean-karpenter top --state` on fixtures/top/fleet.yaml: the snapshot a user sees, as a
//! table (compared with fixtures/top/fleet.table.txt; `KK_UPDATE_GOLDEN=1` rewrites it) and
//! as JSON, and the errors. The same command on the lab's live cluster is in tests/lab.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/top")
        .join(name)
}

fn top(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("top")
        .args(args)
        .output()
        .expect("run kubean-karpenter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const NOW: &str = "2026-12-01T12:00:00Z";

fn snapshot(extra: &[&str]) -> Value {
    let state = fixture("fleet.yaml");
    let mut args = vec![
        "--state",
        state.to_str().unwrap(),
        "--now",
        NOW,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = top(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("top -o json prints JSON")
}

#[test]
fn the_table_is_the_golden_one_and_fits_80_columns() {
    let state = fixture("fleet.yaml");
    let (code, out, err) = top(&["--state", state.to_str().unwrap(), "--now", NOW]);
    assert_eq!(code, 0, "{err}");
    for line in out.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    let golden = fixture("fleet.table.txt");
    if std::env::var_os("KK_UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(
        out,
        want,
        "top's table changed; KK_UPDATE_GOLDEN=1 rewrites {}",
        golden.display()
    );
}

#[test]
fn nodes_carry_pool_type_capacity_type_price_and_use() {
    let v = snapshot(&[]);
    let nodes = v["nodes"].as_array().unwrap();
    let node = |name: &str| {
        nodes
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("no node {name} in {v}"))
    };
    let spot = node("ip-10-0-1-11.ec2.internal");
    assert_eq!(spot["nodePool"], "cpu");
    assert_eq!(spot["capacityType"], "spot");
    assert_eq!(spot["cpu"]["requested"], 3000);
    assert_eq!(spot["cpu"]["allocatable"], 3920);
    // The catalog's on-demand m5.2xlarge, and spot as plan prices it (a fraction of it).
    assert_eq!(node("ip-10-0-2-12.ec2.internal")["pricePerHour"], 0.384);
    let spot_price = spot["pricePerHour"].as_f64().unwrap();
    assert!(spot_price > 0.0 && spot_price < 0.192, "{spot_price}");
    let gpu = node("ip-10-0-1-21.ec2.internal");
    assert_eq!(gpu["gpu"]["requested"], 1);
    assert_eq!(gpu["gpu"]["allocatable"], 1);
    assert_eq!(gpu["state"], "initialized");
    assert_eq!(node("ip-10-0-3-22.ec2.internal")["state"], "drifted");
    assert_eq!(node("ip-10-0-2-12.ec2.internal")["state"], "do-not-disrupt");
    let control_plane = node("ip-10-0-0-5.ec2.internal");
    assert_eq!(control_plane["state"], "unmanaged");
    assert!(control_plane.get("pricePerHour").is_none());
    let sum: f64 = nodes
        .iter()
        .filter_map(|n| n["pricePerHour"].as_f64())
        .sum();
    let total = v["totals"]["pricePerHour"].as_f64().unwrap();
    assert!((sum - total).abs() < 1e-6, "{sum} vs {total}");
    assert!((v["totals"]["pricePerMonth"].as_f64().unwrap() - total * 730.5).abs() < 1e-3);
}

#[test]
fn pools_show_what_they_hold_of_their_limits() {
    let v = snapshot(&[]);
    let cpu = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "cpu")
        .unwrap();
    assert_eq!(cpu["nodes"], 2);
    // Karpenter counts node capacity against limits: 4 + 8 cores of 12.
    assert_eq!(cpu["limits"]["cpu"]["requested"], 12000);
    assert_eq!(cpu["limits"]["cpu"]["allocatable"], 12000);
    assert_eq!(cpu["limits"]["nodes"]["requested"], 2);
}

#[test]
fn claims_in_flight_and_the_stuck_one() {
    let v = snapshot(&[]);
    let claims = v["nodeClaimsInFlight"].as_array().unwrap();
    let names: Vec<&str> = claims.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["cpu-young", "gpu-stuck"],
        "an initialized claim is not in flight"
    );
    assert_eq!(claims[0]["phase"], "registered");
    assert_eq!(claims[0]["stuck"], false);
    assert_eq!(claims[1]["phase"], "launched");
    assert_eq!(claims[1]["stuck"], true);
    let cause = claims[1]["likelyCause"].as_str().unwrap();
    assert!(
        cause.contains("Node not registered with cluster") && cause.contains("doctor"),
        "{cause}"
    );
}

#[test]
fn pending_pods_carry_plans_reason() {
    let v = snapshot(&[]);
    let pending = v["pending"].as_array().unwrap();
    let reason_of = |pod: &str| {
        pending
            .iter()
            .find(|g| g["pods"].as_array().unwrap().iter().any(|p| p == pod))
            .map(|g| g["reason"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{pod} not pending in {v}"))
    };
    assert!(reason_of("batch/arm-batch").contains("nodepool cpu limit nodes=2 exceeded"));
    assert!(reason_of("inference/vllm-1").contains("fits on existing node ip-10-0-3-22"));
    assert_eq!(v["totals"]["pendingPods"], 2);
}

#[test]
fn one_pool_only() {
    let v = snapshot(&["--pool", "gpu"]);
    let pools: Vec<&str> = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(pools, ["gpu"]);
    assert!(
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["nodePool"] == "gpu")
    );
    assert_eq!(v["nodeClaimsInFlight"].as_array().unwrap().len(), 1);
}

#[test]
fn yaml_is_the_same_snapshot() {
    let state = fixture("fleet.yaml");
    let (code, out, err) = top(&[
        "--state",
        state.to_str().unwrap(),
        "--now",
        NOW,
        "-o",
        "yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("nodeClaimsInFlight:") && out.contains("name: gpu-stuck"),
        "{out}"
    );
}

#[test]
fn a_broken_state_file_is_one_located_error_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("state.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  allocatable: {cpu: lots}\n",
    )
    .unwrap();
    let (code, out, err) = top(&["--state", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("state.yaml:5"), "{err}");
    assert_eq!(out, "", "nothing printed after an error");
}

#[test]
fn an_unreachable_cluster_is_exit_2_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    // Standard output is a pipe here: one snapshot, as with --once.
    let (code, _, err) = top(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("reading the cluster's state"), "{err}");
}
