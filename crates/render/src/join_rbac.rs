//! `rotator/join-rbac.yaml`: what a kubean-karpenter join token may do, and what the
//! controller's CSR approver may do.
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

/// The controller's service account (the rotator's Deployment runs the approver too).
const CONTROLLER_SA: &str = "kubean-karpenter-rotator";
const APPROVER: &str = "kubean-karpenter:csr-approver";
/// The signer the kubelet's TLS bootstrap asks for.
const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

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

fn manifests(cluster: &ElasticCluster) -> Vec<Value> {
    let group = json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": names::JOIN_TOKEN_GROUP });
    let sa = json!({ "kind": "ServiceAccount", "name": CONTROLLER_SA, "namespace": cluster.spec.karpenter.namespace });
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1 });
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
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": APPROVER, "labels": labels },
            "rules": [
                { "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"] },
                // Approving and denying both need `approve` on the signer: only the kubelet
                // client signer, so a serving or custom-signer CSR cannot be approved by us.
                { "apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [KUBELET_CLIENT_SIGNER], "verbs": ["approve"] },
                { "apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"] },
            ],
        }),
        binding(
            "ClusterRoleBinding",
            APPROVER,
            None,
            ("ClusterRole", APPROVER),
            sa,
        ),
    ]
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    // The approver runs in the controller, which exists only where a store is rotated.
    if cluster.spec.join.mode == JoinMode::Static {
        return Ok(());
    }
    bundle.add_yaml("rotator/join-rbac.yaml", &manifests(cluster))
}
