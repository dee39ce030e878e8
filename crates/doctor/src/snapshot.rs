//! What doctor judges: everything `kk_live::doctor::gather` read, once, as plain data. A source
//! that could not be read is kept as its error, and the checks that need it are skipped with
//! that reason.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::api::rbac::v1::Subject;
use kube_core::DynamicObject;
use serde_json::Value;

pub use kk_spec::network::{Ingress, SecurityGroup};

/// Why doctor could not read something: the checks that need it show this text and are
/// skipped. Gathering keeps the typed error it met (a kube or AWS call, the join store, the
/// CA, the token) as this error's source; judging only shows it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReadError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl ReadError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        ReadError(Box::new(error))
    }

    /// The typed error gathering met, for a caller that downcasts.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

/// A value as read, or why it could not be.
pub type Read<T> = Result<T, ReadError>;

/// What the join store holds, as doctor judges it: the token's ID, never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredJoin {
    pub token_id: String,
    pub ca_cert_hash: String,
    pub expiration: jiff::Timestamp,
}

/// An EC2 instance as the checks see it.
#[derive(Debug, Clone, Default)]
pub struct Instance {
    pub state: String,
    pub tags: BTreeMap<String, String>,
    /// IMDS: `HttpPutResponseHopLimit` and `HttpTokens` (`required` = IMDSv2 only).
    pub hop_limit: Option<i32>,
    pub http_tokens: Option<String>,
}

/// A binding's role and subjects.
#[derive(Debug, Clone)]
pub struct Binding {
    pub namespace: Option<String>,
    pub name: String,
    pub role_kind: String,
    pub role: String,
    pub subjects: Vec<Subject>,
}

#[derive(Debug, Default)]
pub struct Rbac {
    pub bindings: Vec<Binding>,
    /// `ClusterRole/<name>` and `Role/<ns>/<name>` that exist.
    pub roles: BTreeSet<String>,
}

/// Everything the checks judge.
#[derive(Debug)]
pub struct Snapshot {
    pub now: jiff::Timestamp,
    pub server_version: Read<String>,
    pub nodes: Read<Vec<Node>>,
    pub pods: Read<Vec<Pod>>,
    /// Every Deployment: whether the controllers' pods fit an existing Node.
    pub deployments: Read<Vec<k8s_openapi::api::apps::v1::Deployment>>,
    /// Every DaemonSet: whether a GPU pool's next node will get a device plugin.
    pub daemonsets: Read<Vec<k8s_openapi::api::apps::v1::DaemonSet>>,
    pub pdbs: Read<Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>>,
    pub warning_events: Read<Vec<Event>>,
    pub nodeclaims: Read<Vec<DynamicObject>>,
    pub nodepools: Read<Vec<DynamicObject>>,
    pub nodeclasses: Read<Vec<DynamicObject>>,
    pub cluster_info: Read<Option<ConfigMap>>,
    pub ccm_config: Read<Option<ConfigMap>>,
    /// The budget controller's record (`kube-system/kubean-karpenter-budget`).
    pub budget_record: Read<Option<ConfigMap>>,
    pub cluster_ca_hash: Read<String>,
    /// What the apiserver says the join token is: `None` when there is no token to check
    /// (no store value, static mode without a token); `Some(Ok(None))` when it does not
    /// authenticate; `Some(Ok(Some(groups)))` when it does. Learned by authenticating with the
    /// token, never by reading Secrets: doctor's role has no Secrets access.
    pub join_token: Option<(String, Read<Option<Vec<String>>>)>,
    pub rbac: Read<Rbac>,
    /// `None`: static join mode (no store).
    pub store: Option<Read<Option<StoredJoin>>>,
    /// `None`: no AWS configuration (no region/credentials).
    pub instances: Option<Read<BTreeMap<String, Instance>>>,
    pub control_plane_sg: Option<Read<SecurityGroup>>,
    pub node_sgs: Option<Read<Vec<SecurityGroup>>>,
    /// The controller role's live policies; `None` when no role was named.
    pub controller_policies: Option<Read<Vec<(String, Value)>>>,
    /// The interruption queue and rules; `None` without AWS configuration or without a queue.
    pub interruption: Option<Read<InterruptionState>>,
    /// The VPC's endpoints (service name, type, state); `None` without AWS configuration or
    /// when the spec's VPC is not isolated (nothing to check).
    pub vpc_endpoints: Option<Read<Vec<VpcEndpoint>>>,
}

/// One VPC endpoint as EC2 describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpcEndpoint {
    pub service_name: String,
    /// `Interface`, `Gateway`, ...
    pub kind: String,
    /// `available`, `pending`, ...
    pub state: String,
}

/// The queue and rules as the account holds them.
#[derive(Debug, Clone, Default)]
pub struct InterruptionState {
    /// `None`: no queue of that name.
    pub queue: Option<QueueState>,
    /// By rule name; `None`: no such rule.
    pub rules: BTreeMap<String, Option<RuleState>>,
}

#[derive(Debug, Clone, Default)]
pub struct QueueState {
    pub url: String,
    /// `GetQueueAttributes` `All`: retention, SSE, the policy (JSON text), the backlog counts.
    pub attributes: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct RuleState {
    /// `ENABLED`, `DISABLED`, ...
    pub state: String,
    pub event_pattern: Option<Value>,
    /// The ARNs it sends to.
    pub targets: Vec<String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A snapshot of an empty cluster with no AWS configuration, for the checks' tests.
    pub(crate) fn empty() -> Snapshot {
        Snapshot {
            now: "2026-12-07T00:00:00Z".parse().unwrap(),
            server_version: Ok("v1.36.3".into()),
            nodes: Ok(vec![]),
            pods: Ok(vec![]),
            deployments: Ok(vec![]),
            daemonsets: Ok(vec![]),
            pdbs: Ok(vec![]),
            warning_events: Ok(vec![]),
            nodeclaims: Ok(vec![]),
            nodepools: Ok(vec![]),
            nodeclasses: Ok(vec![]),
            cluster_info: Ok(None),
            ccm_config: Ok(None),
            budget_record: Ok(None),
            cluster_ca_hash: Ok(String::new()),
            join_token: None,
            rbac: Ok(Rbac::default()),
            store: None,
            instances: None,
            control_plane_sg: None,
            node_sgs: None,
            controller_policies: None,
            interruption: None,
            vpc_endpoints: None,
        }
    }
}
