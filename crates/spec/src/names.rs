//! Names the rendered bundle, the live side (token rotator, join store) and the CLI must spell
//! the same way. Here, not in render, so that `kk-live` needs no dependency on `kk-render`.

use crate::{ClusterSpec, JoinMode};

/// Every object we create carries this label, so apply and prune can find our own.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubean-karpenter");

/// Whether an object's labels carry [`MANAGED_BY`].
pub fn is_managed(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(MANAGED_BY.0))
        .is_some_and(|v| v == MANAGED_BY.1)
}
/// The group our bootstrap tokens put their holders in (`auth-extra-groups`). It is bound
/// only to what a join needs, never to kubeadm's CSR auto-approval: our approver signs off
/// a node-client CSR only for an instance Karpenter launched (docs/guide/join-credentials.md).
pub const JOIN_TOKEN_GROUP: &str = "system:bootstrappers:kubean-karpenter";
/// The cluster an object, a token Secret or an AWS resource was made for: a label on our
/// token Secrets (scopes the rotator's deletes) and inventories, a tag on the join store and
/// every AWS resource apply creates (scopes what prune may delete).
pub const CLUSTER_LABEL: &str = "kubean-karpenter.io/cluster";
/// The cluster a managed token Secret was made for (scopes the rotator's deletes).
pub const TOKEN_CLUSTER_LABEL: &str = CLUSTER_LABEL;
/// The infra role label Kubespray puts on infra nodes; Karpenter's controller and ours select
/// it, and doctor finds the infra instances by it.
pub const INFRA_ROLE_LABEL: &str = "node-role.kubernetes.io/infra";

/// Our two in-cluster controllers (`kubean-karpenter controller`): the join-token rotator and
/// the node-client CSR approver. Each runs in a namespace of its own, named like it, where
/// nothing else runs: whoever may create pods in Karpenter's namespace (or the other
/// controller's) mounts neither account (finding 8 of issue 47).
pub const ROTATOR: &str = "kubean-karpenter-rotator";
pub const CSR_APPROVER: &str = "kubean-karpenter-csr-approver";
/// The node health agent: its namespace, service account and admission policy.
pub const HEALTH_AGENT: &str = "kubean-karpenter-health-agent";
/// The budget controller (issue #51): its namespace, service account, Lease, ClusterRole, the
/// field manager that owns a budgeted NodePool's narrowed limit, its record (a ConfigMap in
/// the Lease namespace: heartbeat and the pools it enforces) and the policy guarding its writes.
pub const BUDGET: &str = "kubean-karpenter-budget";
/// The ClusterRole (and its binding) holding the budget controller's rights on NodePools.
pub const BUDGET_CLUSTER_ROLE: &str = "kubean-karpenter:budget";
/// The policy that holds launches of a budgeted pool until its budget is enforced.
pub const BUDGET_LAUNCH_POLICY: &str = "kubean-karpenter-budget-launch";

/// Where the controllers' Leases, the Roles that renew them (the rotator's holds its Secret
/// rights too) and their RoleBindings live, named like the controller: kube-system, so that a
/// controller moved between namespaces keeps one Lease.
pub const CONTROLLER_LEASE_NAMESPACE: &str = "kube-system";
/// The ClusterRole (and its binding) holding the CSR approver's rights on CSRs and Nodes.
pub const CSR_APPROVER_CLUSTER_ROLE: &str = "kubean-karpenter:csr-approver";

/// The namespace of the controller `name` ([`ROTATOR`] or [`CSR_APPROVER`]).
pub fn controller_namespace(name: &str) -> &str {
    name
}

/// The user the controller `name`'s service account authenticates as: what RBAC and the
/// admission policies see.
pub fn controller_user(name: &str) -> String {
    format!(
        "system:serviceaccount:{}:{name}",
        controller_namespace(name)
    )
}

/// The CSR approver's record of the instances it approved a node certificate for (a
/// ConfigMap in its Lease's namespace, rendered with the approver; it outlives the CSRs).
pub const CSR_APPROVALS_CONFIGMAP: &str = "kubean-karpenter-csr-approvals";
/// An EC2 instance ID as a node name (`i-` and 8 to 17 lowercase hex digits), the name a
/// Karpenter node registers under; the admission policies match it in CEL.
pub const INSTANCE_NAME_PATTERN: &str = "^i-[0-9a-f]{8,17}$";

/// Whether `name` matches [`INSTANCE_NAME_PATTERN`].
pub fn is_instance_name(name: &str) -> bool {
    name.strip_prefix("i-").is_some_and(|hex| {
        (8..=17).contains(&hex.len())
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The instance ID at the end of an AWS provider ID (`aws:///<zone>/<instance-id>`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    (id.starts_with("i-") && id.len() > 2).then_some(id)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_are_i_and_8_to_17_lowercase_hex_digits() {
        assert!(is_instance_name("i-0123456789abcdef0"));
        assert!(is_instance_name("i-01234567"));
        for name in [
            "i-0123456",
            "i-0123456789abcdef01",
            "i-0123456789ABCDEF0",
            "ip-10-0-1-12.ec2.internal",
            "control-plane-1",
            "i-",
        ] {
            assert!(!is_instance_name(name), "{name}");
        }
    }

    #[test]
    fn the_pattern_and_the_function_agree() {
        let pattern = regex::Regex::new(INSTANCE_NAME_PATTERN).unwrap();
        for name in [
            "i-0123456789abcdef0",
            "i-01234567",
            "i-0123456",
            "i-0123456789ABCDEF0",
            "x",
        ] {
            assert_eq!(pattern.is_match(name), is_instance_name(name), "{name}");
        }
    }

    #[test]
    fn instance_ids_come_from_aws_provider_ids() {
        assert_eq!(
            instance_id("aws:///us-east-1a/i-0123456789abcdef0"),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(instance_id("aws:///us-east-1a/"), None);
        assert_eq!(instance_id("gce://p/z/i-1"), None);
        assert_eq!(instance_id("aws:///us-east-1a/node-1"), None);
    }
}
