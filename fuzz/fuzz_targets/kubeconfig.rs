//! `kk_fuzz::kubeconfig` (fuzz/src/lib.rs) on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kk_fuzz::kubeconfig(data));
