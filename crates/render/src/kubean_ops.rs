//! Day-two Kubean operations from the spec: a Kubernetes upgrade (`upgrade-cluster.yml`),
//! adding or removing a Kubean node (`scale.yml`, `remove-node.yml`) and renewing the control
//! plane's certificates (Kubean's `renew-certs.yml`). Each is one ClusterOperation for the
//! management cluster, checked before it is written: the pinned Kubean release must install
//! the target version, and a node operation must name a node the inventory has.
//!
//! Playbooks and arguments as Kubean documents them (kubean-io/kubean `examples/upgrade`,
//! `examples/scale`, `playbooks/renew-certs.yml`).

use kk_spec::kubean_support as support;
use kk_spec::{ElasticCluster, NodeRole};
use serde_json::Value;

use crate::kubean::cluster_operation;
use crate::pools::to_value;

/// One operation to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Upgrade the control plane, etcd and the Kubean-built workers to the spec's
    /// `kubernetesVersion` (bumped first, so that the vars ConfigMap says the same), from the
    /// version the cluster runs, when known.
    Upgrade { from: Option<String> },
    /// Join a node the spec's `kubean.nodes` lists (already in the hosts ConfigMap).
    AddNode { node: String },
    /// Drain and remove a node the spec still lists (Kubespray needs it in the inventory).
    RemoveNode { node: String },
    /// Renew the control plane's certificates, keeping its CA.
    RenewCertificates,
}

/// The ClusterOperation and what the operator needs to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedOperation {
    pub name: String,
    pub object: Value,
    /// When it runs relative to the rest (the Karpenter side).
    pub when: String,
    /// Why it is safe, or what it costs.
    pub effect: String,
}

/// An operation the spec cannot run, at the spec field to change, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct OperationRefused {
    pub field: String,
    pub message: String,
}

fn refused(field: &str, message: String) -> OperationRefused {
    OperationRefused {
        field: field.to_owned(),
        message,
    }
}

/// A ClusterOperation name from parts (DNS-1123: lowercase, digits, `-`).
fn operation_name(parts: &[&str]) -> String {
    let joined = parts.join("-").to_ascii_lowercase();
    let cleaned: String = joined
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    cleaned.trim_matches('-').chars().take(253).collect()
}

/// The Kubean release the spec pins, from its spray-job image tag.
fn kubean_release(
    cluster: &ElasticCluster,
) -> Result<&'static support::KubeanRelease, OperationRefused> {
    let image = &cluster.spec.kubean.spray_job_image;
    support::image_tag(image)
        .and_then(support::release)
        .ok_or_else(|| {
            refused(
                "spec.kubean.sprayJobImage",
                format!("{image}: name a Kubean release of the support matrix in the image tag"),
            )
        })
}

/// Checks an upgrade of the cluster from `from` (the version it runs, when known) to the spec's
/// `kubernetesVersion`: newer, at most one minor ahead (kubeadm upgrades one minor at a time),
/// and installed by the pinned Kubean release. Returns the target's (minor, patch).
pub fn check_upgrade(
    cluster: &ElasticCluster,
    from: Option<&str>,
) -> Result<(u32, u32), OperationRefused> {
    let to = &cluster.spec.kubernetes_version;
    let (minor, patch) = support::minor_patch(to).ok_or_else(|| {
        refused(
            "spec.kubernetesVersion",
            format!("{to:?} is not a Kubernetes version like 1.36.3"),
        )
    })?;
    if let Some(from) = from {
        let (from_minor, from_patch) = support::minor_patch(from).ok_or_else(|| {
            refused(
                "spec.kubernetesVersion",
                format!("the running version {from:?} is not a Kubernetes version"),
            )
        })?;
        if (minor, patch) <= (from_minor, from_patch) {
            return Err(refused(
                "spec.kubernetesVersion",
                format!(
                    "1.{minor}.{patch} is not newer than the running {from}: Kubespray does not \
                     downgrade; restore from an etcd backup instead"
                ),
            ));
        }
        if minor > from_minor + 1 {
            return Err(refused(
                "spec.kubernetesVersion",
                format!(
                    "1.{from_minor} to 1.{minor} skips a minor: kubeadm upgrades one minor at a \
                     time; upgrade to 1.{} first",
                    from_minor + 1
                ),
            ));
        }
    }
    let release = kubean_release(cluster)?;
    if !release.covers(minor, patch) {
        let fix = match support::newest_covering(minor, patch) {
            Some(newer) => format!(
                "upgrade Kubean to {} ({}) and pin its spray-job image first",
                newer.release,
                newer.range()
            ),
            None => "no Kubean release of the matrix installs it; pick a listed patch".into(),
        };
        return Err(refused(
            "spec.kubean.sprayJobImage",
            format!(
                "Kubean {} installs Kubernetes {} only, not 1.{minor}.{patch}: {fix}",
                release.release,
                release.range()
            ),
        ));
    }
    Ok((minor, patch))
}

fn node_index(cluster: &ElasticCluster, node: &str) -> Result<usize, OperationRefused> {
    let nodes = &cluster.spec.kubean.nodes;
    nodes.iter().position(|n| n.name == node).ok_or_else(|| {
        refused(
            "spec.kubean.nodes",
            format!(
                "no Kubean node named {node:?} (nodes: {})",
                nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// The ClusterOperation for `operation`, checked against the spec and the Kubean release.
pub fn render_operation(
    cluster: &ElasticCluster,
    operation: &Operation,
) -> Result<RenderedOperation, OperationRefused> {
    let name = &cluster.metadata.name;
    let serialize = |op| to_value(&op).map_err(|e| refused("", e.to_string()));
    match operation {
        Operation::Upgrade { from } => {
            let (minor, patch) = check_upgrade(cluster, from.as_deref())?;
            let version = format!("1.{minor}.{patch}");
            let op_name = operation_name(&[name, "upgrade", &version]);
            let op = cluster_operation(
                cluster,
                &op_name,
                "upgrade-cluster.yml",
                // The vars ConfigMap says the same once the spec is bumped; the argument keeps
                // the operation right even if it runs before that ConfigMap is re-applied.
                Some(format!("-e kube_version={version}")),
                &["ping.yml"],
                &["kubeconfig.yml", "cluster-info.yml"],
            );
            Ok(RenderedOperation {
                name: op_name,
                object: serialize(op)?,
                when: "First, before anything on the Karpenter side: after kubernetesVersion is \
                       bumped in the spec and kubean/ (the vars ConfigMap's kube_version) is \
                       re-applied. Then cloud/ (the CCM matches the control plane's minor), then \
                       the worker AMIs pool by pool (`upgrade plan`)."
                    .into(),
                effect: format!(
                    "Kubespray upgrades the control plane, etcd and the Kubean-built workers to \
                     {version} one node at a time (cordon, drain, upgrade, uncordon). The API \
                     stays up with more than one control-plane node. Karpenter workers keep \
                     their kubelet; pools pinned by alias drift (their AMI follows the control \
                     plane's version)."
                ),
            })
        }
        Operation::AddNode { node } => {
            let index = node_index(cluster, node)?;
            let roles = &cluster.spec.kubean.nodes[index].roles;
            if roles
                .iter()
                .any(|r| matches!(r, NodeRole::ControlPlane | NodeRole::Etcd))
            {
                return Err(refused(
                    &format!("spec.kubean.nodes[{index}].roles"),
                    format!(
                        "{node} is a control-plane or etcd node: scale.yml adds workers only; \
                         Kubespray adds control-plane and etcd members with cluster.yml \
                         limited to them, which also restarts every apiserver: run it by hand"
                    ),
                ));
            }
            let op_name = operation_name(&[name, "scale", node]);
            let op = cluster_operation(
                cluster,
                &op_name,
                "scale.yml",
                Some(format!("--limit={node}")),
                &["ping.yml", "disable-firewalld.yml"],
                &[],
            );
            Ok(RenderedOperation {
                name: op_name,
                object: serialize(op)?,
                when: "After the node is in the spec and kubean/ (the hosts ConfigMap) is \
                       re-applied. Independent of the Karpenter side; an infra node adds room \
                       for Karpenter's controller and the rotator."
                    .into(),
                effect: format!(
                    "Kubespray joins {node} only (--limit); the other nodes are not touched."
                ),
            })
        }
        Operation::RemoveNode { node } => {
            let index = node_index(cluster, node)?;
            let nodes = &cluster.spec.kubean.nodes;
            let roles = &nodes[index].roles;
            let count = |role: NodeRole| nodes.iter().filter(|n| n.roles.contains(&role)).count();
            for (role, what) in [
                (
                    NodeRole::ControlPlane,
                    "control-plane node: the cluster would have no API",
                ),
                (
                    NodeRole::Etcd,
                    "etcd member: the cluster would lose its data",
                ),
                (
                    NodeRole::Infra,
                    "infra node: Karpenter's controller and the rotator run only on infra nodes \
                     and would stay Pending",
                ),
            ] {
                if roles.contains(&role) && count(role) == 1 {
                    return Err(refused(
                        &format!("spec.kubean.nodes[{index}].roles"),
                        format!("{node} is the last {what}; add another first"),
                    ));
                }
            }
            let op_name = operation_name(&[name, "remove", node]);
            let op = cluster_operation(
                cluster,
                &op_name,
                "remove-node.yml",
                Some(format!("-e node={node} -e skip_confirmation=true")),
                &["ping.yml"],
                &[],
            );
            Ok(RenderedOperation {
                name: op_name,
                object: serialize(op)?,
                when: "While the node is still in the spec and the hosts ConfigMap (Kubespray \
                       reads it from the inventory); then delete it from the spec and re-apply \
                       kubean/."
                    .into(),
                effect: format!(
                    "Kubespray drains {node} (its pods, Karpenter's controller included, move \
                     to the other nodes), removes it from the cluster and resets it."
                ),
            })
        }
        Operation::RenewCertificates => {
            kubean_release(cluster)?;
            let op_name = operation_name(&[name, "renew-certs"]);
            let op = cluster_operation(
                cluster,
                &op_name,
                "renew-certs.yml",
                None,
                &["ping.yml"],
                &["kubeconfig.yml"],
            );
            Ok(RenderedOperation {
                name: op_name,
                object: serialize(op)?,
                when: "Any time before the certificates expire (kubeadm's last a year); \
                       independent of the Karpenter side."
                    .into(),
                effect: "Re-signs the control plane's certificates with the same CA, one \
                         control-plane node at a time, and restarts its static pods. The CA \
                         (caBundle, the kubeadm join CA hash) does not change, so no Karpenter \
                         node drifts; the admin kubeconfig changes (kubeconfig.yml republishes \
                         it)."
                    .into(),
            })
        }
    }
}
