//! `kubean-karpenter plan`: the file-system side of kk-sim. Reads NodePools (a spec is
//! rendered in memory), workloads and existing nodes, runs Karpenter's scheduler simulation and
//! prints the NodeClaims it would create and the pods it would leave Pending.
//!
//! Exit codes: 0 every pod placed, 1 some pods Pending, 2 usage or input error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kk_sim::{LoadOptions, SourceFile};

use crate::{Failure, sources};

mod disrupt;

#[derive(clap::Args)]
pub struct PlanArgs {
    /// NodePools and EC2NodeClasses: manifests, a rendered bundle directory, or an
    /// ElasticCluster spec (rendered in memory). Directories are read for *.yaml / *.yml.
    #[arg(
        short = 'f',
        long = "pools",
        value_name = "SPEC_OR_MANIFESTS",
        required_unless_present = "from_cluster"
    )]
    pools: Vec<String>,
    /// Workloads: Deployment, StatefulSet, ReplicaSet, Job, Pod, DaemonSet (files,
    /// directories or - for standard input).
    #[arg(
        short = 'w',
        long = "workloads",
        value_name = "WORKLOADS",
        required_unless_present = "disrupt"
    )]
    workloads: Vec<String>,
    /// Existing Node manifests (labels, taints, status.allocatable); a node labelled
    /// karpenter.sh/nodepool counts against that pool's limits with what it advertises.
    #[arg(long, value_name = "NODES")]
    nodes: Vec<String>,
    /// Override replicas: deploy/NAME=50, sts/NAME=3, job/NAME=4, rs/NAME=2
    /// (NAMESPACE/deploy/NAME=50 for one namespace). Repeatable.
    #[arg(long, value_name = "KIND/NAME=N")]
    scale: Vec<String>,
    /// Offering zones, comma-separated (default: the catalog's us-east-1a,us-east-1b,us-east-1c).
    #[arg(long, value_delimiter = ',', value_name = "ZONES")]
    zones: Vec<String>,
    /// Spot price as a fraction of on-demand (default 0.4).
    #[arg(long, value_name = "FRACTION")]
    spot_fraction: Option<f64>,
    /// Capacity reservations: the output of `aws ec2 describe-capacity-reservations` (JSON or
    /// YAML; - for standard input). Each active one is a `reserved` offering (on-demand / 10^7
    /// $/h) of its type and zone, offered to every NodePool that allows `reserved`, so pass
    /// the ones your node classes select. Repeatable.
    #[arg(
        long = "capacity-reservations",
        value_name = "FILE",
        conflicts_with = "disrupt"
    )]
    capacity_reservations: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
    /// Explain one pod (namespace/name, e.g. inference/vllm-7): where it went, or every
    /// candidate's reason for refusing it. With --disrupt: one node's story.
    #[arg(long, value_name = "NAMESPACE/POD|NODE")]
    explain: Option<String>,
    /// What Karpenter's disruption controller would do to a running cluster: -f/-w/--nodes
    /// then take its state (NodePools, Nodes, NodeClaims, Pods, DaemonSets,
    /// PodDisruptionBudgets; e.g. a `kubectl get ... -o yaml` dump). See docs/guide/plan.md.
    #[arg(long)]
    disrupt: bool,
    /// With --disrupt: move the clock forward (2h, 720h) for consolidateAfter and expireAfter.
    #[arg(long, value_name = "DURATION", requires = "disrupt")]
    at: Option<String>,
    /// With --disrupt: the instant the state was taken (RFC 3339; default: the newest
    /// timestamp in the inputs).
    #[arg(long, value_name = "TIME", requires = "disrupt")]
    now: Option<String>,
    /// With --disrupt: Karpenter's SpotToSpotConsolidation feature gate (off by default).
    #[arg(long, requires = "disrupt")]
    spot_to_spot: bool,
    /// With --disrupt: Karpenter's rebootForRepair AWS feature gate: a node repair for a
    /// reboot-class GPU fault reboots the node instead of replacing it (off by default).
    #[arg(long, requires = "disrupt")]
    reboot_for_repair: bool,
    /// With --disrupt: each consolidation method's wall-clock limit per pass (30s, 1m), like
    /// Karpenter's own (multi-node consolidation 1m, single-node 3m). Past it, multi-node
    /// keeps the best command found so far, single-node gives up the pass, and the output's
    /// warnings say so. Default: no limit (the result does not depend on the machine).
    #[arg(long, value_name = "DURATION", requires = "disrupt")]
    budget_time: Option<String>,
    /// With --disrupt: instead of the disruption loop, what happens if this capacity is
    /// reclaimed and stays unavailable (spot, spot:g6.xlarge, on-demand, type:T, zone:Z;
    /// comma-separated terms all match): its nodes removed at once, its offerings
    /// unavailable, and where their pods go, at what $/h, and what stays Pending and why.
    #[arg(
        long,
        value_name = "SELECTOR",
        requires = "disrupt",
        conflicts_with_all = ["at", "node_class_changes", "node_pool_changes", "spec_change"]
    )]
    reclaim: Option<String>,
    /// With --disrupt: read the state from the cluster (list only, nothing written): NodePools,
    /// EC2NodeClasses, NodeClaims, Nodes, Pods, DaemonSets, PodDisruptionBudgets. -f files are
    /// added to it (e.g. NodePools to try instead).
    #[arg(long, requires = "disrupt")]
    from_cluster: bool,
    /// With --disrupt: an EC2NodeClass as it would be (not applied yet): the nodes it drifts
    /// (static fields, AMI) are marked Drifted now and replaced as Karpenter would. Repeatable.
    #[arg(long = "nodeclass", value_name = "FILE", requires = "disrupt")]
    node_class_changes: Vec<String>,
    /// With --disrupt: a NodePool as it would be (static fields, requirements). Repeatable.
    #[arg(long = "nodepool", value_name = "FILE", requires = "disrupt")]
    node_pool_changes: Vec<String>,
    /// With --disrupt: a new version of the spec; its rendered NodePools and EC2NodeClasses
    /// are the change.
    #[arg(long = "spec", value_name = "NEW_SPEC", requires = "disrupt")]
    spec_change: Option<String>,
    /// With --from-cluster: the kubeconfig (default: $KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    kubeconfig: Option<std::path::PathBuf>,
    /// With --from-cluster: the kubeconfig context (default: the current one).
    #[arg(long, value_name = "CONTEXT", requires = "from_cluster")]
    context: Option<String>,
    /// Karpenter's --preference-policy=Ignore: preferred affinities and ScheduleAnyway
    /// spreads are dropped instead of tried first.
    #[arg(long)]
    ignore_preferences: bool,
    /// Karpenter's settings.minValuesPolicy (Strict, BestEffort). Default: what the pools'
    /// bundle says (its karpenter/values.yaml, or the spec's), else Strict.
    #[arg(long, value_name = "POLICY", value_parser = ["Strict", "BestEffort"])]
    min_values_policy: Option<String>,
    /// Karpenter's SCHEDULER_CONFIG (a file of YAML: podTopologySpread.defaultConstraints):
    /// pods without topology spread constraints of their own get these, with the selector
    /// deduced from their Services and ReplicaSet/StatefulSet. Default: what the pools'
    /// bundle says, else none.
    #[arg(long, value_name = "FILE")]
    scheduler_config: Option<String>,
    /// Also write the plan as one self-contained HTML page (no network): NodeClaims drawn to
    /// scale with their pods, Pending pods by reason, $/h per NodePool; click a pod for its
    /// --explain text (the first 200 pods, Pending ones first).
    #[arg(long, value_name = "FILE", conflicts_with = "explain")]
    html: Option<PathBuf>,
}

/// Pods whose `--explain` text the HTML page carries (each is one more simulation run).
const HTML_EXPLAINED: usize = 200;

pub fn run(args: PlanArgs) -> Result<ExitCode, Failure> {
    if args.disrupt {
        return disrupt::run(&args);
    }
    let mut pool_files = Vec::new();
    for p in &args.pools {
        for f in read_inputs(p)? {
            pool_files.extend(expand_spec(f)?);
        }
    }
    let mut workload_files = Vec::new();
    for p in &args.workloads {
        workload_files.extend(read_inputs(p)?.into_iter().map(as_source));
    }
    let mut node_files = Vec::new();
    for p in &args.nodes {
        node_files.extend(read_inputs(p)?.into_iter().map(as_source));
    }
    let mut reservation_files = Vec::new();
    for p in &args.capacity_reservations {
        reservation_files.extend(read_inputs(p)?.into_iter().map(as_source));
    }
    let settings = karpenter_settings(&args, &pool_files)?;
    let opts = LoadOptions {
        scale: args.scale.clone(),
        zones: args.zones.clone(),
        spot_fraction: args.spot_fraction,
        reservations: reservation_files,
        options: kk_sim::Options {
            ignore_preferences: args.ignore_preferences,
            min_values_policy: settings.min_values_policy.unwrap_or_default(),
            ..kk_sim::Options::default()
        },
        default_spread: settings.default_spread.unwrap_or_default(),
        owners: Vec::new(),
    };
    let input = kk_sim::load(&pool_files, &workload_files, &node_files, &opts)
        .map_err(|errors| sources::problems(&errors, "in the inputs; nothing planned"))?;
    if input.pools.is_empty() {
        return Err(Failure::msg(format!(
            "no NodePool in {}; pass the spec or the NodePool manifests with -f",
            args.pools.join(", ")
        )));
    }
    let mut out = std::io::stdout().lock();
    if let Some(pod) = &args.explain {
        let e = kk_sim::explain(&input, pod).map_err(Failure::from)?;
        if args.output == crate::flags::OutputFormat::Json {
            writeln!(out, "{}", serde_json::to_string_pretty(&e)?)?;
        } else if args.output == crate::flags::OutputFormat::Yaml {
            out.write_all(kk_model::yaml::to_yaml(&e)?.as_bytes())?;
        } else {
            out.write_all(e.render().as_bytes())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let plan = kk_sim::solve(&input);
    if let Some(path) = &args.html {
        write_html(path, &plan, &input)?;
    }
    if args.output == crate::flags::OutputFormat::Json {
        let mut buffered = std::io::BufWriter::new(&mut out);
        plan.write_json(&mut buffered)?;
        buffered.flush()?;
    } else if args.output == crate::flags::OutputFormat::Yaml {
        out.write_all(kk_model::yaml::to_yaml(&plan)?.as_bytes())?;
    } else {
        out.write_all(plan.render_table().as_bytes())?;
    }
    Ok(if plan.pending.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The files of one PATH argument (see [`sources`]), as the planner reads them.
fn read_inputs(arg: &str) -> Result<Vec<sources::NamedSource>, Failure> {
    Ok(sources::read_arg(arg)?.sources)
}

/// The report page, with the `--explain` text of the first pods.
fn write_html(path: &Path, plan: &kk_sim::Plan, input: &kk_sim::Input) -> Result<(), Failure> {
    let keys = plan
        .pending
        .iter()
        .map(|p| &p.pod)
        .chain(plan.node_claims.iter().flat_map(|c| &c.pods))
        .chain(plan.existing_nodes.iter().flat_map(|e| &e.pods));
    let mut explanations = std::collections::BTreeMap::new();
    for key in keys.take(HTML_EXPLAINED) {
        let e = kk_sim::explain(input, key).map_err(Failure::from)?;
        explanations.insert(key.clone(), e.render());
    }
    let page = crate::report::html(plan, input, &explanations);
    crate::files::write_report(path, &page)
}

fn as_source(s: sources::NamedSource) -> SourceFile {
    SourceFile::new(s.name, s.text)
}

/// An ElasticCluster spec becomes its rendered bundle's YAML files (`<spec>#<bundle path>`).
/// Karpenter's scheduling settings for the plan: the flags, else the Karpenter values among
/// the pool files (a rendered bundle's `karpenter/values.yaml`, or the spec's, rendered).
fn karpenter_settings(
    args: &PlanArgs,
    pool_files: &[SourceFile],
) -> Result<kk_sim::input::settings::KarpenterSettings, Failure> {
    let mut settings = kk_sim::input::settings::KarpenterSettings::default();
    if let Some(values) = pool_files
        .iter()
        .find(|f| f.name.ends_with("karpenter/values.yaml"))
    {
        let docs = kk_model::yaml::load_documents_unlocated(
            &values.text,
            kk_model::yaml::LoadLimits::default(),
        )
        .map_err(|e| Failure::msg(format!("{}: {}", values.name, e.message)))?;
        if let Some(doc) = docs.first() {
            settings = kk_sim::input::settings::from_values(&doc.value)
                .map_err(|e| Failure::msg(format!("{}: {e}", values.name)))?;
        }
    }
    if let Some(policy) = &args.min_values_policy {
        settings.min_values_policy = kk_sim::MinValuesPolicy::parse(policy);
    }
    if let Some(path) = &args.scheduler_config {
        let text = sources::read_text(std::path::Path::new(path), path)?;
        settings.default_spread = Some(
            kk_sim::input::settings::scheduler_config(&text)
                .map_err(|e| Failure::msg(format!("--scheduler-config {path}: {e}")))?,
        );
    }
    Ok(settings)
}

fn expand_spec(input: sources::NamedSource) -> Result<Vec<SourceFile>, Failure> {
    if input.spec.is_none() {
        return Ok(vec![as_source(input)]);
    }
    Ok(sources::rendered_yaml(&input)?
        .into_iter()
        .map(|(name, text)| SourceFile::new(name, text))
        .collect())
}
