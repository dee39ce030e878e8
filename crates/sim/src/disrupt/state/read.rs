//! Reading the state from manifests: every kind from any file, the NodePool CRD's defaults
//! applied, errors located by file and field.

use std::collections::{BTreeMap, BTreeSet};

use kk_catalog::{Catalog, OfferingConfig};
use kk_model::FieldPath;
use kk_model::yaml::Document;
use serde_json::Value;

use super::{
    Budget, BudgetNodes, ClusterState, NodeInfo, Pdb, PodInfo, Policy, PoolSettings, Reason,
    Unhealthy,
};
use crate::disrupt::clock::{Cron, parse_duration, parse_time};
use crate::input::{InputError, LoadOptions, ParsedFile, SourceFile, load_parsed_with_catalog};
use crate::labels;
use crate::model::LabelSelector;
use crate::req::Operator;

struct Reader<'a> {
    file: &'a str,
    doc: &'a Document,
    prefix: String,
    errors: &'a mut Vec<InputError>,
    latest: &'a mut Option<i64>,
}

impl Reader<'_> {
    fn err(&mut self, field: &str, message: impl Into<String>) {
        let field = if self.prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.prefix)
        };
        let pos = self.doc.pos(&FieldPath::parse(&field));
        self.errors.push(InputError {
            file: self.file.to_owned(),
            pos: Some(pos),
            field,
            message: message.into(),
        });
    }

    fn time(&mut self, v: &Value, field: &str) -> Option<i64> {
        let text = ptr(v, field).and_then(Value::as_str)?;
        match parse_time(text) {
            Ok(t) => {
                *self.latest = Some(self.latest.map_or(t, |l| l.max(t)));
                Some(t)
            }
            Err(e) => {
                self.err(field, e.to_string());
                None
            }
        }
    }

    /// A duration field; `Some(None)` for `Never`, `None` when absent.
    fn duration(&mut self, v: &Value, field: &str) -> Option<Option<i64>> {
        let text = ptr(v, field).and_then(Value::as_str)?;
        if text == "Never" {
            return Some(None);
        }
        match parse_duration(text) {
            Ok(d) if d >= 0 => Some(Some(d)),
            Ok(_) => {
                self.err(field, "must not be negative");
                None
            }
            Err(e) => {
                self.err(field, e.to_string());
                None
            }
        }
    }
}

/// `a.b[0].c` on a JSON value.
fn ptr<'v>(v: &'v Value, field: &str) -> Option<&'v Value> {
    let mut cur = v;
    for part in field.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = cur.get(name)?;
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn conditions(v: &Value) -> Vec<&Value> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

pub(crate) fn condition<'v>(v: &'v Value, kind: &str) -> Option<&'v Value> {
    conditions(v)
        .into_iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub(crate) fn is_true(c: Option<&Value>) -> bool {
    c.and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .is_some_and(|s| s == "True")
}

fn selector(r: &mut Reader, v: Option<&Value>, field: &str) -> Option<LabelSelector> {
    let v = v?;
    let mut s = LabelSelector {
        match_labels: string_map(v.get("matchLabels")),
        match_expressions: Vec::new(),
    };
    for (i, e) in v
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let op = match e.get("operator").and_then(Value::as_str) {
            Some("In") => Operator::In,
            Some("NotIn") => Operator::NotIn,
            Some("Exists") => Operator::Exists,
            Some("DoesNotExist") => Operator::DoesNotExist,
            other => {
                r.err(
                    &format!("{field}.matchExpressions[{i}].operator"),
                    format!("unsupported operator {other:?}"),
                );
                continue;
            }
        };
        let mut values: Vec<String> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        values.sort();
        s.match_expressions.push((key.to_owned(), op, values));
    }
    Some(s)
}

/// `metadata.name`; an object without one is not read.
fn object_name(v: &Value) -> Option<String> {
    Some(v.pointer("/metadata/name")?.as_str()?.to_owned())
}

/// `metadata.namespace`, `default` when absent (as kubectl applies it).
fn object_namespace(v: &Value) -> String {
    v.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned()
}

fn read_pool(r: &mut Reader, v: &Value) -> Option<PoolSettings> {
    let name = object_name(v)?;
    let policy = match ptr(v, "spec.disruption.consolidationPolicy").and_then(Value::as_str) {
        None | Some("WhenEmptyOrUnderutilized") => Policy::WhenEmptyOrUnderutilized,
        Some("WhenEmpty") => Policy::WhenEmpty,
        Some("Balanced") => Policy::Balanced,
        Some(other) => {
            r.err(
                "spec.disruption.consolidationPolicy",
                format!("{other:?} is not WhenEmpty, WhenEmptyOrUnderutilized or Balanced"),
            );
            Policy::WhenEmptyOrUnderutilized
        }
    };
    let consolidate_after = r
        .duration(v, "spec.disruption.consolidateAfter")
        .unwrap_or(Some(0));
    let expire_after = r
        .duration(v, "spec.template.spec.expireAfter")
        .unwrap_or(Some(720 * 3600));
    let mut budgets = Vec::new();
    match ptr(v, "spec.disruption.budgets").and_then(Value::as_array) {
        None => budgets.push(Budget {
            reasons: None,
            nodes: kk_karpenter::budget::DEFAULT_BUDGET,
            schedule: None,
        }),
        Some(list) => {
            for (i, b) in list.iter().enumerate() {
                let f = format!("spec.disruption.budgets[{i}]");
                let nodes_text = match b.get("nodes") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => "10%".to_owned(),
                };
                let Some(nodes) = BudgetNodes::parse(&nodes_text) else {
                    r.err(
                        &format!("{f}.nodes"),
                        format!(
                            "{nodes_text:?} is not a node count or a percentage (\"1\", \"10%\")"
                        ),
                    );
                    continue;
                };
                let mut reasons = None;
                if let Some(list) = b.get("reasons").and_then(Value::as_array) {
                    let mut rs = Vec::new();
                    for (j, x) in list.iter().enumerate() {
                        match x.as_str() {
                            Some("Empty") => rs.push(Reason::Empty),
                            Some("Drifted") => rs.push(Reason::Drifted),
                            Some("Underutilized") => rs.push(Reason::Underutilized),
                            other => r.err(
                                &format!("{f}.reasons[{j}]"),
                                format!("{other:?} is not Empty, Drifted or Underutilized"),
                            ),
                        }
                    }
                    reasons = Some(rs);
                }
                let schedule = match (
                    b.get("schedule").and_then(Value::as_str),
                    b.get("duration").and_then(Value::as_str),
                ) {
                    (None, None) => None,
                    (Some(s), Some(d)) => {
                        let cron = Cron::parse(s);
                        let dur = parse_duration(d);
                        match (cron, dur) {
                            (Ok(c), Ok(d)) => Some((c, d)),
                            (Err(e), _) => {
                                r.err(&format!("{f}.schedule"), e.to_string());
                                continue;
                            }
                            (_, Err(e)) => {
                                r.err(&format!("{f}.duration"), e.to_string());
                                continue;
                            }
                        }
                    }
                    _ => {
                        r.err(&f, "schedule and duration go together");
                        continue;
                    }
                };
                budgets.push(Budget {
                    reasons,
                    nodes,
                    schedule,
                });
            }
        }
    }
    Some(PoolSettings {
        name,
        policy,
        consolidate_after,
        budgets,
        expire_after,
        termination_grace: ptr(v, "spec.template.spec.terminationGracePeriod").is_some(),
        static_pool: ptr(v, "spec.replicas").is_some_and(|x| !x.is_null()),
    })
}

fn read_pod(r: &mut Reader, v: &Value) -> Option<PodInfo> {
    let (name, namespace) = (object_name(v)?, object_namespace(v));
    let annotations = string_map(v.pointer("/metadata/annotations"));
    let deletion_cost = match annotations.get("controller.kubernetes.io/pod-deletion-cost") {
        Some(c) => match c.parse::<f64>() {
            Ok(x) => Some(x),
            Err(_) => {
                r.err(
                    "metadata.annotations[controller.kubernetes.io/pod-deletion-cost]",
                    format!("{c:?} is not a number"),
                );
                None
            }
        },
        None => None,
    };
    let phase = v
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let owners = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|o| {
            (
                o.get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                o.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let ready = condition(v, "Ready");
    Some(PodInfo {
        labels: string_map(v.pointer("/metadata/labels")),
        node: v
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        owners,
        do_not_disrupt: annotations.get(crate::disrupt::DO_NOT_DISRUPT).cloned(),
        started: r.time(v, "status.startTime"),
        created: r.time(v, "metadata.creationTimestamp"),
        terminal: phase == "Succeeded" || phase == "Failed",
        phase: phase.to_owned(),
        terminating: v
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|x| !x.is_null()),
        deletion_cost,
        priority: v.pointer("/spec/priority").and_then(Value::as_i64),
        not_ready: ready
            .and_then(|c| c.get("status"))
            .and_then(Value::as_str)
            .is_some_and(|s| s == "False"),
        namespace,
        name,
    })
}

fn int_or_percent(v: Option<&Value>) -> IntOrPercent {
    match v? {
        Value::Number(n) => n.as_i64().map(|n| (n, false)),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse().ok().map(|p| (p, true)),
            None => s.parse().ok().map(|n| (n, false)),
        },
        _ => None,
    }
}

/// `minAvailable`/`maxUnavailable`: (value, is a percentage).
type IntOrPercent = Option<(i64, bool)>;

fn read_pdb(r: &mut Reader, v: &Value) -> Option<(Pdb, IntOrPercent, IntOrPercent)> {
    let (name, namespace) = (object_name(v)?, object_namespace(v));
    let sel = selector(r, v.pointer("/spec/selector"), "spec.selector");
    let min = int_or_percent(v.pointer("/spec/minAvailable"));
    let max = int_or_percent(v.pointer("/spec/maxUnavailable"));
    let fully_blocking =
        max == Some((0, false)) || max == Some((0, true)) || min == Some((100, true));
    let allowed = v
        .pointer("/status/disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(-1);
    Some((
        Pdb {
            namespace,
            name,
            selector: sel,
            disruptions_allowed: allowed,
            fully_blocking,
            always_allow_unhealthy: v
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow"),
        },
        min,
        max,
    ))
}

/// A NodeClaim: (name, node name or provider ID to match, what it says).
struct Claim {
    name: String,
    node_name: Option<String>,
    provider_id: Option<String>,
    created: Option<i64>,
    initialized_at: Option<i64>,
    last_pod_event: Option<i64>,
    expire_after: Option<Option<i64>>,
    drifted_at: Option<i64>,
    termination_grace: bool,
    deleting: bool,
    image_id: Option<String>,
    labels: BTreeMap<String, String>,
    node_class: Option<String>,
}

fn read_claim(r: &mut Reader, v: &Value) -> Option<Claim> {
    let name = object_name(v)?;
    let mut initialized_at = None;
    let mut drifted_at = None;
    for (i, c) in conditions(v).into_iter().enumerate() {
        let kind = c.get("type").and_then(Value::as_str).unwrap_or("");
        if (kind == "Initialized" || kind == "Drifted") && is_true(Some(c)) {
            let t = r
                .time(v, &format!("status.conditions[{i}].lastTransitionTime"))
                .unwrap_or(0);
            if kind == "Initialized" {
                initialized_at = Some(t);
            } else {
                drifted_at = Some(t);
            }
        }
    }
    Some(Claim {
        node_name: v
            .pointer("/status/nodeName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        provider_id: v
            .pointer("/status/providerID")
            .and_then(Value::as_str)
            .map(str::to_owned),
        created: r.time(v, "metadata.creationTimestamp"),
        initialized_at,
        last_pod_event: r.time(v, "status.lastPodEventTime"),
        expire_after: r.duration(v, "spec.expireAfter"),
        drifted_at,
        termination_grace: ptr(v, "spec.terminationGracePeriod").is_some(),
        deleting: v
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|x| !x.is_null()),
        image_id: v
            .pointer("/status/imageID")
            .and_then(Value::as_str)
            .map(str::to_owned),
        labels: string_map(v.pointer("/metadata/labels")),
        node_class: v
            .pointer("/spec/nodeClassRef/name")
            .and_then(Value::as_str)
            .map(str::to_owned),
        name,
    })
}

/// Reads the cluster state from `files` (any mix of NodePools, EC2NodeClasses, Nodes,
/// NodeClaims, Pods, DaemonSets and PodDisruptionBudgets, `List`s included). Without
/// `catalog`, the EC2 catalog is used with the zones the nodes are in (unless `opts.zones`).
pub fn load(
    files: &[SourceFile],
    opts: &LoadOptions,
    catalog: Option<Catalog>,
) -> Result<ClusterState, Vec<InputError>> {
    let read = |locate: bool, catalog: Option<Catalog>| {
        let mut errors = Vec::new();
        let parsed: Vec<ParsedFile> = files
            .iter()
            .filter_map(|file| {
                ParsedFile::parse(file, locate)
                    .map_err(|e| errors.push(e))
                    .ok()
            })
            .collect();
        load_parsed(&parsed, errors, opts, catalog)
    };
    // Positions only serve errors (a 1,000-node dump reads in half the time without them):
    // read without them, and again with them to place a problem.
    read(false, catalog.clone()).or_else(|_| read(true, catalog))
}

/// [`load`] from files already parsed, after `errors` found parsing them. Each file is
/// parsed once: the state's own kinds and the planner's input are read from the same parse.
pub fn load_parsed(
    files: &[ParsedFile],
    mut errors: Vec<InputError>,
    opts: &LoadOptions,
    catalog: Option<Catalog>,
) -> Result<ClusterState, Vec<InputError>> {
    let mut latest = None;
    let mut pools = BTreeMap::new();
    // (name, created, do-not-disrupt, deleting, ready, provider ID)
    type NodeObj = (String, Option<i64>, bool, bool, bool, Option<String>);
    let mut node_objs: Vec<NodeObj> = Vec::new();
    let mut node_health: BTreeMap<String, Vec<Unhealthy>> = BTreeMap::new();
    let mut zones = BTreeSet::new();
    let mut pods = BTreeMap::new();
    let mut pdbs = Vec::new();
    let mut claims = Vec::new();
    let mut node_pools = BTreeMap::new();
    let mut node_classes = BTreeMap::new();
    let mut node_claims = BTreeMap::new();
    for file in files {
        for doc in &file.docs {
            let items: Vec<(String, &Value)> = match (
                doc.value.get("kind").and_then(Value::as_str),
                doc.value.get("items").and_then(Value::as_array),
            ) {
                (Some(k), Some(items)) if k.ends_with("List") => items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("items[{i}]"), v))
                    .collect(),
                _ => vec![(String::new(), &doc.value)],
            };
            for (prefix, v) in items {
                let mut r = Reader {
                    file: &file.name,
                    doc,
                    prefix,
                    errors: &mut errors,
                    latest: &mut latest,
                };
                match v.get("kind").and_then(Value::as_str).unwrap_or("") {
                    "NodePool" => {
                        if let Some(p) = read_pool(&mut r, v) {
                            node_pools.insert(p.name.clone(), v.clone());
                            pools.insert(p.name.clone(), p);
                        }
                    }
                    "EC2NodeClass" => {
                        if let Some(name) = object_name(v) {
                            node_classes.insert(name, v.clone());
                        }
                    }
                    "Node" => {
                        let Some(name) = v.pointer("/metadata/name").and_then(Value::as_str) else {
                            continue;
                        };
                        let node_labels = string_map(v.pointer("/metadata/labels"));
                        if let Some(z) = node_labels.get(labels::ZONE) {
                            zones.insert(z.clone());
                        }
                        let annotations = string_map(v.pointer("/metadata/annotations"));
                        let ready = is_true(condition(v, "Ready"));
                        let unhealthy: Vec<Unhealthy> = conditions(v)
                            .into_iter()
                            .filter_map(|c| {
                                let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
                                kk_karpenter::repair::counts_as_unhealthy(
                                    text("type"),
                                    text("status"),
                                )
                                .then(|| Unhealthy {
                                    condition: text("type").to_owned(),
                                    status: text("status").to_owned(),
                                    reason: text("reason").to_owned(),
                                    since: c
                                        .get("lastTransitionTime")
                                        .and_then(Value::as_str)
                                        .and_then(|t| parse_time(t).ok()),
                                })
                            })
                            .collect();
                        if !unhealthy.is_empty() {
                            node_health.insert(name.to_owned(), unhealthy);
                        }
                        node_objs.push((
                            name.to_owned(),
                            r.time(v, "metadata.creationTimestamp"),
                            annotations
                                .get(crate::disrupt::DO_NOT_DISRUPT)
                                .is_some_and(|x| x == "true"),
                            v.pointer("/metadata/deletionTimestamp")
                                .is_some_and(|x| !x.is_null()),
                            ready,
                            v.pointer("/spec/providerID")
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                        ));
                    }
                    "NodeClaim" => {
                        if let Some(name) = object_name(v) {
                            node_claims.insert(name, v.clone());
                        }
                        claims.extend(read_claim(&mut r, v));
                    }
                    "Pod" => {
                        if let Some(p) = read_pod(&mut r, v) {
                            pods.insert((p.namespace.clone(), p.name.clone()), p);
                        }
                    }
                    "PodDisruptionBudget" => pdbs.extend(read_pdb(&mut r, v)),
                    _ => {}
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let catalog = match catalog {
        Some(c) => c,
        None => {
            let config = OfferingConfig {
                zones: if opts.zones.is_empty() {
                    zones.into_iter().collect()
                } else {
                    opts.zones.clone()
                },
                spot_fraction: opts.spot_fraction,
                ..OfferingConfig::default()
            };
            Catalog::aws(&config).map_err(|e| {
                vec![InputError {
                    file: "<options>".into(),
                    pos: None,
                    field: String::new(),
                    message: e.to_string(),
                }]
            })?
        }
    };
    let mut input = load_parsed_with_catalog(files, &[], files, opts, catalog)?;
    input
        .warnings
        .retain(|w| !w.contains("is not read from here"));
    // Pending pods are Pod objects only (a Deployment in a dump already has its Pods); terminal
    // pods use nothing.
    let alive = |ns: &str, name: &str| {
        pods.get(&(ns.to_owned(), name.to_owned()))
            .is_some_and(|p: &PodInfo| !p.terminal)
    };
    input.pods.retain(|p| alive(&p.namespace, &p.name));
    input.bound.retain(|(_, p)| alive(&p.namespace, &p.name));

    // Nodes and their NodeClaims.
    let mut nodes = BTreeMap::new();
    let mut warnings = Vec::new();
    let by_node: BTreeMap<&str, &Claim> = claims
        .iter()
        .filter_map(|c| c.node_name.as_deref().map(|n| (n, c)))
        .collect();
    let by_provider: BTreeMap<&str, &Claim> = claims
        .iter()
        .filter_map(|c| c.provider_id.as_deref().map(|n| (n, c)))
        .collect();
    let mut matched = BTreeSet::new();
    let node_labels: BTreeMap<&str, &BTreeMap<String, String>> = input
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), &n.labels))
        .collect();
    // The newest non-daemon pod's start on each node: a node without a claim has no
    // lastPodEventTime, so this stands in for it.
    let mut newest_pod: BTreeMap<&str, i64> = BTreeMap::new();
    for (node, p) in &input.bound {
        let Some(p) = pods.get(&(p.namespace.clone(), p.name.clone())) else {
            continue;
        };
        if let Some(t) = p.started.or(p.created).filter(|_| !p.daemon()) {
            let newest = newest_pod.entry(node.as_str()).or_insert(t);
            *newest = (*newest).max(t);
        }
    }
    for (name, created, dnd, deleting, ready, provider) in node_objs {
        let claim = by_node
            .get(name.as_str())
            .or_else(|| provider.as_deref().and_then(|p| by_provider.get(p)))
            .copied();
        let lbls = node_labels.get(name.as_str());
        let label_init = lbls
            .and_then(|l| l.get(labels::INITIALIZED))
            .is_some_and(|v| v == "true");
        let newest_pod = newest_pod.get(name.as_str()).copied();
        let info = match claim {
            Some(c) => {
                matched.insert(c.name.clone());
                NodeInfo {
                    name: name.clone(),
                    claim: Some(c.name.clone()),
                    created: c.created.or(created),
                    initialized_at: c.initialized_at.or(created),
                    initialized: label_init,
                    last_pod_event: c.last_pod_event,
                    expire_after: c.expire_after,
                    drifted_at: c.drifted_at,
                    termination_grace: Some(c.termination_grace),
                    do_not_disrupt: dnd,
                    deleting: deleting || c.deleting,
                    ready,
                    image_id: c.image_id.clone(),
                    claim_labels: c.labels.clone(),
                    node_class: c.node_class.clone(),
                    unhealthy: node_health.remove(&name).unwrap_or_default(),
                }
            }
            None => NodeInfo {
                name: name.clone(),
                claim: None,
                created,
                initialized_at: created,
                initialized: label_init,
                last_pod_event: newest_pod,
                expire_after: None,
                drifted_at: None,
                termination_grace: None,
                do_not_disrupt: dnd,
                deleting,
                ready,
                image_id: None,
                claim_labels: lbls.cloned().cloned().unwrap_or_default(),
                node_class: None,
                unhealthy: node_health.remove(&name).unwrap_or_default(),
            },
        };
        nodes.insert(name, info);
    }
    for c in &claims {
        if !matched.contains(&c.name) {
            warnings.push(format!(
                "nodeclaim {}: no node among the inputs (in flight); not modelled",
                c.name
            ));
        }
    }
    // PDBs without status: disruptionsAllowed from the spec and the healthy pods it selects.
    let mut out_pdbs = Vec::new();
    for (mut pdb, min, max) in pdbs {
        if pdb.disruptions_allowed < 0 {
            let selected: Vec<&PodInfo> = pods
                .values()
                .filter(|p| p.node.is_some() && p.active() && pdb.selects(p))
                .collect();
            let expected = selected.len() as i64;
            let healthy = selected.iter().filter(|p| !p.not_ready).count() as i64;
            let scaled = |(n, pct): (i64, bool)| if pct { (n * expected + 99) / 100 } else { n };
            pdb.disruptions_allowed = match (min, max) {
                (Some(m), _) => healthy - scaled(m),
                (None, Some(m)) => scaled(m) - (expected - healthy),
                (None, None) => 0,
            }
            .max(0);
        }
        out_pdbs.push(pdb);
    }
    warnings.extend(std::mem::take(&mut input.warnings));
    // Budgets hold as the limits the budget controller writes from what the claims cost.
    let holdings =
        crate::budget::holdings_from_claims(&input.catalog, node_claims.values(), &input.nodes);
    crate::budget::narrow(&mut input, &holdings);
    Ok(ClusterState {
        input,
        pools,
        nodes,
        pods,
        pdbs: out_pdbs,
        node_pools,
        node_classes,
        node_claims,
        latest,
        warnings,
    })
}
