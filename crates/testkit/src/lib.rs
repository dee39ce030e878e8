//! Dev-only test kit: what the workspace's test binaries share, once. Only ever a
//! `[dev-dependencies]` entry (never a normal dependency of a crate) and never published.
//!
//! - [`testbed`]: the local testbed (`testbed/up`); [`testbed::require`] finds it or skips the
//!   test (fails it under CI=true).
//! - [`clients`]: kube clients from a kubeconfig (the testbed's or a lab's): its own user, its
//!   user impersonating another, or a bearer token alone.
//!
//! The lab harness (tests taking turns on the labs, reset, deploy) stays with the lab tests in
//! `crates/cli/tests/lab`: it deploys the binary under test.

pub mod clients;
pub mod testbed;
