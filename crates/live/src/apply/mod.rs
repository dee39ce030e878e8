//! `apply` as a library workflow ([`workflow::run`]): the CLI reads the inputs, routes each
//! bundle file to the cluster render names ([`kk_render::Target`]) and prints; this module
//! decides and calls.
//!
//! - [`kube`]: ordered server-side apply after a server-side dry run of everything, diffs,
//!   the inventory `--prune` reads; the apiserver's own words when it refuses an object.
//! - [`aws`]: the AWS side (ORDER.md step 3), read-then-write step by step, with
//!   [`efa`] (security groups that admit themselves) and [`interruption`] (the SQS queue and
//!   its EventBridge rules); [`aws::AwsDesired`] is built from the spec and bundle by
//!   `aws_desired`.
//! - [`helm`]: the bundle's Helm releases through the `helm` CLI.
//! - [`handover`]: moving a controller of ours to another namespace with a standby ready
//!   before the old one stops.
//! - [`budget`]: handing back the limits the budget controller wrote on pools whose budget
//!   is gone.

pub mod aws;
mod aws_desired;
pub mod budget;
pub mod efa;
pub mod handover;
pub mod helm;
pub mod interruption;
pub mod kube;
pub mod workflow;

pub use aws_desired::BundleDocumentError;
pub use kube::*;
