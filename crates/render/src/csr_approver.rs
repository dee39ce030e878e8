//! `rotator/csr-approver.yaml`: the node-client CSR approver, apart from the rotator.
//!
//! The approver (`kubean-karpenter controller --csr-approver-only`) runs in its own
//! Deployment under its own service account: the rotator's account can mint join tokens but
//! approve nothing, the approver's can approve kubelet-client CSRs but mint nothing, so no
//! single stolen credential makes a token *and* approves its CSR (finding #2 of issue 24).
//!
//! What the approver may approve is narrowed twice: RBAC (`approve` on the kubelet client
//! signer only) and a ValidatingAdmissionPolicy on `certificatesigningrequests/approval`:
//! it approves only CSRs requested by one of our bootstrap tokens (`system:bootstrap:<id>` in
//! our join group) with the kubelet's usages, and nobody else may approve CSRs of that
//! group. CEL cannot decode `spec.request`, so the requested name (an instance a NodeClaim
//! names, never an existing Node) is checked by the approver itself.
//!
//! The approver remembers every instance it approved in a ConfigMap next to its Lease
//! (`kube-system`, [`kk_spec::names::CSR_APPROVALS_CONFIGMAP`]): an approved CSR object is
//! deleted by kube-controller-manager an hour after approval, the record is not. RBAC cannot
//! limit `create` by name (a create request names no object), so, like the Lease, the
//! ConfigMap is rendered here and the approver may only get, update and patch that one
//! object; without it the approver approves nothing (it fails closed).

use kk_spec::ElasticCluster;
use kk_spec::names::CSR_APPROVALS_CONFIGMAP;
use serde_json::{Value, json};

use crate::cel;
use crate::controller_workload as workload;
use crate::names;
use crate::{Bundle, RenderError};

/// The approver's service account, Deployment, Lease and policy.
pub const NAME: &str = kk_spec::names::CSR_APPROVER;
const CLUSTER_ROLE: &str = kk_spec::names::CSR_APPROVER_CLUSTER_ROLE;
/// The policy that keeps the approver's Node deletes to instance-named Nodes.
const NODE_DELETE_POLICY: &str = "kubean-karpenter-csr-approver-node-deletes";
/// How long an instance-named Node no NodeClaim names may stay (its NodeClaim is written at
/// launch, minutes before a kubelet registers, so an honest node is never that old unowned).
const ORPHAN_NODE_GRACE: &str = "5m";
/// The signer the kubelet's TLS bootstrap asks for.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The usages a kubelet client CSR may carry (key encipherment only with RSA keys; the
/// approver checks the key type).
const KUBELET_USAGES: [&str; 3] = ["digital signature", "client auth", "key encipherment"];

fn approval_policy(spec: &kk_spec::ClusterSpec, labels: &Value) -> Value {
    let approver = workload::accounts_cel(spec, NAME);
    let group = cel::string_literal(names::JOIN_TOKEN_GROUP);
    let signer = cel::string_literal(KUBELET_CLIENT_SIGNER);
    let usages = KUBELET_USAGES
        .iter()
        .map(|u| cel::string_literal(u))
        .collect::<Vec<_>>()
        .join(", ");
    let approving = "has(object.status) && has(object.status.conditions) \
                     && object.status.conditions.exists(c, c.type == 'Approved')";
    let ours = format!("has(object.spec.groups) && {group} in object.spec.groups");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": NAME, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["certificates.k8s.io"], "apiVersions": ["v1"],
                    "resources": ["certificatesigningrequests/approval"],
                    "operations": ["UPDATE"],
                }],
            },
            "validations": [
                {
                    // Who approves our join group's CSRs: the approver alone.
                    "expression": format!("!({approving}) || !({ours}) || request.userInfo.username in {approver}"),
                    "message": format!("only {NAME} approves CSRs of {}", names::JOIN_TOKEN_GROUP),
                    "reason": "Forbidden",
                },
                {
                    // What the approver approves: a kubelet client CSR from one of our tokens.
                    "expression": format!(
                        "!({approving}) || !(request.userInfo.username in {approver}) || ( \
                         object.spec.signerName == {signer} && {ours} \
                         && has(object.spec.username) && object.spec.username.startsWith('system:bootstrap:') \
                         && has(object.spec.usages) && object.spec.usages.all(u, u in [{usages}]))"
                    ),
                    "message": format!("{NAME} approves only kubelet client CSRs requested by a bootstrap token of {}", names::JOIN_TOKEN_GROUP),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// Which Nodes the approver may delete: instance-named ones (the orphans it removes), never a
/// Kubean-built node, so a stolen approver credential cannot take the control plane's Nodes
/// away (RBAC cannot narrow `delete` by a name pattern).
fn node_delete_policy(spec: &kk_spec::ClusterSpec, labels: &Value) -> Value {
    let approver = workload::accounts_cel(spec, NAME);
    let pattern = cel::string_literal(crate::names::INSTANCE_NAME_PATTERN);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": NODE_DELETE_POLICY, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["nodes"], "operations": ["DELETE"],
                }],
            },
            "validations": [{
                "expression": format!("!(request.userInfo.username in {approver}) || oldObject.metadata.name.matches({pattern})"),
                "message": format!("{NAME} deletes only Nodes named like an EC2 instance (orphans no NodeClaim names)"),
                "reason": "Forbidden",
            }],
        },
    })
}

fn manifests(cluster: &ElasticCluster, image: String) -> Vec<Value> {
    let spec = &cluster.spec;
    let mut args = vec![
        "controller".to_owned(),
        "--csr-approver-only".to_owned(),
        "--approve-interval=5s".to_owned(),
        format!("--orphan-node-grace={ORPHAN_NODE_GRACE}"),
    ];
    // No AWS calls: its own network namespace, away from IMDS.
    args.extend(workload::common_args(NAME, workload::Network::Pod));
    let env = vec![
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
    ];
    let labels = workload::labels(NAME);
    let mut objects = vec![
        workload::service_account(NAME),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": CLUSTER_ROLE, "labels": labels },
            "rules": [
                { "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"] },
                // Approving and denying both need `approve` on the signer: only the kubelet
                // client signer, so a serving or custom-signer CSR cannot be approved by us.
                { "apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [KUBELET_CLIENT_SIGNER], "verbs": ["approve"] },
                { "apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "watch"] },
                // Removing orphaned instance Nodes (the node-deletes policy narrows which).
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "delete"] },
                { "apiGroups": [""], "resources": ["events"], "verbs": ["create"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": CLUSTER_ROLE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE },
            "subjects": workload::subjects(NAME),
        }),
    ];
    objects.extend(workload::lease_role_binding_and_lease(
        NAME,
        json!([
            workload::lease_rule(NAME),
            // The record of approved instances: this one ConfigMap only, never created by the
            // approver (rendered below; `create` cannot be narrowed by resourceNames).
            { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CSR_APPROVALS_CONFIGMAP], "verbs": ["get", "update", "patch"] },
        ]),
    ));
    objects.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": CSR_APPROVALS_CONFIGMAP, "namespace": workload::LEASE_NAMESPACE, "labels": labels },
    }));
    objects.extend([
        approval_policy(spec, &labels),
        workload::policy_binding(NAME),
        node_delete_policy(spec, &labels),
        crate::admission::deny_binding(NODE_DELETE_POLICY, &labels),
        workload::deployment(
            spec,
            NAME,
            "approver",
            image,
            args,
            env,
            workload::Network::Pod,
        ),
    ]);
    objects
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    // The approver decides CSRs of our join tokens, which exist only where a store is rotated.
    if !cluster.spec.join.mode.runs_controller() {
        return Ok(());
    }
    let Some(controller) = &cluster.spec.controller else {
        return Err(RenderError::Invalid(
            "spec.controller: the join modes ssm and secrets-manager need the controller's image"
                .into(),
        ));
    };
    bundle.add_yaml(
        &format!("namespaces/{}.yaml", names::controller_namespace(NAME)),
        &[workload::namespace(NAME, workload::Network::Pod)],
    )?;
    bundle.add_yaml(
        "rotator/csr-approver.yaml",
        &manifests(cluster, workload::controller_image(cluster, controller)),
    )
}
