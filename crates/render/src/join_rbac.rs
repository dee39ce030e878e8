//! `rotator/join-rbac.yaml`: what a kubean-karpenter join token may do (the CSR approver's
//! own rights are in `csr_approver.rs`).
//!
//! Our tokens put their holders in `system:bootstrappers:kubean-karpenter`
//! ([`names::JOIN_TOKEN_GROUP`]), bound here only to what `kubeadm join` needs: create (and
//! watch) CSRs (`system:node-bootstrapper`), read the kubeadm-config and kubelet-config
//! ConfigMaps and get Nodes (the Roles kubeadm creates for its own token group). Nothing
//! binds it to auto-approval: kubeadm's `kubeadm:node-autoapprove-bootstrap` stays as it is
//! for Kubespray's own joins (kubeadm's group), and the controller's approver signs off our
//! group's CSRs only for instances a NodeClaim names. Kubelet serving CSRs are never approved
//! by us (Kubespray has its own approver when `kubelet_rotate_server_certificates` is on).

use kk_spec::{ElasticCluster, JoinMode};
use serde_json::{Value, json};

use crate::names::{self, MANAGED_BY};
use crate::{Bundle, RenderError};

fn binding(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    role: (&str, &str),
    subject: Value,
) -> Value {
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1 });
    let mut metadata = json!({ "name": name, "labels": labels });
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": metadata,
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1 },
        "subjects": [subject],
    })
}

fn manifests() -> Vec<Value> {
    let group = json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": names::JOIN_TOKEN_GROUP });
    vec![
        // What `kubeadm join` does with the token (kubernetes/kubernetes cmd/kubeadm/app/
        // phases/bootstraptoken/node and uploadconfig: the same four grants kubeadm gives
        // its own group, minus auto-approval).
        binding(
            "ClusterRoleBinding",
            "kubean-karpenter:join-token-node-bootstrapper",
            None,
            ("ClusterRole", "system:node-bootstrapper"),
            group.clone(),
        ),
        binding(
            "ClusterRoleBinding",
            "kubean-karpenter:join-token-get-nodes",
            None,
            ("ClusterRole", "kubeadm:get-nodes"),
            group.clone(),
        ),
        binding(
            "RoleBinding",
            "kubean-karpenter:join-token-kubeadm-config",
            Some("kube-system"),
            ("Role", "kubeadm:nodes-kubeadm-config"),
            group.clone(),
        ),
        binding(
            "RoleBinding",
            "kubean-karpenter:join-token-kubelet-config",
            Some("kube-system"),
            ("Role", "kubeadm:kubelet-config"),
            group,
        ),
    ]
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    // The approver runs in the controller, which exists only where a store is rotated.
    if cluster.spec.join.mode == JoinMode::Static {
        return Ok(());
    }
    bundle.add_yaml("rotator/join-rbac.yaml", &manifests())
}
