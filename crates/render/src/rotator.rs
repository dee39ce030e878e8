//! `rotator/` and `iam/rotator-policy.json`: the in-cluster join-token rotator
//! (`kubean-karpenter controller`) for the `ssm` and `secrets-manager` join modes.
//!
//! It keeps a valid kubeadm bootstrap token in the join store the userData reads, so
//! nodes can always join and rotation never touches an EC2NodeClass (no drift). Two
//! replicas on the infra workers in Karpenter's namespace, leader-elected through a Lease in
//! kube-system (rendered here); RBAC only in kube-system: create and delete Secrets, narrowed
//! by a ValidatingAdmissionPolicy to its own bootstrap tokens, and get/update of that Lease;
//! IAM write access to the one store.

use kk_spec::{CredentialSource, ElasticCluster, JoinMode};
use serde_json::{Value, json};

use crate::names::{self, INFRA_ROLE_LABEL, MANAGED_BY};
use crate::{Bundle, RenderError};
use kk_spec::ca::ClusterCa;

pub const NAME: &str = "kubean-karpenter-rotator";
/// With `karpenter.credentials.source: staticSecret`, the rotator's own AWS keys.
pub const CREDENTIALS_SECRET: &str = "kubean-karpenter-rotator-aws-credentials";
const LEASE_NAMESPACE: &str = "kube-system";
const METRICS_PORT: u16 = 8080;
/// Each token's lifetime and how long a replaced one keeps working.
pub const TTL: &str = "2h";
pub const OVERLAP: &str = "20m";

fn store_flag(mode: JoinMode) -> Option<&'static str> {
    match mode {
        JoinMode::Static => None,
        JoinMode::Ssm => Some("ssm"),
        JoinMode::SecretsManager => Some("secrets-manager"),
    }
}

/// `dist/image` builds linux/amd64 only: an arm64 node would pull it and fail with `exec format error`.
const IMAGE_ARCH: &str = "amd64";

fn manifests(cluster: &ElasticCluster, ca: &ClusterCa, store: &str, image: String) -> Vec<Value> {
    let spec = &cluster.spec;
    let name = &cluster.metadata.name;
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1, "app.kubernetes.io/name": NAME });
    let selector = json!({ "app.kubernetes.io/name": NAME });
    let store_name = names::join_store(spec, name);
    let mut args = vec![
        "controller".to_owned(),
        format!("--cluster={name}"),
        format!("--store={store}"),
        format!("--store-name={store_name}"),
        format!(
            "--api-server={}:{}",
            spec.api_server.dns_name, spec.api_server.port
        ),
        format!("--region={}", spec.aws.region),
        format!("--ca-cert-hash={}", ca.cert_hash),
        // Short-lived: a new token every hour; the replaced one is deleted 20 min later,
        // which covers Karpenter's 15-minute registration timeout.
        format!("--ttl={TTL}"),
        "--rotate-at=0.5".to_owned(),
        format!("--overlap={OVERLAP}"),
        "--approve-interval=5s".to_owned(),
        "--tick=1m".to_owned(),
        "--retry=10s".to_owned(),
        format!("--lease-namespace={LEASE_NAMESPACE}"),
        format!("--lease-name={NAME}"),
        "--lease-duration=15s".to_owned(),
        format!("--metrics-addr=0.0.0.0:{METRICS_PORT}"),
        "--log-format=json".to_owned(),
    ];
    if let Some(kms) = &spec.join.kms {
        args.push(format!("--kms-key-id={}", kms.key_arn));
    }
    let mut env = vec![
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
        json!({ "name": "AWS_REGION", "value": spec.aws.region }),
    ];
    if spec.karpenter.credentials.source == CredentialSource::StaticSecret {
        // The rotator's own keys, limited to iam/rotator-policy.json; never Karpenter's.
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            env.push(json!({
                "name": key,
                "valueFrom": { "secretKeyRef": { "name": CREDENTIALS_SECRET, "key": key } }
            }));
        }
    }
    let probe = |path: &str, period: u32| {
        json!({
            "httpGet": { "path": path, "port": "http" },
            "periodSeconds": period,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        })
    };
    // Karpenter's namespace (step 5's Helm install creates it; it is not ours to own).
    let namespace = &spec.karpenter.namespace;
    let subject = json!([{ "kind": "ServiceAccount", "name": NAME, "namespace": namespace }]);
    vec![
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": NAME, "namespace": namespace, "labels": labels },
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": NAME, "namespace": LEASE_NAMESPACE, "labels": labels },
            "rules": [
                // No get, list or watch: a Secret reader in kube-system reads every service
                // account's credentials. Create and delete cannot be narrowed by name (token
                // Secrets have random names); the ValidatingAdmissionPolicy below narrows them.
                { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"] },
                // RBAC cannot limit create by name, so the Lease is rendered here and the
                // rotator may only read and renew that one.
                { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [NAME], "verbs": ["get", "update"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": NAME, "namespace": LEASE_NAMESPACE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME },
            "subjects": subject,
        }),
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": NAME, "namespace": LEASE_NAMESPACE, "labels": labels },
        }),
        secret_policy(name, namespace, &labels),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": { "name": NAME, "labels": labels },
            "spec": { "policyName": NAME, "validationActions": ["Deny"] },
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": NAME, "namespace": namespace, "labels": labels },
            "spec": {
                // Two replicas, one leader: a node loss costs at most one lease duration
                // (one on a single infra node).
                "replicas": names::infra_replicas(spec),
                "selector": { "matchLabels": selector },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "serviceAccountName": NAME,
                        "priorityClassName": "system-cluster-critical",
                        // Never on nodes Karpenter manages: they need the token to exist.
                        "nodeSelector": { INFRA_ROLE_LABEL: "", "kubernetes.io/arch": IMAGE_ARCH },
                        "tolerations": names::infra_tolerations(spec),
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [{
                                    "weight": 100,
                                    "podAffinityTerm": {
                                        "topologyKey": "kubernetes.io/hostname",
                                        "labelSelector": { "matchLabels": selector },
                                    },
                                }],
                            },
                        },
                        "terminationGracePeriodSeconds": 30,
                        "securityContext": {
                            "runAsNonRoot": true,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "seccompProfile": { "type": "RuntimeDefault" },
                        },
                        "containers": [{
                            "name": "rotator",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": args,
                            "env": env,
                            "ports": [{ "name": "http", "containerPort": METRICS_PORT }],
                            "livenessProbe": probe("/healthz", 20),
                            "readinessProbe": probe("/readyz", 10),
                            "resources": {
                                "requests": { "cpu": "10m", "memory": "32Mi", "ephemeral-storage": "16Mi" },
                                "limits": { "cpu": "200m", "memory": "128Mi", "ephemeral-storage": "64Mi" },
                            },
                            "securityContext": {
                                "runAsNonRoot": true,
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "privileged": false,
                                "capabilities": { "drop": ["ALL"] },
                                "seccompProfile": { "type": "RuntimeDefault" },
                            },
                        }],
                    },
                },
            },
        }),
    ]
}

/// The keys kubeadm writes in a token Secret; nothing else may be smuggled in.
const TOKEN_KEYS: [&str; 7] = [
    "auth-extra-groups",
    "description",
    "expiration",
    "token-id",
    "token-secret",
    "usage-bootstrap-authentication",
    "usage-bootstrap-signing",
];

/// What the rotator's service account may do to Secrets, enforced by the apiserver
/// (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30): create only bootstrap
/// tokens with our labels, this cluster's name, our join group and an expiration; delete
/// only such Secrets; never update one. In admission CEL a Secret's `data` values are the
/// base64 text of the bytes (kube-apiserver v1.36.3, tested in crates/live/tests/rotator_rbac.rs),
/// so the group is compared in that form (the apiserver always re-encodes, so it is canonical).
fn secret_policy(cluster: &str, namespace: &str, labels: &Value) -> Value {
    use base64::Engine;
    let group_b64 = base64::engine::general_purpose::STANDARD.encode(names::JOIN_TOKEN_GROUP);
    let sa = format!("system:serviceaccount:{namespace}:{NAME}");
    let token_type = "bootstrap.kubernetes.io/token";
    let ours = |o: &str| {
        format!(
            "{o}.type == '{token_type}' && {o}.metadata.name.startsWith('bootstrap-token-') \
             && has({o}.metadata.labels) \
             && '{m}' in {o}.metadata.labels && {o}.metadata.labels['{m}'] == '{mv}' \
             && '{c}' in {o}.metadata.labels && {o}.metadata.labels['{c}'] == '{cluster}'",
            m = MANAGED_BY.0,
            mv = MANAGED_BY.1,
            c = names::TOKEN_CLUSTER_LABEL,
        )
    };
    let keys = TOKEN_KEYS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": NAME, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                }],
            },
            "matchConditions": [{ "name": "rotator-service-account", "expression": format!("request.userInfo.username == '{sa}'") }],
            "validations": [
                {
                    "expression": "request.operation != 'UPDATE'",
                    "message": "the join-token rotator never updates a Secret",
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("request.operation != 'CREATE' || ({})", ours("object")),
                    "message": format!("the join-token rotator may create only bootstrap-token Secrets labelled {}={} and {}={cluster}", MANAGED_BY.0, MANAGED_BY.1, names::TOKEN_CLUSTER_LABEL),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!(
                        "request.operation != 'CREATE' || (has(object.data) \
                         && object.data.all(k, k in [{keys}]) && 'expiration' in object.data \
                         && 'auth-extra-groups' in object.data \
                         && object.data['auth-extra-groups'] == '{group_b64}')"
                    ),
                    "message": format!("a rotator token must expire, carry only kubeadm's keys and auth-extra-groups exactly {}", names::JOIN_TOKEN_GROUP),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("request.operation != 'DELETE' || ({})", ours("oldObject")),
                    "message": "the join-token rotator may delete only its own bootstrap-token Secrets",
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// Write access to exactly the join store, nothing else.
fn policy(cluster: &ElasticCluster) -> Option<Value> {
    let spec = &cluster.spec;
    let aws = &spec.aws;
    let store = names::join_store(spec, &cluster.metadata.name);
    let (p, r, acct) = (&aws.partition, &aws.region, &aws.account_id);
    let (actions, resource) = match spec.join.mode {
        JoinMode::Static => return None,
        JoinMode::Ssm => (
            json!([
                "ssm:GetParameter",
                "ssm:PutParameter",
                "ssm:AddTagsToResource"
            ]),
            format!(
                "arn:{p}:ssm:{r}:{acct}:parameter/{}",
                store.trim_start_matches('/')
            ),
        ),
        // Secrets Manager appends six random characters to a secret's ARN.
        JoinMode::SecretsManager => (
            json!([
                "secretsmanager:GetSecretValue",
                "secretsmanager:PutSecretValue",
                "secretsmanager:CreateSecret",
                "secretsmanager:TagResource"
            ]),
            format!("arn:{p}:secretsmanager:{r}:{acct}:secret:{store}-??????"),
        ),
    };
    Some(json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "WriteJoinConfiguration",
            "Effect": "Allow",
            "Action": actions,
            "Resource": resource,
        }]
    }))
}

pub fn render(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    bundle: &mut Bundle,
) -> Result<(), RenderError> {
    let Some(store) = store_flag(cluster.spec.join.mode) else {
        return Ok(());
    };
    // Validation requires it wherever a store mode runs the controller.
    let Some(controller) = &cluster.spec.controller else {
        return Err(RenderError::Invalid(
            "spec.controller: the join modes ssm and secrets-manager need the controller's image"
                .into(),
        ));
    };
    bundle.add_yaml(
        "rotator/join-token-rotator.yaml",
        &manifests(cluster, ca, store, controller.image.reference()),
    )?;
    if let Some(policy) = policy(cluster) {
        bundle.add_json("iam/rotator-policy.json", &policy)?;
    }
    Ok(())
}
