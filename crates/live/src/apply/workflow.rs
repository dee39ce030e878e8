//! The whole of `apply`, in ORDER.md's order: the AWS side (with a spec), then per cluster the
//! namespaces, the Helm releases (new cluster, after its namespaces), the other objects, each
//! batch checked by a server-side dry run first; then the inventory and `--prune`. A failure
//! says what was applied and what was not, and re-running resumes.
//!
//! The CLI reads the inputs and prints; this module decides and calls.

use std::collections::BTreeSet;

use kk_render::{Bundle, Target};
use kk_spec::ElasticCluster;
use kk_spec::names::MANAGED_BY;
use serde_json::Value;

use super::aws::{AwsDesired, AwsOutcome};
use super::handover::{self, Move};
use super::kube::{self, Applied, ApplyError, ApplyOptions};
use crate::ClientOptions;

/// (source, object) pairs in apply order.
pub type Objects = Vec<(String, Value)>;

/// Everything one `apply` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Objects for Kubean's management cluster, in order.
    pub management: Objects,
    /// Objects for the new cluster, in order.
    pub cluster: Objects,
    /// How to reach the management cluster; `None` refuses management objects.
    pub management_access: Option<ClientOptions>,
    pub cluster_access: ClientOptions,
    /// The spec and its rendered bundle, when a spec was given: the AWS side, the Helm
    /// releases and the inventory need them.
    pub spec: Option<(ElasticCluster, Bundle)>,
    pub options: ApplyOptions,
    pub aws: bool,
    pub helm: bool,
    /// Show what would change and change nothing.
    pub diff: bool,
    pub prune: bool,
    pub prune_nodepools: bool,
    /// The IAM roles the controller and rotator policies are attached to.
    pub controller_role: Option<String>,
    pub rotator_role: Option<String>,
    /// How long a controller moved to another namespace may take to have an available pod
    /// before apply gives up (the old one keeps running); `None`: [`handover::DEFAULT_TIMEOUT`].
    pub handover_timeout: Option<std::time::Duration>,
}

impl Request {
    /// Routes one bundle object to the cluster render says its file belongs to.
    pub fn push(&mut self, source: String, bundle_path: &str, value: Value) {
        match Bundle::target(bundle_path) {
            Target::Management => self.management.push((source, value)),
            Target::NewCluster => self.cluster.push((source, value)),
        }
    }
}

/// What a finished `apply` did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub applied: Vec<Applied>,
    /// With `diff`: each object and its changes (empty: unchanged).
    pub diffs: Vec<(String, Vec<String>)>,
    /// Objects a dry run could not check: their namespace is made by this apply.
    pub unchecked: Vec<String>,
}

/// A failed `apply`: what stopped it, each message saying what was and was not applied. A
/// caller tells a refusal of the request (nothing was touched) from a cluster or AWS that
/// failed part-way by the variant.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// No objects and no spec.
    #[error("nothing to apply")]
    NothingToApply,
    /// kubean/ objects, and nothing says where Kubean runs.
    #[error(
        "{objects} kubean/ object(s) belong to the management cluster where Kubean runs, not to the cluster it builds: pass --mgmt-context (and --mgmt-kubeconfig) or set spec.kubean.managementCluster"
    )]
    NoManagementCluster { objects: usize },
    /// `--prune` without a spec to scope it.
    #[error("--prune needs a spec: its cluster name scopes what may be deleted")]
    PruneWithoutSpec,
    /// A namespace the bundle owns exists without our label: someone else made it.
    #[error(
        "{cluster}: namespace {namespace} exists but kubean-karpenter did not make it (no {label}={value} label): whoever made it may hold rights there, beside the controller account the bundle puts in it. Check its RoleBindings and pods, then delete it or label it {label}={value}; nothing more applied"
    )]
    ForeignNamespace {
        cluster: String,
        namespace: String,
        label: &'static str,
        value: &'static str,
    },
    /// The bundle's AWS documents are missing or incomplete (`iam/`, `interruption/`).
    #[error(transparent)]
    Bundle(#[from] super::BundleDocumentError),
    /// No AWS configuration or credentials.
    #[error("aws: {0}")]
    AwsUnavailable(#[source] crate::store::StoreError),
    /// An AWS step failed after the ones before it were made.
    #[error(
        "aws: step \"{step}\" failed: {error}\napplied: {}\nnot applied: {}\nre-running apply resumes: every step reads the account first and makes only the calls still missing",
        if .applied.is_empty() { "nothing".to_owned() } else { .applied.join(", ") },
        .not_applied.join(", ")
    )]
    AwsStep {
        step: String,
        #[source]
        error: super::aws::StepError,
        applied: Vec<String>,
        not_applied: Vec<String>,
    },
    /// A Helm release could not be installed, or its upgrade was refused.
    #[error(transparent)]
    Helm(#[from] super::helm::HelmError),
    /// A cluster's apiserver could not be reached, or a call to it failed (`what`: the step;
    /// `then`: what re-running does, when the error itself does not say). The call's typed
    /// error is the source: a kube refusal, an unreachable apiserver, a refused batch.
    #[error(
        "{cluster}: {}{source}{}",
        if .what.is_empty() { String::new() } else { format!("{}: ", .what) },
        if .then.is_empty() { String::new() } else { format!("\n{}", .then) }
    )]
    Cluster {
        cluster: String,
        what: String,
        #[source]
        source: StepSource,
        then: &'static str,
    },
    /// The apiserver refused objects; nothing of the batch was applied.
    #[error("{message}")]
    Refused { cluster: String, message: String },
    /// The apiserver refused an object after the dry run passed: some were applied.
    #[error(
        "{refusal}\n{cluster}: the apiserver refused an object after the dry run passed\napplied: {}\nnot applied: {}\nre-running apply resumes: server-side apply of what is already there changes nothing",
        .applied.join(", "),
        .not_applied.join(", ")
    )]
    PartlyApplied {
        cluster: String,
        refusal: String,
        applied: Vec<String>,
        not_applied: Vec<String>,
    },
}

/// The typed error a step against a cluster met, kept whole as [`WorkflowError::Cluster`]'s
/// source.
pub type StepSource = Box<dyn std::error::Error + Send + Sync + 'static>;

impl WorkflowError {
    /// A failed call to `cluster` at step `what` (empty: the cluster's own error says it).
    fn cluster(cluster: &str, what: &str, source: impl Into<StepSource>) -> WorkflowError {
        WorkflowError::cluster_then(cluster, what, source, "")
    }

    /// As [`WorkflowError::cluster`], saying what re-running does.
    fn cluster_then(
        cluster: &str,
        what: &str,
        source: impl Into<StepSource>,
        then: &'static str,
    ) -> WorkflowError {
        WorkflowError::Cluster {
            cluster: cluster.to_owned(),
            what: what.to_owned(),
            source: source.into(),
            then,
        }
    }
}

/// Progress on standard error: AWS calls, Helm actions, batches, prunes.
pub type Progress<'a> = &'a mut dyn FnMut(String);

/// Namespaces first: a namespaced object is refused, even in a dry run, until its namespace
/// exists.
fn namespaces_first(objects: Objects) -> (Objects, Objects) {
    objects
        .into_iter()
        .partition(|(_, v)| v["kind"] == "Namespace" && v["apiVersion"] == "v1")
}

/// The notes and the summary; the writes were reported as they were made.
fn aws_report(outcome: &AwsOutcome, progress: Progress) {
    for n in &outcome.notes {
        progress(format!("aws: note: {n}"));
    }
    progress(format!(
        "aws: {} write(s), {} read(s){}",
        outcome.writes.len(),
        outcome.reads,
        if outcome.writes.is_empty() {
            " — already as the spec says"
        } else {
            ""
        }
    ));
}

async fn aws_side(
    request: &Request,
    spec: &ElasticCluster,
    bundle: &Bundle,
    later: &[String],
    progress: Progress<'_>,
) -> Result<(), WorkflowError> {
    let plan_only = request.options.dry_run || request.diff;
    let mut desired = AwsDesired::from_bundle(
        spec,
        bundle,
        request.controller_role.clone(),
        request.rotator_role.clone(),
    )?;
    desired.prune = request.prune;
    let sdk = crate::store::aws_config(Some(spec.spec.aws.region.clone()), None)
        .await
        .map_err(WorkflowError::AwsUnavailable)?;
    let verb = if plan_only { "would call" } else { "called" };
    let mut on_write = |w: &super::aws::Step| progress(format!("aws: {verb} {w}"));
    let result = super::aws::reconcile(&sdk, &desired, plan_only, &mut on_write).await;
    match result {
        Ok(outcome) => {
            aws_report(&outcome, progress);
            Ok(())
        }
        Err(e) => {
            aws_report(&e.outcome, progress);
            let applied: Vec<String> = e.outcome.writes.iter().map(|w| w.to_string()).collect();
            let mut not_applied = e.not_attempted.clone();
            not_applied.extend(later.iter().cloned());
            Err(WorkflowError::AwsStep {
                step: e.failed.to_string(),
                error: e.error,
                applied,
                not_applied,
            })
        }
    }
}

/// The cluster where Kubean runs, as batches and progress lines name it.
const MANAGEMENT: &str = "management cluster";

/// One batch of objects for one cluster.
struct Batch {
    which: &'static str,
    access: ClientOptions,
    objects: Objects,
}

async fn client(which: &str, access: &ClientOptions) -> Result<::kube::Client, WorkflowError> {
    crate::make_client(access)
        .await
        .map_err(|e| WorkflowError::cluster(which, "", e))
}

/// Runs `request`. The management cluster is never guessed: management objects without
/// `management_access` are refused before anything is called.
pub async fn run(mut request: Request, progress: Progress<'_>) -> Result<Outcome, WorkflowError> {
    if request.management.is_empty() && request.cluster.is_empty() {
        return Err(WorkflowError::NothingToApply);
    }
    if !request.management.is_empty() && request.management_access.is_none() {
        return Err(WorkflowError::NoManagementCluster {
            objects: request.management.len(),
        });
    }
    let options = request.options.clone();
    // Every step after the one that failed, for the "not applied" list.
    let mut later: Vec<String> = Vec::new();
    if request.spec.is_some() {
        if request.helm {
            later.push("Helm releases".into());
        }
        later.push("Kubernetes objects".into());
    }
    if let Some((_, bundle)) = &request.spec
        && request.helm
        && !request.diff
    {
        super::helm::preflight(
            bundle,
            request.cluster_access.kubeconfig.as_deref(),
            request.cluster_access.context.as_deref(),
        )
        .map_err(WorkflowError::Helm)?;
    }
    if let Some((spec, bundle)) = &request.spec
        && request.aws
    {
        aws_side(&request, spec, bundle, &later, &mut *progress).await?;
    }
    let helm_bundle = match &request.spec {
        Some((_, bundle)) if request.helm && !request.diff => Some(bundle),
        _ => None,
    };
    // The batches own the objects; the request keeps what the later steps read.
    let management = std::mem::take(&mut request.management);
    let cluster = std::mem::take(&mut request.cluster);
    let mut batches: Vec<Batch> = Vec::new();
    if let Some(access) = &request.management_access {
        let (namespaces, rest) = namespaces_first(management);
        for objects in [namespaces, rest] {
            batches.push(Batch {
                which: MANAGEMENT,
                access: access.clone(),
                objects,
            });
        }
    }
    let (namespaces, rest) = namespaces_first(cluster);
    for objects in [namespaces, rest] {
        batches.push(Batch {
            which: "new cluster",
            access: request.cluster_access.clone(),
            objects,
        });
    }
    let mut outcome = Outcome::default();
    if request.diff {
        for batch in batches.iter().filter(|b| !b.objects.is_empty()) {
            let client = client(batch.which, &batch.access).await?;
            let diffs = kube::diff_all(&client, &batch.objects, &options)
                .await
                .map_err(|e| WorkflowError::cluster(batch.which, "", e))?;
            outcome.diffs.extend(diffs);
        }
        return Ok(outcome);
    }
    // What each cluster should hold, for the inventory and --prune.
    let mut wanted: Vec<(&str, ClientOptions, Objects)> = Vec::new();
    for batch in &batches {
        match wanted.iter_mut().find(|(w, _, _)| *w == batch.which) {
            Some((_, _, all)) => all.extend(batch.objects.iter().cloned()),
            None => wanted.push((batch.which, batch.access.clone(), batch.objects.clone())),
        }
    }
    let last_batch = batches.len() - 1;
    // Namespaces of the batches so far: in a dry run they are not created, so objects in them
    // cannot be checked yet (the apiserver answers 404 for the namespace).
    let mut batch_namespaces: Vec<String> = Vec::new();
    for (index, batch) in batches.into_iter().enumerate() {
        let Batch {
            which,
            access,
            mut objects,
        } = batch;
        // Helm after the new cluster's namespaces, before its other objects (the charts
        // install the CRDs and controllers those objects need).
        if index == last_batch
            && let Some(bundle) = &helm_bundle
        {
            let actions = super::helm::install(
                bundle,
                access.kubeconfig.as_deref(),
                access.context.as_deref(),
                options.dry_run,
            )
            .map_err(WorkflowError::Helm)?;
            for a in actions {
                progress(format!("helm: {}: {}", a.release, a.action));
            }
        }
        if objects.is_empty() {
            continue;
        }
        progress(format!(
            "{which}: checking {} objects with a server-side dry run",
            objects.len()
        ));
        let client = client(which, &access).await?;
        let foreign = foreign_namespaces(&client, &objects)
            .await
            .map_err(|e| WorkflowError::cluster(which, "read the namespaces", e))?;
        if let Some(namespace) = foreign.first() {
            return Err(WorkflowError::ForeignNamespace {
                cluster: which.to_owned(),
                namespace: namespace.clone(),
                label: MANAGED_BY.0,
                value: MANAGED_BY.1,
            });
        }
        // Our controllers that run in another namespace than the bundle's start there first.
        let mut moves: Vec<Move> = Vec::new();
        if !options.dry_run && index == last_batch {
            let (found, left_alone) = handover::find(&client, &objects)
                .await
                .map_err(|e| WorkflowError::cluster(which, "find controllers to move", e))?;
            for note in left_alone {
                progress(note);
            }
            moves = found;
            if !moves.is_empty() {
                start_moved(
                    &request,
                    which,
                    &client,
                    &objects,
                    &moves,
                    &outcome,
                    &mut *progress,
                )
                .await?;
            }
        }
        if !options.dry_run {
            let released = super::budget::release(&client, &objects)
                .await
                .map_err(|e| WorkflowError::cluster(which, "release budget limits", e))?;
            for pool in released {
                progress(format!(
                    "{which}: NodePool {pool} has no budget now: the budget controller's limit is released"
                ));
            }
        }
        let mut result = kube::apply_all(&client, &objects, &options).await;
        if options.dry_run
            && let Err(ApplyError::Refused(refusals)) = &result
            && let Some(missing) = only_missing_namespaces(refusals, &batch_namespaces)
        {
            let (skipped, rest): (Objects, Objects) = objects.into_iter().partition(|(_, v)| {
                v["metadata"]["namespace"]
                    .as_str()
                    .is_some_and(|ns| missing.contains(ns))
            });
            outcome.unchecked.extend(skipped.iter().map(|(source, v)| {
                format!(
                    "{source}: {}/{}",
                    v["kind"].as_str().unwrap_or_default(),
                    v["metadata"]["name"].as_str().unwrap_or_default()
                )
            }));
            objects = rest;
            result = kube::apply_all(&client, &objects, &options).await;
        }
        batch_namespaces.extend(objects.iter().filter_map(|(_, v)| {
            (v["kind"] == "Namespace")
                .then(|| v["metadata"]["name"].as_str().map(str::to_owned))
                .flatten()
        }));
        match result {
            Ok(done) => {
                if !options.dry_run {
                    progress(format!("{which}: applied {} objects", done.len()));
                }
                outcome.applied.extend(done);
                handover::retire(&client, &moves, &mut *progress)
                    .await
                    .map_err(|e| {
                        WorkflowError::cluster(
                            which,
                            &format!(
                                "handover: retiring the old accounts of {}",
                                handover::summary(&moves)
                            ),
                            format!("{e}\nre-running apply resumes"),
                        )
                    })?;
            }
            Err(e) => return Err(refused(e, which, &outcome.applied, options.dry_run)),
        }
    }
    if !options.dry_run
        && let Some((spec, _)) = &request.spec
    {
        let cluster = spec.metadata.name.clone();
        for (which, access, objects) in &wanted {
            let client = client(which, access).await?;
            let mut report = |line: String| progress(format!("{which}: {line}"));
            inventory(
                &request,
                which,
                &client,
                &cluster,
                objects,
                &options,
                &mut report,
            )
            .await?;
        }
    } else if request.prune && !options.dry_run {
        return Err(WorkflowError::PruneWithoutSpec);
    }
    Ok(outcome)
}

/// Namespaces among `objects` that the bundle owns (our label) but that exist without it:
/// someone else made them (a tenant's self-service namespace, say) and may hold rights there.
async fn foreign_namespaces(
    client: &::kube::Client,
    objects: &Objects,
) -> Result<Vec<String>, ::kube::Error> {
    let api: ::kube::Api<k8s_openapi::api::core::v1::Namespace> = ::kube::Api::all(client.clone());
    let mut foreign = Vec::new();
    for (_, v) in objects {
        let owned = v["apiVersion"] == "v1"
            && v["kind"] == "Namespace"
            && v["metadata"]["labels"][MANAGED_BY.0] == MANAGED_BY.1;
        let Some(name) = v["metadata"]["name"].as_str().filter(|_| owned) else {
            continue;
        };
        if let Some(live) = api.get_opt(name).await?
            && !kk_spec::names::is_managed(live.metadata.labels.as_ref())
        {
            foreign.push(name.to_owned());
        }
    }
    Ok(foreign)
}

/// Handover steps 1–3 ([`handover`]): the moved controllers' new Deployments start while the
/// old ones keep their rights, and the old ones stop once a new pod is available. A failure
/// leaves the old controllers running.
async fn start_moved(
    request: &Request,
    which: &str,
    client: &::kube::Client,
    objects: &Objects,
    moves: &[Move],
    outcome: &Outcome,
    progress: Progress<'_>,
) -> Result<(), WorkflowError> {
    let resume = "re-running apply resumes";
    progress(format!("handover: moving {}", handover::summary(moves)));
    handover::copy_secrets(client, moves, &mut *progress)
        .await
        .map_err(|e| WorkflowError::cluster_then(which, "handover: copy Secrets", e, resume))?;
    // The policies that constrain both accounts first, then the bindings that name both.
    let (policies, rest): (Objects, Objects) = handover::with_old_accounts(objects, moves)
        .into_iter()
        .partition(|(_, v)| {
            v["apiVersion"] == "admissionregistration.k8s.io/v1"
                && v["kind"] == "ValidatingAdmissionPolicy"
        });
    let both: Objects = policies.into_iter().chain(rest).collect();
    kube::apply_all(client, &both, &request.options)
        .await
        .map_err(|e| {
            WorkflowError::cluster_then(
                which,
                "handover",
                refused(e, "new cluster", &outcome.applied, false),
                "the controllers keep running where they are",
            )
        })?;
    let timeout = request
        .handover_timeout
        .unwrap_or(handover::DEFAULT_TIMEOUT);
    handover::wait_available(client, moves, timeout, &mut *progress)
        .await
        .map_err(|e| {
            WorkflowError::cluster_then(
                which,
                "handover",
                e,
                "re-running apply resumes once it runs",
            )
        })?;
    handover::stop_old(client, moves, &mut *progress)
        .await
        .map_err(|e| {
            WorkflowError::cluster_then(which, "handover: stop the old Deployments", e, resume)
        })
}

/// When every refusal is a 404 for a namespace this apply creates (and a dry run does not),
/// those namespaces.
fn only_missing_namespaces(
    refusals: &[kube::Refusal],
    batch_namespaces: &[String],
) -> Option<BTreeSet<String>> {
    let missing_message = |ns: &str| format!("namespaces \"{ns}\" not found");
    let missing: BTreeSet<String> = batch_namespaces
        .iter()
        .filter(|ns| {
            refusals
                .iter()
                .any(|r| r.code == 404 && r.message.contains(&missing_message(ns)))
        })
        .cloned()
        .collect();
    let only_missing = refusals.iter().all(|r| {
        r.code == 404
            && missing
                .iter()
                .any(|ns| r.message.contains(&missing_message(ns)))
    });
    only_missing.then_some(missing)
}

/// The message for a batch the apiserver refused.
fn refused(error: ApplyError, which: &str, applied: &[Applied], dry_run: bool) -> WorkflowError {
    match error {
        ApplyError::Refused(refusals) => {
            let mut message = String::new();
            for r in &refusals {
                message.push_str(&format!("{r}\nerror: "));
            }
            message.push_str(&format!(
                "{} object(s) refused by the {which}'s apiserver; {}",
                refusals.len(),
                if applied.is_empty() || dry_run {
                    "nothing applied".to_owned()
                } else {
                    format!("nothing more applied ({} applied before)", applied.len())
                }
            ));
            WorkflowError::Refused {
                cluster: which.to_owned(),
                message,
            }
        }
        ApplyError::Partial {
            applied: done,
            refusal,
            not_applied,
        } => {
            let mut now: Vec<String> = applied
                .iter()
                .chain(done.iter())
                .map(|a| format!("{}/{}", a.kind, a.name))
                .collect();
            if now.is_empty() {
                now.push("nothing".into());
            }
            WorkflowError::PartlyApplied {
                cluster: which.to_owned(),
                refusal: refusal.to_string(),
                applied: now,
                not_applied: std::iter::once(refusal.object.clone())
                    .chain(not_applied)
                    .collect(),
            }
        }
        other => WorkflowError::cluster(which, "", other),
    }
}

/// The cluster's inventory of what this spec's applies created there: `--prune` deletes
/// what is recorded and no longer in the bundle (NodePools only with `--prune-nodepools`);
/// without it, new objects are added. Reports a line per pruned or kept object as it goes.
async fn inventory(
    request: &Request,
    which: &str,
    client: &::kube::Client,
    cluster: &str,
    objects: &Objects,
    options: &ApplyOptions,
    report: Progress<'_>,
) -> Result<(), WorkflowError> {
    let name = &kube::inventory_name(cluster, which == MANAGEMENT);
    let keep = kube::inventory_lines(client, objects, options)
        .await
        .map_err(|e| WorkflowError::cluster(which, "", e))?;
    let recorded = kube::read_inventory(client, name)
        .await
        .map_err(|e| WorkflowError::cluster(which, "read the inventory", e))?;
    let mut next: BTreeSet<String> = recorded.union(&keep).cloned().collect();
    if request.prune {
        let candidates = kube::prune_candidates(client, &recorded, &keep)
            .await
            .map_err(|e| WorkflowError::cluster(which, "", e))?;
        next = keep.clone();
        for (object, resource, namespace, name) in candidates {
            if resource.kind == "NodePool" && !request.prune_nodepools {
                report(format!(
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
            kube::delete(client, &resource, namespace.as_deref(), &name)
                .await
                .map_err(|e| WorkflowError::cluster(which, &format!("delete {object}"), e))?;
            report(format!("{object} pruned"));
        }
    }
    kube::write_inventory(client, name, cluster, &next, options)
        .await
        .map_err(|e| WorkflowError::cluster(which, "record the inventory", e))
}
