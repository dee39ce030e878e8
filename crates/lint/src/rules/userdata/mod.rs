//! The userData scripts of Custom-AMI EC2NodeClasses.

pub mod containerd_restart;
pub mod imdsv1;
pub mod join_credentials;
pub mod literal_secret;
pub mod registration;
