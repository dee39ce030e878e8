//! EC2NodeClass fields.

pub mod ami_alias_latest;
pub mod ebs_root_volume;
pub mod kubeadm_on_eks_ami;
pub mod kubelet_density;
