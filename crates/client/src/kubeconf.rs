//! Kubean's copy of the cluster it built: after its `kubeconfig.yml` post-hook, the new
//! cluster's admin kubeconfig is the ConfigMap `<cluster>-kubeconf`, key `config`, in the
//! namespace Kubean's spray jobs run in (kubean-io/kubean playbooks/kubeconfig.yml, v0.37.0:
//! `kubectl create configmap <cluster>-kubeconf --from-file=/conf/.kube/config`). Stage 2 of the
//! two-stage flow takes the cluster CA from it. It holds admin credentials: never log it.
//!
//! Whoever can write that ConfigMap (an admin of the management cluster, or anything Kubean
//! runs) must not get code run on the operator's machine, nor a CA of their choosing pinned by
//! every node. So every kubeconfig read from a cluster goes through [`vet`]: no `exec`,
//! `auth-provider`, `tokenFile` or file reference unless the operator allows them, and a CA
//! the cluster itself serves and publishes.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use x509_cert::der::Encode;

use crate::cahash::ROOT_CA_CONFIGMAP;

/// The key `--from-file=.../config` gives the kubeconfig.
pub const KEY: &str = "config";

pub fn configmap_name(cluster: &str) -> String {
    format!("{cluster}-kubeconf")
}

#[derive(Debug, thiserror::Error)]
pub enum KubeconfError {
    #[error(
        "ConfigMap {namespace}/{name} not found: has Kubean's kubeconfig.yml post-hook run (the ClusterOperation succeeded)?"
    )]
    NotFound { namespace: String, name: String },
    #[error("ConfigMap {namespace}/{name} has no key {KEY:?}")]
    NoKey { namespace: String, name: String },
    #[error("ConfigMap {namespace}/{name}: {message}")]
    Api {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{origin}: not a kubeconfig: {message}")]
    Invalid { origin: String, message: String },
    #[error(
        "{origin}: {path}: {what}; refused: it would run or read files on this machine whenever the kubeconfig is used (pass --allow-exec only if you trust everyone who can write it)"
    )]
    Unsafe {
        origin: String,
        path: String,
        what: &'static str,
    },
    #[error("{origin}: {path}: {message}")]
    Field {
        origin: String,
        path: String,
        message: String,
    },
    #[error("{origin}: {path}: the CA does not match the cluster's: {detail}")]
    CaMismatch {
        origin: String,
        path: String,
        detail: String,
    },
    #[error("{origin}: cannot compare its CA with the cluster's: {detail}")]
    CaUnverified { origin: String, detail: String },
}

/// The kubeconfig text Kubean stored for `cluster`, read from the management cluster.
pub async fn fetch(
    management: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<String, KubeconfError> {
    let name = configmap_name(cluster);
    let api: Api<ConfigMap> = Api::namespaced(management.clone(), namespace);
    let cm = api
        .get_opt(&name)
        .await
        .map_err(|e| KubeconfError::Api {
            namespace: namespace.to_owned(),
            name: name.clone(),
            message: crate::kube_error::error_chain(&e),
        })?
        .ok_or_else(|| KubeconfError::NotFound {
            namespace: namespace.to_owned(),
            name: name.clone(),
        })?;
    cm.data
        .and_then(|mut d| d.remove(KEY))
        .ok_or(KubeconfError::NoKey {
            namespace: namespace.to_owned(),
            name,
        })
}

/// How far the operator trusts a kubeconfig read from a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trust {
    /// `--allow-exec`: let it run plugins and read local files when used.
    pub allow_exec: bool,
}

/// How [`vet`] reaches the cluster a kubeconfig names, to compare CAs.
pub enum Reach<'a> {
    /// Through the kubeconfig itself: a TLS handshake with each cluster's `server` that
    /// trusts only that cluster's CA, then the current context reads `kube-root-ca.crt`.
    Itself,
    /// The cluster is already reached by a client whose TLS the operator's own kubeconfig
    /// verified (`init --discover`): only `kube-root-ca.crt`, read in this namespace.
    Client(&'a Client, &'a str),
}

/// A kubeconfig that passed [`vet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vetted {
    /// The CA hash of the current context's cluster (the CA kubeadm pins: its first cert).
    pub ca_hash: String,
}

/// User fields that run a program or read a local file when the kubeconfig is used.
const UNSAFE_USER: [(&str, &str); 5] = [
    ("exec", "an exec credential plugin"),
    (
        "auth-provider",
        "an auth provider (its plugins run commands, e.g. gcp's cmd-path)",
    ),
    (
        "tokenFile",
        "a token read from a local file (and sent to the server)",
    ),
    (
        "client-certificate",
        "a client certificate read from a local file",
    ),
    (
        "client-key",
        "a client key read from a local file (and used with the server)",
    ),
];

/// The one check every kubeconfig read from a cluster passes before anything uses it:
/// `origin` (`ConfigMap ns/name`) and a field path locate every refusal.
///
/// The CA comparison is two checks, because each alone can be fooled:
/// - a TLS handshake with `server` that trusts only the **first** certificate of
///   `certificate-authority-data` (the one a join pins): a throwaway CA fails, and so does a
///   bundle that puts a foreign CA first and the real one after it;
/// - `kube-root-ca.crt` (kube-controller-manager's `--root-ca-file`, in every namespace) must
///   hold that CA: the serving certificate may come from an intermediate or a front proxy
///   that verifies in a handshake but is not the CA nodes see in `cluster-info`.
///
/// Neither helps when the writer also replaces `server` with a host it runs: the spec's
/// `apiServer` is where nodes join, so `doctor` and the joins themselves are that check.
pub async fn vet(
    text: &str,
    origin: &str,
    trust: Trust,
    reach: Reach<'_>,
) -> Result<Vetted, KubeconfError> {
    let config = Kubeconfig::from_yaml(text).map_err(|e| KubeconfError::Invalid {
        origin: origin.to_owned(),
        message: crate::kube_error::error_chain(&e),
    })?;
    let field = |path: String, message: &str| KubeconfError::Field {
        origin: origin.to_owned(),
        path,
        message: message.to_owned(),
    };
    if !trust.allow_exec {
        for (i, user) in config.auth_infos.iter().enumerate() {
            let Some(info) = &user.auth_info else {
                continue;
            };
            let present = [
                info.exec.is_some(),
                info.auth_provider.is_some(),
                info.token_file.is_some(),
                info.client_certificate.is_some(),
                info.client_key.is_some(),
            ];
            if let Some(((key, what), _)) = UNSAFE_USER.iter().zip(present).find(|(_, p)| *p) {
                return Err(KubeconfError::Unsafe {
                    origin: origin.to_owned(),
                    path: format!("users[{i}].user.{key}"),
                    what,
                });
            }
        }
    }
    // Each cluster's pinned CA (DER of the first certificate), checked against its server.
    let mut first_cas = Vec::new();
    for (i, named) in config.clusters.iter().enumerate() {
        let path = format!("clusters[{i}].cluster");
        let cluster = named
            .cluster
            .as_ref()
            .ok_or_else(|| field(path.clone(), "no cluster"))?;
        if cluster.certificate_authority.is_some() && !trust.allow_exec {
            return Err(KubeconfError::Unsafe {
                origin: origin.to_owned(),
                path: format!("{path}.certificate-authority"),
                what: "a CA read from a local file",
            });
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            return Err(field(
                format!("{path}.insecure-skip-tls-verify"),
                "the server would never be verified; refused",
            ));
        }
        let data = cluster
            .certificate_authority_data
            .as_deref()
            .ok_or_else(|| {
                field(
                    format!("{path}.certificate-authority-data"),
                    "missing: the CA must be inline to be compared with the cluster's",
                )
            })?;
        let der = first_certificate(data)
            .map_err(|m| field(format!("{path}.certificate-authority-data"), &m))?;
        if let Reach::Itself = reach {
            let server = cluster
                .server
                .as_deref()
                .ok_or_else(|| field(format!("{path}.server"), "missing"))?;
            if !server.starts_with("https://") {
                return Err(field(
                    format!("{path}.server"),
                    "not https: nothing would verify the server",
                ));
            }
            let name = cluster.tls_server_name.clone();
            let (server_owned, der_owned) = (server.to_owned(), der.clone());
            let shaken = tokio::task::spawn_blocking(move || {
                handshake(&server_owned, name.as_deref(), der_owned)
            })
            .await
            .map_err(|e| KubeconfError::CaUnverified {
                origin: origin.to_owned(),
                detail: e.to_string(),
            })?;
            match shaken {
                Ok(()) => {}
                Err(Handshake::Mismatch(detail)) => {
                    return Err(KubeconfError::CaMismatch {
                        origin: origin.to_owned(),
                        path: format!("{path}.certificate-authority-data"),
                        detail: format!("{server} {detail}"),
                    });
                }
                Err(Handshake::Unreachable(detail)) => {
                    return Err(KubeconfError::CaUnverified {
                        origin: origin.to_owned(),
                        detail: format!("{path}.server {server}: {detail}"),
                    });
                }
            }
        }
        first_cas.push((named.name.clone(), i, der));
    }
    // The current context's cluster: the one render pins and the one reached below
    // (cluster-info has no context, only its one cluster).
    let current = config.current_context.clone().filter(|c| !c.is_empty());
    let context = match &current {
        Some(current) => Some(
            config
                .contexts
                .iter()
                .find(|c| c.name == *current)
                .and_then(|c| c.context.clone())
                .ok_or_else(|| field("current-context".into(), "names no context"))?,
        ),
        None => None,
    };
    let (_, index, der) = match &context {
        Some(context) => first_cas
            .iter()
            .find(|(name, _, _)| *name == context.cluster)
            .ok_or_else(|| field("current-context".into(), "its context names no cluster"))?,
        None if first_cas.len() == 1 => &first_cas[0],
        None => {
            return Err(field(
                "current-context".into(),
                "missing: say which cluster is the one to pin",
            ));
        }
    };
    let ca_path = format!("clusters[{index}].cluster.certificate-authority-data");
    let ca_hash = kk_spec::ca::ClusterCa::hash_der(der)
        .map_err(|e| field(ca_path.clone(), &e.to_string()))?;
    let own;
    let (client, namespace) = match reach {
        Reach::Client(client, namespace) => (client, namespace.to_owned()),
        Reach::Itself => {
            crate::install_crypto_provider();
            let mut kube_config =
                kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| KubeconfError::Invalid {
                        origin: origin.to_owned(),
                        message: crate::kube_error::error_chain(&e),
                    })?;
            crate::client::Timeouts::OneShot.apply(&mut kube_config);
            own = Client::try_from(kube_config).map_err(|e| KubeconfError::CaUnverified {
                origin: origin.to_owned(),
                detail: crate::kube_error::error_chain(&e),
            })?;
            let namespace = context.and_then(|c| c.namespace);
            (&own, namespace.unwrap_or_else(|| "default".into()))
        }
    };
    let published =
        root_ca_hashes(client, &namespace)
            .await
            .map_err(|detail| KubeconfError::CaUnverified {
                origin: origin.to_owned(),
                detail,
            })?;
    if !published.contains(&ca_hash) {
        return Err(KubeconfError::CaMismatch {
            origin: origin.to_owned(),
            path: ca_path,
            detail: format!(
                "{ca_hash} is not in ConfigMap {namespace}/{ROOT_CA_CONFIGMAP} (the cluster publishes {})",
                published.join(", ")
            ),
        });
    }
    Ok(Vetted { ca_hash })
}

/// The DER of the first certificate of base64 PEM text: the CA a join pins.
fn first_certificate(data: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let certs = x509_cert::Certificate::load_pem_chain(&pem)
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    let first = certs.first().ok_or("no certificate")?;
    first.to_der().map_err(|e| e.to_string())
}

/// The CA hashes of every certificate in `kube-root-ca.crt`'s `ca.crt`.
async fn root_ca_hashes(client: &Client, namespace: &str) -> Result<Vec<String>, String> {
    let where_ = format!("ConfigMap {namespace}/{ROOT_CA_CONFIGMAP}");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(ROOT_CA_CONFIGMAP)
        .await
        .map_err(|e| format!("{where_}: {}", crate::kube_error::error_chain(&e)))?
        .ok_or_else(|| format!("{where_} not found (kube-controller-manager publishes it)"))?;
    let pem = cm
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .ok_or_else(|| format!("{where_} has no ca.crt"))?;
    let certs = x509_cert::Certificate::load_pem_chain(pem.as_bytes())
        .map_err(|e| format!("{where_}: ca.crt: {e}"))?;
    certs
        .iter()
        .map(|c| {
            c.to_der()
                .map_err(|e| e.to_string())
                .and_then(|der| kk_spec::ca::ClusterCa::hash_der(&der).map_err(|e| e.to_string()))
        })
        .collect()
}

enum Handshake {
    /// The server answered TLS and its chain does not verify against the CA.
    Mismatch(String),
    /// No TLS answer to judge.
    Unreachable(String),
}

/// A TLS handshake with `server` (an `https://` URL) that trusts `ca` alone. Blocking: run
/// it off the async threads.
fn handshake(server: &str, tls_server_name: Option<&str>, ca: Vec<u8>) -> Result<(), Handshake> {
    use rustls::pki_types::{CertificateDer, ServerName};
    const TIMEOUT: Duration = Duration::from_secs(10);
    let uri: http::Uri = server
        .parse()
        .map_err(|e| Handshake::Unreachable(format!("not a URL: {e}")))?;
    if uri.scheme_str() != Some("https") {
        return Err(Handshake::Mismatch(
            "is not https: nothing verifies it".into(),
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| Handshake::Unreachable("no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let name = ServerName::try_from(tls_server_name.unwrap_or(&host).to_owned())
        .map_err(|e| Handshake::Mismatch(format!("server name: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca))
        .map_err(|e| Handshake::Mismatch(format!("the CA is not a usable trust anchor: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Handshake::Unreachable(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(Arc::new(tls), name)
        .map_err(|e| Handshake::Unreachable(e.to_string()))?;
    let addrs: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| Handshake::Unreachable(format!("cannot resolve: {e}")))?
        .collect();
    let mut last = String::from("no address");
    let mut sock = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, TIMEOUT) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    let mut sock = sock.ok_or(Handshake::Unreachable(last))?;
    let _ = sock.set_read_timeout(Some(TIMEOUT));
    let _ = sock.set_write_timeout(Some(TIMEOUT));
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            let tls = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>());
            return Err(match tls {
                Some(rustls::Error::InvalidCertificate(why)) => Handshake::Mismatch(format!(
                    "serves a certificate that does not verify against it ({why:?})"
                )),
                Some(other) => Handshake::Mismatch(format!("TLS handshake failed: {other}")),
                None => Handshake::Unreachable(format!("TLS handshake: {e}")),
            });
        }
    }
    Ok(())
}
