//! `authenticator/`: the aws-iam-authenticator server (sigs.k8s.io/aws-iam-authenticator v0.7.2)
//! as the API server's token webhook, for clusters with `joinMethod: iam` pools.
//!
//! - `aws-iam-authenticator.yaml`: its config (ConfigMap) and a DaemonSet on the control-plane
//!   nodes, on the host network, listening on 127.0.0.1 only. Mappings come from the mounted
//!   config file (`MountedFile` backend): the authenticator needs no Kubernetes API access, no
//!   service account token and no AWS credentials (it replays the node's presigned STS request).
//! - `webhook-kubeconfig.conf`: the file the API server reads through
//!   `--authentication-token-webhook-config-file` (Kubespray writes the same from the
//!   `kube_webhook_token_auth*` vars `kubean/` carries); it trusts exactly the spec's serving
//!   certificate.
//!
//! Node identity: the node role maps to `system:node:{{SessionName}}` in `system:nodes`. An
//! instance profile's role session name is the instance ID, set by EC2; nodeadm's
//! `InstanceIdNodeName` names the Node by it; our kubeadm nodes, the CSR approver (which matches
//! NodeClaim instance IDs) and the CCM (which follows `spec.providerID`) use the same name. The
//! alternative, `{{EC2PrivateDNSName}}`, would need `ec2:DescribeInstances` on every cache miss.

use base64::Engine;
use kk_spec::{ElasticCluster, IamAuthenticator, JoinMethod, images, versions};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::{Decode, DecodePem};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use crate::names::MANAGED_BY;
use crate::{Bundle, RenderError};

pub const NAME: &str = "aws-iam-authenticator";
pub const NAMESPACE: &str = "kube-system";
/// The TLS Secret the operator creates with the serving key (never in the bundle).
pub const SERVING_SECRET: &str = "aws-iam-authenticator-serving";
/// Where the API server's webhook kubeconfig lives on control-plane nodes.
pub const WEBHOOK_KUBECONFIG_PATH: &str = "/etc/kubernetes/aws-iam-authenticator/kubeconfig.yaml";
const STATE_DIR: &str = "/var/aws-iam-authenticator";
const CONFIG_DIR: &str = "/etc/aws-iam-authenticator";
/// The authenticator's fixed health port (pkg/server/server.go: `:21363`).
const HEALTH_PORT: u16 = kk_spec::iam::AUTHENTICATOR_HEALTH_PORT;
/// Non-root user the container runs as (the Secret's files are group-readable by it).
const RUN_AS: i64 = 10000;

/// Whether the cluster runs the authenticator: some pool joins by `iam`.
pub fn enabled(cluster: &ElasticCluster) -> Option<&IamAuthenticator> {
    let wanted = cluster
        .spec
        .pools
        .iter()
        .any(|p| p.join_method == JoinMethod::Iam);
    cluster.spec.iam_authenticator.as_ref().filter(|_| wanted)
}

/// `https://127.0.0.1:<port>/authenticate`: the webhook URL on every control-plane node.
pub fn webhook_url(auth: &IamAuthenticator) -> String {
    format!("https://127.0.0.1:{}/authenticate", auth.port)
}

/// The node role's ARN as the authenticator canonicalises an assumed-role ARN (no path).
pub fn node_role_arn(cluster: &ElasticCluster) -> String {
    let aws = &cluster.spec.aws;
    kk_spec::arn::Arns::of(aws).role(&aws.node_role)
}

/// The serving certificate must parse and name IP 127.0.0.1: the API server dials that address
/// and checks the name against the one certificate it trusts.
fn check_serving_certificate(auth: &IamAuthenticator) -> Result<(), RenderError> {
    let bad = |why: String| {
        RenderError::Invalid(format!("spec.iamAuthenticator.servingCertificate: {why}"))
    };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(auth.serving_certificate.trim())
        .map_err(|e| bad(format!("not base64: {e}")))?;
    let text = String::from_utf8(pem).map_err(|_| bad("not PEM text".into()))?;
    let cert = Certificate::from_pem(text.trim())
        .map_err(|e| bad(format!("not one PEM certificate: {e}")))?;
    const SAN: &str = "2.5.29.17";
    let names_loopback = cert
        .tbs_certificate
        .extensions
        .iter()
        .flatten()
        .filter(|e| e.extn_id.to_string() == SAN)
        .filter_map(|e| SubjectAltName::from_der(e.extn_value.as_bytes()).ok())
        .flat_map(|san| san.0)
        .any(|n| matches!(n, GeneralName::IpAddress(ip) if ip.as_bytes() == [127, 0, 0, 1]));
    if !names_loopback {
        return Err(bad(
            "has no subjectAltName IP 127.0.0.1, where the API server reaches the authenticator"
                .into(),
        ));
    }
    Ok(())
}

/// The authenticator's config file (`server` subcommand, viper keys of cmd/.../root.go).
pub fn config(cluster: &ElasticCluster, auth: &IamAuthenticator) -> Value {
    json!({
        "clusterID": kk_spec::iam::authenticator_cluster_id(cluster),
        "server": {
            "address": "127.0.0.1",
            "port": auth.port,
            "partition": cluster.spec.aws.partition,
            "stateDir": STATE_DIR,
            // The API server's kubeconfig is rendered (and written by Kubespray): the
            // authenticator must not write one with a certificate of its own making.
            "kubeconfigPregenerated": true,
            "backendMode": ["MountedFile"],
            "mapRoles": [{
                "rolearn": node_role_arn(cluster),
                "username": "system:node:{{SessionName}}",
                "groups": ["system:nodes"],
            }],
        },
    })
}

fn labels() -> Value {
    json!({ "k8s-app": NAME, MANAGED_BY.0: MANAGED_BY.1 })
}

fn daemon_set(cluster: &ElasticCluster, auth: &IamAuthenticator, config_text: &str) -> Value {
    let digest = Sha256::digest(config_text.as_bytes());
    let config_hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels() },
        "spec": {
            "selector": { "matchLabels": { "k8s-app": NAME } },
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1 } },
            "template": {
                "metadata": {
                    "labels": labels(),
                    // A new config restarts the pods (the server reads it once).
                    "annotations": { "kubean-karpenter.io/config-hash": config_hash },
                },
                "spec": {
                    "hostNetwork": true,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": { "node-role.kubernetes.io/control-plane": "" },
                    "tolerations": [
                        { "key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule" },
                        { "key": "CriticalAddonsOnly", "operator": "Exists" },
                    ],
                    "automountServiceAccountToken": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "fsGroup": RUN_AS,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "containers": [{
                        "name": NAME,
                        "image": images::reference_of(&cluster.spec, versions::IAM_AUTHENTICATOR)
                            .unwrap_or_else(|| auth.image.clone()),
                        "args": ["server", format!("--config={CONFIG_DIR}/config.yaml")],
                        "ports": [{ "name": "webhook", "containerPort": auth.port, "protocol": "TCP" }],
                        "livenessProbe": {
                            "httpGet": { "host": "127.0.0.1", "path": "/healthz", "port": HEALTH_PORT, "scheme": "HTTP" },
                            "periodSeconds": 10,
                        },
                        "resources": {
                            "requests": { "cpu": "10m", "memory": "32Mi" },
                            "limits": { "memory": "128Mi" },
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "drop": ["ALL"] },
                        },
                        "volumeMounts": [
                            { "name": "config", "mountPath": CONFIG_DIR, "readOnly": true },
                            { "name": "serving", "mountPath": STATE_DIR, "readOnly": true },
                        ],
                    }],
                    "volumes": [
                        { "name": "config", "configMap": { "name": NAME } },
                        { "name": "serving", "secret": {
                            "secretName": SERVING_SECRET,
                            "defaultMode": 0o440,
                            "items": [
                                { "key": "tls.crt", "path": "cert.pem" },
                                { "key": "tls.key", "path": "key.pem" },
                            ],
                        } },
                    ],
                },
            },
        },
    })
}

/// The webhook kubeconfig the API server reads (what Kubespray writes from the vars).
pub fn webhook_kubeconfig(auth: &IamAuthenticator) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": NAME,
            "cluster": {
                "certificate-authority-data": auth.serving_certificate.trim(),
                "server": webhook_url(auth),
            },
        }],
        "users": [{ "name": "kube-apiserver", "user": {} }],
        "contexts": [{ "name": "webhook", "context": { "cluster": NAME, "user": "kube-apiserver" } }],
        "current-context": "webhook",
    })
}

/// Kubespray's token-webhook variables (kubespray inventory/sample group_vars/all/all.yml).
pub fn kubespray_vars(cluster: &ElasticCluster) -> Vec<(&'static str, Value)> {
    let Some(auth) = enabled(cluster) else {
        return Vec::new();
    };
    vec![
        ("kube_webhook_token_auth", json!(true)),
        ("kube_webhook_token_auth_url", json!(webhook_url(auth))),
        ("kube_webhook_token_auth_url_skip_tls_verify", json!(false)),
        (
            "kube_webhook_token_auth_ca_data",
            json!(auth.serving_certificate.trim()),
        ),
        // What the nodes' NodeConfig assumes (nodeadm::SERVICE_CIDR, CLUSTER_DNS): pinned here
        // so a change of Kubespray's defaults cannot leave the nodes with the wrong DNS.
        (
            "kube_service_addresses",
            json!(crate::nodeadm::SERVICE_CIDR),
        ),
        ("enable_nodelocaldns", json!(true)),
        ("nodelocaldns_ip", json!(crate::nodeadm::CLUSTER_DNS)),
    ]
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let Some(auth) = enabled(cluster) else {
        return Ok(());
    };
    check_serving_certificate(auth)?;
    let config = config(cluster, auth);
    let config_text = serde_saphyr::to_string(&config).map_err(|e| RenderError::Serialize {
        path: "authenticator/aws-iam-authenticator.yaml".into(),
        message: e.to_string(),
    })?;
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": labels() },
        "data": { "config.yaml": config_text },
    });
    bundle.add_yaml(
        "authenticator/aws-iam-authenticator.yaml",
        &[config_map, daemon_set(cluster, auth, &config_text)],
    )?;
    let kubeconfig =
        serde_saphyr::to_string(&webhook_kubeconfig(auth)).map_err(|e| RenderError::Serialize {
            path: "authenticator/webhook-kubeconfig.conf".into(),
            message: e.to_string(),
        })?;
    bundle.add_text("authenticator/webhook-kubeconfig.conf", kubeconfig);
    Ok(())
}
