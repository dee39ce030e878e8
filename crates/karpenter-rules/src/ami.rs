//! Which AMI selectors pick an EKS-optimized image: one answer for spec validation (a pool's
//! join method) and lint (KK021), so the two cannot disagree.
//!
//! Every Karpenter alias (`family@version`) resolves to an image AWS builds for EKS
//! (aws/karpenter-provider-aws v1.14 `pkg/providers/amifamily`: each family's alias reads a
//! public SSM parameter under `/aws/service/eks/` or `/aws/service/bottlerocket/`), and so does
//! any selector that names such a parameter directly. Those images have no kubeadm: AL2023 ships
//! kubelet and nodeadm (awslabs/amazon-eks-ami templates/al2023/provisioners/install-worker.sh),
//! Bottlerocket runs no shell userData.

/// Public SSM parameter prefixes under which AWS publishes EKS-optimized image ids.
pub const EKS_PARAMETER_PREFIXES: [&str; 2] = ["/aws/service/eks/", "/aws/service/bottlerocket/"];

/// The alias family whose images run nodeadm (the only one a NodeConfig userData suits).
pub const NODEADM_FAMILY: &str = "al2023";

/// Whether an `amiSelectorTerms[].alias` selects an EKS-optimized image: every alias does.
pub fn alias_is_eks_optimized(alias: &str) -> bool {
    !alias.trim().is_empty()
}

/// The family of an alias (`al2023@v20260827` → `al2023`).
pub fn alias_family(alias: &str) -> &str {
    alias.split_once('@').map_or(alias, |(family, _)| family)
}

/// Whether an `amiSelectorTerms[].ssmParameter` names an EKS-optimized image's public parameter.
pub fn ssm_parameter_is_eks_optimized(parameter: &str) -> bool {
    EKS_PARAMETER_PREFIXES
        .iter()
        .any(|p| parameter.starts_with(p))
}

/// The immutable public parameter of one EKS AL2023 release (`1.36.3-20260827`), for an
/// architecture (`x86_64`, `arm64`) and variant (`standard`, `nvidia`): Karpenter resolves it
/// once, so the image never changes under a pool.
pub fn al2023_release_parameter(release: &str, arch: &str, variant: &str) -> String {
    let (version, date) = release.split_once('-').unwrap_or((release, ""));
    let minor = version.rsplit_once('.').map_or(version, |(m, _)| m);
    format!(
        "/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/{variant}/amazon-eks-node-al2023-{arch}-{variant}-{minor}-v{date}/image_id"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_parameters_are_eks_optimized_and_pinned() {
        let p = al2023_release_parameter("1.36.3-20260827", "x86_64", "nvidia");
        assert_eq!(
            p,
            "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.36-v20260827/image_id"
        );
        assert!(ssm_parameter_is_eks_optimized(&p));
        assert!(!ssm_parameter_is_eks_optimized("/my-team/images/kubeadm"));
        assert!(alias_is_eks_optimized("al2023@v20260827"));
        assert_eq!(alias_family("bottlerocket@v1.20.0"), "bottlerocket");
    }
}
