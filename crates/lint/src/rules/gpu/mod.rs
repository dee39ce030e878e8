//! GPU pools and what must run on them.

pub mod device_plugin_mismatch;
pub mod gpu_limit_ignores_sharing;
pub mod gpu_operator_tolerations;
pub mod gpu_pool_disruption;
pub mod gpu_pool_unmonitored;
pub mod gpu_pool_untainted;
pub mod gpu_sharing_without_overlay;
pub mod training_pool_grace_period;
