//! What the rotator and the CSR approver share: both run our controller image as a
//! two-replica Deployment on the infra workers, each in a namespace of its own
//! ([`kk_spec::names::controller_namespace`]) whose Pod Security level is as strict as its
//! pods allow, leader-elected through a Lease in kube-system that is rendered here (RBAC
//! cannot limit `create` by name, so each controller may only read and renew its own; the
//! Lease stays where it was when the controllers moved out of Karpenter's namespace, so an old
//! and a new Deployment never both lead), and both are narrowed by a
//! ValidatingAdmissionPolicy bound under the controller's name.

use kk_spec::{ElasticCluster, images};
use serde_json::{Value, json};

use crate::names::{self, INFRA_ROLE_LABEL, MANAGED_BY};

pub(crate) const LEASE_NAMESPACE: &str = kk_spec::names::CONTROLLER_LEASE_NAMESPACE;
pub(crate) const METRICS_PORT: u16 = 8080;
/// On the host network the port is the node's: Karpenter's chart takes 8080 (metrics) and
/// 8081 (health) there too when it runs on the host network.
pub(crate) const HOST_METRICS_PORT: u16 = 8093;

/// Where a controller's pod lives on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// Its own network namespace: it cannot reach IMDS through a hop limit of 1.
    Pod,
    /// The node's network namespace: it reaches IMDS with the infra workers' hop limit at 1,
    /// which keeps every other pod there from borrowing the instance role (finding #4 of
    /// issue 24).
    Host,
}

impl Network {
    /// The network of a controller that calls AWS with the spec's credentials: the host's
    /// when they come from the infra workers' instance profile.
    pub(crate) fn for_aws_caller(spec: &kk_spec::ClusterSpec) -> Network {
        match spec.karpenter.credentials.source {
            kk_spec::CredentialSource::InstanceProfile => Network::Host,
            kk_spec::CredentialSource::StaticSecret => Network::Pod,
        }
    }

    fn metrics_port(self) -> u16 {
        match self {
            Network::Pod => METRICS_PORT,
            Network::Host => HOST_METRICS_PORT,
        }
    }
}
/// `dist/image` builds linux/amd64 only: an arm64 node would pull it and fail with `exec format error`.
pub(crate) const IMAGE_ARCH: &str = "amd64";

/// The labels on every object of the controller called `name`.
pub(crate) fn labels(name: &str) -> Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1, "app.kubernetes.io/name": name })
}

/// The controller's own namespace. Pod Security `restricted` where its pods are on the pod
/// network; a rotator that takes the infra workers' instance profile needs the host's network
/// (no other level admits `hostNetwork`), so its namespace enforces `privileged` and audits
/// against `restricted`, and nothing but the rotator runs there (docs/guide/join-credentials.md).
pub(crate) fn namespace(name: &str, network: Network) -> Value {
    let mut labels = labels(name);
    let enforce = match network {
        Network::Pod => "restricted",
        Network::Host => "privileged",
    };
    labels["pod-security.kubernetes.io/enforce"] = json!(enforce);
    labels["pod-security.kubernetes.io/enforce-version"] = json!("latest");
    labels["pod-security.kubernetes.io/audit"] = json!("restricted");
    labels["pod-security.kubernetes.io/audit-version"] = json!("latest");
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": names::controller_namespace(name), "labels": labels },
    })
}

/// The controller's service account, in its own namespace.
pub(crate) fn service_account(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": { "name": name, "namespace": names::controller_namespace(name), "labels": labels(name) },
    })
}

/// The accounts a controller's admission policy constrains, as a CEL list: its own and the one
/// of the same name in Karpenter's namespace, where installs made before the controllers had
/// namespaces of their own ran it. `apply` moves it (`kk_live::apply::handover`) with both
/// bound for a moment, and neither may ever act unconstrained; afterwards the old one is bound
/// to nothing, and stays constrained should someone create it again.
pub(crate) fn accounts_cel(spec: &kk_spec::ClusterSpec, name: &str) -> String {
    let mut accounts = vec![names::controller_user(name)];
    let legacy = format!("system:serviceaccount:{}:{name}", spec.karpenter.namespace);
    if !accounts.contains(&legacy) {
        accounts.push(legacy);
    }
    let literals: Vec<String> = accounts
        .iter()
        .map(|a| crate::cel::string_literal(a))
        .collect();
    format!("[{}]", literals.join(", "))
}

/// The subjects list naming the controller's service account.
pub(crate) fn subjects(name: &str) -> Value {
    json!([{ "kind": "ServiceAccount", "name": name, "namespace": names::controller_namespace(name) }])
}

/// The Role rule that lets the controller read and renew its own Lease, and no other.
pub(crate) fn lease_rule(name: &str) -> Value {
    json!({ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [name], "verbs": ["get", "update"] })
}

/// The controller's Role in the Lease's namespace (`rules` must include [`lease_rule`]), its
/// RoleBinding, and the Lease itself.
pub(crate) fn lease_role_binding_and_lease(name: &str, rules: Value) -> [Value; 3] {
    let labels = labels(name);
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": name, "namespace": LEASE_NAMESPACE, "labels": labels },
            "rules": rules,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": name, "namespace": LEASE_NAMESPACE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": subjects(name),
        }),
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": name, "namespace": LEASE_NAMESPACE, "labels": labels },
        }),
    ]
}

/// The controller's leader-election, metrics and logging flags.
pub(crate) fn common_args(name: &str, network: Network) -> [String; 5] {
    let port = network.metrics_port();
    [
        format!("--lease-namespace={LEASE_NAMESPACE}"),
        format!("--lease-name={name}"),
        "--lease-duration=15s".to_owned(),
        format!("--metrics-addr=0.0.0.0:{port}"),
        "--log-format=json".to_owned(),
    ]
}

/// The binding that enforces the controller's ValidatingAdmissionPolicy (named like it).
pub(crate) fn policy_binding(name: &str) -> Value {
    crate::admission::deny_binding(name, &labels(name))
}

/// A controller Deployment on the infra workers (the rotator's, or the CSR approver's): two
/// replicas, one leader, its own namespace, the restricted Pod Security settings (but the
/// host's network where `network` says so).
pub(crate) fn deployment(
    spec: &kk_spec::ClusterSpec,
    name: &str,
    container: &str,
    image: String,
    args: Vec<String>,
    env: Vec<Value>,
    network: Network,
) -> Value {
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1, "app.kubernetes.io/name": name });
    let selector = json!({ "app.kubernetes.io/name": name });
    let probe = |path: &str, period: u32| {
        json!({
            "httpGet": { "path": path, "port": "http" },
            "periodSeconds": period,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        })
    };
    let mut deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": names::controller_namespace(name), "labels": labels },
            "spec": {
                // Two replicas, one leader: a node loss costs at most one lease duration
                // (one on a single infra node).
                "replicas": names::infra_replicas(spec),
                "selector": { "matchLabels": selector },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "serviceAccountName": name,
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
                            "name": container,
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": args,
                            "env": env,
                            "ports": [{ "name": "http", "containerPort": network.metrics_port() }],
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
    });
    if network == Network::Host {
        // The node's resolver: the controller needs AWS's names, not the cluster's services
        // (it reaches the apiserver by the kubernetes Service's IP).
        let pod = &mut deployment["spec"]["template"]["spec"];
        pod["hostNetwork"] = json!(true);
        pod["dnsPolicy"] = json!("Default");
    }
    deployment
}

/// Our controller's image (the rotator's and the CSR approver's): the spec's override or
/// mirror where it sets one, else `spec.controller.image`.
pub(crate) fn controller_image(
    cluster: &ElasticCluster,
    controller: &kk_spec::Controller,
) -> String {
    images::reference_of(&cluster.spec, "kubean-karpenter")
        .unwrap_or_else(|| controller.image.reference())
}
