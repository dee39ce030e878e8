//! `cargo bench -p kk-catalog --bench load`: how long loading the embedded catalog takes.
//!
//! Measures (1) the first `catalog()` call in this process (the `LazyLock` initialisation a
//! program pays once; wall time and, on Linux, the thread's CPU time, which a busy machine does
//! not inflate), then (2) repeated fresh builds with `Catalog::aws` (the same work:
//! 1,363 types with labels, capacity and 6 offerings each), and (3) computing allocatable for
//! every type with default settings.

use std::hint::black_box;
use std::time::{Duration, Instant};

use kk_catalog::{Catalog, KubeletOverrides, OfferingConfig, catalog};

fn main() {
    let cpu0 = thread_cpu_time();
    let t = Instant::now();
    let first = catalog();
    let cold = t.elapsed();
    let cold_cpu = thread_cpu_time().zip(cpu0).map(|(b, a)| b - a);
    let types = first.len();
    let offerings: usize = first.iter().map(|t| t.offerings.len()).sum();

    let config = OfferingConfig::default();
    let build = || Catalog::aws(&config).expect("default config");
    let (builds, build_median, build_p95) = measure(|| {
        black_box(build());
    });

    let overrides = KubeletOverrides::default();
    let (allocs, alloc_median, _) = measure(|| {
        for it in first.types() {
            black_box(it.allocatable(&overrides));
        }
    });

    println!(
        "catalog(): {types} types, {offerings} offerings; first call (LazyLock init) {:.2} ms \
         wall, {} on this thread's CPU",
        ms(cold),
        cold_cpu.map_or("n/a".into(), |d| format!("{:.2} ms", ms(d)))
    );
    println!(
        "Catalog::aws(default): {builds} runs, median {:.2} ms, p95 {:.2} ms",
        ms(build_median),
        ms(build_p95)
    );
    println!(
        "allocatable() for all {types} types: {allocs} runs, median {:.3} ms",
        ms(alloc_median)
    );
}

/// Warm up, then sample for about two seconds; returns (runs, median, p95).
fn measure(mut f: impl FnMut()) -> (usize, Duration, Duration) {
    for _ in 0..5 {
        f();
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    (
        samples.len(),
        samples[samples.len() / 2],
        samples[samples.len() * 95 / 100],
    )
}

/// CPU time this thread has used (Linux `/proc/thread-self/schedstat`), to separate the work
/// from time spent waiting for a busy machine's CPUs.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
