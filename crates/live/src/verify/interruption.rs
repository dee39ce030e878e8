//! `verify --interruption`: after a CPU pool's scale-up is proven, one synthetic spot
//! interruption warning for the node verify launched, sent to the cluster's queue with
//! `SendMessage` (EventBridge refuses `aws.*` sources in `PutEvents`), then the reclaim
//! followed phase by phase as the scale-up was: the NodeClaim deleted, the Node tainted
//! `karpenter.sh/disrupted`, a replacement launched and registered, verify's pods Running on
//! it, the old NodeClaim gone once Karpenter terminated its instance.
//!
//! Only a node verify created is ever named: a warning makes Karpenter drain the node and
//! terminate the instance itself, and mark its (instance type, zone, spot) offering
//! unavailable for the whole cluster for 3 minutes.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::{Follower, Outcome, Wait, api, claim_conditions, cond_true, is_running, stalled};
use crate::aws_error::AwsCallError;

/// Where the warning goes, and the cluster it is about.
pub struct Reclaim<'a> {
    pub sqs: aws_sdk_sqs::Client,
    /// The queue's name (`settings.interruptionQueue`).
    pub queue: String,
    pub cluster: &'a kk_spec::ElasticCluster,
}

impl<'a> Reclaim<'a> {
    pub fn new(
        sdk: &aws_config::SdkConfig,
        queue: String,
        cluster: &'a kk_spec::ElasticCluster,
    ) -> Self {
        Reclaim {
            sqs: aws_sdk_sqs::Client::new(sdk),
            queue,
            cluster,
        }
    }
}

/// The reclaim's phases, in order, and their likely causes when they stall.
pub const PHASES: &[(&str, &str)] = &[
    (
        "spot warning sent (sqs:SendMessage)",
        "the queue does not exist or refuses this identity's sqs:SendMessage (its policy); run doctor's interruption checks",
    ),
    (
        "NodeClaim deleted (interruption)",
        "Karpenter does not read the queue: INTERRUPTION_QUEUE is not this queue's name (doctor interruption-setting), or its role lacks sqs:ReceiveMessage/sqs:DeleteMessage on it (iam/controller-policy.json); Karpenter's log says which",
    ),
    (
        "Node tainted karpenter.sh/disrupted",
        "Karpenter's termination controller has not started the drain: its log, and the NodeClaim's finalizer",
    ),
    (
        "replacement NodeClaim Launched",
        "no other offering could be launched: the reclaimed spot offering is blocked for 3 minutes, so the pool needs another instance type or zone (or on-demand), and room under its limits",
    ),
    (
        "replacement NodeClaim Registered",
        "the replacement runs but never joined: the same causes as the scale-up's NodeClaim Registered phase",
    ),
    (
        "pods Running on the replacement",
        "the evicted pods were not rescheduled: a PodDisruptionBudget blocking the drain, or the replacement not Initialized",
    ),
    (
        "old NodeClaim gone (instance terminated)",
        "the drain is blocked (a PodDisruptionBudget, a do-not-disrupt pod) or the instance was not terminated (ec2:TerminateInstances refused)",
    ),
];

fn provider_id(c: &kube::api::DynamicObject) -> String {
    c.data["status"]["providerID"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn label<'o>(c: &'o kube::api::DynamicObject, key: &str) -> &'o str {
    c.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or("")
}

/// Sends the warning; the message id.
async fn send(reclaim: &Reclaim<'_>, instance: &str, id: &str) -> Result<String, AwsCallError> {
    let url = crate::aws_read::queue_url(&reclaim.sqs, &reclaim.queue)
        .await?
        .ok_or_else(|| AwsCallError::Refused {
            call: "sqs:GetQueueUrl".into(),
            code: "QueueDoesNotExist".into(),
            message: format!("no queue {}", reclaim.queue),
        })?;
    let time = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let body: Value = kk_spec::interruption::spot_warning(reclaim.cluster, instance, id, &time);
    let out = reclaim
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(body.to_string())
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("sqs:SendMessage", &e))?;
    Ok(out.message_id().unwrap_or_default().to_owned())
}

macro_rules! phase {
    ($f:expr, $name:expr, $probe:expr) => {
        match $f.phase($name, $probe).await? {
            Wait::Done(v) => v,
            Wait::Stalled(evidence) => return Ok(stalled($f, $name, evidence)),
        }
    };
}

/// Reclaims NodeClaim `claim_name`, which verify launched and whose Node runs all of the
/// pods `selector` finds (checked here: otherwise nothing is sent).
pub(super) async fn reclaim(
    f: &mut Follower<'_>,
    reclaim: &Reclaim<'_>,
    claim_name: &str,
    pods: &Api<Pod>,
    selector: &ListParams,
    run_id: &str,
) -> Result<Outcome, kube::Error> {
    let claims = api(f.client, "karpenter.sh", "NodeClaim");
    let nodes: Api<Node> = Api::all(f.client.clone());
    let Some(claim) = claims.get_opt(claim_name).await? else {
        return Ok(Outcome::Error(format!(
            "--interruption: NodeClaim {claim_name} is gone; nothing was sent"
        )));
    };
    let old_pid = provider_id(&claim);
    let old_node = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(&old_pid))
        .and_then(|n| n.metadata.name);
    let running_on: Vec<String> = pods
        .list(selector)
        .await?
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    // Only the node verify launched for its own pods, and only a spot one.
    let Some(old_node) = old_node.filter(|n| running_on.iter().all(|r| r == n)) else {
        return Ok(Outcome::Error(format!(
            "--interruption refused: verify's pods run on {running_on:?}, not (only) on the node of NodeClaim {claim_name} that verify launched; nothing was sent"
        )));
    };
    let capacity = label(&claim, "karpenter.sh/capacity-type");
    if capacity != "spot" {
        return Ok(Outcome::Error(format!(
            "--interruption refused: NodeClaim {claim_name} is {capacity} capacity, not spot; nothing was sent"
        )));
    }
    let offering = format!(
        "{} in {} (spot)",
        label(&claim, "node.kubernetes.io/instance-type"),
        label(&claim, "topology.kubernetes.io/zone")
    );
    let instance = old_pid.rsplit('/').next().unwrap_or_default().to_owned();
    let sent = jiff::Timestamp::now();
    let message_id = match send(reclaim, &instance, &format!("kk-verify-{run_id}")).await {
        Ok(id) => id,
        Err(e) => {
            return Ok(stalled(
                f,
                PHASES[0].0,
                vec![format!("{e} (queue {})", reclaim.queue)],
            ));
        }
    };
    f.record(PHASES[0].0);
    phase!(f, PHASES[1].0, async |ev: &mut Vec<String>| {
        let c = claims.get_opt(claim_name).await?;
        if let Some(c) = &c {
            ev.push(format!("NodeClaim {claim_name}: {}", claim_conditions(c)));
        }
        Ok(c.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
            .then_some(()))
    });
    phase!(f, PHASES[2].0, async |ev: &mut Vec<String>| {
        let Some(n) = nodes.get_opt(&old_node).await? else {
            ev.push(format!("Node {old_node} is gone"));
            return Ok(Some(()));
        };
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule")
            });
        ev.push(format!("Node {old_node}: tainted {tainted}"));
        Ok(tainted.then_some(()))
    });
    let pool = label(&claim, "karpenter.sh/nodepool").to_owned();
    let replacement = async |ev: &mut Vec<String>, condition: &str| {
        let list = claims.list(&ListParams::default()).await?;
        let found = list.items.into_iter().find(|c| {
            c.metadata.name.as_deref() != Some(claim_name)
                && label(c, "karpenter.sh/nodepool") == pool
                && c.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| t.0.as_second() >= sent.as_second() - 1)
                && cond_true(c, condition)
        });
        if found.is_none() {
            ev.push(format!(
                "no NodeClaim of pool {pool} created since the warning is {condition}"
            ));
        }
        Ok::<_, kube::Error>(found)
    };
    phase!(f, PHASES[3].0, async |ev: &mut Vec<String>| {
        Ok(replacement(ev, "Launched").await?.map(|_| ()))
    });
    let new = phase!(f, PHASES[4].0, async |ev: &mut Vec<String>| {
        replacement(ev, "Registered").await
    });
    let new_pid = provider_id(&new);
    phase!(f, PHASES[5].0, async |ev: &mut Vec<String>| {
        let list = pods.list(selector).await?.items;
        let node_pids = nodes.list(&ListParams::default()).await?.items;
        let on_new = |p: &Pod| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            node_pids.iter().any(|n| {
                n.metadata.name.as_deref() == node
                    && n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(&new_pid)
            })
        };
        ev.extend(list.iter().map(super::pod_summary));
        Ok((!list.is_empty() && list.iter().all(|p| is_running(p) && on_new(p))).then_some(()))
    });
    phase!(f, PHASES[6].0, async |ev: &mut Vec<String>| {
        let c = claims.get_opt(claim_name).await?;
        if let Some(c) = &c {
            ev.push(format!("NodeClaim {claim_name}: {}", claim_conditions(c)));
        }
        Ok(c.is_none().then_some(()))
    });
    Ok(Outcome::Passed {
        note: Some(format!(
            "sent a synthetic spot interruption warning (SQS message {message_id}) for {instance}, the node verify launched: Karpenter drained it, terminated the instance itself, and blocks the offering {offering} for the whole cluster for 3 minutes"
        )),
    })
}
