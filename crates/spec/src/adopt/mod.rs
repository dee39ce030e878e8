//! Adopting a running cluster (`init --discover`): what was observed in the new cluster, in
//! Kubean's management cluster and in the AWS account ([`Observed`], gathered by
//! `kk_live::discover`), turned into spec values that each say where they came from
//! ([`Discovered`]), written as a spec ([`write_spec`]) or compared with an existing one
//! ([`compare`]).
//!
//! Pure: the gathering is kk_live's; here only text and values.

mod check;
mod discover;
mod sources;
mod write;

use std::collections::BTreeMap;

use serde::Serialize;

pub use check::compare;
pub use discover::{discover, fixed_hosts};
pub use write::write_spec;

use crate::{NodeRole, Tag};

/// A value and where it was read (`kube-system/kubeadm-config ClusterConfiguration.kubernetesVersion`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found<T> {
    pub value: T,
    pub from: String,
}

impl<T> Found<T> {
    pub fn new(value: T, from: impl Into<String>) -> Found<T> {
        Found {
            value,
            from: from.into(),
        }
    }
}

/// What the cluster and the account hold, as read (raw texts and records; no judgement).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// `kube-system/kubeadm-config`, key `ClusterConfiguration` (YAML).
    pub kubeadm_cluster_configuration: Option<String>,
    /// `kube-system/kubelet-config`, key `kubelet` (KubeletConfiguration YAML).
    pub kubelet_configuration: Option<String>,
    /// `kube-public/cluster-info`, key `kubeconfig`.
    pub cluster_info_kubeconfig: Option<String>,
    /// The AWS CCM's cloud config: where it was read, and its text.
    pub ccm_cloud_config: Option<(String, String)>,
    pub nodes: Vec<ObservedNode>,
    pub kubean: Option<ObservedKubean>,
    /// Deployments and DaemonSets of the new cluster (what is installed, at which version).
    pub workloads: Vec<ObservedWorkload>,
    pub aws: Option<ObservedAws>,
    /// Reads that failed (denied, unreachable, missing): each becomes a finding.
    pub unreadable: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedNode {
    pub name: String,
    pub internal_ip: Option<String>,
    pub provider_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// `key=value:Effect` (or `key:Effect`).
    pub taints: Vec<String>,
    pub kubelet_version: Option<String>,
}

/// Kubean's Cluster on the management side, with what it refers to.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedKubean {
    pub namespace: String,
    /// The Cluster object's name.
    pub cluster: String,
    /// (ConfigMap name, `hosts.yml` text).
    pub hosts: Option<(String, String)>,
    /// (ConfigMap name, `group_vars.yml` text).
    pub vars: Option<(String, String)>,
    /// `spec.sshAuthRef.name`.
    pub ssh_secret: Option<String>,
    /// (ClusterOperation name, `spec.image`) of the newest operation on the Cluster.
    pub operation_image: Option<(String, String)>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedWorkload {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub images: Vec<String>,
    pub env: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedAws {
    pub region: String,
    /// Where the region came from (`--region`, the Nodes' zone label, the AWS config).
    pub region_from: String,
    /// The fixed nodes' instances, each with the Node it was looked up for.
    pub instances: Vec<ObservedInstance>,
    /// Subnets of the instances' VPC.
    pub subnets: Vec<ObservedSubnet>,
    /// Security groups of the instances' VPC.
    pub security_groups: Vec<ObservedGroup>,
    pub role_names: Vec<String>,
    /// (instance profile name, its role names).
    pub instance_profiles: Vec<(String, Vec<String>)>,
    /// Service names of the VPC's available endpoints (`com.amazonaws.us-east-1.ec2`).
    pub vpc_endpoint_services: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedInstance {
    /// The Node (or Kubean host) it was looked up for.
    pub node: String,
    /// `providerID` or `InternalIP`.
    pub found_by: String,
    pub id: String,
    pub owner_id: Option<String>,
    pub private_ip: Option<String>,
    pub private_dns_name: Option<String>,
    pub vpc_id: Option<String>,
    pub subnet_id: Option<String>,
    pub zone: Option<String>,
    pub security_group_ids: Vec<String>,
    /// The instance profile's name (from its ARN).
    pub instance_profile: Option<String>,
    pub image_id: Option<String>,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedSubnet {
    pub id: String,
    pub zone: String,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedGroup {
    pub id: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// A fixed node as the spec lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredNode {
    pub name: String,
    pub ip: String,
    pub private_dns_name: Option<String>,
    pub roles: Vec<NodeRole>,
    pub from: String,
}

/// A component already installed in the new cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Installed {
    pub component: String,
    pub version: Option<String>,
    pub from: String,
}

/// Spec values with their sources; `None` where nothing could be read.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovered {
    pub cluster_name: Option<Found<String>>,
    pub kubernetes_version: Option<Found<String>>,
    pub api_dns_name: Option<Found<String>>,
    pub api_port: Option<Found<u16>>,
    /// The cluster CA, PEM, base64 (as `caBundle.base64` takes it).
    pub ca_base64: Option<Found<String>>,
    /// `sha256:<hex>` of the CA's public key (what `kubeadm join` pins).
    pub ca_cert_hash: Option<Found<String>>,
    pub pod_subnet: Option<Found<String>>,
    pub service_subnet: Option<Found<String>>,
    pub cluster_dns: Option<Found<String>>,
    /// Kubean's `Cluster` that built this one (`kubean.existingCluster`: adopted).
    pub kubean_cluster: Option<Found<String>>,
    pub kubean_namespace: Option<Found<String>>,
    pub spray_job_image: Option<Found<String>>,
    pub network_plugin: Option<Found<String>>,
    pub ssh_user: Option<Found<String>>,
    pub ssh_port: Option<Found<u16>>,
    pub ssh_secret: Option<Found<String>>,
    pub nodes: Vec<DiscoveredNode>,
    pub infra_taints: Option<Found<Vec<String>>>,
    pub region: Option<Found<String>>,
    pub account_id: Option<Found<String>>,
    pub vpc_id: Option<Found<String>>,
    pub subnet_tag: Option<Found<Tag>>,
    pub security_group_tag: Option<Found<Tag>>,
    /// Zones of the discovery-tagged subnets (the pools' starting point).
    pub zones: Vec<String>,
    pub control_plane_security_group: Option<Found<String>>,
    pub node_role: Option<Found<String>>,
    pub node_instance_profile: Option<Found<String>>,
    /// The infra workers' instance profile (Karpenter's credentials).
    pub infra_instance_profile: Option<Found<String>>,
    pub isolated_vpc: Option<Found<bool>>,
    /// The control plane's image: a kubeadm-ready image the CPU pool may start from.
    pub cpu_ami: Option<Found<String>>,
    pub controller_image: Option<Found<(String, String)>>,
    pub installed: Vec<Installed>,
    /// What could not be read or does not agree: each a sentence for the user.
    pub findings: Vec<String>,
}

#[cfg(test)]
mod tests;
