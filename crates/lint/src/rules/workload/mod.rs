//! Workloads (pod templates) against the pools that must run them.

pub mod gpu_tolerations;
pub mod image_pinning;
pub mod shared_infra_identity;
