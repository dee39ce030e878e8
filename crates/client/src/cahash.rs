//! The CA certificate hash `kubeadm join --discovery-token-ca-cert-hash` pins:
//! `sha256:` + hex SHA-256 of the CA certificate's DER SubjectPublicKeyInfo.

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kk_spec::ca::ClusterCa;
use kube::Client;
use kube::api::Api;

use crate::client::{ClientError, ClientOptions, make_config};

/// The ConfigMap every namespace gets from the controller-manager's root-CA publisher.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

#[derive(Debug, thiserror::Error)]
pub enum CaHashError {
    #[error("{origin}: {message}")]
    Certificate { origin: String, message: String },
    #[error("{0}: cannot read: {1}")]
    Read(String, #[source] std::io::Error),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the kubeconfig names no CA certificate (certificate-authority or -data)")]
    NoCa,
    #[error("ConfigMap {namespace}/{ROOT_CA_CONFIGMAP}: {message}")]
    ConfigMap { namespace: String, message: String },
}

/// The hash of the first certificate of a PEM bundle.
pub fn from_pem(pem: &[u8], origin: &str) -> Result<String, CaHashError> {
    ClusterCa::from_pem(pem)
        .map(|ca| ca.cert_hash)
        .map_err(|e| CaHashError::Certificate {
            origin: origin.to_owned(),
            message: format!("CA bundle: {e}"),
        })
}

pub fn from_pem_file(path: &Path) -> Result<String, CaHashError> {
    let pem = std::fs::read(path).map_err(|e| CaHashError::Read(path.display().to_string(), e))?;
    from_pem(&pem, &path.display().to_string())
}

/// The CA the kubeconfig (or the in-cluster service account) trusts for the apiserver.
pub async fn from_kubeconfig(options: &ClientOptions) -> Result<String, CaHashError> {
    let config = make_config(options).await?;
    from_client_config(&config)
}

/// The CA a client config trusts (the in-cluster config names a file).
pub fn from_client_config(config: &kube::Config) -> Result<String, CaHashError> {
    if let Some(der) = config.root_cert.as_ref().and_then(|certs| certs.first()) {
        return ClusterCa::hash_der(der).map_err(|e| CaHashError::Certificate {
            origin: "kubeconfig".into(),
            message: format!("CA bundle: {e}"),
        });
    }
    if let Some(path) = &config.root_cert_file {
        return from_pem_file(path);
    }
    Err(CaHashError::NoCa)
}

/// From the cluster itself: `ca.crt` of the `kube-root-ca.crt` ConfigMap in `namespace`.
pub async fn from_cluster(client: &Client, namespace: &str) -> Result<String, CaHashError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api
        .get_opt(ROOT_CA_CONFIGMAP)
        .await
        .map_err(|e| CaHashError::ConfigMap {
            namespace: namespace.to_owned(),
            message: crate::kube_error::error_chain(&e),
        })?
        .ok_or_else(|| CaHashError::ConfigMap {
            namespace: namespace.to_owned(),
            message: "not found (it is published by kube-controller-manager)".into(),
        })?;
    let pem = cm
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .ok_or_else(|| CaHashError::ConfigMap {
            namespace: namespace.to_owned(),
            message: "has no ca.crt key".into(),
        })?;
    from_pem(
        pem.as_bytes(),
        &format!("ConfigMap {namespace}/{ROOT_CA_CONFIGMAP}"),
    )
}
