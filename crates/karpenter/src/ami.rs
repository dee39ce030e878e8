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
    al2023_dated_parameter(minor, arch, variant, date)
}

/// The immutable public parameter of the AL2023 release of `date` (`20260827`) for a minor.
pub fn al2023_dated_parameter(minor: &str, arch: &str, variant: &str, date: &str) -> String {
    format!(
        "{}/amazon-eks-node-al2023-{arch}-{variant}-{minor}-v{date}/image_id",
        al2023_parameter_path(minor, arch, variant)
    )
}

/// Where AWS publishes the EKS-optimized AL2023 images of one Kubernetes minor (`1.36`), EC2
/// architecture (`x86_64`, `arm64`) and variant (`standard`, `nvidia`, `neuron`). Under it:
/// `recommended/{image_id,image_name,release_version}` and one
/// `amazon-eks-node-al2023-<arch>-<variant>-<minor>-v<date>/image_id` per release (what
/// `get-parameters-by-path --recursive` lists, for rollbacks).
pub fn al2023_parameter_path(minor: &str, arch: &str, variant: &str) -> String {
    format!("/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/{arch}/{variant}")
}

/// The AL2023 variants AWS publishes (aws/karpenter-provider-aws `pkg/providers/amifamily/al2023.go`
/// resolves `standard`, `nvidia` and `neuron` for an alias).
pub const AL2023_VARIANTS: [&str; 3] = ["standard", "nvidia", "neuron"];

/// The EC2 architectures AWS publishes them for.
pub const AL2023_ARCHES: [&str; 2] = ["x86_64", "arm64"];

/// The EC2 architecture name of a Kubernetes one (`amd64` → `x86_64`; `arm64` stays).
pub fn ec2_arch(kubernetes_arch: &str) -> &'static str {
    if kubernetes_arch == "arm64" {
        "arm64"
    } else {
        "x86_64"
    }
}

/// The Kubernetes minor of a version (`v1.36.3` or `1.36.3-20260827` → `1.36`).
pub fn kubernetes_minor(version: &str) -> &str {
    let version = version.trim_start_matches('v');
    let version = version.split_once('-').map_or(version, |(v, _)| v);
    let mut dots = version.match_indices('.').map(|(i, _)| i);
    match (dots.next(), dots.next()) {
        (Some(_), Some(second)) => &version[..second],
        _ => version,
    }
}

/// The release date (`20260827`) of a per-release parameter name
/// (`…/amazon-eks-node-al2023-x86_64-nvidia-1.36-v20260827/image_id`), if it is one.
pub fn release_date_of_parameter(name: &str) -> Option<&str> {
    let dir = name.strip_suffix("/image_id")?.rsplit('/').next()?;
    let date = dir.rsplit_once("-v")?.1;
    is_release_date(date).then_some(date)
}

/// Whether `date` is an AMI release date as AWS writes it: eight digits (`20260827`).
pub fn is_release_date(date: &str) -> bool {
    date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit())
}

/// The Karpenter alias of an AL2023 release date: `al2023@v20260827`.
pub fn al2023_alias(date: &str) -> String {
    format!("{NODEADM_FAMILY}@v{date}")
}

/// The release date an alias pins (`al2023@v20260827` → `20260827`); `None` for `@latest`.
pub fn alias_release_date(alias: &str) -> Option<&str> {
    let date = alias.split_once('@')?.1.strip_prefix('v')?;
    is_release_date(date).then_some(date)
}

/// An AMI id as EC2 writes it: `ami-` and 8 or 17 lowercase hex digits.
pub fn is_ami_id(id: &str) -> bool {
    id.strip_prefix("ami-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
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

    #[test]
    fn release_names_dates_and_ids() {
        let p = al2023_release_parameter("1.36.3-20260827", "arm64", "neuron");
        assert_eq!(release_date_of_parameter(&p), Some("20260827"));
        assert_eq!(
            p,
            format!(
                "{}/amazon-eks-node-al2023-arm64-neuron-1.36-v20260827/image_id",
                al2023_parameter_path("1.36", "arm64", "neuron")
            )
        );
        assert_eq!(release_date_of_parameter("/x/recommended/image_id"), None);
        assert_eq!(release_date_of_parameter("/x/y-v2026082/image_id"), None);
        assert_eq!(kubernetes_minor("v1.36.3"), "1.36");
        assert_eq!(kubernetes_minor("1.36.3-20260827"), "1.36");
        assert_eq!(kubernetes_minor("1.36"), "1.36");
        assert_eq!(alias_release_date("al2023@v20260827"), Some("20260827"));
        assert_eq!(alias_release_date("al2023@latest"), None);
        assert_eq!(al2023_alias("20260806"), "al2023@v20260806");
        assert!(is_ami_id("ami-0123456789abcdef0"));
        assert!(is_ami_id("ami-12c6146b"));
        assert!(!is_ami_id("ami-0123456789ABCDEF0"));
        assert!(!is_ami_id("ami-0123"));
        assert_eq!(ec2_arch("amd64"), "x86_64");
        assert_eq!(ec2_arch("arm64"), "arm64");
    }
}
