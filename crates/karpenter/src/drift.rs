//! What makes Karpenter mark a NodeClaim `Drifted`, as data: the reasons, in the order
//! Karpenter checks them, and which fields of a NodePool and an EC2NodeClass its static-drift
//! hashes cover (kubernetes-sigs/karpenter v1.14 `pkg/controllers/nodeclaim/disruption/drift.go`
//! and `pkg/apis/v1/nodepool.go` `NodePool.Hash`; aws/karpenter-provider-aws v1.14
//! `pkg/cloudprovider/drift.go` and `pkg/apis/v1/ec2nodeclass.go` `EC2NodeClass.Hash`).
//!
//! Karpenter stamps a hash of those fields on the NodePool, the EC2NodeClass and every NodeClaim
//! it launches, and a NodeClaim whose stamp differs from its pool's or class's has drifted. A
//! change that is not applied yet has no hash: a prediction compares the covered fields of the
//! object as it is and as it would be, with the hash's options — lists compared as sets
//! (`SlicesAsSets`), absent, null and empty values alike (`IgnoreZeroValue`, `ZeroNil`), and
//! durations by their value (the hash skips a Duration's raw text). The hash function itself
//! is not reproduced.

/// Why a NodeClaim drifted, in the order Karpenter checks (the first that holds is reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DriftReason {
    /// The NodePool's `spec.template` (less requirements) changed.
    NodePoolDrifted,
    /// The NodeClaim's labels no longer satisfy the NodePool's requirements.
    RequirementsDrifted,
    /// The EC2NodeClass's hashed fields changed.
    NodeClassDrift,
    /// The NodeClaim's image is not the one the EC2NodeClass resolves for its instance type.
    AmiDrift,
}

impl DriftReason {
    /// The reason as Karpenter writes it in the `Drifted` condition.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
            DriftReason::NodeClassDrift => "NodeClassDrift",
            DriftReason::AmiDrift => "AMIDrift",
        }
    }
}

/// The part of a NodePool its hash covers.
pub const NODEPOOL_HASHED: &str = "spec.template";

/// Fields under [`NODEPOOL_HASHED`] the hash skips (requirements are checked on their own:
/// [`DriftReason::RequirementsDrifted`]). Budgets and the rest of `spec.disruption`, weight and
/// limits are outside the hashed part, so editing them never drifts a node.
pub const NODEPOOL_UNHASHED: [&str; 1] = ["spec.requirements"];

/// Defaults the NodePool CRD writes into the hashed part (an object read from a cluster has
/// them, a file may not): `(path under spec.template, value)`.
pub const NODEPOOL_DEFAULTS: [(&str, &str); 1] = [("spec.expireAfter", "720h")];

/// Duration fields under [`NODEPOOL_HASHED`], compared by value.
pub const NODEPOOL_DURATIONS: [&str; 2] = ["spec.expireAfter", "spec.terminationGracePeriod"];

/// The part of an EC2NodeClass its hash covers; Karpenter adds the resolved AMI family (see
/// [`resolved_ami_family`]) and the cluster's CA bundle, which no node class edit changes.
pub const NODECLASS_HASHED: &str = "spec";

/// Fields of `spec` the EC2NodeClass hash skips: selectors are resolved and checked against
/// the instance (AMI, subnet, security group, capacity reservation drift), `amiFamily` is
/// hashed as resolved, and `ipPrefixCount` never drifts.
pub const NODECLASS_UNHASHED: [&str; 6] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
    "ipPrefixCount",
];

/// The default the EC2NodeClass CRD writes for `spec.metadataOptions` (IMDSv2 only, one hop).
pub const NODECLASS_METADATA_DEFAULTS: [(&str, &str); 4] = [
    ("httpEndpoint", "enabled"),
    ("httpProtocolIPv6", "disabled"),
    ("httpPutResponseHopLimit", "1"),
    ("httpTokens", "required"),
];

/// The AMI family an EC2NodeClass hashes: `amiFamily` when set, else the family of its alias
/// (`al2023@v20260827` → `al2023`), else `Custom`; lower-cased, as the alias writes families
/// (`AL2023` and `al2023@latest` name the same family).
pub fn resolved_ami_family(ami_family: Option<&str>, alias: Option<&str>) -> String {
    match (ami_family, alias) {
        (Some(family), _) if !family.is_empty() => family,
        (_, Some(alias)) if !alias.is_empty() => crate::ami::alias_family(alias),
        _ => "Custom",
    }
    .to_ascii_lowercase()
}

/// The order Karpenter replaces drifted nodes in: empty ones first, then by the `Drifted`
/// condition's transition time. Its sort is not stable, so nodes that drifted at the same
/// instant (one change drifts a whole pool within one pass) go in an undetermined order.
pub const REPLACEMENT_ORDER: &str = "empty nodes first, then by the time each drifted; nodes that drifted at the same instant go in an order Karpenter does not determine";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_karpenter_writes_them() {
        assert_eq!(DriftReason::AmiDrift.as_str(), "AMIDrift");
        assert_eq!(DriftReason::NodePoolDrifted.as_str(), "NodePoolDrifted");
        assert!(DriftReason::NodePoolDrifted < DriftReason::AmiDrift);
    }

    #[test]
    fn the_family_hashed_is_the_resolved_one() {
        assert_eq!(resolved_ami_family(Some("Custom"), None), "custom");
        assert_eq!(
            resolved_ami_family(None, Some("al2023@v20260827")),
            resolved_ami_family(Some("AL2023"), Some("al2023@latest"))
        );
        assert_eq!(resolved_ami_family(None, None), "custom");
    }
}
