//! Manifests → [`Input`]: NodePools and EC2NodeClasses, workloads (Deployment, StatefulSet,
//! ReplicaSet, Job, Pod, DaemonSet), existing Nodes. Every error names the file, the position
//! and the field.
//!
//! `read.rs` holds what every reader shares (located errors, quantities, taints, selectors);
//! `pools.rs` NodePools and EC2NodeClasses; `workloads.rs` workloads, `--scale` and the
//! expansion into pods; `pods.rs` a pod spec; `nodes.rs` existing Nodes; `reservations.rs`
//! capacity reservations (`describe-capacity-reservations` output).

use std::collections::BTreeMap;

use kk_catalog::{Catalog, KubeletOverrides, OfferingConfig};
use kk_model::yaml::Pos;
use serde_json::Value;

use crate::model::{Node, Pool};
use crate::solver::{Input, Options};

mod nodes;
mod overlays;
mod pods;
mod pools;
mod read;
mod reservations;
mod static_pools;
mod workloads;

pub use static_pools::add_static_nodes;

use read::{Ctx, join, kind_of, objects, parse_documents, stringify_quantities};
use workloads::Workload;

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
    /// `aws ec2 describe-capacity-reservations` outputs: their active reservations become
    /// `reserved` offerings, offered to every NodePool that allows `reserved`.
    pub reservations: Vec<SourceFile>,
    pub options: Options,
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
    let mut input = load_with_catalog(pool_files, workload_files, node_files, opts, catalog)?;
    // A plan starts from the cluster as Karpenter keeps it: static pools at their replicas.
    add_static_nodes(&mut input);
    Ok(input)
}

/// [`load`] against a given catalog (e.g. the KWOK one, or test types).
#[allow(clippy::too_many_lines)]
pub fn load_with_catalog(
    pool_files: &[SourceFile],
    workload_files: &[SourceFile],
    node_files: &[SourceFile],
    opts: &LoadOptions,
    mut catalog: Catalog,
) -> Result<Input, Vec<InputError>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for file in &opts.reservations {
        warnings.extend(reservations::add_reservations(
            file,
            &mut catalog,
            &mut errors,
        ));
    }
    let mut pools: Vec<(Pool, String, String, Pos)> = Vec::new();
    let mut classes: BTreeMap<String, KubeletOverrides> = BTreeMap::new();
    let mut workloads: Vec<Workload> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut node_overlays = Vec::new();

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
                    "NodeOverlay" if role == 0 => {
                        node_overlays.extend(overlays::read_overlay(&mut ctx, &prefix, &value, &mut warnings));
                    }
                    _ if role == 0 && kind != "NodePool" && kind != "EC2NodeClass" => {}
                    "Node" if role != 2 => warnings.push(format!(
                        "{}: Node {} is not read from here; pass existing nodes with --nodes",
                        file.name,
                        value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
                    )),
                    "NodePool" => {
                        if let Some((pool, class)) = pools::read_pool(&mut ctx, &prefix, value) {
                            pools.push((pool, class, file.name.clone(), doc.start));
                        }
                    }
                    "EC2NodeClass" => {
                        if let Some((name, o)) = pools::read_node_class(&mut ctx, &prefix, value) {
                            classes.insert(name, o);
                        }
                    }
                    "Node" => nodes.extend(nodes::read_node(&mut ctx, &prefix, value, &mut warnings)),
                    "Deployment" | "StatefulSet" | "ReplicaSet" | "Job" | "Pod" | "DaemonSet" => {
                        workloads.extend(workloads::read_workload(&mut ctx, &prefix, value, &mut warnings));
                    }
                    "" if role != 0 => ctx.err(&join(&prefix, "kind"), "missing kind"),
                    other if role == 1 => warnings.push(format!("{}: {other} is not a workload the planner reads; skipped", file.name)),
                    _ => {}
                }
            }
        }
    }

    workloads::apply_scale(&opts.scale, &mut workloads, &mut errors);
    let mut out_pools = pools::attach_classes(pools, &classes, &mut errors, &mut warnings);
    overlays::apply(node_overlays, &mut out_pools, &catalog, &mut warnings);
    let Some((pods, daemonsets, bound)) = workloads::expand(workloads, &mut errors) else {
        return Err(errors);
    };
    nodes::check_unique(&nodes, &mut errors);
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
