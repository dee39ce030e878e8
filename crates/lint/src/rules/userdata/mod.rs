//! userData: the kubeadm scripts and nodeadm NodeConfigs of Custom-AMI EC2NodeClasses, and the
//! MIME documents Karpenter merges with its own bootstrap for the families it bootstraps.

pub mod custom_ami_registration;
pub mod double_bootstrap;
pub mod imdsv1_userdata;
pub mod literal_secret;
pub mod malformed_join_credentials;
pub mod mime_userdata_unclosed;
pub mod nodeadm_config_incomplete;
pub mod nvidia_runtime_without_containerd_restart;

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
