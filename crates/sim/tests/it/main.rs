//! Integration tests of the provisioning and disruption simulators: one test binary, one
//! module per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod behaviour;
mod budget;
mod differential;
mod disrupt;
mod disrupt_differential;
mod disrupt_reuse;
mod divergence_kinds;
mod drift_change;
mod overlay_static;
mod properties;
mod reclaim;
mod stories;
