//! `store_lines` (fuzz/src/live.rs) on each input; `--features live`.
#![no_main]

#[path = "../src/live.rs"]
mod live;

libfuzzer_sys::fuzz_target!(|data: &[u8]| live::store_lines(data));
