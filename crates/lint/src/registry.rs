//! The list of rules (the only module that names every rule; rules themselves depend on
//! [`crate::rule`], never on this list). Adding a rule: write `src/rules/<area>/<rule>.rs`, the
//! file named after the rule with `_` for `-` (a `pub const DOC`, a `pub const META` and a unit
//! struct implementing [`Rule`]), declare it in its area's
//! `mod.rs`, add one line to [`RULES`], and add `fixtures/lint/<CODE>/{fail,pass}.yaml`.
//!
//! Codes are handed out in order and never reused: a new rule takes the next free code.
//! Codes, areas and rules:
//!
//! | Code  | Area      | Rule                                                               |
//! |-------|-----------|--------------------------------------------------------------------|
//! | KK000 | crd       | crd-schema                                                         |
//! | KK001 | values    | karpenter-controller-placement                                     |
//! | KK002 | gpu       | gpu-pool-untainted                                                 |
//! | KK003 | gpu       | device-plugin-mismatch                                             |
//! | KK004 | nodepool  | pool-without-limits                                                |
//! | KK005 | gpu       | gpu-limit-ignores-sharing                                          |
//! | KK006 | gpu       | gpu-pool-disruption                                                |
//! | KK007 | nodeclass | ami-alias-latest                                                   |
//! | KK008 | userdata  | imdsv1-userdata                                                    |
//! | KK009 | userdata  | literal-secret                                                     |
//! | KK010 | userdata  | custom-ami-registration                                            |
//! | KK011 | cluster   | external-cloud-provider-without-ccm                                |
//! | KK012 | nodeclass | kubelet-pod-density                                                |
//! | KK013 | nodepool  | spot-too-few-instance-types                                        |
//! | KK014 | nodeclass | ebs-root-volume                                                    |
//! | KK015 | values    | values-control-plane                                               |
//! | KK016 | nodepool  | unsatisfiable-requirements                                         |
//! | KK017 | nodepool  | missing-nodeclass                                                  |
//! | KK018 | workload  | gpu-workload-tolerations                                           |
//! | KK019 | kubean    | kubespray-join-vars                                                |
//! | KK020 | userdata  | malformed-join-credentials                                         |
//! | KK021 | nodeclass | kubeadm-join-on-eks-ami                                            |
//! | KK022 | cluster   | ccm-cluster-id                                                     |
//! | KK023 | userdata  | nvidia-runtime-without-containerd-restart                          |
//! | KK024 | workload  | shared-infra-identity                                              |
//! | KK025 | userdata  | nodeadm-config-incomplete                                          |
//! | KK026 | workload  | image-not-pinned                                                   |
//! | KK027 | values    | spot-without-interruption-queue                                    |
//! | KK028 | nodepool  | reserved-without-reservations                                      |
//! | KK029 | gpu       | training-pool-grace-period                                         |
//! | KK030 | nodepool  | capacity-block-fallback                                            |
//! | KK031 | nodepool  | efa-pool-without-efa-types                                         |
//! | KK032 | kueue     | kueue-quota-above-pool-limits                                      |
//! | KK033 | gpu       | gpu-sharing-without-overlay                                        |
//! | KK034 | gpu       | gpu-operator-tolerations                                           |
//! | KK035 | nodeclass | custom-family-without-userdata                                     |
//! | KK036 | nodeclass | ami-alias-version-unresolvable                                     |
//! | KK037 | nodepool  | unregistered-taint-in-pool                                         |
//! | KK038 | userdata  | mime-userdata-unclosed                                             |
//! | KK039 | userdata  | double-bootstrap                                                   |
//! | KK040 | nodeclass | imds-tokens-optional                                               |
//! | KK041 | nodepool  | neuron-pool-untainted                                              |
//! | KK042 | nodepool  | repeated-requirement-key                                           |
//! | KK043 | nodepool  | zero-budget-always-active                                          |
//! | KK044 | nodeclass | empty-selector-term                                                |
//! | KK045 | values    | scheduler-defaults-mismatch                                        |
//! | KK046 | gpu       | gpu-pool-unmonitored                                               |

use crate::rule::Rule;
use crate::rules;

/// Every rule, by code.
pub static RULES: &[&dyn Rule] = &[
    &rules::crd::crd_schema::CrdSchema,
    &rules::values::karpenter_controller_placement::ControllerPlacement,
    &rules::gpu::gpu_pool_untainted::GpuPoolUntainted,
    &rules::gpu::device_plugin_mismatch::DevicePluginMismatch,
    &rules::nodepool::pool_without_limits::PoolWithoutLimits,
    &rules::gpu::gpu_limit_ignores_sharing::GpuLimitIgnoresSharing,
    &rules::gpu::gpu_pool_disruption::GpuPoolDisruption,
    &rules::nodeclass::ami_alias_latest::AmiAliasLatest,
    &rules::userdata::imdsv1_userdata::ImdsV1UserData,
    &rules::userdata::literal_secret::LiteralSecret,
    &rules::userdata::custom_ami_registration::CustomAmiRegistration,
    &rules::cluster::external_cloud_provider_without_ccm::ExternalCloudProviderWithoutCcm,
    &rules::nodeclass::kubelet_pod_density::KubeletPodDensity,
    &rules::nodepool::spot_too_few_instance_types::SpotTooFewInstanceTypes,
    &rules::nodeclass::ebs_root_volume::EbsRootVolume,
    &rules::values::values_control_plane::ValuesControlPlane,
    &rules::nodepool::unsatisfiable_requirements::UnsatisfiableRequirements,
    &rules::nodepool::missing_nodeclass::MissingNodeClass,
    &rules::workload::gpu_workload_tolerations::GpuWorkloadTolerations,
    &rules::kubean::kubespray_join_vars::KubesprayJoinVars,
    &rules::userdata::malformed_join_credentials::MalformedJoinCredentials,
    &rules::nodeclass::kubeadm_join_on_eks_ami::KubeadmJoinOnEksAmi,
    &rules::cluster::ccm_cluster_id::CcmClusterId,
    &rules::userdata::nvidia_runtime_without_containerd_restart::NvidiaRuntimeWithoutRestart,
    &rules::workload::shared_infra_identity::SharedInfraIdentity,
    &rules::userdata::nodeadm_config_incomplete::NodeadmConfigIncomplete,
    &rules::workload::image_not_pinned::ImageNotPinned,
    &rules::values::spot_without_interruption_queue::SpotWithoutInterruptionQueue,
    &rules::nodepool::reserved_without_reservations::ReservedWithoutReservations,
    &rules::gpu::training_pool_grace_period::TrainingPoolGracePeriod,
    &rules::nodepool::capacity_block_fallback::CapacityBlockFallback,
    &rules::nodepool::efa_pool_without_efa_types::EfaPoolWithoutEfaTypes,
    &rules::kueue::kueue_quota_above_pool_limits::KueueQuotaAbovePoolLimits,
    &rules::gpu::gpu_sharing_without_overlay::GpuSharingWithoutOverlay,
    &rules::gpu::gpu_operator_tolerations::GpuOperatorTolerations,
    &rules::nodeclass::custom_family_without_userdata::CustomFamilyWithoutUserData,
    &rules::nodeclass::ami_alias_version_unresolvable::AmiAliasVersionUnresolvable,
    &rules::nodepool::unregistered_taint_in_pool::UnregisteredTaintInPool,
    &rules::userdata::mime_userdata_unclosed::MimeUserDataUnclosed,
    &rules::userdata::double_bootstrap::DoubleBootstrap,
    &rules::nodeclass::imds_tokens_optional::ImdsTokensOptional,
    &rules::nodepool::neuron_pool_untainted::NeuronPoolUntainted,
    &rules::nodepool::repeated_requirement_key::RepeatedRequirementKey,
    &rules::nodepool::zero_budget_always_active::ZeroBudgetAlwaysActive,
    &rules::nodeclass::empty_selector_term::EmptySelectorTerm,
    &rules::values::scheduler_defaults_mismatch::SchedulerDefaultsMismatch,
    &rules::gpu::gpu_pool_unmonitored::GpuPoolUnmonitored,
];

/// A rule by code (`KK007`, `kk007`) or name (`ami-alias-latest`).
pub fn find(code_or_name: &str) -> Option<&'static dyn Rule> {
    RULES
        .iter()
        .copied()
        .find(|r| r.meta().code.eq_ignore_ascii_case(code_or_name) || r.meta().name == code_or_name)
}
