//! kubeadm bootstrap tokens: Secrets `kube-system/bootstrap-token-<id>` exactly as
//! `kubeadm token create` writes them, plus our labels so that we only ever delete our own.
//!
//! A token is `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`), drawn from the OS CSPRNG. The
//! secret half never appears in `Debug`, `Display` or error text: only [`BootstrapToken::expose`]
//! returns it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use crate::kube_error::KubeCallError;
pub use kk_spec::time::{DurationError, format_duration, parse_duration, rfc3339};

/// Where kubeadm and the bootstrap authenticator look for token Secrets.
pub const NAMESPACE: &str = "kube-system";
/// The Secret type the bootstrap authenticator reads.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Name prefix of a token Secret; the rest is the token ID.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The group kubeadm's RBAC lets join nodes (CSR creation, auto-approval, cluster-info).
/// Kubespray's own joins use it; our tokens do not (see [`JOIN_TOKEN_GROUP`]).
pub const NODE_BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The group our tokens carry: join rights without kubeadm's blanket CSR auto-approval.
pub const JOIN_TOKEN_GROUP: &str = kk_spec::names::JOIN_TOKEN_GROUP;
/// Every token Secret we create carries this label (the rotator deletes only these).
pub use kk_spec::names::MANAGED_BY;
/// The cluster a managed token was made for (scopes the rotator's clean-up).
pub const CLUSTER_LABEL: &str = kk_spec::names::TOKEN_CLUSTER_LABEL;

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read random bytes from the operating system: {0}")]
    Random(String),
    /// Deliberately says nothing about the value: it may hold a secret.
    #[error("malformed bootstrap token (expected [a-z0-9]{{6}}.[a-z0-9]{{16}})")]
    Malformed,
    /// Never repeats the input: a whole token pasted where its ID belongs must not end up
    /// in a terminal log or CI output.
    #[error(
        "invalid token ID (expected the 6 characters of [a-z0-9] before the dot; the value is not repeated, it may be a whole token)"
    )]
    BadId,
    #[error("invalid TTL: {0}")]
    BadTtl(String),
    #[error("bootstrap token {0} not found in {NAMESPACE}")]
    NotFound(String),
    #[error(
        "Secret {NAMESPACE}/{SECRET_PREFIX}{0} is not a bootstrap token (type {1:?}); not touching it"
    )]
    NotAToken(String, String),
    /// A kube-apiserver call failed (refused, or no answer).
    // The call error is the source, not hidden: the CLI reads refusal vs outage from it.
    #[error("{0}")]
    Kube(#[from] KubeCallError),
}

impl TokenError {
    /// From a kube error, naming what we were doing.
    pub fn from_kube(action: impl Into<String>, e: kube::Error) -> Self {
        TokenError::Kube(KubeCallError::from_kube(action, e))
    }

    /// True when the apiserver said no (as opposed to not answering).
    pub fn is_refusal(&self) -> bool {
        matches!(self, TokenError::Kube(KubeCallError::Refused { .. }))
    }
}

pub(crate) use crate::kube_error::error_chain;

/// A bootstrap token. `Debug` and `Display` show only the ID.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<redacted>)", self.id)
    }
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.<redacted>", self.id)
    }
}

fn is_token_chars(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Checks a token ID (`[a-z0-9]{6}`).
pub fn validate_id(id: &str) -> Result<(), TokenError> {
    if is_token_chars(id, 6) {
        Ok(())
    } else {
        Err(TokenError::BadId)
    }
}

/// `n` characters of `[a-z0-9]`, uniformly, from the OS CSPRNG (rejection sampling: bytes
/// of 252 and above would bias the first four letters, so they are drawn again).
fn random_chars(n: usize) -> Result<String, TokenError> {
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        getrandom::fill(&mut buf).map_err(|e| TokenError::Random(e.to_string()))?;
        for &b in &buf {
            if out.len() == n {
                break;
            }
            if b < 252 {
                out.push(ALPHABET[usize::from(b % 36)] as char);
            }
        }
    }
    Ok(out)
}

impl BootstrapToken {
    /// A fresh random token.
    pub fn generate() -> Result<Self, TokenError> {
        Ok(Self {
            id: random_chars(6)?,
            secret: random_chars(16)?,
        })
    }

    /// Parses `<id>.<secret>`; the error never echoes the input.
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let (id, secret) = text.trim().split_once('.').ok_or(TokenError::Malformed)?;
        if is_token_chars(id, 6) && is_token_chars(secret, 16) {
            Ok(Self {
                id: id.to_owned(),
                secret: secret.to_owned(),
            })
        } else {
            Err(TokenError::Malformed)
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The full `<id>.<secret>`: what `kubeadm join --token` takes. Handle with care.
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// True when `secret` is this token's secret half (the Secret in the cluster matches).
    pub fn secret_matches(&self, secret: &str) -> bool {
        // Not constant-time: both sides are ours, nothing here is an oracle for an attacker.
        self.secret == secret
    }

    pub fn secret_name(&self) -> String {
        secret_name(&self.id)
    }
}

pub fn secret_name(id: &str) -> String {
    format!("{SECRET_PREFIX}{id}")
}

/// What we want a new token to be.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub ttl: Duration,
    pub description: Option<String>,
    /// The cluster name, recorded in a label (the rotator cleans up only its cluster's tokens).
    pub cluster: Option<String>,
}

/// A token Secret as found in the cluster, without its secret half.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub expiration: Option<Timestamp>,
    /// `authentication`, `signing`: the `usage-bootstrap-*` keys set to "true".
    pub usages: Vec<String>,
    pub extra_groups: Vec<String>,
    pub description: Option<String>,
    /// Carries our managed-by label.
    pub managed: bool,
    /// Our cluster label, when set.
    pub cluster: Option<String>,
    pub created: Option<Timestamp>,
    pub uid: Option<String>,
}

impl TokenInfo {
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expiration.is_some_and(|e| e <= now)
    }

    /// Usable for joining: not expired and allowed to authenticate.
    pub fn can_authenticate(&self, now: Timestamp) -> bool {
        !self.is_expired(now) && self.usages.iter().any(|u| u == "authentication")
    }
}

fn data_str(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// The public facts of a token Secret (`None` when it is not a well-formed token Secret).
pub fn info_from_secret(secret: &Secret) -> Option<TokenInfo> {
    if secret.type_.as_deref() != Some(SECRET_TYPE) {
        return None;
    }
    let name = secret.metadata.name.as_deref()?;
    let id = data_str(secret, "token-id")
        .or_else(|| name.strip_prefix(SECRET_PREFIX).map(str::to_owned))?;
    let mut usages = Vec::new();
    if let Some(data) = &secret.data {
        for (key, value) in data {
            if let Some(usage) = key.strip_prefix("usage-bootstrap-")
                && value.0 == b"true"
            {
                usages.push(usage.to_owned());
            }
        }
    }
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    Some(TokenInfo {
        id,
        expiration: data_str(secret, "expiration").and_then(|e| e.parse().ok()),
        usages,
        extra_groups: data_str(secret, "auth-extra-groups")
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        description: data_str(secret, "description"),
        managed: labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1),
        cluster: labels.get(CLUSTER_LABEL).cloned(),
        created: secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
        uid: secret.metadata.uid.clone(),
    })
}

/// The Secret kubeadm would write for `token`, expiring at `expiration`, with our labels.
pub fn token_secret(token: &BootstrapToken, expiration: Timestamp, new: &NewToken) -> Secret {
    let mut data = BTreeMap::new();
    data.insert("token-id".to_owned(), token.id.clone());
    data.insert("token-secret".to_owned(), token.secret.clone());
    data.insert("expiration".to_owned(), rfc3339(expiration));
    data.insert(
        "usage-bootstrap-authentication".to_owned(),
        "true".to_owned(),
    );
    data.insert("usage-bootstrap-signing".to_owned(), "true".to_owned());
    data.insert("auth-extra-groups".to_owned(), JOIN_TOKEN_GROUP.to_owned());
    if let Some(d) = new.description.as_deref().filter(|d| !d.is_empty()) {
        data.insert("description".to_owned(), d.to_owned());
    }
    let mut labels = BTreeMap::new();
    labels.insert(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
    if let Some(cluster) = &new.cluster {
        labels.insert(CLUSTER_LABEL.to_owned(), cluster.clone());
    }
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(token.secret_name()),
            namespace: Some(NAMESPACE.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn api(client: &Client) -> Api<Secret> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// The longest TTL `token create` and the rotator accept: a stolen token is good for at most a
/// day. The rotator's default is 2 h. There is no opt-in past it (finding #3 of issue 24: a
/// static token baked into userData was the one reason for one, and static mode is lab-only).
pub const TTL_CEILING: Duration = Duration::from_secs(24 * 3600);

/// Refuses a TTL over [`TTL_CEILING`].
pub fn check_ttl_ceiling(ttl: Duration) -> Result<(), TokenError> {
    if ttl > TTL_CEILING {
        return Err(TokenError::BadTtl(format!(
            "{} is over the {} ceiling: a stolen token would stay valid that long (the rotator keeps a short-lived token valid in the store modes)",
            format_duration(ttl),
            format_duration(TTL_CEILING)
        )));
    }
    Ok(())
}

/// `now + ttl`, refusing a TTL that is zero or absurdly long.
pub fn expiration_after(now: Timestamp, ttl: Duration) -> Result<Timestamp, TokenError> {
    if ttl < Duration::from_secs(1) {
        return Err(TokenError::BadTtl("must be at least 1s".into()));
    }
    let span =
        jiff::SignedDuration::try_from(ttl).map_err(|_| TokenError::BadTtl("too long".into()))?;
    // Round up to whole seconds: the Secret's expiration has seconds precision.
    let exp = now
        .checked_add(span)
        .map_err(|_| TokenError::BadTtl("too long".into()))?;
    let secs = exp.as_second() + i64::from(exp.subsec_nanosecond() > 0);
    Timestamp::from_second(secs).map_err(|_| TokenError::BadTtl("too long".into()))
}

/// Creates a new token Secret. On an ID collision (1 in 2 billion) it draws again.
pub async fn create(
    client: &Client,
    new: &NewToken,
    now: Timestamp,
) -> Result<(BootstrapToken, TokenInfo), TokenError> {
    let expiration = expiration_after(now, new.ttl)?;
    let api = api(client);
    for _ in 0..3 {
        let token = BootstrapToken::generate()?;
        let body = token_secret(&token, expiration, new);
        match api.create(&PostParams::default(), &body).await {
            Ok(created) => {
                let info = info_from_secret(&created).ok_or_else(|| {
                    TokenError::Kube(KubeCallError::Refused {
                        call: format!("create Secret {NAMESPACE}/{}", token.secret_name()),
                        code: 0,
                        reason: "Unexpected".into(),
                        message: "the apiserver returned something that is not a token Secret"
                            .into(),
                    })
                })?;
                return Ok((token, info));
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => {
                return Err(TokenError::from_kube(
                    format!("create Secret {NAMESPACE}/{}", token.secret_name()),
                    e,
                ));
            }
        }
    }
    Err(TokenError::Kube(KubeCallError::Refused {
        call: "create a bootstrap token".into(),
        code: 409,
        reason: "AlreadyExists".into(),
        message: "three random token IDs in a row already existed".into(),
    }))
}

/// Every bootstrap-token Secret, ours and others', sorted by ID.
pub async fn list(client: &Client) -> Result<Vec<TokenInfo>, TokenError> {
    let params = ListParams::default().fields(&format!("type={SECRET_TYPE}"));
    let secrets = api(client)
        .list(&params)
        .await
        .map_err(|e| TokenError::from_kube(format!("list Secrets in {NAMESPACE}"), e))?;
    let mut out: Vec<TokenInfo> = secrets.items.iter().filter_map(info_from_secret).collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Our tokens for one cluster (label selector), sorted by ID.
pub async fn list_managed(client: &Client, cluster: &str) -> Result<Vec<TokenInfo>, TokenError> {
    let params = ListParams::default()
        .fields(&format!("type={SECRET_TYPE}"))
        .labels(&format!(
            "{}={},{CLUSTER_LABEL}={cluster}",
            MANAGED_BY.0, MANAGED_BY.1
        ));
    let secrets = api(client)
        .list(&params)
        .await
        .map_err(|e| TokenError::from_kube(format!("list our Secrets in {NAMESPACE}"), e))?;
    let mut out: Vec<TokenInfo> = secrets
        .items
        .iter()
        .filter_map(info_from_secret)
        // Belt and braces: the selector already says so.
        .filter(|t| t.managed && t.cluster.as_deref() == Some(cluster))
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// One token Secret as stored: its public facts and whether `token` is its secret.
pub async fn lookup(
    client: &Client,
    token: &BootstrapToken,
) -> Result<Option<(TokenInfo, bool)>, TokenError> {
    let name = token.secret_name();
    let secret = api(client)
        .get_opt(&name)
        .await
        .map_err(|e| TokenError::from_kube(format!("get Secret {NAMESPACE}/{name}"), e))?;
    Ok(secret.and_then(|s| {
        let info = info_from_secret(&s)?;
        let matches = data_str(&s, "token-secret").is_some_and(|v| token.secret_matches(&v))
            && info.id == token.id;
        Some((info, matches))
    }))
}

/// Who the apiserver's bootstrap-token authenticator says `token` is: `Some(groups)` when it
/// authenticates (empty when it may not review itself), `None` on 401. This is how the
/// rotator checks a token without reading any Secret.
pub async fn authenticate(
    base: &kube::Config,
    token: &BootstrapToken,
) -> Result<Option<Vec<String>>, TokenError> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let action = || format!("authenticate as bootstrap token {}", token.id);
    let mut config = base.clone();
    // Only this bearer token: no client certificate, exec plugin or impersonation of `base`.
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.expose().into()),
        ..Default::default()
    };
    let client = Client::try_from(config).map_err(|e| {
        TokenError::Kube(KubeCallError::Unreachable {
            call: action(),
            detail: error_chain(&e),
        })
    })?;
    let api: Api<SelfSubjectReview> = Api::all(client);
    match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => {
            let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
            if user.username.as_deref() != Some(&format!("system:bootstrap:{}", token.id)) {
                return Ok(None);
            }
            Ok(Some(user.groups.unwrap_or_default()))
        }
        Err(kube::Error::Api(s)) if s.code == 401 => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Some(Vec::new())),
        Err(e) => Err(TokenError::from_kube(action(), e)),
    }
}

/// Deletes our token Secret `id` by name (404 is fine). Whether it is ours is for the
/// apiserver to say: the rotator's admission policy refuses anyone else's.
pub async fn delete_by_id(client: &Client, id: &str) -> Result<(), TokenError> {
    validate_id(id)?;
    let name = secret_name(id);
    match api(client).delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(TokenError::from_kube(
            format!("delete Secret {NAMESPACE}/{name}"),
            e,
        )),
    }
}

/// Deletes the token Secret `id` (only if it is a bootstrap token; pinned to its UID so a
/// Secret recreated meanwhile under the same name is not deleted).
pub async fn revoke(client: &Client, id: &str) -> Result<TokenInfo, TokenError> {
    validate_id(id)?;
    let name = secret_name(id);
    let api = api(client);
    let secret = api
        .get_opt(&name)
        .await
        .map_err(|e| TokenError::from_kube(format!("get Secret {NAMESPACE}/{name}"), e))?
        .ok_or_else(|| TokenError::NotFound(id.to_owned()))?;
    let info = info_from_secret(&secret).ok_or_else(|| {
        TokenError::NotAToken(id.to_owned(), secret.type_.clone().unwrap_or_default())
    })?;
    delete_exact(client, &info).await?;
    Ok(info)
}

/// Deletes exactly the Secret `info` describes (UID precondition). Not found is fine.
pub async fn delete_exact(client: &Client, info: &TokenInfo) -> Result<(), TokenError> {
    let name = secret_name(&info.id);
    let params = DeleteParams {
        preconditions: info.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api(client).delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(TokenError::from_kube(
            format!("delete Secret {NAMESPACE}/{name}"),
            e,
        )),
    }
}

#[cfg(test)]
mod tests;
