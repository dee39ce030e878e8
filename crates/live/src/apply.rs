//! Ordered server-side apply with a server-side dry run of everything first, so that an
//! object the apiserver refuses stops the run before anything has changed.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, Discovery};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Server-side dry run only: nothing is persisted.
    pub dry_run: bool,
    pub field_manager: String,
    /// Take ownership of fields another manager set (kubectl's --force-conflicts).
    pub force_conflicts: bool,
    /// Namespace for namespaced objects that name none.
    pub default_namespace: String,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            field_manager: "kubean-karpenter".into(),
            force_conflicts: false,
            default_namespace: "default".into(),
        }
    }
}

/// One object the apiserver accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub source: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// One object the apiserver refused, in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub source: String,
    /// `Kind/name` (with `namespace/` in front for namespaced objects).
    pub object: String,
    /// The apiserver's message verbatim (for CRDs it carries the CEL rule's message and field).
    pub message: String,
    pub reason: String,
    pub code: u16,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.source, self.object, self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The apiserver refused objects; nothing was applied (the dry run caught them).
    #[error("{} object(s) refused by the apiserver; nothing applied", .0.len())]
    Refused(Vec<Refusal>),
    /// A real apply failed after the dry run passed (a race or an admission webhook).
    #[error("{applied} object(s) applied, then {refusal}")]
    Partial { applied: usize, refusal: Refusal },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("cannot reach the apiserver: {0}")]
    Unreachable(#[source] kube::Error),
}

struct Target {
    source: String,
    object: DynamicObject,
    resource: ApiResource,
    namespace: Option<String>,
}

fn label(t: &Target) -> String {
    let name = t.object.metadata.name.clone().unwrap_or_default();
    match &t.namespace {
        Some(ns) => format!("{ns}/{}/{name}", t.resource.kind),
        None => format!("{}/{name}", t.resource.kind),
    }
}

fn resolve(
    discovery: &Discovery,
    source: &str,
    value: &Value,
    options: &ApplyOptions,
) -> Result<Target, ApplyError> {
    let invalid = |message: String| ApplyError::Invalid {
        origin: source.to_owned(),
        message,
    };
    let api_version = value["apiVersion"]
        .as_str()
        .ok_or_else(|| invalid("object has no apiVersion".into()))?;
    let kind = value["kind"]
        .as_str()
        .ok_or_else(|| invalid("object has no kind".into()))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps): (ApiResource, ApiCapabilities) =
        discovery.resolve_gvk(&gvk).ok_or_else(|| {
            invalid(format!(
                "the apiserver serves no {kind} in {api_version} (CRD not installed?)"
            ))
        })?;
    let object: DynamicObject =
        serde_json::from_value(value.clone()).map_err(|e| invalid(format!("{kind}: {e}")))?;
    if object
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(invalid(format!("{kind} has no metadata.name")));
    }
    let namespace = match caps.scope {
        Scope::Cluster => None,
        Scope::Namespaced => Some(
            object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| options.default_namespace.clone()),
        ),
    };
    Ok(Target {
        source: source.to_owned(),
        object,
        resource,
        namespace,
    })
}

async fn patch(
    client: &Client,
    t: &Target,
    options: &ApplyOptions,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = match &t.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &t.resource),
        None => Api::all_with(client.clone(), &t.resource),
    };
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = options.force_conflicts;
    params.dry_run = dry_run;
    let name = t.object.metadata.name.clone().unwrap_or_default();
    api.patch(&name, &params, &Patch::Apply(&t.object))
        .await
        .map(|_| ())
}

fn refusal(t: &Target, err: kube::Error) -> Result<Refusal, ApplyError> {
    match err {
        kube::Error::Api(status) => Ok(Refusal {
            source: t.source.clone(),
            object: label(t),
            message: status.message.clone(),
            reason: status.reason.clone(),
            code: status.code,
        }),
        other => Err(ApplyError::Unreachable(other)),
    }
}

/// Applies `objects` (source, object) in the given order. Every object is first sent as
/// a server-side dry run; only when all pass is anything persisted (unless `dry_run`).
pub async fn apply_all(
    client: &Client,
    objects: &[(String, Value)],
    options: &ApplyOptions,
) -> Result<Vec<Applied>, ApplyError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(ApplyError::Unreachable)?;
    let targets = objects
        .iter()
        .map(|(source, value)| resolve(&discovery, source, value, options))
        .collect::<Result<Vec<_>, _>>()?;
    let mut refused = Vec::new();
    for t in &targets {
        if let Err(err) = patch(client, t, options, true).await {
            refused.push(refusal(t, err)?);
        }
    }
    if !refused.is_empty() {
        return Err(ApplyError::Refused(refused));
    }
    let mut applied = Vec::new();
    for t in &targets {
        if !options.dry_run
            && let Err(err) = patch(client, t, options, false).await
        {
            return Err(ApplyError::Partial {
                applied: applied.len(),
                refusal: refusal(t, err)?,
            });
        }
        applied.push(Applied {
            source: t.source.clone(),
            kind: t.resource.kind.clone(),
            name: t.object.metadata.name.clone().unwrap_or_default(),
            namespace: t.namespace.clone(),
        });
    }
    Ok(applied)
}
