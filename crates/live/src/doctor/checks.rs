//! The checks: pure functions of a [`Snapshot`] and the spec's [`Facts`]. One function per
//! check, in the order `doctor` prints them.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use serde_json::Value;

use super::gather::{Snapshot, instance_id};
use super::policy::{Verdict, evaluate};
use super::{Check, Facts, Status};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const POOL_LABEL: &str = "karpenter.sh/nodepool";
/// Karpenter deletes a NodeClaim that has not registered 15 minutes after launch
/// (kubernetes-sigs/karpenter pkg/controllers/nodeclaim/lifecycle/liveness.go, registrationTTL).
const REGISTRATION_TTL: &str = "15m";

/// Every check, in order.
pub fn all(s: &Snapshot, f: &Facts) -> Vec<Check> {
    vec![
        apiserver(s),
        kubelet_skew(s, f),
        pods_running(s, f),
        nodepools_present(s, f),
        karpenter_ready(s),
        karpenter_errors(s),
        node_provider_id(s, f),
        ccm_initializes(s, f),
        cluster_id_tag(s, f),
        nodeclaims_registered(s, f),
        nodeclaims_initialized(s, f),
        gpu_advertised(s, f),
        device_plugin(s, f),
        join_store(s, f),
        join_token_valid(s, f),
        join_ca_hash(s),
        cluster_info_jws(s, f),
        bootstrap_rbac(s, f),
        pass_role(s, f),
        api_port(s, f),
    ]
}

fn check(id: &'static str, title: &'static str) -> Check {
    Check {
        id,
        title,
        status: Status::Ok,
        evidence: Vec::new(),
        fix: String::new(),
    }
}

impl Check {
    fn skip(mut self, reason: impl Into<String>) -> Check {
        self.status = Status::Skipped;
        self.evidence = vec![reason.into()];
        self
    }

    fn saw(mut self, evidence: impl Into<String>) -> Check {
        self.evidence.push(evidence.into());
        self
    }

    /// Raises the status (ok < warn < fail) and sets the fix.
    fn worse(&mut self, status: Status, evidence: String, fix: &str) {
        if status > self.status {
            self.status = status;
        }
        self.evidence.push(evidence);
        if self.fix.is_empty() {
            self.fix = fix.to_owned();
        }
    }
}

fn name_of(meta: &kube::api::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => meta.name.clone().unwrap_or_default(),
    }
}

fn age(now: Timestamp, since: Option<Timestamp>) -> Duration {
    since
        .map(|t| Duration::from_secs(now.duration_since(t).as_secs().max(0) as u64))
        .unwrap_or_default()
}

fn secs(d: Duration) -> String {
    crate::token::format_duration(Duration::from_secs(d.as_secs()))
}

fn created(meta: &kube::api::ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// A status condition of a Karpenter object: (status, reason, message, lastTransitionTime).
fn condition<'a>(obj: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn cond_true(obj: &DynamicObject, kind: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == "True")
}

fn cond_since(obj: &DynamicObject, kind: &str) -> Option<Timestamp> {
    condition(obj, kind)?["lastTransitionTime"]
        .as_str()?
        .parse()
        .ok()
}

fn pool_of(labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<&str> {
    labels?.get(POOL_LABEL).map(String::as_str)
}

fn node_taints(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            t.iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect()
        })
        .unwrap_or_default()
}

fn provider_id(n: &Node) -> Option<&str> {
    n.spec
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// `v1.36.3` → (1, 36).
fn minor(version: &str) -> Option<(u64, u64)> {
    let mut it = version.trim_start_matches('v').split(['.', '-', '+']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn apiserver(s: &Snapshot) -> Check {
    let c = check("apiserver-reachable", "the API server answers");
    match &s.server_version {
        Ok(v) => c.saw(format!("GET /version: {v}")),
        Err(e) => {
            let mut c = c;
            c.worse(
                Status::Fail,
                e.clone(),
                "check the kubeconfig/context and that this machine reaches the API server",
            );
            c
        }
    }
}

fn kubelet_skew(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "kubelet-version-skew",
        "kubelets within the supported skew of the control plane (not newer, at most 3 minors older)",
    );
    let server = match &s.server_version {
        Ok(v) => v.clone(),
        Err(_) => return c.skip("the API server's version could not be read"),
    };
    let Some((smaj, smin)) = minor(&server) else {
        return c.skip(format!("unparsable API server version {server}"));
    };
    if let Some((_, spec_minor)) = minor(&f.kubernetes_version)
        && spec_minor != smin
    {
        c.worse(
            Status::Warn,
            format!(
                "the API server runs {server}; the spec says kubernetesVersion {}",
                f.kubernetes_version
            ),
            "upgrade the control plane with Kubean, or set kubernetesVersion to what runs",
        );
    }
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    let mut counted = 0;
    for n in nodes {
        let kubelet = n
            .status
            .as_ref()
            .and_then(|st| st.node_info.as_ref())
            .map(|i| i.kubelet_version.clone())
            .unwrap_or_default();
        let Some((maj, min)) = minor(&kubelet) else {
            continue;
        };
        counted += 1;
        let node = name_of(&n.metadata);
        // Kubernetes' version skew policy: kubelet never newer than kube-apiserver, and up to
        // three minor versions older (since 1.28).
        if maj != smaj || min > smin {
            c.worse(
                Status::Fail,
                format!("Node {node}: kubelet {kubelet} is newer than the API server {server}"),
                "use an AMI whose kubelet matches the control plane's minor version (pool ami), or upgrade the control plane first",
            );
        } else if smin - min > 3 {
            c.worse(
                Status::Fail,
                format!("Node {node}: kubelet {kubelet} is {} minors older than the API server {server} (at most 3 are supported)", smin - min),
                "use an AMI whose kubelet matches the control plane's minor version (pool ami)",
            );
        } else if smin != min {
            c.worse(
                Status::Warn,
                format!("Node {node}: kubelet {kubelet}, API server {server}"),
                "move the pool's AMI to the control plane's minor version",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{counted} kubelet(s) on the API server's minor version {server}"
        ));
    }
    c
}

fn pods_running(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "pods-running",
        "every pod runs (CCM, CNI, device plugin, Karpenter) — checklist: kubectl get pods -A",
    );
    let Ok(pods) = &s.pods else {
        return c.skip("Pods could not be listed");
    };
    let mut running = 0;
    for p in pods {
        let phase = p
            .status
            .as_ref()
            .and_then(|st| st.phase.as_deref())
            .unwrap_or("");
        if matches!(phase, "Running" | "Succeeded") {
            running += 1;
        }
        let crash = p
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .find_map(|cs| {
                cs.state
                    .as_ref()?
                    .waiting
                    .as_ref()?
                    .reason
                    .clone()
                    .filter(|r| {
                        matches!(
                            r.as_str(),
                            "CrashLoopBackOff" | "ImagePullBackOff" | "ErrImagePull"
                        )
                    })
            });
        let name = name_of(&p.metadata);
        if let Some(reason) = crash {
            c.worse(
                Status::Fail,
                format!("Pod {name}: {reason}"),
                "kubectl logs/describe the pod; fix its image or configuration",
            );
        } else if phase == "Failed" {
            c.worse(
                Status::Warn,
                format!("Pod {name}: phase Failed"),
                "kubectl describe the pod",
            );
        } else if phase == "Pending" && age(s.now, created(&p.metadata)) > f.grace {
            c.worse(
                Status::Warn,
                format!(
                    "Pod {name}: Pending for {}",
                    secs(age(s.now, created(&p.metadata)))
                ),
                "kubectl describe the pod: an unschedulable pod of a pool waits for Karpenter (see the nodeclaims checks)",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{running} of {} pods Running or Succeeded",
            pods.len()
        ));
    }
    c
}

fn nodepools_present(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check("nodepools-present", "a NodePool for every pool of the spec");
    let Ok(pools) = &s.nodepools else {
        return c.skip("NodePools could not be listed (Karpenter's CRDs installed?)");
    };
    for want in &f.pools {
        if !pools
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(want.as_str()))
        {
            c.worse(
                Status::Fail,
                format!("no NodePool {want}"),
                "kubean-karpenter apply <spec>",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("NodePools: {}", f.pools.join(", ")));
    }
    c
}

fn karpenter_ready(s: &Snapshot) -> Check {
    let mut c = check(
        "karpenter-ready",
        "Karpenter runs and reports its NodePools and EC2NodeClasses Ready",
    );
    let (Ok(pools), Ok(classes)) = (&s.nodepools, &s.nodeclasses) else {
        return c.skip("NodePools or EC2NodeClasses could not be listed");
    };
    let mut seen = 0;
    for (kind, obj) in pools
        .iter()
        .map(|o| ("NodePool", o))
        .chain(classes.iter().map(|o| ("EC2NodeClass", o)))
    {
        seen += 1;
        let name = obj.metadata.name.clone().unwrap_or_default();
        match condition(obj, "Ready") {
            None => c.worse(
                Status::Fail,
                format!("{kind} {name} has no Ready condition: no Karpenter controller has reconciled it"),
                "install or start Karpenter (ORDER.md step 5) and check its logs",
            ),
            Some(r) if r["status"] != "True" => {
                // The failing sub-condition says why (e.g. ValidationSucceeded=False with the
                // denied call).
                let why: Vec<String> = obj.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|x| x["type"] != "Ready" && x["status"] == "False")
                    .map(|x| {
                        format!(
                            "{}=False: {}",
                            x["type"].as_str().unwrap_or(""),
                            x["message"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                c.worse(
                    Status::Fail,
                    format!(
                        "{kind} {name}: Ready={} {} {}",
                        r["status"].as_str().unwrap_or(""),
                        r["message"].as_str().unwrap_or(""),
                        why.join("; ")
                    )
                    .trim_end()
                    .to_owned(),
                    "read the condition's message: an UnauthorizedOperation names the IAM permission the controller lacks (iam/controller-policy.json, iam:PassRole on the node role)",
                );
            }
            Some(_) => {}
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("{seen} NodePool(s)/EC2NodeClass(es) Ready"));
    }
    c
}

fn karpenter_errors(s: &Snapshot) -> Check {
    let mut c = check(
        "karpenter-errors",
        "no recent Warning events from Karpenter",
    );
    let Ok(events) = &s.warning_events else {
        return c.skip("Events could not be listed");
    };
    let mut by_reason: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    for e in events {
        let from_karpenter = e
            .reporting_component
            .as_deref()
            .into_iter()
            .chain(e.source.as_ref().and_then(|s| s.component.as_deref()))
            .any(|c| c.contains("karpenter"))
            || matches!(
                e.involved_object.kind.as_deref(),
                Some("NodeClaim" | "NodePool" | "EC2NodeClass")
            );
        let last = e
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
            .or(created(&e.metadata));
        if !from_karpenter || age(s.now, last) > Duration::from_secs(3600) {
            continue;
        }
        let key = format!(
            "{} {}/{}",
            e.reason.as_deref().unwrap_or(""),
            e.involved_object.kind.as_deref().unwrap_or(""),
            e.involved_object.name.as_deref().unwrap_or("")
        );
        let entry = by_reason
            .entry(key)
            .or_insert((0, e.message.clone().unwrap_or_default()));
        entry.0 += e.count.unwrap_or(1).max(1) as usize;
    }
    for (key, (count, message)) in by_reason {
        c.worse(
            Status::Warn,
            format!("{key} ×{count}: {message}"),
            "read the events (kubectl get events -A --field-selector type=Warning) and Karpenter's log",
        );
    }
    if c.evidence.is_empty() {
        c = c.saw("no Warning events from Karpenter in the last hour");
    }
    c
}

fn node_provider_id(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "node-provider-id",
        "every Node has an aws:///<zone>/<instance> provider ID of a running instance, and every launched NodeClaim's provider ID names a Node once Registered",
    );
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    for n in nodes {
        let name = name_of(&n.metadata);
        let old = age(s.now, created(&n.metadata)) > f.grace;
        match provider_id(n) {
            None if old => c.worse(
                Status::Fail,
                format!("Node {name}: no spec.providerID after {}", secs(age(s.now, created(&n.metadata)))),
                "the AWS cloud controller manager sets it: check that it runs and initializes nodes (ccm-initializes-nodes)",
            ),
            None => {}
            Some(pid) => match instance_id(pid) {
                None => c.worse(
                    Status::Fail,
                    format!("Node {name}: providerID {pid:?} is not aws:///<zone>/<instance-id>"),
                    "Karpenter matches Nodes to NodeClaims by provider ID: let the CCM set it (no --provider-id on the kubelet)",
                ),
                Some(id) => {
                    if let Some(Ok(found)) = &s.instances {
                        match found.get(id) {
                            None => c.worse(
                                Status::Fail,
                                format!("Node {name}: providerID {pid} names an instance EC2 does not know"),
                                "delete the stale Node; check the kubelet's provider ID and the AWS account/region",
                            ),
                            Some(i) if i.state != "running" => c.worse(
                                Status::Warn,
                                format!("Node {name}: instance {id} is {}", i.state),
                                "the CCM deletes Nodes of terminated instances; Karpenter replaces the capacity",
                            ),
                            Some(_) => {}
                        }
                    }
                }
            },
        }
    }
    if let Ok(claims) = &s.nodeclaims {
        for nc in claims {
            let Some(pid) = nc.data["status"]["providerID"].as_str() else {
                continue;
            };
            if cond_true(nc, "Registered") && !nodes.iter().any(|n| provider_id(n) == Some(pid)) {
                c.worse(
                    Status::Fail,
                    format!(
                        "NodeClaim {} is Registered with providerID {pid}, which no Node has",
                        nc.metadata.name.as_deref().unwrap_or("")
                    ),
                    "a Node's provider ID changed after registration: delete the NodeClaim so Karpenter replaces it",
                );
            }
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{} Node(s) with aws:/// provider IDs of known instances",
            nodes.len()
        ));
    }
    if s.instances.is_none() {
        c.evidence
            .push("instances not checked in EC2: no AWS configuration".into());
    }
    c
}

fn ccm_initializes(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "ccm-initializes-nodes",
        "the AWS cloud controller manager runs with the cluster's ID and initializes new Nodes",
    );
    match &s.ccm_config {
        Ok(Some(cm)) => {
            let conf = cm
                .data
                .as_ref()
                .and_then(|d| d.values().find(|v| v.contains("KubernetesClusterID")))
                .cloned()
                .unwrap_or_default();
            let id = conf
                .lines()
                .find_map(|l| l.trim().strip_prefix("KubernetesClusterID"))
                .map(|v| v.trim().trim_start_matches('=').trim().trim_matches('"'));
            match id {
                Some(id) if id == f.cluster => {
                    c = c.saw(format!("cloud config KubernetesClusterID = {id}"));
                }
                Some(id) => c.worse(
                    Status::Fail,
                    format!("cloud config KubernetesClusterID = {id}, but Karpenter's clusterName is {}", f.cluster),
                    "render and apply cloud/aws-cloud-controller-manager.yaml from the spec: the two must be equal",
                ),
                None => c.worse(
                    Status::Fail,
                    "ConfigMap kube-system/aws-cloud-controller-manager-config has no KubernetesClusterID".into(),
                    "without it the CCM needs the cluster tag on its own instance and exits otherwise: apply the rendered cloud config",
                ),
            }
        }
        Ok(None) => c.worse(
            Status::Warn,
            "no ConfigMap kube-system/aws-cloud-controller-manager-config (the CCM was not installed from the bundle)".into(),
            "apply cloud/aws-cloud-controller-manager.yaml (ORDER.md step 2)",
        ),
        Err(e) => c.worse(Status::Warn, e.clone(), "grant doctor get on configmaps in kube-system"),
    }
    let Ok(nodes) = &s.nodes else {
        return c;
    };
    for n in nodes {
        let tainted = n
            .spec
            .as_ref()
            .and_then(|sp| sp.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
        let a = age(s.now, created(&n.metadata));
        if tainted && a > f.grace {
            c.worse(
                Status::Fail,
                format!(
                    "Node {}: still has the {UNINITIALIZED} taint after {}",
                    name_of(&n.metadata),
                    secs(a)
                ),
                "the CCM is not running or cannot find the instance: check its pod and log, the cloud config's KubernetesClusterID and the instance's kubernetes.io/cluster/<name> tag",
            );
        }
    }
    c
}

fn cluster_id_tag(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "cluster-id-tag",
        "every Node's instance carries kubernetes.io/cluster/<cluster> (the CCM finds only those)",
    );
    let tag = format!("kubernetes.io/cluster/{}", f.cluster);
    let Some(found) = &s.instances else {
        return c.skip("no AWS configuration: instance tags not read");
    };
    let found = match found {
        Ok(f) => f,
        Err(e) => return c.skip(e.clone()),
    };
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    let mut tagged = 0;
    for n in nodes {
        let Some(id) = provider_id(n).and_then(instance_id) else {
            continue;
        };
        let Some(i) = found.get(id) else { continue };
        match i.tags.get(&tag).map(String::as_str) {
            Some("owned" | "shared") => tagged += 1,
            other => c.worse(
                Status::Fail,
                format!(
                    "Node {} (instance {id}): tag {tag} is {}",
                    name_of(&n.metadata),
                    other.map(|v| format!("{v:?}")).unwrap_or("missing".into())
                ),
                &format!("aws ec2 create-tags --resources {id} --tags Key={tag},Value=owned (iam/discovery.json: every Kubean-built instance)"),
            ),
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("{tagged} instance(s) tagged {tag}"));
    }
    c
}

fn claim_name(nc: &DynamicObject) -> String {
    format!(
        "NodeClaim {} (pool {})",
        nc.metadata.name.as_deref().unwrap_or(""),
        pool_of(nc.metadata.labels.as_ref()).unwrap_or("?")
    )
}

fn nodeclaims_registered(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "nodeclaims-registered",
        "no NodeClaim stuck Launched but not Registered (Karpenter gives up after 15 min)",
    );
    let Ok(claims) = &s.nodeclaims else {
        return c.skip("NodeClaims could not be listed");
    };
    let mut registered = 0;
    for nc in claims {
        if cond_true(nc, "Registered") {
            registered += 1;
            continue;
        }
        if !cond_true(nc, "Launched") {
            continue;
        }
        let a = age(s.now, cond_since(nc, "Launched").or(created(&nc.metadata)));
        let pid = nc.data["status"]["providerID"].as_str().unwrap_or("");
        let status = if a > f.grace {
            Status::Fail
        } else {
            Status::Warn
        };
        c.worse(
            status,
            format!(
                "{} launched {pid} {} ago and is not Registered (Karpenter deletes it at {REGISTRATION_TTL})",
                claim_name(nc),
                secs(a)
            ),
            "the instance could not join: read its console output (aws ec2 get-console-output); the usual causes are checked by join-store, join-token-valid, join-ca-hash, cluster-info-jws, bootstrap-rbac and api-port-from-nodes, or a userData the AMI cannot run (kubeadm on an EKS AMI, no NVIDIA runtime)",
        );
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{registered} NodeClaim(s) Registered, none waiting"
        ));
    }
    c
}

fn node_of_claim<'a>(s: &'a Snapshot, nc: &DynamicObject) -> Option<&'a Node> {
    let pid = nc.data["status"]["providerID"].as_str()?;
    s.nodes
        .as_ref()
        .ok()?
        .iter()
        .find(|n| provider_id(n) == Some(pid))
}

fn gpus(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .allocatable
        .as_ref()?
        .get("nvidia.com/gpu")
        .map(|q| q.0.clone())
        .filter(|q| q != "0")
}

fn nodeclaims_initialized(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "nodeclaims-initialized",
        "no NodeClaim stuck Registered but not Initialized (startup taints, extended resources)",
    );
    let Ok(claims) = &s.nodeclaims else {
        return c.skip("NodeClaims could not be listed");
    };
    let mut initialized = 0;
    for nc in claims {
        if cond_true(nc, "Initialized") {
            initialized += 1;
            continue;
        }
        if !cond_true(nc, "Registered") {
            continue;
        }
        let a = age(s.now, cond_since(nc, "Registered"));
        let status = if a > f.grace {
            Status::Fail
        } else {
            Status::Warn
        };
        let mut why = Vec::new();
        if let Some(n) = node_of_claim(s, nc) {
            let taints = node_taints(n);
            if !taints.is_empty() {
                why.push(format!("Node taints {taints:?}"));
            }
            let pool = pool_of(nc.metadata.labels.as_ref()).unwrap_or("");
            if f.gpu_pools.iter().any(|p| p == pool) && gpus(n).is_none() {
                why.push("the Node advertises no nvidia.com/gpu".into());
            }
        }
        c.worse(
            status,
            format!(
                "{} Registered {} ago, not Initialized: {}",
                claim_name(nc),
                secs(a),
                why.join("; ")
            ),
            "a GPU node initializes once the device plugin advertises nvidia.com/gpu (device-plugin-on-gpu-nodes); otherwise a startup taint nobody removes or a Node not Ready",
        );
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("{initialized} NodeClaim(s) Initialized"));
    }
    c
}

fn gpu_nodes<'a>(s: &'a Snapshot, f: &Facts) -> Vec<&'a Node> {
    s.nodes
        .as_ref()
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| {
                    pool_of(n.metadata.labels.as_ref())
                        .is_some_and(|p| f.gpu_pools.iter().any(|g| g == p))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn gpu_advertised(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "gpu-advertised",
        "every GPU-pool Node advertises nvidia.com/gpu — checklist: kubectl describe <gpu-node> | grep nvidia.com/gpu",
    );
    if f.gpu_pools.is_empty() {
        return c.skip("the spec has no GPU pool");
    }
    let nodes = gpu_nodes(s, f);
    for n in &nodes {
        let a = age(s.now, created(&n.metadata));
        if gpus(n).is_none() {
            c.worse(
                if a > f.grace { Status::Fail } else { Status::Warn },
                format!(
                    "Node {} ({} old): status.allocatable has no nvidia.com/gpu",
                    name_of(&n.metadata),
                    secs(a)
                ),
                "the device plugin must run on the node (device-plugin-on-gpu-nodes) and containerd must use the NVIDIA runtime (the GPU userData checks it at boot)",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{} GPU Node(s) advertise nvidia.com/gpu",
            nodes.len()
        ));
    }
    c
}

fn is_plugin(p: &Pod) -> bool {
    p.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("nvidia-device-plugin"))
}

fn device_plugin(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "device-plugin-on-gpu-nodes",
        "the NVIDIA device plugin runs on every GPU-pool Node",
    );
    if f.gpu_pools.is_empty() {
        return c.skip("the spec has no GPU pool");
    }
    let Ok(pods) = &s.pods else {
        return c.skip("Pods could not be listed");
    };
    let nodes = gpu_nodes(s, f);
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let plugin = pods.iter().find(|p| {
            is_plugin(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)
        });
        let running = plugin
            .is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if !running {
            let a = age(s.now, created(&n.metadata));
            c.worse(
                if a > f.grace { Status::Fail } else { Status::Warn },
                match plugin {
                    None => format!(
                        "Node {name} (taints {:?}): no nvidia-device-plugin pod on it",
                        node_taints(n)
                    ),
                    Some(p) => format!(
                        "Node {name}: pod {} is {}",
                        name_of(&p.metadata),
                        p.status
                            .as_ref()
                            .and_then(|s| s.phase.clone())
                            .unwrap_or_default()
                    ),
                },
                "the DaemonSet must tolerate exactly the GPU pools' taints: apply gpu/nvidia-device-plugin.yaml as rendered (a hand-edited toleration list is the usual cause)",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "a Running device-plugin pod on each of {} GPU Node(s)",
            nodes.len()
        ));
    }
    c
}

/// The token the nodes join with: the store's, or the static one.
fn join_token_id(s: &Snapshot, f: &Facts) -> Option<String> {
    match &s.store {
        Some(Ok(Some(cfg))) => Some(cfg.token.id().to_owned()),
        Some(_) => None,
        None => f.static_token_id.clone(),
    }
}

fn join_store(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "join-store",
        "the join store holds a join configuration whose token has not expired",
    );
    let Some(read) = &s.store else {
        return c
            .skip("join mode static: the token is in the userData (join-token-valid checks it)");
    };
    let store = f
        .store
        .as_ref()
        .map(|(k, n)| format!("{k} {n}"))
        .unwrap_or_default();
    match read {
        Err(e) => c.worse(
            Status::Fail,
            e.clone(),
            "give doctor's identity read access to the store (doctor --permissions) and check the region",
        ),
        Ok(None) => c.worse(
            Status::Fail,
            format!("{store}: not found"),
            "the rotator publishes it: apply rotator/ and check its log, or run kubean-karpenter token create --publish",
        ),
        Ok(Some(cfg)) => {
            let left = cfg.expiration.duration_since(s.now);
            if left.is_negative() || left.is_zero() {
                c.worse(
                    Status::Fail,
                    format!(
                        "{store}: KK_EXPIRATION={} is in the past",
                        crate::token::rfc3339(cfg.expiration)
                    ),
                    "nodes booting now cannot join: check that the rotator runs (its /metrics and log), or kubean-karpenter token create --publish",
                );
            } else {
                c = c.saw(format!(
                    "{store}: token {} valid until {} ({} left)",
                    cfg.token.id(),
                    crate::token::rfc3339(cfg.expiration),
                    secs(Duration::from_secs(left.as_secs().max(0) as u64))
                ));
            }
        }
    }
    c
}

fn join_token_valid(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "join-token-valid",
        "the join token exists in the cluster, authenticates and has not expired",
    );
    let Some(id) = join_token_id(s, f) else {
        return c.skip("no join token to check (see join-store)");
    };
    let Ok(tokens) = &s.tokens else {
        return c.skip("bootstrap-token Secrets could not be listed");
    };
    match tokens.iter().find(|t| t.id == id) {
        None => c.worse(
            Status::Fail,
            format!("no Secret kube-system/bootstrap-token-{id}"),
            "the token was deleted or never created: kubean-karpenter token create --publish (the rotator does it on its next pass)",
        ),
        Some(t) if t.is_expired(s.now) => c.worse(
            Status::Fail,
            format!(
                "bootstrap-token-{id} expired at {}",
                t.expiration.map(crate::token::rfc3339).unwrap_or_default()
            ),
            "kubean-karpenter token create --publish; check the rotator",
        ),
        Some(t) if !t.can_authenticate(s.now) => c.worse(
            Status::Fail,
            format!("bootstrap-token-{id} lacks usage-bootstrap-authentication"),
            "recreate the token with kubean-karpenter token create",
        ),
        Some(t) => {
            c = c.saw(format!(
                "bootstrap-token-{id}: usages {:?}, groups {:?}, expires {}",
                t.usages,
                t.extra_groups,
                t.expiration
                    .map(crate::token::rfc3339)
                    .unwrap_or("never".into())
            ));
        }
    }
    c
}

fn join_ca_hash(s: &Snapshot) -> Check {
    let mut c = check(
        "join-ca-hash",
        "the store's CA hash is the cluster CA's (kubeadm refuses discovery otherwise)",
    );
    let Some(Ok(Some(cfg))) = &s.store else {
        return c.skip("no join configuration in a store (see join-store)");
    };
    let cluster = match &s.cluster_ca_hash {
        Ok(h) => h,
        Err(e) => return c.skip(format!("the cluster CA could not be read: {e}")),
    };
    if &cfg.ca_cert_hash == cluster {
        c = c.saw(format!(
            "KK_CA_CERT_HASH = kube-system/kube-root-ca.crt's hash = {cluster}"
        ));
    } else {
        c.worse(
            Status::Fail,
            format!(
                "KK_CA_CERT_HASH={} but kube-system/kube-root-ca.crt hashes to {cluster}",
                cfg.ca_cert_hash
            ),
            "republish with the cluster's CA: kubean-karpenter token create --publish (it computes the hash from the kubeconfig's CA), and fix spec.caBundle if it names another CA",
        );
    }
    c
}

fn cluster_info_jws(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "cluster-info-jws",
        "kube-public/cluster-info carries a JWS signature for the join token",
    );
    let Some(id) = join_token_id(s, f) else {
        return c.skip("no join token to check (see join-store)");
    };
    match &s.cluster_info {
        Err(e) => c.skip(e.clone()),
        Ok(None) => {
            c.worse(
                Status::Fail,
                "no ConfigMap kube-public/cluster-info".into(),
                "kubeadm init phase bootstrap-token recreates it",
            );
            c
        }
        Ok(Some(cm)) => {
            let key = format!("jws-kubeconfig-{id}");
            let has = cm.data.as_ref().is_some_and(|d| d.contains_key(&key));
            if has {
                c.saw(format!("cluster-info has {key}"))
            } else {
                let present: Vec<&String> = cm
                    .data
                    .as_ref()
                    .map(|d| d.keys().filter(|k| k.starts_with("jws-")).collect())
                    .unwrap_or_default();
                c.worse(
                    Status::Fail,
                    format!("cluster-info has no {key} (it has {present:?})"),
                    "the token needs usage-bootstrap-signing and kube-controller-manager must run the bootstrapsigner controller (--controllers=*,bootstrapsigner,tokencleaner)",
                );
                c
            }
        }
    }
}

fn grants(
    s: &super::gather::Rbac,
    role: &str,
    namespace: Option<&str>,
    groups: &[String],
    user: Option<&str>,
) -> Option<String> {
    s.bindings
        .iter()
        .find(|b| {
            b.role == role
                && b.namespace.as_deref() == namespace
                && b.subjects.iter().any(|sub| {
                    (sub.kind == "Group" && groups.contains(&sub.name))
                        || (sub.kind == "User" && Some(sub.name.as_str()) == user)
                })
        })
        .map(|b| b.name.clone())
}

fn bootstrap_rbac(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "bootstrap-rbac",
        "the RBAC a kubeadm join needs (kubeadm init's roles, bound to the token's groups)",
    );
    let Ok(rbac) = &s.rbac else {
        return c.skip("RBAC objects could not be listed");
    };
    let mut groups = vec!["system:bootstrappers".to_owned()];
    if let (Some(id), Ok(tokens)) = (join_token_id(s, f), &s.tokens)
        && let Some(t) = tokens.iter().find(|t| t.id == id)
    {
        groups.extend(t.extra_groups.iter().cloned());
    }
    // What `kubeadm join` does as the bootstrap token (kubernetes/kubernetes
    // cmd/kubeadm/app/phases/bootstraptoken/{clusterinfo,node}, v1.36): read cluster-info
    // anonymously, read kubeadm-config and kubelet-config, get its own Node, create a CSR.
    let needs: [(&str, &str, Option<&str>, bool); 5] = [
        ("ClusterRole", "system:node-bootstrapper", None, false),
        ("ClusterRole", "kubeadm:get-nodes", None, false),
        (
            "Role",
            "kubeadm:nodes-kubeadm-config",
            Some("kube-system"),
            false,
        ),
        ("Role", "kubeadm:kubelet-config", Some("kube-system"), false),
        (
            "Role",
            "kubeadm:bootstrap-signer-clusterinfo",
            Some("kube-public"),
            true,
        ),
    ];
    for (kind, role, ns, anonymous) in needs {
        let key = match ns {
            Some(ns) => format!("{kind}/{ns}/{role}"),
            None => format!("{kind}/{role}"),
        };
        if !rbac.roles.contains(&key) {
            c.worse(
                Status::Fail,
                format!("{key} is missing"),
                "kubeadm init creates it: re-run `kubeadm init phase bootstrap-token` (and `upload-config all`) on a control-plane node",
            );
            continue;
        }
        let user = anonymous.then_some("system:anonymous");
        let subjects: &[String] = if anonymous { &[] } else { &groups };
        match grants(rbac, role, ns, subjects, user) {
            Some(b) => c.evidence.push(format!("{key} bound by {b}")),
            None => c.worse(
                Status::Fail,
                format!(
                    "{key} is bound to none of {}",
                    if anonymous {
                        "system:anonymous".to_owned()
                    } else {
                        format!("{groups:?}")
                    }
                ),
                "apply rotator/join-rbac.yaml (binds our token group), or re-run kubeadm init phase bootstrap-token",
            ),
        }
    }
    c
}

fn pass_role(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "controller-pass-role",
        "the controller's policy allows iam:PassRole on the node role (evaluated here: moto and IAM offer no simulator we rely on)",
    );
    let (source, policies) = match &s.controller_policies {
        Some(Ok(p)) => (
            format!("role {} (live)", f.controller_role.as_deref().unwrap_or("")),
            p.clone(),
        ),
        Some(Err(e)) => return c.skip(e.clone()),
        None => match &f.rendered_controller_policy {
            Some(p) => (
                "iam/controller-policy.json (rendered; pass --controller-role to read the live one)"
                    .to_owned(),
                vec![("controller-policy.json".to_owned(), p.clone())],
            ),
            None => return c.skip("no controller policy: pass --controller-role"),
        },
    };
    match evaluate(&policies, "iam:PassRole", &f.node_role_arn) {
        Verdict::Allowed {
            statement,
            conditional,
        } => {
            c = c.saw(format!(
                "{source}: iam:PassRole on {} allowed by {statement}{}",
                f.node_role_arn,
                if conditional { " (under its conditions)" } else { "" }
            ));
        }
        Verdict::Denied { statement } => c.worse(
            Status::Fail,
            format!("{source}: iam:PassRole on {} denied by {statement}", f.node_role_arn),
            "remove the Deny or scope it off the node role",
        ),
        Verdict::NotAllowed => c.worse(
            Status::Fail,
            format!(
                "{source}: no statement of {} policies allows iam:PassRole on {}",
                policies.len(),
                f.node_role_arn
            ),
            "attach iam/controller-policy.json as rendered (statement AllowPassingInstanceRole): without it every launch fails UnauthorizedOperation",
        ),
    }
    c
}

fn admits(rule: &super::gather::Ingress, port: u16) -> bool {
    rule.protocol == "-1"
        || (rule.protocol == "tcp"
            && rule.from_port.unwrap_or(0) <= port as i32
            && rule.to_port.unwrap_or(65535) >= port as i32)
}

fn api_port(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "api-port-from-nodes",
        "the control plane's security group admits the API port from the node security group",
    );
    let (Some(cp), Some(nodes)) = (&s.control_plane_sg, &s.node_sgs) else {
        return c.skip("no AWS configuration: security groups not read");
    };
    let cp = match cp {
        Ok(g) => g,
        Err(e) => {
            c.worse(
                Status::Fail,
                e.clone(),
                "set aws.controlPlaneSecurityGroupID to the control-plane instances' group",
            );
            return c;
        }
    };
    let node_ids: Vec<String> = match nodes {
        Ok(g) => g.iter().map(|g| g.id.clone()).collect(),
        Err(e) => return c.skip(e.clone()),
    };
    let port = f.api_port;
    let by_group = cp.ingress.iter().filter(|r| admits(r, port)).find_map(|r| {
        r.groups
            .iter()
            .find(|g| node_ids.contains(g))
            .map(|g| format!("{} admits TCP {port} from {g}", cp.id))
    });
    let by_cidr = cp.ingress.iter().filter(|r| admits(r, port)).find_map(|r| {
        r.cidrs
            .first()
            .map(|cidr| format!("{} admits TCP {port} from {cidr}", cp.id))
    });
    match (by_group, by_cidr) {
        (Some(e), _) => c = c.saw(e),
        (None, Some(e)) => {
            c = c.saw(format!(
                "{e} (a CIDR rule: make sure it covers the node subnets)"
            ))
        }
        (None, None) => c.worse(
            Status::Fail,
            format!(
                "{} has no ingress rule for TCP {port} from the node security group(s) {node_ids:?}",
                cp.id
            ),
            &format!(
                "aws ec2 authorize-security-group-ingress --group-id {} --protocol tcp --port {port} --source-group <node security group> (iam/discovery.json)",
                cp.id
            ),
        ),
    }
    c
}
