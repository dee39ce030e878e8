//! The bundle as a whole: what the cluster needs that no single object provides.

pub mod missing_ccm;
