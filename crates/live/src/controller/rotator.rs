//! One reconcile: keep a valid token in the store; delete the token it replaced once the
//! overlap has passed. Expired tokens are kube-controller-manager's tokencleaner's job.
//!
//! The rotator never reads a Secret: it learns whether the stored token works by
//! authenticating with it (a SelfSubjectReview with the token as its bearer), and what it
//! must delete from the store, which records the replaced token's ID.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use kube::Client;

use super::leader::Leadership;
use super::metrics::Metrics;
use super::{ControllerConfig, ControllerError};
use crate::store::{self, JoinConfig, JoinStore, StoreError, Superseded};
use crate::token::{self, BootstrapToken, JOIN_TOKEN_GROUP, NewToken, TokenInfo};

/// Why the stored token must be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Missing,
    Unreadable,
    ConfigurationChanged,
    UnknownToCluster,
    Expired,
    Due,
    OutlivesTtl,
    WrongGroup,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Missing => "the store holds no join configuration",
            Reason::Unreadable => "the stored join configuration is unusable",
            Reason::ConfigurationChanged => "the API server endpoint or CA hash changed",
            Reason::UnknownToCluster => "the stored token no longer authenticates",
            Reason::Expired => "the stored token has expired",
            Reason::Due => "the stored token is past its rotation point",
            Reason::OutlivesTtl => "the stored token lives longer than the configured TTL",
            Reason::WrongGroup => "the stored token is not in the kubean-karpenter join group",
        }
    }

    /// The old token still lets nodes join: keep it for the overlap, then delete it.
    fn old_token_works(self) -> bool {
        matches!(
            self,
            Reason::ConfigurationChanged | Reason::Due | Reason::OutlivesTtl | Reason::WrongGroup
        )
    }
}

/// How long after creating a token the authenticator may still answer 401 for it (it reads
/// token Secrets through an informer): 15 s, or a quarter of a short TTL.
fn informer_grace(ttl: SignedDuration) -> SignedDuration {
    (ttl / 4).min(SignedDuration::from_secs(15))
}

/// When a token should be replaced: `rotate_at` of the way from its creation to its
/// expiration. Creation is the Secret's `creationTimestamp`, or `expiration - ttl`.
pub fn rotation_point(
    info: Option<&TokenInfo>,
    expiration: Timestamp,
    ttl: std::time::Duration,
    rotate_at: f64,
) -> Timestamp {
    let fallback = SignedDuration::try_from(ttl)
        .ok()
        .and_then(|d| expiration.checked_sub(d).ok())
        .unwrap_or(expiration);
    let start = info
        .and_then(|i| i.created)
        .filter(|c| *c < expiration)
        .unwrap_or(fallback);
    let lifetime = expiration.duration_since(start);
    let offset = SignedDuration::from_secs_f64(lifetime.as_secs_f64() * rotate_at);
    start.checked_add(offset).unwrap_or(expiration)
}

/// Decides whether the stored configuration must be replaced, by authenticating with the
/// stored token (`probe`: the apiserver's address and CA; its credentials are not used).
pub async fn assess(
    probe: &kube::Config,
    stored: Option<&JoinConfig>,
    config: &ControllerConfig,
    now: Timestamp,
) -> Result<Option<Reason>, ControllerError> {
    let Some(stored) = stored else {
        return Ok(Some(Reason::Missing));
    };
    if stored.api_server_endpoint.as_deref() != Some(config.api_server_endpoint.as_str())
        || stored.ca_cert_hash != config.ca_cert_hash
    {
        return Ok(Some(Reason::ConfigurationChanged));
    }
    if stored.expiration <= now {
        return Ok(Some(Reason::Expired));
    }
    let ttl = SignedDuration::try_from(config.ttl).unwrap_or(SignedDuration::MAX);
    let created = stored.expiration.checked_sub(ttl).unwrap_or(now);
    if stored.expiration.duration_since(now) > ttl + SignedDuration::from_secs(60) {
        return Ok(Some(Reason::OutlivesTtl));
    }
    match token::authenticate(probe, &stored.token).await? {
        None if now.duration_since(created) < informer_grace(ttl) => {}
        None => return Ok(Some(Reason::UnknownToCluster)),
        Some(groups) if !groups.is_empty() && !groups.iter().any(|g| g == JOIN_TOKEN_GROUP) => {
            return Ok(Some(Reason::WrongGroup));
        }
        Some(_) => {}
    }
    if now >= rotation_point(None, stored.expiration, config.ttl, config.rotate_at) {
        return Ok(Some(Reason::Due));
    }
    Ok(None)
}

fn ensure_leading(leadership: &Leadership) -> Result<(), ControllerError> {
    if leadership.is_leading() {
        Ok(())
    } else {
        Err(ControllerError::NotLeader)
    }
}

/// Reads the store (followers do only this, for the expiry metric).
pub async fn observe(
    store: &JoinStore,
    metrics: &Metrics,
) -> Result<Option<JoinConfig>, StoreError> {
    let stored = store.read().await?;
    metrics.set_expiration(stored.as_ref().map(|c| c.expiration));
    Ok(stored)
}

/// What the rotator keeps between reconciles.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Superseded tokens already deleted (the store keeps naming one until the next rotation).
    deleted: BTreeSet<String>,
}

/// The leader's step: rotate when needed (create, publish with the replaced token's ID and
/// the end of its overlap), then delete a replaced token whose overlap has passed. Deletes
/// go by name; the admission policy lets the rotator delete only its own tokens.
pub(crate) async fn reconcile(
    client: &Client,
    probe: &kube::Config,
    store: &JoinStore,
    config: &ControllerConfig,
    leadership: &Leadership,
    metrics: &Metrics,
    state: &mut State,
) -> Result<(), ControllerError> {
    let now = Timestamp::now();
    let (stored, unreadable) = match observe(store, metrics).await {
        Ok(stored) => (stored, false),
        Err(StoreError::Malformed { store: s, problem }) => {
            tracing::warn!(store = %s, problem = %problem, "the stored join configuration is unusable; replacing it");
            metrics.set_expiration(None);
            (None, true)
        }
        Err(e) => return Err(e.into()),
    };
    let reason = if unreadable {
        Some(Reason::Unreadable)
    } else {
        assess(probe, stored.as_ref(), config, now).await?
    };
    let mut pending = stored.as_ref().and_then(|c| c.superseded.clone());
    if let Some(reason) = reason {
        ensure_leading(leadership)?;
        let previous = stored.as_ref().map(|c| &c.token);
        tracing::info!(
            store = %store.describe(),
            reason = reason.as_str(),
            previous_token_id = previous.map(BootstrapToken::id).unwrap_or("-"),
            "rotating the join token"
        );
        let overlap = SignedDuration::try_from(config.overlap).unwrap_or(SignedDuration::ZERO);
        let superseded = match previous {
            Some(old) if reason.old_token_works() => {
                // An older replaced token still pending goes now: only one overlaps.
                if let Some(older) = pending.take() {
                    delete_superseded(client, leadership, metrics, state, &older.id).await?;
                }
                Some(Superseded {
                    id: old.id().to_owned(),
                    delete_after: now.checked_add(overlap).unwrap_or(now),
                })
            }
            _ => pending.clone(),
        };
        let new = NewToken {
            ttl: config.ttl,
            description: Some(format!(
                "kubean-karpenter join token for cluster {} (rotator {})",
                config.cluster, config.lease.identity
            )),
            cluster: Some(config.cluster.clone()),
        };
        let publication = store::create_and_publish(
            client,
            store,
            &new,
            &config.api_server_endpoint,
            &config.ca_cert_hash,
            superseded.clone(),
            Timestamp::now(),
        )
        .await?;
        metrics.rotated();
        metrics.set_expiration(Some(publication.config.expiration));
        tracing::info!(
            store = %store.describe(),
            token_id = publication.token.id(),
            expiration = %token::rfc3339(publication.config.expiration),
            superseded = superseded.as_ref().map(|s| s.id.as_str()).unwrap_or("-"),
            "published a new join token"
        );
        pending = superseded;
    } else if let Some(stored) = &stored {
        tracing::debug!(
            token_id = stored.token.id(),
            expiration = %token::rfc3339(stored.expiration),
            "the stored token is valid"
        );
    }
    if let Some(old) = pending
        && Timestamp::now() >= old.delete_after
    {
        delete_superseded(client, leadership, metrics, state, &old.id).await?;
    }
    Ok(())
}

/// Deletes a replaced token once (by name; 404 is fine: tokencleaner may have been first).
async fn delete_superseded(
    client: &Client,
    leadership: &Leadership,
    metrics: &Metrics,
    state: &mut State,
    id: &str,
) -> Result<(), ControllerError> {
    if state.deleted.contains(id) {
        return Ok(());
    }
    ensure_leading(leadership)?;
    token::delete_by_id(client, id).await?;
    state.deleted.insert(id.to_owned());
    metrics.deleted_one();
    tracing::info!(token_id = %id, "deleted the token this one replaced (its overlap has passed)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rotation_happens_at_the_given_fraction_of_the_lifetime() {
        let exp: Timestamp = "2030-01-01T00:00:24Z".parse().unwrap();
        let info = TokenInfo {
            id: "abcdef".into(),
            expiration: Some(exp),
            usages: vec!["authentication".into()],
            extra_groups: vec![],
            description: None,
            managed: true,
            cluster: None,
            created: Some("2030-01-01T00:00:00Z".parse().unwrap()),
            uid: None,
        };
        let at = rotation_point(Some(&info), exp, Duration::from_secs(100), 0.5);
        assert_eq!(at, "2030-01-01T00:00:12Z".parse::<Timestamp>().unwrap());
        // Without a creation time: expiration - ttl.
        let at = rotation_point(None, exp, Duration::from_secs(8), 0.25);
        assert_eq!(at, "2030-01-01T00:00:18Z".parse::<Timestamp>().unwrap());
    }
}
