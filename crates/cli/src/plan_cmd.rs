//! `kubean-karpenter plan`: the file-system side of kk-sim. Reads NodePools (a spec is
//! rendered in memory), workloads and existing nodes, runs Karpenter's scheduler simulation and
//! prints the NodeClaims it would create and the pods it would leave Pending.
//!
//! Exit codes: 0 every pod placed, 1 some pods Pending, 2 usage or input error.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kk_model::yaml::{LoadLimits, load_documents};
use kk_sim::{LoadOptions, SourceFile};

use crate::{Failure, files, load_text};

#[path = "plan_disrupt_cmd.rs"]
mod disrupt;

/// Largest input file read.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

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
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = ["table", "json", "yaml"])]
    output: String,
    /// Explain one pod (namespace/name, e.g. inference/vllm-7): where it went, or every
    /// candidate's reason for refusing it. With --disrupt: one node's story.
    #[arg(long, value_name = "NAMESPACE/POD|NODE")]
    explain: Option<String>,
    /// What Karpenter's disruption controller would do to a running cluster: -f/-w/--nodes
    /// then take its state (NodePools, Nodes, NodeClaims, Pods, DaemonSets,
    /// PodDisruptionBudgets; e.g. a `kubectl get ... -o yaml` dump). See docs/plan.md.
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
    /// With --disrupt: read the state from the cluster (list only, nothing written): NodePools,
    /// EC2NodeClasses, NodeClaims, Nodes, Pods, DaemonSets, PodDisruptionBudgets. -f files are
    /// added to it (e.g. NodePools to try instead).
    #[arg(long, requires = "disrupt")]
    from_cluster: bool,
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
}

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
        workload_files.extend(read_inputs(p)?);
    }
    let mut node_files = Vec::new();
    for p in &args.nodes {
        node_files.extend(read_inputs(p)?);
    }
    let opts = LoadOptions {
        scale: args.scale.clone(),
        zones: args.zones.clone(),
        spot_fraction: args.spot_fraction,
        options: kk_sim::Options {
            ignore_preferences: args.ignore_preferences,
            ..kk_sim::Options::default()
        },
    };
    let input =
        kk_sim::load(&pool_files, &workload_files, &node_files, &opts).map_err(|errors| {
            let count = errors.len();
            let mut message = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\nerror: ");
            message.push_str(&format!(
                "\n{count} problem{} in the inputs; nothing planned",
                if count == 1 { "" } else { "s" }
            ));
            Failure(message)
        })?;
    if input.pools.is_empty() {
        return Err(Failure(format!(
            "no NodePool in {}; pass the spec or the NodePool manifests with -f",
            args.pools.join(", ")
        )));
    }
    let mut out = std::io::stdout().lock();
    if let Some(pod) = &args.explain {
        let e = kk_sim::explain(&input, pod).map_err(Failure)?;
        if args.output == "json" {
            writeln!(out, "{}", serde_json::to_string_pretty(&e)?)?;
        } else if args.output == "yaml" {
            out.write_all(kk_model::yaml::to_yaml(&e)?.as_bytes())?;
        } else {
            out.write_all(e.render().as_bytes())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let plan = kk_sim::solve(&input);
    if args.output == "json" {
        out.write_all(plan.to_json().as_bytes())?;
    } else if args.output == "yaml" {
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

/// A file, every *.yaml / *.yml below a directory (sorted), or standard input.
fn read_inputs(arg: &str) -> Result<Vec<SourceFile>, Failure> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| Failure(format!("<stdin>: {e}")))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(Failure(format!("<stdin>: over {MAX_FILE_BYTES} bytes")));
        }
        return Ok(vec![SourceFile::new("<stdin>", text)]);
    }
    let path = Path::new(arg);
    let mut paths = Vec::new();
    if path.is_dir() {
        collect(path, &mut paths, 0)?;
        paths.sort();
    } else {
        paths.push(path.to_path_buf());
    }
    paths
        .into_iter()
        .map(|p| {
            let name = p.display().to_string();
            let meta = std::fs::metadata(&p).map_err(|e| Failure(format!("{name}: {e}")))?;
            if meta.len() > MAX_FILE_BYTES {
                return Err(Failure(format!("{name}: over {MAX_FILE_BYTES} bytes")));
            }
            let bytes = std::fs::read(&p).map_err(|e| Failure(format!("{name}: {e}")))?;
            let text =
                String::from_utf8(bytes).map_err(|_| Failure(format!("{name}: not UTF-8 text")))?;
            Ok(SourceFile::new(name, text))
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), Failure> {
    if depth > 16 {
        return Err(Failure(format!(
            "{}: directories nested too deep",
            dir.display()
        )));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
        let p = entry.path();
        if p.is_dir() {
            collect(&p, out, depth + 1)?;
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
    Ok(())
}

/// An ElasticCluster spec becomes its rendered bundle's YAML files (`<spec>#<bundle path>`).
fn expand_spec(input: SourceFile) -> Result<Vec<SourceFile>, Failure> {
    let is_spec = input.text.contains("ElasticCluster")
        && load_documents(&input.text, LoadLimits::default()).is_ok_and(|docs| {
            docs.iter()
                .any(|d| d.value.get("kind").and_then(|k| k.as_str()) == Some("ElasticCluster"))
        });
    if !is_spec {
        return Ok(vec![input]);
    }
    let loaded = load_text(&input.text, &input.name)?;
    let base_dir = Path::new(&input.name)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bundle = files::render_spec(&loaded, &base_dir)?;
    Ok(bundle
        .files
        .iter()
        .filter(|(path, _)| path.ends_with(".yaml") || path.ends_with(".yml"))
        .map(|(path, text)| SourceFile::new(format!("{}#{path}", input.name), text.clone()))
        .collect())
}
