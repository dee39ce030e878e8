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
    /// The object's resourceVersion after the apply (unchanged by a no-op apply).
    pub resource_version: Option<String>,
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
    #[error("{} object(s) applied, then {refusal}", .applied.len())]
    Partial {
        applied: Vec<Applied>,
        refusal: Box<Refusal>,
        /// `Kind/name` of the objects after the refused one, not applied.
        not_applied: Vec<String>,
    },
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
    let mut object: DynamicObject =
        serde_json::from_value(value.clone()).map_err(|e| invalid(format!("{kind}: {e}")))?;
    // A Namespace that sets nothing but its name leaves the applier owning no field: the
    // apiserver then records a `before-first-apply` manager, and every later apply rewrites the
    // managed fields and bumps the resourceVersion. Applying the label the apiserver sets on
    // every Namespace anyway (kubernetes.io/metadata.name = its name) makes a re-apply a no-op.
    if kind == "Namespace"
        && api_version == "v1"
        && let Some(name) = object.metadata.name.clone()
    {
        object
            .metadata
            .labels
            .get_or_insert_default()
            .entry("kubernetes.io/metadata.name".to_owned())
            .or_insert(name);
    }
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
) -> Result<DynamicObject, kube::Error> {
    let api: Api<DynamicObject> = match &t.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &t.resource),
        None => Api::all_with(client.clone(), &t.resource),
    };
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = options.force_conflicts;
    params.dry_run = dry_run;
    let name = t.object.metadata.name.clone().unwrap_or_default();
    api.patch(&name, &params, &Patch::Apply(&t.object)).await
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
    for (i, t) in targets.iter().enumerate() {
        let mut resource_version = None;
        if !options.dry_run {
            match patch(client, t, options, false).await {
                Ok(obj) => resource_version = obj.metadata.resource_version,
                Err(err) => {
                    return Err(ApplyError::Partial {
                        applied,
                        refusal: Box::new(refusal(t, err)?),
                        not_applied: targets[i + 1..].iter().map(label).collect(),
                    });
                }
            }
        }
        applied.push(Applied {
            source: t.source.clone(),
            kind: t.resource.kind.clone(),
            name: t.object.metadata.name.clone().unwrap_or_default(),
            namespace: t.namespace.clone(),
            resource_version,
        });
    }
    Ok(applied)
}

/// Fields the server sets that say nothing about what was applied.
fn comparable(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            m.remove(k);
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// Leaf-level differences between two JSON values, as `path: old -> new`.
pub fn json_diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                json_diff(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        // Scripts (userData) and config files: the changed lines, not two whole texts.
        (Value::String(a), Value::String(b))
            if a != b && (a.contains('\n') || b.contains('\n')) =>
        {
            let old: std::collections::BTreeSet<&str> = a.lines().collect();
            let new: std::collections::BTreeSet<&str> = b.lines().collect();
            out.push(format!("{path}: (text)"));
            out.extend(
                a.lines()
                    .filter(|l| !new.contains(l))
                    .map(|l| format!("  - {l}")),
            );
            out.extend(
                b.lines()
                    .filter(|l| !old.contains(l))
                    .map(|l| format!("  + {l}")),
            );
        }
        (a, b) if a != b => out.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

/// What applying `objects` would change: per object `create`, `unchanged`, or the changed
/// fields, from a server-side dry run compared with the live object.
pub async fn diff_all(
    client: &Client,
    objects: &[(String, Value)],
    options: &ApplyOptions,
) -> Result<Vec<(String, Vec<String>)>, ApplyError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(ApplyError::Unreachable)?;
    let mut out = Vec::new();
    for (source, value) in objects {
        let t = resolve(&discovery, source, value, options)?;
        let api: Api<DynamicObject> = match &t.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &t.resource),
            None => Api::all_with(client.clone(), &t.resource),
        };
        let name = t.object.metadata.name.clone().unwrap_or_default();
        let live = api.get_opt(&name).await.map_err(ApplyError::Unreachable)?;
        let Some(live) = live else {
            out.push((label(&t), vec!["create".to_owned()]));
            continue;
        };
        let after = match patch(client, &t, options, true).await {
            Ok(o) => o,
            Err(err) => return Err(ApplyError::Refused(vec![refusal(&t, err)?])),
        };
        let mut changes = Vec::new();
        json_diff(
            "",
            &comparable(serde_json::to_value(&live).unwrap_or_default()),
            &comparable(serde_json::to_value(&after).unwrap_or_default()),
            &mut changes,
        );
        out.push((label(&t), changes));
    }
    Ok(out)
}

/// The label every rendered object carries; `--prune` deletes only objects with it.
pub use kk_spec::names::MANAGED_BY;

/// Where `apply` records what it applied for one cluster (kube-system, one ConfigMap per
/// cluster name), so that `--prune` deletes only objects this cluster's applies created — never
/// another cluster's objects that share the label (several clusters' kubean/ objects live in
/// one management cluster). The management cluster's objects have an inventory of their own:
/// where Kubean runs in the cluster it built, one shared record would make each side's prune
/// delete the other side's objects.
pub fn inventory_name(cluster: &str, management: bool) -> String {
    if management {
        format!("kubean-karpenter-applied-{cluster}-kubean")
    } else {
        format!("kubean-karpenter-applied-{cluster}")
    }
}

const INVENTORY_NAMESPACE: &str = "kube-system";

/// `apiVersion kind namespace name` (namespace `-` for cluster-scoped objects) per object.
pub async fn inventory_lines(
    client: &Client,
    objects: &[(String, Value)],
    options: &ApplyOptions,
) -> Result<std::collections::BTreeSet<String>, ApplyError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(ApplyError::Unreachable)?;
    let mut out = std::collections::BTreeSet::new();
    for (source, value) in objects {
        let t = resolve(&discovery, source, value, options)?;
        out.insert(format!(
            "{} {} {} {}",
            t.resource.api_version,
            t.resource.kind,
            t.namespace.as_deref().unwrap_or("-"),
            t.object.metadata.name.as_deref().unwrap_or("")
        ));
    }
    Ok(out)
}

/// The recorded inventory (empty when none was recorded yet).
pub async fn read_inventory(
    client: &Client,
    name: &str,
) -> Result<std::collections::BTreeSet<String>, kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), INVENTORY_NAMESPACE);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|mut d| d.remove("objects"))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default())
}

/// Records `lines` as the inventory (server-side apply, our field manager).
pub async fn write_inventory(
    client: &Client,
    name: &str,
    cluster: &str,
    lines: &std::collections::BTreeSet<String>,
    options: &ApplyOptions,
) -> Result<(), kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), INVENTORY_NAMESPACE);
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": INVENTORY_NAMESPACE,
                     "labels": {MANAGED_BY.0: MANAGED_BY.1, kk_spec::names::CLUSTER_LABEL: cluster}},
        "data": {"objects": lines.iter().cloned().collect::<Vec<_>>().join("\n")},
    });
    let mut params = PatchParams::apply(&options.field_manager);
    params.force = true;
    api.patch(name, &params, &Patch::Apply(&cm))
        .await
        .map(|_| ())
}

/// What `--prune` would delete: recorded objects not in `keep` that still exist and still
/// carry our label. Returns (label, resource, namespace, name).
pub async fn prune_candidates(
    client: &Client,
    recorded: &std::collections::BTreeSet<String>,
    keep: &std::collections::BTreeSet<String>,
) -> Result<Vec<(String, ApiResource, Option<String>, String)>, ApplyError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(ApplyError::Unreachable)?;
    let mut out = Vec::new();
    for line in recorded.difference(keep) {
        let parts: Vec<&str> = line.split(' ').collect();
        let [api_version, kind, namespace, name] = parts[..] else {
            continue;
        };
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let Some((resource, _)) =
            discovery.resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
        else {
            continue;
        };
        let ns = (namespace != "-").then(|| namespace.to_owned());
        let api: Api<DynamicObject> = match &ns {
            Some(n) => Api::namespaced_with(client.clone(), n, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let Some(live) = api.get_opt(name).await.map_err(ApplyError::Unreachable)? else {
            continue;
        };
        if !kk_spec::names::is_managed(live.metadata.labels.as_ref()) {
            continue;
        }
        let l = match &ns {
            Some(n) => format!("{n}/{kind}/{name}"),
            None => format!("{kind}/{name}"),
        };
        out.push((l, resource, ns, name.to_owned()));
    }
    Ok(out)
}

/// Deletes one prune candidate.
pub async fn delete(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    api.delete(name, &kube::api::DeleteParams::background())
        .await
        .map(|_| ())
}
