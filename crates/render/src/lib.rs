//! `ElasticCluster` → the bundle that replaces the runbook, one file per artifact.
//!
//! Owns spec → bundle: every artifact the cluster needs, as bytes keyed by path. Must not do I/O
//! or talk to a cluster, and must not judge manifests (that is lint's job).
//!
//! Pure and deterministic: the same spec and CA give the same bytes. Each module renders
//! one family of artifacts from the spec; `render` puts them in a `Bundle` keyed by path.

mod admission;
pub mod authenticator;
pub mod budget;
pub mod cel;
mod cloud;
mod controller_workload;
mod csr_approver;
pub mod dashboard;
mod efa;
pub mod gpu;
pub mod gpu_operator;
pub mod health;
mod helm;
mod iam;
pub mod interruption;
mod join_rbac;
mod karpenter;
mod kubean;
pub mod kubean_ops;
pub mod kueue;
pub mod monitoring;
pub mod names;
pub mod node_identity;
pub mod node_registration;
pub mod nodeadm;
mod order;
mod pools;
pub use pools::node_pool_for;
pub mod rotator;
pub mod upgrade;
pub mod userdata;
pub mod verify;

use std::collections::BTreeMap;

use kk_spec::ElasticCluster;
use serde_json::Value;

pub use helm::HelmRelease;
pub use kk_spec::ca::{CaError, ClusterCa};

/// Why a spec that passed validation still cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The CA bundle is missing or not a certificate.
    #[error("CA bundle: {0}")]
    Ca(String),
    /// The spec breaks a rule `kk_spec` checks (render checks for itself: a caller may build
    /// an `ElasticCluster` without parsing it). Field paths, no positions.
    #[error("invalid spec: {0}")]
    Invalid(String),
    /// Serialising an artifact failed (a bug: every value we build is serialisable).
    #[error("cannot serialise {path}: {message}")]
    Serialize { path: String, message: String },
}

impl From<CaError> for RenderError {
    fn from(e: CaError) -> Self {
        RenderError::Ca(e.to_string())
    }
}

/// What a bundle file is, so nothing downstream guesses from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// Kubernetes objects, applied in `ORDER.md`'s order.
    Manifest,
    /// Values for a Helm chart (`helm upgrade -f`), never applied as objects.
    HelmValues,
    /// Anything else: `ORDER.md`, IAM policy JSON, scripts.
    Document,
}

/// A bundle read back from files could not be typed (a YAML file that does not parse, or
/// that mixes objects and Helm values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct BundleError {
    pub path: String,
    pub message: String,
}

/// The rendered files, keyed by relative path (sorted, so output order is stable). `files`
/// holds each file's text exactly as written; each file also knows its [`FileKind`] and, for
/// manifests and Helm values, keeps the objects it was written from, so nothing is parsed
/// again and nothing is skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bundle {
    pub files: BTreeMap<String, String>,
    kinds: BTreeMap<String, FileKind>,
    objects: BTreeMap<String, Vec<Value>>,
    /// Each JSON document (IAM policies, the interruption queue and rules) as the value it was
    /// written from, or parsed once when read back from files.
    json: BTreeMap<String, Value>,
    /// The Helm releases, in install order (a bundle read back from files has none: only a
    /// rendered spec says which chart and version its values are for).
    releases: Vec<HelmRelease>,
}

/// The cluster a bundle file is applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Where Kubean runs: its Cluster, ClusterOperation and their ConfigMaps.
    Management,
    /// The cluster Kubean builds: everything else.
    NewCluster,
}

impl Bundle {
    fn add_yaml(&mut self, path: &str, docs: &[Value]) -> Result<(), RenderError> {
        self.add_yaml_as(path, docs, FileKind::Manifest)
    }

    fn add_values(&mut self, path: &str, values: Value) -> Result<(), RenderError> {
        self.add_yaml_as(path, &[values], FileKind::HelmValues)
    }

    /// A Helm release and its values file.
    fn add_release(&mut self, release: HelmRelease, values: Value) -> Result<(), RenderError> {
        self.add_values(&release.values_file, values)?;
        self.releases.push(release);
        Ok(())
    }

    /// The Helm releases `apply` installs and ORDER.md names, in that order.
    pub fn helm_releases(&self) -> &[HelmRelease] {
        &self.releases
    }

    /// Which cluster the file at `path` is applied to.
    pub fn target(path: &str) -> Target {
        order::target(path)
    }

    fn add_yaml_as(
        &mut self,
        path: &str,
        docs: &[Value],
        kind: FileKind,
    ) -> Result<(), RenderError> {
        let mut text = String::new();
        for (i, doc) in docs.iter().enumerate() {
            if i > 0 {
                text.push_str("---\n");
            }
            let yaml = serde_saphyr::to_string(doc).map_err(|e| RenderError::Serialize {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            text.push_str(&yaml);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        self.insert(path, text, kind, docs.to_vec());
        Ok(())
    }

    fn add_json(&mut self, path: &str, value: &Value) -> Result<(), RenderError> {
        let mut text = serde_json::to_string_pretty(value).map_err(|e| RenderError::Serialize {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        text.push('\n');
        self.insert(path, text, FileKind::Document, Vec::new());
        self.json.insert(path.to_owned(), value.clone());
        Ok(())
    }

    fn add_text(&mut self, path: &str, text: String) {
        self.insert(path, text, FileKind::Document, Vec::new());
    }

    fn insert(&mut self, path: &str, text: String, kind: FileKind, objects: Vec<Value>) {
        self.files.insert(path.to_owned(), text);
        self.kinds.insert(path.to_owned(), kind);
        self.objects.insert(path.to_owned(), objects);
    }

    /// A bundle read back from disk (`apply DIR`): every YAML file is parsed once and typed by
    /// content (documents with `apiVersion` and `kind` are a manifest; documents without are
    /// Helm values), every JSON file parsed once; one that does not parse, or mixes both, is
    /// an error, never skipped.
    pub fn from_files(files: BTreeMap<String, String>) -> Result<Bundle, BundleError> {
        let mut bundle = Bundle::default();
        for (path, text) in files {
            if path.ends_with(".json") {
                let value: Value = serde_json::from_str(&text).map_err(|e| {
                    let message = e.to_string();
                    // serde_json ends its text with the position, which the path now carries.
                    let message = message.split(" at line ").next().unwrap_or_default();
                    BundleError {
                        path: format!("{path}:{}:{}", e.line(), e.column()),
                        message: message.to_owned(),
                    }
                })?;
                bundle.json.insert(path.clone(), value);
            }
            if !(path.ends_with(".yaml") || path.ends_with(".yml")) {
                bundle.insert(&path, text, FileKind::Document, Vec::new());
                continue;
            }
            let docs = kk_model::yaml::load_documents(&text, Default::default()).map_err(|e| {
                BundleError {
                    path: format!("{path}:{}", e.pos),
                    message: e.message,
                }
            })?;
            let objects: Vec<Value> = docs.into_iter().map(|d| d.value).collect();
            let is_object = |v: &Value| v.get("apiVersion").is_some() && v.get("kind").is_some();
            let kind = if objects.iter().all(is_object) {
                FileKind::Manifest
            } else if objects.iter().all(|v| v.is_object() && !is_object(v)) {
                FileKind::HelmValues
            } else {
                return Err(BundleError {
                    path,
                    message: "neither Kubernetes objects (apiVersion and kind) nor Helm values"
                        .into(),
                });
            };
            bundle.insert(&path, text, kind, objects);
        }
        Ok(bundle)
    }

    /// What the file at `path` is.
    pub fn kind(&self, path: &str) -> Option<FileKind> {
        self.kinds.get(path).copied()
    }

    /// The objects a manifest or Helm values file was written from.
    pub fn objects(&self, path: &str) -> &[Value] {
        self.objects.get(path).map_or(&[], Vec::as_slice)
    }

    /// The JSON document at `path` (`iam/…`, `interruption/…`), as written or as read back.
    pub fn json(&self, path: &str) -> Option<&Value> {
        self.json.get(path)
    }

    /// Every Kubernetes object in the bundle's manifests, in apply order (files sorted by path
    /// within the order `order::APPLY_ORDER` gives).
    pub fn manifests(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for path in order::manifest_paths(self) {
            for value in self.objects(&path) {
                out.push((path.clone(), value.clone()));
            }
        }
        out
    }
}

/// Renders the whole bundle. `ca_pem` is the cluster CA (the CLI resolves
/// `spec.caBundle` from a file, base64 or kubeconfig).
pub fn render(cluster: &ElasticCluster, ca_pem: &[u8]) -> Result<Bundle, RenderError> {
    let problems = kk_spec::validate(cluster);
    if !problems.is_empty() {
        return Err(RenderError::Invalid(
            problems
                .iter()
                .map(|(path, message)| format!("{path}: {message}"))
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    let ca = ClusterCa::from_pem(ca_pem)?;
    if let Some(pinned) = &cluster.spec.join.ca_cert_hash
        && *pinned != ca.cert_hash
    {
        // The seed's "CA certificate hash is incorrect": every node would refuse to join.
        return Err(RenderError::Ca(format!(
            "spec.join.caCertHash {pinned} does not match the CA bundle ({}); kubeadm join would refuse the cluster",
            ca.cert_hash
        )));
    }
    let mut bundle = Bundle::default();
    kubean::render(cluster, &mut bundle)?;
    cloud::render(cluster, &mut bundle)?;
    karpenter::render(cluster, &ca, &mut bundle)?;
    let rendered_pools = pools::render(cluster, &ca, &mut bundle)?;
    match cluster.spec.gpu.as_ref().map(|g| g.stack) {
        Some(kk_spec::GpuSoftware::Operator) => gpu_operator::render(cluster, &mut bundle)?,
        _ => gpu::render(cluster, &mut bundle)?,
    }
    efa::render(cluster, &mut bundle)?;
    kueue::render(cluster, &mut bundle)?;
    iam::render(cluster, &mut bundle)?;
    interruption::render(cluster, &mut bundle)?;
    authenticator::render(cluster, &mut bundle)?;
    verify::render(cluster, &rendered_pools, &mut bundle)?;
    rotator::render(cluster, &ca, &mut bundle)?;
    join_rbac::render(cluster, &mut bundle)?;
    csr_approver::render(cluster, &mut bundle)?;
    health::render(cluster, &mut bundle)?;
    budget::render(cluster, &mut bundle)?;
    monitoring::render(cluster, &mut bundle)?;
    order::render(cluster, &ca, &mut bundle);
    Ok(bundle)
}

/// Whether the spec names no CA yet: stage 1 of the two-stage flow.
pub fn is_stage1(cluster: &ElasticCluster) -> bool {
    cluster.spec.ca_bundle == kk_spec::CaBundleSource::default()
}

/// Stage 1: before Kubean has built the control plane there is no cluster CA, and everything
/// but `kubean/` needs it (Karpenter's `clusterCABundle`, the join's CA hash). Renders `kubean/`
/// for the management cluster and an ORDER.md that says how to reach stage 2.
pub fn render_stage1(cluster: &ElasticCluster) -> Result<Bundle, RenderError> {
    let mut bundle = Bundle::default();
    kubean::render(cluster, &mut bundle)?;
    order::render_stage1(cluster, &mut bundle);
    Ok(bundle)
}

/// The CA PEM when the spec carries it inline (`caBundle.base64`); `None` when it
/// must be read from a file or kubeconfig.
pub fn inline_ca_pem(cluster: &ElasticCluster) -> Option<Result<Vec<u8>, RenderError>> {
    use base64::Engine;
    cluster.spec.ca_bundle.base64.as_ref().map(|b64| {
        base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| RenderError::Ca(format!("caBundle.base64 is not base64: {e}")))
    })
}
