//! One rule per file, grouped by area, each file named after its rule (`pool-without-limits` is
//! `nodepool/pool_without_limits.rs`). Each file holds `DOC` (What / Why / Example / Fix),
//! `META` and the rule struct; `registry::RULES` lists them.

pub mod cluster;
pub mod crd;
pub mod gpu;
pub mod kubean;
pub mod kueue;
pub mod nodeclass;
pub mod nodepool;
pub mod userdata;
pub mod values;
pub mod workload;
