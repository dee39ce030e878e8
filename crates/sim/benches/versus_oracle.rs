//! kk-sim side by side with Karpenter's own scheduler (the oracle in testbed/karpenter-oracle)
//! on Karpenter's benchmark shapes: `fake.InstanceTypes(400)`, one NodePool, `makeDiversePods(n)`.
//!
//! The inputs are the oracle's own (`karpenter-oracle bench --emit DIR`), read with
//! `kk_sim::scenario`, so both engines solve the same pods. Times are the solve only: the
//! oracle's `Scheduler.Solve` wall time from its `bench` table, kk-sim's [`kk_sim::simulate`]
//! (reading the scenario is not timed, as the oracle does not time its setup).
//!
//! ```sh
//! cargo bench -p kk-sim --bench versus_oracle                       # 5000,20000,100000
//! KK_BENCH_SIZES=100,1000,5000 cargo bench -p kk-sim --bench versus_oracle
//! ```
//!
//! The oracle binary: `$KK_ORACLE`, else what `testbed/karpenter-oracle/build` prints (it
//! builds on a cache miss, which needs Go and the module proxy). `KK_ORACLE=none` (or a failed
//! build) runs kk-sim alone, on scenarios in `$KK_BENCH_DIR` (or the temporary folder).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod oracle;
use oracle::oracle;

/// The oracle's `bench` table: pods → (node claims, pending, Solve seconds).
fn oracle_times(bin: &Path, sizes: &str) -> Vec<(usize, usize, usize, f64)> {
    let out = Command::new(bin)
        .args(["bench", "--sizes", sizes])
        .output()
        .expect("run the oracle");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then_some(())?;
            Some((
                f[0].parse().ok()?,
                f[1].parse().ok()?,
                f[2].parse().ok()?,
                f[3].parse().ok()?,
            ))
        })
        .collect()
}

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let sizes = std::env::var("KK_BENCH_SIZES").unwrap_or_else(|_| "5000,20000,100000".into());
    let sizes: Vec<usize> = sizes
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let size_arg = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let bin = oracle("versus_oracle");
    let own_dir = std::env::var_os("KK_BENCH_DIR").is_none();
    let dir = std::env::var("KK_BENCH_DIR").map_or_else(
        |_| std::env::temp_dir().join(format!("kk-versus-oracle-{}", std::process::id())),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("bench dir");
    let missing = sizes
        .iter()
        .any(|n| !dir.join(format!("bench-{n}.json")).exists());
    if missing {
        match &bin {
            Some(b) => {
                let st = Command::new(b)
                    .args(["bench", "--sizes", &size_arg, "--emit"])
                    .arg(&dir)
                    .status()
                    .expect("run the oracle");
                assert!(st.success(), "karpenter-oracle bench --emit failed");
            }
            None => {
                eprintln!(
                    "versus_oracle: no oracle binary and no scenarios in {}.\n  Build it: bin=\"$(testbed/karpenter-oracle/build)\" (Go >= 1.26.5, module proxy),\n  then: KK_ORACLE=$bin cargo bench -p kk-sim --bench versus_oracle\n  or emit the inputs once: $bin bench --emit DIR; KK_BENCH_DIR=DIR KK_ORACLE=none cargo bench ...",
                    dir.display()
                );
                return;
            }
        }
    }

    // kk-sim first (the oracle's run would otherwise compete for the machine).
    let mut ours = Vec::new();
    for &n in &sizes {
        let text = std::fs::read_to_string(dir.join(format!("bench-{n}.json"))).expect("scenario");
        let input = kk_sim::scenario::read(&text).expect("read the benchmark scenario");
        let start = Instant::now();
        let outcome = kk_sim::simulate(&input);
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "kk-sim {n:>6} pods: {:>5} node claims, {:>5} pending, {secs:.3} s",
            outcome.claims.len(),
            outcome.errors.len()
        );
        ours.push((n, outcome.claims.len(), outcome.errors.len(), secs));
    }
    let theirs = match &bin {
        Some(b) => oracle_times(b, &size_arg),
        None => {
            eprintln!(
                "versus_oracle: the oracle is not built; kk-sim alone. Build it with testbed/karpenter-oracle/build (Go >= 1.26.5)"
            );
            Vec::new()
        }
    };
    println!(
        "{:>7} {:>14} {:>14} {:>12} {:>12} {:>8}",
        "pods", "oracle claims", "kk-sim claims", "oracle s", "kk-sim s", "ratio"
    );
    for (n, claims, _pending, secs) in &ours {
        let o = theirs.iter().find(|t| t.0 == *n);
        println!(
            "{:>7} {:>14} {:>14} {:>12} {:>12.3} {:>8}",
            n,
            o.map_or("-".into(), |o| o.1.to_string()),
            claims,
            o.map_or("-".into(), |o| format!("{:.3}", o.3)),
            secs,
            o.map_or("-".into(), |o| format!("{:.0}x", o.3 / secs.max(1e-9)))
        );
    }
    if own_dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "(seconds: solve only — the oracle's Scheduler.Solve wall time from `karpenter-oracle bench`, NumConcurrentReconciles(5); kk-sim's simulate(); ratio = oracle / kk-sim)"
    );
}
