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
