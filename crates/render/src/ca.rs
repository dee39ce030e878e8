//! The cluster CA: the bundle Karpenter is given and the hash `kubeadm join` pins.

use base64::Engine;
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::{Decode, DecodePem, Encode};

use crate::RenderError;

/// What render needs to know about the cluster CA.
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
    pub fn from_pem(pem: &[u8]) -> Result<Self, RenderError> {
        let text = std::str::from_utf8(pem)
            .map_err(|_| RenderError::Ca("the CA bundle is not PEM text".into()))?;
        let begin = text
            .find("-----BEGIN CERTIFICATE-----")
            .ok_or_else(|| RenderError::Ca("no BEGIN CERTIFICATE block in the CA bundle".into()))?;
        let end_marker = "-----END CERTIFICATE-----";
        let end = text[begin..]
            .find(end_marker)
            .map(|e| begin + e + end_marker.len())
            .ok_or_else(|| RenderError::Ca("unterminated certificate in the CA bundle".into()))?;
        let cert = Certificate::from_pem(&text[begin..end])
            .map_err(|e| RenderError::Ca(format!("the CA certificate does not parse: {e}")))?;
        Ok(Self {
            bundle_base64: base64::engine::general_purpose::STANDARD.encode(pem),
            cert_hash: spki_hash(&cert)?,
        })
    }

    /// From a DER certificate (as found in some tools' output).
    pub fn hash_der(der: &[u8]) -> Result<String, RenderError> {
        let cert = Certificate::from_der(der)
            .map_err(|e| RenderError::Ca(format!("the CA certificate does not parse: {e}")))?;
        spki_hash(&cert)
    }
}

fn spki_hash(cert: &Certificate) -> Result<String, RenderError> {
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| RenderError::Ca(format!("cannot encode the public key: {e}")))?;
    let digest = Sha256::digest(&spki);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}
