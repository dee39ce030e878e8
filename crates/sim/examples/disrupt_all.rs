//! A whole `plan --disrupt` (every pass until no method has a command) on a state written by
//! `karpenter-oracle disrupt-bench --emit`, without the bench around it, for profiling:
//!
//! ```sh
//! cargo build --release -p kk-sim --example disrupt_all
//! perf record -g target/release/examples/disrupt_all disrupt-1000.json
//! ```
//!
//! Prints the reading time, the first pass's, the whole run's (wall and this process's CPU)
//! and what the run decided, on stderr; `--first` stops after the first pass, `--json OUT`
//! writes the whole run's report (to compare two builds' decisions byte for byte).

use std::time::Instant;

use kk_sim::disrupt::{self, scenario};

/// This process's user + system CPU seconds so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => 0.0,
    }
}

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let first_only = args.iter().any(|a| a == "--first");
    let json_out = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1));
    let Some(path) = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--json"))
        .map(|(_, a)| a)
    else {
        eprintln!("usage: disrupt_all STATE.json [--first] [--json OUT]");
        std::process::exit(2);
    };
    let start = Instant::now();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2);
    });
    let value: serde_json::Value = serde_json::from_str(&text).expect("scenario JSON");
    let (state, mut opts) = scenario::read(&value).expect("scenario reads");
    eprintln!(
        "read {} nodes, {} bound pods in {:.3}s",
        state.input.nodes.len(),
        state.input.bound.len(),
        start.elapsed().as_secs_f64()
    );
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let first = disrupt::run(&state, &opts).expect("runs");
    eprintln!(
        "first pass: {:.3}s wall, {:.3}s CPU, {} command(s)",
        wall.elapsed().as_secs_f64(),
        cpu_seconds() - cpu,
        first.commands.len()
    );
    if first_only {
        return;
    }
    opts.max_rounds = 100_000;
    opts.first_pass_candidates = false;
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let all = disrupt::run(&state, &opts).expect("runs");
    eprintln!(
        "whole run: {:.3}s wall, {:.3}s CPU, {} commands, {} nodes removed, savings {}/h",
        wall.elapsed().as_secs_f64(),
        cpu_seconds() - cpu,
        all.commands.len(),
        all.totals.nodes_removed,
        all.totals.savings_per_hour
    );
    if let Some(out) = json_out {
        let text = serde_json::to_string_pretty(&all).expect("report serializes");
        std::fs::write(out, text).unwrap_or_else(|e| eprintln!("{out}: {e}"));
    }
}
