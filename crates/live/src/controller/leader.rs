//! Leader election through a `coordination.k8s.io/v1` Lease.
//!
//! The holder renews every duration/3. Another replica takes the lease once
//! `renewTime + leaseDurationSeconds` has passed (or the holder released it), writing with
//! the resourceVersion it read, so two replicas racing for it cannot both win. A holder
//! whose renewals fail stops acting 2/3 of a duration after its last successful renewal,
//! well before anyone else may take over. Expiry compares the lease's `renewTime` with this
//! process's wall clock, so replicas need roughly synchronised clocks (NTP), as with
//! every Kubernetes lease.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{Notify, watch};

use crate::token::{TokenError, error_chain};

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's holder identity (the pod name, by default).
    pub identity: String,
    /// `leaseDurationSeconds`; renewals every third of it.
    pub duration: Duration,
}

impl LeaseConfig {
    pub fn renew_period(&self) -> Duration {
        self.duration / 3
    }

    /// How long after its last successful renewal a holder keeps acting.
    pub fn renew_deadline(&self) -> Duration {
        self.duration - self.duration / 3
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// Whether this replica may act now. Shared by the elector and the reconciler.
#[derive(Debug, Default)]
pub struct Leadership {
    leading_until: Mutex<Option<Instant>>,
    /// Woken when this replica becomes the leader (the reconciler then acts at once).
    pub(crate) acquired: Notify,
}

impl Leadership {
    pub fn is_leading(&self) -> bool {
        self.leading_until
            .lock()
            .map(|u| u.is_some_and(|t| Instant::now() < t))
            .unwrap_or(false)
    }

    fn set(&self, until: Option<Instant>) {
        if let Ok(mut u) = self.leading_until.lock() {
            *u = until;
        }
    }
}

enum Outcome {
    Leading {
        acquired: bool,
    },
    Following {
        holder: Option<String>,
        wait: Duration,
    },
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(t)
}

fn our_spec(config: &LeaseConfig, now: Timestamp, acquire: Option<Timestamp>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.duration_seconds()),
        acquire_time: acquire.map(micro),
        renew_time: Some(micro(now)),
        ..Default::default()
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
) -> Result<Outcome, TokenError> {
    let action = || format!("lease {}/{}", config.namespace, config.name);
    let now = Timestamp::now();
    let Some(mut lease) = api
        .get_opt(&config.name)
        .await
        .map_err(|e| TokenError::from_kube(action(), e))?
    else {
        let mut spec = our_spec(config, now, Some(now));
        spec.lease_transitions = Some(0);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                labels: Some(
                    [(
                        crate::token::MANAGED_BY.0.to_owned(),
                        crate::token::MANAGED_BY.1.to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(spec),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Outcome::Leading { acquired: true }),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Following {
                holder: None,
                wait: config.renew_period(),
            }),
            Err(e) => Err(TokenError::from_kube(action(), e)),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let ours = holder.as_deref() == Some(config.identity.as_str());
    let held_for = Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or(0).max(0)).unwrap_or(0),
    );
    let expires = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0)
        .and_then(|t| {
            t.checked_add(SignedDuration::try_from(held_for).unwrap_or(SignedDuration::ZERO))
                .ok()
        });
    let expired = holder.is_none() || expires.is_none_or(|e| e <= now);
    if !ours && !expired {
        let wait = expires
            .map(|e| e.duration_since(now))
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or(config.renew_period());
        return Ok(Outcome::Following { holder, wait });
    }
    let transitions = spec.lease_transitions.unwrap_or(0);
    let new_spec = if ours {
        LeaseSpec {
            acquire_time: spec.acquire_time.clone(),
            lease_transitions: spec.lease_transitions,
            ..our_spec(config, now, None)
        }
    } else {
        LeaseSpec {
            lease_transitions: Some(transitions.saturating_add(1)),
            ..our_spec(config, now, Some(now))
        }
    };
    lease.spec = Some(new_spec);
    // `replace` carries the resourceVersion we read: a concurrent writer makes it fail (409).
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(Outcome::Leading { acquired: !ours }),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Following {
            holder,
            wait: config.renew_period(),
        }),
        Err(e) => Err(TokenError::from_kube(action(), e)),
    }
}

/// Gives the lease up (holder cleared), so another replica takes over at once.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, TokenError> {
    let action = || format!("release lease {}/{}", config.namespace, config.name);
    let Some(mut lease) = api
        .get_opt(&config.name)
        .await
        .map_err(|e| TokenError::from_kube(action(), e))?
    else {
        return Ok(false);
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(false);
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(micro(Timestamp::now()));
    api.replace(&config.name, &PostParams::default(), &lease)
        .await
        .map_err(|e| TokenError::from_kube(action(), e))?;
    Ok(true)
}

/// What the election loop reports as it goes (the metrics implement it), so the lease code
/// does not depend on what counts its outcomes.
pub(crate) trait LeaseObserver: Sync {
    /// The apiserver answered a lease request (readiness).
    fn apiserver_answered(&self);
    /// A lease request failed or timed out.
    fn error(&self);
}

/// The election loop: runs until `stop` turns true, then waits for `reconciler_done`
/// (so no rotation is cut in half) and releases the lease if it holds it.
pub(crate) async fn run(
    client: Client,
    config: LeaseConfig,
    leadership: &Leadership,
    metrics: &dyn LeaseObserver,
    mut stop: watch::Receiver<bool>,
    mut reconciler_done: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut last_holder: Option<String> = None;
    while !*stop.borrow() {
        let started = Instant::now();
        let attempt =
            tokio::time::timeout(config.renew_period(), try_acquire_or_renew(&api, &config)).await;
        let wait = match attempt {
            Ok(Ok(Outcome::Leading { acquired })) => {
                metrics.apiserver_answered();
                let was_leading = leadership.is_leading();
                leadership.set(Some(started + config.renew_deadline()));
                if acquired || !was_leading {
                    tracing::info!(
                        lease = %config.name,
                        identity = %config.identity,
                        "became the leader"
                    );
                    leadership.acquired.notify_one();
                }
                last_holder = Some(config.identity.clone());
                // Renew a period after this attempt started, however long it took.
                config.renew_period().saturating_sub(started.elapsed())
            }
            Ok(Ok(Outcome::Following { holder, wait })) => {
                metrics.apiserver_answered();
                if leadership.is_leading() {
                    tracing::warn!(lease = %config.name, holder = ?holder, "lost the lease");
                }
                leadership.set(None);
                if holder != last_holder {
                    tracing::info!(lease = %config.name, holder = ?holder, "following the leader");
                    last_holder = holder;
                }
                // Wake up just after the lease expires, but poll at least every period.
                wait.saturating_add(Duration::from_millis(50))
                    .min(config.renew_period())
            }
            Ok(Err(e)) => {
                metrics.error();
                tracing::warn!(lease = %config.name, error = %e, "lease request failed");
                config.renew_period().min(Duration::from_secs(2))
            }
            Err(_) => {
                metrics.error();
                tracing::warn!(lease = %config.name, "lease request timed out");
                Duration::ZERO
            }
        };
        if !leadership.is_leading() && last_holder.as_deref() == Some(config.identity.as_str()) {
            tracing::warn!(lease = %config.name, "could not renew the lease in time: stepping down");
            last_holder = None;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
    // Let an in-flight rotation finish before handing over.
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while !*reconciler_done.borrow() {
            if reconciler_done.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    let was_leading = leadership.is_leading();
    leadership.set(None);
    if was_leading {
        match tokio::time::timeout(Duration::from_secs(5), release(&api, &config)).await {
            Ok(Ok(true)) => tracing::info!(lease = %config.name, "released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %config.name, error = %error_chain(&e), "could not release the lease")
            }
            Err(_) => tracing::warn!(lease = %config.name, "releasing the lease timed out"),
        }
    }
}
