//! `doctor`: read-only checks of a running cluster and its AWS account (kk_live::doctor),
//! printed as a table or as JSON/YAML; exit 1 when a check fails.

use std::io::Write;
use std::process::ExitCode;

use kk_live::doctor::{self, Facts, Status};

use crate::Failure;

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// The ElasticCluster spec the cluster was built from. Optional with --permissions.
    #[arg(required_unless_present = "permissions")]
    spec: Option<String>,
    /// The new cluster.
    #[command(flatten)]
    kube: crate::flags::KubeFlags,
    /// The Karpenter controller's IAM role: its live policies are read and evaluated
    /// (iam:PassRole). Without it, the rendered iam/controller-policy.json is evaluated.
    #[arg(long)]
    controller_role: Option<String>,
    /// How long a NodeClaim, Node or pod may stay in an intermediate state (launched but not
    /// registered, uninitialized, Pending) before its check fails rather than warns.
    #[arg(long, default_value = "2m", value_parser = kk_live::token::parse_duration)]
    grace: std::time::Duration,
    /// AWS region (default: the spec's).
    #[arg(long)]
    region: Option<String>,
    /// Skip every AWS call (checks that need AWS are reported skipped).
    #[arg(long)]
    no_aws: bool,
    /// Print the read-only RBAC (ClusterRole) and IAM policy doctor needs, and exit.
    #[arg(long)]
    permissions: bool,
    /// Output: text, json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

pub fn run(args: DoctorArgs) -> Result<ExitCode, Failure> {
    if args.permissions {
        let store_arn = match &args.spec {
            Some(spec) => {
                let (loaded, _) = crate::load_spec(spec)?;
                let facts = Facts::from_spec(&loaded.spec);
                // The spec's partition: `arn:aws:` names nothing in aws-us-gov or aws-cn.
                let arns = kk_spec::arn::Arns::of(&loaded.spec.spec.aws);
                facts.store.map(|(kind, name)| match kind {
                    kk_live::store::StoreKind::Ssm => arns.ssm_parameter(&name),
                    kk_live::store::StoreKind::SecretsManager => arns.secret(&name),
                })
            }
            None => None,
        };
        let both = serde_json::json!({
            "clusterRole": doctor::permissions::cluster_role(),
            "iamPolicy": doctor::permissions::iam_policy(store_arn.as_deref()),
        });
        // The permissions are documents to apply: YAML unless JSON is asked for.
        let format = match args.output {
            crate::flags::OutputFormat::Json => crate::flags::OutputFormat::Json,
            _ => crate::flags::OutputFormat::Yaml,
        };
        crate::flags::print_structured(&both, format)?;
        return Ok(ExitCode::SUCCESS);
    }
    let spec_arg = args.spec.as_deref().unwrap_or("-");
    let (loaded, base) = crate::load_spec(spec_arg)?;
    let mut facts = Facts::from_spec(&loaded.spec);
    facts.grace = args.grace;
    facts.controller_role = args.controller_role.clone();
    let bundle = crate::files::render_spec(&loaded, &base)?;
    if let Some(text) = bundle.files.get("iam/controller-policy.json") {
        facts.rendered_controller_policy = serde_json::from_str(text).ok();
    }
    let options = args.kube.or_spec(loaded.spec.spec.access.as_ref(), &base);
    let region = args
        .region
        .clone()
        .unwrap_or_else(|| loaded.spec.spec.aws.region.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let connected = kk_live::client::connect(&options, kk_live::client::Timeouts::OneShot)
            .await
            .map_err(Failure::from)?;
        let (client, probe) = (connected.client, connected.config);
        let sdk = if args.no_aws {
            None
        } else {
            Some(
                kk_live::store::aws_config(Some(region), None)
                    .await
                    .map_err(Failure::from)?,
            )
        };
        Ok::<_, Failure>(doctor::run(&client, &probe, sdk.as_ref(), &facts).await)
    })?;
    if !args.output.is_structured() {
        write_text(&report, &mut std::io::stdout().lock())?;
    } else {
        crate::flags::print_structured(&report.to_json(), args.output)?;
    }
    Ok(if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The report as text. Evidence quotes the cluster (names, messages a node or a pod wrote):
/// every field is escaped for the terminal (issue 47).
fn write_text(report: &doctor::Report, out: &mut impl Write) -> std::io::Result<()> {
    use kk_model::visible;
    for c in &report.checks {
        writeln!(
            out,
            "{:<8} {:<28} {}",
            c.status.as_str().to_uppercase(),
            c.id,
            visible(c.title)
        )?;
        for e in &c.evidence {
            writeln!(out, "         {:<28}   {}", "", visible(e))?;
        }
        if c.status != Status::Ok && c.status != Status::Skipped && !c.fix.is_empty() {
            writeln!(out, "         {:<28}   fix: {}", "", visible(&c.fix))?;
        }
    }
    let summary = report.to_json()["summary"].clone();
    writeln!(
        out,
        "{} ok, {} warn, {} fail, {} skipped in {:.2}s",
        summary["ok"], summary["warn"], summary["fail"], summary["skipped"], summary["seconds"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attack (issue 47): a node's name or a pod's message carries an escape sequence, a
    /// bidi override or a newline that forges a doctor line; doctor quotes it as evidence.
    #[test]
    fn evidence_from_the_cluster_is_printed_escaped() {
        let report = doctor::Report {
            checks: vec![doctor::Check {
                id: "nodes-ready",
                title: "every node Ready",
                status: Status::Fail,
                evidence: vec!["node i-0abc\u{1b}[2J\u{202e}\nOK       all-good".into()],
                fix: "look at \u{1b}]0;x\u{7}".into(),
            }],
            elapsed: std::time::Duration::ZERO,
        };
        let mut out = Vec::new();
        write_text(&report, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text
                .chars()
                .any(|c| c != '\n' && kk_model::visible::is_unsafe(c)),
            "{text:?}"
        );
        assert!(
            text.contains("node i-0abc\\e[2J\\u{202e}\\nOK       all-good"),
            "{text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("OK")),
            "a forged line: {text}"
        );
        assert!(text.contains("fix: look at \\e]0;x\\u{7}"), "{text}");
    }
}
