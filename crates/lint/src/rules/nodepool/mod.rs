//! NodePool fields and references.

pub mod capacity_block_fallback;
pub mod efa_types;
pub mod limits;
pub mod missing_nodeclass;
pub mod reserved_without_reservations;
pub mod spot_flexibility;
pub mod unsatisfiable_requirements;
