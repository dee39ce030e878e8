//! Karpenter's feature gates as the pinned chart (1.15.2, `settings.featureGates` and
//! `settings.awsFeatureGates` in its values.yaml) names them: maturity, default, and what each
//! turns on. `karpenter.featureGates` in the spec sets any of them; render writes them into
//! the chart's values, which the chart turns into the controller's `FEATURE_GATES` and
//! `AWS_FEATURE_GATES`.

/// Which values map a gate lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `settings.featureGates` (kubernetes-sigs/karpenter's gates).
    Core,
    /// `settings.awsFeatureGates` (the AWS provider's).
    Aws,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The chart's key (`spotToSpotConsolidation`).
    pub name: &'static str,
    pub family: Family,
    pub maturity: &'static str,
    /// The chart's default.
    pub default: bool,
    pub what: &'static str,
}

const fn gate(
    name: &'static str,
    family: Family,
    maturity: &'static str,
    default: bool,
    what: &'static str,
) -> Gate {
    Gate {
        name,
        family,
        maturity,
        default,
        what,
    }
}

/// Every gate of the pinned chart, in its values.yaml's order.
pub const GATES: &[Gate] = &[
    gate(
        "nodeRepair",
        Family::Core,
        "alpha",
        false,
        "replace nodes whose conditions stay unhealthy",
    ),
    gate(
        "nodeOverlay",
        Family::Core,
        "alpha",
        false,
        "NodeOverlay objects adjust the capacity and price the scheduler assumes",
    ),
    gate(
        "reservedCapacity",
        Family::Core,
        "beta",
        true,
        "on-demand capacity reservations and capacity blocks as the `reserved` capacity type",
    ),
    gate(
        "spotToSpotConsolidation",
        Family::Core,
        "alpha",
        false,
        "consolidation may replace a spot node with a cheaper spot node",
    ),
    gate(
        "staticCapacity",
        Family::Core,
        "alpha",
        false,
        "NodePools with `replicas`: a fixed number of nodes",
    ),
    gate(
        "capacityBuffer",
        Family::Core,
        "alpha",
        false,
        "CapacityBuffer objects pre-provision spare capacity",
    ),
    gate(
        "terminateFirstDrift",
        Family::Core,
        "alpha",
        false,
        "drift terminates a node before its replacement launches on a capacity-constrained pool",
    ),
    gate(
        "terminateFirstRepair",
        Family::Core,
        "alpha",
        false,
        "repair terminates an unhealthy node before its replacement launches",
    ),
    gate(
        "podDeletionCostManagement",
        Family::Core,
        "alpha",
        false,
        "manage pod-deletion-cost so ReplicaSet scale-down empties nodes Karpenter wants to consolidate",
    ),
    gate(
        "nodeClassCEL",
        Family::Aws,
        "alpha",
        false,
        "CEL validation on EC2NodeClass resources",
    ),
    gate(
        "rebootForRepair",
        Family::Aws,
        "alpha",
        false,
        "node repair reboots a node in place for reboot-clearable GPU faults (needs nodeRepair and ec2:RebootInstances)",
    ),
];

pub fn find(name: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for g in GATES {
            assert_eq!(find(g.name), Some(g));
            assert_eq!(GATES.iter().filter(|o| o.name == g.name).count(), 1);
        }
        assert!(
            find("SpotToSpotConsolidation").is_none(),
            "the chart's key, not the env's"
        );
    }

    #[test]
    fn the_spec_names_known_gates_only_and_an_unknown_one_is_located() {
        let with = |gates: &str| {
            crate::EXAMPLE.replace(
                "    isolatedVPC: false\n",
                &format!("    isolatedVPC: false\n    featureGates: {gates}\n"),
            )
        };
        let ok = crate::parse_spec(
            &with("{spotToSpotConsolidation: true, nodeClassCEL: true}"),
            "s.yaml",
        )
        .unwrap();
        assert!(ok.spec.spec.karpenter.feature_gates["spotToSpotConsolidation"]);
        let errors =
            crate::parse_spec(&with("{SpotToSpotConsolidation: true}"), "s.yaml").unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].field,
            "spec.karpenter.featureGates.SpotToSpotConsolidation"
        );
        assert!(
            errors[0].message.contains("spotToSpotConsolidation"),
            "{}",
            errors[0].message
        );
        assert!(errors[0].pos.is_some());
    }
}
