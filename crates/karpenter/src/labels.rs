//! Label keys the scheduler treats specially, as Karpenter v1.14 and its AWS provider define
//! them (kubernetes-sigs/karpenter `pkg/apis/v1/labels.go`, aws/karpenter-provider-aws
//! `pkg/apis/v1/labels.go` `init()`), and the label domains reserved to Kubernetes and Karpenter.
//! One list: the catalog, the simulator, lint and spec validation all read these.

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const RESERVATION_INTERRUPTIBLE: &str = "karpenter.k8s.aws/capacity-reservation-interruptible";

/// Not Karpenter's but NVIDIA's: the node label naming which data key of the device plugin's
/// config ConfigMap a node runs (the GPU Operator's config manager reads it). Render sets it on
/// a time-sliced pool under `gpu.stack: operator`; lint reads it to find a pool's sharing.
pub const NVIDIA_DEVICE_PLUGIN_CONFIG: &str = "nvidia.com/device-plugin.config";

pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";

pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";

/// KWOK provider labels (kubernetes-sigs/karpenter `kwok/apis/v1alpha1/labels.go`).
pub const KWOK_INSTANCE_SIZE: &str = "karpenter.kwok.sh/instance-size";
pub const KWOK_INSTANCE_FAMILY: &str = "karpenter.kwok.sh/instance-family";
pub const KWOK_INSTANCE_CPU: &str = "karpenter.kwok.sh/instance-cpu";
pub const KWOK_INSTANCE_MEMORY: &str = "karpenter.kwok.sh/instance-memory";

/// The AWS instance-type labels every AWS type defines, `DoesNotExist` where the type has no value
/// (`computeRequirements` in aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`).
pub const AWS_INSTANCE_LABELS: [&str; 21] = [
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_CATEGORY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_LOCAL_NVME,
    INSTANCE_SIZE,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
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
            | KWOK_INSTANCE_SIZE
            | KWOK_INSTANCE_FAMILY
            | KWOK_INSTANCE_CPU
            | KWOK_INSTANCE_MEMORY
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

/// Kubernetes' own label domains (Karpenter's `K8sLabelDomains`): the kubelet may not set
/// labels under them, so a pool must not claim them.
pub const KUBERNETES_DOMAINS: [&str; 2] = ["kubernetes.io", "k8s.io"];

/// Karpenter's own label domains (`RestrictedLabelDomains` with the AWS provider's
/// `karpenter.k8s.aws`): only its well-known labels may be used there.
pub const KARPENTER_DOMAINS: [&str; 2] = ["karpenter.sh", "karpenter.k8s.aws"];

/// The domain of a label key (`example.com` of `example.com/x`); `None` for an unprefixed key.
pub fn domain(key: &str) -> Option<&str> {
    key.rsplit_once('/').map(|(d, _)| d)
}

/// Whether `key`'s domain is `domain` or one of its subdomains.
pub fn in_domain(key: &str, domain: &str) -> bool {
    self::domain(key).is_some_and(|d| d == domain || d.ends_with(&format!(".{domain}")))
}

/// The reserved domain (Kubernetes' or Karpenter's) that `key` falls under, if any: a NodePool
/// must not set such a label on its nodes.
pub fn reserved_domain(key: &str) -> Option<&'static str> {
    KUBERNETES_DOMAINS
        .into_iter()
        .chain(KARPENTER_DOMAINS)
        .find(|d| in_domain(key, d))
}

/// Why Karpenter refuses to provision for a pod that selects on `key` (`IsRestrictedLabel`):
/// the `karpenter.sh` and `karpenter.k8s.aws` domains are reserved except for well-known
/// labels, and `kubernetes.io/hostname` is never a provisioning constraint.
pub fn restricted(key: &str) -> Option<String> {
    if is_well_known(key) {
        return None;
    }
    let reserved = KARPENTER_DOMAINS.iter().any(|d| in_domain(key, d));
    if reserved || key == HOSTNAME {
        return Some(format!(
            "label {key} is restricted: Karpenter does not provision for it (use a well-known label or a custom label outside karpenter.sh and karpenter.k8s.aws)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains() {
        assert_eq!(
            reserved_domain("node.kubernetes.io/x"),
            Some("kubernetes.io")
        );
        assert_eq!(
            reserved_domain("karpenter.k8s.aws/instance-family"),
            Some("karpenter.k8s.aws")
        );
        assert_eq!(reserved_domain("example.com/x"), None);
        assert_eq!(reserved_domain("unprefixed"), None);
        assert!(restricted("karpenter.sh/custom").is_some());
        assert!(restricted(NODEPOOL).is_none());
        assert!(restricted(HOSTNAME).is_some());
        assert!(restricted("example.com/team").is_none());
        // `xkarpenter.sh` is not a subdomain of `karpenter.sh`.
        assert!(restricted("xkarpenter.sh/a").is_none());
    }
}
