//! NodePool fields and references.

pub mod capacity_block_fallback;
pub mod efa_types;
pub mod limits;
pub mod missing_nodeclass;
pub mod neuron_untainted;
pub mod repeated_requirement_key;
pub mod reserved_without_reservations;
pub mod spot_flexibility;
pub mod unregistered_taint;
pub mod unsatisfiable_requirements;
pub mod zero_budget_without_schedule;
