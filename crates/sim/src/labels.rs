//! Label keys the scheduler treats specially, as Karpenter v1.14 and its AWS provider define
//! them (kubernetes-sigs/karpenter `pkg/apis/v1/labels.go`, aws/karpenter-provider-aws
//! `pkg/apis/v1/labels.go` `init()`).

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const RESERVATION_INTERRUPTIBLE: &str = "karpenter.k8s.aws/capacity-reservation-interruptible";

/// The AWS instance-type labels every AWS type defines, `DoesNotExist` where the type has no value
/// (`computeRequirements` in aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`).
pub const AWS_INSTANCE_LABELS: [&str; 21] = [
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    INSTANCE_SIZE,
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
];

/// Karpenter's `WellKnownLabels` with the AWS provider's additions (and the KWOK provider's
/// labels, so KWOK catalogs behave as under the KWOK provider). A pod may require one of these
/// even when a NodePool does not mention it ("allow undefined well-known labels").
pub fn is_well_known(key: &str) -> bool {
    matches!(
        key,
        NODEPOOL
            | ZONE
            | REGION
            | INSTANCE_TYPE
            | ARCH
            | OS
            | CAPACITY_TYPE
            | WINDOWS_BUILD
            | RESERVATION_ID
            | RESERVATION_TYPE
            | RESERVATION_INTERRUPTIBLE
            | ZONE_ID
            | TENANCY
            | "karpenter.k8s.aws/placement-group-id"
            | "karpenter.k8s.aws/placement-group-partition"
            | "karpenter.kwok.sh/instance-size"
            | "karpenter.kwok.sh/instance-family"
            | "karpenter.kwok.sh/instance-cpu"
            | "karpenter.kwok.sh/instance-memory"
    ) || AWS_INSTANCE_LABELS.contains(&key)
}

/// Deprecated aliases translated to their stable keys (`NormalizedLabels`).
pub fn normalize(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => ZONE,
        "failure-domain.beta.kubernetes.io/region" => REGION,
        "beta.kubernetes.io/arch" => ARCH,
        "beta.kubernetes.io/os" => OS,
        "beta.kubernetes.io/instance-type" => INSTANCE_TYPE,
        other => other,
    }
}

/// Why Karpenter refuses to provision for a pod that selects on `key` (`IsRestrictedLabel`):
/// the `karpenter.sh` and `karpenter.k8s.aws` domains are reserved except for well-known
/// labels, and `kubernetes.io/hostname` is never a provisioning constraint.
pub fn restricted(key: &str) -> Option<String> {
    if is_well_known(key) {
        return None;
    }
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    let reserved = ["karpenter.sh", "karpenter.k8s.aws"]
        .iter()
        .any(|r| domain == *r || domain.ends_with(&format!(".{r}")));
    if reserved || key == HOSTNAME {
        return Some(format!(
            "label {key} is restricted: Karpenter does not provision for it (use a well-known label or a custom label outside karpenter.sh and karpenter.k8s.aws)"
        ));
    }
    None
}
