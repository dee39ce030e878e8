//! The cluster CA: the bundle Karpenter is given and the hash `kubeadm join` pins. Here, not
//! in render, because render, live (the CA hash the rotator publishes) and the CLI all need
//! it and live must not depend on render.

use base64::Engine;
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::der::{Decode, DecodePem, Encode};

/// Why a CA bundle or certificate cannot be used. No variant carries a block's content: a
/// refused bundle may hold a private key, and errors end up in terminals and CI logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    #[error("the CA bundle is not PEM text")]
    NotText,
    #[error("no BEGIN CERTIFICATE block in the CA bundle")]
    NoCertificate,
    #[error("line {line}: unterminated {label} block in the CA bundle")]
    Unterminated { label: String, line: usize },
    /// Any block but a certificate: the bundle is copied to every node (Karpenter's
    /// `clusterCABundle`, nodeadm's userData), so a key in it would be the CA's key everywhere.
    #[error(
        "line {line}: a {label} PEM block: the CA bundle takes CERTIFICATE blocks only (it is copied into Karpenter's values and every node's userData); remove the block, keep the key off the bundle"
    )]
    NotCertificate { label: String, line: usize },
    #[error("line {line}: a PEM marker that is not at the start of its line")]
    StrayMarker { line: usize },
    #[error("line {line}: the certificate does not parse: {why}")]
    Parse { line: usize, why: String },
    #[error("the DER certificate does not parse: {0}")]
    Der(String),
    #[error("cannot encode the public key: {0}")]
    Encode(String),
}

/// The label of a BEGIN/END line as it may be shown: PEM labels are short upper-case words, and
/// anything else (a mangled line could hold key material) is not repeated.
fn shown_label(label: &str) -> String {
    let plain = !label.is_empty()
        && label.len() <= 40
        && label
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == ' ');
    if plain {
        label.to_owned()
    } else {
        "malformed (label not shown)".to_owned()
    }
}

/// The CERTIFICATE blocks of a PEM bundle, each with the line its BEGIN is on (1-based), in
/// order. Any other block, an unterminated one, or a marker inside a line is an error: the
/// bundle holds certificates only. Text between blocks (comments some tools write) is ignored
/// here and left out of what [`ClusterCa`] passes on.
pub fn certificate_blocks(text: &str) -> Result<Vec<(usize, String)>, CaError> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        let marker = line.find("-----BEGIN").or_else(|| line.find("-----END"));
        if let Some(at) = marker
            && at > 0
        {
            return Err(CaError::StrayMarker { line: line_no });
        }
        let label_of = |rest: &str| rest.strip_suffix("-----").map(str::trim).map(str::to_owned);
        if let Some(rest) = line.strip_prefix("-----BEGIN") {
            let label = label_of(rest).unwrap_or_default();
            if let Some((open_label, start, _)) = &open {
                // A BEGIN inside a block: report the inner block if it is no certificate
                // (the one that must not travel), else the block left open.
                return Err(if label == "CERTIFICATE" {
                    CaError::Unterminated {
                        label: shown_label(open_label),
                        line: *start,
                    }
                } else {
                    CaError::NotCertificate {
                        label: shown_label(&label),
                        line: line_no,
                    }
                });
            }
            if label != "CERTIFICATE" {
                return Err(CaError::NotCertificate {
                    label: shown_label(&label),
                    line: line_no,
                });
            }
            open = Some((label, line_no, format!("{line}\n")));
        } else if let Some(rest) = line.strip_prefix("-----END") {
            let label = label_of(rest).unwrap_or_default();
            match open.take() {
                Some((open_label, start, mut block)) if open_label == label => {
                    block.push_str(line);
                    block.push('\n');
                    blocks.push((start, block));
                }
                Some((open_label, start, _)) => {
                    return Err(CaError::Unterminated {
                        label: shown_label(&open_label),
                        line: start,
                    });
                }
                None => {
                    return Err(CaError::NotCertificate {
                        label: shown_label(&label),
                        line: line_no,
                    });
                }
            }
        } else if let Some((_, _, block)) = &mut open {
            block.push_str(line);
            block.push('\n');
        }
    }
    if let Some((label, line, _)) = open {
        return Err(CaError::Unterminated {
            label: shown_label(&label),
            line,
        });
    }
    if blocks.is_empty() {
        return Err(CaError::NoCertificate);
    }
    Ok(blocks)
}

/// What render and join need to know about the cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCa {
    /// The bundle's certificates, PEM, base64-encoded: Karpenter's `settings.clusterCABundle`
    /// and nodeadm's `certificateAuthority`. Only the CERTIFICATE blocks, so nothing else
    /// that sat in the file travels to the nodes.
    pub bundle_base64: String,
    /// `sha256:` + hex SHA-256 of the first certificate's DER SubjectPublicKeyInfo,
    /// the value of `kubeadm join --discovery-token-ca-cert-hash`.
    pub cert_hash: String,
}

impl ClusterCa {
    /// Reads a PEM bundle (one or more certificates; the first one is the CA kubeadm pins).
    /// Every block must be a certificate that parses (a key labelled CERTIFICATE is refused too).
    pub fn from_pem(pem: &[u8]) -> Result<Self, CaError> {
        let text = std::str::from_utf8(pem).map_err(|_| CaError::NotText)?;
        let blocks = certificate_blocks(text)?;
        let mut certificates = Vec::with_capacity(blocks.len());
        for (line, block) in &blocks {
            certificates.push(Certificate::from_pem(block).map_err(|e| CaError::Parse {
                line: *line,
                why: e.to_string(),
            })?);
        }
        let only_certificates: String = blocks.iter().map(|(_, b)| b.as_str()).collect();
        Ok(Self {
            bundle_base64: base64::engine::general_purpose::STANDARD.encode(only_certificates),
            cert_hash: spki_hash(&certificates[0])?,
        })
    }

    /// From a DER certificate (as found in some tools' output).
    pub fn hash_der(der: &[u8]) -> Result<String, CaError> {
        let cert = Certificate::from_der(der).map_err(|e| CaError::Der(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixtures' CA (a throwaway test CA).
    const CA: &str = include_str!("../../../fixtures/specs/pki/ca.crt");
    /// A block body that is no real key: the scanner refuses by label before any decoding.
    const BODY: &str = "c2VjcmV0LWtleS1tYXRlcmlhbC1ub3QtdG8tYmUtc2hvd24=";

    fn block(label: &str) -> String {
        format!("-----BEGIN {label}-----\n{BODY}\n-----END {label}-----\n")
    }

    #[test]
    fn a_certificate_bundle_passes_and_travels_as_is() {
        let ca = ClusterCa::from_pem(CA.as_bytes()).unwrap();
        use base64::Engine;
        assert_eq!(
            ca.bundle_base64,
            base64::engine::general_purpose::STANDARD.encode(CA)
        );
        assert!(ca.cert_hash.starts_with("sha256:"));
    }

    #[test]
    fn every_key_block_is_refused_by_type_and_line_without_its_content() {
        for label in [
            "PRIVATE KEY",
            "EC PRIVATE KEY",
            "RSA PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
        ] {
            // After the certificate, and before it.
            for (pem, line) in [
                (format!("{CA}{}", block(label)), 12),
                (format!("{}{CA}", block(label)), 1),
            ] {
                let e = ClusterCa::from_pem(pem.as_bytes()).unwrap_err();
                assert_eq!(
                    e,
                    CaError::NotCertificate {
                        label: label.into(),
                        line
                    },
                    "{label}"
                );
                let shown = e.to_string();
                assert!(
                    shown.contains(&format!("line {line}: a {label} PEM block")),
                    "{shown}"
                );
                assert!(!shown.contains(BODY), "{shown}");
            }
        }
    }

    #[test]
    fn a_key_inside_an_open_certificate_block_is_refused_as_a_key() {
        let cert_lines: Vec<&str> = CA.lines().collect();
        let pem = format!(
            "{}\n{}{}\n",
            cert_lines[..3].join("\n"),
            block("PRIVATE KEY"),
            cert_lines[3..].join("\n")
        );
        let e = ClusterCa::from_pem(pem.as_bytes()).unwrap_err();
        assert!(
            matches!(&e, CaError::NotCertificate { label, line: 4 } if label == "PRIVATE KEY"),
            "{e:?}"
        );
    }

    #[test]
    fn a_key_labelled_certificate_does_not_parse_and_is_refused() {
        let e =
            ClusterCa::from_pem(format!("{CA}{}", block("CERTIFICATE")).as_bytes()).unwrap_err();
        assert!(matches!(e, CaError::Parse { line: 12, .. }), "{e:?}");
        assert!(!e.to_string().contains(BODY));
    }

    #[test]
    fn a_mangled_label_is_not_repeated() {
        let pem = format!("{CA}-----BEGIN {BODY}-----\n-----END X-----\n");
        let e = ClusterCa::from_pem(pem.as_bytes()).unwrap_err();
        assert!(!e.to_string().contains(BODY), "{e}");
        assert!(e.to_string().contains("malformed"), "{e}");
    }

    #[test]
    fn markers_inside_lines_and_open_blocks_are_refused() {
        let inline = format!("{CA}junk -----BEGIN PRIVATE KEY-----\n");
        assert_eq!(
            ClusterCa::from_pem(inline.as_bytes()).unwrap_err(),
            CaError::StrayMarker { line: 12 }
        );
        let open = CA.replace("-----END CERTIFICATE-----", "");
        assert!(matches!(
            ClusterCa::from_pem(open.as_bytes()).unwrap_err(),
            CaError::Unterminated { line: 1, .. }
        ));
        assert_eq!(
            ClusterCa::from_pem(b"no pem here\n").unwrap_err(),
            CaError::NoCertificate
        );
    }

    #[test]
    fn text_between_blocks_does_not_travel() {
        let pem = format!("# subject=CN=kubernetes\n{CA}trailing words\n");
        let ca = ClusterCa::from_pem(pem.as_bytes()).unwrap();
        use base64::Engine;
        assert_eq!(
            ca.bundle_base64,
            base64::engine::general_purpose::STANDARD.encode(CA)
        );
    }
}
