//! `controller`: the in-cluster rotator that keeps the join store valid (fresh bootstrap
//! tokens published before the old ones lapse), approves node CSRs from our tokens for
//! instances a NodeClaim names, and serves metrics; one leader by Lease.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use kk_live::controller::{Controller, ControllerConfig, LeaseConfig};
use kk_live::token::parse_duration;

use crate::Failure;
use crate::flags::KubeFlags;
use crate::token_cmd::{StoreArgs, resolve_target, runtime};

fn parse_fraction(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!("{text} must be between 0 and 1 (exclusive)"))
    }
}

/// `--orphan-node-grace`: a duration, or `off`.
#[derive(Debug, Clone, Copy)]
struct Grace(Option<Duration>);

fn parse_grace(text: &str) -> Result<Grace, String> {
    match text {
        "off" => Ok(Grace(None)),
        t => parse_duration(t)
            .map(|d| Grace(Some(d)))
            .map_err(|e| e.to_string()),
    }
}

#[derive(clap::Args, Debug)]
pub struct ControllerArgs {
    #[command(flatten)]
    kube: KubeFlags,
    #[command(flatten)]
    store: StoreArgs,
    /// Lifetime of each token (at most 24h).
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    ttl: Duration,
    /// Replace a token once this fraction of its lifetime has passed.
    #[arg(long, default_value = "0.5", value_parser = parse_fraction)]
    rotate_at: f64,
    /// How long a replaced token keeps working before it is deleted: longer than a node
    /// takes from reading the store to sending its CSR (Karpenter gives up after 15 min).
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    overlap: Duration,
    /// How often the leader decides pending node CSRs from kubean-karpenter join tokens
    /// (approved only for an instance a NodeClaim names; see docs/guide/join-credentials.md).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    approve_interval: Duration,
    /// Do not run the CSR approver (nodes joining with our tokens then wait for a manual
    /// `kubectl certificate approve`).
    #[arg(long, conflicts_with = "csr_approver_only")]
    no_csr_approver: bool,
    /// Run only the CSR approver: no store, no tokens, no AWS (the rendered
    /// `kubean-karpenter-csr-approver` Deployment, under its own service account).
    #[arg(long)]
    csr_approver_only: bool,
    /// With the CSR approver: remove a Node named like an EC2 instance that no NodeClaim names
    /// once it is this old (a terminated instance's credentials registering it again); "off"
    /// keeps such Nodes. See docs/guide/join-credentials.md.
    #[arg(long, default_value = "5m", value_parser = parse_grace)]
    orphan_node_grace: Grace,
    /// How often the leader checks the store and the token.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    tick: Duration,
    /// How soon to try again after a failure.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    retry: Duration,
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    #[arg(long, default_value = "kubean-karpenter-rotator")]
    lease_name: String,
    /// Lease duration: renewed every third of it; a follower takes over once it lapses.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// Holder identity (default: $POD_NAME or the host name, plus a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// Address for /metrics, /healthz and /readyz; "off" serves none.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: String,
    /// Log format on standard error.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    #[command(flatten)]
    health: HealthAgentArgs,
    /// Run only the budget controller: keep each budgeted NodePool's limit where its spend
    /// budget puts it (docs/guide/budgets.md). No store, no tokens, no AWS.
    #[arg(long, conflicts_with_all = ["csr_approver_only", "health_agent"])]
    budget_only: bool,
    /// With --budget-only: how often the limits are recomputed from the cluster's state.
    #[arg(long, default_value = "30s", value_parser = parse_duration, requires = "budget_only")]
    budget_tick: Duration,
}

/// The node health agent's flags (the rendered `kubean-karpenter-health-agent` DaemonSet).
#[derive(clap::Args, Debug)]
struct HealthAgentArgs {
    /// Run as the node health agent: read this node's kernel log and write the node
    /// conditions Karpenter's node repair reads (docs/guide/gpus-and-training.md). No store,
    /// no tokens, no leader.
    #[arg(long, conflicts_with = "csr_approver_only")]
    health_agent: bool,
    /// The Node the agent runs on.
    #[arg(long, env = "NODE_NAME", requires = "health_agent")]
    node: Option<String>,
    /// The kernel log: /dev/kmsg, or a file of kernel messages (one per line).
    #[arg(long, default_value = "/dev/kmsg", requires = "health_agent")]
    kernel_log: std::path::PathBuf,
    /// What to watch: gpu (NVIDIA XIDs), kernel (a read-only or shut-down filesystem), or both.
    #[arg(long, value_delimiter = ',', value_parser = ["gpu", "kernel"], default_value = "gpu", requires = "health_agent")]
    watch: Vec<String>,
    /// Where this boot's ID is read (a condition written False in this boot survives a restart).
    #[arg(
        long,
        default_value = "/proc/sys/kernel/random/boot_id",
        requires = "health_agent"
    )]
    boot_id_file: std::path::PathBuf,
    /// How often the kernel log is looked at again when idle.
    #[arg(long, default_value = "1s", value_parser = parse_duration, requires = "health_agent")]
    poll: Duration,
}

pub fn controller(args: ControllerArgs) -> Result<ExitCode, Failure> {
    if args.csr_approver_only {
        return approver_only(args);
    }
    if args.health.health_agent {
        return health_agent(args);
    }
    if args.budget_only {
        return budget_only(args);
    }
    let target = resolve_target(&args.store, true)?.ok_or_else(|| {
        Failure::msg(
            "the controller needs a store: --spec FILE, or --cluster, --store and --api-server"
                .into(),
        )
    })?;
    let metrics_addr = metrics_addr(&args)?;
    kk_live::controller::init_logging(args.log_format == "json");
    runtime()?.block_on(async {
        let connected =
            kk_live::client::connect(&args.kube.options(), kk_live::client::Timeouts::Controller)
                .await?;
        let config = ControllerConfig {
            cluster: target.cluster.clone(),
            api_server_endpoint: target.endpoint.clone(),
            ca_cert_hash: target.ca_hash(&connected)?,
            ttl: args.ttl,
            rotate_at: args.rotate_at,
            overlap: args.overlap,
            approve_every: (!args.no_csr_approver).then_some(args.approve_interval),
            orphan_grace: args.orphan_node_grace.0.filter(|_| !args.no_csr_approver),
            tick: args.tick,
            retry: args.retry,
            lease: lease(&args),
        };
        let store = target.open().await?;
        let mut controller = Controller::new(connected.config, store, config)?;
        if let Some(addr) = metrics_addr {
            let bound = controller.bind(addr).await?;
            eprintln!("serving /metrics, /healthz and /readyz on {bound}");
        }
        controller.run(kk_live::controller::shutdown_signal()).await;
        Ok::<_, Failure>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn metrics_addr(args: &ControllerArgs) -> Result<Option<SocketAddr>, Failure> {
    Ok(match args.metrics_addr.as_str() {
        "off" | "" => None,
        a => Some(
            a.parse()
                .map_err(|_| Failure::msg(format!("--metrics-addr {a:?}: expected host:port")))?,
        ),
    })
}

fn lease(args: &ControllerArgs) -> LeaseConfig {
    LeaseConfig {
        namespace: args.lease_namespace.clone(),
        name: args.lease_name.clone(),
        identity: args
            .identity
            .clone()
            .unwrap_or_else(kk_live::controller::default_identity),
        duration: args.lease_duration,
    }
}

/// `--budget-only`: the budget controller under its own service account and Lease.
fn budget_only(args: ControllerArgs) -> Result<ExitCode, Failure> {
    use kk_live::controller::budget::{BudgetConfig, BudgetController};
    let metrics_addr = metrics_addr(&args)?;
    kk_live::controller::init_logging(args.log_format == "json");
    runtime()?.block_on(async {
        let connected =
            kk_live::client::connect(&args.kube.options(), kk_live::client::Timeouts::Controller)
                .await?;
        let config = BudgetConfig {
            tick: args.budget_tick,
            record_namespace: args.lease_namespace.clone(),
            lease: lease(&args),
        };
        let mut controller = BudgetController::new(
            connected.config,
            config,
            std::sync::Arc::new(crate::budget::SimJudge),
        )?;
        if let Some(addr) = metrics_addr {
            let bound = controller.bind(addr).await?;
            eprintln!("serving /metrics, /healthz and /readyz on {bound}");
        }
        controller.run(kk_live::controller::shutdown_signal()).await;
        Ok::<_, Failure>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `--csr-approver-only`: the approver under its own service account and Lease.
fn approver_only(args: ControllerArgs) -> Result<ExitCode, Failure> {
    let metrics_addr = metrics_addr(&args)?;
    kk_live::controller::init_logging(args.log_format == "json");
    runtime()?.block_on(async {
        let connected =
            kk_live::client::connect(&args.kube.options(), kk_live::client::Timeouts::Controller)
                .await?;
        let mut controller = Controller::approver_only(
            connected.config,
            args.approve_interval,
            args.orphan_node_grace.0,
            lease(&args),
        )?;
        if let Some(addr) = metrics_addr {
            let bound = controller.bind(addr).await?;
            eprintln!("serving /metrics, /healthz and /readyz on {bound}");
        }
        controller.run(kk_live::controller::shutdown_signal()).await;
        Ok::<_, Failure>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `--health-agent`: one node's health conditions, under the agent's own service account.
fn health_agent(args: ControllerArgs) -> Result<ExitCode, Failure> {
    use kk_live::controller::health_agent::{HealthAgent, HealthAgentConfig, boot_id};
    let health = &args.health;
    let node = health
        .node
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Failure::msg("--health-agent needs --node (or $NODE_NAME)".into()))?;
    let config = HealthAgentConfig {
        node,
        kernel_log: health.kernel_log.clone(),
        watch: kk_live::controller::health_agent::Watch {
            gpu: health.watch.iter().any(|w| w == "gpu"),
            kernel: health.watch.iter().any(|w| w == "kernel"),
        },
        boot_id: boot_id(&health.boot_id_file)?,
        poll: health.poll,
    };
    let metrics_addr = metrics_addr(&args)?;
    kk_live::controller::init_logging(args.log_format == "json");
    runtime()?.block_on(async {
        let connected =
            kk_live::client::connect(&args.kube.options(), kk_live::client::Timeouts::Controller)
                .await?;
        let mut agent = HealthAgent::new(connected.config, config)?;
        if let Some(addr) = metrics_addr {
            let bound = agent.bind(addr).await?;
            eprintln!("serving /metrics and /healthz on {bound}");
        }
        agent.run(kk_live::controller::shutdown_signal()).await?;
        Ok::<_, Failure>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ControllerArgs,
    }

    /// The rendered approver's flags parse (a mistyped clap field panics only at run time).
    #[test]
    fn the_orphan_grace_parses_as_a_duration_or_off() {
        let parse = |grace: &str| {
            Wrapper::try_parse_from(["controller", "--csr-approver-only", grace])
                .map(|w| w.args.orphan_node_grace.0)
        };
        assert_eq!(
            parse("--orphan-node-grace=5m").unwrap(),
            Some(Duration::from_secs(300))
        );
        assert_eq!(parse("--orphan-node-grace=off").unwrap(), None);
        assert!(parse("--orphan-node-grace=soon").is_err());
        let default = Wrapper::try_parse_from(["controller"]).unwrap();
        assert_eq!(
            default.args.orphan_node_grace.0,
            Some(Duration::from_secs(300))
        );
    }

    #[test]
    fn the_budget_controller_runs_alone() {
        let budget =
            Wrapper::try_parse_from(["controller", "--budget-only", "--budget-tick=10s"]).unwrap();
        assert!(budget.args.budget_only);
        assert_eq!(budget.args.budget_tick, Duration::from_secs(10));
        for other in ["--csr-approver-only", "--health-agent"] {
            assert!(Wrapper::try_parse_from(["controller", "--budget-only", other]).is_err());
        }
        assert!(Wrapper::try_parse_from(["controller", "--budget-tick=10s"]).is_err());
    }
}
