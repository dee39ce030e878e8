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
    // So does --reclaim, and a bad selector is one error naming the term.
    let (code, _, _) = plan(&["-f", &state, "-w", &state, "--reclaim", "spot"]);
    assert_eq!(code, 2);
    let (code, _, err) = plan(&["--disrupt", "-f", &state, "--reclaim", "zone"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--reclaim: \"zone\": say which"), "{err}");
}

/// `--reclaim`: the fixture's whole zone taken back, a second zone offered.
#[test]
fn disrupt_reclaim_says_where_the_pods_go_as_table_and_json() {
    let state = disrupt_fixture();
    let args = |o: &'static str| {
        plan(&[
            "--disrupt",
            "-f",
            &state,
            "--zones",
            "us-east-1a,us-east-1b",
            "--reclaim",
            "zone:us-east-1a",
            "-o",
            o,
        ])
    };
    let (code, out, err) = args("table");
    assert_eq!(code, 0, "{err}");
    for says in [
        "Reclaim of zone:us-east-1a",
        "Interruption",
        "Where the pods go:",
        "default/web-cpu-1 -> ",
        "us-east-1b",
        "reclaimed,",
    ] {
        assert!(out.contains(says), "should say {says:?}: {out}");
    }
    let (code, out, err) = args("json");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["reclaim"]["selector"], "zone:us-east-1a");
    assert_eq!(v["commands"][0]["reason"], "Reclaimed");
    assert_eq!(v["kept"], serde_json::json!([]));
    // Nowhere to go: the pods stay Pending and the exit code says so.
    let (code, out, _) = plan(&["--disrupt", "-f", &state, "--reclaim", "zone:us-east-1a"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Pending after the reclaim:"), "{out}");
}

/// docs/guide/plan.md "Example: the seed's GPU pool on an idle fleet", pass by pass.
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

fn drift_fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/disrupt/drift")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn disrupt_with_a_new_node_class_predicts_ami_drift_as_json_and_table() {
    let state = drift_fixture("cluster.yaml");
    let class = drift_fixture("nodeclass-ami.yaml");
    let (code, out, err) = plan(&[
        "--disrupt",
        "-f",
        &state,
        "--nodeclass",
        &class,
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let drift = &v["drift"];
    let nodes = drift["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    assert!(nodes.iter().all(|n| n["reason"] == "AMIDrift"), "{drift}");
    assert_eq!(drift["pools"][0]["atOnce"], 1);
    assert_eq!(drift["order"][0]["empty"], true);
    assert_eq!(drift["order"][0]["nodes"][0], "web-5");
    let drifts: Vec<&serde_json::Value> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["method"] == "Drift")
        .collect();
    assert_eq!(drifts.len(), 5);
    assert_eq!(drifts[0]["nodes"][0]["name"], "web-5");

    let (code, out, _) = plan(&["--disrupt", "-f", &state, "--nodeclass", &class]);
    assert_eq!(code, 0);
    assert!(out.contains("1 at a time (Drifted budget)"), "{out}");
    assert!(out.contains("any order among them"), "{out}");
}

#[test]
fn disrupt_with_a_change_that_drifts_nothing() {
    let state = drift_fixture("cluster.yaml");
    let (code, out, err) = plan(&[
        "--disrupt",
        "-f",
        &state,
        "--nodeclass",
        &drift_fixture("nodeclass-same.yaml"),
        "--nodepool",
        &drift_fixture("nodepool-budget.yaml"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Drift: no node drifts."), "{out}");
    assert!(out.contains("No disruption"), "{out}");
}

#[test]
fn disrupt_change_files_must_hold_their_kind() {
    let state = drift_fixture("cluster.yaml");
    let pool = drift_fixture("nodepool-taint.yaml");
    let (code, _, err) = plan(&["--disrupt", "-f", &state, "--nodeclass", &pool]);
    assert_eq!(code, 2);
    assert!(err.contains("no EC2NodeClass in it"), "{err}");
    let (code, _, err) = plan(&["-f", &state, "--nodepool", &pool]);
    assert_eq!(code, 2, "--nodepool needs --disrupt: {err}");
    let (code, _, err) = plan(&["--disrupt", "-f", &state, "--spec", &pool]);
    assert_eq!(code, 2);
    assert!(err.contains("not an ElasticCluster spec"), "{err}");
}

/// The seed's LLM-training row: init's example spec, three 8-GPU workers, a capacity block of
/// two p5.48xlarge. Two land on the block; the third waits (the block's instances are held by
/// the first two claims of the loop) and Karpenter's next loop falls back to on-demand.
#[test]
fn training_uses_the_capacity_block_first_then_falls_back_to_on_demand() {
    let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/src/example.yaml")
        .display()
        .to_string();
    let work = fixture("training-jobs.yaml");
    let reservations = fixture("capacity-reservations.json");
    let args = [
        "-f",
        spec.as_str(),
        "-w",
        &work,
        "--capacity-reservations",
        &reservations,
    ];
    let (code, out, err) = plan(&[&args[..], &["-o", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let claims = v["nodeClaims"].as_array().unwrap();
    let summary: Vec<(String, String, bool)> = claims
        .iter()
        .map(|c| {
            (
                c["nodePool"].as_str().unwrap().to_owned(),
                c["capacityType"].as_str().unwrap().to_owned(),
                c["nextLoop"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    let reserved = ("training-llm".to_owned(), "reserved".to_owned(), false);
    assert_eq!(
        summary,
        vec![
            reserved.clone(),
            reserved,
            ("training-llm".into(), "on-demand".into(), true)
        ],
        "{out}"
    );
    // Reserved at on-demand ÷ 10⁷; the fallback at the list price.
    let od = claims[2]["pricePerHour"].as_f64().unwrap();
    assert!(od > 50.0, "{out}");
    assert!(
        claims[0]["pricePerHour"].as_f64().unwrap() < od / 1e6,
        "{out}"
    );
    assert_eq!(claims[0]["zone"], "us-east-1a");
    assert_eq!(v["totals"]["podsPending"], 0);

    let (code, out, _) = plan(&args);
    assert_eq!(code, 0);
    assert!(out.contains("training-llm (next loop)"), "{out}");
    assert!(out.contains("waited for a capacity reservation"), "{out}");

    // --explain on the waiting worker: why it waited, and where the next loop puts it.
    let waiting = claims[2]["pods"][0].as_str().unwrap();
    let (code, out, err) = plan(&[&args[..], &["--explain", waiting]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "NodeClaim #3 in Karpenter's next loop (nodepool training-llm, p5.48xlarge on-demand"
        ),
        "{out}"
    );
    assert!(out.contains("could not be reserved"), "{out}");

    // Without the reservations the pool launches on-demand at once: no reserved offering.
    let (code, out, _) = plan(&["-f", &spec, "-w", &work, "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["nodeClaims"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["capacityType"] == "on-demand" && c.get("nextLoop").is_none()),
        "{out}"
    );
}

#[test]
fn a_bad_reservations_file_is_one_located_error() {
    let dir = std::env::temp_dir().join(format!("kk-plan-cr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("cr.yaml");
    std::fs::write(
        &bad,
        "CapacityReservations:\n  - CapacityReservationId: cr-1\n    InstanceType: p5.48xlarge\n    AvailabilityZone: us-east-1a\n    AvailableInstanceCount: many\n",
    )
    .unwrap();
    let (code, _, err) = plan(&[
        "-f",
        &fixture("pools.yaml"),
        "-w",
        &fixture("gpu-2.yaml"),
        "--capacity-reservations",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cr.yaml:5:"), "{err}");
    assert!(
        err.contains("CapacityReservations[0].AvailableInstanceCount"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The spec's scheduler defaults reach `plan` through its rendered Karpenter values: the
/// Deployment's pods (selector from their ReplicaSet) spread one per zone, ScheduleAnyway held
/// as Karpenter holds it until a pod cannot be placed; the Job's pods have no selector to
/// deduce and, alone, share one node. `--scheduler-config` with no constraints turns it off.
#[test]
fn scheduler_defaults_from_the_spec_spread_pods_without_constraints_of_their_own() {
    let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/specs/scheduler-defaults.yaml")
        .display()
        .to_string();
    let work = fixture("default-spread.yaml");
    let zones_of = |out: &str, owner: &str| {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        let mut zones: Vec<String> = v["nodeClaims"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["pods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p.as_str().unwrap().starts_with(owner))
            })
            .map(|c| c["zone"].as_str().unwrap().to_owned())
            .collect();
        zones.sort();
        zones
    };
    let (code, out, err) = plan(&["-f", &spec, "-w", &work, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        zones_of(&out, "shop/web-"),
        ["us-east-1a", "us-east-1b", "us-east-1c"],
        "{out}"
    );
    // Alone, the Job's pods share one node: no selector to deduce, no defaults.
    let (code, out, err) = plan(&[
        "-f",
        &spec,
        "-w",
        &work,
        "-o",
        "json",
        "--scale",
        "shop/deploy/web=0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(zones_of(&out, "shop/report-").len(), 1, "{out}");

    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none.yaml");
    std::fs::write(&none, "podTopologySpread: {defaultConstraints: []}\n").unwrap();
    let (code, out, err) = plan(&[
        "-f",
        &spec,
        "-w",
        &work,
        "-o",
        "json",
        "--scheduler-config",
        none.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(zones_of(&out, "shop/web-").len(), 1, "{out}");

    // Karpenter refuses a selector in a default; so does plan, naming the field.
    std::fs::write(
        &none,
        "podTopologySpread:\n  defaultConstraints:\n    - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {a: b}}}\n",
    )
    .unwrap();
    let (code, _, err) = plan(&[
        "-f",
        &spec,
        "-w",
        &work,
        "--scheduler-config",
        none.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("defaultConstraints[0].labelSelector: not allowed"),
        "{err}"
    );
}
