//! `upgrade plan SPEC --to 1.36.x`: the ordered steps of a Kubernetes upgrade, read-only
//! (kk_render::upgrade); exit 2 with the fix when the order or target breaks the skew policy or
//! the pinned Kubean release. `--resolve` asks AWS for each pool's AMI at the target minor.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use kk_render::upgrade::{self, Order, ResolvedAmi, UpgradeRequest};

use crate::Failure;

#[derive(clap::Subcommand)]
pub enum UpgradeCommand {
    /// Plan a Kubernetes upgrade: Kubean control plane, then the minor-matched components,
    /// then the worker AMIs pool by pool, each with what it changes, why it is safe, and the
    /// drift it causes (which pools, how many at once, roughly how long).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Plan(PlanArgs),
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The ElasticCluster spec as the cluster runs today.
    spec: String,
    /// Target: `1.36.3`, or `1.36` / `1.36.x` for the newest patch the pinned Kubean installs.
    /// Left out: the next minor (Kubernetes moves one minor at a time), with its support window.
    #[arg(long)]
    to: Option<String>,
    /// Which side moves first; workers-first is refused when it would run a kubelet newer than
    /// the API server.
    #[arg(long, value_parser = ["control-plane-first", "workers-first"], default_value = "control-plane-first")]
    order: String,
    /// How many nodes a pool runs now, `POOL=N` (repeatable), for how many at once and how long.
    #[arg(long = "nodes", value_parser = parse_nodes)]
    nodes: Vec<(String, i64)>,
    /// Seconds one replacement takes from launch to a usable node (`verify --pool P` measures
    /// it); the default is the lab's measured CPU pool.
    #[arg(long, default_value_t = upgrade::DEFAULT_REPLACE_SECONDS)]
    replace_seconds: u64,
    /// Ask AWS (SSM public parameters) for the recommended release of each ssmRelease pool at
    /// the target minor.
    #[arg(long)]
    resolve: bool,
    /// AWS region for --resolve (default: the spec's).
    #[arg(long)]
    region: Option<String>,
    /// Output: text, json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
    /// Also write the plan as one self-contained HTML page (no network): the steps as cards,
    /// each AMI step's drift as a timeline of replacement waves per pool.
    #[arg(long, value_name = "FILE")]
    html: Option<std::path::PathBuf>,
}

/// Without `--to`: the minor after the control plane's (one at a time, as kubeadm upgrades), said
/// on stderr with where it stands today (`kubernetes_support.txt`).
fn next_minor(version: &str, file: &str) -> Result<String, Failure> {
    use kk_spec::kubernetes_support::{self, Standing};
    let minor = kk_spec::images::kubernetes_minor(version).ok_or_else(|| {
        Failure::msg(format!(
            "{file}: spec.kubernetesVersion {version:?} is not a version like 1.35.5: pass --to"
        ))
    })?;
    let next = minor + 1;
    let today = kubernetes_support::today();
    let standing = match kubernetes_support::standing(next, &today) {
        Standing::Supported { maintenance } => {
            format!("supported until its maintenance mode from {maintenance}")
        }
        Standing::Maintenance { end_of_life } => format!(
            "in maintenance mode until {end_of_life}: plan 1.{} right after it",
            next + 1
        ),
        Standing::EndOfLife { since } => format!(
            "past its end of life since {since}: go on to 1.{} right after it",
            next + 1
        ),
        Standing::Unknown => "its support window is not in the table".to_owned(),
    };
    eprintln!(
        "upgrade plan: no --to: planning 1.{next}, the next minor (Kubernetes upgrades one minor at a time); 1.{next} is {standing}"
    );
    Ok(format!("1.{next}"))
}

fn parse_nodes(text: &str) -> Result<(String, i64), String> {
    let (pool, n) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected POOL=N"))?;
    let n: i64 = n
        .parse()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("{text:?}: N is a node count"))?;
    Ok((pool.to_owned(), n))
}

pub fn run(command: UpgradeCommand) -> Result<ExitCode, Failure> {
    let UpgradeCommand::Plan(args) = command;
    let (loaded, _) = crate::load_spec(&args.spec)?;
    let spec = &loaded.spec;
    for (pool, _) in &args.nodes {
        if !spec.spec.pools.iter().any(|p| &p.name == pool) {
            return Err(Failure::msg(format!(
                "--nodes {pool}=…: no pool named {pool:?} in {}",
                loaded.file
            )));
        }
    }
    let to = match &args.to {
        Some(to) => to.clone(),
        None => next_minor(&spec.spec.kubernetes_version, &loaded.file)?,
    };
    let mut request = UpgradeRequest {
        to,
        order: if args.order == "workers-first" {
            Order::WorkersFirst
        } else {
            Order::ControlPlaneFirst
        },
        resolved: BTreeMap::new(),
        nodes: args.nodes.iter().cloned().collect(),
        replace_seconds: args.replace_seconds,
    };
    let failure = |refusals: Vec<upgrade::UpgradeRefused>| {
        let errors: Vec<kk_model::LocatedError> = refusals
            .iter()
            .map(|r| {
                let path = kk_model::FieldPath::parse(&r.field);
                let pos = r
                    .field
                    .starts_with("spec")
                    .then(|| loaded.document.pos(&path));
                kk_model::LocatedError::new(
                    &loaded.file,
                    pos,
                    format!("upgrade refused: {}", r.message),
                )
                .at_field(r.field.clone())
            })
            .collect();
        crate::sources::problems(&errors, &format!("in {}; nothing planned", loaded.file))
    };
    // A first pass checks the target before asking AWS anything.
    let plan = upgrade::plan(spec, &request).map_err(failure)?;
    if args.resolve {
        let minor = kk_karpenter::ami::kubernetes_minor(&plan.to).to_owned();
        let region = args
            .region
            .clone()
            .unwrap_or_else(|| spec.spec.aws.region.clone());
        let rt = crate::ami_cmd::runtime()?;
        let sdk = rt.block_on(kk_live::store::aws_config(Some(region), None))?;
        for pool in spec
            .spec
            .pools
            .iter()
            .filter(|p| p.ami.ssm_release.is_some())
        {
            let flavor = crate::ami_cmd::pool_flavor(&minor, Some(pool));
            let release = rt.block_on(kk_live::ami::resolve(&sdk, &flavor, None))?;
            request.resolved.insert(
                pool.name.clone(),
                ResolvedAmi {
                    date: release.date.clone(),
                    image_id: release.image_id.clone(),
                    release_version: release.release_version.clone(),
                },
            );
        }
    }
    let plan = upgrade::plan(spec, &request).map_err(failure)?;
    if let Some(path) = &args.html {
        crate::files::write_report(path, &crate::report::upgrade::html(&plan))?;
    }
    if args.output.is_structured() {
        crate::flags::print_structured(&plan.to_json(), args.output)?;
    } else {
        std::io::stdout().write_all(upgrade::to_text(&plan).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
