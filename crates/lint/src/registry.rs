//! The list of rules (the only module that names every rule; rules themselves depend on
//! [`crate::rule`], never on this list). Adding a rule: write `src/rules/<area>/<rule>.rs` (a `pub const DOC`, a
//! `pub const META` and a unit struct implementing [`Rule`]), declare it in its area's
//! `mod.rs`, add one line to [`RULES`], and add `fixtures/lint/<CODE>/{fail,pass}.yaml`.
//!
//! Codes follow the numbering of issue #4 (KK000 CRD schema, then rule N of the issue is
//! KK0NN), so parallel work never picks the same code. Planned codes and areas:
//!
//! | Code  | Area      | Rule                                                               |
//! |-------|-----------|--------------------------------------------------------------------|
//! | KK000 | crd       | crd-schema (done)                                                  |
//! | KK001 | values    | karpenter-controller-placement (done)                              |
//! | KK002 | gpu       | gpu-pool-untainted (done)                                          |
//! | KK003 | gpu       | device-plugin-mismatch (done)                                      |
//! | KK004 | nodepool  | pool-without-limits (done)                                         |
//! | KK005 | gpu       | gpu-limit-ignores-sharing (done)                                   |
//! | KK006 | gpu       | gpu-pool-disruption (done)                                         |
//! | KK007 | nodeclass | ami-alias-latest (done)                                            |
//! | KK008 | userdata  | imdsv1-userdata (done)                                             |
//! | KK009 | userdata  | literal-secret (done)                                              |
//! | KK010 | userdata  | custom-ami-registration (done)                                     |
//! | KK011 | cluster   | external-cloud-provider-without-ccm (done)                         |
//! | KK012 | nodeclass | kubelet-pod-density (done)                                         |
//! | KK013 | nodepool  | spot-too-few-instance-types (done)                                 |
//! | KK014 | nodeclass | ebs-root-volume (done)                                             |
//! | KK015 | values    | values-control-plane (done)                                        |
//! | KK016 | nodepool  | unsatisfiable-requirements (done)                                  |
//! | KK017 | nodepool  | missing-nodeclass (done)                                           |
//! | KK018 | workload  | gpu-workload-tolerations (done)                                    |
//! | KK019 | kubean    | kubespray-join-vars (done)                                         |
//! | KK020 | userdata  | malformed-join-credentials (done)                                  |
//! | KK021 | nodeclass | kubeadm-join-on-eks-ami (issue 11)                                 |
//! | KK022 | cluster   | ccm-cluster-id (issue 11)                                          |
//! | KK023 | userdata  | nvidia-runtime-without-containerd-restart (issue 11)               |
//! | KK024 | workload  | shared-infra-identity (issue 12)                                   |
//! | KK025 | userdata  | nodeadm-config-incomplete (issue 17)                               |

use crate::rule::Rule;
use crate::rules;

/// Every rule, by code.
pub static RULES: &[&dyn Rule] = &[
    &rules::crd::schema::CrdSchema,
    &rules::values::controller_placement::ControllerPlacement,
    &rules::gpu::untainted_pool::GpuPoolUntainted,
    &rules::gpu::device_plugin::DevicePluginMismatch,
    &rules::nodepool::limits::PoolWithoutLimits,
    &rules::gpu::sharing_limit::GpuLimitIgnoresSharing,
    &rules::gpu::disruption::GpuPoolDisruption,
    &rules::nodeclass::ami_alias_latest::AmiAliasLatest,
    &rules::userdata::imdsv1::ImdsV1UserData,
    &rules::userdata::literal_secret::LiteralSecret,
    &rules::userdata::registration::CustomAmiRegistration,
    &rules::cluster::missing_ccm::ExternalCloudProviderWithoutCcm,
    &rules::nodeclass::kubelet_density::KubeletPodDensity,
    &rules::nodepool::spot_flexibility::SpotTooFewInstanceTypes,
    &rules::nodeclass::ebs_root_volume::EbsRootVolume,
    &rules::values::control_plane::ValuesControlPlane,
    &rules::nodepool::unsatisfiable_requirements::UnsatisfiableRequirements,
    &rules::nodepool::missing_nodeclass::MissingNodeClass,
    &rules::workload::gpu_tolerations::GpuWorkloadTolerations,
    &rules::kubean::kubespray_vars::KubesprayJoinVars,
    &rules::userdata::join_credentials::MalformedJoinCredentials,
    &rules::nodeclass::kubeadm_on_eks_ami::KubeadmJoinOnEksAmi,
    &rules::cluster::ccm_cluster_id::CcmClusterId,
    &rules::userdata::containerd_restart::NvidiaRuntimeWithoutRestart,
    &rules::workload::shared_infra_identity::SharedInfraIdentity,
    &rules::userdata::nodeadm_config::NodeadmConfigIncomplete,
];

/// A rule by code (`KK007`, `kk007`) or name (`ami-alias-latest`).
pub fn find(code_or_name: &str) -> Option<&'static dyn Rule> {
    RULES
        .iter()
        .copied()
        .find(|r| r.meta().code.eq_ignore_ascii_case(code_or_name) || r.meta().name == code_or_name)
}
