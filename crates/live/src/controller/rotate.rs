//! One reconcile: keep a valid token in the store, then delete our expired tokens.

use jiff::{SignedDuration, Timestamp};
use kube::Client;

use super::leader::Leadership;
use super::metrics::Metrics;
use super::{ControllerConfig, ControllerError};
use crate::store::{self, JoinConfig, JoinStore, StoreError};
use crate::token::{self, NewToken, TokenInfo};

/// Why the stored token must be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Missing,
    Unreadable,
    ConfigurationChanged,
    UnknownToCluster,
    Expired,
    Due,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Missing => "the store holds no join configuration",
            Reason::Unreadable => "the stored join configuration is unusable",
            Reason::ConfigurationChanged => "the API server endpoint or CA hash changed",
            Reason::UnknownToCluster => "the stored token is unknown to the cluster",
            Reason::Expired => "the stored token has expired or cannot authenticate",
            Reason::Due => "the stored token is past its rotation point",
        }
    }
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

/// Decides whether the stored configuration must be replaced (reads the token Secret).
pub async fn assess(
    client: &Client,
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
    let Some((info, secret_matches)) = token::lookup(client, &stored.token).await? else {
        return Ok(Some(Reason::UnknownToCluster));
    };
    if !secret_matches {
        return Ok(Some(Reason::UnknownToCluster));
    }
    let expiration = match info.expiration {
        Some(e) => e.min(stored.expiration),
        None => stored.expiration,
    };
    if expiration <= now || !info.can_authenticate(now) {
        return Ok(Some(Reason::Expired));
    }
    if now >= rotation_point(Some(&info), expiration, config.ttl, config.rotate_at) {
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

/// The leader's step: rotate when needed (create, publish, and only then) delete our
/// expired tokens, never the stored one, never a Secret without our labels.
pub async fn reconcile(
    client: &Client,
    store: &JoinStore,
    config: &ControllerConfig,
    leadership: &Leadership,
    metrics: &Metrics,
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
        assess(client, stored.as_ref(), config, now).await?
    };
    let mut current = stored.as_ref().map(|c| c.token.id().to_owned());
    if let Some(reason) = reason {
        ensure_leading(leadership)?;
        tracing::info!(
            store = %store.describe(),
            reason = reason.as_str(),
            previous_token_id = current.as_deref().unwrap_or("-"),
            "rotating the join token"
        );
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
            Timestamp::now(),
        )
        .await?;
        metrics.rotated();
        metrics.set_expiration(Some(publication.config.expiration));
        tracing::info!(
            store = %store.describe(),
            token_id = publication.token.id(),
            expiration = %token::rfc3339(publication.config.expiration),
            "published a new join token"
        );
        current = Some(publication.token.id().to_owned());
    } else if let Some(stored) = &stored {
        tracing::debug!(
            token_id = stored.token.id(),
            expiration = %token::rfc3339(stored.expiration),
            "the stored token is valid"
        );
    }
    clean_up(client, config, leadership, metrics, current.as_deref()).await
}

/// Deletes our cluster's expired tokens (label selector), except the stored one.
async fn clean_up(
    client: &Client,
    config: &ControllerConfig,
    leadership: &Leadership,
    metrics: &Metrics,
    keep: Option<&str>,
) -> Result<(), ControllerError> {
    let now = Timestamp::now();
    for info in token::list_managed(client, &config.cluster).await? {
        if !info.is_expired(now) || keep == Some(info.id.as_str()) {
            continue;
        }
        ensure_leading(leadership)?;
        token::delete_exact(client, &info).await?;
        metrics.deleted_one();
        tracing::info!(
            token_id = %info.id,
            expiration = %info.expiration.map(token::rfc3339).unwrap_or_default(),
            "deleted an expired token of ours"
        );
    }
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
