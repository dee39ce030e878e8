//! The network edge: building kube clients the way kubectl does, applying objects in
//! order with server-side apply, and the apiserver's own words when it refuses one.
//!
//! Owns the network calls to the kube-apiserver and AWS (SSM, Secrets Manager). Must not hold
//! domain rules — rendering, linting and planning stay in the pure crates — and must not put
//! secrets in logs, argv or world-readable files.
//!
//! Everything else in the workspace is pure; this crate and the CLI do the I/O.

pub mod apply;
pub mod aws_apply;
pub mod aws_error;
pub mod cahash;
pub mod client;
pub mod cluster_state;
pub mod controller;
pub mod doctor;
pub mod kubeconf;
pub mod store;
#[doc(hidden)]
pub mod testbed;
pub mod token;
pub mod verify;

pub use apply::{Applied, ApplyError, ApplyOptions, Refusal, apply_all};
pub use client::{ClientOptions, make_client};

/// kube-rs and, later, the AWS SDK share rustls: install exactly one crypto provider
/// before the first client, or rustls panics choosing between two.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
