//! The cluster CA: the bundle Karpenter is given and the hash `kubeadm join` pins. Here, not
//! in render, because render, live (the CA hash the rotator publishes) and the CLI all need
//! it and live must not depend on render.

use base64::Engine;
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::{Decode, DecodePem, Encode};

/// Why a CA bundle or certificate cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    #[error("the CA bundle is not PEM text")]
    NotText,
    #[error("no BEGIN CERTIFICATE block in the CA bundle")]
    NoCertificate,
    #[error("unterminated certificate in the CA bundle")]
    Unterminated,
    #[error("the CA certificate does not parse: {0}")]
    Parse(String),
    #[error("cannot encode the public key: {0}")]
    Encode(String),
}

/// What render and join need to know about the cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCa {
    /// The PEM text, base64-encoded: Karpenter's `settings.clusterCABundle`.
    pub bundle_base64: String,
    /// `sha256:` + hex SHA-256 of the first certificate's DER SubjectPublicKeyInfo,
    /// the value of `kubeadm join --discovery-token-ca-cert-hash`.
    pub cert_hash: String,
}

impl ClusterCa {
    /// Reads a PEM bundle (one or more certificates; the first one is the CA kubeadm pins).
    pub fn from_pem(pem: &[u8]) -> Result<Self, CaError> {
        let text = std::str::from_utf8(pem).map_err(|_| CaError::NotText)?;
        let begin = text
            .find("-----BEGIN CERTIFICATE-----")
            .ok_or(CaError::NoCertificate)?;
        let end_marker = "-----END CERTIFICATE-----";
        let end = text[begin..]
            .find(end_marker)
            .map(|e| begin + e + end_marker.len())
            .ok_or(CaError::Unterminated)?;
        let cert =
            Certificate::from_pem(&text[begin..end]).map_err(|e| CaError::Parse(e.to_string()))?;
        Ok(Self {
            bundle_base64: base64::engine::general_purpose::STANDARD.encode(pem),
            cert_hash: spki_hash(&cert)?,
        })
    }

    /// From a DER certificate (as found in some tools' output).
    pub fn hash_der(der: &[u8]) -> Result<String, CaError> {
        let cert = Certificate::from_der(der).map_err(|e| CaError::Parse(e.to_string()))?;
        spki_hash(&cert)
    }
}

fn spki_hash(cert: &Certificate) -> Result<String, CaError> {
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| CaError::Encode(e.to_string()))?;
    let digest = Sha256::digest(&spki);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// Where one kubeconfig cluster's CA is: inline, or in a file the kubeconfig names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigCa {
    /// `certificate-authority-data`, base64-decoded (the PEM bundle).
    Data(Vec<u8>),
    /// `certificate-authority`: a path, relative to the kubeconfig's directory.
    File(String),
}

/// The CA of one cluster of a kubeconfig's text: the named cluster, else the current
/// context's. Pure (the CLI reads the file and a `certificate-authority` file it names);
/// a malformed kubeconfig is an error, never a panic (the `kubeconfig` fuzz target).
pub fn kubeconfig_ca(text: &str, cluster: Option<&str>) -> Result<KubeconfigCa, String> {
    use kk_model::yaml::{LoadLimits, load_documents};
    use serde_json::Value;
    fn find_named<'v>(config: &'v Value, list: &str, name: &str) -> Option<&'v Value> {
        config[list]
            .as_array()?
            .iter()
            .find(|entry| entry["name"].as_str() == Some(name))
    }
    let docs = load_documents(text, LoadLimits::default()).map_err(|e| e.to_string())?;
    let config = docs.first().map(|d| &d.value).ok_or("empty kubeconfig")?;
    let wanted = match cluster {
        Some(name) => name.to_owned(),
        None => {
            let current = config["current-context"]
                .as_str()
                .ok_or("no current-context; name the cluster")?;
            find_named(config, "contexts", current)
                .and_then(|c| c["context"]["cluster"].as_str())
                .ok_or(format!("context {current:?} not found"))?
                .to_owned()
        }
    };
    let entry = find_named(config, "clusters", &wanted)
        .map(|c| &c["cluster"])
        .ok_or(format!("cluster {wanted:?} not found"))?;
    if let Some(data) = entry["certificate-authority-data"].as_str() {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(KubeconfigCa::Data)
            .map_err(|e| format!("certificate-authority-data is not base64: {e}"));
    }
    if let Some(file) = entry["certificate-authority"].as_str() {
        return Ok(KubeconfigCa::File(file.to_owned()));
    }
    Err(format!("cluster {wanted:?} has no certificate authority"))
}
