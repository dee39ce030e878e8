//! The in-cluster controller (`kubean-karpenter controller`): three loops under one leader
//! election, each its own module —
//! - [`rotator`]: the join-token rotator (below);
//! - [`csr_approver`]: approves node CSRs only for instances a NodeClaim names;
//! - [`orphan_sweep`]: deletes Nodes whose instance no NodeClaim owns.
//!
//! [`health_agent`] is the binary's other in-cluster role: one per node of a pool with
//! `health` on, no leader, writing its own Node's health conditions. [`budget`] is a third,
//! under its own Lease: it keeps budgeted NodePools' limits where their spend budgets put them.
//!
//! Module dependencies point one way: `metrics` reads `leader`'s state and the approver's
//! decisions; `leader` reports through [`leader::LeaseObserver`] and knows nothing above it.
//!
//! The rotator keeps a valid bootstrap token in the join store at all times. On start and every tick
//! the leader reads the store; when it holds nothing, a token that no longer authenticates,
//! an expired token, or one past `rotate_at` of its lifetime, it creates a new token Secret
//! and publishes it together with the replaced token's ID, which it deletes once `overlap`
//! has passed (nodes that read the old token just before may still be joining). It never
//! reads a Secret; expired tokens are left to kube-controller-manager's tokencleaner. Two or
//! more replicas elect a leader through a Lease.
//! `/metrics`, `/healthz` and `/readyz` are served on `metrics_addr` by [`listener`], which
//! bounds what an unauthenticated client can hold.

pub mod budget;
pub mod csr_approver;
pub mod health_agent;
mod leader;
pub mod listener;
mod metrics;
pub mod orphan_sweep;
mod rotator;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

pub use leader::{Leadership, LeaseConfig};
pub use metrics::Metrics;
pub use rotator::{Reason, assess, rotation_point};

use crate::store::{JoinStore, PublishError, StoreError};
use crate::token::{TokenError, format_duration};

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Publish(Box<PublishError>),
    #[error("no longer the leader; leaving the rest to the new one")]
    NotLeader,
    #[error("reconcile timed out after {0}")]
    Timeout(String),
    #[error("invalid controller configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl From<PublishError> for ControllerError {
    fn from(e: PublishError) -> Self {
        ControllerError::Publish(Box::new(e))
    }
}

/// Everything the rotator needs besides its clients.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Cluster name: labels our token Secrets and tags the store.
    pub cluster: String,
    /// `host:port` nodes join (published as KK_API_SERVER_ENDPOINT).
    pub api_server_endpoint: String,
    /// `sha256:<hex>` (published as KK_CA_CERT_HASH).
    pub ca_cert_hash: String,
    /// Lifetime of each new token.
    pub ttl: Duration,
    /// Fraction of a token's lifetime after which it is replaced (0 < rotate_at < 1).
    pub rotate_at: f64,
    /// How long a replaced token keeps working before the rotator deletes it: longer than a
    /// node takes from reading the store to its CSR (Karpenter's registration timeout is 15 min).
    pub overlap: Duration,
    /// How often the leader decides pending node CSRs from our join group (`None`: the
    /// approver is off; see [`csr_approver`]).
    pub approve_every: Option<Duration>,
    /// With the approver: remove instance-named Nodes no NodeClaim names once they are this
    /// old (`None`: never; see [`orphan_sweep`]).
    pub orphan_grace: Option<Duration>,
    /// How often the leader checks the store when all is well.
    pub tick: Duration,
    /// How soon it tries again after a failure.
    pub retry: Duration,
    pub lease: LeaseConfig,
}

impl ControllerConfig {
    /// Refuses settings under which the store could hold an expired token.
    pub fn validate(&self) -> Result<(), ControllerError> {
        let bad = |m: String| Err(ControllerError::Config(m));
        if !(self.rotate_at > 0.0 && self.rotate_at < 1.0) {
            return bad(format!(
                "--rotate-at {} must be between 0 and 1 (exclusive)",
                self.rotate_at
            ));
        }
        if self.ttl < Duration::from_secs(2) {
            return bad("--ttl must be at least 2s".into());
        }
        if self.ttl > crate::token::TTL_CEILING {
            return bad(format!(
                "--ttl {} is over the {} ceiling: the rotator keeps tokens short-lived",
                format_duration(self.ttl),
                format_duration(crate::token::TTL_CEILING)
            ));
        }
        if self.tick.is_zero() || self.retry.is_zero() {
            return bad("--tick and --retry must be positive".into());
        }
        let margin = self.ttl.mul_f64(1.0 - self.rotate_at);
        if margin <= self.tick {
            return bad(format!(
                "a token would expire {} after its rotation point, within one --tick ({}): lower --rotate-at or --tick, or raise --ttl",
                format_duration(margin),
                format_duration(self.tick)
            ));
        }
        let interval = self.ttl.mul_f64(self.rotate_at);
        if self.overlap.is_zero() || self.overlap > margin || self.overlap >= interval {
            return bad(format!(
                "--overlap {} must be positive, at most the {} a replaced token has left, and shorter than the {} between rotations",
                format_duration(self.overlap),
                format_duration(margin),
                format_duration(interval)
            ));
        }
        if self.lease.duration < Duration::from_secs(3) {
            return bad("--lease-duration must be at least 3s".into());
        }
        if self.lease.identity.is_empty() {
            return bad("empty --identity".into());
        }
        crate::store::validate_endpoint(&self.api_server_endpoint)
            .map_err(|e| ControllerError::Config(e.to_string()))?;
        if !crate::store::is_ca_cert_hash(&self.ca_cert_hash) {
            return bad("the CA cert hash is not sha256:<64 hex digits>".into());
        }
        Ok(())
    }
}

/// A holder identity: `$POD_NAME`, else the host name, plus a random suffix (two processes
/// on one host must not share an identity).
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kubean-karpenter".into());
    let suffix = crate::token::BootstrapToken::generate()
        .map(|t| t.id().to_owned())
        .unwrap_or_default();
    format!("{base}_{suffix}")
}

/// Structured logs on standard error: text or JSON, level from `RUST_LOG` (default info).
pub fn init_logging(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,aws_config=warn,aws_smithy_runtime=warn,hyper=warn,kube=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().with_current_span(false).try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
}

/// The rotator: build it, optionally bind its HTTP endpoints, then `run` it.
pub struct Controller {
    client: Client,
    /// The apiserver's address and CA, for authenticating as the stored token.
    probe: kube::Config,
    /// `None`: the CSR approver alone ([`Controller::approver_only`]), no rotation.
    store: Option<JoinStore>,
    config: ControllerConfig,
    leadership: Arc<Leadership>,
    metrics: Arc<Metrics>,
    listener: Option<listener::HttpListener>,
}

impl Controller {
    /// `kube_config`: the controller's own client configuration (its credentials for the
    /// API calls; its address and CA also for checking the stored token).
    pub fn new(
        kube_config: kube::Config,
        store: JoinStore,
        config: ControllerConfig,
    ) -> Result<Self, ControllerError> {
        config.validate()?;
        Self::build(kube_config, Some(store), config)
    }

    /// The CSR approver on its own: no store, no tokens, no AWS. It runs under its own
    /// service account, so the rotator's credentials cannot approve a node and the
    /// approver's cannot mint a token.
    pub fn approver_only(
        kube_config: kube::Config,
        approve_every: Duration,
        orphan_grace: Option<Duration>,
        lease: LeaseConfig,
    ) -> Result<Self, ControllerError> {
        if approve_every.is_zero() {
            return Err(ControllerError::Config(
                "--approve-interval must be positive".into(),
            ));
        }
        if lease.duration < Duration::from_secs(3) || lease.identity.is_empty() {
            return Err(ControllerError::Config(
                "--lease-duration must be at least 3s and --identity not empty".into(),
            ));
        }
        let config = ControllerConfig {
            cluster: String::new(),
            api_server_endpoint: String::new(),
            ca_cert_hash: String::new(),
            ttl: crate::token::TTL_CEILING,
            rotate_at: 0.5,
            overlap: Duration::ZERO,
            approve_every: Some(approve_every),
            orphan_grace,
            tick: approve_every,
            retry: approve_every,
            lease,
        };
        Self::build(kube_config, None, config)
    }

    fn build(
        kube_config: kube::Config,
        store: Option<JoinStore>,
        config: ControllerConfig,
    ) -> Result<Self, ControllerError> {
        let client = Client::try_from(kube_config.clone())
            .map_err(|e| ControllerError::Config(format!("cannot build a client: {e}")))?;
        let leadership = Arc::new(Leadership::default());
        let stall_after = (config.tick.max(config.retry) * 3)
            .max(config.lease.duration * 2)
            .max(Duration::from_secs(60))
            + Duration::from_secs(90);
        let metrics = Arc::new(Metrics::new(
            leadership.clone(),
            stall_after,
            config.lease.duration * 2,
        ));
        Ok(Self {
            client,
            probe: kube_config,
            store,
            config,
            leadership,
            metrics,
            listener: None,
        })
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Listens for `/metrics`, `/healthz`, `/readyz` within the default [`listener::Limits`];
    /// returns the bound address (port 0 works).
    pub async fn bind(&mut self, addr: SocketAddr) -> Result<SocketAddr, ControllerError> {
        let listener = listener::HttpListener::bind(addr, listener::Limits::default())
            .await
            .map_err(|source| ControllerError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ControllerError::Bind { addr, source })?;
        self.listener = Some(listener);
        Ok(local)
    }

    /// The bound listener's counters (`None` before [`Controller::bind`]).
    pub fn listener_stats(&self) -> Option<listener::ListenerStats> {
        self.listener.as_ref().map(listener::HttpListener::stats)
    }

    /// Runs until `shutdown` completes, then finishes the current step, releases the lease
    /// and returns. Everything runs inside this one future: dropping or aborting it stops
    /// the whole controller (what a crash looks like to the other replicas).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Controller {
            client,
            probe,
            store,
            config,
            leadership,
            metrics,
            listener,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let margin = config.ttl.mul_f64(1.0 - config.rotate_at);
        if store.is_some() && margin <= config.lease.duration + config.tick {
            tracing::warn!(
                margin = %format_duration(margin),
                "a token outlives its rotation point by less than a lease duration plus a tick: \
                 during a leader change the store may briefly hold an expired token"
            );
        }
        tracing::info!(
            cluster = %config.cluster,
            store = %store.as_ref().map_or("none (CSR approver only)".into(), JoinStore::describe),
            identity = %config.lease.identity,
            lease = %format!("{}/{}", config.lease.namespace, config.lease.name),
            ttl = %format_duration(config.ttl),
            rotate_at = config.rotate_at,
            "join-token rotator starting"
        );
        let elector = leader::run(
            client.clone(),
            config.lease.clone(),
            &leadership,
            metrics.as_ref(),
            stop_rx.clone(),
            done_rx,
        );
        let reconciler = async {
            if let Some(store) = &store {
                reconcile_loop(
                    &client,
                    &probe,
                    store,
                    &config,
                    &leadership,
                    &metrics,
                    stop_rx.clone(),
                )
                .await;
                let _ = done_tx.send(true);
            }
        };
        let approver = async {
            let Some(every) = config.approve_every else {
                return;
            };
            let mut stop = stop_rx.clone();
            while !*stop.borrow() {
                if store.is_none() {
                    // Alone, the approver's loop is what /healthz watches.
                    metrics.beat();
                }
                if leadership.is_leading() {
                    // Each call of a pass has its own timeout and the pass a budget; this
                    // outer limit is a backstop only.
                    match tokio::time::timeout(
                        csr_approver::PASS_LIMIT,
                        csr_approver::approve_pending(&client, &config.lease.namespace),
                    )
                    .await
                    {
                        Ok(Ok(pass)) => {
                            for (_, decision) in &pass.decided {
                                metrics.csr_decided(decision);
                            }
                            // One failed CSR never stops the others: each failure is counted
                            // and logged, and its CSR waits for the next pass.
                            for e in &pass.errors {
                                metrics.error();
                                tracing::error!(error = %e, "a node CSR was not decided");
                            }
                        }
                        Ok(Err(e)) => {
                            metrics.error();
                            tracing::error!(error = %e, "deciding node CSRs failed");
                        }
                        Err(_) => {
                            metrics.error();
                            tracing::error!("deciding node CSRs timed out");
                        }
                    }
                    if let Some(grace) = config.orphan_grace {
                        match tokio::time::timeout(
                            Duration::from_secs(30),
                            orphan_sweep::remove_orphaned_nodes(&client, grace),
                        )
                        .await
                        {
                            Ok(Ok(removed)) => metrics.orphans_removed(removed.len()),
                            Ok(Err(e)) => {
                                metrics.error();
                                tracing::error!(error = %e, "removing orphaned Nodes failed");
                            }
                            Err(_) => {
                                metrics.error();
                                tracing::error!("removing orphaned Nodes timed out");
                            }
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => {}
                }
            }
            if store.is_none() {
                let _ = done_tx.send(true);
            }
        };
        let server = async {
            if let Some(listener) = listener {
                listener
                    .serve(metrics::router(metrics.clone()), stop_rx.clone())
                    .await;
            }
        };
        let trigger = async {
            shutdown.await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        };
        tokio::join!(elector, reconciler, approver, server, trigger);
        tracing::info!("stopped");
    }
}

async fn reconcile_loop(
    client: &Client,
    probe: &kube::Config,
    store: &JoinStore,
    config: &ControllerConfig,
    leadership: &Leadership,
    metrics: &Metrics,
    mut stop: watch::Receiver<bool>,
) {
    // A step never takes longer than this (kube and AWS calls have their own timeouts).
    let step_timeout = Duration::from_secs(90);
    let mut state = rotator::State::default();
    while !*stop.borrow() {
        metrics.beat();
        let leading = leadership.is_leading();
        let outcome = if leading {
            match tokio::time::timeout(
                step_timeout,
                rotator::reconcile(
                    client, probe, store, config, leadership, metrics, &mut state,
                ),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(ControllerError::Timeout(format_duration(step_timeout))),
            }
        } else {
            match tokio::time::timeout(step_timeout, rotator::observe(store, metrics)).await {
                Ok(r) => r.map(|_| ()).map_err(ControllerError::from),
                Err(_) => Err(ControllerError::Timeout(format_duration(step_timeout))),
            }
        };
        let wait = match outcome {
            Ok(()) => config.tick,
            Err(ControllerError::NotLeader) => config.tick,
            Err(e) => {
                metrics.error();
                tracing::error!(
                    error = %e,
                    leader = leading,
                    retry_in = %format_duration(config.retry),
                    "reconcile failed"
                );
                config.retry
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = leadership.acquired.notified() => {}
            _ = stop.changed() => {}
        }
    }
}

/// Completes on SIGTERM (what the kubelet sends) or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered_args() -> Vec<String> {
        let cluster = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
            .unwrap()
            .spec;
        let pem = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
        let bundle = kk_render::render(&cluster, &pem).unwrap();
        let (_, deployment) = bundle
            .manifests()
            .into_iter()
            .find(|(p, o)| p == "rotator/join-token-rotator.yaml" && o["kind"] == "Deployment")
            .unwrap();
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    }

    fn arg<'a>(args: &'a [String], flag: &str) -> &'a str {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{flag}=")))
            .unwrap_or_else(|| panic!("no --{flag} in {args:?}"))
    }

    /// The rendered rotator keeps tokens short-lived and its overlap covers Karpenter's
    /// registration timeout: 15 min (kubernetes-sigs/karpenter
    /// pkg/controllers/nodeclaim/lifecycle/liveness.go, the hard-coded registration TTL that
    /// designs/configurable-registeration-ttl.md describes).
    #[test]
    fn the_rendered_rotator_is_short_lived_with_an_overlap_past_karpenters_timeout() {
        let args = rendered_args();
        let parse = |f: &str| crate::token::parse_duration(arg(&args, f)).unwrap();
        let config = ControllerConfig {
            cluster: "demo".into(),
            api_server_endpoint: "api.demo.internal:6443".into(),
            ca_cert_hash: arg(&args, "ca-cert-hash").to_owned(),
            ttl: parse("ttl"),
            rotate_at: arg(&args, "rotate-at").parse().unwrap(),
            overlap: parse("overlap"),
            // The rotator runs with --no-csr-approver: the approver is its own Deployment.
            approve_every: None,
            orphan_grace: None,
            tick: parse("tick"),
            retry: parse("retry"),
            lease: LeaseConfig {
                namespace: "kube-system".into(),
                name: "x".into(),
                identity: "x".into(),
                duration: parse("lease-duration"),
            },
        };
        config.validate().unwrap();
        assert!(config.ttl <= Duration::from_secs(2 * 3600), "{args:?}");
        assert!(config.overlap >= Duration::from_secs(15 * 60), "{args:?}");
        // The replaced token is still valid for the whole overlap.
        assert!(config.ttl.mul_f64(1.0 - config.rotate_at) >= config.overlap);
    }

    #[test]
    fn an_overlap_the_old_token_cannot_cover_or_a_ttl_over_a_day_is_refused() {
        let mut config = ControllerConfig {
            cluster: "demo".into(),
            api_server_endpoint: "api.demo.internal:6443".into(),
            ca_cert_hash: format!("sha256:{}", "a".repeat(64)),
            ttl: Duration::from_secs(7200),
            rotate_at: 0.5,
            overlap: Duration::from_secs(1200),
            approve_every: None,
            orphan_grace: None,
            tick: Duration::from_secs(60),
            retry: Duration::from_secs(10),
            lease: LeaseConfig {
                namespace: "kube-system".into(),
                name: "x".into(),
                identity: "x".into(),
                duration: Duration::from_secs(15),
            },
        };
        config.validate().unwrap();
        config.overlap = Duration::from_secs(3601);
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("--overlap")
        );
        config.overlap = Duration::ZERO;
        assert!(config.validate().is_err());
        config.overlap = Duration::from_secs(1200);
        config.ttl = Duration::from_secs(25 * 3600);
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("ceiling")
        );
    }
}
