//! Spend budgets from the command line (issue #51): a budget too small for any node is a
//! located error, and `plan` splits a workload where the budget does.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}

fn run(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubean-karpenter");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_budget_below_the_cheapest_node_is_refused_where_it_is_written() {
    let spec = std::fs::read_to_string(repo("fixtures/specs/budgets.yaml")).unwrap();
    let cheap = spec.replace("budget: {perHour: \"0.20\"}", "budget: {perHour: \"0.05\"}");
    assert_ne!(cheap, spec);
    let (code, _, err) = run(&["validate", "-"], Some(&cheap));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(":47:25: spec.pools[0].budget.perHour: $0.0500/h is less than the cheapest node this pool can launch (m6i.large on-demand, $0.0960/h): it could never launch one"),
        "{err}"
    );
    let (code, out, err) = run(&["validate", "-"], Some(&spec));
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn plan_launches_what_the_budget_pays_for_and_says_why_the_rest_wait() {
    let (code, out, err) = run(
        &[
            "plan",
            "-f",
            &repo("fixtures/specs/budgets.yaml"),
            "-w",
            &repo("fixtures/sim/budget-four.yaml"),
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(code, 1, "Pending pods exit 1: {err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 2, "{out}");
    let pending = plan["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 2);
    for p in pending {
        assert!(
            p["reason"]
                .as_str()
                .unwrap()
                .contains("budget: nodepool budget-lab's $0.2000/h buys cpu=4166m"),
            "{p}"
        );
    }
    let budgets = plan["budgets"].as_array().unwrap();
    let lab = budgets
        .iter()
        .find(|b| b["nodePool"] == "budget-lab")
        .unwrap();
    assert_eq!(lab["limit"], "4166m");
    assert_eq!(lab["plannedPerHour"], 0.192);
    assert_eq!(lab["pending"], 2);
}
