//! Karpenter Helm values, and how they fit the cluster.

pub mod karpenter_controller_placement;
pub mod scheduler_defaults_mismatch;
pub mod spot_without_interruption_queue;
pub mod values_control_plane;
