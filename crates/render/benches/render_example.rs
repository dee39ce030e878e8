//! `cargo bench -p kk-render --bench render_example`: time to parse, validate and render
//! the built-in example (what `render --example` does, minus writing files).

use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() {
    let run = || {
        let loaded = kk_spec::parse_spec(kk_spec::EXAMPLE, kk_spec::EXAMPLE_FILE).expect("valid");
        let pem = kk_render::inline_ca_pem(&loaded.spec)
            .expect("inline CA")
            .expect("base64");
        kk_render::render(&loaded.spec, &pem).expect("renders")
    };
    // Warm up, then measure batches until two seconds have passed.
    for _ in 0..20 {
        black_box(run());
    }
    let mut samples: Vec<Duration> = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        black_box(run());
        samples.push(t.elapsed());
    }
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[samples.len() * 95 / 100];
    let files = run().files.len();
    println!(
        "render --example ({files} files): {} runs, median {:.1} µs, p95 {:.1} µs",
        samples.len(),
        median.as_secs_f64() * 1e6,
        p95.as_secs_f64() * 1e6
    );
}
