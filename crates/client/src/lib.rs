//! The client edge, as kube-rs keeps it apart from runtime and features: how this tool reaches
//! a kube-apiserver and what it makes of the answers.
//!
//! - [`client`]: kube clients built the way kubectl builds them (kubeconfig, context, in-cluster
//!   service account), with the timeouts a one-shot command or a controller wants;
//! - [`kubeconf`]: the kubeconfig Kubean stored for the cluster it built, fetched and vetted
//!   (no exec plugins, no local files unless allowed, the CA compared with the cluster's);
//! - [`cahash`]: the CA hash `kubeadm join` pins;
//! - [`kube_error`] and [`aws_error`]: the one shape of a failed kube-apiserver call and of a
//!   failed AWS call, each keeping a refusal apart from an outage;
//! - [`aws_read`]: the AWS reads `apply` and `doctor` both make.
//!
//! No workflow and no domain rule lives here: kk-live builds apply, verify, doctor and the
//! controllers on it, and re-exports these modules under their old paths.

pub mod aws_error;
pub mod aws_read;
pub mod cahash;
pub mod client;
pub mod kube_error;
pub mod kubeconf;

pub use client::{ClientOptions, make_client};

/// kube-rs and, later, the AWS SDK share rustls: install exactly one crypto provider
/// before the first client, or rustls panics choosing between two.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
