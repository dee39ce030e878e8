//! Integration tests of the binary as a user runs it, and of the workspace as a whole: one
//! test binary, one module per concern. The lab tests are the separate `lab` binary
//! (tests/lab/main.rs). Every test binary links the crate and all its dependencies again, so
//! the tests live in one binary rather than one per file; add a module here, not a file in
//! `tests/`.

mod ami_pin;
mod ami_testbed;
mod apply_aws_testbed;
mod apply_more_testbed;
mod apply_testbed;
mod architecture;
mod budget;
mod ca_bundle;
mod catalog;
mod cli;
mod completion;
mod crd_testbed;
mod discover_testbed;
mod disrupt_testbed;
mod doctor_drift_testbed;
mod fuzz_corpus;
mod gpu_operator_testbed;
mod handover_testbed;
mod import_circles;
mod kubeconfig_testbed;
mod kueue_testbed;
mod lint;
mod memory_bomb;
mod mirror_registry;
mod monitoring_testbed;
mod partition;
mod plan;
mod plan_html;
mod token_testbed;
mod top;
mod upgrade_plan;
mod version;
mod versions;

/// The binary under test: cargo gives its path to this crate's test binaries only, so they hand
/// it to the test kit's runner (`kk_testkit::cli::Cli`).
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_kubean-karpenter");

/// The binary under test with the testbed's environment, run with `args`, whatever its exit
/// code.
pub(crate) fn cli(tb: &kk_testkit::testbed::Testbed, args: &[&str]) -> std::process::Output {
    kk_testkit::cli::Cli::new(BIN).testbed(tb).run(args)
}

/// The apply, doctor and prune tests write cluster-scoped objects with the example's names
/// (EC2NodeClasses, the CCM's ConfigMap) and tag the "Kubean-built" instance found by its
/// private IP, which another test's VPC may repeat. As separate binaries they ran one after
/// another; in this one binary they take turns.
pub(crate) fn testbed_apply_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
