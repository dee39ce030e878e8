//! A pod spec → [`Pod`]: requests as the kubelet sums them, tolerations, node affinity, pod
//! (anti-)affinity and topology spread, each error at its field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use super::read::{Ctx, join, quantity, selector};
use crate::labels;
use crate::model::{
    Pod, PodAffinityTerm, PodSpec, Policy, SelectorReq, SpreadConstraint, Term, Toleration,
};
use crate::req::{Operator, Requirement, Requirements};

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

/// The pod's requests (limits stand in for missing requests; init containers and sidecars as
/// the kubelet sums them; plus pod overhead) and its host ports.
fn requests(
    ctx: &mut Ctx,
    field: &str,
    spec: &core::PodSpec,
) -> (BTreeMap<String, i64>, Vec<(i32, String)>) {
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
    (containers, host_ports)
}

fn tolerations(ctx: &mut Ctx, field: &str, spec: &core::PodSpec) -> Vec<Toleration> {
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
    tolerations
}

/// Required node-affinity terms (`None` when there are none) and weighted preferred ones; a
/// restricted label or a `matchFields` term marks the pod as not provisioned by Karpenter.
#[allow(clippy::type_complexity)]
fn node_affinity(
    ctx: &mut Ctx,
    field: &str,
    aff: Option<&core::Affinity>,
    invalid: &mut Option<String>,
) -> (Option<Vec<Term>>, Vec<(i32, Term)>) {
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
    (required_terms, preferred_terms)
}

fn spread_constraints(ctx: &mut Ctx, field: &str, spec: &core::PodSpec) -> Vec<SpreadConstraint> {
    let mut spread = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        match spread_constraint(c) {
            Ok(c) => spread.push(c),
            Err((name, message)) => ctx.err(
                &join(field, &format!("topologySpreadConstraints[{i}]{name}")),
                message,
            ),
        }
    }
    spread
}

/// One topology spread constraint, or the field under it (`.maxSkew`) and what is wrong.
pub(super) fn spread_constraint(
    c: &core::TopologySpreadConstraint,
) -> Result<SpreadConstraint, (String, String)> {
    let required = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => true,
        "ScheduleAnyway" => false,
        other => {
            return Err((
                ".whenUnsatisfiable".into(),
                format!("{other:?} is not DoNotSchedule or ScheduleAnyway"),
            ));
        }
    };
    if c.max_skew < 1 {
        return Err((".maxSkew".into(), "must be at least 1".into()));
    }
    let policy = |name: &str, v: &Option<String>, default: Policy| match v.as_deref() {
        None => Ok(default),
        Some("Honor") => Ok(Policy::Honor),
        Some("Ignore") => Ok(Policy::Ignore),
        Some(other) => Err((
            format!(".{name}"),
            format!("{other:?} is not Honor or Ignore"),
        )),
    };
    let node_affinity_policy =
        policy("nodeAffinityPolicy", &c.node_affinity_policy, Policy::Honor)?;
    let node_taints_policy = policy("nodeTaintsPolicy", &c.node_taints_policy, Policy::Ignore)?;
    let sel = c
        .label_selector
        .as_ref()
        .map(selector)
        .transpose()
        .map_err(|e| (".labelSelector".to_owned(), e))?;
    Ok(SpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        required,
        selector: sel,
        min_domains: c.min_domains,
        node_affinity_policy,
        node_taints_policy,
        match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
    })
}

/// A pod spec → [`Pod`]; `None` when any field is in error (each recorded in `ctx`).
#[allow(clippy::too_many_arguments)]
pub(super) fn pod_from_spec(
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
    let (containers, host_ports) = requests(ctx, field, spec);
    let tolerations = tolerations(ctx, field, spec);
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
    let (required_terms, preferred_terms) = node_affinity(ctx, field, aff, &mut invalid);
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
    let spread = spread_constraints(ctx, field, spec);
    if ctx.errors.len() > before {
        return None;
    }
    let mut pod_spec = PodSpec {
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
    let mut all = Requirements::from_labels(&pod_spec.node_selector);
    if let Some(first) = pod_spec.required_terms.as_ref().and_then(|t| t.first()) {
        all.add_all(&crate::model::term_requirements(first));
    }
    if all
        .get_ref(labels::NODEPOOL)
        .is_some_and(|r| r.operator() == Operator::DoesNotExist)
    {
        pod_spec.invalid.get_or_insert("configured to not run on a Karpenter provisioned node (karpenter.sh/nodepool DoesNotExist)".into());
    }
    Some(Pod::new(ns, name, pod_spec))
}
