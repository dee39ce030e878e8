//! The join store: where nodes read the join configuration at boot (the userData's
//! `fetch_join_config`), an SSM SecureString parameter or a Secrets Manager secret.
//!
//! The value is `KEY=value` lines:
//!
//! ```text
//! KK_API_SERVER_ENDPOINT=api.demo.internal:6443
//! KK_TOKEN=abcdef.0123456789abcdef
//! KK_CA_CERT_HASH=sha256:<64 hex>
//! KK_EXPIRATION=2026-12-01T10:00:00Z
//! ```
//!
//! The AWS SDK runs on rustls with *ring*, the provider kube uses: no aws-lc-rs is linked,
//! and [`crate::install_crypto_provider`] runs before any client is built.

use std::fmt;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ssm::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_http_client::tls;
use jiff::Timestamp;
use kube::Client;

use crate::token::{self, BootstrapToken, NewToken, TokenError, TokenInfo};

/// The tag on every store we write: `kubean-karpenter.io/cluster=<name>`.
pub const CLUSTER_TAG: &str = kk_spec::names::CLUSTER_LABEL;

pub use kk_spec::join_store::{StoreKind, UnknownStoreKind};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{store}: access denied by AWS ({code}): {message}")]
    Denied {
        store: String,
        code: String,
        message: String,
    },
    #[error("{store}: cannot reach AWS: {detail}")]
    Unreachable { store: String, detail: String },
    #[error("{store}: {operation} failed ({code}): {message}")]
    Service {
        store: String,
        operation: &'static str,
        code: String,
        message: String,
    },
    #[error("{store}: {operation} failed: {detail}")]
    Other {
        store: String,
        operation: &'static str,
        detail: String,
    },
    /// Never carries the stored value: it holds a token.
    #[error("{store}: the stored join configuration is unusable: {problem}")]
    Malformed { store: String, problem: String },
    #[error("no AWS region: set AWS_REGION (or --region)")]
    NoRegion,
}

impl StoreError {
    /// The request may have reached AWS or not (as opposed to a definite refusal).
    fn is_ambiguous(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. } | StoreError::Other { .. }
        )
    }
}

const DENIED_CODES: [&str; 8] = [
    "AccessDeniedException",
    "AccessDenied",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredTokenException",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "KMSAccessDeniedException",
];

fn classify<E, R>(store: &str, operation: &'static str, e: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug,
{
    let detail = crate::kube_error::error_chain(&e);
    match &e {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or("Unknown").to_owned();
            let message = service.err().message().unwrap_or("").to_owned();
            if DENIED_CODES.contains(&code.as_str()) {
                StoreError::Denied {
                    store: store.to_owned(),
                    code,
                    message,
                }
            } else {
                StoreError::Service {
                    store: store.to_owned(),
                    operation,
                    code,
                    message,
                }
            }
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => StoreError::Unreachable {
            store: store.to_owned(),
            detail,
        },
        _ => StoreError::Other {
            store: store.to_owned(),
            operation,
            detail,
        },
    }
}

fn service_code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    match e {
        SdkError::ServiceError(s) => s.err().code(),
        _ => None,
    }
}

/// What the store holds. `Debug` never shows the token's secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinConfig {
    /// `host:port`, as `kubeadm join` takes it (absent in stores written by hand).
    pub api_server_endpoint: Option<String>,
    pub token: BootstrapToken,
    pub ca_cert_hash: String,
    pub expiration: Timestamp,
    /// The token this one replaced, still valid for nodes that read it just before the
    /// rotation, and when the rotator deletes it (whichever replica leads by then).
    pub superseded: Option<Superseded>,
}

/// A replaced token's ID (never its secret) and the end of its overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    pub id: String,
    pub delete_after: Timestamp,
}

/// `sha256:` and 64 lowercase hex digits.
pub fn is_ca_cert_hash(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// An API server endpoint that kubeadm join would not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("{0:?}: give host:port without a scheme (kubeadm join takes no https://)")]
    Scheme(String),
    #[error("{0:?}: expected host:port")]
    NotHostPort(String),
}

/// `host:port` without a scheme (kubeadm refuses `https://`).
pub fn validate_endpoint(text: &str) -> Result<(), EndpointError> {
    if text.contains("://") {
        return Err(EndpointError::Scheme(text.to_owned()));
    }
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| EndpointError::NotHostPort(text.to_owned()))?;
    let host_ok = !host.is_empty()
        && !host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b'=');
    match port.parse::<u16>() {
        Ok(p) if p > 0 && host_ok => Ok(()),
        _ => Err(EndpointError::NotHostPort(text.to_owned())),
    }
}

/// Why a stored join configuration is unusable. Names keys, never values: they hold a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinConfigError {
    #[error("line {line} is not KEY=value")]
    NotKeyValue { line: usize },
    #[error("{0} is not {expected}", expected = expected_form(.0))]
    Invalid(&'static str),
    #[error("no {0} line")]
    Missing(&'static str),
    #[error("KK_SUPERSEDED_TOKEN_ID and KK_SUPERSEDED_DELETE_AFTER go together")]
    Superseded,
}

/// What a key's value must look like, for [`JoinConfigError::Invalid`].
fn expected_form(key: &str) -> &'static str {
    match key {
        "KK_TOKEN" => "a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})",
        "KK_CA_CERT_HASH" => "sha256:<64 hex digits>",
        "KK_SUPERSEDED_TOKEN_ID" => "a token ID",
        _ => "an RFC 3339 time",
    }
}

impl JoinConfig {
    /// The store's value (exposes the token: only for writing it to the store).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(endpoint) = &self.api_server_endpoint {
            out.push_str(&format!("KK_API_SERVER_ENDPOINT={endpoint}\n"));
        }
        out.push_str(&format!("KK_TOKEN={}\n", self.token.expose()));
        out.push_str(&format!("KK_CA_CERT_HASH={}\n", self.ca_cert_hash));
        out.push_str(&format!(
            "KK_EXPIRATION={}\n",
            token::rfc3339(self.expiration)
        ));
        if let Some(old) = &self.superseded {
            out.push_str(&format!("KK_SUPERSEDED_TOKEN_ID={}\n", old.id));
            out.push_str(&format!(
                "KK_SUPERSEDED_DELETE_AFTER={}\n",
                token::rfc3339(old.delete_after)
            ));
        }
        out
    }

    /// Reads the store's value; errors name the key, never the value.
    pub fn parse(text: &str) -> Result<Self, JoinConfigError> {
        let (mut endpoint, mut tok, mut hash, mut exp) = (None, None, None, None);
        let (mut old_id, mut old_after) = (None, None);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(JoinConfigError::NotKeyValue { line: n + 1 });
            };
            match key.trim() {
                "KK_API_SERVER_ENDPOINT" => endpoint = Some(value.trim().to_owned()),
                "KK_TOKEN" => {
                    tok = Some(
                        BootstrapToken::parse(value)
                            .map_err(|_| JoinConfigError::Invalid("KK_TOKEN"))?,
                    )
                }
                "KK_CA_CERT_HASH" => {
                    let v = value.trim();
                    if !is_ca_cert_hash(v) {
                        return Err(JoinConfigError::Invalid("KK_CA_CERT_HASH"));
                    }
                    hash = Some(v.to_owned());
                }
                "KK_EXPIRATION" => {
                    exp = Some(
                        value
                            .trim()
                            .parse::<Timestamp>()
                            .map_err(|_| JoinConfigError::Invalid("KK_EXPIRATION"))?,
                    )
                }
                "KK_SUPERSEDED_TOKEN_ID" => {
                    let v = value.trim();
                    token::validate_id(v)
                        .map_err(|_| JoinConfigError::Invalid("KK_SUPERSEDED_TOKEN_ID"))?;
                    old_id = Some(v.to_owned());
                }
                "KK_SUPERSEDED_DELETE_AFTER" => {
                    old_after = Some(
                        value
                            .trim()
                            .parse::<Timestamp>()
                            .map_err(|_| JoinConfigError::Invalid("KK_SUPERSEDED_DELETE_AFTER"))?,
                    )
                }
                // Later versions may add keys; the userData ignores them too.
                _ => {}
            }
        }
        Ok(JoinConfig {
            api_server_endpoint: endpoint,
            token: tok.ok_or(JoinConfigError::Missing("KK_TOKEN"))?,
            ca_cert_hash: hash.ok_or(JoinConfigError::Missing("KK_CA_CERT_HASH"))?,
            expiration: exp.ok_or(JoinConfigError::Missing("KK_EXPIRATION"))?,
            superseded: match (old_id, old_after) {
                (Some(id), Some(delete_after)) => Some(Superseded { id, delete_after }),
                (None, None) => None,
                _ => {
                    return Err(JoinConfigError::Superseded);
                }
            },
        })
    }
}

/// The AWS config loader every client here starts from: the standard credential and region
/// chains (environment, profile, web identity, ECS, IMDS) and `AWS_ENDPOINT_URL`, on an HTTPS
/// client that uses rustls with *ring*; short timeouts and three quick attempts, so that an
/// unreachable endpoint is reported in about a second (refused) or ten (silent).
pub fn aws_loader() -> aws_config::ConfigLoader {
    crate::install_crypto_provider();
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .read_timeout(Duration::from_secs(10))
                .operation_attempt_timeout(Duration::from_secs(10))
                .operation_timeout(Duration::from_secs(25))
                .build(),
        )
        // Fail fast: the controller retries on its own schedule (--retry), and a failing
        // attempt that lingered would delay recovery once AWS is back.
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(200)),
        )
}

/// The SDK config from the environment, with an optional region and endpoint override.
pub async fn aws_config(
    region: Option<String>,
    endpoint_url: Option<String>,
) -> Result<SdkConfig, StoreError> {
    let mut loader = aws_loader();
    if let Some(region) = region {
        loader = loader.region(Region::new(region));
    }
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(StoreError::NoRegion);
    }
    Ok(config)
}

#[derive(Clone, Debug)]
enum Backend {
    Ssm(aws_sdk_ssm::Client),
    SecretsManager(aws_sdk_secretsmanager::Client),
}

/// One store: a kind, a name and the cluster it belongs to (for the tag).
#[derive(Clone, Debug)]
pub struct JoinStore {
    kind: StoreKind,
    name: String,
    cluster: String,
    backend: Backend,
    /// A customer-managed KMS key (ARN or ID) to encrypt with; `None`: the service's default.
    kms_key: Option<String>,
}

impl JoinStore {
    pub fn new(kind: StoreKind, name: &str, cluster: &str, sdk: &SdkConfig) -> Self {
        let backend = match kind {
            StoreKind::Ssm => Backend::Ssm(aws_sdk_ssm::Client::new(sdk)),
            StoreKind::SecretsManager => {
                Backend::SecretsManager(aws_sdk_secretsmanager::Client::new(sdk))
            }
        };
        Self {
            kind,
            name: name.to_owned(),
            cluster: cluster.to_owned(),
            backend,
            kms_key: None,
        }
    }

    /// Encrypts with this customer-managed KMS key (SSM: every write; Secrets Manager: the
    /// secret's creation, later values keep the secret's key).
    pub fn with_kms_key(mut self, key: Option<String>) -> Self {
        self.kms_key = key;
        self
    }

    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `SSM parameter /x/y` or `Secrets Manager secret x/y`, for messages.
    pub fn describe(&self) -> String {
        match self.kind {
            StoreKind::Ssm => format!("SSM parameter {}", self.name),
            StoreKind::SecretsManager => format!("Secrets Manager secret {}", self.name),
        }
    }

    /// The join configuration, `None` when the parameter or secret does not exist.
    pub async fn read(&self) -> Result<Option<JoinConfig>, StoreError> {
        let store = self.describe();
        let text = match &self.backend {
            Backend::Ssm(client) => {
                match client
                    .get_parameter()
                    .name(&self.name)
                    .with_decryption(true)
                    .send()
                    .await
                {
                    Ok(out) => out.parameter.and_then(|p| p.value),
                    Err(e) if service_code(&e) == Some("ParameterNotFound") => return Ok(None),
                    Err(e) => return Err(classify(&store, "GetParameter", e)),
                }
            }
            Backend::SecretsManager(client) => {
                match client.get_secret_value().secret_id(&self.name).send().await {
                    Ok(out) => out.secret_string,
                    Err(e) if service_code(&e) == Some("ResourceNotFoundException") => {
                        return Ok(None);
                    }
                    Err(e) => return Err(classify(&store, "GetSecretValue", e)),
                }
            }
        };
        let Some(text) = text else {
            return Err(StoreError::Malformed {
                store,
                problem: "no string value".into(),
            });
        };
        JoinConfig::parse(&text)
            .map(Some)
            .map_err(|e| StoreError::Malformed {
                store,
                problem: e.to_string(),
            })
    }

    /// Writes the join configuration: SSM `PutParameter` (SecureString, overwrite) then the
    /// cluster tag; Secrets Manager `PutSecretValue`, or `CreateSecret` (tagged) the first time.
    pub async fn write(&self, config: &JoinConfig) -> Result<(), StoreError> {
        let store = self.describe();
        let value = config.render();
        let description = format!(
            "kubean-karpenter join configuration (kubeadm bootstrap token) for cluster {}",
            self.cluster
        );
        match &self.backend {
            Backend::Ssm(client) => {
                use aws_sdk_ssm::types::{ParameterType, ResourceTypeForTagging, Tag};
                client
                    .put_parameter()
                    .name(&self.name)
                    .value(value)
                    .r#type(ParameterType::SecureString)
                    .set_key_id(self.kms_key.clone())
                    .overwrite(true)
                    .description(description)
                    .send()
                    .await
                    .map_err(|e| classify(&store, "PutParameter", e))?;
                // PutParameter cannot tag while overwriting. The value is what nodes need:
                // a tagging failure is reported, not fatal.
                let tag = Tag::builder()
                    .key(CLUSTER_TAG)
                    .value(&self.cluster)
                    .build()
                    .map_err(|e| StoreError::Other {
                        store: store.clone(),
                        operation: "AddTagsToResource",
                        detail: e.to_string(),
                    })?;
                if let Err(e) = client
                    .add_tags_to_resource()
                    .resource_type(ResourceTypeForTagging::Parameter)
                    .resource_id(&self.name)
                    .tags(tag)
                    .send()
                    .await
                {
                    tracing::warn!(store = %store, error = %classify(&store, "AddTagsToResource", e), "could not tag the join store");
                }
                Ok(())
            }
            Backend::SecretsManager(client) => {
                use aws_sdk_secretsmanager::types::Tag;
                let put = client
                    .put_secret_value()
                    .secret_id(&self.name)
                    .secret_string(&value)
                    .send()
                    .await;
                match put {
                    Ok(_) => Ok(()),
                    Err(e) if service_code(&e) == Some("ResourceNotFoundException") => {
                        let created = client
                            .create_secret()
                            .name(&self.name)
                            .set_kms_key_id(self.kms_key.clone())
                            .description(description)
                            .secret_string(&value)
                            .tags(Tag::builder().key(CLUSTER_TAG).value(&self.cluster).build())
                            .send()
                            .await;
                        match created {
                            Ok(_) => Ok(()),
                            // Created meanwhile by someone else: write the value over it.
                            Err(e) if service_code(&e) == Some("ResourceExistsException") => client
                                .put_secret_value()
                                .secret_id(&self.name)
                                .secret_string(&value)
                                .send()
                                .await
                                .map(|_| ())
                                .map_err(|e| classify(&store, "PutSecretValue", e)),
                            Err(e) => Err(classify(&store, "CreateSecret", e)),
                        }
                    }
                    Err(e) => Err(classify(&store, "PutSecretValue", e)),
                }
            }
        }
    }
}

/// A token that exists in the cluster and is published in the store.
#[derive(Debug, Clone)]
pub struct Publication {
    pub token: BootstrapToken,
    pub info: TokenInfo,
    pub config: JoinConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("{source}; the new token {id} was deleted again, so nothing changed")]
    RolledBack {
        id: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "{source}; deleting the new token {id} failed too ({cleanup}): it expires at {expiration} and carries the label app.kubernetes.io/managed-by=kubean-karpenter"
    )]
    Orphaned {
        id: String,
        #[source]
        source: StoreError,
        cleanup: TokenError,
        expiration: String,
    },
}

/// Creates a token Secret, then publishes it. If publishing fails, the Secret is deleted
/// before the error is returned: no token without its stored copy. When the write's fate is
/// unknown (a timeout after sending), the store is read back first: if it holds the new
/// token the publication stands, so the store never names a deleted token.
pub async fn create_and_publish(
    client: &Client,
    store: &JoinStore,
    new: &NewToken,
    api_server_endpoint: &str,
    ca_cert_hash: &str,
    superseded: Option<Superseded>,
    now: Timestamp,
) -> Result<Publication, PublishError> {
    let (token, info) = token::create(client, new, now).await?;
    let config = JoinConfig {
        api_server_endpoint: Some(api_server_endpoint.to_owned()),
        token: token.clone(),
        ca_cert_hash: ca_cert_hash.to_owned(),
        expiration: info
            .expiration
            .unwrap_or_else(|| token::expiration_after(now, new.ttl).unwrap_or(now)),
        superseded,
    };
    let error = match store.write(&config).await {
        Ok(()) => {
            return Ok(Publication {
                token,
                info,
                config,
            });
        }
        Err(e) => e,
    };
    if error.is_ambiguous()
        && let Ok(Some(stored)) = store.read().await
        && stored.token == token
    {
        tracing::warn!(token_id = token.id(), store = %store.describe(), error = %error, "the write reported an error but the store holds the new token");
        return Ok(Publication {
            token,
            info,
            config,
        });
    }
    match token::delete_exact(client, &info).await {
        Ok(()) => Err(PublishError::RolledBack {
            id: token.id().to_owned(),
            source: error,
        }),
        Err(cleanup) => Err(PublishError::Orphaned {
            id: token.id().to_owned(),
            source: error,
            cleanup,
            expiration: token::rfc3339(config.expiration),
        }),
    }
}

#[cfg(test)]
mod tests;
