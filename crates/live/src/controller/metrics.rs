//! `/metrics` (Prometheus text format), `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use jiff::Timestamp;

use super::csr_approver::{APPROVED_REASON, CONTESTED_REASON, DENIED_REASON, Decision, Refusal};
use super::leader::{Leadership, LeaseObserver};

/// The labels of `kubean_karpenter_csr_decisions_total`, in exposition order: every
/// `(condition, reason)` the approver writes, so each series exists (at 0) from the start.
pub const CSR_DECISION_LABELS: [(&str, &str); 3] = [
    ("Approved", APPROVED_REASON),
    ("Denied", CONTESTED_REASON),
    ("Denied", DENIED_REASON),
];

const UNKNOWN: i64 = i64::MIN;

/// Counters and gauges of one replica.
#[derive(Debug)]
pub struct Metrics {
    rotations: AtomicU64,
    errors: AtomicU64,
    deleted: AtomicU64,
    orphans: AtomicU64,
    /// Node CSR decisions, one counter per entry of [`CSR_DECISION_LABELS`].
    csr_decisions: [AtomicU64; CSR_DECISION_LABELS.len()],
    /// Denied node CSRs, one counter per [`Refusal::ALL`] entry.
    csr_denied: [AtomicU64; Refusal::ALL.len()],
    /// Unix seconds of the stored token's expiration; `UNKNOWN` before the first read.
    expiry: AtomicI64,
    leadership: Arc<Leadership>,
    /// When the control loops last went round (liveness).
    heartbeat: Mutex<Instant>,
    /// When the apiserver last answered a lease request (readiness).
    apiserver_ok: Mutex<Option<Instant>>,
    /// Liveness fails when the loops have not gone round for this long.
    stall_after: Duration,
    /// Readiness fails when the apiserver has not answered for this long.
    unready_after: Duration,
}

impl Metrics {
    pub(crate) fn new(
        leadership: Arc<Leadership>,
        stall_after: Duration,
        unready_after: Duration,
    ) -> Self {
        Self {
            rotations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            orphans: AtomicU64::new(0),
            csr_decisions: Default::default(),
            csr_denied: Default::default(),
            expiry: AtomicI64::new(UNKNOWN),
            leadership,
            heartbeat: Mutex::new(Instant::now()),
            apiserver_ok: Mutex::new(None),
            stall_after,
            unready_after,
        }
    }

    /// Tokens this replica created and published.
    pub fn rotations(&self) -> u64 {
        self.rotations.load(Ordering::Relaxed)
    }

    /// Failed reconciles, store reads and lease requests.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Expired tokens of ours this replica deleted.
    pub fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Relaxed)
    }

    /// Instance-named Nodes no NodeClaim owned that this replica removed.
    pub fn orphans(&self) -> u64 {
        self.orphans.load(Ordering::Relaxed)
    }

    /// Node CSRs this replica decided with `(condition, reason)` (0 for an unknown pair).
    pub fn csr_decisions(&self, condition: &str, reason: &str) -> u64 {
        CSR_DECISION_LABELS
            .iter()
            .position(|l| *l == (condition, reason))
            .map_or(0, |i| self.csr_decisions[i].load(Ordering::Relaxed))
    }

    /// Node CSRs this replica denied with the refusal labelled `reason` (0 for an unknown one).
    pub fn csr_denied(&self, reason: &str) -> u64 {
        Refusal::ALL
            .iter()
            .position(|r| r.label() == reason)
            .map_or(0, |i| self.csr_denied[i].load(Ordering::Relaxed))
    }

    /// Whether this replica holds the lease now.
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leading()
    }

    /// When the stored token expires, as last read.
    pub fn stored_expiration(&self) -> Option<Timestamp> {
        match self.expiry.load(Ordering::Relaxed) {
            UNKNOWN => None,
            s => Timestamp::from_second(s).ok(),
        }
    }

    pub(crate) fn rotated(&self) {
        self.rotations.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn deleted_one(&self) {
        self.deleted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn orphans_removed(&self, n: usize) {
        self.orphans.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn csr_decided(&self, decision: &Decision) {
        if let Some(i) = CSR_DECISION_LABELS
            .iter()
            .position(|l| *l == decision.condition())
        {
            self.csr_decisions[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(i) = decision
            .refusal()
            .and_then(|r| Refusal::ALL.iter().position(|a| *a == r))
        {
            self.csr_denied[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_expiration(&self, expiration: Option<Timestamp>) {
        self.expiry.store(
            expiration.map_or(UNKNOWN, |t| t.as_second()),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn beat(&self) {
        if let Ok(mut h) = self.heartbeat.lock() {
            *h = Instant::now();
        }
    }

    pub(crate) fn apiserver_answered(&self) {
        if let Ok(mut a) = self.apiserver_ok.lock() {
            *a = Some(Instant::now());
        }
    }

    pub fn is_live(&self) -> bool {
        self.heartbeat
            .lock()
            .map(|h| h.elapsed() < self.stall_after)
            .unwrap_or(false)
    }

    pub fn is_ready(&self) -> bool {
        self.apiserver_ok
            .lock()
            .map(|a| a.is_some_and(|t| t.elapsed() < self.unready_after))
            .unwrap_or(false)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, now: Timestamp) -> String {
        let expiry = match self.stored_expiration() {
            Some(t) => format!("{}", t.duration_since(now).as_secs_f64()),
            None => "NaN".to_owned(),
        };
        let mut out = String::new();
        let metric = |out: &mut String, name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        };
        metric(
            &mut out,
            "kubean_karpenter_join_token_expiry_seconds",
            "gauge",
            "Seconds until the bootstrap token in the join store expires (negative once expired, NaN before the store was read).",
            expiry,
        );
        metric(
            &mut out,
            "kubean_karpenter_join_token_rotations_total",
            "counter",
            "Bootstrap tokens this replica created and published to the join store.",
            self.rotations().to_string(),
        );
        metric(
            &mut out,
            "kubean_karpenter_expired_tokens_deleted_total",
            "counter",
            "Expired bootstrap tokens of ours this replica deleted.",
            self.deleted().to_string(),
        );
        metric(
            &mut out,
            "kubean_karpenter_orphan_nodes_removed_total",
            "counter",
            "Instance-named Nodes that no NodeClaim named, removed by this replica (the approver).",
            self.orphans().to_string(),
        );
        let decisions = CSR_DECISION_LABELS
            .iter()
            .map(|(condition, reason)| {
                format!(
                    "kubean_karpenter_csr_decisions_total{{condition=\"{condition}\",reason=\"{reason}\"}} {}\n",
                    self.csr_decisions(condition, reason)
                )
            })
            .collect::<String>();
        out.push_str(concat!(
            "# HELP kubean_karpenter_csr_decisions_total Node client CSRs of our join-token group this replica decided (the approver), by the condition and reason it wrote.\n",
            "# TYPE kubean_karpenter_csr_decisions_total counter\n",
        ));
        out.push_str(&decisions);
        let denied = Refusal::ALL
            .iter()
            .map(|r| {
                format!(
                    "kubean_karpenter_csr_denied_total{{reason=\"{}\"}} {}\n",
                    r.label(),
                    self.csr_denied(r.label())
                )
            })
            .collect::<String>();
        out.push_str(concat!(
            "# HELP kubean_karpenter_csr_denied_total Node client CSRs of our join-token group this replica denied (the approver), by why (a fixed set of reasons).\n",
            "# TYPE kubean_karpenter_csr_denied_total counter\n",
        ));
        out.push_str(&denied);
        metric(
            &mut out,
            "kubean_karpenter_errors_total",
            "counter",
            "Failed reconciles, join-store reads and lease requests.",
            self.errors().to_string(),
        );
        metric(
            &mut out,
            "kubean_karpenter_is_leader",
            "gauge",
            "1 while this replica holds the lease and rotates tokens.",
            u8::from(self.is_leader()).to_string(),
        );
        out
    }
}

async fn metrics(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        m.render(Timestamp::now()),
    )
}

async fn healthz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_live() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "control loop stalled\n")
    }
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_ready() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the apiserver has not answered lately\n",
        )
    }
}

pub(crate) fn router(m: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(m)
}

impl LeaseObserver for Metrics {
    fn apiserver_answered(&self) {
        Metrics::apiserver_answered(self);
    }

    fn error(&self) {
        Metrics::error(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(
            Arc::new(Leadership::default()),
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
    }

    fn family(text: &str, name: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(name))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_csr_decision_series_is_exposed_from_the_start() {
        let text = metrics().render(Timestamp::UNIX_EPOCH);
        assert_eq!(
            family(&text, "kubean_karpenter_csr_decisions_total"),
            [
                "# HELP kubean_karpenter_csr_decisions_total Node client CSRs of our join-token group this replica decided (the approver), by the condition and reason it wrote.",
                "# TYPE kubean_karpenter_csr_decisions_total counter",
                "kubean_karpenter_csr_decisions_total{condition=\"Approved\",reason=\"KubeanKarpenterNodeClaim\"} 0",
                "kubean_karpenter_csr_decisions_total{condition=\"Denied\",reason=\"KubeanKarpenterContested\"} 0",
                "kubean_karpenter_csr_decisions_total{condition=\"Denied\",reason=\"KubeanKarpenterRefused\"} 0",
            ]
        );
    }

    #[test]
    fn every_denial_reason_series_is_exposed_from_the_start() {
        let text = metrics().render(Timestamp::UNIX_EPOCH);
        let series = family(&text, "kubean_karpenter_csr_denied_total{");
        assert_eq!(series.len(), Refusal::ALL.len());
        for (line, refusal) in series.iter().zip(Refusal::ALL) {
            assert_eq!(
                *line,
                format!(
                    "kubean_karpenter_csr_denied_total{{reason=\"{}\"}} 0",
                    refusal.label()
                )
            );
        }
    }

    #[test]
    fn decisions_count_under_their_reason_and_render_the_same_every_time() {
        let m = metrics();
        m.csr_decided(&Decision::Approve("a".into()));
        m.csr_decided(&Decision::Deny(Refusal::InvalidName, "b".into()));
        m.csr_decided(&Decision::Deny(Refusal::InvalidName, "c".into()));
        m.csr_decided(&Decision::Deny(Refusal::Contested, "d".into()));
        assert_eq!(m.csr_decisions("Approved", APPROVED_REASON), 1);
        assert_eq!(m.csr_decisions("Denied", DENIED_REASON), 2);
        assert_eq!(m.csr_decisions("Denied", CONTESTED_REASON), 1);
        assert_eq!(m.csr_decisions("Approved", DENIED_REASON), 0);
        assert_eq!(m.csr_denied("invalid_name"), 2);
        assert_eq!(m.csr_denied("contested"), 1);
        assert_eq!(m.csr_denied("no_claim"), 0);
        assert_eq!(m.csr_denied("made_up"), 0);
        let text = m.render(Timestamp::UNIX_EPOCH);
        assert_eq!(text, m.render(Timestamp::UNIX_EPOCH));
        let series: Vec<_> = family(&text, "kubean_karpenter_csr_decisions_total{")
            .into_iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.to_owned())
            .collect();
        assert_eq!(series, ["1", "1", "2"]);
        // Each family's HELP and TYPE come once, before its samples.
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!((types, helps), (8, 8));
        let denied: Vec<_> = family(&text, "kubean_karpenter_csr_denied_total{")
            .into_iter()
            .filter(|l| !l.ends_with(" 0"))
            .collect();
        assert_eq!(
            denied,
            [
                "kubean_karpenter_csr_denied_total{reason=\"invalid_name\"} 2",
                "kubean_karpenter_csr_denied_total{reason=\"contested\"} 1",
            ]
        );
    }
}
