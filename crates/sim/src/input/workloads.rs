//! Workloads (Deployment, StatefulSet, ReplicaSet, Job, DaemonSet, Pod): their pod template and
//! replica count, `--scale` overrides, and the expansion into the pods the planner places.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1 as core;
use kk_model::yaml::Pos;
use serde_json::Value;

use super::default_spread::{Controller, counts};
use super::pods::pod_from_spec;
use super::read::{Ctx, join, kind_of, namespace};
use super::{InputError, MAX_PODS};
use crate::model::Pod;

/// A workload as read: its pod template and how many replicas it asks for.
pub(super) struct Workload {
    kind: &'static str,
    pub(super) namespace: String,
    pub(super) name: String,
    replicas: i64,
    file: String,
    field: String,
    pos: Pos,
    pub(super) template: Option<Pod>,
    pub(super) daemon: bool,
    node_name: Option<String>,
    /// The controller whose selector default topology spread takes (`default_spread`).
    pub(super) controller: Option<Controller>,
    /// A pod object's `metadata.uid`.
    uid: Option<String>,
}

impl Workload {
    /// The Kubernetes kind a pod's `ownerReference` names this workload by.
    pub(super) fn controller_kind(&self) -> &'static str {
        match self.kind {
            "rs" => "ReplicaSet",
            "sts" => "StatefulSet",
            "deploy" => "Deployment",
            "job" => "Job",
            "ds" => "DaemonSet",
            _ => "Pod",
        }
    }
}

/// The controller a workload's pods count for default topology spread: a ReplicaSet's or
/// StatefulSet's own selector (a Deployment's stands for its ReplicaSet's); Jobs count none.
fn own_controller(
    ctx: &mut Ctx,
    prefix: &str,
    short: &str,
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Option<Controller> {
    if !matches!(short, "deploy" | "rs" | "sts") {
        return None;
    }
    match super::read::selector(selector?) {
        Ok(s) => Some(Controller::Own(s)),
        Err(e) => {
            ctx.err(&join(prefix, "spec.selector"), e);
            None
        }
    }
}

fn created_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.creation_timestamp.as_ref().map(|t| t.0.to_string())
}

#[allow(clippy::too_many_lines)]
pub(super) fn read_workload(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
    warnings: &mut Vec<String>,
) -> Option<Workload> {
    let kind = kind_of(&value).to_owned();
    macro_rules! templated {
        ($ty:ty, $short:expr, $r:ident => $replicas:expr, $t:ident => $tmpl:expr, $sl:ident => $sel:expr) => {{
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
            let $sl = spec;
            let controller = own_controller(ctx, prefix, $short, $sel);
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
            Some((ns, name, replicas, pod, controller))
        }};
    }
    let (k, daemon, res) = match kind.as_str() {
        "Deployment" => (
            "deploy",
            false,
            templated!(Deployment, "deploy", s => i64::from(s.replicas.unwrap_or(1)), s => Some(&s.template), s => Some(&s.selector)),
        ),
        "StatefulSet" => (
            "sts",
            false,
            templated!(StatefulSet, "sts", s => i64::from(s.replicas.unwrap_or(1)), s => Some(&s.template), s => Some(&s.selector)),
        ),
        "ReplicaSet" => (
            "rs",
            false,
            templated!(ReplicaSet, "rs", s => i64::from(s.replicas.unwrap_or(1)), s => s.template.as_ref(), s => Some(&s.selector)),
        ),
        "Job" => (
            "job",
            false,
            templated!(Job, "job", s => {
            let p = i64::from(s.parallelism.unwrap_or(1));
            s.completions.map_or(p, |c| p.min(i64::from(c)))
        }, s => Some(&s.template), s => s.selector.as_ref()),
        ),
        "DaemonSet" => (
            "ds",
            true,
            templated!(DaemonSet, "ds", _s => 1, s => Some(&s.template), s => Some(&s.selector)),
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
            let controller = obj
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && counts(&o.kind))
                .map(|o| Controller::Reference {
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: Some(o.uid.clone()).filter(|u| !u.is_empty()),
                });
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
                controller,
                uid: obj.metadata.uid.clone().filter(|u| !u.is_empty()),
            });
        }
        _ => return None,
    };
    let (namespace, name, replicas, pod, controller) = res?;
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
        controller,
        uid: None,
    })
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

/// Applies `--scale` overrides; one that names no workload is an error.
pub(super) fn apply_scale(
    scale: &[String],
    workloads: &mut [Workload],
    errors: &mut Vec<InputError>,
) {
    for s in scale {
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
}

/// The pods the workloads expand to, the DaemonSet templates, and pods already bound to a
/// node; `None` (with the error pushed) when the replicas sum past [`MAX_PODS`].
#[allow(clippy::type_complexity)]
pub(super) fn expand(
    workloads: Vec<Workload>,
    errors: &mut Vec<InputError>,
) -> Option<(Vec<Pod>, Vec<Pod>, Vec<(String, Pod)>)> {
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
        return None;
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
            if single {
                // As the oracle names a pod without one (`defaultUID`).
                let uid = w
                    .uid
                    .clone()
                    .unwrap_or_else(|| format!("pod-{}-{}", p.namespace, p.name));
                p.uid = Some(uid.into());
            } else {
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
    Some((pods, daemonsets, bound))
}
