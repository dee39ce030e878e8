//! `kubean-karpenter plan --disrupt`: reads a cluster's state (NodePools, EC2NodeClasses,
//! Nodes, NodeClaims, Pods, DaemonSets, PodDisruptionBudgets — any kind from any of the `-f`,
//! `-w` or `--nodes` inputs, `kubectl get … -o yaml` dumps included) and prints what Karpenter's
//! disruption controller would do to it (kk-sim's `disrupt` module).
//!
//! `--from-cluster` lists the same kinds through a kubeconfig (read-only, kk-live's
//! `cluster_state`).
//!
//! `--nodeclass FILE`, `--nodepool FILE` and `--spec NEW` are a change not applied yet: the
//! nodes it would drift are marked Drifted at the simulated instant (kk-sim's `disrupt::drift`)
//! before the simulation runs. `--reclaim SELECTOR` asks instead what a reclaim of that capacity
//! does (kk-sim's `disrupt::reclaim`).
//!
//! Exit codes: 0 done (whether or not anything is disrupted), 1 pods of expired (or reclaimed)
//! nodes would stay Pending, 2 usage or input error.

use std::io::Write;
use std::process::ExitCode;

use kk_sim::disrupt::{self, clock};
use kk_sim::{LoadOptions, SourceFile};

use super::{PlanArgs, as_source, expand_spec, read_inputs};
use crate::Failure;

pub(super) fn run(args: &PlanArgs) -> Result<ExitCode, Failure> {
    if !args.scale.is_empty() {
        return Err(Failure::msg(
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
    let settings = super::karpenter_settings(args, &files)?;
    let opts = LoadOptions {
        scale: Vec::new(),
        zones: args.zones.clone(),
        spot_fraction: args.spot_fraction,
        reservations: Vec::new(),
        options: kk_sim::Options {
            ignore_preferences: args.ignore_preferences,
            min_values_policy: settings.min_values_policy.unwrap_or_default(),
            ..kk_sim::Options::default()
        },
        default_spread: settings.default_spread.unwrap_or_default(),
        owners: Vec::new(),
    };
    let mut state = disrupt::load(&files, &opts, None)
        .map_err(|errors| crate::sources::problems(&errors, "in the inputs; nothing simulated"))?;
    if state.input.pools.is_empty() {
        return Err(Failure::msg(
            "no NodePool in the inputs; pass the NodePools (or the spec) with -f".into(),
        ));
    }
    let base = match &args.now {
        Some(t) => clock::parse_time(t).map_err(|e| Failure::msg(format!("--now: {e}")))?,
        None => state.latest.ok_or_else(|| {
            Failure::msg(
                "no timestamp in the inputs to start the clock from; pass --now 2026-01-01T00:00:00Z"
                    .into(),
            )
        })?,
    };
    let at = match &args.at {
        Some(d) => clock::parse_duration(d).map_err(|e| Failure::msg(format!("--at: {e}")))?,
        None => 0,
    };
    if at < 0 {
        return Err(Failure::msg("--at: time only moves forward".into()));
    }
    let reclaim = args
        .reclaim
        .as_deref()
        .map(disrupt::Selector::parse)
        .transpose()
        .map_err(|e| Failure::msg(format!("--reclaim: {e}")))?;
    let change = read_change(args, &opts, &state)?;
    let drift = change.map(|c| disrupt::drift::apply(&mut state, &c, base + at));
    let budget = match &args.budget_time {
        Some(d) => match clock::parse_duration(d) {
            Ok(s) if s > 0 => Some(s as f64),
            Ok(_) => return Err(Failure::msg("--budget-time: must be more than 0s".into())),
            Err(e) => return Err(Failure::msg(format!("--budget-time: {e}"))),
        },
        None => None,
    };
    let options = disrupt::Options {
        now: base + at,
        spot_to_spot: args.spot_to_spot,
        explain: args.explain.clone(),
        max_rounds: 100_000,
        first_pass_candidates: false,
        watch: Some(watch(budget)),
        reclaim,
        reboot_for_repair: args.reboot_for_repair,
    };
    let mut report = disrupt::run(&state, &options).map_err(Failure::from)?;
    report.drift = drift;
    let mut out = std::io::stdout().lock();
    match args.output {
        crate::flags::OutputFormat::Json => out.write_all(report.to_json().as_bytes())?,
        crate::flags::OutputFormat::Yaml => {
            out.write_all(kk_model::yaml::to_yaml(&report)?.as_bytes())?
        }
        crate::flags::OutputFormat::Text => match &args.explain {
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

/// The CLI's clock for `--budget-time`, and progress on stderr (at most once a second, so a
/// run under a second prints none).
fn watch(budget_seconds: Option<f64>) -> disrupt::Watch {
    let start = std::time::Instant::now();
    disrupt::Watch {
        clock: std::sync::Arc::new(move || start.elapsed().as_secs_f64()),
        budget_seconds,
        progress: Some(std::sync::Arc::new(|line: &str| {
            eprintln!("plan --disrupt: {line}");
        })),
    }
}

/// The change of `--nodeclass`, `--nodepool` and `--spec`, read like a state; `None` without
/// one. Each file must hold the kind its flag names.
fn read_change(
    args: &PlanArgs,
    opts: &LoadOptions,
    state: &disrupt::ClusterState,
) -> Result<Option<disrupt::ClusterState>, Failure> {
    let mut files = Vec::new();
    let flagged = args
        .node_class_changes
        .iter()
        .map(|p| ("--nodeclass", "EC2NodeClass", p))
        .chain(
            args.node_pool_changes
                .iter()
                .map(|p| ("--nodepool", "NodePool", p)),
        );
    for (flag, kind, path) in flagged {
        let mut found = false;
        for f in read_inputs(path)? {
            let f = as_source(f);
            found |= holds_kind(&f.text, kind);
            files.push(f);
        }
        if !found {
            return Err(Failure::msg(format!("{flag} {path}: no {kind} in it")));
        }
    }
    if let Some(spec) = &args.spec_change {
        for f in read_inputs(spec)? {
            if f.spec.is_none() {
                return Err(Failure::msg(format!(
                    "--spec {spec}: not an ElasticCluster spec (pass manifests with --nodeclass or --nodepool)"
                )));
            }
            files.extend(expand_spec(f)?);
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    let change = disrupt::load(&files, opts, Some(state.input.catalog.clone()))
        .map_err(|errors| crate::sources::problems(&errors, "in the change; nothing simulated"))?;
    Ok(Some(change))
}

/// Whether a manifest file holds an object of `kind` (a `List` of them included).
fn holds_kind(text: &str, kind: &str) -> bool {
    let Ok(docs) = kk_model::yaml::load_documents(text, kk_model::yaml::LoadLimits::default())
    else {
        return true; // the change's reader reports the file's error with its position
    };
    docs.iter().any(|d| {
        let v = &d.value;
        v.get("kind").and_then(|k| k.as_str()) == Some(kind)
            || v.get("items")
                .and_then(|i| i.as_array())
                .is_some_and(|items| {
                    items
                        .iter()
                        .any(|x| x.get("kind").and_then(|k| k.as_str()) == Some(kind))
                })
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
            .map_err(Failure::from)?;
        kk_live::cluster_state::read_state(&client)
            .await
            .map_err(|e| Failure::context("reading the cluster's state", e))
    })?;
    Ok(listed
        .into_iter()
        .map(|(name, text)| SourceFile::new(name, text))
        .collect())
}
