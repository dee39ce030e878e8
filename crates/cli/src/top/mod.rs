//! `kubean-karpenter top`: the fleet live — nodes with their pool, type, capacity type, zone,
//! age, $/h and CPU / memory / GPU requested of allocatable; pools with $/h and the use of
//! their limits; NodeClaims in flight (stuck ones with a likely cause); Pending pods by
//! plan's reason. The view model is `kk_sim::fleet`; the cluster is followed by watch streams
//! (`kk_live::fleet_watch`), not polled.
//!
//! `--once`, or a standard output that is not a terminal, prints one snapshot (table, JSON or
//! YAML) and exits 0; errors exit 2. `--state FILE…` reads a dump (`kubectl get … -A -o yaml`)
//! instead of a cluster.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use kk_live::ClientOptions;
use kk_sim::disrupt::{self, state::ClusterState};
use kk_sim::fleet::Fleet;
use kk_sim::{LoadOptions, SourceFile};

use crate::Failure;

pub mod layout;
mod screen;

#[derive(clap::Args)]
pub struct TopArgs {
    /// The ElasticCluster spec: its `access` names the kubeconfig (optional).
    spec: Option<String>,
    /// The new cluster.
    #[command(flatten)]
    kube: crate::flags::KubeFlags,
    /// Show one NodePool only.
    #[arg(long, value_name = "NODEPOOL")]
    pool: Option<String>,
    /// Print one snapshot and exit (also when standard output is not a terminal).
    #[arg(long)]
    once: bool,
    /// Snapshot format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
    /// Read the state from these files (NodePools, EC2NodeClasses, NodeClaims, Nodes, Pods,
    /// DaemonSets; `List`s included) instead of a cluster; implies --once.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    state: Vec<String>,
    /// The clock for ages with --state (RFC 3339; default: the newest time in the files).
    #[arg(long, requires = "state")]
    now: Option<String>,
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The cluster's state read from its documents.
fn load_state(files: &[SourceFile]) -> Result<ClusterState, Failure> {
    disrupt::load(files, &LoadOptions::default(), None)
        .map_err(|errors| crate::sources::problems(&errors, "in the cluster's state"))
}

/// The view of one state: plan its pending pods, build the fleet.
fn fleet_of(state: &ClusterState, now: i64, pool: Option<&str>) -> Fleet {
    let plan = kk_sim::solve(&state.input);
    Fleet::from_cluster(state, &plan, now, pool)
}

/// The view of the state in `files`.
pub fn view(files: &[SourceFile], now: i64, pool: Option<&str>) -> Result<Fleet, Failure> {
    Ok(fleet_of(&load_state(files)?, now, pool))
}

fn sources(listed: Vec<(String, String)>) -> Vec<SourceFile> {
    listed
        .into_iter()
        .map(|(name, text)| SourceFile::new(name, text))
        .collect()
}

fn client_options(args: &TopArgs) -> Result<ClientOptions, Failure> {
    let Some(spec) = args.spec.as_deref() else {
        return Ok(args.kube.options());
    };
    let (loaded, base) = crate::load_spec(spec)?;
    Ok(args.kube.or_spec(loaded.spec.spec.access.as_ref(), &base))
}

fn print_snapshot(fleet: &Fleet, format: crate::flags::OutputFormat) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match format {
        crate::flags::OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(fleet)?;
            text.push('\n');
            out.write_all(text.as_bytes())?;
        }
        crate::flags::OutputFormat::Yaml => {
            out.write_all(kk_model::yaml::to_yaml(fleet)?.as_bytes())?
        }
        crate::flags::OutputFormat::Text => {
            let lines = layout::lines(fleet, layout::MIN_WIDTH, "");
            out.write_all(layout::plain(&lines).as_bytes())?;
        }
    }
    Ok(())
}

pub fn run(args: &TopArgs) -> Result<ExitCode, Failure> {
    if !args.state.is_empty() {
        let mut files = Vec::new();
        for arg in &args.state {
            files.extend(
                crate::sources::read_arg(arg)?
                    .sources
                    .into_iter()
                    .map(|s| SourceFile::new(s.name, s.text)),
            );
        }
        let now = match &args.now {
            Some(t) => Some(
                disrupt::clock::parse_time(t).map_err(|e| Failure::msg(format!("--now: {e}")))?,
            ),
            None => None,
        };
        let state = load_state(&files)?;
        let now = now.or(state.latest).unwrap_or_else(unix_now);
        print_snapshot(&fleet_of(&state, now, args.pool.as_deref()), args.output)?;
        return Ok(ExitCode::SUCCESS);
    }
    let options = client_options(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let once = args.once || !std::io::stdout().is_terminal();
    runtime.block_on(async {
        let client = kk_live::client::make_client(&options)
            .await
            .map_err(Failure::from)?;
        if once {
            let listed = kk_live::cluster_state::read_state(&client)
                .await
                .map_err(|e| Failure::context("reading the cluster's state", e))?;
            let fleet = view(&sources(listed), unix_now(), args.pool.as_deref())?;
            return print_snapshot(&fleet, args.output);
        }
        let watch = kk_live::fleet_watch::FleetWatch::start(client)
            .await
            .map_err(|e| Failure::context("watching the cluster", e))?;
        screen::run(watch, args.pool.clone()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
