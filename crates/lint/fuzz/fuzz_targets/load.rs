//! Arbitrary bytes as one lint input: `Input::from_bytes` → `kk_lint::lint` (loader, embedded
//! Kubean YAML, every rule) → every output format. Refusals are fine; panics, hangs and
//! blow-ups are bugs. The same entry runs in CI as a proptest (tests/it/arbitrary_input.rs).
#![no_main]

use kk_lint::output::{self, Format};
use kk_lint::{Config, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(input) = Input::from_bytes("fuzz.yaml", data.to_vec())
        && let Ok(report) = kk_lint::lint(&[input], &Config::default())
    {
        for format in [Format::Human, Format::Json, Format::Sarif] {
            let _ = output::render(&report, format);
        }
    }
});
