//! `kubean-karpenter`: the command line. Arguments are parsed here, files are read and
//! written here; everything else is the pure crates.
//!
//! Owns argument parsing, reading and writing files, output formats and exit codes. Must not
//! hold domain logic; no crate depends on it.
//!
//! Exit codes: 0 success, 1 findings, 2 usage or input error.

/// mimalloc, not glibc's malloc: a large plan or disruption pass frees hundreds of thousands
/// of small blocks, and glibc spent about half of a 5,000-node pass merging them afterwards.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod ami_cmd;
mod ami_pin_cmd;
mod apply_cmd;
mod catalog_cmd;
mod completion_cmd;
mod controller_cmd;
mod doctor_cmd;
mod files;
mod init_cmd;
mod kubean_cmd;
mod kubeconfig_cmd;
mod lint_cmd;
mod plan_cmd;
mod report;
mod sources;
mod token_cmd;
mod top;
mod upgrade_cmd;
mod verify_cmd;
mod version_cmd;
mod versions_cmd;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kk_spec::{EXAMPLE, EXAMPLE_FILE, LoadedSpec, parse_spec};

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
struct Cli {
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
    Validate {
        /// The spec file, or - for standard input.
        spec: String,
    },
    /// Render the whole bundle from a spec: kubean/, cloud/, karpenter/, nodeclasses/,
    /// nodepools/, gpu/, iam/, rotator/ (ssm and secrets-manager modes), verify/ and ORDER.md.
    #[command(after_help = "Docs: docs/guide/render-and-apply.md")]
    Render {
        /// The spec file, or - for standard input. Omit with --example.
        #[arg(required_unless_present = "example", conflicts_with = "example")]
        spec: Option<String>,
        /// Render the built-in example spec (the one `init` prints).
        #[arg(long)]
        example: bool,
        /// Output directory (replaced as a whole, never half-written), or - to print the
        /// Kubernetes manifests to standard output in apply order.
        #[arg(short = 'o', long = "output", default_value = "bundle")]
        output: String,
        /// Replace an existing output directory.
        #[arg(long)]
        force: bool,
    },
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
    Plan(Box<plan_cmd::PlanArgs>),
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

/// An error the user must act on; printed once, exit 2.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(Failure(message)) => {
            // Errors quote what the cluster or AWS answered: escaped for the terminal, line by
            // line (a located error spans lines of its own).
            let lines: Vec<_> = message.split('\n').map(kk_model::visible).collect();
            eprintln!("error: {}", lines.join("\n"));
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Lint(args) => lint_cmd::lint(args),
        Command::Apply(args) => apply_cmd::run(args),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Verify(args) => verify_cmd::run(args),
        Command::Kubeconfig(args) => kubeconfig_cmd::run(args),
        Command::Catalog(args) => catalog_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(*args),
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
        Command::Validate { spec } => {
            let (loaded, _) = load_spec(&spec)?;
            let warnings = print_warnings(&loaded);
            let pools = loaded.spec.spec.pools.len();
            println!(
                "{}: ElasticCluster {} is valid ({pools} pool{}{})",
                loaded.file,
                loaded.spec.metadata.name,
                if pools == 1 { "" } else { "s" },
                match warnings {
                    0 => String::new(),
                    1 => ", 1 warning".into(),
                    n => format!(", {n} warnings"),
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Render {
            spec,
            example,
            output,
            force,
        } => {
            let (loaded, base_dir) = if example {
                (load_text(EXAMPLE, EXAMPLE_FILE)?, PathBuf::from("."))
            } else {
                load_spec(spec.as_deref().unwrap_or("-"))?
            };
            print_warnings(&loaded);
            let bundle = files::render_spec(&loaded, &base_dir)?;
            if output == "-" {
                let mut out = std::io::stdout().lock();
                for (i, (path, object)) in bundle.manifests().iter().enumerate() {
                    if i > 0 {
                        writeln!(out, "---")?;
                    }
                    writeln!(out, "# Source: {path}")?;
                    out.write_all(serde_saphyr::to_string(object)?.as_bytes())?;
                }
            } else {
                let dir = Path::new(&output);
                files::write_bundle_atomically(dir, &bundle, force)?;
                eprintln!(
                    "wrote {} files to {} (read {}/ORDER.md for the apply order)",
                    bundle.files.len(),
                    dir.display(),
                    dir.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// How to reach the new cluster: `--kubeconfig`/`--context` when either is given, else the
/// spec's `access` (its kubeconfig relative to the spec's folder), else kubectl's defaults.
pub(crate) fn client_options(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    access: Option<&kk_spec::ClusterAccess>,
    base: &std::path::Path,
) -> kk_live::ClientOptions {
    if kubeconfig.is_some() || context.is_some() {
        return kk_live::ClientOptions {
            kubeconfig: kubeconfig.map(std::path::Path::to_path_buf),
            context: context.map(str::to_owned),
        };
    }
    access
        .map(|a| kk_live::ClientOptions {
            kubeconfig: a.kubeconfig.as_ref().map(|k| base.join(k)),
            context: a.context.clone(),
        })
        .unwrap_or_default()
}

/// The spec's warnings (valid, but probably not meant), and those of the day (a Kubernetes
/// minor past its end of life), one `warning:` line each on stderr; how many.
fn print_warnings(loaded: &LoadedSpec) -> usize {
    let today = kk_spec::kubernetes_support::today();
    let mut all = loaded.warnings.clone();
    all.extend(loaded.dated_warnings(&today));
    all.sort_by_key(|w| w.pos);
    for warning in &all {
        eprintln!("warning: {warning}");
    }
    all.len()
}

/// Reads a spec from a path or `-`; returns it with the directory relative paths resolve against.
pub(crate) fn load_spec(arg: &str) -> Result<(LoadedSpec, PathBuf), Failure> {
    sources::read_spec(arg)
}

fn load_text(text: &str, file: &str) -> Result<LoadedSpec, Failure> {
    parse_spec(text, file).map_err(|errors| sources::spec_failure(&errors, file))
}
