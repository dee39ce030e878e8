//! Dev-only test kit: what the workspace's test binaries share, once. Only ever a
//! `[dev-dependencies]` entry (never a normal dependency of a crate) and never published.
//!
//! - [`repo`]: the repository root.
//! - [`testbed`]: the local testbed (`testbed/up`); [`testbed::require`] finds it or skips the
//!   test (fails it under CI=true).
//! - [`cli::Cli`]: runs the `kubean-karpenter` binary. It is built from the binary's path, which
//!   cargo gives only to the cli crate's own test binaries
//!   (`env!("CARGO_BIN_EXE_kubean-karpenter")`).
//! - [`clients`]: kube clients from a kubeconfig (the testbed's or a lab's): its own user, its
//!   user impersonating another, or a bearer token alone.
//! - [`lab`]: set-up steps several lab tests share.
//!
//! The lab harness (tests taking turns on the labs, reset, deploy) stays with the lab tests in
//! `crates/cli/tests/lab`: it deploys the binary under test.

pub mod cli;
pub mod clients;
pub mod lab;
pub mod testbed;

use std::path::PathBuf;

/// The repository root (this crate is `crates/testkit`).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_repository_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(super::repo().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"));
        assert!(super::repo().join("crates/testkit").is_dir());
    }
}
