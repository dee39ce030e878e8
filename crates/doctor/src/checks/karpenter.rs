//! Karpenter itself: the controller ready, its error log, NodeClaims registered and initialized.

use super::REGISTRATION_TTL;
use super::age;
use super::check;
use super::cond_since;
use super::cond_true;
use super::condition;
use super::created;
use super::gpus;
use super::node_taints;
use super::pool_of;
use super::provider_id;
use super::secs;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Node;
use kube_core::DynamicObject;
use std::time::Duration;

pub(super) fn karpenter_ready(s: &Snapshot) -> Check {
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

pub(super) fn karpenter_errors(s: &Snapshot) -> Check {
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

fn claim_name(nc: &DynamicObject) -> String {
    format!(
        "NodeClaim {} (pool {})",
        nc.metadata.name.as_deref().unwrap_or(""),
        pool_of(nc.metadata.labels.as_ref()).unwrap_or("?")
    )
}

pub(super) fn nodeclaims_registered(s: &Snapshot, f: &Facts) -> Check {
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

pub(super) fn nodeclaims_initialized(s: &Snapshot, f: &Facts) -> Check {
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
