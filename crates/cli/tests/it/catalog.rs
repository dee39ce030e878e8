//! `kubean-karpenter catalog` as a user runs it.

use std::process::{Command, Output};

use serde_json::Value;

fn catalog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("catalog")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

#[test]
fn gpu_l4_json() {
    let out = catalog(&["--gpu", "l4", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 15, "{names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "ordered by name");
    assert!(rows.iter().all(|r| r["gpu"]["name"] == "l4"));

    let g6 = rows.iter().find(|r| r["name"] == "g6.xlarge").unwrap();
    assert_eq!(g6["vcpu"], 4);
    assert_eq!(g6["memory_gib"], 16.0);
    assert_eq!(g6["gpu"]["count"], 1);
    assert_eq!(g6["gpu"]["manufacturer"], "nvidia");
    assert_eq!(g6["pods"], 58);
    assert_eq!(g6["allocatable"]["cpu"], "3920m");
    assert_eq!(g6["allocatable"]["memory_mib"], 14162);
    assert_eq!(g6["allocatable"]["nvidia.com/gpu"], 1);
    assert_eq!(g6["on_demand_price"], 0.8048);
    let spot = g6["spot_price"].as_f64().unwrap();
    assert!((spot - 0.8048 * 0.4).abs() < 1e-9);
    assert_eq!(g6["offerings"].as_array().unwrap().len(), 6);
    assert_eq!(g6["labels"]["karpenter.k8s.aws/instance-gpu-name"], "l4");
}

#[test]
fn table_output() {
    let out = catalog(&["--type", "m6i.large"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("NAME"), "{text}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "m6i.large",
            "2",
            "8",
            "-",
            "29",
            "1930m",
            "6.74",
            "0.0960",
            "0.0384"
        ]
    );
}

#[test]
fn filters_combine() {
    let out = catalog(&[
        "--family",
        "m7g",
        "--arch",
        "arm64",
        "--min-cpu",
        "16",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r["vcpu"].as_u64().unwrap() >= 16));

    // Nothing matches: still exit 0, an empty array.
    let out = catalog(&["--family", "m7g", "--arch", "amd64", "-o", "json"]);
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "[]");
}

#[test]
fn offering_flags() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.csv");
    std::fs::write(
        &prices,
        "instance_type,zone,capacity_type,price\nm6i.large,eu-west-1a,spot,0.02\n",
    )
    .unwrap();
    let out = catalog(&[
        "--type",
        "m6i.large",
        "--zones",
        "eu-west-1a,eu-west-1b",
        "--spot-fraction",
        "0.5",
        "--prices",
        prices.to_str().unwrap(),
        "--max-pods",
        "110",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["spot_price"], 0.02);
    assert_eq!(rows[0]["pods"], 110);
    let zones: Vec<&str> = rows[0]["offerings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["zone"].as_str().unwrap())
        .collect();
    assert_eq!(
        zones,
        ["eu-west-1a", "eu-west-1a", "eu-west-1b", "eu-west-1b"]
    );
}

#[test]
fn kwok_provider() {
    let out = catalog(&["--provider", "kwok", "--min-cpu", "256", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    // c/s/m × amd64/arm64 × linux/windows at 256 vCPUs.
    assert_eq!(rows.len(), 12);
    assert!(rows.iter().all(|r| r["vcpu"] == 256));
}

#[test]
fn unknown_values_exit_2_with_a_message() {
    for (args, needle) in [
        (
            &["--gpu", "z9000"][..],
            "--gpu \"z9000\": no instance type has that GPU",
        ),
        (
            &["--family", "zz9"][..],
            "--family \"zz9\": unknown instance family",
        ),
        (
            &["--type", "m6i.huge"][..],
            "--type \"m6i.huge\": unknown instance type",
        ),
        (&["--arch", "sparc"][..], "invalid value 'sparc'"),
        (&["-o", "xml"][..], "invalid value 'xml'"),
        (&["--min-cpu", "lots"][..], "invalid value 'lots'"),
        (
            &["--spot-fraction=0"][..],
            "spot fraction 0 must be a positive finite number",
        ),
        (
            &["--prices", "/nonexistent/prices.csv"][..],
            "/nonexistent/prices.csv: ",
        ),
    ] {
        let out = catalog(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
