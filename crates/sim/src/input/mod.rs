//! Manifests → [`Input`]: NodePools and EC2NodeClasses, workloads (Deployment, StatefulSet,
//! ReplicaSet, Job, Pod, DaemonSet), Services (for default topology spread), existing Nodes.
//! Every error names the file, the position and the field.
//!
//! `read.rs` holds what every reader shares (located errors, quantities, taints, selectors);
//! `pools.rs` NodePools and EC2NodeClasses; `workloads.rs` workloads, `--scale` and the
//! expansion into pods; `pods.rs` a pod spec; `nodes.rs` existing Nodes; `reservations.rs`
//! capacity reservations (`describe-capacity-reservations` output); `default_spread.rs`
//! Karpenter's default topology spread constraints.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kk_catalog::{Catalog, KubeletOverrides, OfferingConfig};
use kk_model::yaml::{Document, Pos};
use serde_json::Value;

use crate::model::{Node, Pool, SpreadConstraint};
use crate::solver::{Input, Options};

mod default_spread;
mod nodes;
mod overlays;
mod pods;
mod pools;
mod read;
mod reservations;
pub mod settings;
mod static_pools;
mod workloads;

pub use default_spread::{OwnerSelector, default_constraints};
pub use read::selector as label_selector;
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
    /// Karpenter's default topology spread constraints (`--scheduler-config`), without
    /// selectors: given to each pod without constraints of its own (`default_spread`).
    pub default_spread: Vec<SpreadConstraint>,
    /// ReplicaSets and StatefulSets known only as the owners pods point at.
    pub owners: Vec<OwnerSelector>,
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
    // Budgets hold as the limits the budget controller writes from what the nodes cost.
    let holdings = crate::budget::holdings_from_nodes(&input);
    crate::budget::narrow(&mut input, &holdings);
    Ok(input)
}

/// [`load`] against a given catalog (e.g. the KWOK one, or test types).
pub fn load_with_catalog(
    pool_files: &[SourceFile],
    workload_files: &[SourceFile],
    node_files: &[SourceFile],
    opts: &LoadOptions,
    catalog: Catalog,
) -> Result<Input, Vec<InputError>> {
    let all = pool_files
        .iter()
        .map(|f| (Role::Pools, f))
        .chain(workload_files.iter().map(|f| (Role::Workloads, f)))
        .chain(node_files.iter().map(|f| (Role::Nodes, f)));
    // Positions only serve errors: read without them, and again with them to place one.
    let read = |locate: bool, mut catalog: Catalog| {
        let mut reader = Reader::new(opts, &mut catalog);
        for (role, file) in all.clone() {
            let docs = parse_documents(file, locate, &mut reader.errors);
            reader.documents(role, &file.name, &docs);
        }
        reader.finish(opts, catalog)
    };
    read(false, catalog.clone()).or_else(|_| read(true, catalog))
}

/// A file's documents, parsed once for readers that each take what they need from it (the
/// disruption state reads its own kinds, then pools, nodes and pods from the same parse).
#[derive(Debug, Clone)]
pub struct ParsedFile {
    pub name: String,
    pub docs: Vec<Document>,
}

impl ParsedFile {
    /// Parses `file`; a syntax error is the file's one error. Without `locate`, no
    /// positions are kept (every field is at its document's start): for a first reading that
    /// parses again with them only if it finds a problem to place.
    pub fn parse(file: &SourceFile, locate: bool) -> Result<ParsedFile, InputError> {
        let mut errors = Vec::new();
        let docs = parse_documents(file, locate, &mut errors);
        match errors.pop() {
            Some(e) => Err(e),
            None => Ok(ParsedFile {
                name: file.name.clone(),
                docs,
            }),
        }
    }
}

/// [`load_with_catalog`] from files already parsed.
pub fn load_parsed_with_catalog(
    pool_files: &[ParsedFile],
    workload_files: &[ParsedFile],
    node_files: &[ParsedFile],
    opts: &LoadOptions,
    mut catalog: Catalog,
) -> Result<Input, Vec<InputError>> {
    let mut reader = Reader::new(opts, &mut catalog);
    let all = pool_files
        .iter()
        .map(|f| (Role::Pools, f))
        .chain(workload_files.iter().map(|f| (Role::Workloads, f)))
        .chain(node_files.iter().map(|f| (Role::Nodes, f)));
    for (role, file) in all {
        reader.documents(role, &file.name, &file.docs);
    }
    reader.finish(opts, catalog)
}

/// Objects already parsed, one input "file" each as a `List` of them: what a manifest file
/// holding `{"kind": "List", "items": [...]}` would give, without its text. Errors name the
/// file and the item's field path (`items[3].spec...`); their positions are the file's start.
pub struct ObjectList<I> {
    pub name: String,
    pub items: I,
}

/// [`load_with_catalog`] from parsed objects instead of text: the oracle's scenario files
/// (JSON, items read one at a time) skip the YAML loader and its size limits.
pub fn load_objects_with_catalog<P, W, N>(
    pools: ObjectList<P>,
    workloads: ObjectList<W>,
    nodes: Option<ObjectList<N>>,
    opts: &LoadOptions,
    mut catalog: Catalog,
) -> Result<Input, Vec<InputError>>
where
    P: IntoIterator<Item = Value>,
    W: IntoIterator<Item = Value>,
    N: IntoIterator<Item = Value>,
{
    let mut reader = Reader::new(opts, &mut catalog);
    // Positions are not kept for parsed objects: every error is at the list's start.
    let doc = Document::parsed(Value::Null);
    let mut read = |role: Role, name: &str, items: &mut dyn Iterator<Item = Value>| {
        for (i, value) in items.enumerate() {
            reader.object(role, name, &doc, &format!("items[{i}]"), Cow::Owned(value));
        }
    };
    read(Role::Pools, &pools.name, &mut pools.items.into_iter());
    read(
        Role::Workloads,
        &workloads.name,
        &mut workloads.items.into_iter(),
    );
    if let Some(nodes) = nodes {
        read(Role::Nodes, &nodes.name, &mut nodes.items.into_iter());
    }
    reader.finish(opts, catalog)
}

/// An object to keep, its quantities as strings.
fn owned(value: Cow<Value>) -> Value {
    let mut value = value.into_owned();
    stringify_quantities(&mut value, false);
    value
}

/// Which input an object came from: pools, workloads or existing nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Pools,
    Workloads,
    Nodes,
}

/// What the objects read so far add up to.
#[derive(Default)]
struct Reader {
    errors: Vec<InputError>,
    warnings: Vec<String>,
    pools: Vec<(Pool, String, String, Pos)>,
    classes: BTreeMap<String, KubeletOverrides>,
    workloads: Vec<Workload>,
    services: Vec<default_spread::ServiceSelector>,
    nodes: Vec<Node>,
    node_overlays: Vec<overlays::Overlay>,
}

impl Reader {
    /// Reads every object of `docs` (`List`s expanded) by its kind.
    fn documents(&mut self, role: Role, file: &str, docs: &[Document]) {
        for doc in docs {
            for (prefix, value) in objects(doc) {
                self.object(role, file, doc, &prefix, Cow::Borrowed(value));
            }
        }
    }

    /// Reads one object of `file` (at `prefix` in `doc`) by its kind; copied only when a
    /// reader keeps it, since a cluster dump is read once for pools and once for nodes.
    fn object(&mut self, role: Role, file: &str, doc: &Document, prefix: &str, value: Cow<Value>) {
        let kind = kind_of(&value).to_owned();
        let warnings = &mut self.warnings;
        let mut ctx = Ctx {
            file,
            doc,
            errors: &mut self.errors,
        };
        let name = |value: &Value| {
            value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match kind.as_str() {
            // Pool inputs may be a whole rendered bundle: only pools count there.
            "NodePool" | "EC2NodeClass" if role != Role::Pools => warnings.push(format!(
                "{file}: {kind} {} is not read from here; pass NodePools and EC2NodeClasses as pools",
                name(&value)
            )),
            "NodeOverlay" if role == Role::Pools => {
                self.node_overlays
                    .extend(overlays::read_overlay(&mut ctx, prefix, &owned(value), warnings));
            }
            _ if role == Role::Pools && kind != "NodePool" && kind != "EC2NodeClass" => {}
            "Node" if role != Role::Nodes => warnings.push(format!(
                "{file}: Node {} is not read from here; pass existing nodes with --nodes",
                name(&value)
            )),
            "NodePool" => {
                if let Some((pool, class)) = pools::read_pool(&mut ctx, prefix, owned(value)) {
                    self.pools.push((pool, class, file.to_owned(), doc.start));
                }
            }
            "EC2NodeClass" => {
                if let Some((name, o)) = pools::read_node_class(&mut ctx, prefix, owned(value)) {
                    self.classes.insert(name, o);
                }
            }
            "Node" => self
                .nodes
                .extend(nodes::read_node(&mut ctx, prefix, owned(value), warnings)),
            "Deployment" | "StatefulSet" | "ReplicaSet" | "Job" | "Pod" | "DaemonSet" => {
                self.workloads
                    .extend(workloads::read_workload(&mut ctx, prefix, owned(value), warnings));
            }
            "Service" => {
                let service: Option<k8s_openapi::api::core::v1::Service> =
                    ctx.typed(owned(value));
                if let Some(service) = service {
                    self.services.push(default_spread::ServiceSelector {
                        namespace: read::namespace(&service.metadata),
                        selector: service.spec.and_then(|s| s.selector).unwrap_or_default(),
                    });
                }
            }
            "" if role != Role::Pools => ctx.err(&join(prefix, "kind"), "missing kind"),
            other if role == Role::Workloads => warnings.push(format!(
                "{file}: {other} is not a workload the planner reads; skipped"
            )),
            _ => {}
        }
    }

    /// A reader that starts with `opts`' capacity reservations added to `catalog`.
    fn new(opts: &LoadOptions, catalog: &mut Catalog) -> Reader {
        let mut reader = Reader::default();
        for file in &opts.reservations {
            let warnings = reservations::add_reservations(file, catalog, &mut reader.errors);
            reader.warnings.extend(warnings);
        }
        reader
    }

    fn finish(self, opts: &LoadOptions, catalog: Catalog) -> Result<Input, Vec<InputError>> {
        let Reader {
            mut errors,
            mut warnings,
            pools,
            classes,
            mut workloads,
            services,
            nodes,
            node_overlays,
        } = self;
        workloads::apply_scale(&opts.scale, &mut workloads, &mut errors);
        default_spread::inject(
            &mut workloads,
            &services,
            &opts.owners,
            &opts.default_spread,
        );
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
}
