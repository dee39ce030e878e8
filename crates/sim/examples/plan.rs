//! `plan -o json` without the CLI around it, for profiling the library's part alone:
//! `cargo run --release -p kk-sim --example plan -- POOLS.yaml WORKLOADS.yaml > plan.json`.
//! Prints each phase's time on stderr.
use std::io::Write;
use std::time::Instant;

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pools, workloads] = args.as_slice() else {
        eprintln!("usage: plan POOLS.yaml WORKLOADS.yaml");
        std::process::exit(2);
    };
    let read = |path: &str| {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        });
        kk_sim::SourceFile::new(path, text)
    };
    let start = Instant::now();
    let input = kk_sim::load(
        &[read(pools)],
        &[read(workloads)],
        &[],
        &kk_sim::LoadOptions::default(),
    )
    .unwrap_or_else(|errors| {
        for e in errors {
            eprintln!("{e}");
        }
        std::process::exit(2);
    });
    let loaded = start.elapsed().as_secs_f64();
    let plan = kk_sim::solve(&input);
    let solved = start.elapsed().as_secs_f64();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    plan.write_json(&mut out).expect("write the plan");
    out.flush().expect("write the plan");
    eprintln!(
        "{} pods: load {loaded:.3} s, solve {:.3} s, output {:.3} s",
        input.pods.len(),
        solved - loaded,
        start.elapsed().as_secs_f64() - solved
    );
}
