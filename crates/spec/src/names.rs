//! Names the rendered bundle, the live side (token rotator, join store) and the CLI must spell
//! the same way. Here, not in render, so that `kk-live` needs no dependency on `kk-render`.

use crate::{ClusterSpec, JoinMode};

/// Every object we create carries this label, so apply and prune can find our own.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubean-karpenter");
/// The group our bootstrap tokens put their holders in (`auth-extra-groups`). It is bound
/// only to what a join needs, never to kubeadm's CSR auto-approval: our approver signs off
/// a node-client CSR only for an instance Karpenter launched (docs/join-credentials.md).
pub const JOIN_TOKEN_GROUP: &str = "system:bootstrappers:kubean-karpenter";
/// The cluster a managed token Secret was made for (scopes the rotator's deletes).
pub const TOKEN_CLUSTER_LABEL: &str = "kubean-karpenter.io/cluster";

/// The join configuration's store name, defaulted per mode.
pub fn join_store(spec: &ClusterSpec, cluster: &str) -> String {
    match &spec.join.store_name {
        Some(name) => name.clone(),
        None => default_join_store(spec.join.mode, cluster),
    }
}

/// The store name when the spec names none: an SSM parameter path, which starts with `/`, or a
/// Secrets Manager secret name, which does not.
pub fn default_join_store(mode: JoinMode, cluster: &str) -> String {
    match mode {
        JoinMode::SecretsManager => format!("kubean-karpenter/{cluster}/join"),
        JoinMode::Ssm | JoinMode::Static => format!("/kubean-karpenter/{cluster}/join"),
    }
}
