//! EC2NodeClass fields.

pub mod ami_alias_latest;
pub mod ebs_root_volume;
pub mod kubelet_density;
