//! `kubean-karpenter plan --disrupt`: reads a cluster's state (NodePools, EC2NodeClasses,
//! Nodes, NodeClaims, Pods, DaemonSets, PodDisruptionBudgets — any kind from any of the `-f`,
//! `-w` or `--nodes` inputs, `kubectl get … -o yaml` dumps included) and prints what Karpenter's
//! disruption controller would do to it (kk-sim's `disrupt` module).
//!
//! `--from-cluster` lists the same kinds through a kubeconfig (read-only, kk-live's
//! `cluster_state`).
//!
//! Exit codes: 0 done (whether or not anything is disrupted), 1 pods of expired nodes would stay
//! Pending, 2 usage or input error.

use std::io::Write;
use std::process::ExitCode;

use kk_sim::disrupt::{self, clock};
use kk_sim::{LoadOptions, SourceFile};

use super::{PlanArgs, expand_spec, read_inputs};
use crate::Failure;

pub(super) fn run(args: &PlanArgs) -> Result<ExitCode, Failure> {
    if !args.scale.is_empty() {
        return Err(Failure(
            "--scale does not apply to --disrupt: the state's pods are what runs".into(),
        ));
    }
    let mut files = Vec::new();
    if args.from_cluster {
        files.extend(from_cluster(args)?);
    }
    for p in args.pools.iter().chain(&args.workloads).chain(&args.nodes) {
        for f in read_inputs(p)? {
            files.extend(expand_spec(f)?);
        }
    }
    let opts = LoadOptions {
        scale: Vec::new(),
        zones: args.zones.clone(),
        spot_fraction: args.spot_fraction,
        options: kk_sim::Options {
            ignore_preferences: args.ignore_preferences,
            ..kk_sim::Options::default()
        },
    };
    let state = disrupt::load(&files, &opts, None)
        .map_err(|errors| crate::sources::problems(&errors, "in the inputs; nothing simulated"))?;
    if state.input.pools.is_empty() {
        return Err(Failure(
            "no NodePool in the inputs; pass the NodePools (or the spec) with -f".into(),
        ));
    }
    let base = match &args.now {
        Some(t) => clock::parse_time(t).map_err(|e| Failure(format!("--now: {e}")))?,
        None => state.latest.ok_or_else(|| {
            Failure(
                "no timestamp in the inputs to start the clock from; pass --now 2026-01-01T00:00:00Z"
                    .into(),
            )
        })?,
    };
    let at = match &args.at {
        Some(d) => clock::parse_duration(d).map_err(|e| Failure(format!("--at: {e}")))?,
        None => 0,
    };
    if at < 0 {
        return Err(Failure("--at: time only moves forward".into()));
    }
    let options = disrupt::Options {
        now: base + at,
        spot_to_spot: args.spot_to_spot,
        explain: args.explain.clone(),
        max_rounds: 100_000,
        first_pass_candidates: false,
    };
    let report = disrupt::run(&state, &options).map_err(|e| Failure(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    match args.output.as_str() {
        "json" => out.write_all(report.to_json().as_bytes())?,
        "yaml" => out.write_all(kk_model::yaml::to_yaml(&report)?.as_bytes())?,
        _ => match &args.explain {
            Some(node) => out.write_all(report.render_explain(node).as_bytes())?,
            None => out.write_all(report.render_table().as_bytes())?,
        },
    }
    Ok(if report.pending.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The cluster's state, listed (read-only) through the kubeconfig.
fn from_cluster(args: &PlanArgs) -> Result<Vec<SourceFile>, Failure> {
    let options = kk_live::client::ClientOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listed = runtime.block_on(async {
        let client = kk_live::client::make_client(&options)
            .await
            .map_err(|e| Failure(e.to_string()))?;
        kk_live::cluster_state::read_state(&client)
            .await
            .map_err(|e| Failure(format!("reading the cluster's state: {e}")))
    })?;
    Ok(listed
        .into_iter()
        .map(|(name, text)| SourceFile::new(name, text))
        .collect())
}
