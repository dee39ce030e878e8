//! `rotator/` and `iam/rotator-policy.json`: the in-cluster join-token rotator
//! (`kubean-karpenter controller`) for the `ssm` and `secrets-manager` join modes.
//!
//! It keeps a valid kubeadm bootstrap token in the join store the userData reads, so
//! nodes can always join and rotation never touches an EC2NodeClass (no drift). Two
//! replicas on the infra workers in a namespace of their own, leader-elected through a Lease in
//! kube-system (rendered here); RBAC only in kube-system: create and delete Secrets, narrowed
//! by a ValidatingAdmissionPolicy to its own bootstrap tokens, and get/update of that Lease;
//! IAM write access to the one store. On the host network (instance profile) its namespace must
//! enforce Pod Security `privileged`, so a second policy holds that namespace's pods to the
//! rotator's image and account, unprivileged.

use kk_spec::{CredentialSource, ElasticCluster, JoinMode};
use serde_json::{Value, json};

use crate::cel;
use crate::controller_workload as workload;
use crate::names::{self, MANAGED_BY};
use crate::{Bundle, RenderError};
use kk_spec::ca::ClusterCa;

pub const NAME: &str = kk_spec::names::ROTATOR;
/// With `karpenter.credentials.source: staticSecret`, the rotator's own AWS keys (a Secret in
/// the rotator's namespace).
pub const CREDENTIALS_SECRET: &str = "kubean-karpenter-rotator-aws-credentials";
/// Each token's lifetime and how long a replaced one keeps working.
pub const TTL: &str = "2h";
pub const OVERLAP: &str = "20m";
/// The share of a token's lifetime after which the rotator replaces it, and how often it looks.
pub const ROTATE_AT: &str = "0.5";
pub const TICK: &str = "1m";

fn store_flag(mode: JoinMode) -> Option<&'static str> {
    match mode {
        JoinMode::Static => None,
        JoinMode::Ssm => Some("ssm"),
        JoinMode::SecretsManager => Some("secrets-manager"),
    }
}

fn manifests(cluster: &ElasticCluster, ca: &ClusterCa, store: &str, image: String) -> Vec<Value> {
    let spec = &cluster.spec;
    let name = &cluster.metadata.name;
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
        format!("--rotate-at={ROTATE_AT}"),
        format!("--overlap={OVERLAP}"),
        // CSRs are the approver's (its own Deployment and service account).
        "--no-csr-approver".to_owned(),
        format!("--tick={TICK}"),
        "--retry=10s".to_owned(),
    ];
    let network = workload::Network::for_aws_caller(spec);
    args.extend(workload::common_args(NAME, network));
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
    let rules = json!([
        // No get, list or watch: a Secret reader in kube-system reads every service
        // account's credentials. Create and delete cannot be narrowed by name (token
        // Secrets have random names); the ValidatingAdmissionPolicy below narrows them.
        { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"] },
        workload::lease_rule(NAME),
    ]);
    let mut objects = vec![workload::service_account(NAME)];
    objects.extend(workload::lease_role_binding_and_lease(NAME, rules));
    objects.extend([
        secret_policy(spec, name, &workload::labels(NAME)),
        workload::policy_binding(NAME),
    ]);
    if network == workload::Network::Host {
        // Its namespace must admit the host network, so Pod Security cannot guard it.
        objects.extend([
            pod_policy(&image, &workload::labels(NAME)),
            crate::admission::deny_binding(POD_POLICY, &workload::labels(NAME)),
        ]);
    }
    objects.push(workload::deployment(
        spec, NAME, "rotator", image, args, env, network,
    ));
    objects
}

/// The policy that holds pods in the rotator's namespace to what its namespace's Pod Security
/// level cannot (it enforces `privileged` for the host network).
const POD_POLICY: &str = "kubean-karpenter-rotator-pods";

/// Pods in the rotator's namespace, when it runs on the host network: the rotator's image under
/// its account, and otherwise `restricted` (no host PID or IPC, no hostPath, non-root, no
/// privilege, no added capability, all dropped, seccomp not Unconfined). Whoever may create pods
/// there gets the rotator's own program and nothing more.
fn pod_policy(image: &str, labels: &Value) -> Value {
    let account = cel::string_literal(NAME);
    let image = cel::string_literal(image);
    let container = format!(
        "c.image == {image} && has(c.securityContext) \
         && (!has(c.securityContext.privileged) || !c.securityContext.privileged) \
         && has(c.securityContext.allowPrivilegeEscalation) && !c.securityContext.allowPrivilegeEscalation \
         && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) \
         && 'ALL' in c.securityContext.capabilities.drop \
         && (!has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0) \
         && (!has(c.securityContext.runAsNonRoot) || c.securityContext.runAsNonRoot) \
         && (!has(c.securityContext.runAsUser) || c.securityContext.runAsUser != 0) \
         && (!has(c.securityContext.seccompProfile) || c.securityContext.seccompProfile.type != 'Unconfined')"
    );
    let every =
        |list: &str| format!("!has(object.spec.{list}) || object.spec.{list}.all(c, {container})");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": POD_POLICY, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": names::controller_namespace(NAME) } },
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods", "pods/ephemeralcontainers"],
                    "operations": ["CREATE", "UPDATE"],
                }],
            },
            "validations": [
                {
                    "expression": format!("has(object.spec.serviceAccountName) && object.spec.serviceAccountName == {account}"),
                    "message": format!("only {NAME} runs in its namespace"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "(!has(object.spec.hostPID) || !object.spec.hostPID) && (!has(object.spec.hostIPC) || !object.spec.hostIPC) \
                                   && (!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath)))",
                    "message": "no host PID or IPC namespace and no hostPath volume in the rotator's namespace",
                    "reason": "Forbidden",
                },
                {
                    "expression": "has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot \
                                   && (!has(object.spec.securityContext.runAsUser) || object.spec.securityContext.runAsUser != 0) \
                                   && has(object.spec.securityContext.seccompProfile) && object.spec.securityContext.seccompProfile.type == 'RuntimeDefault'",
                    "message": "the rotator's pod runs as non-root with the RuntimeDefault seccomp profile",
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("({}) && ({}) && ({})", every("containers"), every("initContainers"), every("ephemeralContainers")),
                    "message": format!("every container in the rotator's namespace runs {NAME}'s image, unprivileged, with every capability dropped and none added, as non-root"),
                    "reason": "Forbidden",
                },
            ],
        },
    })
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

/// The longest a token the rotator creates may live: the controller's `--ttl` ceiling (24 h,
/// `kk_live::token::TTL_CEILING`) plus 5 minutes for clocks that differ from the apiserver's.
const MAX_TOKEN_LIFETIME: &str = "24h5m";

/// What the rotator's service account may do to Secrets, enforced by the apiserver
/// (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30): create only bootstrap
/// tokens with our labels, this cluster's name, our join group and an expiration; delete
/// only such Secrets; never update one. In admission CEL a Secret's `data` values are the
/// base64 text of the bytes (kube-apiserver v1.36.3, tested in crates/live/tests/it/rotator_rbac.rs),
/// so the group is compared in that form (the apiserver always re-encodes, so it is canonical).
fn secret_policy(spec: &kk_spec::ClusterSpec, cluster: &str, labels: &Value) -> Value {
    use base64::Engine;
    let group_b64 = base64::engine::general_purpose::STANDARD.encode(names::JOIN_TOKEN_GROUP);
    let accounts = workload::accounts_cel(spec, NAME);
    let token_type = cel::string_literal("bootstrap.kubernetes.io/token");
    let (m, mv) = (
        cel::string_literal(MANAGED_BY.0),
        cel::string_literal(MANAGED_BY.1),
    );
    let (c, cv) = (
        cel::string_literal(names::TOKEN_CLUSTER_LABEL),
        cel::string_literal(cluster),
    );
    let ours = |o: &str| {
        format!(
            "{o}.type == {token_type} && {o}.metadata.name.startsWith('bootstrap-token-') \
             && has({o}.metadata.labels) \
             && {m} in {o}.metadata.labels && {o}.metadata.labels[{m}] == {mv} \
             && {c} in {o}.metadata.labels && {o}.metadata.labels[{c}] == {cv}",
        )
    };
    let keys = TOKEN_KEYS
        .iter()
        .map(|k| cel::string_literal(k))
        .collect::<Vec<_>>()
        .join(", ");
    let group_b64 = cel::string_literal(&group_b64);
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
            "matchConditions": [{ "name": "rotator-service-account", "expression": format!("request.userInfo.username in {accounts}") }],
            "variables": expiration_variables(),
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
                         && object.data['auth-extra-groups'] == {group_b64})"
                    ),
                    "message": format!("a rotator token must expire, carry only kubeadm's keys and auth-extra-groups exactly {}", names::JOIN_TOKEN_GROUP),
                    "reason": "Forbidden",
                },
                {
                    // A policy has no now(), but on CREATE the apiserver has set
                    // creationTimestamp before validation: the token may live at most the
                    // controller's TTL ceiling from then (plus clock skew). An expiration
                    // that is not a 20-character RFC 3339 UTC time is refused too.
                    "expression": format!(
                        "request.operation != 'CREATE' || !has(object.data) || !('expiration' in object.data) \
                         || (size(object.data['expiration']) == 28 \
                         && timestamp(variables.expiration) <= timestamp(object.metadata.creationTimestamp) + duration('{MAX_TOKEN_LIFETIME}'))"
                    ),
                    "message": format!("a rotator token must expire at most {MAX_TOKEN_LIFETIME} after its creation (expiration as YYYY-MM-DDTHH:MM:SSZ)"),
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

/// The token's `expiration`, decoded. In admission CEL a Secret's `data` values are base64
/// text, and Kubernetes registers no base64 decoder for admission policies, so it is decoded
/// here by hand: the 28 base64 characters of a 20-byte `YYYY-MM-DDTHH:MM:SSZ` become their
/// 6-bit values, then 20 bytes, then the same text again (digits and the four separators; any
/// other byte becomes `?`, which `timestamp()` then refuses).
fn expiration_variables() -> Value {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let chars = (0..28)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let bytes = (0..20)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    json!([
        {
            "name": "sextets",
            "expression": format!("[{chars}].map(i, int('{ALPHABET}'.indexOf(object.data['expiration'].charAt(i))))"),
        },
        {
            // Byte i of group g = i / 3 from sextets 4g..4g+3 (integer arithmetic: no bit
            // operations in Kubernetes' CEL).
            "name": "octets",
            "expression": format!(
                "[{bytes}].map(i, i % 3 == 0 \
                 ? variables.sextets[i / 3 * 4] * 4 + variables.sextets[i / 3 * 4 + 1] / 16 \
                 : (i % 3 == 1 \
                 ? variables.sextets[i / 3 * 4 + 1] % 16 * 16 + variables.sextets[i / 3 * 4 + 2] / 4 \
                 : variables.sextets[i / 3 * 4 + 2] % 4 * 64 + variables.sextets[i / 3 * 4 + 3]))"
            ),
        },
        {
            "name": "characters",
            "expression": "variables.octets.map(b, b >= 48 && b <= 57 ? '0123456789'.charAt(b - 48) \
                 : (b == 45 ? '-' : (b == 84 ? 'T' : (b == 58 ? ':' : (b == 90 ? 'Z' : '?')))))",
        },
        {
            "name": "expiration",
            "expression": (0..20).map(|i| format!("variables.characters[{i}]")).collect::<Vec<_>>().join(" + "),
        },
    ])
}

/// Write access to exactly the join store, nothing else.
fn policy(cluster: &ElasticCluster) -> Option<Value> {
    let spec = &cluster.spec;
    let aws = &spec.aws;
    let store = names::join_store(spec, &cluster.metadata.name);
    let arns = kk_spec::arn::Arns::of(aws);
    let (actions, resource) = match spec.join.mode {
        JoinMode::Static => return None,
        JoinMode::Ssm => (
            json!([
                "ssm:GetParameter",
                "ssm:PutParameter",
                "ssm:AddTagsToResource"
            ]),
            arns.ssm_parameter(&store),
        ),
        JoinMode::SecretsManager => (
            json!([
                "secretsmanager:GetSecretValue",
                "secretsmanager:PutSecretValue",
                "secretsmanager:CreateSecret",
                "secretsmanager:TagResource"
            ]),
            arns.secret(&store),
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
    let network = workload::Network::for_aws_caller(&cluster.spec);
    bundle.add_yaml(
        &format!("namespaces/{}.yaml", names::controller_namespace(NAME)),
        &[workload::namespace(NAME, network)],
    )?;
    bundle.add_yaml(
        "rotator/join-token-rotator.yaml",
        &manifests(
            cluster,
            ca,
            store,
            workload::controller_image(cluster, controller),
        ),
    )?;
    if let Some(policy) = policy(cluster) {
        bundle.add_json("iam/rotator-policy.json", &policy)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::expiration_variables;
    use kube_cel::KubeCelExt;
    use kube_cel::cel::{Context, Program, Value};

    /// The policy's hand-made base64 decoding, evaluated with the `cel` crate (the apiserver's
    /// own evaluation is `rotator_rbac.rs`): every rotator-style expiration comes back exactly,
    /// and anything else becomes text `timestamp()` refuses.
    fn decode(expiration: &str) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(expiration);
        let object = serde_json::json!({ "data": { "expiration": b64 } });
        let mut variables: std::collections::HashMap<String, Value> = Default::default();
        for variable in expiration_variables().as_array().unwrap() {
            let mut ctx = Context::default().with_all();
            ctx.add_variable("object", &object).unwrap();
            ctx.add_variable_from_value("variables", Value::from(variables.clone()));
            let program = Program::compile(variable["expression"].as_str().unwrap()).unwrap();
            let value = program.execute(&ctx).unwrap();
            variables.insert(variable["name"].as_str().unwrap().to_owned(), value);
        }
        match &variables["expiration"] {
            Value::String(s) => s.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_policy_decodes_an_expiration_exactly() {
        for text in [
            "2026-12-01T10:00:00Z",
            "2099-01-01T00:00:00Z",
            "1970-01-01T23:59:59Z",
        ] {
            assert_eq!(decode(text), text);
        }
        assert_eq!(decode("2099-01-01T00:00:00+"), "2099-01-01T00:00:00?");
        assert!(decode("never, never, never!").contains('?'));
    }
}
