//! `monitoring/dashboard.yaml`: our Grafana dashboard of the fleet, as a ConfigMap with the
//! `grafana_dashboard: "1"` label that Grafana's dashboard sidecar (kube-prometheus-stack's
//! default) loads. Our own panels and queries, on the same pinned metric names as the alerts
//! (`monitoring.rs`): cost per pool, nodes by capacity type, pending pods, launch →
//! initialized latency, interruption messages, the join token's lifetime, and spend against
//! each spend budget.

use kk_spec::{ElasticCluster, Monitoring};
use serde_json::{Value, json};

use crate::RenderError;
use crate::names::MANAGED_BY;

/// The dashboard's uid (stable, so Grafana updates it in place) and its ConfigMap's key.
pub const UID: &str = "kubean-karpenter-fleet";
pub const FILE: &str = "kubean-karpenter-fleet.json";

/// One time-series panel at row `row`, column `column` (two panels a row) with its queries
/// `(PromQL, legend)` and `unit` (Grafana's unit ids).
fn panel(id: u32, title: &str, unit: &str, queries: &[(&str, &str)]) -> Value {
    let targets: Vec<Value> = queries
        .iter()
        .zip('A'..)
        .map(|((expr, legend), ref_id)| {
            json!({
                "datasource": { "type": "prometheus", "uid": "${datasource}" },
                "expr": expr,
                "legendFormat": legend,
                "refId": ref_id.to_string(),
            })
        })
        .collect();
    let index = id - 1;
    json!({
        "id": id,
        "type": "timeseries",
        "title": title,
        "datasource": { "type": "prometheus", "uid": "${datasource}" },
        "gridPos": { "h": 8, "w": 12, "x": (index % 2) * 12, "y": (index / 2) * 8 },
        "fieldConfig": { "defaults": { "unit": unit }, "overrides": [] },
        "options": { "legend": { "displayMode": "list", "placement": "bottom", "showLegend": true } },
        "targets": targets,
    })
}

/// The dashboard JSON model (what Grafana stores), without the controllers' panel when the
/// join mode runs no controller.
pub fn dashboard(cluster: &ElasticCluster) -> Value {
    let mut panels = vec![
        panel(
            1,
            "Fleet cost per pool ($/h, Karpenter's estimate)",
            "currencyUSD",
            &[(
                "sum by (nodepool) (karpenter_nodepools_cost_total)",
                "{{nodepool}}",
            )],
        ),
        panel(
            2,
            "Nodes by capacity type",
            "short",
            &[(
                "count by (capacity_type) (karpenter_nodes_current_lifetime_seconds)",
                "{{capacity_type}}",
            )],
        ),
        panel(
            3,
            "Pending pods",
            "short",
            &[
                (
                    "sum(karpenter_scheduler_unschedulable_pods_count)",
                    "unschedulable (Karpenter)",
                ),
                ("sum(karpenter_pods_state{phase=\"Pending\"})", "Pending"),
            ],
        ),
        panel(
            4,
            "NodeClaim launch → initialized (p50, p90)",
            "s",
            &[
                (
                    "histogram_quantile(0.5, sum by (le, karpenter_sh_nodepool) (rate(operator_nodeclaim_status_condition_transition_seconds_bucket{type=\"Initialized\"}[1h])))",
                    "p50 {{karpenter_sh_nodepool}}",
                ),
                (
                    "histogram_quantile(0.9, sum by (le, karpenter_sh_nodepool) (rate(operator_nodeclaim_status_condition_transition_seconds_bucket{type=\"Initialized\"}[1h])))",
                    "p90 {{karpenter_sh_nodepool}}",
                ),
            ],
        ),
        panel(
            5,
            "Interruption messages (per minute)",
            "short",
            &[(
                "sum by (message_type) (rate(karpenter_interruption_received_messages_total[5m])) * 60",
                "{{message_type}}",
            )],
        ),
    ];
    if cluster.spec.join.mode.runs_controller() {
        panels.push(panel(
            6,
            "Join token: time left, node CSR decisions (per hour)",
            "s",
            &[
                (
                    "max(kubean_karpenter_join_token_expiry_seconds)",
                    "token expires in",
                ),
                (
                    "sum by (reason) (increase(kubean_karpenter_csr_decisions_total[1h]))",
                    "CSRs {{reason}}",
                ),
            ],
        ));
    }
    if cluster.spec.runs_budget_controller() {
        panels.push(panel(
            7,
            "Spend vs budget per pool ($/h)",
            "currencyUSD",
            &[
                (
                    "max by (pool) (kubean_karpenter_spend_per_hour)",
                    "{{pool}} spend",
                ),
                (
                    "max by (pool) (kubean_karpenter_budget_per_hour)",
                    "{{pool}} budget",
                ),
            ],
        ));
    }
    json!({
        "uid": UID,
        "title": format!("kubean-karpenter fleet: {}", cluster.metadata.name),
        "tags": ["kubean-karpenter", "karpenter"],
        "editable": true,
        "schemaVersion": 39,
        "time": { "from": "now-24h", "to": "now" },
        "refresh": "1m",
        "templating": { "list": [{
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
        }] },
        "panels": panels,
    })
}

/// The ConfigMap Grafana's sidecar provisions the dashboard from, named after the monitoring
/// objects it goes with (`name`).
pub fn config_map(
    cluster: &ElasticCluster,
    monitoring: &Monitoring,
    name: &str,
) -> Result<Value, RenderError> {
    let text = serde_json::to_string_pretty(&dashboard(cluster))
        .map_err(|e| RenderError::Invalid(format!("dashboard JSON: {e}")))?;
    let mut labels = serde_json::Map::new();
    for (key, value) in &monitoring.labels {
        labels.insert(key.clone(), value.clone().into());
    }
    labels.insert("grafana_dashboard".into(), "1".into());
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{name}-dashboard"),
            "namespace": cluster.spec.karpenter.namespace,
            "labels": labels,
        },
        "data": { FILE: text + "\n" },
    }))
}
