//! `doctor`'s judgement: read-only checks of a running cluster and its AWS account for the
//! seed's validation checklist, its classic failure points and what the audits found. Each
//! check answers with an id, a status (ok / warn / fail / skipped with its reason), the evidence
//! it saw (the object, field or API answer) and the fix.
//!
//! Owns the [`checks`], the IAM [`policy`] evaluator they use, and the [`permissions`] doctor
//! runs with. Pure: kk-live's `doctor::gather` reads the cluster and the account once (only
//! get/list/describe calls) into a [`Snapshot`]; [`checks::all`] judges it against the spec's
//! [`Facts`] without I/O, so every verdict is a function of what was read.

pub mod checks;
pub mod permissions;
pub mod policy;
pub mod snapshot;

use std::time::Duration;

use serde_json::{Value, json};

pub use snapshot::{Read, ReadError, Snapshot, StoredJoin};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skipped => "skipped",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Stable id, e.g. `join-store-token`.
    pub id: &'static str,
    /// What it checks, in a few words.
    pub title: &'static str,
    pub status: Status,
    /// What it saw: objects, fields, API answers (never a secret). For `skipped`, the reason.
    pub evidence: Vec<String>,
    /// What to do; empty when ok.
    pub fix: String,
}

impl Check {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "title": self.title,
            "status": self.status.as_str(),
            "evidence": self.evidence,
            "fix": self.fix,
        })
    }
}

/// What the spec says the cluster should be: the facts every check compares against.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub cluster: String,
    /// `1.36.3`: the control plane's version per the spec.
    pub kubernetes_version: String,
    /// The node security groups, the control plane's, the API port.
    pub network: kk_spec::network::NodeNetwork,
    /// The join store (kind, name); `None` in static mode.
    pub store: Option<(kk_spec::join_store::StoreKind, String)>,
    /// Static mode: the token ID baked into the userData.
    pub static_token_id: Option<String>,
    /// Static mode: the token itself, to authenticate with (doctor reads no Secrets).
    pub static_token: Option<StaticToken>,
    /// `arn:aws:iam::<account>:role/<nodeRole>`.
    pub node_role_arn: String,
    /// Pool names, and which of them are GPU pools.
    pub pools: Vec<String>,
    pub gpu_pools: Vec<String>,
    /// What runs the device plugin (`gpu.stack`): our DaemonSet or the GPU Operator's.
    pub gpu_stack: kk_spec::GpuSoftware,
    pub karpenter_namespace: String,
    /// Karpenter and the rotator take the infra workers' instance profile (they then run on the
    /// host network and the infra workers keep IMDS's hop limit at 1).
    pub controllers_use_instance_profile: bool,
    /// The controller policy `render` wrote (iam/controller-policy.json).
    pub rendered_controller_policy: Option<Value>,
    /// The controller's IAM role in the account, to read its live policies.
    pub controller_role: Option<String>,
    /// How long a NodeClaim, Node or pod may sit in an intermediate state before it fails.
    pub grace: Duration,
    /// Whether Karpenter's node repair is on (`kk_spec::ClusterSpec::node_repair`), and
    /// whether it reboots for the faults a reboot clears (`rebootForRepair`).
    pub node_repair: bool,
    pub reboot_for_repair: bool,
    /// The interruption queue and rules the spec asks for; `None` when it has no queue.
    pub interruption: Option<InterruptionFacts>,
    /// Whether a pool allows spot or reserved capacity (a queue is then expected).
    pub reclaimable: bool,
    /// The cluster's VPC, and the endpoints it needs (`kk_spec::vpc_endpoints`; empty unless
    /// the spec says the VPC is isolated).
    pub vpc_id: String,
    pub vpc_endpoints: Vec<kk_spec::vpc_endpoints::RequiredEndpoint>,
    /// The budgeted pools and the resource each budget narrows; whether launches are refused
    /// while the budget controller is silent, and after how long it counts as silent.
    pub budgets: Vec<(String, String)>,
    pub budget_deny: bool,
    pub budget_stale_after: Duration,
}

/// The spec's static join token (`join.token`), kept to authenticate with; `Debug` shows at
/// most its ID.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticToken(String);

impl StaticToken {
    /// The whole token, `<id>.<secret>`: only for the authentication request.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.split_once('.') {
            Some((id, _)) => write!(f, "StaticToken({id}.<redacted>)"),
            None => f.write_str("StaticToken(<redacted>)"),
        }
    }
}

/// The interruption queue and its rules, as the spec names them (`kk_spec::interruption`).
#[derive(Debug, Clone, Default)]
pub struct InterruptionFacts {
    pub queue: String,
    pub queue_arn: String,
    /// (rule name, detail-type it routes).
    pub rules: Vec<(String, String)>,
}

impl InterruptionFacts {
    fn from_spec(cluster: &kk_spec::ElasticCluster) -> Option<Self> {
        use kk_spec::interruption::{EVENT_KINDS, queue_arn, queue_name, rule_name};
        let queue = queue_name(cluster)?;
        Some(InterruptionFacts {
            queue_arn: queue_arn(cluster, &queue),
            rules: EVENT_KINDS
                .iter()
                .map(|k| (rule_name(&queue, k), k.detail_type.to_owned()))
                .collect(),
            queue,
        })
    }
}

impl Facts {
    pub fn from_spec(cluster: &kk_spec::ElasticCluster) -> Self {
        let spec = &cluster.spec;
        let name = cluster.metadata.name.clone();
        let store = kk_spec::join_store::StoreKind::from_join_mode(spec.join.mode).map(|kind| {
            let store_name = spec
                .join
                .store_name
                .clone()
                .unwrap_or_else(|| kind.default_name(&name));
            (kind, store_name)
        });
        let static_token_id = spec
            .join
            .token
            .as_deref()
            .and_then(|t| t.split_once('.'))
            .map(|(id, _)| id.to_owned());
        Facts {
            static_token: spec.join.token.clone().map(StaticToken),
            cluster: name,
            kubernetes_version: spec.kubernetes_version.clone(),
            network: kk_spec::network::NodeNetwork::from_spec(spec),
            store,
            static_token_id,
            node_role_arn: kk_spec::arn::Arns::of(&spec.aws).role(&spec.aws.node_role),
            pools: spec.pools.iter().map(|p| p.name.clone()).collect(),
            gpu_pools: spec
                .pools
                .iter()
                .filter(|p| p.gpu.is_some())
                .map(|p| p.name.clone())
                .collect(),
            gpu_stack: spec.gpu.as_ref().map(|g| g.stack).unwrap_or_default(),
            karpenter_namespace: spec.karpenter.namespace.clone(),
            controllers_use_instance_profile: spec.karpenter.credentials.source
                == kk_spec::CredentialSource::InstanceProfile,
            rendered_controller_policy: None,
            controller_role: None,
            grace: Duration::from_secs(120),
            node_repair: spec.node_repair(),
            reboot_for_repair: spec.reboot_for_repair(),
            interruption: InterruptionFacts::from_spec(cluster),
            reclaimable: kk_spec::interruption::reclaimable(spec),
            vpc_id: spec.aws.vpc_id.clone(),
            vpc_endpoints: kk_spec::vpc_endpoints::required(cluster),
            budgets: spec
                .budgeted_pools()
                .map(|(p, resource)| (p.name.clone(), resource))
                .collect(),
            budget_deny: spec.on_controller_down() == kk_spec::OnControllerDown::Deny,
            budget_stale_after: spec.budget_stale_after(),
        }
    }
}

/// The whole report: every check, in a fixed order.
#[derive(Debug, Clone)]
pub struct Report {
    pub checks: Vec<Check>,
    pub elapsed: Duration,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }

    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    pub fn to_json(&self) -> Value {
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        json!({
            "checks": self.checks.iter().map(Check::to_json).collect::<Vec<_>>(),
            "summary": {
                "ok": count(Status::Ok), "warn": count(Status::Warn),
                "fail": count(Status::Fail), "skipped": count(Status::Skipped),
                "seconds": (self.elapsed.as_secs_f64() * 100.0).round() / 100.0,
            },
        })
    }
}

#[cfg(test)]
mod partition_tests {
    /// Issue 47 item 11: the role doctor evaluates `iam:PassRole` on is in the spec's partition.
    #[test]
    fn the_node_role_arn_is_in_the_specs_partition() {
        let text = kk_spec::EXAMPLE.replace(
            "    region: us-east-1             # <AWS_REGION>\n",
            "    region: us-gov-west-1\n    partition: aws-us-gov\n",
        );
        assert_ne!(text, kk_spec::EXAMPLE, "the example changed");
        let loaded =
            kk_spec::parse_spec(&text, "gov.yaml").unwrap_or_else(|e| panic!("{}", e.len()));
        let facts = super::Facts::from_spec(&loaded.spec);
        assert_eq!(
            facts.node_role_arn,
            "arn:aws-us-gov:iam::111122223333:role/KarpenterNodeRole-demo"
        );
    }
}

#[cfg(test)]
mod static_token_tests {
    #[test]
    fn the_static_tokens_secret_is_not_in_debug() {
        let token = super::StaticToken("abcdef.0123456789abcdef".into());
        assert_eq!(format!("{token:?}"), "StaticToken(abcdef.<redacted>)");
        assert_eq!(token.expose(), "abcdef.0123456789abcdef");
        let odd = super::StaticToken("0123456789abcdef".into());
        assert_eq!(format!("{odd:?}"), "StaticToken(<redacted>)");
    }
}
