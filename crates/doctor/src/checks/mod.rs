//! The checks: pure functions of a [`Snapshot`] and the spec's [`Facts`]. One function per
//! check, in the order `doctor` prints them.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube_core::DynamicObject;
use serde_json::Value;

use crate::snapshot::Snapshot;
use crate::{Check, Facts, Status};

mod aws;
mod budget;
mod cluster;
mod controller_bindings;
mod controllers;
mod day_two;
mod drift;
mod gpu;
mod gpu_plugin;
mod interruption;
mod isolated_vpc;
mod join;
mod karpenter;
mod nodes;
mod placement;
mod repair;

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const POOL_LABEL: &str = "karpenter.sh/nodepool";
/// Karpenter deletes a NodeClaim that has not registered 15 minutes after launch
/// (kubernetes-sigs/karpenter pkg/controllers/nodeclaim/lifecycle/liveness.go, registrationTTL).
const REGISTRATION_TTL: &str = "15m";

/// Every check, in order.
pub fn all(s: &Snapshot, f: &Facts) -> Vec<Check> {
    vec![
        cluster::apiserver(s),
        cluster::kubelet_skew(s, f),
        day_two::kubelet_skew_headroom(s),
        cluster::pods_running(s, f),
        controllers::controllers_schedulable(s, f),
        cluster::nodepools_present(s, f),
        karpenter::karpenter_ready(s),
        karpenter::karpenter_errors(s),
        nodes::node_provider_id(s, f),
        nodes::ccm_initializes(s, f),
        nodes::cluster_id_tag(s, f),
        nodes::infra_imds_hop_limit(s, f),
        karpenter::nodeclaims_registered(s, f),
        karpenter::nodeclaims_initialized(s, f),
        gpu::gpu_advertised(s, f),
        gpu::device_plugin(s, f),
        gpu::device_plugin_for_pools(s, f),
        repair::node_health(s, f),
        budget::budget_enforced(s, f),
        day_two::ami_pinned(s),
        drift::drift_progress(s),
        join::join_store(s, f),
        join::join_token_valid(s, f),
        join::join_ca_hash(s),
        join::cluster_info_jws(s, f),
        join::bootstrap_rbac(s, f),
        controller_bindings::controller_bindings(s, f),
        aws::pass_role(s, f),
        aws::api_port(s, f),
        interruption::interruption_queue(s, f),
        interruption::interruption_queue_policy(s, f),
        interruption::interruption_rules(s, f),
        interruption::interruption_setting(s, f),
        interruption::interruption_backlog(s, f),
        isolated_vpc::isolated_vpc_endpoints(s, f),
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

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
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
    kk_spec::time::format_duration(Duration::from_secs(d.as_secs()))
}

fn created(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Timestamp> {
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

fn gpus(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .allocatable
        .as_ref()?
        .get("nvidia.com/gpu")
        .map(|q| q.0.clone())
        .filter(|q| q != "0")
}
