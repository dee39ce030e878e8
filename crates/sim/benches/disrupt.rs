//! `plan --disrupt` side by side with Karpenter's own disruption controller (the oracle in
//! testbed/karpenter-oracle) on large generated cluster states: 1,000 nodes × 20 pods and
//! 5,000 nodes × 20 pods (`karpenter-oracle disrupt-bench --nodes N --pods-per-node 20`).
//!
//! Both sides run **one pass** (Emptiness, StaticDrift, Drift, multi- then single-node
//! consolidation up to the first command) on the same state file, read with
//! `kk_sim::disrupt::scenario`. Times: the oracle's pass as `disrupt-bench` prints it (setup
//! excluded; one run), kk-sim's [`kk_sim::disrupt::run`] (reading excluded; best of three).
//! kk-sim's whole `plan --disrupt` (every pass until nothing is left to do) is timed too, at
//! 1,000 nodes or fewer (every size with `KK_DISRUPT_ALL=1`), against the 5 s goal. The
//! oracle has no whole run to compare with: Karpenter's own stops each pass's single-node
//! consolidation after 3 minutes.
//!
//! ```sh
//! cargo bench -p kk-sim --bench disrupt                      # 1000,5000 nodes
//! KK_DISRUPT_NODES=1000 cargo bench -p kk-sim --bench disrupt
//! ```
//!
//! The oracle binary: `$KK_ORACLE`, else what `testbed/karpenter-oracle/build` prints (needs Go
//! on a cache miss). Without it (`KK_ORACLE=none`), states come from `$KK_DISRUPT_DIR`
//! (`disrupt-<N>.json`, written earlier with `disrupt-bench --emit`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use kk_sim::disrupt::{self, scenario};
use serde_json::Value;

mod oracle;
use oracle::oracle;

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // `cargo test --benches` runs benches with --bench absent: stay quick then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let sizes: Vec<usize> = std::env::var("KK_DISRUPT_NODES")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let dir = std::env::var("KK_DISRUPT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("kk-disrupt-bench"));
    std::fs::create_dir_all(&dir).expect("bench folder");
    let bin = oracle("disrupt bench");
    println!(
        "{:>6} {:>7} {:>12} {:>12} {:>22} {:>8}  command (ours | oracle)",
        "nodes", "pods", "oracle pass", "kk-sim pass", "kk-sim all", "ratio"
    );
    for n in sizes {
        let file = dir.join(format!("disrupt-{n}.json"));
        let mut oracle_secs = None;
        let mut oracle_cmd = String::from("-");
        if let Some(bin) = &bin {
            let out = Command::new(bin)
                .args([
                    "disrupt-bench",
                    "--nodes",
                    &n.to_string(),
                    "--pods-per-node",
                    "20",
                ])
                .arg("--emit")
                .arg(&file)
                .output()
                .expect("run the oracle");
            let text = String::from_utf8_lossy(&out.stdout);
            match serde_json::from_str::<Value>(text.trim()) {
                Ok(v) => {
                    oracle_secs = v["seconds"].as_f64();
                    oracle_cmd = format!(
                        "{}{}",
                        v["command"].as_str().unwrap_or("?"),
                        if v["multiNodeTimedOut"] == true {
                            " (multi-node timed out)"
                        } else {
                            ""
                        }
                    );
                }
                Err(_) => eprintln!(
                    "disrupt bench: oracle failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            eprintln!(
                "disrupt bench: no {} (and no oracle to write it)",
                file.display()
            );
            continue;
        };
        let v: Value = serde_json::from_str(&text).expect("scenario JSON");
        let (state, mut opts) = scenario::read(&v).expect("scenario reads");
        let pods = state.input.bound.len();
        let t = Instant::now();
        let _ = kk_sim::simulate(&state.input);
        eprintln!(
            "{n} nodes: one provisioning simulation over the whole state (the floor of every replacement simulation): {:.3}s",
            t.elapsed().as_secs_f64()
        );
        // Best of three: the development machine is shared and loaded.
        let mut pass = f64::MAX;
        let mut report = None;
        for _ in 0..3 {
            let start = Instant::now();
            report = Some(disrupt::run(&state, &opts).expect("runs"));
            pass = pass.min(start.elapsed().as_secs_f64());
        }
        let report = report.expect("ran");
        let ours_cmd = report.commands.first().map_or("none".to_owned(), |c| {
            format!("{} {} {} node(s)", c.method, c.decision, c.nodes.len())
        });
        let cands: Vec<String> = report
            .candidates
            .iter()
            .map(|(m, c)| format!("{m}={}", c.len()))
            .collect();
        eprintln!(
            "{n} nodes: kk-sim first pass {pass:.3}s, {ours_cmd}; candidates {}",
            cands.join(" ")
        );
        // Every pass until nothing is left (the last pass tries each candidate alone).
        let (all_secs, all_cmds, all_removed) =
            if n <= 1000 || std::env::var("KK_DISRUPT_ALL").is_ok() {
                opts.max_rounds = 100_000;
                opts.first_pass_candidates = false;
                let start = Instant::now();
                let all = disrupt::run(&state, &opts).expect("runs");
                let secs = start.elapsed().as_secs_f64();
                (
                    format!("{secs:.3}s ({:.2} of 5 s)", secs / 5.0),
                    all.commands.len().to_string(),
                    all.totals.nodes_removed.to_string(),
                )
            } else {
                ("-".to_owned(), "-".to_owned(), "-".to_owned())
            };
        let ratio = oracle_secs.map_or("-".to_owned(), |o| format!("{:.1}x", o / pass));
        println!(
            "{n:>6} {pods:>7} {:>12} {:>11.3}s {all_secs:>22} {ratio:>8}  {ours_cmd} | {oracle_cmd}; all passes: {all_cmds} commands, {all_removed} nodes removed",
            oracle_secs.map_or("-".to_owned(), |o| format!("{o:.3}s")),
            pass,
        );
    }
}
