//! GPU pools and what must run on them.

pub mod device_plugin;
pub mod disruption;
pub mod operator_tolerations;
pub mod sharing_limit;
pub mod sharing_overlay;
pub mod training_grace_period;
pub mod untainted_pool;
