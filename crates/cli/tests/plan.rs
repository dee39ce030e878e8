//! `kubean-karpenter plan` end to end on the fixtures in fixtures/sim/.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sim")
        .join(name)
        .display()
        .to_string()
}

fn plan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run kubean-karpenter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn gpu_limit_story_as_table_and_json() {
    let pools = fixture("pools.yaml");
    let work = fixture("gpu-50.yaml");
    let (code, out, err) = plan(&["-f", &pools, "-w", &work]);
    assert_eq!(code, 1, "Pending pods exit 1: {err}");
    assert!(
        out.contains("total: 6 new nodes, 6 pods placed, 44 Pending"),
        "{out}"
    );
    assert!(
        out.contains("nodepool gpu limit nvidia.com/gpu=6 exceeded"),
        "{out}"
    );

    let (code, out, _) = plan(&[
        "-f",
        &pools,
        "-w",
        &work,
        "-o",
        "json",
        "--scale",
        "deploy/vllm=2",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["totals"]["nodes"], 2);
    assert_eq!(v["nodeClaims"][0]["nodePool"], "gpu");
    assert_eq!(v["nodeClaims"][0]["capacityType"], "spot");
    assert!(
        v["nodeClaims"][0]["instanceTypeOptions"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    assert_eq!(v["pending"].as_array().map(Vec::len), Some(0));
}

#[test]
fn explain_and_input_errors() {
    let pools = fixture("pools.yaml");
    let work = fixture("gpu-50.yaml");
    let nodes = fixture("node-sliced.yaml");
    let (code, out, _) = plan(&[
        "-f",
        &pools,
        "-w",
        &work,
        "--nodes",
        &nodes,
        "--explain",
        "inference/vllm-0",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("result:   existing node ip-10-0-1-23.ec2.internal"),
        "{out}"
    );

    let (code, _, err) = plan(&["-f", &pools, "-w", "/nonexistent/app.yaml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/app.yaml"), "{err}");
    let (code, _, err) = plan(&["-f", &pools, "-w", &work, "--scale", "deploy/nope=1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no deploy named nope"), "{err}");
}

fn disrupt_fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/disrupt/cluster.yaml")
        .display()
        .to_string()
}

#[test]
fn disrupt_table_json_yaml_and_explain() {
    let state = disrupt_fixture();
    let (code, out, err) = plan(&["--disrupt", "-f", &state, "--at", "2h"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Disruption at 2026-12-01T02:00:00Z"), "{out}");
    assert!(out.contains("Emptiness"), "{out}");
    assert!(
        out.contains("Nodes: 8 -> 3 (5 removed, 0 replacements)"),
        "{out}"
    );
    assert!(
        out.contains("cpu-3 (default): pod default/batch-0 has \"karpenter.sh/do-not-disrupt\""),
        "{out}"
    );

    let (code, out, _) = plan(&["--disrupt", "-f", &state, "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["commands"][0]["method"], "SingleNodeConsolidation");
    assert_eq!(v["totals"]["nodesRemoved"], 2);

    let (code, out, _) = plan(&[
        "--disrupt",
        "-f",
        &state,
        "-o",
        "yaml",
        "--now",
        "2026-12-01T01:30:00Z",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("method: Emptiness"), "{out}");

    let (code, out, _) = plan(&[
        "--disrupt",
        "-f",
        &state,
        "--at",
        "2h",
        "--explain",
        "gpu-c",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("round 3: Emptiness: deleted"), "{out}");
    assert!(
        out.contains("round 1: Emptiness: disruption budget of nodepool gpu exhausted"),
        "{out}"
    );
}

#[test]
fn disrupt_usage_errors_exit_2() {
    let state = disrupt_fixture();
    let (code, _, err) = plan(&["--disrupt", "-f", &state, "--at", "two hours"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--at"), "{err}");
    let (code, _, err) = plan(&["--disrupt", "-f", &state, "--explain", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("node nope is not among the inputs"), "{err}");
    // --at belongs to --disrupt.
    let (code, _, _) = plan(&["-f", &state, "-w", &state, "--at", "2h"]);
    assert_eq!(code, 2);
}

/// docs/plan.md "Example: the seed's GPU pool on an idle fleet", pass by pass.
#[test]
fn disrupt_idle_gpu_fleet_example_in_docs() {
    let state = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/disrupt/gpu-idle.yaml")
        .display()
        .to_string();
    let at = |d: &str| {
        let (code, out, err) = plan(&[
            "--disrupt",
            "-f",
            &state,
            "--now",
            "2026-12-01T00:00:00Z",
            "--at",
            d,
            "-o",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let removed = |v: &serde_json::Value| v["totals"]["nodesRemoved"].as_u64().unwrap();
    assert_eq!(removed(&at("0s")), 0);
    assert_eq!(removed(&at("1h")), 1);
    let v = at("1h45m");
    assert_eq!(removed(&v), 3);
    // One node per pass under the budget of one node.
    let rounds: Vec<u64> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, vec![1, 2, 3]);
    assert!(
        v["kept"][0]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("consolidatable at 2026-12-01T02:00:00Z")
    );
    let v = at("24h");
    assert_eq!(removed(&v), 4);
    assert_eq!(v["totals"]["pricePerHourAfter"], 0.0);
    assert_eq!(v["totals"]["pricePerHourBefore"], 4.024);
}
