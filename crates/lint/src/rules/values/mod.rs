//! Karpenter Helm values, and how they fit the cluster.

pub mod control_plane;
pub mod controller_placement;
pub mod interruption_queue;
pub mod scheduler_defaults;
