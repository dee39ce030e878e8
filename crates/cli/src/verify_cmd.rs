//! `verify`: proves scale-up for every pool (kk_live::verify), with live progress, a phase
//! timing table, the stalled phase's likely causes plus the failing doctor checks, and
//! clean-up on success, failure and Ctrl-C. Exit 0 all passed, 1 a pool did not, 2 error.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use kk_live::doctor::{self, Facts, Status};
use kk_live::verify::{self, CudaProof, Outcome, PoolResult, PoolTarget, VerifyOptions};
use kk_model::yaml::{LoadLimits, load_documents};

use crate::Failure;

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The ElasticCluster spec (its pools and verify/ workloads).
    spec: String,
    /// Only these pools (repeatable; default: every pool).
    #[arg(long = "pool")]
    pools: Vec<String>,
    /// How long each phase may take before verify stops that pool and says why.
    #[arg(long, default_value = "5m", value_parser = kk_live::token::parse_duration)]
    timeout: Duration,
    /// Replicas of the CPU pools' inflate workload.
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// What proves the CUDA pod passed: `logs` (Succeeded with "Test PASSED", a real GPU) or
    /// `scheduled` (Running on a Node advertising nvidia.com/gpu: fake runtimes, which run no
    /// CUDA code, such as the lab's).
    #[arg(long, value_parser = ["logs", "scheduled"], default_value = "logs")]
    cuda_proof: String,
    /// Namespace for the verification workloads.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The new cluster.
    #[command(flatten)]
    kube: crate::flags::KubeFlags,
    /// Do not run doctor's checks when a phase stalls.
    #[arg(long)]
    no_doctor: bool,
    /// After the first CPU pool's scale-up, reclaim the node verify launched for it: one
    /// synthetic spot interruption warning sent to the spec's interruption queue
    /// (sqs:SendMessage), then the drain and the replacement timed phase by phase. Opt-in:
    /// Karpenter terminates that instance itself and blocks its spot offering (instance type
    /// and zone) for the whole cluster for 3 minutes. That pool's workload asks for spot; a
    /// node verify did not launch is never named.
    #[arg(long)]
    interruption: bool,
    /// Output: text (progress on stderr, table on stdout), json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

/// Everything from the cluster (notes, what verify saw, errors) is escaped: a node or a pod
/// writes those bytes (issue 47).
fn table(results: &[PoolResult]) -> String {
    use kk_model::visible;
    let mut out = String::new();
    for r in results {
        out.push_str(&format!("pool {}\n", r.pool));
        let mut prev = Duration::ZERO;
        for p in &r.phases {
            out.push_str(&format!(
                "  {:<34} {:>7.1}s  (+{:.1}s)\n",
                p.name,
                p.at.as_secs_f64(),
                p.at.saturating_sub(prev).as_secs_f64()
            ));
            prev = p.at;
        }
        match &r.outcome {
            Outcome::Passed { note } => {
                out.push_str("  PASSED\n");
                if let Some(n) = note {
                    out.push_str(&format!("  note: {}\n", visible(n)));
                }
            }
            Outcome::Stalled {
                phase,
                after,
                causes,
                evidence,
            } => {
                out.push_str(&format!(
                    "  STALLED at \"{phase}\" after {:.0}s\n",
                    after.as_secs_f64()
                ));
                for e in evidence {
                    out.push_str(&format!("    saw: {}\n", visible(e)));
                }
                for c in causes {
                    out.push_str(&format!("    likely causes: {}\n", visible(c)));
                }
            }
            Outcome::Error(e) => out.push_str(&format!("  ERROR {}\n", visible(e))),
        }
    }
    out
}

pub fn run(args: VerifyArgs) -> Result<ExitCode, Failure> {
    let (loaded, base) = crate::load_spec(&args.spec)?;
    let bundle = crate::files::render_spec(&loaded, &base)?;
    let spec = &loaded.spec.spec;
    let mut targets = Vec::new();
    for pool in &spec.pools {
        if !args.pools.is_empty() && !args.pools.contains(&pool.name) {
            continue;
        }
        let file = format!("verify/{}.yaml", pool.name);
        let text = bundle
            .files
            .get(&file)
            .ok_or_else(|| Failure::msg(format!("the bundle has no {file}")))?;
        let docs = load_documents(text, LoadLimits::default())
            .map_err(|e| Failure::msg(format!("{file}:{e}")))?;
        let workload = docs
            .into_iter()
            .next()
            .ok_or_else(|| Failure::msg(format!("{file} is empty")))?
            .value;
        targets.push(PoolTarget {
            pool: pool.name.clone(),
            gpu: pool.gpu.is_some(),
            workload,
        });
    }
    for want in &args.pools {
        if !spec.pools.iter().any(|p| &p.name == want) {
            return Err(Failure::msg(format!("the spec has no pool {want}")));
        }
    }
    let options = VerifyOptions {
        namespace: args.namespace.clone(),
        replicas: args.replicas,
        phase_timeout: args.timeout,
        cuda: if args.cuda_proof == "scheduled" {
            CudaProof::Scheduled
        } else {
            CudaProof::Logs
        },
        run_id: verify::new_run_id(),
        interruption: args.interruption,
    };
    // The pool whose node --interruption reclaims, and the queue the warning goes to.
    let reclaimed = if args.interruption {
        let queue = kk_spec::interruption::queue_name(&loaded.spec).ok_or_else(|| {
            Failure::msg(
                "--interruption: the spec has no interruption queue (no pool allows spot, or interruptionQueue is \"\")"
                    .into(),
            )
        })?;
        let pool = targets
            .iter()
            .find(|t| !t.gpu)
            .ok_or_else(|| {
                Failure::msg("--interruption needs a CPU pool among those verified".into())
            })?
            .pool
            .clone();
        eprintln!(
            "--interruption: after {pool}'s scale-up, verify sends a spot interruption warning to queue {queue} for the node it launched; Karpenter drains it, terminates the instance and blocks that spot offering for the whole cluster for 3 minutes"
        );
        Some((pool, queue))
    } else {
        None
    };
    let client_options = args.kube.or_spec(spec.access.as_ref(), &base);
    let mut facts = Facts::from_spec(&loaded.spec);
    facts.grace = Duration::ZERO;
    if let Some(text) = bundle.files.get("iam/controller-policy.json") {
        facts.rendered_controller_policy = serde_json::from_str(text).ok();
    }
    let region = spec.aws.region.clone();
    let tty = std::io::stderr().is_terminal();
    let progress = move |pool: &str, phase: &str, at: Duration| {
        let mut err = std::io::stderr().lock();
        if tty {
            let _ = write!(err, "\r\x1b[K");
        }
        let _ = writeln!(err, "{pool}: {phase} after {:.1}s", at.as_secs_f64());
    };
    // On a terminal, one status line that ticks while a phase is awaited; plain lines only
    // otherwise (logs, CI).
    let timeout = args.timeout;
    let waiting = move |pool: &str, phase: &str, waited: Duration| {
        if tty {
            let _ = write!(
                std::io::stderr().lock(),
                "\r\x1b[K{pool}: waiting for {phase}… {}s (timeout {}s)",
                waited.as_secs(),
                timeout.as_secs()
            );
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (results, interrupted, cleaned) = runtime.block_on(async {
        let connected =
            kk_live::client::connect(&client_options, kk_live::client::Timeouts::OneShot)
                .await
                .map_err(Failure::from)?;
        let (client, probe) = (connected.client, connected.config);
        let reclaim_sdk = match &reclaimed {
            Some(_) => Some(
                kk_live::store::aws_config(Some(region.clone()), None)
                    .await
                    .map_err(|e| Failure::context("aws", e))?,
            ),
            None => None,
        };
        let reclaim = match (&reclaimed, &reclaim_sdk) {
            (Some((_, queue)), Some(sdk)) => {
                Some(verify::Reclaim::new(sdk, queue.clone(), &loaded.spec))
            }
            _ => None,
        };
        let work = async {
            let mut results = Vec::new();
            for t in &targets {
                eprintln!(
                    "{}: creating kk-verify-{} (run {})",
                    t.pool, t.pool, options.run_id
                );
                let reclaim = reclaim
                    .as_ref()
                    .filter(|_| reclaimed.as_ref().is_some_and(|(pool, _)| *pool == t.pool));
                let mut r =
                    verify::verify_pool(&client, t, &options, reclaim, &progress, &waiting).await;
                if tty {
                    eprint!("\r\x1b[K");
                }
                if let Outcome::Stalled { evidence, .. } = &mut r.outcome
                    && !args.no_doctor
                {
                    let sdk = kk_live::store::aws_config(Some(region.clone()), None)
                        .await
                        .ok();
                    let report = doctor::run(&client, &probe, sdk.as_ref(), &facts).await;
                    for c in report.checks.iter().filter(|c| c.status == Status::Fail) {
                        evidence.push(format!("doctor {} failed: {}", c.id, c.evidence.join("; ")));
                    }
                }
                results.push(r);
            }
            results
        };
        let (results, interrupted) = tokio::select! {
            r = work => (r, false),
            _ = tokio::signal::ctrl_c() => (Vec::new(), true),
        };
        let cleaned = verify::cleanup(&client, &options.namespace, &options.run_id).await;
        Ok::<_, Failure>((results, interrupted, cleaned))
    })?;
    for c in &cleaned {
        eprintln!("cleaned up {c}");
    }
    if interrupted {
        eprintln!("interrupted: cleaned up {} object(s)", cleaned.len());
        return Ok(ExitCode::from(130));
    }
    if args.output.is_structured() {
        let v = serde_json::json!({
            "runId": options.run_id,
            "passed": results.iter().all(PoolResult::passed),
            "pools": results.iter().map(PoolResult::to_json).collect::<Vec<_>>(),
            "cleanedUp": cleaned,
        });
        crate::flags::print_structured(&v, args.output)?;
    } else {
        print!("{}", table(&results));
    }
    Ok(if results.iter().all(PoolResult::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_live::verify::{Phase, PoolResult};

    /// The attack (issue 47): what verify saw (an Event's message, a pod's reason) carries an
    /// escape sequence or a newline that forges a PASSED line; the table shows it escaped.
    #[test]
    fn what_verify_saw_in_the_cluster_is_printed_escaped() {
        let results = [PoolResult {
            pool: "gpu".into(),
            phases: vec![Phase {
                name: "NodeClaim created".into(),
                at: Duration::from_secs(3),
            }],
            outcome: Outcome::Stalled {
                phase: "Node Ready".into(),
                after: Duration::from_secs(600),
                causes: vec!["\u{1b}]0;pwned\u{7}".into()],
                evidence: vec!["event: x\n  PASSED".into()],
            },
        }];
        let text = table(&results);
        assert!(
            !text
                .chars()
                .any(|c| c != '\n' && kk_model::visible::is_unsafe(c)),
            "{text:?}"
        );
        assert!(!text.contains("\n  PASSED"), "a forged line: {text}");
        assert!(text.contains("saw: event: x\\n  PASSED"), "{text}");
    }
}
