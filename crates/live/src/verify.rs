//! `verify`: the seed's step 8 as a proof. For each pool it creates its own copy of the
//! rendered verification workload (the CPU pool's inflate Deployment, the GPU pool's CUDA
//! vectoradd Pod), labelled with this run's id, and follows pod Pending → NodeClaim created →
//! Launched → Registered → Initialized → pod Running (→ GPU: `nvidia.com/gpu` advertised,
//! vectoradd logs "Test PASSED"), timing each phase. A phase that does not happen within
//! its timeout stops the pool with the phase's likely causes and, when a doctor is given, the
//! failing doctor checks. Everything it created is deleted at the end, on failure and on
//! Ctrl-C.
//!
//! What "passed" means for the CUDA Pod is a choice ([`CudaProof`]): on a real GPU node the
//! sample exits with "Test PASSED" in its log; on a fake runtime (the lab's) it never runs
//! code, so `scheduled` accepts a Running (or Succeeded) pod on a Node that advertises the GPU
//! it asked for, and says so in the result.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

mod interruption;
pub use interruption::Reclaim;

pub const RUN_LABEL: &str = "kubean-karpenter.io/verify-run";

/// What proves the CUDA pod passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaProof {
    /// The pod Succeeded and its log says "Test PASSED" (a real GPU).
    Logs,
    /// The pod is Running or Succeeded on a Node advertising `nvidia.com/gpu` (fake runtimes).
    Scheduled,
}

/// One pool to prove: its name and the rendered workload (`verify/<pool>.yaml`).
#[derive(Debug, Clone)]
pub struct PoolTarget {
    pub pool: String,
    pub gpu: bool,
    pub workload: Value,
}

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub namespace: String,
    pub replicas: i32,
    pub phase_timeout: Duration,
    pub cuda: CudaProof,
    pub run_id: String,
    /// `--interruption`: the CPU pools' workloads ask for spot capacity (the node verify then
    /// reclaims with a spot warning).
    pub interruption: bool,
}

/// A phase that happened, and when (since the pool's workload was created).
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub at: Duration,
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Passed {
        note: Option<String>,
    },
    Stalled {
        phase: String,
        after: Duration,
        causes: Vec<String>,
        evidence: Vec<String>,
    },
    Error(String),
}

#[derive(Debug, Clone)]
pub struct PoolResult {
    pub pool: String,
    pub phases: Vec<Phase>,
    pub outcome: Outcome,
}

impl PoolResult {
    pub fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Passed { .. })
    }

    pub fn to_json(&self) -> Value {
        let mut prev = Duration::ZERO;
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|p| {
                let v = json!({"phase": p.name, "atSeconds": round(p.at), "tookSeconds": round(p.at.saturating_sub(prev))});
                prev = p.at;
                v
            })
            .collect();
        let outcome = match &self.outcome {
            Outcome::Passed { note } => json!({"result": "passed", "note": note}),
            Outcome::Stalled {
                phase,
                after,
                causes,
                evidence,
            } => {
                json!({"result": "stalled", "phase": phase, "afterSeconds": round(*after), "likelyCauses": causes, "evidence": evidence})
            }
            Outcome::Error(e) => json!({"result": "error", "message": e}),
        };
        json!({"pool": self.pool, "phases": phases, "outcome": outcome})
    }
}

fn round(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// The phases, in order, and their likely causes when they stall.
pub const PHASES: &[(&str, &str)] = &[
    (
        "pods Pending (Unschedulable)",
        "the workload was not created or its pods schedule nowhere: check the namespace, quotas and admission",
    ),
    (
        "NodeClaim created",
        "Karpenter does not act on the pending pods: it is not running, the EC2NodeClass is not Ready (an IAM refusal such as iam:PassRole or ec2:CreateFleet in its ValidationSucceeded condition), the NodePool's limits are reached, no instance type fits the requirements, or the pods do not tolerate the pool's taints",
    ),
    (
        "NodeClaim Launched",
        "EC2 refused the launch: iam:PassRole on the node role, capacity (InsufficientInstanceCapacity), subnet or security-group discovery tags, the AMI",
    ),
    (
        "NodeClaim Registered",
        "the instance runs but never joined: an expired or missing token in the join store, a CA hash that is not the cluster's, cluster-info without a signature for the token, the bootstrap RBAC, the API port closed from the node security group, or a userData the AMI cannot run (kubeadm on an EKS AMI, no NVIDIA container runtime); read the instance's console output",
    ),
    (
        "NodeClaim Initialized",
        "the Node joined but is not ready for pods: the cloud controller manager did not initialize it (uninitialized taint, cluster ID tag), or a GPU Node advertises no nvidia.com/gpu (device plugin not running there: its tolerations)",
    ),
    (
        "pods Running",
        "the pods were bound but do not run: image pull, container runtime, or the pods went to another node",
    ),
    (
        "nvidia.com/gpu advertised",
        "the device plugin is not running on the GPU node or containerd does not use the NVIDIA runtime",
    ),
    (
        "CUDA vectoradd Test PASSED",
        "the CUDA sample ran but did not pass: driver/CUDA version mismatch (cudaVersion vs the AMI's driver), or no GPU visible in the container",
    ),
];

pub fn causes_of(phase: &str) -> Vec<String> {
    PHASES
        .iter()
        .chain(interruption::PHASES)
        .filter(|(p, _)| *p == phase)
        .map(|(_, c)| (*c).to_owned())
        .collect()
}

fn api(client: &Client, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn cond_true(obj: &DynamicObject, kind: &str) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn claim_conditions(obj: &DynamicObject) -> String {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}{}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["message"]
                    .as_str()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The object verify creates for a pool: the rendered workload renamed `kk-verify-<pool>`,
/// labelled with the run id (Deployments get their own selector so they never adopt the
/// rendered inflate pods).
pub fn workload_for(target: &PoolTarget, options: &VerifyOptions) -> Value {
    let mut w = target.workload.clone();
    let name = format!("kk-verify-{}", target.pool);
    w["metadata"] = json!({
        "name": name,
        "namespace": options.namespace,
        "labels": {RUN_LABEL: options.run_id, kk_spec::names::MANAGED_BY.0: kk_spec::names::MANAGED_BY.1},
    });
    if w["kind"] == "Deployment" {
        w["spec"]["replicas"] = json!(options.replicas);
        w["spec"]["selector"] = json!({"matchLabels": {"app": name}});
        w["spec"]["template"]["metadata"]["labels"] =
            json!({"app": name, RUN_LABEL: options.run_id});
        if options.interruption && !target.gpu {
            w["spec"]["template"]["spec"]["nodeSelector"]["karpenter.sh/capacity-type"] =
                json!("spot");
        }
    }
    w
}

struct Follower<'a> {
    client: &'a Client,
    started: Instant,
    phases: Vec<Phase>,
    timeout: Duration,
    progress: &'a (dyn Fn(&str, &str, Duration) + Sync),
    waiting: &'a (dyn Fn(&str, &str, Duration) + Sync),
    pool: String,
}

enum Wait<T> {
    Done(T),
    Stalled(Vec<String>),
}

impl Follower<'_> {
    /// A phase that happened now (an action of verify's own).
    fn record(&mut self, name: &str) {
        let at = self.started.elapsed();
        self.phases.push(Phase {
            name: name.to_owned(),
            at,
        });
        (self.progress)(&self.pool, name, at);
    }

    /// Polls `probe` every second until it returns `Ok(Some)`; `Ok(None)` keeps waiting, and
    /// the last evidence it left is reported if the phase stalls.
    async fn phase<T>(
        &mut self,
        name: &str,
        mut probe: impl AsyncFnMut(&mut Vec<String>) -> Result<Option<T>, kube::Error>,
    ) -> Result<Wait<T>, kube::Error> {
        let phase_start = Instant::now();
        let mut evidence = Vec::new();
        loop {
            evidence.clear();
            if let Some(v) = probe(&mut evidence).await? {
                let at = self.started.elapsed();
                self.phases.push(Phase {
                    name: name.to_owned(),
                    at,
                });
                (self.progress)(&self.pool, name, at);
                return Ok(Wait::Done(v));
            }
            if phase_start.elapsed() > self.timeout {
                return Ok(Wait::Stalled(evidence));
            }
            (self.waiting)(&self.pool, name, phase_start.elapsed());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn is_running(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded")
    )
}

fn unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

fn pod_summary(p: &Pod) -> String {
    let st = p.status.as_ref();
    let scheduled = st
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| {
            format!(
                " PodScheduled={} {}",
                c.status,
                c.message.clone().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    format!(
        "Pod {}: {}{}",
        p.metadata.name.as_deref().unwrap_or(""),
        st.and_then(|s| s.phase.clone()).unwrap_or_default(),
        scheduled
    )
}

/// Proves one pool; `progress(pool, phase, at)` is called as each phase happens, and
/// `waiting(pool, phase, for)` about once a second while a phase has not happened yet. With
/// `reclaim` (a CPU pool), the node verify launched is then reclaimed with a spot warning.
pub async fn verify_pool(
    client: &Client,
    target: &PoolTarget,
    options: &VerifyOptions,
    reclaim: Option<&Reclaim<'_>>,
    progress: &(dyn Fn(&str, &str, Duration) + Sync),
    waiting: &(dyn Fn(&str, &str, Duration) + Sync),
) -> PoolResult {
    let mut f = Follower {
        client,
        started: Instant::now(),
        phases: Vec::new(),
        timeout: options.phase_timeout,
        progress,
        waiting,
        pool: target.pool.clone(),
    };
    let outcome = match follow(&mut f, target, options, reclaim).await {
        Ok(o) => o,
        Err(e) => Outcome::Error(crate::kube_error::error_chain(&e)),
    };
    PoolResult {
        pool: target.pool.clone(),
        phases: f.phases,
        outcome,
    }
}

fn stalled(f: &Follower, phase: &str, evidence: Vec<String>) -> Outcome {
    Outcome::Stalled {
        phase: phase.to_owned(),
        after: f.started.elapsed(),
        causes: causes_of(phase),
        evidence,
    }
}

macro_rules! step {
    ($f:expr, $name:expr, $probe:expr) => {
        match $f.phase($name, $probe).await? {
            Wait::Done(v) => v,
            Wait::Stalled(evidence) => return Ok(stalled($f, $name, evidence)),
        }
    };
}

/// This run's pods for `pool` (the lone Pod or the Deployment's), each noted in `ev`.
async fn run_pods(
    pods: &Api<Pod>,
    selector: &ListParams,
    pool: &str,
    ev: &mut Vec<String>,
) -> Result<Vec<Pod>, kube::Error> {
    let mine = |p: &Pod| {
        p.metadata.name.as_deref().is_some_and(|n| {
            n == format!("kk-verify-{pool}") || n.starts_with(&format!("kk-verify-{pool}-"))
        })
    };
    let list: Vec<Pod> = pods
        .list(selector)
        .await?
        .items
        .into_iter()
        .filter(mine)
        .collect();
    ev.extend(list.iter().map(pod_summary));
    Ok(list)
}

async fn follow(
    f: &mut Follower<'_>,
    target: &PoolTarget,
    options: &VerifyOptions,
    reclaim: Option<&Reclaim<'_>>,
) -> Result<Outcome, kube::Error> {
    let client = f.client.clone();
    let ns = options.namespace.clone();
    let workload = workload_for(target, options);
    let created_at = jiff::Timestamp::now();
    if workload["kind"] == "Deployment" {
        let d: Deployment = serde_json::from_value(workload).map_err(kube::Error::SerdeError)?;
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &d)
            .await?;
    } else {
        let p: Pod = serde_json::from_value(workload).map_err(kube::Error::SerdeError)?;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &p)
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = ListParams::default().labels(&format!("{RUN_LABEL}={}", options.run_id));
    let want = if target.gpu {
        1
    } else {
        options.replicas.max(1) as usize
    };
    let existing_capacity = step!(f, "pods Pending (Unschedulable)", async |ev: &mut Vec<
        String,
    >| {
        let list = run_pods(&pods, &selector, &target.pool, ev).await?;
        if list.len() < want {
            return Ok(None);
        }
        if list.iter().all(unschedulable) {
            return Ok(Some(false));
        }
        // Room on an existing node: no scale-up to prove.
        Ok(list.iter().all(is_running).then_some(true))
    });
    if existing_capacity && reclaim.is_some() {
        return Ok(Outcome::Error(format!(
            "--interruption refused: the pods fit on existing {} capacity, so verify launched no node, and it reclaims only a node it launched; nothing was sent (scale the pool to zero first)",
            target.pool
        )));
    }
    if existing_capacity {
        return Ok(Outcome::Passed {
            note: Some(format!(
                "the pods fit on existing {} capacity: no scale-up was needed (scale the pool to zero to prove one)",
                target.pool
            )),
        });
    }
    let claims = api(&client, "karpenter.sh", "NodeClaim");
    let pool = target.pool.clone();
    let claim_name: String = step!(f, "NodeClaim created", async |_ev: &mut Vec<String>| {
        let list = claims.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("karpenter.sh/nodepool"))
                    == Some(&pool)
                    && c.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0.as_second() >= created_at.as_second() - 1)
            })
            .filter_map(|c| c.metadata.name)
            .min())
    });
    let mut provider_id = String::new();
    for cond in ["Launched", "Registered", "Initialized"] {
        let phase = format!("NodeClaim {cond}");
        let pid: String = step!(f, &phase, async |ev: &mut Vec<String>| {
            let Some(c) = claims.get_opt(&claim_name).await? else {
                ev.push(format!(
                    "NodeClaim {claim_name} is gone (Karpenter deleted it)"
                ));
                return Ok(None);
            };
            ev.push(format!("NodeClaim {claim_name}: {}", claim_conditions(&c)));
            let pid = c.data["status"]["providerID"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            Ok(cond_true(&c, cond).then_some(pid))
        });
        provider_id = pid;
    }
    let node_name: String = step!(f, "pods Running", async |ev: &mut Vec<String>| {
        let list = run_pods(&pods, &selector, &target.pool, ev).await?;
        if list.len() >= want && list.iter().all(is_running) {
            return Ok(Some(
                list[0]
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
            ));
        }
        Ok(None)
    });
    if !target.gpu {
        if let Some(reclaim) = reclaim {
            return interruption::reclaim(
                f,
                reclaim,
                &claim_name,
                &pods,
                &selector,
                &options.run_id,
            )
            .await;
        }
        return Ok(Outcome::Passed { note: None });
    }
    let nodes: Api<Node> = Api::all(client.clone());
    step!(f, "nvidia.com/gpu advertised", async |ev: &mut Vec<
        String,
    >| {
        let n = nodes.get(&node_name).await?;
        let gpus = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("nvidia.com/gpu"))
            .map(|q| q.0.clone());
        ev.push(format!(
            "Node {node_name} ({provider_id}): allocatable nvidia.com/gpu = {gpus:?}"
        ));
        Ok(gpus.filter(|g| g != "0").map(|_| ()))
    });
    match options.cuda {
        CudaProof::Scheduled => Ok(Outcome::Passed {
            note: Some(
                "CUDA log not checked (--cuda-proof scheduled): passed means the vectoradd pod ran on a Node advertising nvidia.com/gpu; a fake runtime runs no CUDA code"
                    .into(),
            ),
        }),
        CudaProof::Logs => {
            let name = format!("kk-verify-{}", target.pool);
            step!(f, "CUDA vectoradd Test PASSED", async |ev: &mut Vec<String>| {
                let p = pods.get(&name).await?;
                let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                let log = pods.logs(&name, &LogParams::default()).await.unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                ev.push(format!("Pod {name}: {phase}; log tail {tail:?}"));
                Ok((phase == "Succeeded" && log.contains("Test PASSED")).then_some(()))
            });
            Ok(Outcome::Passed { note: None })
        }
    }
}

/// Deletes everything this run created (by its label); returns what it deleted.
pub async fn cleanup(client: &Client, namespace: &str, run_id: &str) -> Vec<String> {
    let selector = ListParams::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let mut deleted = Vec::new();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = deployments.list(&selector).await {
        for d in list {
            let name = d.metadata.name.unwrap_or_default();
            // Scale to zero first and delete in the foreground: a ReplicaSet not yet collected
            // would otherwise replace the pods deleted below.
            let zero = json!({"spec": {"replicas": 0}});
            let _ = deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&zero))
                .await;
            if deployments
                .delete(&name, &DeleteParams::foreground())
                .await
                .is_ok()
            {
                deleted.push(format!("Deployment {namespace}/{name}"));
            }
        }
    }
    // A ReplicaSet that has not yet seen the scale to zero replaces a pod deleted below, and the
    // replacement outlives this run (seen on a loaded lab): wait, up to 30 s, until each of the
    // run's ReplicaSets wants no pod or is being deleted (then it creates none).
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let Ok(list) = sets.list(&selector).await else {
            break;
        };
        let settled = list.items.iter().all(|rs| {
            rs.metadata.deletion_timestamp.is_some()
                || rs.spec.as_ref().and_then(|s| s.replicas) == Some(0)
        });
        if settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = pods.list(&selector).await {
        for p in list {
            let name = p.metadata.name.unwrap_or_default();
            if pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
                .is_ok()
            {
                deleted.push(format!("Pod {namespace}/{name}"));
            }
        }
    }
    deleted
}

/// A fresh run id: seconds since the epoch and a random suffix.
pub fn new_run_id() -> String {
    let mut b = [0u8; 3];
    let _ = getrandom::fill(&mut b);
    format!(
        "{}-{:02x}{:02x}{:02x}",
        jiff::Timestamp::now().as_second(),
        b[0],
        b[1],
        b[2]
    )
}
