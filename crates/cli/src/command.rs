//! The command line's shape: every command, its one-line help and the page that explains it,
//! and which module runs it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::*;

#[derive(Parser)]
#[command(
    name = "kubean-karpenter",
    version = version_cmd::VERSION_LINE,
    about = "Kubean-built Kubernetes clusters with Karpenter elastic CPU and GPU EC2 workers",
    long_about = "Turns one ElasticCluster spec into everything the Kubean + Karpenter runbook \
                  asks for: Kubean inventory and operations, Karpenter Helm values, EC2NodeClasses \
                  and NodePools whose userData really joins, the NVIDIA device plugin, IAM policies \
                  and verification workloads.\n\nExit codes: 0 ok, 1 findings, 2 usage or input error.",
    after_help = "Docs: README.md (quick start) and docs/reference/cli.md"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a commented example ElasticCluster spec (the seeds' CPU and GPU pools), or, with
    /// --discover, adopt a running Kubean-built cluster: a spec filled from the cluster, Kubean's
    /// management cluster and the AWS account, each value saying where it was read.
    #[command(after_help = "Docs: docs/guide/adopt.md")]
    Init(init_cmd::InitArgs),
    /// Check a spec and report every problem with file:line:col (exit 2 if any); warnings
    /// (a pinned patch older than the newest known of its minor) are printed, exit 0.
    #[command(after_help = "Docs: docs/guide/adopt.md")]
    Validate(validate_cmd::ValidateArgs),
    /// Render the whole bundle from a spec: kubean/, cloud/, karpenter/, nodeclasses/,
    /// nodepools/, gpu/, iam/, rotator/ (ssm and secrets-manager modes), verify/ and ORDER.md.
    #[command(after_help = "Docs: docs/guide/render-and-apply.md")]
    Render(render_cmd::RenderArgs),
    /// Lint manifests, a rendered bundle or a spec (rendered in memory): Karpenter, Kubean,
    /// NVIDIA device plugin and workloads, each object and across objects.
    #[command(after_help = "Docs: docs/reference/rules.md")]
    Lint(lint_cmd::LintArgs),
    /// Server-side apply, in order, after a server-side dry run of every object: a spec,
    /// a rendered bundle, or manifests. A refusal prints the apiserver's message and
    /// applies nothing.
    #[command(after_help = "Docs: docs/guide/render-and-apply.md")]
    Apply(apply_cmd::ApplyArgs),
    /// Read-only checks of the running cluster and its AWS account: the seed's checklist and
    /// failure points, each with evidence and a fix (exit 1 if one fails).
    #[command(after_help = "Docs: docs/guide/verify-and-doctor.md")]
    Doctor(doctor_cmd::DoctorArgs),
    /// Prove scale-up for every pool: follow pod Pending -> NodeClaim -> Launched -> Registered ->
    /// Initialized -> pod Running (-> GPU advertised, CUDA test), time each phase, and name the
    /// phase that stalls with its likely causes (exit 1). Cleans up what it created.
    #[command(after_help = "Docs: docs/guide/verify-and-doctor.md")]
    Verify(verify_cmd::VerifyArgs),
    /// Simulate Karpenter's scheduler: which NodeClaims (pool, instance types, capacity type,
    /// zone, $/h) the workloads would create, and which pods stay Pending and why
    /// (exit 1 if any).
    #[command(after_help = "Docs: docs/guide/plan.md")]
    Plan(Box<plan::PlanArgs>),
    /// The fleet, live: nodes (pool, type, capacity type, zone, age, $/h, CPU / memory / GPU
    /// requested of allocatable, state), pools with the use of their limits, NodeClaims in
    /// flight, Pending pods by plan's reason. Follows the cluster by watch; --once prints one
    /// snapshot (table, JSON or YAML).
    #[command(after_help = "Docs: docs/guide/monitoring.md")]
    Top(top::TopArgs),
    /// List EC2 instance types: GPUs, pods, allocatable CPU/memory (Karpenter's AWS
    /// overhead formulas) and on-demand/spot prices; filter by GPU, family, arch, vCPUs.
    #[command(after_help = "Docs: docs/reference/catalog.md")]
    Catalog(catalog_cmd::CatalogArgs),
    /// kubeadm bootstrap tokens: create (and publish to the join store), list, revoke.
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    Token {
        #[command(subcommand)]
        command: token_cmd::TokenCommand,
    },
    /// Stage 2 of the two-stage flow: write the new cluster's kubeconfig, which Kubean stored in
    /// its `<cluster>-kubeconf` ConfigMap on the management cluster, to a 0600 file (for
    /// `caBundle.kubeconfig` and `access`). Prints the CA hash, never the kubeconfig.
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    Kubeconfig(kubeconfig_cmd::KubeconfigArgs),
    /// Print the CA hash `kubeadm join --discovery-token-ca-cert-hash` pins (sha256:<hex>).
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    CaHash(token_cmd::CaHashArgs),
    /// The in-cluster join-token rotator: keeps a valid token in the SSM/Secrets Manager
    /// join store, leader-elected through a Lease, with /metrics, /healthz and /readyz.
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    Controller(Box<controller_cmd::ControllerArgs>),
    /// AMIs: list and resolve EKS-optimized AL2023 releases (SSM public parameters) and custom
    /// images (DescribeImages); pin one in a spec, in place.
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Ami {
        #[command(subcommand)]
        command: ami_cmd::AmiCommand,
    },
    /// Day-two Kubean operations: print the ClusterOperation that upgrades Kubernetes, adds or
    /// removes a Kubean node, or renews the control plane's certificates (checked first).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Kubean {
        #[command(subcommand)]
        command: kubean_cmd::KubeanCommand,
    },
    /// Kubernetes upgrades: `upgrade plan SPEC --to 1.36.x` (read-only).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Upgrade {
        #[command(subcommand)]
        command: upgrade_cmd::UpgradeCommand,
    },
    /// Print the version, git commit, build date and compiler (-o json|yaml for an object,
    /// with the component versions the bundle pins by default).
    #[command(after_help = "Docs: docs/reference/cli.md")]
    Version(version_cmd::VersionArgs),
    /// The versions table (every component, the releases known, digests where an upstream file
    /// pins one, sources) and the Kubernetes / Karpenter / CCM / Kubean compatibility matrix;
    /// with a spec, what it pins and whether each pin is the newest known patch.
    #[command(after_help = "Docs: docs/reference/versions.md")]
    Versions(versions_cmd::VersionsArgs),
    /// Every image the bundle and its Helm charts pull (repository:tag@digest, or tag-only
    /// with how to pin it), then Kubespray's for the spec's Kubean release and Kubernetes
    /// version, for mirroring with `skopeo copy`.
    #[command(after_help = "Docs: docs/reference/versions.md")]
    Images(versions_cmd::ImagesArgs),
    /// Print a shell completion script: `source <(kubean-karpenter completion bash)`, or save
    /// `completion zsh` as `_kubean-karpenter` in your $fpath, `completion fish` in
    /// ~/.config/fish/completions/kubean-karpenter.fish.
    #[command(after_help = "Docs: docs/reference/cli.md")]
    Completion(completion_cmd::CompletionArgs),
    /// Write a man page per command into DIR (kubean-karpenter-plan.1, ...); read one with
    /// `man -l DIR/kubean-karpenter-plan.1`, or add DIR's parent man/ tree to MANPATH.
    #[command(after_help = "Docs: docs/reference/cli.md")]
    Man(completion_cmd::ManArgs),
}

pub fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Lint(args) => lint_cmd::lint(args),
        Command::Apply(args) => apply_cmd::run(args),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Verify(args) => verify_cmd::run(args),
        Command::Kubeconfig(args) => kubeconfig_cmd::run(args),
        Command::Catalog(args) => catalog_cmd::run(args),
        Command::Plan(args) => plan::run(*args),
        Command::Top(args) => top::run(&args),
        Command::Token { command } => token_cmd::token(command),
        Command::CaHash(args) => token_cmd::ca_hash(args),
        Command::Controller(args) => controller_cmd::controller(*args),
        Command::Ami { command } => ami_cmd::run(command),
        Command::Kubean { command } => kubean_cmd::run(command),
        Command::Upgrade { command } => upgrade_cmd::run(command),
        Command::Version(args) => version_cmd::run(args),
        Command::Versions(args) => versions_cmd::versions(args),
        Command::Images(args) => versions_cmd::images(args),
        Command::Completion(args) => completion_cmd::completion(args),
        Command::Man(args) => completion_cmd::man(args),
        Command::Init(args) => init_cmd::run(args),
        Command::Validate(args) => validate_cmd::run(args),
        Command::Render(args) => render_cmd::run(args),
    }
}
