//! `apply`: ordered server-side apply of a spec's bundle, a rendered bundle directory or
//! manifest files, after a server-side dry run of every object.

use std::path::Path;

use kk_live::{ApplyError, ApplyOptions, ClientOptions};
use kk_model::yaml::{LoadLimits, load_documents};
use kk_render::Bundle;
use serde_json::Value;

use crate::Failure;

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
    /// Kubeconfig of the management cluster, where Kubean runs and kubean/ goes (default: the
    /// spec's `kubean.managementCluster`, then the new cluster's kubeconfig file).
    #[arg(long)]
    mgmt_kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context of the management cluster. kubean/ objects are refused unless this,
    /// --mgmt-kubeconfig or the spec's `kubean.managementCluster` says where Kubean runs.
    #[arg(long)]
    mgmt_context: Option<String>,
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
    /// Output: text, or json (one object per applied manifest).
    #[arg(short = 'o', long = "output", value_parser = ["text", "json"], default_value = "text")]
    output: String,
}

fn read_manifests(text: &str, source: &str, out: &mut Vec<(String, Value)>) -> Result<(), Failure> {
    let docs = load_documents(text, LoadLimits::default())
        .map_err(|e| Failure(format!("{source}:{e}")))?;
    out.extend(docs.into_iter().map(|d| (source.to_owned(), d.value)));
    Ok(())
}

/// (source, object) pairs in apply order.
type Objects = Vec<(String, Value)>;

/// Objects for each cluster, in order, and what the specs say about reaching the clusters.
#[derive(Default)]
struct Collected {
    /// kubean/ of a bundle or spec: Kubean's management cluster.
    management: Vec<(String, Value)>,
    /// Everything else: the new cluster.
    cluster: Vec<(String, Value)>,
    management_access: Option<ClientOptions>,
    cluster_access: Option<ClientOptions>,
    /// The spec and its bundle, when a spec was given (the AWS and Helm steps need them).
    spec: Option<(kk_spec::ElasticCluster, Bundle)>,
}

impl Collected {
    fn push(&mut self, source: String, rel: &str, value: Value) {
        if rel.starts_with("kubean/") {
            self.management.push((source, value));
        } else {
            self.cluster.push((source, value));
        }
    }
}

fn access_of(access: &Option<kk_spec::ClusterAccess>, base: &Path) -> Option<ClientOptions> {
    access.as_ref().map(|a| ClientOptions {
        kubeconfig: a.kubeconfig.as_ref().map(|k| base.join(k)),
        context: a.context.clone(),
    })
}

/// Everything to apply, in order.
fn collect(paths: &[String]) -> Result<Collected, Failure> {
    let mut collected = Collected::default();
    let mut objects = Vec::new();
    for arg in paths {
        let read = crate::sources::read_arg(arg)?;
        if read.bundle {
            // A rendered bundle: its own apply order, Helm values left out.
            let files = read.sources.into_iter().map(|s| (s.rel, s.text));
            let bundle =
                Bundle::from_files(files.collect()).map_err(|e| Failure(format!("{arg}/{e}")))?;
            for (rel, value) in bundle.manifests() {
                collected.push(format!("{arg}/{rel}"), &rel, value);
            }
            continue;
        }
        for source in read.sources {
            let Some(loaded) = &source.spec else {
                read_manifests(&source.text, &source.name, &mut objects)?;
                continue;
            };
            let base = &source.base_dir;
            let bundle = crate::files::render_spec(loaded, base)?;
            for (rel, value) in bundle.manifests() {
                collected.push(format!("{}#{rel}", source.name), &rel, value);
            }
            collected.spec = Some((loaded.spec.clone(), bundle.clone()));
            let spec = &loaded.spec.spec;
            collected.management_access = collected
                .management_access
                .or(access_of(&spec.kubean.management_cluster, base));
            collected.cluster_access = collected.cluster_access.or(access_of(&spec.access, base));
        }
    }
    // Plain manifests go to the new cluster.
    collected.cluster.extend(objects);
    Ok(collected)
}

/// Namespaces first: a namespaced object is refused, even in a dry run, until its namespace
/// exists. Namespaces the batch creates are applied (or, with --dry-run=server, checked) on
/// their own before the rest.
fn namespaces_first(objects: Objects) -> (Objects, Objects) {
    objects
        .into_iter()
        .partition(|(_, v)| v["kind"] == "Namespace" && v["apiVersion"] == "v1")
}

pub fn run(args: ApplyArgs) -> Result<std::process::ExitCode, Failure> {
    let collected = collect(&args.paths)?;
    if collected.management.is_empty() && collected.cluster.is_empty() {
        return Err(Failure("nothing to apply".into()));
    }
    let options = ApplyOptions {
        dry_run: args.dry_run == "server",
        field_manager: args.field_manager.clone(),
        force_conflicts: args.force_conflicts,
        ..Default::default()
    };
    // The new cluster: flags, then the spec's access, then the default kubeconfig.
    let cluster_options = if args.kubeconfig.is_some() || args.context.is_some() {
        ClientOptions {
            kubeconfig: args.kubeconfig.clone(),
            context: args.context.clone(),
        }
    } else {
        collected.cluster_access.clone().unwrap_or_default()
    };
    // The management cluster is never guessed: kubean/ must not land in the cluster it builds.
    let management_options = if args.mgmt_kubeconfig.is_some() || args.mgmt_context.is_some() {
        Some(ClientOptions {
            kubeconfig: args
                .mgmt_kubeconfig
                .clone()
                .or_else(|| cluster_options.kubeconfig.clone()),
            context: args.mgmt_context.clone(),
        })
    } else {
        collected.management_access.clone()
    };
    if !collected.management.is_empty() && management_options.is_none() {
        return Err(Failure(format!(
            "{} kubean/ object(s) belong to the management cluster where Kubean runs, not to the \
             cluster it builds: pass --mgmt-context (and --mgmt-kubeconfig) or set \
             spec.kubean.managementCluster",
            collected.management.len()
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let verb = if options.dry_run {
        "accepted (server dry run)"
    } else {
        "applied"
    };
    let plan_only = options.dry_run || args.diff;
    // Every step after the one that failed, for the "not applied" list.
    let mut later: Vec<String> = Vec::new();
    if collected.spec.is_some() {
        if !args.skip_helm {
            later.push("Helm releases".into());
        }
        later.push("Kubernetes objects".into());
    }
    if let Some((spec, bundle)) = &collected.spec
        && !args.skip_aws
    {
        let mut desired = crate::apply_aws::desired(
            spec,
            bundle,
            args.controller_role.clone(),
            args.rotator_role.clone(),
        )?;
        desired.prune = args.prune;
        let region = spec.spec.aws.region.clone();
        let result = runtime.block_on(async {
            let sdk = kk_live::store::aws_config(Some(region), None)
                .await
                .map_err(|e| Failure(format!("aws: {e}")))?;
            Ok::<_, Failure>(kk_live::aws_apply::reconcile(&sdk, &desired, plan_only).await)
        })?;
        match result {
            Ok(outcome) => crate::apply_aws::report(&outcome, plan_only),
            Err(e) => {
                crate::apply_aws::report(&e.outcome, plan_only);
                let done: Vec<String> = e.outcome.writes.iter().map(|w| w.to_string()).collect();
                let mut not_applied = e.not_attempted.clone();
                not_applied.extend(later);
                return Err(Failure(format!(
                    "aws: step \"{}\" failed: {}\napplied: {}\nnot applied: {}\nre-running apply resumes: every step reads the account first and makes only the calls still missing",
                    e.failed,
                    e.error,
                    if done.is_empty() {
                        "nothing".to_owned()
                    } else {
                        done.join(", ")
                    },
                    not_applied.join(", ")
                )));
            }
        }
    }
    let helm_releases = match &collected.spec {
        Some((spec, bundle)) if !args.skip_helm && !args.diff => {
            Some((crate::apply_aws::releases(spec, bundle), bundle.clone()))
        }
        _ => None,
    };
    let mut applied = Vec::new();
    let mut unchecked: Vec<String> = Vec::new();
    let mut batches: Vec<(&str, ClientOptions, Objects)> = Vec::new();
    if let Some(mgmt) = management_options {
        let (namespaces, rest) = namespaces_first(collected.management);
        batches.push(("management cluster", mgmt.clone(), namespaces));
        batches.push(("management cluster", mgmt, rest));
    }
    let (namespaces, rest) = namespaces_first(collected.cluster);
    batches.push(("new cluster", cluster_options.clone(), namespaces));
    batches.push(("new cluster", cluster_options.clone(), rest));
    if args.diff {
        let mut changed = 0;
        for (which, client_options, objects) in &batches {
            if objects.is_empty() {
                continue;
            }
            let diffs = runtime.block_on(async {
                let client = kk_live::make_client(client_options)
                    .await
                    .map_err(|e| Failure(format!("{which}: {e}")))?;
                kk_live::apply::diff_all(&client, objects, &options)
                    .await
                    .map_err(|e| Failure(format!("{which}: {e}")))
            })?;
            for (object, changes) in diffs {
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
        }
        eprintln!("{changed} object(s) would change");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let last_batch = batches.len() - 1;
    // What each cluster should hold, for --prune.
    let mut wanted: Vec<(&str, ClientOptions, Objects)> = Vec::new();
    {
        for (which, client_options, objects) in &batches {
            match wanted.iter_mut().find(|(w, _, _)| w == which) {
                Some((_, _, all)) => all.extend(objects.iter().cloned()),
                None => wanted.push((which, client_options.clone(), objects.clone())),
            }
        }
    }
    // Namespaces of the batch so far: in a dry run they are not created, so objects in them
    // cannot be checked yet (the apiserver answers 404 for the namespace).
    let mut batch_namespaces: Vec<String> = Vec::new();
    for (index, (which, client_options, mut objects)) in batches.into_iter().enumerate() {
        // Helm after the new cluster's namespaces, before its other objects (the charts
        // install the CRDs and controllers those objects need).
        if index == last_batch
            && let Some((releases, bundle)) = &helm_releases
        {
            for (release, action) in crate::apply_aws::helm(
                releases,
                bundle,
                client_options.kubeconfig.as_deref(),
                client_options.context.as_deref(),
                options.dry_run,
            )? {
                eprintln!("helm: {release}: {action}");
            }
        }
        if objects.is_empty() {
            continue;
        }
        eprintln!(
            "{which}: checking {} objects with a server-side dry run",
            objects.len()
        );
        let run = |objects: &[(String, Value)]| {
            runtime.block_on(async {
                let client = kk_live::make_client(&client_options)
                    .await
                    .map_err(|e| Failure(format!("{which}: {e}")))?;
                Ok::<_, Failure>(kk_live::apply_all(&client, objects, &options).await)
            })
        };
        let mut result = run(&objects)?;
        if options.dry_run
            && let Err(ApplyError::Refused(refusals)) = &result
        {
            let missing: Vec<&String> = batch_namespaces
                .iter()
                .filter(|ns| {
                    refusals.iter().any(|r| {
                        r.code == 404
                            && r.message
                                .contains(&format!("namespaces \"{ns}\" not found"))
                    })
                })
                .collect();
            let only_missing = refusals.iter().all(|r| {
                r.code == 404
                    && missing.iter().any(|ns| {
                        r.message
                            .contains(&format!("namespaces \"{ns}\" not found"))
                    })
            });
            if only_missing {
                let (skipped, rest): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(_, v)| {
                    v["metadata"]["namespace"]
                        .as_str()
                        .is_some_and(|ns| missing.iter().any(|m| *m == ns))
                });
                unchecked.extend(skipped.iter().map(|(source, v)| {
                    format!(
                        "{source}: {}/{}",
                        v["kind"].as_str().unwrap_or_default(),
                        v["metadata"]["name"].as_str().unwrap_or_default()
                    )
                }));
                objects = rest;
                result = run(&objects)?;
            }
        }
        for (_, v) in &objects {
            if v["kind"] == "Namespace"
                && let Some(name) = v["metadata"]["name"].as_str()
            {
                batch_namespaces.push(name.to_owned());
            }
        }
        match result {
            Ok(done) => applied.extend(done),
            Err(ApplyError::Refused(refusals)) => {
                let mut message = String::new();
                for r in &refusals {
                    message.push_str(&format!("{r}\nerror: "));
                }
                message.push_str(&format!(
                    "{} object(s) refused by the {which}'s apiserver; {}",
                    refusals.len(),
                    if applied.is_empty() || options.dry_run {
                        "nothing applied".to_owned()
                    } else {
                        format!("nothing more applied ({} applied before)", applied.len())
                    }
                ));
                return Err(Failure(message));
            }
            Err(ApplyError::Partial {
                applied: done,
                refusal,
                not_applied,
            }) => {
                let mut now: Vec<String> = applied
                    .iter()
                    .chain(done.iter())
                    .map(|a: &kk_live::Applied| format!("{}/{}", a.kind, a.name))
                    .collect();
                if now.is_empty() {
                    now.push("nothing".into());
                }
                return Err(Failure(format!(
                    "{refusal}\n{which}: the apiserver refused an object after the dry run passed\napplied: {}\nnot applied: {}\nre-running apply resumes: server-side apply of what is already there changes nothing",
                    now.join(", "),
                    std::iter::once(refusal.object.clone())
                        .chain(not_applied)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            Err(other) => return Err(Failure(format!("{which}: {other}"))),
        }
    }
    // The inventory of each cluster: what this spec's applies created there. --prune deletes
    // what is recorded and no longer in the bundle; without it, new objects are added.
    if !options.dry_run
        && let Some((spec, _)) = &collected.spec
    {
        let cluster = spec.metadata.name.clone();
        for (which, client_options, objects) in &wanted {
            let lines = runtime.block_on(async {
                let client = kk_live::make_client(client_options)
                    .await
                    .map_err(|e| Failure(format!("{which}: {e}")))?;
                let keep = kk_live::apply::inventory_lines(&client, objects, &options)
                    .await
                    .map_err(|e| Failure(format!("{which}: {e}")))?;
                let recorded = kk_live::apply::read_inventory(&client, &cluster)
                    .await
                    .map_err(|e| Failure(format!("{which}: read the inventory: {e}")))?;
                let mut lines = Vec::new();
                let mut next: std::collections::BTreeSet<String> =
                    recorded.union(&keep).cloned().collect();
                if args.prune {
                    let candidates = kk_live::apply::prune_candidates(&client, &recorded, &keep)
                        .await
                        .map_err(|e| Failure(format!("{which}: {e}")))?;
                    next = keep.clone();
                    for (object, resource, namespace, name) in candidates {
                        if resource.kind == "NodePool" && !args.prune_nodepools {
                            lines.push(format!(
                                "{object} kept: the bundle no longer has it, but deleting a NodePool terminates all its nodes; pass --prune-nodepools to delete it"
                            ));
                            next.insert(format!(
                                "{} {} {} {name}",
                                resource.api_version,
                                resource.kind,
                                namespace.as_deref().unwrap_or("-")
                            ));
                            continue;
                        }
                        kk_live::apply::delete(&client, &resource, namespace.as_deref(), &name)
                            .await
                            .map_err(|e| Failure(format!("{which}: delete {object}: {e}")))?;
                        lines.push(format!("{object} pruned"));
                    }
                }
                kk_live::apply::write_inventory(&client, &cluster, &next, &options)
                    .await
                    .map_err(|e| Failure(format!("{which}: record the inventory: {e}")))?;
                Ok::<_, Failure>(lines)
            })?;
            for line in lines {
                eprintln!("{which}: {line}");
            }
        }
    } else if args.prune && !options.dry_run {
        return Err(Failure(
            "--prune needs a spec: its cluster name scopes what may be deleted".into(),
        ));
    }
    for u in &unchecked {
        eprintln!(
            "{u}: not checked: its namespace is created by this apply (a dry run creates nothing)"
        );
    }
    if args.output == "json" {
        let list: Vec<Value> = applied
            .iter()
            .map(|a| serde_json::json!({"source": a.source, "kind": a.kind, "name": a.name, "namespace": a.namespace, "resourceVersion": a.resource_version, "result": verb}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        for a in &applied {
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
