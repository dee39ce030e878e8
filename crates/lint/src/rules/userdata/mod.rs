//! userData: the kubeadm scripts and nodeadm NodeConfigs of Custom-AMI EC2NodeClasses, and the
//! MIME documents Karpenter merges with its own bootstrap for the families it bootstraps.

pub mod containerd_restart;
pub mod double_bootstrap;
pub mod imdsv1;
pub mod join_credentials;
pub mod literal_secret;
pub mod mime_boundary;
pub mod nodeadm_config;
pub mod registration;

use crate::context::{Context, NodeClassView};

/// The Custom-AMI EC2NodeClasses that carry userData, with that userData: the ones whose script
/// (not Karpenter's AMI family) joins the node.
pub(crate) fn custom_ami_user_data<'c, 'a>(
    ctx: &'c Context<'a>,
) -> impl Iterator<Item = (&'c NodeClassView<'a>, &'c str)> {
    ctx.node_classes.iter().filter_map(|view| {
        if view.class.spec.ami_family.as_deref() != Some("Custom") {
            return None;
        }
        Some((view, view.class.spec.user_data.as_deref()?))
    })
}
