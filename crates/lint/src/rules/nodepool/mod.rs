//! NodePool fields and references.

pub mod limits;
pub mod missing_nodeclass;
pub mod spot_flexibility;
pub mod unsatisfiable_requirements;
