//! `monitoring/`: what the cluster's Prometheus Operator scrapes and alerts on, when the spec
//! says it runs one (`spec.monitoring.prometheusOperator`): a PrometheusRule of alerts for a
//! Karpenter GPU fleet and a PodMonitor for our controllers (`karpenter/values.yaml` turns on
//! the Karpenter chart's own ServiceMonitor), and our Grafana dashboard (`dashboard.rs`).
//!
//! The alerts read Karpenter v1.14's metrics (karpenter `pkg/metrics`, the operatorpkg status
//! controller's `operator_nodeclaim_status_condition_*`, the AWS provider's
//! `karpenter_interruption_*`) and ours (`kubean_karpenter_*`, docs/guide/join-credentials.md). Each
//! names, in its `runbook` annotation, the `kubean-karpenter doctor` check that explains it.
//!
//! Not in the apply order: a cluster without the operator has no such kinds, so ORDER.md has
//! them applied once it runs (like `kueue/`).

use kk_spec::{ElasticCluster, Monitoring, PoolType};
use serde_json::{Value, json};

use crate::names::MANAGED_BY;
use crate::{Bundle, RenderError, csr_approver, rotator};

pub const API_VERSION: &str = "monitoring.coreos.com/v1";
/// The name of the PrometheusRule and the PodMonitor.
pub const NAME: &str = "kubean-karpenter";
/// Seconds of token lifetime below which the token alert fires: the rotator replaces a
/// token at half its life (an hour left of `rotator::TTL` = 2 h), so 30 minutes left means
/// rotation has failed for half an hour; Karpenter's 15-minute registration window is still
/// covered.
pub const TOKEN_ALERT_SECONDS: u32 = 30 * 60;
/// Seconds a NodeClaim may stay launched but not registered before its alert fires: ahead of
/// Karpenter's own 15-minute registration timeout, after which it deletes the NodeClaim.
pub const REGISTRATION_ALERT_SECONDS: u32 = 10 * 60;
/// Interruption messages waiting longer than this (90th percentile) mean a backlog: a spot
/// warning gives two minutes, and half of them gone before Karpenter reads it is too late.
pub const INTERRUPTION_LATENCY_SECONDS: u32 = 60;
/// Denied node CSRs in 15 minutes that count as a spike (a kubelet retries a denied CSR only
/// when it restarts; several denials are someone trying names, or a broken join).
pub const DENIALS_PER_15_MINUTES: u32 = 3;

/// The denial reasons (`kubean_karpenter_csr_denied_total{reason}`, the approver's fixed set)
/// that no honest kubelet's CSR is given: a name that is no instance ID, a second identity
/// for an instance already approved, a CSR for an instance whose NodeClaim is finishing, two
/// CSRs for one name. Any one of them is someone with a join token trying; the alert fires
/// on the first.
pub const FORGED_CSR_REASONS: [&str; 4] = [
    "invalid_name",
    "approved_before",
    "claim_finished",
    "contested",
];

/// The `monitoring` section when it asks for `monitoring/`.
pub fn enabled(cluster: &ElasticCluster) -> Option<&Monitoring> {
    cluster
        .spec
        .monitoring
        .as_ref()
        .filter(|m| m.prometheus_operator)
}

fn metadata(cluster: &ElasticCluster, monitoring: &Monitoring) -> Value {
    let mut labels = serde_json::Map::new();
    for (key, value) in &monitoring.labels {
        labels.insert(key.clone(), value.clone().into());
    }
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    json!({ "name": NAME, "namespace": cluster.spec.karpenter.namespace, "labels": labels })
}

fn runbook(check: &str, then: &str) -> String {
    format!("kubean-karpenter doctor SPEC: check `{check}` explains it. {then}")
}

fn alert(
    name: &str,
    expr: String,
    wait: &str,
    severity: &str,
    summary: &str,
    runbook: String,
) -> Value {
    json!({
        "alert": name,
        "expr": expr,
        "for": wait,
        "labels": { "severity": severity },
        "annotations": { "summary": summary, "runbook": runbook },
    })
}

/// The alert rules (the PrometheusRule's `spec.groups`, also what `promtool` reads), in a
/// fixed order; an alert whose subject the spec lacks (no GPU pool, no queue, no controller)
/// is left out.
pub fn rule_groups(cluster: &ElasticCluster, monitoring: &Monitoring) -> Value {
    let spec = &cluster.spec;
    let mut rules = Vec::new();
    let gpu_pools: Vec<&str> = spec
        .pools
        .iter()
        .filter(|p| p.pool_type == PoolType::Gpu)
        .map(|p| p.name.as_str())
        .collect();
    if !gpu_pools.is_empty() {
        let minutes = monitoring.gpu_initialized_within_minutes;
        rules.push(alert(
            "KubeanKarpenterGpuNodeNotInitialized",
            format!(
                "max by (name, karpenter_sh_nodepool) (operator_nodeclaim_status_condition_current_status_seconds{{type=\"Initialized\", status!=\"True\", karpenter_sh_nodepool=~\"{}\"}}) > {}",
                gpu_pools.join("|"),
                u64::from(minutes) * 60
            ),
            "1m",
            "warning",
            &format!(
                "GPU NodeClaim {{{{ $labels.name }}}} of pool {{{{ $labels.karpenter_sh_nodepool }}}} is not initialized after {minutes} minutes: billed but unusable"
            ),
            runbook(
                "nodeclaims-initialized",
                "Then `gpu-advertised` and `device-plugin-on-gpu-nodes`: a GPU node initializes once the NVIDIA device plugin advertises nvidia.com/gpu.",
            ),
        ));
    }
    rules.push(alert(
        "KubeanKarpenterNodeClaimNotRegistered",
        format!(
            "max by (name, karpenter_sh_nodepool) (operator_nodeclaim_status_condition_current_status_seconds{{type=\"Registered\", status!=\"True\"}}) > {REGISTRATION_ALERT_SECONDS}"
        ),
        "1m",
        "warning",
        "NodeClaim {{ $labels.name }} of pool {{ $labels.karpenter_sh_nodepool }} launched an instance that has not joined; Karpenter deletes it at 15 minutes",
        runbook(
            "nodeclaims-registered",
            "Then `join-token-valid`, `join-ca-hash` and `api-port-from-nodes`; the instance's console output shows the userData's join error.",
        ),
    ));
    if spec.join.mode.runs_controller() {
        rules.push(alert(
            "KubeanKarpenterJoinTokenNearExpiry",
            format!("max(kubean_karpenter_join_token_expiry_seconds) < {TOKEN_ALERT_SECONDS}"),
            "5m",
            "critical",
            "The join token in the store expires in under 30 minutes: the rotator has not replaced it, and new nodes will soon fail to join",
            runbook(
                "join-token-valid",
                &format!(
                    "Then `join-store`; the rotator's log and `kubean_karpenter_errors_total` say why rotation fails (`{}`).",
                    rotator::NAME
                ),
            ),
        ));
    }
    if kk_spec::interruption::queue_name(cluster).is_some() {
        rules.push(alert(
            "KubeanKarpenterInterruptionQueueBacklog",
            format!(
                "histogram_quantile(0.9, sum by (le) (rate(karpenter_interruption_message_queue_duration_seconds_bucket[10m]))) > {INTERRUPTION_LATENCY_SECONDS}"
            ),
            "5m",
            "warning",
            "Interruption messages wait over a minute in the queue before Karpenter reads them: spot warnings (two minutes) arrive too late to drain",
            runbook(
                "interruption-backlog",
                "Then `interruption-queue` and `interruption-rules`; Karpenter's leader must be running with the queue's name in `settings.interruptionQueue`.",
            ),
        ));
    }
    rules.push(alert(
        "KubeanKarpenterPoolAtLimitWithPendingPods",
        "max by (nodepool) (karpenter_nodepools_usage >= on (nodepool, resource_type) karpenter_nodepools_limit) and on () (sum(karpenter_scheduler_unschedulable_pods_count) > 0)".to_owned(),
        "10m",
        "warning",
        "Pool {{ $labels.nodepool }} is at its limits while pods Karpenter could not schedule wait",
        runbook(
            "karpenter-errors",
            "Karpenter's warnings name the pool whose limits stop a launch; raise the pool's `limits` in the spec (`kubean-karpenter plan` shows what the pending pods need).",
        ),
    ));
    if spec.join.mode.runs_controller() {
        rules.push(alert(
            "KubeanKarpenterNodeCsrDenialsSpiking",
            format!(
                "sum by (reason) (increase(kubean_karpenter_csr_decisions_total{{condition=\"Denied\"}}[15m])) > {DENIALS_PER_15_MINUTES}"
            ),
            "1m",
            "critical",
            "The CSR approver denied over 3 node certificates in 15 minutes ({{ $labels.reason }}): a join token may be in the wrong hands, or joins are broken",
            runbook(
                "join-token-valid",
                &format!(
                    "Then `node-provider-id`; each denied CSR's condition message says why (`kubectl get csr -o wide`), KubeanKarpenterContested means competing CSRs for one node (docs/guide/join-credentials.md, CSR approval; `{}`).",
                    csr_approver::NAME
                ),
            ),
        ));
    }
    if spec.join.mode.runs_controller() {
        rules.push(alert(
            "KubeanKarpenterNodeCsrForged",
            format!(
                "sum by (reason) (increase(kubean_karpenter_csr_denied_total{{reason=~\"{}\"}}[15m])) > 0",
                FORGED_CSR_REASONS.join("|")
            ),
            "0m",
            "critical",
            "The CSR approver denied a node CSR no kubelet sends ({{ $labels.reason }}): someone holding a join token is asking for a node identity that is not theirs",
            runbook(
                "join-token-valid",
                &format!(
                    "Then `node-provider-id`; the Warning Events on the denied CSRs (namespace default, reason KubeanKarpenterRefused or KubeanKarpenterContested) name each CSR and why, and its requester `system:bootstrap:<id>` names the token: revoke it (`kubean-karpenter token revoke <id>` once the rotator published another) and find where it leaked (docs/guide/join-credentials.md, CSR approval; `{}`).",
                    csr_approver::NAME
                ),
            ),
        ));
    }
    if spec.runs_health_agent() {
        rules.push(alert(
            "KubeanKarpenterNodeUnhealthy",
            "min by (node, nodepool, condition, reason) (kubean_karpenter_node_health_condition) == 0".to_owned(),
            "0m",
            "warning",
            "Node {{ $labels.node }} of pool {{ $labels.nodepool }}: {{ $labels.condition }} is False ({{ $labels.reason }}); Karpenter repairs it once the condition has lasted its toleration (10 minutes for a fatal XID)",
            runbook(
                "node-health",
                "It says when Karpenter acts, or why it will not; the Node's Warning Events quote the kernel log line (docs/guide/gpus-and-training.md, sick GPU nodes).",
            ),
        ));
        rules.push(alert(
            "KubeanKarpenterNodeRepairBlocked",
            "count by (nodepool) (min by (nodepool, node) (kubean_karpenter_node_health_condition) == 0) > on (nodepool) ceil(0.2 * count by (nodepool) (min by (nodepool, node) (kubean_karpenter_node_health_condition)))".to_owned(),
            "5m",
            "critical",
            "More than 20 % of pool {{ $labels.nodepool }}'s nodes are unhealthy: Karpenter's breaker stops repairing any of them",
            runbook(
                "node-health",
                "Something sick across the pool (an AMI, a driver, a network fault): find it, then replace the nodes by hand (kubectl delete nodeclaim).",
            ),
        ));
    }
    if spec.runs_budget_controller() {
        budget_rules(spec, &mut rules);
    }
    json!([{ "name": NAME, "rules": rules }])
}

/// Spend budgets (docs/guide/budgets.md): spend at the warning share, a pool whose next node
/// would pass its budget, and a budget controller that has gone silent.
fn budget_rules(spec: &kk_spec::ClusterSpec, rules: &mut Vec<Value>) {
    rules.push(alert(
        "KubeanKarpenterSpendNearBudget",
        "max by (pool) (kubean_karpenter_spend_per_hour) >= on (pool) max by (pool) (kubean_karpenter_budget_warn_per_hour)".to_owned(),
        "10m",
        "warning",
        "Pool {{ $labels.pool }} spends past its budget's warning share",
        runbook(
            "budget-enforced",
            "Raise the pool's budget.perHour before launches stop, or free room (kubean-karpenter plan --disrupt).",
        ),
    ));
    rules.push(alert(
        "KubeanKarpenterBudgetExhausted",
        "max by (pool) (kubean_karpenter_budget_exhausted) == 1".to_owned(),
        "5m",
        "warning",
        "Pool {{ $labels.pool }} is at its spend budget: pods that need another node stay Pending",
        runbook(
            "budget-enforced",
            "The NodePool's BudgetExhausted Event names the node that would pass the budget; raise the budget or free room.",
        ),
    ));
    let stale = spec.budget_stale_after().as_secs();
    rules.push(alert(
        "KubeanKarpenterBudgetControllerDown",
        format!(
            "absent(kubean_karpenter_budget_heartbeat_timestamp_seconds) or (time() - max(kubean_karpenter_budget_heartbeat_timestamp_seconds) > {stale})"
        ),
        "5m",
        "critical",
        "The budget controller has recorded no heartbeat: budgeted pools' limits no longer follow their spend",
        runbook(
            "budget-enforced",
            "With onControllerDown: deny their launches are refused meanwhile; bring the kubean-karpenter-budget Deployment back.",
        ),
    ));
}

fn rule(cluster: &ElasticCluster, monitoring: &Monitoring) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": metadata(cluster, monitoring),
        "spec": { "groups": rule_groups(cluster, monitoring) },
    })
}

/// Scrapes the rotator's, the approver's and the health agents' `/metrics` (their container
/// port `http`), each in its own namespace (a PodMonitor otherwise looks only in its own), and in Karpenter's, where
/// earlier installs ran them until `apply` moves them.
fn pod_monitor(cluster: &ElasticCluster, monitoring: &Monitoring) -> Value {
    let mut namespaces = vec![
        crate::names::controller_namespace(csr_approver::NAME).to_owned(),
        crate::names::controller_namespace(rotator::NAME).to_owned(),
        cluster.spec.karpenter.namespace.clone(),
    ];
    let mut names: Vec<String> = vec![csr_approver::NAME.into(), rotator::NAME.into()];
    let health = crate::health::daemonset_names(cluster);
    if !health.is_empty() {
        namespaces
            .push(crate::names::controller_namespace(kk_spec::names::HEALTH_AGENT).to_owned());
        names.extend(health);
    }
    if cluster.spec.runs_budget_controller() {
        namespaces.push(crate::names::controller_namespace(kk_spec::names::BUDGET).to_owned());
        names.push(kk_spec::names::BUDGET.into());
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": metadata(cluster, monitoring),
        "spec": {
            "namespaceSelector": { "matchNames": namespaces },
            "selector": { "matchExpressions": [{
                "key": "app.kubernetes.io/name",
                "operator": "In",
                "values": names,
            }] },
            "podMetricsEndpoints": [{ "port": "http", "path": "/metrics" }],
        },
    })
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let Some(monitoring) = enabled(cluster) else {
        return Ok(());
    };
    bundle.add_yaml("monitoring/rules.yaml", &[rule(cluster, monitoring)])?;
    if cluster.spec.join.mode.runs_controller()
        || !crate::health::daemonset_names(cluster).is_empty()
    {
        bundle.add_yaml(
            "monitoring/controllers.yaml",
            &[pod_monitor(cluster, monitoring)],
        )?;
    }
    bundle.add_yaml(
        "monitoring/dashboard.yaml",
        &[crate::dashboard::config_map(cluster, monitoring, NAME)?],
    )?;
    Ok(())
}
