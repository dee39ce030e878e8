//! NodePool fields and references.

pub mod capacity_block_fallback;
pub mod efa_pool_without_efa_types;
pub mod missing_nodeclass;
pub mod neuron_pool_untainted;
pub mod pool_without_limits;
pub mod repeated_requirement_key;
pub mod reserved_without_reservations;
pub mod spot_too_few_instance_types;
pub mod unregistered_taint_in_pool;
pub mod unsatisfiable_requirements;
pub mod zero_budget_always_active;
