//! The Karpenter oracle's scenario and result formats (`testbed/karpenter-oracle`,
//! docs/internals/fidelity.md): read a scenario into an [`Input`], render a [`Plan`](crate::plan::Plan) in the oracle's
//! result shape. Pure: text and JSON values in, values out.
//!
//! Instance types become catalog types with a fixed overhead (`overhead` summed, or
//! `capacity − allocatable`), their `labels` as single-valued labels and their offerings as
//! given (unavailable ones marked so). The Kubernetes objects (NodePools, pods, nodes,
//! DaemonSets) go through [`load_with_catalog`] as JSON documents, so they are read exactly as
//! `kubean-karpenter plan` reads manifests.
//!
//! Not carried over: an instance type's extra `requirements` (multi-valued or `DoesNotExist`;
//! only the benchmark shapes use them, on keys no pod refers to), and `nodeClaim` entries of
//! existing nodes (in-flight claims; the generator does not write them).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use kk_catalog::resources::quantity_units;
use kk_catalog::{
    Arch, CapacityType, Catalog, InstanceType, OfferingConfig, OverheadModel, PriceTable,
    Reservation, Resources,
};
use kk_model::quantity::Quantity;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::input::{LoadOptions, ObjectList, load_objects_with_catalog};

mod result;

use crate::solver::Input;
pub use result::{Report, report, result};

/// Why a scenario cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// Not JSON.
    #[error("scenario: {0}")]
    Json(String),
    /// A field of the scenario that is missing or malformed.
    #[error("{0}")]
    Invalid(String),
    /// The instance types do not make a catalog.
    #[error(transparent)]
    Catalog(#[from] kk_catalog::PriceError),
    /// The manifests it carries do not load.
    #[error("{}", .0.iter().map(|e| format!("{}: {} {}", e.file, e.field, e.message)).collect::<Vec<_>>().join("; "))]
    Load(Vec<crate::input::InputError>),
}

fn resources(v: Option<&Value>) -> Result<Resources, ScenarioError> {
    let mut r = Resources::default();
    let Some(map) = v.and_then(Value::as_object) else {
        return Ok(r);
    };
    for (name, q) in map {
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(ScenarioError::Invalid(format!(
                    "resource {name}: not a quantity: {other}"
                )));
            }
        };
        let q = Quantity::parse(&text)
            .map_err(|e| ScenarioError::Invalid(format!("resource {name}: {}", e.text)))?;
        r.set(name, quantity_units(name, &q));
    }
    Ok(r)
}

/// One offering as the scenario gives it.
struct ScenarioOffering {
    zone: String,
    capacity_type: CapacityType,
    price: f64,
    available: bool,
    /// A `reserved` offering's reservation.
    reservation: Option<Reservation>,
}

fn instance_type(v: &Value) -> Result<(InstanceType, Vec<ScenarioOffering>), ScenarioError> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ScenarioError::Invalid("instance type without a name".into()))?
        .to_owned();
    let capacity = resources(v.get("capacity"))?;
    let overhead = if let Some(alloc) = v.get("allocatable") {
        let alloc = resources(Some(alloc))?;
        let mut o = Resources::default();
        for (k, c) in capacity.iter() {
            o.set(k, c - alloc.get(k));
        }
        o
    } else if let Some(o) = v.get("overhead") {
        let mut total = Resources::default();
        for part in ["kubeReserved", "systemReserved", "evictionThreshold"] {
            total = total.plus(&resources(o.get(part))?);
        }
        total
    } else {
        Resources::default()
    };
    let mut labels: BTreeMap<Cow<'static, str>, Cow<'static, str>> = BTreeMap::new();
    if let Some(m) = v.get("labels").and_then(Value::as_object) {
        for (k, val) in m {
            labels.insert(
                Cow::Owned(k.clone()),
                Cow::Owned(val.as_str().unwrap_or_default().to_owned()),
            );
        }
    }
    labels.insert(
        Cow::Borrowed(crate::labels::INSTANCE_TYPE),
        Cow::Owned(name.clone()),
    );
    let arch = match labels.get(crate::labels::ARCH).map(|s| s.as_ref()) {
        Some("arm64") => Arch::Arm64,
        _ => Arch::Amd64,
    };
    let mut offerings = Vec::new();
    for o in v
        .get("offerings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let zone = o
            .get("zone")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let ct = match o.get("capacityType").and_then(Value::as_str) {
            Some("spot") => CapacityType::Spot,
            Some("on-demand") => CapacityType::OnDemand,
            Some("reserved") => CapacityType::Reserved,
            other => {
                return Err(ScenarioError::Invalid(format!(
                    "{name}: unsupported capacityType {other:?}"
                )));
            }
        };
        let price = o.get("price").and_then(Value::as_f64).unwrap_or(0.0);
        let available = o.get("available").and_then(Value::as_bool).unwrap_or(true);
        let reservation = match ct {
            CapacityType::Reserved => Some(reservation(&name, o)?),
            _ => None,
        };
        offerings.push(ScenarioOffering {
            zone,
            capacity_type: ct,
            price,
            available,
            reservation,
        });
    }
    let vcpu = u32::try_from(capacity.cpu_milli / 1000).unwrap_or(0);
    let memory_mib = u64::try_from(capacity.memory_bytes >> 20).unwrap_or(0);
    let it = InstanceType {
        name: name.clone(),
        family: name.split('.').next().unwrap_or_default().to_owned(),
        size: name.split('.').nth(1).unwrap_or_default().to_owned(),
        category: String::new(),
        generation: None,
        arch,
        os: "linux".into(),
        vcpu,
        memory_mib,
        cpu_manufacturer: None,
        gpu: None,
        accelerator: None,
        hypervisor: None,
        bare_metal: false,
        local_nvme_gb: None,
        network_bandwidth_mbps: None,
        eni: None,
        on_demand_price: None,
        spot_price: None,
        labels,
        capacity,
        overhead: OverheadModel::Fixed(overhead),
        documented: None,
        offerings: Vec::new(),
    };
    Ok((it, offerings))
}

/// A reserved offering's `reservationID`, `reservationCapacity` and `reservationType`
/// (default `default`), as the oracle reads them.
fn reservation(name: &str, o: &Value) -> Result<Reservation, ScenarioError> {
    let id = o
        .get("reservationID")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ScenarioError::Invalid(format!("{name}: reserved offering without reservationID"))
        })?;
    let capacity = o
        .get("reservationCapacity")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            ScenarioError::Invalid(format!(
                "{name}: reserved offering {id} without reservationCapacity"
            ))
        })?;
    let kind = o
        .get("reservationType")
        .and_then(Value::as_str)
        .unwrap_or("default");
    Ok(Reservation {
        id: id.into(),
        kind: kind.into(),
        interruptible: false,
        capacity,
    })
}

/// The scenario's instance types as a catalog.
pub fn catalog(scenario: &Value) -> Result<Catalog, ScenarioError> {
    let mut prices = PriceTable::default();
    let mut types = Vec::new();
    let mut zones = BTreeSet::new();
    let mut cts = BTreeSet::new();
    let mut unavailable = Vec::new();
    let mut reserved = Vec::new();
    for v in scenario
        .get("instanceTypes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (it, offerings) = instance_type(v)?;
        for o in offerings {
            if let Some(r) = o.reservation {
                reserved.push((it.name.clone(), o.zone, r, o.price, o.available));
                continue;
            }
            prices.insert(&it.name, &o.zone, o.capacity_type, o.price);
            if !o.available {
                unavailable.push((it.name.clone(), o.zone.clone(), o.capacity_type));
            }
            zones.insert(o.zone);
            cts.insert(o.capacity_type.as_str().to_owned());
        }
        types.push(it);
    }
    let config = OfferingConfig {
        zones: zones.into_iter().collect(),
        capacity_types: CapacityType::ALL
            .into_iter()
            .filter(|c| cts.contains(c.as_str()))
            .collect(),
        prices,
        ..OfferingConfig::default()
    };
    let mut catalog = Catalog::from_types(types, &config)?;
    for (name, zone, ct) in unavailable {
        catalog.set_available(&name, &zone, ct, false);
    }
    // After the others, as the AWS provider appends reserved offerings to a type's list.
    for (name, zone, r, price, available) in reserved {
        catalog.add_reservation(&name, &zone, r, Some(price), available);
    }
    Ok(catalog)
}

fn with_kind(mut v: Value, api: &str, kind: &str) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.entry("apiVersion").or_insert_with(|| json!(api));
        m.entry("kind").or_insert_with(|| json!(kind));
    }
    v
}

/// The scenario's top-level fields, unparsed: the pods are parsed one at a time as the reader
/// takes them, so 100,000 of them are never all held as JSON values at once.
#[derive(serde::Deserialize)]
struct RawScenario<'a> {
    #[serde(borrow, rename = "instanceTypes")]
    instance_types: Option<&'a RawValue>,
    #[serde(borrow, rename = "nodePools")]
    node_pools: Option<&'a RawValue>,
    #[serde(borrow, rename = "nodeOverlays")]
    node_overlays: Option<&'a RawValue>,
    #[serde(borrow, rename = "daemonSets")]
    daemon_sets: Option<&'a RawValue>,
    #[serde(borrow)]
    pods: Option<&'a RawValue>,
    #[serde(borrow, rename = "existingNodes")]
    existing_nodes: Option<&'a RawValue>,
    #[serde(borrow, rename = "minValuesPolicy")]
    min_values_policy: Option<&'a RawValue>,
    #[serde(borrow, rename = "schedulerConfig")]
    scheduler_config: Option<&'a RawValue>,
    #[serde(borrow)]
    services: Option<&'a RawValue>,
    #[serde(borrow, rename = "replicaSets")]
    replica_sets: Option<&'a RawValue>,
    #[serde(borrow, rename = "statefulSets")]
    stateful_sets: Option<&'a RawValue>,
}

/// The scheduler's settings a scenario sets, and the objects only its default topology spread
/// reads (Services, and the ReplicaSets and StatefulSets its pods name as owners).
#[derive(Default)]
struct Settings {
    min_values_policy: crate::solver::MinValuesPolicy,
    default_spread: Vec<crate::model::SpreadConstraint>,
    services: Vec<Value>,
    owners: Vec<crate::input::OwnerSelector>,
}

impl Settings {
    fn read(
        min_values_policy: &Value,
        scheduler_config: &Value,
        services: Vec<Value>,
        replica_sets: Vec<Value>,
        stateful_sets: Vec<Value>,
    ) -> Result<Settings, ScenarioError> {
        let min_values_policy = crate::solver::MinValuesPolicy::from_json(Some(min_values_policy))
            .map_err(|e| ScenarioError::Invalid(format!("minValuesPolicy: {e}")))?
            .unwrap_or_default();
        let default_spread = match scheduler_config {
            Value::Null => Vec::new(),
            config => crate::input::default_constraints(config)
                .map_err(|e| ScenarioError::Invalid(format!("schedulerConfig: {e}")))?,
        };
        let mut owners = Vec::new();
        for (kind, items) in [("ReplicaSet", replica_sets), ("StatefulSet", stateful_sets)] {
            for item in items {
                owners.push(owner(kind, &item)?);
            }
        }
        Ok(Settings {
            min_values_policy,
            default_spread,
            services: services
                .into_iter()
                .map(|s| with_kind(s, "v1", "Service"))
                .collect(),
            owners,
        })
    }
}

/// A ReplicaSet or StatefulSet as the owner its pods point at: namespace, name, UID, selector.
fn owner(kind: &str, v: &Value) -> Result<crate::input::OwnerSelector, ScenarioError> {
    let bad = |why: String| ScenarioError::Invalid(format!("{kind}: {why}"));
    let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
    let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_owned);
    let name = text("name").ok_or_else(|| bad("without metadata.name".into()))?;
    let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector = v
        .pointer("/spec/selector")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| bad(format!("{name}: spec.selector: {e}")))?
        .ok_or_else(|| bad(format!("{name}: without spec.selector")))?;
    let selector = crate::input::label_selector(&selector)
        .map_err(|e| bad(format!("{name}: spec.selector: {e}")))?;
    Ok(crate::input::OwnerSelector {
        namespace: text("namespace")
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into()),
        kind: kind.to_owned(),
        name,
        uid: text("uid").filter(|u| !u.is_empty()),
        selector,
    })
}

/// A JSON text already checked by the parser, as a value.
fn parsed(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or(Value::Null)
}

/// The items of an array field; nothing when the field is missing or not an array.
fn raw_items(raw: Option<&RawValue>) -> Vec<&RawValue> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default()
}

/// Reads a scenario (its JSON text) into the simulator's input.
pub fn read(text: &str) -> Result<Input, ScenarioError> {
    let Ok(raw) = serde_json::from_str::<RawScenario>(text) else {
        // Not an object of the fields above (or not JSON): read as a value, as it always was.
        let v: Value =
            serde_json::from_str(text).map_err(|e| ScenarioError::Json(e.to_string()))?;
        return read_value(&v);
    };
    let array = |r: Option<&RawValue>| raw_items(r).into_iter().map(parsed).collect();
    let catalog =
        catalog(&json!({ "instanceTypes": raw.instance_types.map_or(Value::Null, parsed) }))?;
    let existing = raw.existing_nodes.map_or(Value::Null, parsed);
    let settings = Settings::read(
        &raw.min_values_policy.map_or(Value::Null, parsed),
        &raw.scheduler_config.map_or(Value::Null, parsed),
        array(raw.services),
        array(raw.replica_sets),
        array(raw.stateful_sets),
    )?;
    assemble(
        catalog,
        array(raw.node_pools),
        array(raw.node_overlays),
        array(raw.daemon_sets),
        raw_items(raw.pods).into_iter().map(parsed),
        existing.as_array().map_or(&[][..], Vec::as_slice),
        settings,
    )
}

/// [`read`] from a parsed value.
pub fn read_value(v: &Value) -> Result<Input, ScenarioError> {
    let arr = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let catalog = catalog(v)?;
    let existing = arr("existingNodes");
    let field = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let settings = Settings::read(
        &field("minValuesPolicy"),
        &field("schedulerConfig"),
        arr("services"),
        arr("replicaSets"),
        arr("statefulSets"),
    )?;
    assemble(
        catalog,
        arr("nodePools"),
        arr("nodeOverlays"),
        arr("daemonSets"),
        arr("pods").into_iter(),
        &existing,
        settings,
    )
}

/// The scenario's objects through the manifest reader: pools and NodeOverlays as one list (as
/// in a rendered bundle), DaemonSets, pods and the existing nodes' pods as another, nodes as a
/// third.
fn assemble(
    catalog: Catalog,
    pools: Vec<Value>,
    overlays: Vec<Value>,
    daemonsets: Vec<Value>,
    pods: impl Iterator<Item = Value>,
    existing: &[Value],
    settings: Settings,
) -> Result<Input, ScenarioError> {
    let pools: Vec<Value> = pools
        .into_iter()
        .map(|p| with_kind(p, "karpenter.sh/v1", "NodePool"))
        .chain(
            overlays
                .into_iter()
                .map(|o| with_kind(o, "karpenter.sh/v1alpha1", "NodeOverlay")),
        )
        .collect();
    let mut nodes: Vec<Value> = Vec::new();
    let mut bound: Vec<Value> = Vec::new();
    for e in existing {
        let Some(node) = e.get("node") else { continue };
        let name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        nodes.push(with_kind(node.clone(), "v1", "Node"));
        for p in e
            .get("pods")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut p = with_kind(p.clone(), "v1", "Pod");
            if let Some(spec) = p.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("nodeName".into(), json!(name));
            }
            // A pod with a DaemonSet ownerReference counts as that DaemonSet's pod on the node
            // (the reader matches it to the DaemonSet).
            bound.push(p);
        }
    }
    let work = daemonsets
        .into_iter()
        .map(|d| with_kind(d, "apps/v1", "DaemonSet"))
        .chain(settings.services)
        .chain(pods.map(|p| with_kind(p, "v1", "Pod")))
        .chain(bound);
    let nodes = (!nodes.is_empty()).then(|| ObjectList {
        name: "nodes.json".into(),
        items: nodes,
    });
    load_objects_with_catalog(
        ObjectList {
            name: "nodePools.json".into(),
            items: pools,
        },
        ObjectList {
            name: "pods.json".into(),
            items: work,
        },
        nodes,
        &LoadOptions {
            options: crate::solver::Options {
                min_values_policy: settings.min_values_policy,
                ..crate::solver::Options::default()
            },
            default_spread: settings.default_spread,
            owners: settings.owners,
            ..LoadOptions::default()
        },
        catalog,
    )
    .map_err(ScenarioError::Load)
}
