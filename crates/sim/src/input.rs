//! Manifests → [`Input`]: NodePools and EC2NodeClasses, workloads (Deployment, StatefulSet,
//! ReplicaSet, Job, Pod, DaemonSet), existing Nodes. Every error names the file, the position
//! and the field.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1 as core;
use kk_catalog::resources::quantity_units;
use kk_catalog::{Catalog, KubeletOverrides, OfferingConfig};
use kk_model::FieldPath;
use kk_model::karpenter::{EC2NodeClass, NodePool};
use kk_model::quantity::Quantity;
use kk_model::yaml::{Document, LoadLimits, Pos, load_documents};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::labels;
use crate::model::{
    Effect, LabelSelector, Node, Pod, PodAffinityTerm, Policy, Pool, SelectorReq, SpreadConstraint,
    Taint, Term, Toleration,
};
use crate::req::{Operator, Requirement, Requirements};
use crate::solver::{Input, Options};

/// Most pods one plan expands the workloads to (replicas summed).
pub const MAX_PODS: i64 = 500_000;

/// A file's name (for messages) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        SourceFile {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// A problem in an input file, at file:line:col and field.
pub type InputError = kk_model::LocatedError;

/// How to read the inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOptions {
    /// `deploy/NAME=50`, `sts/NAME=3`, `job/NAME=4`, `rs/NAME=2`, optionally `NAMESPACE/KIND/NAME=N`.
    pub scale: Vec<String>,
    /// Offering zones; empty: the catalog's default.
    pub zones: Vec<String>,
    /// Spot price as a fraction of on-demand.
    pub spot_fraction: Option<f64>,
    pub options: Options,
}

struct Ctx<'a> {
    file: &'a str,
    doc: &'a Document,
    errors: &'a mut Vec<InputError>,
}

impl Ctx<'_> {
    fn err(&mut self, field: &str, message: impl Into<String>) {
        let path = FieldPath::parse(field);
        let pos = if field.is_empty() {
            self.doc.start
        } else {
            self.doc.pos(&path)
        };
        self.errors.push(InputError {
            file: self.file.to_owned(),
            pos: Some(pos),
            field: field.to_owned(),
            message: message.into(),
        });
    }

    fn typed<T: DeserializeOwned>(&mut self, value: Value) -> Option<T> {
        let de = value;
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(t) => Some(t),
            Err(e) => {
                let field = e.path().to_string();
                let field = if field == "." { String::new() } else { field };
                let msg = e.inner().to_string();
                self.err(&field, msg);
                None
            }
        }
    }
}

/// YAML numbers in resource lists become quantity strings (`cpu: 1` is `"1"`), as kubectl does.
fn stringify_quantities(v: &mut Value, in_list: bool) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                let list = matches!(
                    k.as_str(),
                    "requests" | "limits" | "capacity" | "allocatable" | "overhead"
                );
                if in_list && let Value::Number(n) = child {
                    *child = Value::String(n.to_string());
                    continue;
                }
                stringify_quantities(child, list);
            }
        }
        Value::Array(items) => {
            for item in items {
                stringify_quantities(item, false);
            }
        }
        _ => {}
    }
}

fn parse_documents(file: &SourceFile, errors: &mut Vec<InputError>) -> Vec<Document> {
    match load_documents(&file.text, LoadLimits::default()) {
        Ok(docs) => docs,
        Err(e) => {
            errors.push(InputError {
                file: file.name.clone(),
                pos: Some(e.pos),
                field: String::new(),
                message: e.message,
            });
            Vec::new()
        }
    }
}

/// Every object in the documents, with `List`s expanded: (document, path prefix, value).
fn objects(doc: &Document) -> Vec<(String, Value)> {
    let v = &doc.value;
    if v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && let Some(items) = v.get("items").and_then(Value::as_array)
    {
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("items[{i}]"), item.clone()))
            .collect();
    }
    vec![(String::new(), v.clone())]
}

fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, _) => field.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{field}"),
    }
}

fn quantity(ctx: &mut Ctx, field: &str, name: &str, text: &str) -> Option<i64> {
    match Quantity::parse(text) {
        Ok(q) if !q.is_negative() => Some(quantity_units(name, &q)),
        Ok(_) => {
            ctx.err(field, format!("{name} must not be negative"));
            None
        }
        Err(e) => {
            ctx.err(field, e.to_string());
            None
        }
    }
}

fn taint(ctx: &mut Ctx, field: &str, t: &core::Taint) -> Option<Taint> {
    match Effect::parse(&t.effect) {
        Ok(effect) => Some(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        }),
        Err(e) => {
            ctx.err(&format!("{field}.effect"), e);
            None
        }
    }
}

fn value_quantity(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The namespace of an object (`default` when unset).
fn namespace(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

fn selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<LabelSelector, String> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for e in s.match_expressions.iter().flatten() {
        let op = Operator::parse(&e.operator)?;
        if !matches!(
            op,
            Operator::In | Operator::NotIn | Operator::Exists | Operator::DoesNotExist
        ) {
            return Err(format!(
                "label selector operator {} is not allowed",
                e.operator
            ));
        }
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        values.dedup();
        out.match_expressions.push((e.key.clone(), op, values));
    }
    out.match_expressions.sort();
    Ok(out)
}

fn selector_req(
    ctx: &mut Ctx,
    field: &str,
    r: &core::NodeSelectorRequirement,
) -> Option<SelectorReq> {
    let op = match Operator::parse(&r.operator) {
        Ok(op) if !matches!(op, Operator::Gte | Operator::Lte) => op,
        Ok(_) | Err(_) => {
            ctx.err(
                &format!("{field}.operator"),
                format!(
                    "unsupported operator {:?} (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)",
                    r.operator
                ),
            );
            return None;
        }
    };
    let values = r.values.clone().unwrap_or_default();
    if let Err(e) = Requirement::new(op, &values) {
        ctx.err(&format!("{field}.values"), e);
        return None;
    }
    Some(SelectorReq {
        key: labels::normalize(&r.key).to_owned(),
        operator: op,
        values,
    })
}

/// Required and preferred terms of a podAffinity or podAntiAffinity (same shape, two types
/// in the API); a term that does not parse is an error at its field and is left out.
#[allow(clippy::type_complexity)]
fn pod_affinity_terms(
    ctx: &mut Ctx,
    field: &str,
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
    warnings: &mut Vec<String>,
    who: &str,
) -> (Vec<PodAffinityTerm>, Vec<(i32, PodAffinityTerm)>) {
    let mut hard = Vec::new();
    for (i, t) in required.into_iter().flatten().enumerate() {
        match pod_affinity_term(t, warnings, who) {
            Ok(term) => hard.push(term),
            Err(e) => ctx.err(
                &format!("{field}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                e,
            ),
        }
    }
    let mut soft = Vec::new();
    for (i, t) in preferred.into_iter().flatten().enumerate() {
        match pod_affinity_term(&t.pod_affinity_term, warnings, who) {
            Ok(term) => soft.push((t.weight, term)),
            Err(e) => ctx.err(
                &format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"),
                e,
            ),
        }
    }
    (hard, soft)
}

fn pod_affinity_term(
    t: &core::PodAffinityTerm,
    warnings: &mut Vec<String>,
    who: &str,
) -> Result<PodAffinityTerm, String> {
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if let Some(ns) = &t.namespace_selector {
        if ns.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && ns.match_expressions.as_ref().is_none_or(Vec::is_empty)
        {
            namespaces = vec!["*".into()];
        } else {
            warnings.push(format!(
                "{who}: namespaceSelector with labels is not modelled (namespaces have no labels here); the term applies to the listed namespaces or the pod's own"
            ));
        }
    }
    Ok(PodAffinityTerm {
        selector: t.label_selector.as_ref().map(selector).transpose()?,
        topology_key: t.topology_key.clone(),
        namespaces,
    })
}

/// A pod spec → [`Pod`] (requests follow Kubernetes: limits stand in for missing requests,
/// init containers and sidecars as the kubelet sums them, plus pod overhead).
#[allow(clippy::too_many_arguments)]
fn pod_from_spec(
    ctx: &mut Ctx,
    field: &str,
    ns: String,
    name: String,
    owner: String,
    labels_map: BTreeMap<String, String>,
    created: Option<String>,
    spec: &core::PodSpec,
    warnings: &mut Vec<String>,
) -> Option<Pod> {
    let before = ctx.errors.len();
    let mut host_ports: Vec<(i32, String)> = Vec::new();
    let mut container_req = |ctx: &mut Ctx, cfield: &str, c: &core::Container| {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        let res = c.resources.as_ref();
        let requests = res.and_then(|r| r.requests.as_ref());
        let limits = res.and_then(|r| r.limits.as_ref());
        for (which, list) in [("requests", requests), ("limits", limits)] {
            for (k, q) in list.into_iter().flatten() {
                if which == "limits" && out.contains_key(k) {
                    continue;
                }
                if which == "limits" && requests.is_some_and(|r| r.contains_key(k)) {
                    continue;
                }
                let f = format!("{cfield}.resources.{which}[{k}]");
                if let Some(v) = quantity(ctx, &f, k, &q.0) {
                    out.insert(k.clone(), v);
                }
            }
        }
        if let Some(ports) = &c.ports {
            for p in ports {
                if let Some(hp) = p.host_port.filter(|h| *h > 0) {
                    host_ports.push((hp, p.protocol.clone().unwrap_or_else(|| "TCP".into())));
                }
            }
        }
        out
    };
    let sum = |a: &mut BTreeMap<String, i64>, b: &BTreeMap<String, i64>| {
        for (k, v) in b {
            *a.entry(k.clone()).or_default() += v;
        }
    };
    let max = |a: &mut BTreeMap<String, i64>, b: &BTreeMap<String, i64>| {
        for (k, v) in b {
            let e = a.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    };
    let mut containers = BTreeMap::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let r = container_req(ctx, &join(field, &format!("containers[{i}]")), c);
        sum(&mut containers, &r);
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_req(ctx, &join(field, &format!("initContainers[{i}]")), c);
        if c.restart_policy.as_deref() == Some("Always") {
            sum(&mut sidecars, &r);
        } else {
            let mut with = sidecars.clone();
            sum(&mut with, &r);
            max(&mut init_max, &with);
        }
    }
    sum(&mut containers, &sidecars);
    max(&mut containers, &init_max);
    for (k, q) in spec.overhead.iter().flatten() {
        if let Some(v) = quantity(ctx, &join(field, &format!("overhead[{k}]")), k, &q.0) {
            *containers.entry(k.clone()).or_default() += v;
        }
    }
    host_ports.sort();
    host_ports.dedup();
    containers.retain(|_, v| *v != 0);

    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let f = join(field, &format!("tolerations[{i}]"));
        match Toleration::from_fields(
            t.key.as_deref(),
            t.operator.as_deref(),
            t.value.as_deref(),
            t.effect.as_deref(),
        ) {
            Ok(tol) => tolerations.push(tol),
            Err(e) => ctx.err(&format!("{f}.{}", e.field), e.message),
        }
    }

    let who = format!("{ns}/{name}");
    let mut invalid: Option<String> = None;
    let node_selector: BTreeMap<String, String> = spec
        .node_selector
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (labels::normalize(&k).to_owned(), v))
        .collect();
    for k in node_selector.keys() {
        if let Some(r) = labels::restricted(k) {
            invalid.get_or_insert(format!("not provisioned by Karpenter: nodeSelector {r}"));
        }
    }
    let aff = spec.affinity.as_ref();
    let node_aff = aff.and_then(|a| a.node_affinity.as_ref());
    let mut required_terms: Option<Vec<Term>> = None;
    if let Some(req) = node_aff.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        let mut terms = Vec::new();
        for (i, term) in req.node_selector_terms.iter().enumerate() {
            let tf = join(
                field,
                &format!(
                    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                ),
            );
            if term.match_fields.as_ref().is_some_and(|m| !m.is_empty()) {
                invalid.get_or_insert("not provisioned by Karpenter: node selector term with matchFields is not supported".into());
            }
            let mut t = Vec::new();
            for (j, e) in term.match_expressions.iter().flatten().enumerate() {
                if let Some(s) = selector_req(ctx, &format!("{tf}.matchExpressions[{j}]"), e) {
                    if let Some(r) = labels::restricted(&s.key) {
                        invalid.get_or_insert(format!(
                            "not provisioned by Karpenter: node affinity {r}"
                        ));
                    }
                    t.push(s);
                }
            }
            terms.push(t);
        }
        if !terms.is_empty() {
            required_terms = Some(terms);
        }
    }
    let mut preferred_terms = Vec::new();
    for (i, p) in node_aff
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .enumerate()
    {
        let tf = join(
            field,
            &format!(
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
            ),
        );
        let mut t = Vec::new();
        for (j, e) in p.preference.match_expressions.iter().flatten().enumerate() {
            if let Some(s) = selector_req(ctx, &format!("{tf}.matchExpressions[{j}]"), e) {
                t.push(s);
            }
        }
        preferred_terms.push((p.weight, t));
    }
    let mut affinity = Vec::new();
    let mut preferred_affinity = Vec::new();
    let mut anti_affinity = Vec::new();
    let mut preferred_anti_affinity = Vec::new();
    if let Some(pa) = aff.and_then(|a| a.pod_affinity.as_ref()) {
        (affinity, preferred_affinity) = pod_affinity_terms(
            ctx,
            &join(field, "affinity.podAffinity"),
            pa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            pa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
            warnings,
            &who,
        );
    }
    if let Some(pa) = aff.and_then(|a| a.pod_anti_affinity.as_ref()) {
        (anti_affinity, preferred_anti_affinity) = pod_affinity_terms(
            ctx,
            &join(field, "affinity.podAntiAffinity"),
            pa.required_during_scheduling_ignored_during_execution
                .as_deref(),
            pa.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
            warnings,
            &who,
        );
    }
    let mut spread = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let f = join(field, &format!("topologySpreadConstraints[{i}]"));
        let required = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => true,
            "ScheduleAnyway" => false,
            other => {
                ctx.err(
                    &format!("{f}.whenUnsatisfiable"),
                    format!("{other:?} is not DoNotSchedule or ScheduleAnyway"),
                );
                continue;
            }
        };
        if c.max_skew < 1 {
            ctx.err(&format!("{f}.maxSkew"), "must be at least 1");
            continue;
        }
        let policy =
            |ctx: &mut Ctx, name: &str, v: &Option<String>, default: Policy| match v.as_deref() {
                None => Some(default),
                Some("Honor") => Some(Policy::Honor),
                Some("Ignore") => Some(Policy::Ignore),
                Some(other) => {
                    ctx.err(
                        &format!("{f}.{name}"),
                        format!("{other:?} is not Honor or Ignore"),
                    );
                    None
                }
            };
        let (Some(node_affinity_policy), Some(node_taints_policy)) = (
            policy(
                ctx,
                "nodeAffinityPolicy",
                &c.node_affinity_policy,
                Policy::Honor,
            ),
            policy(
                ctx,
                "nodeTaintsPolicy",
                &c.node_taints_policy,
                Policy::Ignore,
            ),
        ) else {
            continue;
        };
        let sel = match c.label_selector.as_ref().map(selector).transpose() {
            Ok(s) => s,
            Err(e) => {
                ctx.err(&format!("{f}.labelSelector"), e);
                continue;
            }
        };
        spread.push(SpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            required,
            selector: sel,
            min_domains: c.min_domains,
            node_affinity_policy,
            node_taints_policy,
            match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
        });
    }
    if ctx.errors.len() > before {
        return None;
    }
    let mut pod = Pod {
        namespace: ns,
        name,
        owner,
        labels: labels_map,
        requests: containers,
        tolerations,
        node_selector,
        required_terms,
        preferred_terms,
        affinity,
        preferred_affinity,
        anti_affinity,
        preferred_anti_affinity,
        spread,
        created,
        host_ports,
        invalid,
    };
    let (reqs, _) = (Requirements::from_labels(&pod.node_selector), ());
    let mut all = reqs;
    if let Some(first) = pod.required_terms.as_ref().and_then(|t| t.first()) {
        all.add_all(&crate::model::term_requirements(first));
    }
    if all
        .get_ref(labels::NODEPOOL)
        .is_some_and(|r| r.operator() == Operator::DoesNotExist)
    {
        pod.invalid.get_or_insert("configured to not run on a Karpenter provisioned node (karpenter.sh/nodepool DoesNotExist)".into());
    }
    Some(pod)
}

struct Workload {
    kind: &'static str,
    namespace: String,
    name: String,
    replicas: i64,
    file: String,
    field: String,
    pos: Pos,
    template: Option<Pod>,
    daemon: bool,
    node_name: Option<String>,
}

fn created_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.creation_timestamp.as_ref().map(|t| t.0.to_string())
}

#[allow(clippy::too_many_lines)]
fn read_workload(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
    warnings: &mut Vec<String>,
) -> Option<Workload> {
    let kind = kind_of(&value).to_owned();
    macro_rules! templated {
        ($ty:ty, $short:expr, $r:ident => $replicas:expr, $t:ident => $tmpl:expr) => {{
            let obj: $ty = ctx.typed(value)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            if name.is_empty() {
                ctx.err(&join(prefix, "metadata.name"), "a workload needs a name");
                return None;
            }
            let ns = namespace(&obj.metadata);
            let spec = obj.spec.as_ref()?;
            let $r = spec;
            let replicas: i64 = $replicas;
            let $t = spec;
            let tmpl: &core::PodTemplateSpec = $tmpl?;
            let labels = tmpl
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default();
            let created = created_of(&obj.metadata);
            let owner = format!("{}/{}", $short, name);
            let pspec = tmpl.spec.as_ref()?;
            let pod = pod_from_spec(
                ctx,
                &join(prefix, "spec.template.spec"),
                ns.clone(),
                name.clone(),
                owner,
                labels,
                created,
                pspec,
                warnings,
            )?;
            Some((ns, name, replicas, pod))
        }};
    }
    let (k, daemon, res) = match kind.as_str() {
        "Deployment" => (
            "deploy",
            false,
            templated!(Deployment, "deploy", s => i64::from(s.replicas.unwrap_or(1)), s => Some(&s.template)),
        ),
        "StatefulSet" => (
            "sts",
            false,
            templated!(StatefulSet, "sts", s => i64::from(s.replicas.unwrap_or(1)), s => Some(&s.template)),
        ),
        "ReplicaSet" => (
            "rs",
            false,
            templated!(ReplicaSet, "rs", s => i64::from(s.replicas.unwrap_or(1)), s => s.template.as_ref()),
        ),
        "Job" => (
            "job",
            false,
            templated!(Job, "job", s => {
            let p = i64::from(s.parallelism.unwrap_or(1));
            s.completions.map_or(p, |c| p.min(i64::from(c)))
        }, s => Some(&s.template)),
        ),
        "DaemonSet" => (
            "ds",
            true,
            templated!(DaemonSet, "ds", _s => 1, s => Some(&s.template)),
        ),
        "Pod" => {
            let obj: core::Pod = ctx.typed(value)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            if name.is_empty() {
                ctx.err(&join(prefix, "metadata.name"), "a pod needs a name");
                return None;
            }
            let ns = namespace(&obj.metadata);
            let spec = obj.spec.as_ref()?;
            let labels = obj.metadata.labels.clone().unwrap_or_default();
            // A DaemonSet's pod already on a node counts as that DaemonSet's overhead there.
            let owner = obj
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "DaemonSet")
                .map_or_else(|| format!("pod/{name}"), |o| format!("ds/{}", o.name));
            let pod = pod_from_spec(
                ctx,
                &join(prefix, "spec"),
                ns.clone(),
                name.clone(),
                owner,
                labels,
                created_of(&obj.metadata),
                spec,
                warnings,
            )?;
            let node_name = spec.node_name.clone().filter(|n| !n.is_empty());
            return Some(Workload {
                kind: "pod",
                namespace: ns,
                name,
                replicas: 1,
                file: ctx.file.to_owned(),
                field: prefix.to_owned(),
                pos: ctx.doc.start,
                template: Some(pod),
                daemon: false,
                node_name,
            });
        }
        _ => return None,
    };
    let (namespace, name, replicas, pod) = res?;
    Some(Workload {
        kind: k,
        namespace,
        name,
        replicas,
        file: ctx.file.to_owned(),
        field: prefix.to_owned(),
        pos: ctx.doc.start,
        template: Some(pod),
        daemon,
        node_name: None,
    })
}

fn read_node(ctx: &mut Ctx, prefix: &str, value: Value) -> Option<Node> {
    let node: core::Node = ctx.typed(value)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        ctx.err(&join(prefix, "metadata.name"), "a node needs a name");
        return None;
    }
    let mut labels_map = node.metadata.labels.clone().unwrap_or_default();
    labels_map
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| name.clone());
    let mut taints = Vec::new();
    for (i, t) in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        taints.extend(taint(ctx, &join(prefix, &format!("spec.taints[{i}]")), t));
    }
    let status = node.status.as_ref();
    let mut read = |which: &str,
                    list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let mut out = BTreeMap::new();
        for (k, q) in list.into_iter().flatten() {
            if let Some(v) = quantity(ctx, &join(prefix, &format!("status.{which}[{k}]")), k, &q.0)
            {
                out.insert(k.clone(), v);
            }
        }
        out
    };
    let mut allocatable = read("allocatable", status.and_then(|s| s.allocatable.as_ref()));
    let mut capacity = read("capacity", status.and_then(|s| s.capacity.as_ref()));
    if allocatable.is_empty() && capacity.is_empty() {
        ctx.err(
            &join(prefix, "status"),
            "an existing node needs status.allocatable (or status.capacity): what it advertises",
        );
        return None;
    }
    if allocatable.is_empty() {
        allocatable = capacity.clone();
    }
    if capacity.is_empty() {
        capacity = allocatable.clone();
    }
    Some(Node {
        name,
        labels: labels_map,
        taints,
        allocatable,
        capacity,
    })
}

fn read_node_class(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
) -> Option<(String, KubeletOverrides)> {
    let nc: EC2NodeClass = ctx.typed(value)?;
    let name = nc.metadata.name.clone().unwrap_or_default();
    let mut o = match &nc.spec.kubelet {
        Some(k) => match KubeletOverrides::from_kubelet(k) {
            Ok(o) => o,
            Err(e) => {
                ctx.err(
                    &join(prefix, &format!("spec.kubelet.{}", e.field)),
                    e.message,
                );
                return None;
            }
        },
        None => KubeletOverrides::default(),
    };
    let bdms = &nc.spec.block_device_mappings;
    let root = bdms
        .iter()
        .position(|b| b.root_volume == Some(true))
        .or_else(|| {
            bdms.iter()
                .position(|b| b.device_name.as_deref() == Some("/dev/xvda"))
        });
    if let Some(i) = root
        && let Some(size) = bdms[i].ebs.as_ref().and_then(|e| e.volume_size.as_ref())
    {
        let f = join(
            prefix,
            &format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
        );
        o.ephemeral_storage_bytes = quantity(ctx, &f, "ephemeral-storage", size);
    }
    o.instance_store_raid0 = nc.spec.instance_store_policy.as_deref() == Some("RAID0");
    Some((name, o))
}

fn read_pool(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
    warnings: &mut Vec<String>,
) -> Option<(Pool, String)> {
    let np: NodePool = ctx.typed(value)?;
    let name = np.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        ctx.err(&join(prefix, "metadata.name"), "a NodePool needs a name");
        return None;
    }
    if np.spec.replicas.is_some() {
        warnings.push(format!(
            "nodepool {name}: static (spec.replicas set); the provisioner skips static NodePools"
        ));
        return None;
    }
    let spec = &np.spec.template.spec;
    let mut requirements = Requirements::new();
    let mut ok = true;
    for (i, r) in spec.requirements.iter().enumerate() {
        let f = join(prefix, &format!("spec.template.spec.requirements[{i}]"));
        let op = match Operator::parse(&r.operator) {
            Ok(op) => op,
            Err(e) => {
                ctx.err(&format!("{f}.operator"), e);
                ok = false;
                continue;
            }
        };
        let req = match Requirement::new(op, &r.values) {
            Ok(req) => req,
            Err(e) => {
                ctx.err(&format!("{f}.values"), e);
                ok = false;
                continue;
            }
        };
        let min = match r.min_values {
            None => None,
            Some(n) if n >= 1 => Some(n as usize),
            Some(_) => {
                ctx.err(&format!("{f}.minValues"), "must be at least 1");
                ok = false;
                continue;
            }
        };
        requirements.add(&r.key, req.with_min_values(min));
    }
    let mut pool_taints = |list: &[core::Taint], field: &str| {
        let mut out = Vec::new();
        for (i, t) in list.iter().enumerate() {
            match taint(
                ctx,
                &join(prefix, &format!("spec.template.spec.{field}[{i}]")),
                t,
            ) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        out
    };
    let taints = pool_taints(&spec.taints, "taints");
    let startup_taints = pool_taints(&spec.startup_taints, "startupTaints");
    let mut limits = BTreeMap::new();
    for (k, v) in &np.spec.limits {
        let f = join(prefix, &format!("spec.limits[{k}]"));
        match value_quantity(v) {
            Some(text) => match quantity(ctx, &f, k, &text) {
                Some(n) => {
                    limits.insert(k.clone(), n);
                }
                None => ok = false,
            },
            None => {
                ctx.err(&f, "a limit is a quantity (\"6\", 100, 1000Gi)");
                ok = false;
            }
        }
    }
    let labels_map = np
        .spec
        .template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    if !ok {
        return None;
    }
    let class = spec.node_class_ref.name.clone();
    Some((
        Pool {
            name,
            weight: np.spec.weight.unwrap_or(0),
            node_class: class.clone(),
            requirements,
            labels: labels_map,
            taints,
            startup_taints,
            limits,
            kubelet: KubeletOverrides::default(),
        },
        class,
    ))
}

/// Parses `deploy/NAME=50` (or `NAMESPACE/deploy/NAME=50`).
fn parse_scale(text: &str) -> Result<(Option<String>, &'static str, String, i64), String> {
    let bad = || {
        format!("--scale {text:?}: expected KIND/NAME=N (deploy, sts, rs, job), e.g. deploy/web=50")
    };
    let (target, n) = text.split_once('=').ok_or_else(bad)?;
    let n: i64 = n.trim().parse().map_err(|_| bad())?;
    if n < 0 {
        return Err(bad());
    }
    let parts: Vec<&str> = target.split('/').collect();
    let (ns, kind, name) = match parts.as_slice() {
        [k, n] => (None, *k, *n),
        [ns, k, n] => (Some((*ns).to_owned()), *k, *n),
        _ => return Err(bad()),
    };
    let kind = match kind {
        "deploy" | "deployment" | "deployments" | "Deployment" => "deploy",
        "sts" | "statefulset" | "statefulsets" | "StatefulSet" => "sts",
        "rs" | "replicaset" | "replicasets" | "ReplicaSet" => "rs",
        "job" | "jobs" | "Job" => "job",
        _ => return Err(bad()),
    };
    if name.is_empty() {
        return Err(bad());
    }
    Ok((ns, kind, name.to_owned(), n))
}

/// Reads pools (NodePools + EC2NodeClasses; other kinds are skipped, so a rendered bundle
/// works), workloads and existing nodes. The catalog is the EC2 one with `zones` and
/// `spot_fraction` applied.
pub fn load(
    pool_files: &[SourceFile],
    workload_files: &[SourceFile],
    node_files: &[SourceFile],
    opts: &LoadOptions,
) -> Result<Input, Vec<InputError>> {
    let config = OfferingConfig {
        zones: opts.zones.clone(),
        spot_fraction: opts.spot_fraction,
        ..OfferingConfig::default()
    };
    let catalog = Catalog::aws(&config).map_err(|e| {
        vec![InputError {
            file: "<options>".into(),
            pos: None,
            field: String::new(),
            message: e.to_string(),
        }]
    })?;
    load_with_catalog(pool_files, workload_files, node_files, opts, catalog)
}

/// [`load`] against a given catalog (e.g. the KWOK one, or test types).
#[allow(clippy::too_many_lines)]
pub fn load_with_catalog(
    pool_files: &[SourceFile],
    workload_files: &[SourceFile],
    node_files: &[SourceFile],
    opts: &LoadOptions,
    catalog: Catalog,
) -> Result<Input, Vec<InputError>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut pools: Vec<(Pool, String, String, Pos)> = Vec::new();
    let mut classes: BTreeMap<String, KubeletOverrides> = BTreeMap::new();
    let mut workloads: Vec<Workload> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();

    let all = pool_files
        .iter()
        .map(|f| (0, f))
        .chain(workload_files.iter().map(|f| (1, f)))
        .chain(node_files.iter().map(|f| (2, f)));
    for (role, file) in all {
        let docs = parse_documents(file, &mut errors);
        for doc in &docs {
            for (prefix, mut value) in objects(doc) {
                stringify_quantities(&mut value, false);
                let kind = kind_of(&value).to_owned();
                let mut ctx = Ctx {
                    file: &file.name,
                    doc,
                    errors: &mut errors,
                };
                match kind.as_str() {
                    // Pool inputs may be a whole rendered bundle: only pools count there.
                    "NodePool" | "EC2NodeClass" if role != 0 => warnings.push(format!(
                        "{}: {kind} {} is not read from here; pass NodePools and EC2NodeClasses as pools",
                        file.name,
                        value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
                    )),
                    _ if role == 0 && kind != "NodePool" && kind != "EC2NodeClass" => {}
                    "Node" if role != 2 => warnings.push(format!(
                        "{}: Node {} is not read from here; pass existing nodes with --nodes",
                        file.name,
                        value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
                    )),
                    "NodePool" => {
                        if let Some((pool, class)) = read_pool(&mut ctx, &prefix, value, &mut warnings) {
                            pools.push((pool, class, file.name.clone(), doc.start));
                        }
                    }
                    "EC2NodeClass" => {
                        if let Some((name, o)) = read_node_class(&mut ctx, &prefix, value) {
                            classes.insert(name, o);
                        }
                    }
                    "Node" => nodes.extend(read_node(&mut ctx, &prefix, value)),
                    "Deployment" | "StatefulSet" | "ReplicaSet" | "Job" | "Pod" | "DaemonSet" => {
                        workloads.extend(read_workload(&mut ctx, &prefix, value, &mut warnings));
                    }
                    "" if role != 0 => ctx.err(&join(&prefix, "kind"), "missing kind"),
                    other if role == 1 => warnings.push(format!("{}: {other} is not a workload the planner reads; skipped", file.name)),
                    _ => {}
                }
            }
        }
    }

    // Scale overrides.
    for s in &opts.scale {
        match parse_scale(s) {
            Ok((ns, kind, name, n)) => {
                let mut hit = false;
                for w in workloads.iter_mut() {
                    if w.kind == kind
                        && w.name == name
                        && ns.as_ref().is_none_or(|ns| *ns == w.namespace)
                    {
                        w.replicas = n;
                        hit = true;
                    }
                }
                if !hit {
                    errors.push(InputError {
                        file: "--scale".into(),
                        pos: None,
                        field: String::new(),
                        message: format!("{s}: no {kind} named {name} in the workloads"),
                    });
                }
            }
            Err(e) => errors.push(InputError {
                file: "--scale".into(),
                pos: None,
                field: String::new(),
                message: e,
            }),
        }
    }

    // Pools get their node class settings.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut out_pools = Vec::new();
    for (mut pool, class, file, pos) in pools {
        if !seen.insert(pool.name.clone()) {
            errors.push(InputError {
                file,
                pos: Some(pos),
                field: "metadata.name".into(),
                message: format!("NodePool {} is defined twice", pool.name),
            });
            continue;
        }
        match classes.get(&class) {
            Some(o) => pool.kubelet = o.clone(),
            None => warnings.push(format!(
                "nodepool {}: EC2NodeClass {class} not among the inputs; assuming Karpenter's default kubelet settings",
                pool.name
            )),
        }
        out_pools.push(pool);
    }

    let total: i64 = workloads
        .iter()
        .filter(|w| !w.daemon)
        .map(|w| w.replicas.max(0))
        .fold(0i64, i64::saturating_add);
    if total > MAX_PODS {
        errors.push(InputError {
            file: "<workloads>".into(),
            pos: None,
            field: String::new(),
            message: format!(
                "the workloads ask for {total} pods; the planner takes at most {MAX_PODS}"
            ),
        });
        return Err(errors);
    }
    let mut pods = Vec::new();
    let mut daemonsets = Vec::new();
    let mut bound = Vec::new();
    let mut names: BTreeSet<(String, String)> = BTreeSet::new();
    for w in workloads {
        let Some(template) = w.template else { continue };
        if w.daemon {
            daemonsets.push(template);
            continue;
        }
        if let Some(node) = w.node_name {
            bound.push((node, template));
            continue;
        }
        let single = w.kind == "pod";
        for i in 0..w.replicas.max(0) {
            let mut p = template.clone();
            if !single {
                p.name = format!("{}-{i}", w.name);
            }
            if !names.insert((p.namespace.clone(), p.name.clone())) {
                errors.push(InputError {
                    file: w.file.clone(),
                    pos: Some(w.pos),
                    field: join(&w.field, "metadata.name"),
                    message: format!("pod {}/{} would exist twice", p.namespace, p.name),
                });
                break;
            }
            pods.push(p);
        }
    }
    let mut node_names = BTreeSet::new();
    for n in &nodes {
        if !node_names.insert(n.name.clone()) {
            errors.push(InputError {
                file: "<nodes>".into(),
                pos: None,
                field: String::new(),
                message: format!("node {} is defined twice", n.name),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Input {
        pools: out_pools,
        pods,
        daemonsets,
        nodes,
        bound,
        catalog,
        options: opts.options.clone(),
        warnings,
    })
}
