//! Solves one oracle scenario file and prints kk-sim's result in the oracle's format:
//! `cargo run -p kk-sim --example scenario -- FILE.json` (for reading a divergence).
//! The result is written as it is serialized (kk_sim::scenario::Report), not built first.
use std::io::Write as _;

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: scenario FILE.json");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    let input = match kk_sim::scenario::read(&text) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    drop(text);
    let report = kk_sim::scenario::report(&path, &input);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = serde_json::to_writer_pretty(&mut out, &report)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    }
}
