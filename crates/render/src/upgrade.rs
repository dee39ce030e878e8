//! `upgrade plan`: the ordered, read-only steps of a Kubernetes upgrade of a Kubean + Karpenter
//! cluster, or the reasons it must not run. Pure: a spec and a target in, a plan out.
//!
//! The order is fixed by the version-skew policy (kubernetes.io/releases/version-skew-policy):
//! a kubelet is never newer than the API server and at most three minors older. So Kubean
//! upgrades the control plane first, then the components matched to its minor (the AWS cloud
//! controller manager), then the Karpenter pools' AMIs, pool by pool.
//!
//! Drift, as Karpenter does it (see CORRECTIONS "Day two"): an `alias` pin resolves against the
//! control plane's version, so it drifts every node of its pools as soon as the control plane
//! moves; `ssmRelease` and `id` pins name one image and move only when re-pinned. Karpenter
//! issues one drift command per ~10 s disruption loop, each replacing one node and waiting for
//! its replacement to initialize before draining the old one, with at most the pool's
//! `Drifted` budget in flight.

use std::collections::BTreeMap;

use kk_karpenter::budget::{BudgetNodes, DEFAULT_BUDGET};
use kk_spec::kubean_support as support;
use kk_spec::{ElasticCluster, Pool};
use serde_json::{Value, json};

use crate::kubean_ops::{Operation, check_upgrade, render_operation};

/// Seconds between two drift commands: Karpenter's disruption loop runs about every 10 s and
/// issues one single-node drift command per pass.
pub const DRIFT_LOOP_SECONDS: u64 = 10;

/// Default seconds one replacement takes from launch to a usable node: the lab's CPU pool,
/// workload created → pods Running (docs/guide/verify-and-doctor.md, `lab_verify`, 30.4 s).
/// The lab's EC2 is moto and its nodes boot in seconds; on AWS measure yours with
/// `kubean-karpenter verify --pool P` and pass it as `--replace-seconds`.
pub const DEFAULT_REPLACE_SECONDS: u64 = 30;

/// Which side goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    ControlPlaneFirst,
    WorkersFirst,
}

/// An AMI release `ami resolve` found for a pool at the target minor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAmi {
    /// `20260827`.
    pub date: String,
    pub image_id: String,
    /// `1.36.3-20260827` when AWS published it (the recommended release).
    pub release_version: Option<String>,
}

/// What to plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeRequest {
    /// `1.36.3`, or `1.36` / `1.36.x` for the newest patch the pinned Kubean release installs.
    pub to: String,
    pub order: Order,
    /// Pool → the release to move it to (from `ami resolve`); missing pools get a placeholder.
    pub resolved: BTreeMap<String, ResolvedAmi>,
    /// Pool → how many nodes it runs now; missing pools get no duration.
    pub nodes: BTreeMap<String, i64>,
    pub replace_seconds: u64,
}

/// Why the upgrade must not run as asked: the field to change, what breaks, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct UpgradeRefused {
    pub field: String,
    pub message: String,
}

/// The drift one step causes in one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub pool: String,
    /// Nodes replaced (all of the pool's), when known.
    pub nodes: Option<i64>,
    /// The pool's `Drifted` budgets as written (`1`, `10%`), or Karpenter's default.
    pub budget: String,
    /// At most this many replaced at once (known when `nodes` is, or for a count budget).
    pub at_once: Option<i64>,
    /// Rough seconds to replace them all.
    pub seconds: Option<u64>,
}

impl Drift {
    fn to_json(&self) -> Value {
        json!({
            "pool": self.pool,
            "nodes": self.nodes,
            "budget": self.budget,
            "atOnce": self.at_once,
            "seconds": self.seconds,
        })
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub title: String,
    /// What it changes.
    pub changes: Vec<String>,
    /// Why it is safe at this point of the order.
    pub safe_because: Vec<String>,
    /// What to run.
    pub commands: Vec<String>,
    pub drift: Vec<Drift>,
}

/// The plan.
#[derive(Debug, Clone, PartialEq)]
pub struct UpgradePlan {
    pub from: String,
    pub to: String,
    pub kubean_release: String,
    pub karpenter_version: String,
    pub steps: Vec<Step>,
    /// Seconds assumed per replacement (see [`DEFAULT_REPLACE_SECONDS`]).
    pub replace_seconds: u64,
    /// What the plan assumes and cannot see from the spec.
    pub notes: Vec<String>,
}

impl UpgradePlan {
    pub fn to_json(&self) -> Value {
        json!({
            "from": self.from,
            "to": self.to,
            "kubeanRelease": self.kubean_release,
            "karpenterVersion": self.karpenter_version,
            "replaceSeconds": self.replace_seconds,
            "driftLoopSeconds": DRIFT_LOOP_SECONDS,
            "steps": self.steps.iter().enumerate().map(|(i, s)| json!({
                "step": i + 1,
                "title": s.title,
                "changes": s.changes,
                "safeBecause": s.safe_because,
                "commands": s.commands,
                "drift": s.drift.iter().map(Drift::to_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

/// How a pool pins its AMI.
enum Pin<'a> {
    /// `al2023@v<date>`: follows the control plane's version.
    Alias(&'a str),
    /// `1.<minor>.<patch>-<date>`: its kubelet's minor, and the release.
    Release {
        kubelet_minor: Option<u32>,
        value: &'a str,
    },
    /// A custom image: its kubelet is the image builder's choice.
    Id(&'a str),
}

fn pin_of(pool: &Pool) -> Pin<'_> {
    if let Some(alias) = &pool.ami.alias {
        Pin::Alias(alias)
    } else if let Some(release) = &pool.ami.ssm_release {
        let version = release.split_once('-').map_or(release.as_str(), |(v, _)| v);
        Pin::Release {
            kubelet_minor: support::minor_patch(version).map(|(m, _)| m),
            value: release,
        }
    } else {
        Pin::Id(pool.ami.id.as_deref().unwrap_or_default())
    }
}

/// `1.36.3`, or the newest patch of `1.36` / `1.36.x` the pinned Kubean release installs.
fn target_version(cluster: &ElasticCluster, to: &str) -> Result<String, UpgradeRefused> {
    let to = to.trim().trim_start_matches('v');
    let minor_only = to.strip_suffix(".x").unwrap_or(to);
    if support::minor_patch(minor_only).is_some() {
        return Ok(minor_only.to_owned());
    }
    let refuse = |message: String| UpgradeRefused {
        field: "--to".into(),
        message,
    };
    let minor: u32 = minor_only
        .strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| {
            refuse(format!(
                "{to:?} is not a Kubernetes version like 1.36.3 or 1.36"
            ))
        })?;
    let release =
        support::image_tag(&cluster.spec.kubean.spray_job_image).and_then(support::release);
    let newest = release
        .and_then(|r| r.minors.iter().find(|(m, _, _)| *m == minor))
        .map(|&(_, _, hi)| hi);
    match newest {
        Some(patch) => Ok(format!("1.{minor}.{patch}")),
        None => Err(UpgradeRefused {
            field: "spec.kubean.sprayJobImage".into(),
            message: format!(
                "Kubean {} installs {}, no 1.{minor} patch: {}",
                release.map_or("?", |r| r.release.as_str()),
                release.map_or("nothing".into(), |r| r.range()),
                match support::newest_covering(minor, 0) {
                    Some(newer) => format!(
                        "upgrade Kubean to {} ({}) and pin its spray-job image first",
                        newer.release,
                        newer.range()
                    ),
                    None => "no Kubean release of the matrix installs it".into(),
                }
            ),
        }),
    }
}

/// The pool's `Drifted` budgets, as written, and the allowance for `nodes`.
fn drifted_budget(pool: &Pool, nodes: Option<i64>) -> (String, Option<i64>) {
    let budgets: Vec<(&str, Option<BudgetNodes>)> = pool
        .disruption
        .as_ref()
        .map(|d| {
            d.budgets
                .iter()
                .filter(|b| b.reasons.is_empty() || b.reasons.iter().any(|r| r == "Drifted"))
                .map(|b| (b.nodes.as_str(), BudgetNodes::parse(&b.nodes)))
                .collect()
        })
        .unwrap_or_default();
    if budgets.is_empty()
        && pool
            .disruption
            .as_ref()
            .is_none_or(|d| d.budgets.is_empty())
    {
        let at_once = nodes.map(|n| DEFAULT_BUDGET.allowed(n));
        return ("10% (Karpenter's default)".into(), at_once);
    }
    if budgets.is_empty() {
        // Budgets exist, none for Drifted: nothing limits drift.
        return ("none for Drifted (unlimited)".into(), nodes);
    }
    let text = budgets
        .iter()
        .map(|(t, _)| *t)
        .collect::<Vec<_>>()
        .join(", ");
    let at_once = budgets
        .iter()
        .filter_map(|(_, b)| match (b, nodes) {
            (Some(BudgetNodes::Count(c)), _) => Some(*c),
            (Some(b), Some(n)) => Some(b.allowed(n)),
            _ => None,
        })
        .min();
    let known = nodes.is_some()
        || budgets
            .iter()
            .all(|(_, b)| matches!(b, Some(BudgetNodes::Count(_))));
    (text, at_once.filter(|_| known))
}

fn drift_of(pool: &Pool, request: &UpgradeRequest) -> Drift {
    let nodes = request.nodes.get(&pool.name).copied();
    let (budget, at_once) = drifted_budget(pool, nodes);
    let seconds = match (nodes, at_once) {
        (Some(n), Some(b)) if b > 0 => {
            let n = n.max(0) as u64;
            let b = (b as u64).min(n.max(1));
            let waves = n.div_ceil(b);
            Some((n * DRIFT_LOOP_SECONDS).max(waves * request.replace_seconds))
        }
        _ => None,
    };
    Drift {
        pool: pool.name.clone(),
        nodes,
        budget,
        at_once,
        seconds,
    }
}

/// One drift as a sentence (the text output and the HTML page say the same).
pub fn drift_line(d: &Drift, replace_seconds: u64) -> String {
    let nodes = d.nodes.map_or("every node".into(), |n| {
        format!("{n} node{}", if n == 1 { "" } else { "s" })
    });
    match (d.at_once, d.seconds) {
        (Some(0), _) => format!(
            "{}: drift of {nodes} is BLOCKED: its Drifted budget ({}) allows 0 at once",
            d.pool, d.budget
        ),
        (at_once, Some(s)) => format!(
            "{}: {nodes} replaced, at most {} at once (Drifted budget {}), about {} min ({} s per \
             drift command, {replace_seconds} s per replacement)",
            d.pool,
            at_once.unwrap_or(0),
            d.budget,
            s.div_ceil(60),
            DRIFT_LOOP_SECONDS
        ),
        (Some(at_once), None) => format!(
            "{}: {nodes} replaced, at most {at_once} at once (Drifted budget {}); \
             pass --nodes {}=N for a duration",
            d.pool, d.budget, d.pool
        ),
        (None, None) => format!(
            "{}: {nodes} replaced under its Drifted budget {}; pass --nodes {}=N for how many at \
             once and how long",
            d.pool, d.budget, d.pool
        ),
    }
}

/// Plans the upgrade, or says every reason it must not run (each with its fix).
pub fn plan(
    cluster: &ElasticCluster,
    request: &UpgradeRequest,
) -> Result<UpgradePlan, Vec<UpgradeRefused>> {
    let spec = &cluster.spec;
    let from = spec.kubernetes_version.trim_start_matches('v').to_owned();
    let to = target_version(cluster, &request.to).map_err(|e| vec![e])?;
    let mut target = cluster.clone();
    target.spec.kubernetes_version = to.clone();
    let (minor, _) = check_upgrade(&target, Some(&from)).map_err(|e| {
        vec![UpgradeRefused {
            field: e.field,
            message: e.message,
        }]
    })?;
    let (from_minor, _) = support::minor_patch(&from).unwrap_or((minor, 0));
    let mut refusals = Vec::new();

    // What the spec's own checks say at the target version (Karpenter's supported minors,
    // the Kubean matrix, ssmRelease kubelet skew), minus what they say today.
    let today = kk_spec::validate(cluster);
    for (path, message) in kk_spec::validate(&target) {
        if !today.iter().any(|(p, m)| p == &path && m == &message) {
            let fix = if path.to_string().contains(".ami.") {
                format!(
                    "; first move this pool to a release whose kubelet is 1.{}–1.{from_minor} \
                     (`ami pin --release`), then upgrade",
                    minor.saturating_sub(3)
                )
            } else {
                String::new()
            };
            refusals.push(UpgradeRefused {
                field: path.to_string(),
                message: format!("at {to}: {message}{fix}"),
            });
        }
    }

    // Workers first: a kubelet of the new minor would be newer than the API server.
    if request.order == Order::WorkersFirst && minor > from_minor {
        for (i, pool) in spec.pools.iter().enumerate() {
            let field = format!("spec.pools[{i}].ami");
            match pin_of(pool) {
                Pin::Alias(_) => {}
                Pin::Release { .. } | Pin::Id(_) => refusals.push(UpgradeRefused {
                    field,
                    message: format!(
                        "moving pool {} to a 1.{minor} AMI before the control plane would run a \
                         1.{minor} kubelet against a 1.{from_minor} API server (a kubelet is never \
                         newer than the API server): upgrade the control plane first (drop \
                         --order workers-first)",
                        pool.name
                    ),
                }),
            }
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }

    let upgrade = render_operation(
        &target,
        &Operation::Upgrade {
            from: Some(from.clone()),
        },
    )
    .map_err(|e| {
        vec![UpgradeRefused {
            field: e.field,
            message: e.message,
        }]
    })?;
    let release = support::image_tag(&spec.kubean.spray_job_image)
        .and_then(support::release)
        .map(|r| (r.release.clone(), r.range()))
        .unwrap_or_default();

    let mut skew = Vec::new();
    let mut alias_drift = Vec::new();
    for pool in &spec.pools {
        match pin_of(pool) {
            Pin::Alias(alias) => {
                skew.push(format!(
                    "{}: alias {alias} follows the control plane: its nodes come back with a \
                     1.{minor} kubelet, never newer than the API server",
                    pool.name
                ));
                alias_drift.push(drift_of(pool, request));
            }
            Pin::Release {
                kubelet_minor,
                value,
            } => {
                if let Some(k) = kubelet_minor {
                    skew.push(format!(
                        "{}: ssmRelease {value} keeps its 1.{k} kubelet: {} minor{} behind a \
                         1.{minor} API server (3 allowed), not newer",
                        pool.name,
                        minor - k,
                        if minor - k == 1 { "" } else { "s" }
                    ));
                }
            }
            Pin::Id(id) => skew.push(format!(
                "{}: id {id} is a custom image whose kubelet the spec does not name: check it is \
                 1.{}–1.{minor} before this step",
                pool.name,
                minor.saturating_sub(3)
            )),
        }
    }

    let mut steps = Vec::new();
    let mut step1_changes = vec![
        format!("spec.kubernetesVersion {from} -> {to}; kubean/2-vars-conf.yaml kube_version {to}"),
        format!(
            "ClusterOperation {} (upgrade-cluster.yml, -e kube_version={to}): control plane, etcd \
             and the Kubean-built infra workers, one node at a time",
            upgrade.name
        ),
    ];
    if !alias_drift.is_empty() {
        step1_changes.push(format!(
            "pools pinned by alias drift by themselves once the API server reports {to}: {}",
            alias_drift
                .iter()
                .map(|d| d.pool.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut step1_safe = vec![
        format!(
            "Kubean {} (the pinned spray-job image) installs {to} (its range: {})",
            release.0, release.1
        ),
        format!("one step: 1.{from_minor} -> 1.{minor} (kubeadm upgrades one minor at a time)"),
        format!(
            "Karpenter {} supports 1.{minor} (the spec's checks pass at {to})",
            spec.karpenter.version
        ),
    ];
    step1_safe.extend(skew);
    steps.push(Step {
        title: format!("Kubean upgrades the control plane to {to}"),
        changes: step1_changes,
        safe_because: step1_safe,
        commands: vec![
            format!("edit SPEC: kubernetesVersion: {to}"),
            "kubean-karpenter render SPEC -o bundle --force".into(),
            "kubean-karpenter apply SPEC --mgmt-context M   # kubean/: the vars ConfigMap".into(),
            format!(
                "kubean-karpenter kubean upgrade SPEC --from {from} | kubectl --context M apply -f -"
            ),
        ],
        drift: alias_drift.clone(),
    });

    steps.push(Step {
        title: format!("Components matched to the control plane's minor (1.{minor})"),
        changes: vec![format!(
            "cloud/aws-cloud-controller-manager.yaml: the AWS cloud controller manager's \
             v1.{minor} line (rendered from kubernetesVersion)"
        )],
        safe_because: vec![
            format!(
                "the API server already serves 1.{minor}; a cloud controller manager is not run \
                 newer than its API server"
            ),
            "it reconciles Node objects only; no node is replaced".into(),
        ],
        commands: vec!["kubean-karpenter apply SPEC   # new cluster: cloud/ changed".into()],
        drift: Vec::new(),
    });

    for pool in &spec.pools {
        let drift = drift_of(pool, request);
        match pin_of(pool) {
            Pin::Alias(_) => {}
            Pin::Release { value, .. } => {
                let resolved = request.resolved.get(&pool.name);
                let date = resolved.map_or("<date>".to_owned(), |r| r.date.clone());
                let new = resolved
                    .and_then(|r| r.release_version.clone())
                    .unwrap_or_else(|| format!("{to}-{date}"));
                steps.push(Step {
                    title: format!("Pool {}: AMI to a 1.{minor} release", pool.name),
                    changes: vec![format!(
                        "ami.ssmRelease {value} -> {new}{}; every node of the pool is replaced \
                         (AMI drift)",
                        resolved.map_or(String::new(), |r| format!(" ({})", r.image_id))
                    )],
                    safe_because: vec![
                        format!(
                            "the new kubelet (1.{minor}) equals the API server's minor, never newer"
                        ),
                        "Karpenter launches each replacement and waits for it to initialize \
                         before draining the old node"
                            .into(),
                    ],
                    commands: vec![
                        format!(
                            "kubean-karpenter ami resolve --spec SPEC --pool {} --kubernetes 1.{minor}",
                            pool.name
                        ),
                        format!(
                            "kubean-karpenter ami pin SPEC --pool {} --release v{date}",
                            pool.name
                        ),
                        "kubean-karpenter render SPEC -o bundle --force && kubean-karpenter apply SPEC".into(),
                    ],
                    drift: vec![drift],
                });
            }
            Pin::Id(id) => steps.push(Step {
                title: format!("Pool {}: custom image with a 1.{minor} kubelet", pool.name),
                changes: vec![format!(
                    "ami.id {id} -> an image with kubeadm and kubelet 1.{minor}; every node of the \
                     pool is replaced (AMI drift)"
                )],
                safe_because: vec![
                    format!("a 1.{minor} kubelet equals the API server's minor, never newer"),
                    "Karpenter launches each replacement and waits for it to initialize \
                     before draining the old node"
                        .into(),
                ],
                commands: vec![
                    "kubean-karpenter ami list --owner self --name '<your image pattern>'".into(),
                    format!(
                        "kubean-karpenter ami pin SPEC --pool {} --id ami-…",
                        pool.name
                    ),
                    "kubean-karpenter render SPEC -o bundle --force && kubean-karpenter apply SPEC"
                        .into(),
                ],
                drift: vec![drift],
            }),
        }
    }

    steps.extend(gpu_operator_steps(spec));

    let notes = vec![
        format!(
            "Durations: one drift command per ~{DRIFT_LOOP_SECONDS} s disruption loop, each \
             replacement {} s from launch to a usable node (default: the lab's measured CPU \
             pool, docs/guide/verify-and-doctor.md; measure yours with `verify --pool P`, \
             pass --replace-seconds): \
             about max(nodes × {DRIFT_LOOP_SECONDS} s, ceil(nodes / at once) × {} s), plus \
             draining.",
            request.replace_seconds, request.replace_seconds
        ),
        "A pod that a PodDisruptionBudget or karpenter.sh/do-not-disrupt protects makes its \
         node ineligible for drift (the spec's pools set no terminationGracePeriod, which would \
         override it): see which with `kubean-karpenter plan --disrupt -f <state>`."
            .into(),
        "Karpenter replaces drifted nodes empty ones first, then by drift time; ties are common \
         and their order is not deterministic."
            .into(),
    ];
    Ok(UpgradePlan {
        from,
        to,
        kubean_release: release.0,
        karpenter_version: spec.karpenter.version.clone(),
        steps,
        replace_seconds: request.replace_seconds,
        notes,
    })
}

/// The GPU Operator's release lines between the spec's pin and the versions table's default, one
/// step each: NVIDIA supports upgrades only within a release line or to the next one, so a pin
/// two lines behind takes two applies. No steps without `stack: operator` or a pin behind.
pub fn gpu_operator_steps(spec: &kk_spec::ClusterSpec) -> Vec<Step> {
    use kk_spec::versions;
    let Some(gpu) = spec
        .gpu
        .as_ref()
        .filter(|g| g.stack == kk_spec::GpuSoftware::Operator)
    else {
        return Vec::new();
    };
    let operator = versions::component(versions::GPU_OPERATOR);
    let target = versions::default_version(versions::GPU_OPERATOR);
    let Ok(path) = operator.line_by_line_path(gpu.operator_release(), target) else {
        return Vec::new();
    };
    let mut from = gpu.operator_release().to_owned();
    let mut steps = Vec::new();
    for release in path {
        let standing = release
            .support
            .map(|s| format!(" (NVIDIA: {})", s.as_str()))
            .unwrap_or_default();
        steps.push(Step {
            title: format!("GPU Operator {from} -> {}{standing}", release.version),
            changes: vec![format!(
                "the gpu-operator Helm release in the `{}` namespace: chart {}, its operand \
                 images (`kubean-karpenter versions` lists them)",
                crate::gpu_operator::NAMESPACE,
                release.version
            )],
            safe_because: vec![
                format!(
                    "{} is the next release line after {from}: NVIDIA supports upgrades only \
                     within a line or to the next one",
                    release.version
                ),
                "the operands restart node by node (RollingUpdate); running GPU pods keep their \
                 devices"
                    .into(),
            ],
            commands: vec![
                format!("set spec.gpu.operatorVersion: {} in SPEC", release.version),
                "kubean-karpenter render SPEC -o bundle --force && kubean-karpenter apply SPEC"
                    .into(),
                format!(
                    "kubectl -n {} get clusterpolicies.nvidia.com cluster-policy \
                     -o jsonpath='{{.status.state}}'   # ready before the next step",
                    crate::gpu_operator::NAMESPACE
                ),
            ],
            drift: Vec::new(),
        });
        from = release.version.clone();
    }
    steps
}

/// The plan as text, one numbered step at a time.
pub fn to_text(plan: &UpgradePlan) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Upgrade {} -> {} (Kubean {}, Karpenter {}): {} steps, in this order",
        plan.from,
        plan.to,
        plan.kubean_release,
        plan.karpenter_version,
        plan.steps.len()
    );
    let replace = plan.replace_seconds;
    for (i, step) in plan.steps.iter().enumerate() {
        let _ = writeln!(s, "\n{}. {}", i + 1, step.title);
        for c in &step.changes {
            let _ = writeln!(s, "   changes: {c}");
        }
        for c in &step.safe_because {
            let _ = writeln!(s, "   safe:    {c}");
        }
        for d in &step.drift {
            let _ = writeln!(s, "   drift:   {}", drift_line(d, replace));
        }
        for c in &step.commands {
            let _ = writeln!(s, "   run:     {c}");
        }
    }
    let _ = writeln!(s);
    for n in &plan.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}
