//! The userData of Custom-AMI EC2NodeClasses: kubeadm scripts and nodeadm NodeConfigs.

pub mod containerd_restart;
pub mod imdsv1;
pub mod join_credentials;
pub mod literal_secret;
pub mod nodeadm_config;
pub mod registration;
