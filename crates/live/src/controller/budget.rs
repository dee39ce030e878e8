//! The budget controller (`kubean-karpenter controller --budget-only`, issue #51): keeps each
//! budgeted NodePool's limit on its budget resource where the pool's spend budget puts it.
//!
//! Every tick the leader lists NodePools, EC2NodeClasses, NodeClaims and Nodes, hands them to
//! a [`Judge`] (the CLI's, which prices them with kk-sim exactly as `plan` does), and writes
//! each limit that differs with server-side apply under its own field manager — lowerings
//! before raisings, so that a tick never leaves room for more than the budgets allow. It then
//! records a heartbeat and, per pool whose limit is in place, the NodePool's uid in its
//! ConfigMap, which the launch policy reads: a budgeted pool launches nothing until that entry
//! names it. An exhausted pool gets a Warning Event naming its budget, its spend and the node
//! that would pass it.
//!
//! It calls no AWS API, creates and deletes no NodeClaim, Node or instance; its admission
//! policy lets it change one limit of a budgeted NodePool and nothing else.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Client;
use kube::api::PostParams;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::leader::{self, Leadership, LeaseConfig, LeaseObserver};
use super::listener::HttpListener;
use crate::kube_error::KubeCallError;

/// The field manager of the limits it writes (what `--show-managed-fields` names).
pub const FIELD_MANAGER: &str = kk_spec::names::BUDGET;
/// NodePool Events go where Karpenter's own go for cluster-scoped objects.
pub const EVENT_NAMESPACE: &str = "default";
/// The same warning for the same pool is not posted again within this long.
const EVENT_REPEAT_AFTER: Duration = Duration::from_secs(300);
/// A pass never takes longer than this.
const PASS_LIMIT: Duration = Duration::from_secs(60);

/// The kinds a judge needs (the disruption reader's, without pods).
const KINDS: [(&str, &str, &str, &str); 4] = [
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses"),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    ("", "v1", "Node", "nodes"),
];

#[derive(Debug, Clone)]
pub struct BudgetConfig {
    /// How often the leader recomputes the limits.
    pub tick: Duration,
    /// The namespace of its record (the Lease's).
    pub record_namespace: String,
    pub lease: LeaseConfig,
}

/// What the judge decided for one budgeted pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolVerdict {
    pub pool: String,
    /// The NodePool's uid (the launch policy compares the NodeClaim's owner with it).
    pub uid: String,
    pub resource: String,
    /// The limit as a quantity; `None`: leave it (a pool that could not be priced).
    pub limit: Option<String>,
    /// Its budget and spend, US dollars per hour.
    pub budget: f64,
    pub spend: f64,
    pub warn_percent: u8,
    /// Set when one more node would pass the budget: what a person reads.
    pub exhausted: Option<String>,
    /// Why the budget could not be priced.
    pub problem: Option<String>,
}

/// Prices the cluster's state into limits (the CLI's judge is kk-sim's ledger).
pub trait Judge: Send + Sync {
    /// `documents`: (name, JSON text) `List` documents of the kinds listed.
    fn judge(&self, documents: &[(String, String)]) -> Result<Vec<PoolVerdict>, String>;
}

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error(transparent)]
    Kube(#[from] KubeCallError),
    #[error("pricing the cluster failed: {0}")]
    Judge(String),
    #[error("invalid budget controller configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What `/metrics` shows.
#[derive(Debug, Default)]
pub struct BudgetMetrics {
    verdicts: Mutex<Vec<PoolVerdict>>,
    heartbeat: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
    exhausted_events: AtomicU64,
    leadership: Arc<Leadership>,
}

impl BudgetMetrics {
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn limit_writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    pub fn is_leader(&self) -> bool {
        self.leadership.is_leading()
    }

    fn exposition(&self) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str| {
            out.push_str(&format!(
                "# HELP kubean_karpenter_{name} {help}\n# TYPE kubean_karpenter_{name} gauge\n"
            ));
        };
        let verdicts = self.verdicts.lock().map(|v| v.clone()).unwrap_or_default();
        gauge(
            &mut out,
            "spend_per_hour",
            "What a budgeted pool's nodes and claims cost, US dollars per hour.",
        );
        for v in &verdicts {
            out.push_str(&format!(
                "kubean_karpenter_spend_per_hour{{pool=\"{}\"}} {}\n",
                v.pool, v.spend
            ));
        }
        gauge(
            &mut out,
            "budget_per_hour",
            "A pool's spend budget, US dollars per hour.",
        );
        for v in &verdicts {
            out.push_str(&format!(
                "kubean_karpenter_budget_per_hour{{pool=\"{}\"}} {}\n",
                v.pool, v.budget
            ));
        }
        gauge(
            &mut out,
            "budget_warn_per_hour",
            "Where a pool's budget warning starts, US dollars per hour.",
        );
        for v in &verdicts {
            out.push_str(&format!(
                "kubean_karpenter_budget_warn_per_hour{{pool=\"{}\"}} {}\n",
                v.pool,
                v.budget * f64::from(v.warn_percent) / 100.0
            ));
        }
        gauge(
            &mut out,
            "budget_exhausted",
            "1 when one more node would take a pool past its budget.",
        );
        for v in &verdicts {
            out.push_str(&format!(
                "kubean_karpenter_budget_exhausted{{pool=\"{}\"}} {}\n",
                v.pool,
                u8::from(v.exhausted.is_some())
            ));
        }
        gauge(
            &mut out,
            "budget_unpriced",
            "1 when a budgeted pool could not be priced (its limit stays at its use).",
        );
        for v in &verdicts {
            out.push_str(&format!(
                "kubean_karpenter_budget_unpriced{{pool=\"{}\"}} {}\n",
                v.pool,
                u8::from(v.problem.is_some())
            ));
        }
        gauge(
            &mut out,
            "budget_heartbeat_timestamp_seconds",
            "When the leader last recorded its heartbeat.",
        );
        out.push_str(&format!(
            "kubean_karpenter_budget_heartbeat_timestamp_seconds {}\n",
            self.heartbeat.load(Ordering::Relaxed)
        ));
        gauge(&mut out, "is_leader", "1 on the replica that leads.");
        out.push_str(&format!(
            "kubean_karpenter_is_leader {}\n",
            u8::from(self.is_leader())
        ));
        for (name, help, value) in [
            (
                "budget_limit_writes_total",
                "Limits the budget controller wrote.",
                &self.writes,
            ),
            (
                "budget_errors_total",
                "Passes or calls of the budget controller that failed.",
                &self.errors,
            ),
            (
                "budget_exhausted_events_total",
                "Warning Events posted on exhausted pools.",
                &self.exhausted_events,
            ),
        ] {
            out.push_str(&format!(
                "# HELP kubean_karpenter_{name} {help}\n# TYPE kubean_karpenter_{name} counter\nkubean_karpenter_{name} {}\n",
                value.load(Ordering::Relaxed)
            ));
        }
        out
    }
}

impl LeaseObserver for BudgetMetrics {
    fn apiserver_answered(&self) {}

    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

pub struct BudgetController {
    client: Client,
    config: BudgetConfig,
    judge: Arc<dyn Judge>,
    leadership: Arc<Leadership>,
    metrics: Arc<BudgetMetrics>,
    listener: Option<HttpListener>,
}

impl BudgetController {
    pub fn new(
        kube_config: kube::Config,
        config: BudgetConfig,
        judge: Arc<dyn Judge>,
    ) -> Result<Self, BudgetError> {
        if config.tick.is_zero() {
            return Err(BudgetError::Config("--budget-tick must be positive".into()));
        }
        if config.lease.duration < Duration::from_secs(3) || config.lease.identity.is_empty() {
            return Err(BudgetError::Config(
                "--lease-duration must be at least 3s and --identity not empty".into(),
            ));
        }
        let client = Client::try_from(kube_config)
            .map_err(|e| BudgetError::Config(format!("cannot build a client: {e}")))?;
        let leadership = Arc::new(Leadership::default());
        let metrics = Arc::new(BudgetMetrics {
            leadership: leadership.clone(),
            ..BudgetMetrics::default()
        });
        Ok(Self {
            client,
            config,
            judge,
            leadership,
            metrics,
            listener: None,
        })
    }

    pub fn metrics(&self) -> Arc<BudgetMetrics> {
        self.metrics.clone()
    }

    /// Listens for `/metrics`, `/healthz` and `/readyz`; returns the bound address.
    pub async fn bind(&mut self, addr: SocketAddr) -> Result<SocketAddr, BudgetError> {
        let listener = HttpListener::bind(addr, super::listener::Limits::default())
            .await
            .map_err(|source| BudgetError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| BudgetError::Bind { addr, source })?;
        self.listener = Some(listener);
        Ok(local)
    }

    /// Runs until `shutdown` completes, then releases the lease.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let BudgetController {
            client,
            config,
            judge,
            leadership,
            metrics,
            listener,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        tracing::info!(
            identity = %config.lease.identity,
            tick = ?config.tick,
            "budget controller starting"
        );
        let elector = leader::run(
            client.clone(),
            config.lease.clone(),
            &leadership,
            metrics.as_ref(),
            stop_rx.clone(),
            done_rx,
        );
        let passes = async {
            let mut stop = stop_rx.clone();
            let mut posted: BTreeMap<String, Instant> = BTreeMap::new();
            while !*stop.borrow() {
                if leadership.is_leading() {
                    let result = tokio::time::timeout(
                        PASS_LIMIT,
                        pass(&client, &config, judge.as_ref(), &metrics, &mut posted),
                    )
                    .await;
                    match result {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            metrics.errors.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(error = %e, "budget pass failed");
                        }
                        Err(_) => {
                            metrics.errors.fetch_add(1, Ordering::Relaxed);
                            tracing::error!("budget pass timed out");
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(config.tick) => {}
                    _ = leadership.acquired.notified() => {}
                    _ = stop.changed() => {}
                }
            }
            let _ = done_tx.send(true);
        };
        let server = async {
            if let Some(listener) = listener {
                let router = Router::new()
                    .route("/metrics", get(exposition))
                    .route("/healthz", get(|| async { "ok" }))
                    .route("/readyz", get(|| async { "ok" }))
                    .with_state(metrics.clone());
                listener.serve(router, stop_rx.clone()).await;
            }
        };
        let trigger = async {
            shutdown.await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        };
        tokio::join!(elector, passes, server, trigger);
    }
}

async fn exposition(State(metrics): State<Arc<BudgetMetrics>>) -> (StatusCode, String) {
    (StatusCode::OK, metrics.exposition())
}

/// Lists the kinds a judge reads, as `List` documents.
pub async fn read_documents(client: &Client) -> Result<Vec<(String, String)>, KubeCallError> {
    crate::cluster_state::read_kinds(client, &KINDS)
        .await
        .map_err(|(plural, e)| KubeCallError::from_kube(format!("list {plural}"), e))
}

/// The live limit on `resource` of each NodePool, by name.
fn live_limits(documents: &[(String, String)]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (_, text) in documents {
        let Ok(list) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        for item in list["items"].as_array().into_iter().flatten() {
            if item["kind"] != "NodePool" {
                continue;
            }
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let limits: BTreeMap<String, String> = item["spec"]["limits"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.insert(name.to_owned(), limits);
        }
    }
    out
}

/// Whether the quantity `new` is below `old` (unparsable counts as lower: written first).
fn lowers(old: Option<&String>, new: &str) -> bool {
    use kk_model::quantity::Quantity;
    match (old.map(|o| Quantity::parse(o)), Quantity::parse(new)) {
        (Some(Ok(old)), Ok(new)) => new.ceil_units() < old.ceil_units(),
        _ => true,
    }
}

/// One pass: judge, write the limits that differ, record, warn.
async fn pass(
    client: &Client,
    config: &BudgetConfig,
    judge: &dyn Judge,
    metrics: &BudgetMetrics,
    posted: &mut BTreeMap<String, Instant>,
) -> Result<(), BudgetError> {
    let documents = read_documents(client).await?;
    let verdicts = judge.judge(&documents).map_err(BudgetError::Judge)?;
    let live = live_limits(&documents);
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let pools: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "nodepools"),
    );
    let mut changes: Vec<(&PoolVerdict, &String, bool)> = verdicts
        .iter()
        .filter_map(|v| {
            let limit = v.limit.as_ref()?;
            let current = live.get(&v.pool).and_then(|l| l.get(&v.resource));
            (current != Some(limit)).then(|| (v, limit, lowers(current, limit)))
        })
        .collect();
    // Lowerings first: never more room than the budgets allow, even halfway.
    changes.sort_by_key(|(_, _, lowering)| !lowering);
    let mut enforced: BTreeMap<String, String> = verdicts
        .iter()
        .filter(|v| {
            v.limit.is_some()
                && !changes.iter().any(|(c, _, _)| c.pool == v.pool)
                && live
                    .get(&v.pool)
                    .is_some_and(|l| l.contains_key(&v.resource))
        })
        .map(|v| (v.pool.clone(), v.uid.clone()))
        .collect();
    for (verdict, limit, _) in &changes {
        let patch = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": { "name": verdict.pool },
            "spec": { "limits": { verdict.resource.clone(): limit } },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match pools
            .patch(&verdict.pool, &params, &Patch::Apply(&patch))
            .await
        {
            Ok(_) => {
                metrics.writes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(pool = %verdict.pool, resource = %verdict.resource, limit = %limit, spend = verdict.spend, budget = verdict.budget, "limit written");
                enforced.insert(verdict.pool.clone(), verdict.uid.clone());
            }
            Err(e) => {
                metrics.errors.fetch_add(1, Ordering::Relaxed);
                let e = KubeCallError::from_kube(
                    format!(
                        "apply limits.{} of NodePool {}",
                        verdict.resource, verdict.pool
                    ),
                    e,
                );
                tracing::error!(error = %e, "limit not written");
            }
        }
    }
    record(client, &config.record_namespace, &enforced).await?;
    metrics.heartbeat.store(
        Timestamp::now().as_second().max(0) as u64,
        Ordering::Relaxed,
    );
    for v in &verdicts {
        if let Some(problem) = &v.problem {
            tracing::warn!(pool = %v.pool, problem = %problem, "budget not priced: its limit stays at its use");
        }
        let Some(message) = &v.exhausted else {
            continue;
        };
        if posted
            .get(&v.pool)
            .is_some_and(|t| t.elapsed() < EVENT_REPEAT_AFTER)
        {
            continue;
        }
        if post_event(client, v, message).await {
            posted.insert(v.pool.clone(), Instant::now());
            metrics.exhausted_events.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Ok(mut slot) = metrics.verdicts.lock() {
        *slot = verdicts;
    }
    Ok(())
}

/// The record the launch policy reads: the heartbeat and `enforced.<pool>` = NodePool uid for
/// each pool whose limit is in place (others are dropped, so their launches wait).
async fn record(
    client: &Client,
    namespace: &str,
    enforced: &BTreeMap<String, String>,
) -> Result<(), KubeCallError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let action = || format!("update ConfigMap {namespace}/{FIELD_MANAGER}");
    for _ in 0..3 {
        let mut map = api
            .get(FIELD_MANAGER)
            .await
            .map_err(|e| KubeCallError::from_kube(action(), e))?;
        let mut data: BTreeMap<String, String> = map
            .data
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !k.starts_with("enforced."))
            .collect();
        data.insert("heartbeat".into(), kk_spec::time::rfc3339(Timestamp::now()));
        for (pool, uid) in enforced {
            data.insert(format!("enforced.{pool}"), uid.clone());
        }
        map.data = Some(data);
        match api
            .replace(FIELD_MANAGER, &PostParams::default(), &map)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(KubeCallError::from_kube(action(), e)),
        }
    }
    Err(KubeCallError::Refused {
        call: action(),
        code: 409,
        reason: "Conflict".into(),
        message: "conflicted three times in a row".into(),
    })
}

/// A Warning Event on the NodePool: its budget, spend and the node that would pass it.
async fn post_event(client: &Client, verdict: &PoolVerdict, message: &str) -> bool {
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", verdict.pool)),
            namespace: Some(EVENT_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodePool".into()),
            name: Some(verdict.pool.clone()),
            uid: Some(verdict.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some("BudgetExhausted".into()),
        message: Some(format!(
            "{message}: pods that need another node stay Pending (raise the budget, or free room: kubean-karpenter plan --disrupt)"
        )),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some("HoldLaunches".into()),
        reporting_component: Some(FIELD_MANAGER.into()),
        reporting_instance: Some(FIELD_MANAGER.into()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some(FIELD_MANAGER.into()),
            host: None,
        }),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), EVENT_NAMESPACE);
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => true,
        Err(e) => {
            let e = KubeCallError::from_kube("create Event", e);
            tracing::warn!(error = %e, "cannot post the Event");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_is_told_from_lowering() {
        assert!(lowers(Some(&"8".to_owned()), "4166m"));
        assert!(!lowers(Some(&"4".to_owned()), "4166m"));
        assert!(lowers(None, "4"));
    }

    #[test]
    fn the_live_limits_are_read_from_the_nodepools() {
        let docs = vec![(
            "cluster:nodepools#0".to_owned(),
            json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"},
                 "spec": {"limits": {"cpu": "4166m", "memory": 64}}},
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
            ]})
            .to_string(),
        )];
        let live = live_limits(&docs);
        assert_eq!(live.len(), 1);
        assert_eq!(live["a"]["cpu"], "4166m");
        assert_eq!(live["a"]["memory"], "64");
    }

    #[test]
    fn the_metrics_name_each_pool() {
        let m = BudgetMetrics::default();
        *m.verdicts.lock().unwrap() = vec![PoolVerdict {
            pool: "lab".into(),
            uid: "u".into(),
            resource: "cpu".into(),
            limit: Some("4166m".into()),
            budget: 0.2,
            spend: 0.192,
            warn_percent: 80,
            exhausted: Some("x".into()),
            problem: None,
        }];
        let text = m.exposition();
        assert!(text.contains("kubean_karpenter_spend_per_hour{pool=\"lab\"} 0.192\n"));
        assert!(text.contains("kubean_karpenter_budget_per_hour{pool=\"lab\"} 0.2\n"));
        assert!(text.contains("kubean_karpenter_budget_exhausted{pool=\"lab\"} 1\n"));
        assert!(text.contains("kubean_karpenter_budget_warn_per_hour{pool=\"lab\"} 0.16"));
    }
}
