//! `init`: the commented example spec, or (`--discover`) a spec filled from a running
//! Kubean-built cluster and its AWS account (kk_live::discover gathers, kk_spec::adopt
//! decides and writes), or (`--check`) the differences between a spec and that cluster.

use std::io::Write;
use std::process::ExitCode;

use kk_spec::adopt;

use crate::Failure;

#[derive(clap::Args)]
pub struct InitArgs {
    /// Adopt a running cluster: read the new cluster, Kubean's management cluster and the AWS
    /// account (read-only) and print a spec whose every value says where it came from; what
    /// could not be read is a commented placeholder. Findings go to stderr and the spec's head.
    #[arg(long)]
    discover: bool,
    /// With --discover: compare this spec with what the cluster and the account say now, one
    /// located finding per difference (exit 1 when any).
    #[arg(long, value_name = "SPEC", requires = "discover")]
    check: Option<String>,
    /// With --discover: print the read-only RBAC (ClusterRole, for both clusters) and IAM
    /// policy discovery needs, and exit.
    #[arg(long, requires = "discover")]
    permissions: bool,
    /// The running cluster.
    #[command(flatten)]
    kube: crate::flags::KubeFlags,
    /// Kubean's management cluster (without these, Kubean's objects are looked for in the
    /// running cluster itself).
    #[command(flatten)]
    mgmt: crate::flags::MgmtFlags,
    /// AWS region (default: the Nodes' topology.kubernetes.io/region, then the AWS config).
    #[arg(long)]
    region: Option<String>,
    /// Read no AWS account: region, VPC, subnets, groups and IAM stay placeholders.
    #[arg(long)]
    no_aws: bool,
    /// `yaml` (the commented spec, default), `json` (the discovered values with their sources;
    /// with --check, the findings), or a file to write the spec to (mode 0600).
    #[arg(short = 'o', long = "output", default_value = "yaml")]
    output: String,
}

pub fn run(args: InitArgs) -> Result<ExitCode, Failure> {
    if !args.discover {
        std::io::stdout().write_all(kk_spec::EXAMPLE.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.permissions {
        let both = serde_json::json!({
            "clusterRole": kk_live::discover::cluster_role(),
            "iamPolicy": kk_live::discover::iam_policy(),
        });
        let text = if args.output == "json" {
            serde_json::to_string_pretty(&both)? + "\n"
        } else {
            serde_saphyr::to_string(&both)?
        };
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let checked = match &args.check {
        Some(path) => Some(crate::load_spec(path)?),
        None => None,
    };
    let observed = observe(&args)?;
    let discovered = adopt::discover(&observed);
    if let Some((loaded, base)) = checked {
        let ca_hash = crate::files::resolve_ca(&loaded, &base)
            .ok()
            .and_then(|pem| kk_spec::ca::ClusterCa::from_pem(&pem).ok())
            .map(|ca| ca.cert_hash);
        let findings = adopt::compare(&loaded, &observed, &discovered, ca_hash.as_deref());
        let mut out = std::io::stdout().lock();
        if args.output == "json" {
            let list: Vec<serde_json::Value> = findings
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "file": e.file, "line": e.pos.map(|p| p.line), "column": e.pos.map(|p| p.col),
                        "field": e.field, "message": e.message,
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        } else {
            // The findings quote what the cluster said: shown escaped, never obeyed.
            for e in &findings {
                writeln!(out, "{}", kk_model::visible(&e.to_string()))?;
            }
            writeln!(
                out,
                "{}: {} difference(s) from the running cluster",
                loaded.file,
                findings.len()
            )?;
        }
        return Ok(if findings.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    // Findings quote values read from the cluster (a kubelet writes its own nodeInfo).
    for finding in &discovered.findings {
        eprintln!("finding: {}", kk_model::visible(finding));
    }
    match args.output.as_str() {
        "json" => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string_pretty(&discovered)?)?;
        }
        "yaml" | "-" => std::io::stdout().write_all(adopt::write_spec(&discovered).as_bytes())?,
        file => write_private(file, &adopt::write_spec(&discovered))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The spec to a file only its owner can read (it names the account's resources).
fn write_private(path: &str, text: &str) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Failure::msg(format!("{path}: {e}")))?;
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())?;
    eprintln!("wrote {path}");
    Ok(())
}

fn observe(args: &InitArgs) -> Result<adopt::Observed, Failure> {
    let cluster_options = args.kube.options();
    let management_options = args.mgmt.given(args.kube.kubeconfig.as_deref());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let cluster = kk_live::client::make_client(&cluster_options)
            .await
            .map_err(|e| Failure::msg(format!("the running cluster: {e}")))?;
        // Unreachable is one error; what this identity may not read is a finding per read.
        cluster.apiserver_version().await.map_err(|e| {
            Failure::msg(
                kk_live::kube_error::KubeCallError::from_kube(
                    "the running cluster (GET /version)",
                    e,
                )
                .to_string(),
            )
        })?;
        let management = match &management_options {
            Some(options) => Some(
                kk_live::client::make_client(options)
                    .await
                    .map_err(|e| Failure::msg(format!("Kubean's management cluster: {e}")))?,
            ),
            None => None,
        };
        let (region, region_from) = match &args.region {
            Some(r) => (Some(r.clone()), "--region".to_owned()),
            None => match kk_live::discover::node_region(&cluster).await {
                Some(r) => (
                    Some(r),
                    "the Nodes' topology.kubernetes.io/region".to_owned(),
                ),
                None => (None, "the AWS config (AWS_REGION, the profile)".to_owned()),
            },
        };
        let mut unreadable = Vec::new();
        let sdk = if args.no_aws {
            None
        } else {
            match kk_live::store::aws_config(region, None).await {
                Ok(sdk) => Some(sdk),
                Err(e) => {
                    unreadable.push(format!("the AWS account: {e} (pass --region)"));
                    None
                }
            }
        };
        let sources = kk_live::discover::Sources {
            cluster: &cluster,
            management: management.as_ref(),
            aws: sdk.as_ref(),
            region_from,
        };
        let mut observed = kk_live::discover::observe(&sources).await;
        observed.unreadable.extend(unreadable);
        Ok(observed)
    })
}
