//! The network edge: everything that talks to a kube-apiserver or to AWS (EC2, IAM, SSM,
//! Secrets Manager).
//!
//! - Clients come from kk-client (the client edge, re-exported here): [`client`] builds kube
//!   clients the way kubectl does; [`kubeconf`] reads the kubeconfig Kubean stored for the
//!   cluster it built; [`cahash`] the CA hash a join pins.
//! - [`apply`]: the whole `apply` workflow — AWS side, Helm releases, ordered server-side apply
//!   of both clusters' objects, inventory and prune ([`aws_error`], the one shape of a failed
//!   EC2 or IAM call, and [`aws_read`], the AWS reads apply and doctor share, are kk-client's).
//! - Join credentials: [`token`] (bootstrap tokens), [`store`] (the join store in SSM or
//!   Secrets Manager), [`controller`] (the in-cluster rotator and node CSR approver).
//! - Reading a running system: [`verify`] (scale-up, phase by phase), [`doctor`] (read-only
//!   checks: the reading here, the judgement in kk-doctor, re-exported), [`cluster_state`] (the state `plan --disrupt --from-cluster` simulates),
//!   [`fleet_watch`] (the same kinds followed by watch streams, for `top`), [`discover`] (what
//!   a Kubean-built cluster, Kubean and the account hold, for `init --discover`).
//!
//! Must not hold domain rules — rendering, linting and planning stay in the pure crates — and
//! must not put secrets in logs, argv or world-readable files. Everything else in the
//! workspace is pure but the CLI, which reads files and calls this crate.

pub mod ami;
pub mod apply;
pub mod cluster_state;
pub mod controller;
pub mod discover;
pub mod doctor;
pub mod fleet_watch;
pub mod node_network;
pub mod store;
pub mod token;
pub mod verify;

pub use apply::{Applied, ApplyError, ApplyOptions, Refusal, apply_all};
pub use client::{ClientOptions, make_client};
/// The client edge (kk-client), under the paths the workflows here and their callers use.
pub use kk_client::{
    aws_error, aws_read, cahash, client, install_crypto_provider, kube_error, kubeconf,
};
