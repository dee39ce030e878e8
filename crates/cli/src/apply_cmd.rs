//! `apply`: ordered server-side apply of a spec's bundle, a rendered bundle directory or
//! manifest files, after a server-side dry run of every object. This file reads the inputs
//! and flags and prints; the workflow is `kk_live::apply::workflow`.

use kk_live::apply::workflow::{self, Objects, Request};
use kk_live::{ApplyOptions, ClientOptions};
use kk_model::yaml::{LoadLimits, load_documents};
use kk_render::Bundle;
use serde_json::Value;

use crate::Failure;
use crate::flags::spec_access;

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// ElasticCluster spec (rendered in memory), bundle directory (applied in ORDER.md's
    /// order), manifest file or directory, or - for standard input.
    #[arg(required = true)]
    paths: Vec<String>,
    /// `server`: the apiserver validates everything (schemas, CEL rules, admission) and
    /// persists nothing. `none`: apply for real.
    #[arg(long, value_parser = ["none", "server"], default_value = "none")]
    dry_run: String,
    /// Kubeconfig of the new cluster, where everything but kubean/ goes (default: the spec's
    /// `access`, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context of the new cluster (default: the spec's `access.context`, then the
    /// current context).
    #[arg(long)]
    context: Option<String>,
    /// Where Kubean runs and kubean/ goes. kubean/ objects are refused unless these or the
    /// spec's `kubean.managementCluster` say where.
    #[command(flatten)]
    mgmt: crate::flags::MgmtFlags,
    #[arg(long, default_value = "kubean-karpenter")]
    field_manager: String,
    /// Take over fields another field manager owns.
    #[arg(long)]
    force_conflicts: bool,
    /// With a spec: skip the AWS side (node role, trust, instance profile, policies, discovery
    /// and cluster tags, the API port rule, the interruption queue and its EventBridge rules),
    /// which otherwise runs first, through the standard AWS credential chain.
    #[arg(long)]
    skip_aws: bool,
    /// With a spec: skip the Helm releases (EBS CSI driver, Karpenter), which otherwise run
    /// through the `helm` CLI after the namespaces.
    #[arg(long)]
    skip_helm: bool,
    /// The Karpenter controller's IAM role: the controller policy is attached to it.
    #[arg(long)]
    controller_role: Option<String>,
    /// The rotator's IAM role: the rotator policy is attached to it.
    #[arg(long)]
    rotator_role: Option<String>,
    /// Show what would change (each object's server-side dry run against the live object, and
    /// the AWS calls) and change nothing.
    #[arg(long)]
    diff: bool,
    /// After applying, delete objects of the applied kinds that carry our label
    /// (app.kubernetes.io/managed-by=kubean-karpenter) and that the bundle no longer has; with a
    /// spec, also the interruption queue and rules tagged for this cluster that it dropped.
    #[arg(long)]
    prune: bool,
    /// With --prune: also delete NodePools the bundle no longer has. Deleting a NodePool
    /// terminates every node it launched, so it is never done without this flag.
    #[arg(long)]
    prune_nodepools: bool,
    /// How long a controller of ours that moves namespace (the rotator and the CSR approver
    /// left Karpenter's namespace for their own) may take to have an available pod in its new
    /// namespace; until then the old one keeps running, and after it apply stops there.
    #[arg(long, default_value = "5m", value_parser = kk_live::token::parse_duration)]
    handover_timeout: std::time::Duration,
    /// Output: text, or json / yaml (one object per applied manifest).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

fn read_manifests(text: &str, source: &str, out: &mut Objects) -> Result<(), Failure> {
    let docs = load_documents(text, LoadLimits::default())
        .map_err(|e| Failure::msg(format!("{source}:{e}")))?;
    out.extend(docs.into_iter().map(|d| (source.to_owned(), d.value)));
    Ok(())
}

/// What the inputs say: each object routed to its cluster, the spec's bundle, and how the
/// spec says to reach each cluster.
#[derive(Default)]
struct Collected {
    request: Request,
    management_access: Option<ClientOptions>,
    cluster_access: Option<ClientOptions>,
}

/// Everything to apply, in order.
fn collect(paths: &[String]) -> Result<Collected, Failure> {
    let mut collected = Collected::default();
    let mut plain = Vec::new();
    for arg in paths {
        let read = crate::sources::read_arg(arg)?;
        if read.bundle {
            // A rendered bundle: its own apply order, Helm values left out.
            let files = read.sources.into_iter().map(|s| (s.rel, s.text));
            let bundle = Bundle::from_files(files.collect())
                .map_err(|e| Failure::msg(format!("{arg}/{e}")))?;
            for (rel, value) in bundle.manifests() {
                collected.request.push(format!("{arg}/{rel}"), &rel, value);
            }
            continue;
        }
        for source in read.sources {
            let Some(loaded) = &source.spec else {
                read_manifests(&source.text, &source.name, &mut plain)?;
                continue;
            };
            let base = &source.base_dir;
            let bundle = crate::files::render_spec(loaded, base)?;
            for (rel, value) in bundle.manifests() {
                collected
                    .request
                    .push(format!("{}#{rel}", source.name), &rel, value);
            }
            collected.request.spec = Some((loaded.spec.clone(), bundle));
            let spec = &loaded.spec.spec;
            collected.management_access = collected
                .management_access
                .or(spec_access(spec.kubean.management_cluster.as_ref(), base));
            collected.cluster_access = collected
                .cluster_access
                .or(spec_access(spec.access.as_ref(), base));
        }
    }
    // Plain manifests go to the new cluster.
    collected.request.cluster.extend(plain);
    Ok(collected)
}

pub fn run(args: ApplyArgs) -> Result<std::process::ExitCode, Failure> {
    let Collected {
        mut request,
        management_access,
        cluster_access,
    } = collect(&args.paths)?;
    // The new cluster: flags, then the spec's access, then the default kubeconfig.
    request.cluster_access = if args.kubeconfig.is_some() || args.context.is_some() {
        ClientOptions {
            kubeconfig: args.kubeconfig.clone(),
            context: args.context.clone(),
        }
    } else {
        cluster_access.unwrap_or_default()
    };
    // The management cluster is never guessed: kubean/ must not land in the cluster it builds.
    request.management_access = args
        .mgmt
        .given(request.cluster_access.kubeconfig.as_deref())
        .or(management_access);
    request.options = ApplyOptions {
        dry_run: args.dry_run == "server",
        field_manager: args.field_manager.clone(),
        force_conflicts: args.force_conflicts,
        ..Default::default()
    };
    request.aws = !args.skip_aws;
    request.helm = !args.skip_helm;
    request.diff = args.diff;
    request.prune = args.prune;
    request.prune_nodepools = args.prune_nodepools;
    request.controller_role = args.controller_role.clone();
    request.rotator_role = args.rotator_role.clone();
    request.handover_timeout = Some(args.handover_timeout);
    let verb = if request.options.dry_run {
        "accepted (server dry run)"
    } else {
        "applied"
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut progress = |line: String| eprintln!("{line}");
    let outcome = runtime.block_on(workflow::run(request, &mut progress))?;
    if args.diff {
        let mut changed = 0;
        for (object, changes) in &outcome.diffs {
            if changes.is_empty() {
                println!("{object}: unchanged");
            } else {
                changed += 1;
                println!("{object}:");
                for c in changes {
                    println!("  {c}");
                }
            }
        }
        eprintln!("{changed} object(s) would change");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    for u in &outcome.unchecked {
        eprintln!(
            "{u}: not checked: its namespace is created by this apply (a dry run creates nothing)"
        );
    }
    if args.output.is_structured() {
        let list: Vec<Value> = outcome
            .applied
            .iter()
            .map(|a| serde_json::json!({"source": a.source, "kind": a.kind, "name": a.name, "namespace": a.namespace, "resourceVersion": a.resource_version, "result": verb}))
            .collect();
        crate::flags::print_structured(&Value::Array(list), args.output)?;
    } else {
        for a in &outcome.applied {
            let ns = a
                .namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            println!("{ns}{}/{} {verb}", a.kind, a.name);
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
