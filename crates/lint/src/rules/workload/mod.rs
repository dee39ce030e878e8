//! Workloads (pod templates) against the pools that must run them.

pub mod gpu_workload_tolerations;
pub mod image_not_pinned;
pub mod shared_infra_identity;
