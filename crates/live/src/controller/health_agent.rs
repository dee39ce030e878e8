//! The node health agent (`kubean-karpenter controller --health-agent`), one per node of a
//! pool with `health` on: it reads this boot's kernel log (`/dev/kmsg`, or a file in tests),
//! judges each line with kk-health, and writes the node conditions Karpenter's node repair
//! reads — on its own Node only, as its admission policy enforces — with a Warning Event per
//! fault and counters on `/metrics`.
//!
//! It writes a condition False at the first fatal line and never back to True while the boot
//! lasts; a new boot starts healthy (the fault's line is gone from its log). A condition
//! written False in this boot is kept across a restart of the agent, even when the kernel's
//! ring buffer has dropped the line since. `lastTransitionTime` stays put while a status does
//! not change, so Karpenter's toleration is not restarted.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
pub use kk_health::Watch;
use kk_health::{Condition, Finding, Monitor, Severity};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::kube_error::KubeCallError;

/// The field manager of every write (so `kubectl get node -o yaml --show-managed-fields` says
/// who set a condition).
pub const FIELD_MANAGER: &str = "kubean-karpenter-health-agent";
/// Where the agent's Events go: Node Events live in `default`, as the kubelet's do.
pub const EVENT_NAMESPACE: &str = "default";
/// The same Event reason again within this long is not posted again.
const EVENT_REPEAT_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct HealthAgentConfig {
    /// The Node this agent runs on (`spec.nodeName` through the downward API).
    pub node: String,
    /// `/dev/kmsg`, or a file (tests, replays).
    pub kernel_log: PathBuf,
    pub watch: Watch,
    /// This boot's ID (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// How often a file (or an idle `/dev/kmsg`) is looked at again.
    pub poll: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum HealthAgentError {
    #[error("{path}: {source}")]
    Log {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Kube(#[from] KubeCallError),
    #[error("cannot build a client: {0}")]
    Client(#[source] kube::Error),
    #[error("listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the log reader hands the agent.
enum LogRead {
    Line(String),
    /// Everything written so far has been read.
    CaughtUp,
    Failed(std::io::Error),
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    /// (reason, severity) → findings.
    findings: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// The conditions as last written.
    conditions: Mutex<Vec<Condition>>,
    patch_errors: AtomicU64,
}

impl AgentMetrics {
    fn exposition(&self, node: &str, pool: &str) -> String {
        let mut out = String::new();
        out.push_str("# HELP kubean_karpenter_node_health_findings_total Kernel-log faults the health agent read, by reason and severity.\n");
        out.push_str("# TYPE kubean_karpenter_node_health_findings_total counter\n");
        if let Ok(findings) = self.findings.lock() {
            for ((reason, severity), n) in findings.iter() {
                out.push_str(&format!(
                    "kubean_karpenter_node_health_findings_total{{node=\"{node}\",nodepool=\"{pool}\",reason=\"{reason}\",severity=\"{severity}\"}} {n}\n"
                ));
            }
        }
        out.push_str("# HELP kubean_karpenter_node_health_condition The node conditions the health agent owns: 1 healthy, 0 not.\n");
        out.push_str("# TYPE kubean_karpenter_node_health_condition gauge\n");
        if let Ok(conditions) = self.conditions.lock() {
            for c in conditions.iter() {
                out.push_str(&format!(
                    "kubean_karpenter_node_health_condition{{node=\"{node}\",nodepool=\"{pool}\",condition=\"{}\",reason=\"{}\"}} {}\n",
                    c.kind,
                    c.reason,
                    u8::from(c.healthy)
                ));
            }
        }
        out.push_str("# HELP kubean_karpenter_node_health_patch_errors_total Failed writes of the node's conditions.\n");
        out.push_str("# TYPE kubean_karpenter_node_health_patch_errors_total counter\n");
        out.push_str(&format!(
            "kubean_karpenter_node_health_patch_errors_total{{node=\"{node}\"}} {}\n",
            self.patch_errors.load(Ordering::Relaxed)
        ));
        out
    }
}

/// The agent: one client, one node.
pub struct HealthAgent {
    client: kube::Client,
    config: HealthAgentConfig,
    metrics: Arc<AgentMetrics>,
    listener: Option<super::listener::HttpListener>,
}

impl HealthAgent {
    pub fn new(
        client_config: kube::Config,
        config: HealthAgentConfig,
    ) -> Result<HealthAgent, HealthAgentError> {
        let client = kube::Client::try_from(client_config).map_err(HealthAgentError::Client)?;
        Ok(HealthAgent {
            client,
            config,
            metrics: Arc::default(),
            listener: None,
        })
    }

    /// Listens for `/metrics` and `/healthz`; returns the bound address (port 0 works).
    pub async fn bind(&mut self, addr: SocketAddr) -> Result<SocketAddr, HealthAgentError> {
        let listener =
            super::listener::HttpListener::bind(addr, super::listener::Limits::default())
                .await
                .map_err(|source| HealthAgentError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| HealthAgentError::Bind { addr, source })?;
        self.listener = Some(listener);
        Ok(local)
    }

    /// Reads the log and writes the conditions until `shutdown` completes. Returns an error
    /// only when it cannot start (the Node unreadable, the log unopenable); a failed write is
    /// logged, counted and tried again with the next change or catch-up.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), HealthAgentError> {
        let HealthAgent {
            client,
            config,
            metrics,
            listener,
        } = self;
        let nodes: Api<Node> = Api::all(client.clone());
        let node = nodes
            .get(&config.node)
            .await
            .map_err(|e| KubeCallError::from_kube(format!("get Node {}", config.node), e))?;
        let mut monitor = Monitor::new(config.watch, &config.boot_id);
        let mut written = BTreeMap::new();
        for c in node
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            monitor.keep(
                &c.type_,
                &c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or(""),
            );
            written.insert(
                c.type_.clone(),
                (c.status.clone(), c.last_transition_time.clone()),
            );
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        if let Some(listener) = listener {
            // The pool labels the series, so an alert can count a pool's sick nodes as
            // Karpenter's breaker does.
            let pool = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"))
                .cloned()
                .unwrap_or_default();
            let router = Router::new()
                .route("/metrics", get(exposition))
                .route("/healthz", get(|| async { "ok" }))
                .with_state((metrics.clone(), config.node.clone(), pool));
            tokio::spawn(listener.serve(router, stop_rx.clone()));
        }
        let mut lines = read_log(&config)?;
        let mut writer = Writer {
            nodes,
            events: Api::namespaced(client, EVENT_NAMESPACE),
            node_name: config.node.clone(),
            node_uid: node.metadata.uid.clone().unwrap_or_default(),
            written,
            posted: BTreeMap::new(),
            metrics: metrics.clone(),
            dirty: true,
        };
        let mut caught_up = false;
        tokio::pin!(shutdown);
        loop {
            let next = tokio::select! {
                next = lines.recv() => next,
                () = &mut shutdown => break,
            };
            match next {
                Some(LogRead::Line(line)) => {
                    if let Some((finding, change)) = monitor.read(&line) {
                        writer.finding(&finding).await;
                        if change.is_some() {
                            writer.dirty = true;
                        }
                    }
                }
                Some(LogRead::CaughtUp) => caught_up = true,
                Some(LogRead::Failed(e)) => {
                    tracing::warn!(error = %e, log = %config.kernel_log.display(), "cannot read the kernel log; trying again");
                }
                None => break,
            }
            // The backlog first: the first write already says what this boot's log holds.
            if caught_up && writer.dirty {
                writer.conditions(&monitor.conditions()).await;
            }
        }
        let _ = stop_tx.send(true);
        Ok(())
    }
}

async fn exposition(State((m, node, pool)): State<(Arc<AgentMetrics>, String, String)>) -> String {
    m.exposition(&node, &pool)
}

/// The writes to the apiserver, and what they last said.
struct Writer {
    nodes: Api<Node>,
    events: Api<Event>,
    node_name: String,
    node_uid: String,
    /// Condition type → (status, lastTransitionTime) as the Node holds them.
    written: BTreeMap<String, (String, Option<Time>)>,
    /// Event reason → when it was last posted.
    posted: BTreeMap<String, Timestamp>,
    metrics: Arc<AgentMetrics>,
    /// Conditions not yet written as they stand.
    dirty: bool,
}

impl Writer {
    async fn conditions(&mut self, conditions: &[Condition]) {
        let now = Timestamp::now();
        let mut entries = Vec::new();
        let mut next = self.written.clone();
        for c in conditions {
            let status = c.status().to_owned();
            let since = match self.written.get(c.kind) {
                Some((old, Some(t))) if *old == status => t.clone(),
                _ => Time(now),
            };
            entries.push(json!({
                "type": c.kind,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
                "lastHeartbeatTime": Time(now),
            }));
            next.insert(c.kind.to_owned(), (status, Some(since)));
        }
        // Strategic merge by `type`: only our entries, never the kubelet's.
        let patch = json!({"status": {"conditions": entries}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self
            .nodes
            .patch_status(&self.node_name, &params, &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => {
                self.written = next;
                self.dirty = false;
                if let Ok(mut m) = self.metrics.conditions.lock() {
                    *m = conditions.to_vec();
                }
                for c in conditions.iter().filter(|c| !c.healthy) {
                    tracing::warn!(node = %self.node_name, condition = c.kind, reason = %c.reason, message = %c.message, "node condition False");
                }
            }
            Err(e) => {
                self.metrics.patch_errors.fetch_add(1, Ordering::Relaxed);
                let e =
                    KubeCallError::from_kube(format!("patch Node {} status", self.node_name), e);
                tracing::warn!(error = %e, "cannot write the node's conditions; trying again with the next line");
            }
        }
    }

    async fn finding(&mut self, finding: &Finding) {
        let severity = match finding.severity {
            Severity::Fatal => "fatal",
            Severity::Warning => "warning",
        };
        if let Ok(mut f) = self.metrics.findings.lock() {
            *f.entry((finding.reason.clone(), severity)).or_default() += 1;
        }
        let now = Timestamp::now();
        if let Some(last) = self.posted.get(&finding.reason)
            && now.duration_since(*last).unsigned_abs() < EVENT_REPEAT_AFTER
        {
            return;
        }
        self.posted.insert(finding.reason.clone(), now);
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", self.node_name)),
                namespace: Some(EVENT_NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.node_name.clone()),
                uid: Some(self.node_uid.clone()),
                ..ObjectReference::default()
            },
            reason: Some(finding.reason.clone()),
            message: Some(finding.message.clone()),
            type_: Some("Warning".into()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some(if finding.severity == Severity::Fatal {
                "MarkUnhealthy".into()
            } else {
                "Observed".into()
            }),
            reporting_component: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(self.node_name.clone()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(FIELD_MANAGER.into()),
                host: Some(self.node_name.clone()),
            }),
            ..Event::default()
        };
        if let Err(e) = self.events.create(&PostParams::default(), &event).await {
            let e = KubeCallError::from_kube("create Event", e);
            tracing::warn!(error = %e, "cannot post the Event");
        }
    }
}

/// Reads the log on a thread of its own (a `/dev/kmsg` read blocks until a record comes):
/// every line, then [`LogRead::CaughtUp`] whenever it has read all there is so far. A file is
/// looked at again every `poll`; `/dev/kmsg` is opened non-blocking and polled the same way,
/// and a record the kernel overwrote before it was read (`EPIPE`) is skipped.
fn read_log(config: &HealthAgentConfig) -> Result<mpsc::Receiver<LogRead>, HealthAgentError> {
    use std::os::unix::fs::OpenOptionsExt;
    /// `O_NONBLOCK` on Linux.
    const O_NONBLOCK: i32 = 0o4000;
    let path = config.kernel_log.clone();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(&path)
        .map_err(|source| HealthAgentError::Log {
            path: path.display().to_string(),
            source,
        })?;
    let poll = config.poll;
    let (tx, rx) = mpsc::channel(1024);
    std::thread::spawn(move || {
        let mut lines = Lines::default();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) => {
                    if tx.blocking_send(LogRead::CaughtUp).is_err() {
                        return;
                    }
                    std::thread::sleep(poll);
                }
                Ok(n) => {
                    for text in lines.push(&buf[..n]) {
                        if tx.blocking_send(LogRead::Line(text)).is_err() {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if tx.blocking_send(LogRead::CaughtUp).is_err() {
                        return;
                    }
                    std::thread::sleep(poll);
                }
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if tx.blocking_send(LogRead::Failed(e)).is_err() {
                        return;
                    }
                    std::thread::sleep(poll);
                }
            }
        }
    });
    Ok(rx)
}

/// The longest line kept: a kernel message is at most a few KiB (`/dev/kmsg` records are
/// bounded by the kernel); the rest of a longer line in a file is dropped, so a file without
/// newlines cannot grow the agent's memory.
const MAX_LINE: usize = 16 * 1024;

/// What the log gives, cut into lines of at most [`MAX_LINE`] bytes.
#[derive(Debug, Default)]
struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// The lines `bytes` completes; `/dev/kmsg` continuation lines (` KEY=value`) carry no
    /// message and are left out.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let room = MAX_LINE.saturating_sub(self.pending.len());
            self.pending
                .extend_from_slice(&piece[..piece.len().min(room)]);
            if piece.last() == Some(&b'\n') {
                let line = std::mem::take(&mut self.pending);
                if line.first() != Some(&b' ') {
                    out.push(String::from_utf8_lossy(&line).into_owned());
                }
            }
        }
        out
    }
}

/// This boot's ID as the kernel gives it.
pub fn boot_id(path: &std::path::Path) -> Result<String, HealthAgentError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| HealthAgentError::Log {
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_across_reads_bounded_and_continuations_dropped() {
        let mut lines = Lines::default();
        assert!(
            lines
                .push(b"6,1,10,-;NVRM: Xid (PCI:0000:00:1e): 7")
                .is_empty()
        );
        assert_eq!(
            lines.push(b"9, off the bus\n SUBSYSTEM=pci\n4,2,20,-;next\n"),
            [
                "6,1,10,-;NVRM: Xid (PCI:0000:00:1e): 79, off the bus\n",
                "4,2,20,-;next\n"
            ]
        );
        let long = vec![b'x'; 3 * MAX_LINE];
        assert!(lines.push(&long).is_empty());
        assert!(
            lines.pending.len() <= MAX_LINE,
            "a line without its end is bounded"
        );
        let kept = lines.push(b"tail\nafter\n");
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].len(), MAX_LINE);
        assert_eq!(kept[1], "after\n");
    }
}
