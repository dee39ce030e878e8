//! `rotator/health-agent.yaml`: the node health agent on the nodes of every pool with `health`
//! on (`kubean-karpenter controller --health-agent`), and what keeps it to its own Node.
//!
//! One DaemonSet per set of faults watched (GPU, kernel, both), on exactly those pools' nodes
//! and tolerating exactly their taints. It reads `/dev/kmsg` (CAP_SYSLOG, read-only) and
//! writes the conditions Karpenter's node repair reads. RBAC cannot say "your own Node", so
//! the account may get Nodes and patch `nodes/status` anywhere, and a ValidatingAdmissionPolicy
//! narrows every write to: the Node its token is bound to (the pod-bound token names the node
//! in `authentication.kubernetes.io/node-name`), and the agent's own condition types — no
//! label, annotation, taint, capacity, address or kubelet condition. Events go to `default`.

use std::collections::BTreeMap;

use kk_karpenter::repair::AGENT_CONDITIONS;
use kk_spec::names::HEALTH_AGENT;
use kk_spec::{ElasticCluster, HealthWatch};
use serde_json::{Value, json};

use crate::cel;
use crate::controller_workload::{self as workload, IMAGE_ARCH};
use crate::names;
use crate::{Bundle, RenderError};

/// Where its Events go (Node Events live in `default`, as the kubelet's do).
const EVENT_NAMESPACE: &str = "default";
/// Its `/metrics` port (pod network).
const METRICS_PORT: u16 = 8094;

fn watch_flags(watch: HealthWatch) -> (&'static str, &'static str) {
    match (watch.gpu, watch.kernel) {
        (true, true) => ("gpu,kernel", "gpu-kernel"),
        (true, false) => ("gpu", "gpu"),
        _ => ("kernel", "kernel"),
    }
}

/// The policy: the agent writes only its own Node's status, and in it only its conditions.
fn policy(labels: &Value) -> Value {
    let agent = cel::string_literal(&names::controller_user(HEALTH_AGENT));
    let owned = AGENT_CONDITIONS
        .iter()
        .map(|c| cel::string_literal(c))
        .collect::<Vec<_>>()
        .join(", ");
    let unchanged = |path: &str| format!("object.{path} == oldObject.{path}");
    let same_status_fields = [
        "capacity",
        "allocatable",
        "phase",
        "addresses",
        "daemonEndpoints",
        "nodeInfo",
        "images",
        "volumesInUse",
        "volumesAttached",
        "config",
        "runtimeHandlers",
        "features",
    ]
    .iter()
    .map(|f| format!("object.status.?{f} == oldObject.status.?{f}"))
    .collect::<Vec<_>>()
    .join(" && ");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": HEALTH_AGENT, "labels": labels },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["nodes", "nodes/status"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                }],
            },
            "matchConditions": [{ "name": "agent", "expression": format!("request.userInfo.username == {agent}") }],
            "variables": [
                { "name": "node", "expression": "request.userInfo.extra[?'authentication.kubernetes.io/node-name'].orValue([''])[0]" },
                { "name": "owned", "expression": format!("[{owned}]") },
            ],
            "validations": [
                {
                    "expression": "request.operation == 'UPDATE' && request.subResource == 'status'",
                    "message": format!("{HEALTH_AGENT} only updates node status"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.node != '' && variables.node == object.metadata.name",
                    "message": format!("{HEALTH_AGENT} writes only the Node its token is bound to"),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!(
                        "{} && {} && {} && {} && {same_status_fields}",
                        unchanged("metadata.?labels"),
                        unchanged("metadata.?annotations"),
                        unchanged("metadata.?ownerReferences"),
                        unchanged("metadata.?finalizers"),
                    ),
                    "message": format!("{HEALTH_AGENT} changes no label, annotation, taint, capacity or other status field"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "object.status.?conditions.orValue([]).filter(c, !(c.type in variables.owned)) == oldObject.status.?conditions.orValue([]).filter(c, !(c.type in variables.owned))",
                    "message": format!("{HEALTH_AGENT} writes only the conditions {}", AGENT_CONDITIONS.join(", ")),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// The DaemonSet for the pools that watch `watch`.
fn daemonset(image: &str, watch: HealthWatch, pools: &[&kk_spec::Pool], labels: &Value) -> Value {
    let (flag, suffix) = watch_flags(watch);
    let name = format!("{HEALTH_AGENT}-{suffix}");
    let selector = json!({ "app.kubernetes.io/name": name });
    let mut pod_labels = labels.clone();
    pod_labels["app.kubernetes.io/name"] = json!(name);
    // Exactly the pools' taints, so it runs on their nodes and tolerates nothing more.
    let mut tolerations = BTreeMap::new();
    for pool in pools {
        for t in &pool.taints {
            let mut toleration = json!({ "key": t.key, "effect": t.effect });
            match &t.value {
                Some(v) => {
                    toleration["operator"] = json!("Equal");
                    toleration["value"] = json!(v);
                }
                None => toleration["operator"] = json!("Exists"),
            }
            tolerations.insert(toleration.to_string(), toleration);
        }
    }
    let pool_names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": { "name": name, "namespace": names::controller_namespace(HEALTH_AGENT), "labels": pod_labels },
        "spec": {
            "selector": { "matchLabels": selector },
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": "10%" } },
            "template": {
                "metadata": { "labels": pod_labels },
                "spec": {
                    "serviceAccountName": HEALTH_AGENT,
                    "priorityClassName": "system-node-critical",
                    "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{ "matchExpressions": [
                            { "key": "karpenter.sh/nodepool", "operator": "In", "values": pool_names },
                            { "key": "kubernetes.io/arch", "operator": "In", "values": [IMAGE_ARCH] },
                        ]}],
                    }}},
                    "tolerations": tolerations.into_values().collect::<Vec<_>>(),
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "agent",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": [
                            "controller", "--health-agent",
                            format!("--watch={flag}"),
                            "--kernel-log=/dev/kmsg",
                            format!("--metrics-addr=0.0.0.0:{METRICS_PORT}"),
                            "--log-format=json",
                        ],
                        "env": [{ "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } }],
                        "ports": [{ "name": "http", "containerPort": METRICS_PORT }],
                        "livenessProbe": {
                            "httpGet": { "path": "/healthz", "port": "http" },
                            "periodSeconds": 30, "timeoutSeconds": 3, "failureThreshold": 3,
                        },
                        "resources": {
                            "requests": { "cpu": "5m", "memory": "24Mi" },
                            "limits": { "cpu": "100m", "memory": "64Mi" },
                        },
                        // Root for /dev/kmsg, with only CAP_SYSLOG (dmesg_restrict), read-only.
                        "securityContext": {
                            "runAsUser": 0,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "privileged": false,
                            "capabilities": { "drop": ["ALL"], "add": ["SYSLOG"] },
                            "seccompProfile": { "type": "RuntimeDefault" },
                        },
                        "volumeMounts": [{ "name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": true }],
                    }],
                    "volumes": [{ "name": "kmsg", "hostPath": { "path": "/dev/kmsg", "type": "CharDevice" } }],
                },
            },
        },
    })
}

/// Which pools watch what: one DaemonSet per distinct set.
fn by_watch(cluster: &ElasticCluster) -> BTreeMap<(bool, bool), Vec<&kk_spec::Pool>> {
    let mut out: BTreeMap<(bool, bool), Vec<&kk_spec::Pool>> = BTreeMap::new();
    for pool in &cluster.spec.pools {
        let watch = cluster.spec.health_watch(pool);
        if watch.any() {
            out.entry((watch.gpu, watch.kernel)).or_default().push(pool);
        }
    }
    out
}

/// The agent DaemonSets' names (their pods' `app.kubernetes.io/name`), for the PodMonitor.
pub fn daemonset_names(cluster: &ElasticCluster) -> Vec<String> {
    by_watch(cluster)
        .keys()
        .map(|(gpu, kernel)| {
            let (_, suffix) = watch_flags(HealthWatch {
                gpu: *gpu,
                kernel: *kernel,
            });
            format!("{HEALTH_AGENT}-{suffix}")
        })
        .collect()
}

fn manifests(cluster: &ElasticCluster, image: &str) -> Vec<Value> {
    let labels = workload::labels(HEALTH_AGENT);
    let mut objects = vec![
        workload::service_account(HEALTH_AGENT),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": HEALTH_AGENT, "labels": labels },
            "rules": [
                // Its own Node's conditions (the policy narrows both to the bound Node).
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": HEALTH_AGENT, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HEALTH_AGENT },
            "subjects": workload::subjects(HEALTH_AGENT),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": HEALTH_AGENT, "namespace": EVENT_NAMESPACE, "labels": labels },
            "rules": [{ "apiGroups": [""], "resources": ["events"], "verbs": ["create"] }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": HEALTH_AGENT, "namespace": EVENT_NAMESPACE, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": HEALTH_AGENT },
            "subjects": workload::subjects(HEALTH_AGENT),
        }),
        policy(&labels),
        workload::policy_binding(HEALTH_AGENT),
    ];
    for ((gpu, kernel), pools) in &by_watch(cluster) {
        objects.push(daemonset(
            image,
            HealthWatch {
                gpu: *gpu,
                kernel: *kernel,
            },
            pools,
            &labels,
        ));
    }
    objects
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    if !cluster.spec.runs_health_agent() {
        return Ok(());
    }
    let Some(controller) = &cluster.spec.controller else {
        return Err(RenderError::Invalid(
            "spec.controller: the node health agent runs the controller's image".into(),
        ));
    };
    let image = workload::controller_image(cluster, controller);
    // hostPath and CAP_SYSLOG: no Pod Security level but privileged admits them, so nothing
    // else runs in this namespace (audited against restricted).
    bundle.add_yaml(
        &format!(
            "namespaces/{}.yaml",
            names::controller_namespace(HEALTH_AGENT)
        ),
        &[workload::namespace(HEALTH_AGENT, workload::Network::Host)],
    )?;
    bundle.add_yaml("rotator/health-agent.yaml", &manifests(cluster, &image))
}
