//! The CRDs embedded at build time (see build.rs), parsed and compiled once on first use.

use std::sync::LazyLock;

use serde_json::Value;

use crate::schema::Node;

/// The JSON that build.rs wrote: an array of slimmed CRDs.
const CRDS_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/crds.json"));

/// One served version of one CRD.
#[derive(Debug)]
pub(crate) struct CrdVersion {
    /// `group/version`, the apiVersion that selects it.
    pub api_version: String,
    pub kind: String,
    /// The file it came from, e.g. `kubean/kubean.io_clusters.yaml`.
    pub source: String,
    /// With a status subresource, create drops `.status` before validation.
    pub status_subresource: bool,
    pub schema: Node,
}

/// Every served CRD version, in embedding order.
pub(crate) static CRDS: LazyLock<Vec<CrdVersion>> = LazyLock::new(|| load(CRDS_JSON));

/// Parses the embedded text; an unreadable document yields no kinds (a test checks they load).
fn load(json: &str) -> Vec<CrdVersion> {
    let Ok(Value::Array(crds)) = serde_json::from_str::<Value>(json) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for crd in &crds {
        let text = |k: &str| {
            crd.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (group, kind, source) = (text("group"), text("kind"), text("source"));
        let versions = crd.get("versions").and_then(Value::as_array);
        for version in versions.into_iter().flatten() {
            if version.get("served").and_then(Value::as_bool) != Some(true) {
                continue;
            }
            let name = version
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let api_version = if group.is_empty() {
                name.to_owned()
            } else {
                format!("{group}/{name}")
            };
            out.push(CrdVersion {
                api_version,
                kind: kind.clone(),
                source: source.clone(),
                status_subresource: version
                    .get("subresources")
                    .and_then(|s| s.get("status"))
                    .is_some(),
                schema: Node::parse(version.get("schema").unwrap_or(&Value::Null)),
            });
        }
    }
    out
}

/// The CRD version for an apiVersion and kind.
pub(crate) fn find(api_version: &str, kind: &str) -> Option<&'static CrdVersion> {
    CRDS.iter()
        .find(|c| c.api_version == api_version && c.kind == kind)
}
