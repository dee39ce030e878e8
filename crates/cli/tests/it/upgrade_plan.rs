//! `upgrade plan` as a user runs it: a safe plan (exit 0, text and JSON), and an order that
//! would break the kubelet skew refused at the spec's lines (exit 2), and the HTML view.

use std::path::PathBuf;
use std::process::{Command, Output};

fn plan(args: &[&str]) -> Output {
    let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs/iam-eks.yaml");
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["upgrade", "plan"])
        .arg(spec)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_safe_plan_lists_the_steps_in_order() {
    let out = plan(&["--to", "1.36.x", "--nodes", "eks-gpu=4", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["to"], "1.36.3");
    let titles: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert!(
        titles[0].starts_with("Kubean upgrades the control plane"),
        "{titles:?}"
    );
    assert!(titles[1].starts_with("Components matched"), "{titles:?}");
    assert_eq!(v["steps"][0]["drift"][0]["pool"], "eks-gpu");
    assert_eq!(v["steps"][0]["drift"][0]["seconds"], 120);
    let text = plan(&["--to", "1.36.3"]);
    assert!(text.status.success());
    assert!(
        String::from_utf8_lossy(&text.stdout)
            .contains("1. Kubean upgrades the control plane to 1.36.3")
    );
}

#[test]
fn workers_first_is_refused_at_the_pools_with_the_fix() {
    let out = plan(&["--to", "1.36.3", "--order", "workers-first"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("iam-eks.yaml:46:12: spec.pools[0].ami: upgrade refused"),
        "{stderr}"
    );
    assert!(
        stderr.contains("upgrade the control plane first"),
        "{stderr}"
    );
    let out = plan(&["--to", "1.37"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.kubean.sprayJobImage"));
}

#[test]
fn the_html_view_draws_each_pools_waves_and_is_whole_or_absent() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("upgrade.html");
    let args = [
        "--to",
        "1.36.x",
        "--nodes",
        "eks-gpu=4",
        "--nodes",
        "eks-general=25",
        "--html",
        page.to_str().unwrap(),
    ];
    let out = plan(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    // Every step of the text output is a card.
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        if let Some(title) = line.split_once(". ").map(|(n, t)| (n.trim(), t))
            && title.0.parse::<u32>().is_ok()
        {
            let escaped = title.1.replace('\'', "&#39;");
            assert!(html.contains(&format!("<h2>{escaped}</h2>")), "{escaped}");
        }
    }
    // eks-gpu: 4 nodes, 1 at once: 4 waves; eks-general: 25 nodes, 10% = 3 at once: 9 waves.
    let waves = |pool: &str| html.matches(&format!("<title>{pool}: wave ")).count();
    assert_eq!((waves("eks-gpu"), waves("eks-general")), (4, 9));
    // Self-contained: nothing fetched; the same plan gives the same bytes.
    assert!(
        !html.contains("src=") && !html.contains("href="),
        "loads nothing"
    );
    assert!(plan(&args).status.success());
    assert_eq!(std::fs::read_to_string(&page).unwrap(), html);
    // A page that cannot be written is an error, and nothing is printed or left half-written.
    let bad = dir.path().join("missing/upgrade.html");
    let out = plan(&["--to", "1.36.x", "--html", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(!bad.exists());
}

#[test]
fn without_to_the_next_minor_is_planned_with_its_support_window() {
    // iam-eks.yaml runs 1.35; the day is pinned (2026-12-07) so the window said is fixed.
    let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs/iam-eks.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(["upgrade", "plan"])
        .arg(&spec)
        .env("SOURCE_DATE_EPOCH", "1796601600")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("planning 1.36, the next minor (Kubernetes upgrades one minor at a time); 1.36 is supported until its maintenance mode from 2027-04-28"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("1. Kubean upgrades the control plane to 1.36.3"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
