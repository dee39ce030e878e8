//! EC2NodeClass fields.

pub mod ami_alias_latest;
pub mod ami_alias_version_unresolvable;
pub mod custom_family_without_userdata;
pub mod ebs_root_volume;
pub mod empty_selector_term;
pub mod imds_tokens_optional;
pub mod kubeadm_join_on_eks_ami;
pub mod kubelet_pod_density;
