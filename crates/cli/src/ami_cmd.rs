//! `ami list|resolve|pin`: the EKS-optimized AL2023 releases AWS publishes (SSM public
//! parameters) and custom images (EC2 DescribeImages), and pinning one in a spec.

use std::io::Write;
use std::process::ExitCode;

use kk_karpenter::ami as names;
use kk_live::ami::{self, EksFlavor, EksRelease, ImageQuery};
use kk_spec::{LoadedSpec, Pool, PoolType};
use serde_json::{Value, json};

use crate::Failure;

#[derive(clap::Subcommand)]
pub enum AmiCommand {
    /// List AMIs: every EKS-optimized AL2023 release of a Kubernetes minor (newest first, the
    /// recommended one marked; the rollback list), or, with --owner/--name/--tag, custom images
    /// from EC2 DescribeImages with their creation and deprecation dates.
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    List(ListArgs),
    /// Resolve one EKS-optimized AL2023 release (the recommended one, or --release vDATE) to
    /// its image id, alias and release version; with --spec, for each alias/ssmRelease pool.
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Resolve(ResolveArgs),
    /// Pin a pool's AMI in a spec file, in place: only the pinned value changes (every other
    /// byte and comment is kept). Prints the diff.
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Pin(crate::ami_pin_cmd::PinArgs),
}

#[derive(clap::Args)]
pub struct FlavorArgs {
    /// Kubernetes minor (`1.36`) or version (`1.36.3`); default: the spec's kubernetesVersion.
    #[arg(long)]
    kubernetes: Option<String>,
    /// The ElasticCluster spec: Kubernetes version, region and pools.
    #[arg(long)]
    spec: Option<String>,
    /// AL2023 variant; default: standard (nvidia for a GPU pool with --spec).
    #[arg(long, value_parser = names::AL2023_VARIANTS)]
    variant: Option<String>,
    /// EC2 architecture; default: x86_64 (the pool's with --spec).
    #[arg(long, value_parser = names::AL2023_ARCHES)]
    arch: Option<String>,
    /// AWS region (default: the spec's, then the AWS region chain: AWS_REGION, profile).
    #[arg(long)]
    region: Option<String>,
    /// Output: text, json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    flavor: FlavorArgs,
    /// Custom images owned by this account id, `self` or `amazon` (repeatable).
    #[arg(long = "owner")]
    owners: Vec<String>,
    /// Custom images whose name matches this pattern (`*`, `?` wildcards).
    #[arg(long)]
    name: Option<String>,
    /// Custom images carrying this tag, `KEY=VALUE` (repeatable; all must match).
    #[arg(long = "tag", value_parser = parse_tag)]
    tags: Vec<(String, String)>,
}

#[derive(clap::Args)]
pub struct ResolveArgs {
    #[command(flatten)]
    flavor: FlavorArgs,
    /// A dated release (`v20260827`) instead of the recommended one.
    #[arg(long)]
    release: Option<String>,
    /// With --spec: only this pool.
    #[arg(long, requires = "spec")]
    pool: Option<String>,
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{text:?}: expected KEY=VALUE"))
}

/// `v20260827` or `20260827` → `20260827`.
pub(crate) fn parse_release(text: &str) -> Result<String, Failure> {
    let date = text.strip_prefix('v').unwrap_or(text);
    if names::is_release_date(date) {
        Ok(date.to_owned())
    } else {
        Err(Failure::msg(format!(
            "--release {text:?}: expected an AL2023 release date such as v20260827 (`ami list` shows them)"
        )))
    }
}

pub fn run(command: AmiCommand) -> Result<ExitCode, Failure> {
    match command {
        AmiCommand::List(args) => list(args),
        AmiCommand::Resolve(args) => resolve(args),
        AmiCommand::Pin(args) => crate::ami_pin_cmd::run(args),
    }
}

struct Context {
    spec: Option<LoadedSpec>,
    region: Option<String>,
}

fn context(flavor: &FlavorArgs) -> Result<Context, Failure> {
    let spec = match &flavor.spec {
        Some(path) => Some(crate::load_spec(path)?.0),
        None => None,
    };
    let region = flavor
        .region
        .clone()
        .or_else(|| spec.as_ref().map(|s| s.spec.spec.aws.region.clone()));
    Ok(Context { spec, region })
}

/// The flavor the arguments name, or the one a pool runs.
fn flavor_of(
    args: &FlavorArgs,
    spec: Option<&LoadedSpec>,
    pool: Option<&Pool>,
) -> Result<EksFlavor, Failure> {
    let version = match (&args.kubernetes, spec) {
        (Some(v), _) => v.clone(),
        (None, Some(s)) => s.spec.spec.kubernetes_version.clone(),
        (None, None) => {
            return Err(Failure::msg(
                "name the Kubernetes minor: --kubernetes 1.36 (or --spec SPEC)".into(),
            ));
        }
    };
    let minor = names::kubernetes_minor(&version).to_owned();
    if minor.split('.').count() != 2
        || !minor
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(Failure::msg(format!(
            "--kubernetes {version:?}: expected a Kubernetes minor such as 1.36"
        )));
    }
    let mut flavor = pool_flavor(&minor, pool);
    if let Some(variant) = &args.variant {
        flavor.variant = variant.clone();
    }
    if let Some(arch) = &args.arch {
        flavor.arch = arch.clone();
    }
    Ok(flavor)
}

/// The AL2023 flavor a pool runs at a Kubernetes minor: nvidia for a GPU pool, its first
/// architecture (`standard` / x86_64 without a pool), as render's AMI selector picks it.
pub(crate) fn pool_flavor(minor: &str, pool: Option<&Pool>) -> EksFlavor {
    let variant = match pool.map(|p| p.pool_type) {
        Some(PoolType::Gpu) => "nvidia",
        _ => "standard",
    };
    let arch = names::ec2_arch(
        pool.and_then(|p| p.instances.arch.first())
            .map_or("amd64", String::as_str),
    );
    EksFlavor {
        minor: minor.to_owned(),
        arch: arch.to_owned(),
        variant: variant.to_owned(),
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn print(
    value: &Value,
    output: crate::flags::OutputFormat,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Failure> {
    if output.is_structured() {
        crate::flags::print_structured(value, output)?;
    } else {
        text(&mut std::io::stdout().lock())?;
    }
    Ok(())
}

fn list(args: ListArgs) -> Result<ExitCode, Failure> {
    let ctx = context(&args.flavor)?;
    let custom = !args.owners.is_empty() || args.name.is_some() || !args.tags.is_empty();
    let rt = runtime()?;
    let sdk = rt.block_on(kk_live::store::aws_config(ctx.region.clone(), None))?;
    if custom {
        let query = ImageQuery {
            owners: args.owners.clone(),
            name: args.name.clone(),
            tags: args.tags.clone(),
        };
        let images = rt.block_on(ami::custom_images(&sdk, &query))?;
        let value = json!({ "images": images.iter().map(|i| i.to_json()).collect::<Vec<_>>() });
        print(&value, args.flavor.output, |out| {
            writeln!(
                out,
                "{:<22} {:<24} {:<22} {:<8} {:<10} NAME",
                "IMAGE", "CREATED", "DEPRECATED", "ARCH", "STATE"
            )?;
            for i in &images {
                writeln!(
                    out,
                    "{:<22} {:<24} {:<22} {:<8} {:<10} {}",
                    i.image_id,
                    i.creation_date,
                    i.deprecation_time.as_deref().unwrap_or("-"),
                    i.architecture,
                    i.state,
                    i.name
                )?;
            }
            Ok(())
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let flavor = flavor_of(&args.flavor, ctx.spec.as_ref(), None)?;
    let releases = rt.block_on(ami::releases(&sdk, &flavor))?;
    let value = json!({ "releases": releases.iter().map(EksRelease::to_json).collect::<Vec<_>>() });
    print(&value, args.flavor.output, |out| {
        writeln!(
            out,
            "AL2023 {} {} for Kubernetes {} ({} releases, newest first)",
            flavor.variant,
            flavor.arch,
            flavor.minor,
            releases.len()
        )?;
        writeln!(
            out,
            "{:<11} {:<18} {:<22} RECOMMENDED",
            "RELEASE", "ALIAS", "IMAGE"
        )?;
        for r in &releases {
            writeln!(
                out,
                "v{:<10} {:<18} {:<22} {}",
                r.date,
                r.alias(),
                r.image_id,
                r.release_version
                    .as_deref()
                    .map_or(String::new(), |v| format!("yes ({v})"))
            )?;
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// How a pool pins its AMI today: (`alias`|`ssmRelease`|`id`, value).
pub(crate) fn pin_of(pool: &Pool) -> (&'static str, &str) {
    let ami = &pool.ami;
    if let Some(alias) = &ami.alias {
        ("alias", alias)
    } else if let Some(release) = &ami.ssm_release {
        ("ssmRelease", release)
    } else {
        ("id", ami.id.as_deref().unwrap_or_default())
    }
}

fn resolve(args: ResolveArgs) -> Result<ExitCode, Failure> {
    let ctx = context(&args.flavor)?;
    let date = args.release.as_deref().map(parse_release).transpose()?;
    let pools: Vec<&Pool> = match &ctx.spec {
        Some(spec) => {
            let pools = &spec.spec.spec.pools;
            match &args.pool {
                Some(name) => vec![pools.iter().find(|p| &p.name == name).ok_or_else(|| {
                    Failure::msg(format!(
                        "--pool {name:?}: no such pool in {} (pools: {})",
                        spec.file,
                        pools
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?],
                None => pools.iter().collect(),
            }
        }
        None => Vec::new(),
    };
    let rt = runtime()?;
    let sdk = rt.block_on(kk_live::store::aws_config(ctx.region.clone(), None))?;
    if ctx.spec.is_none() {
        let flavor = flavor_of(&args.flavor, None, None)?;
        let release = rt.block_on(ami::resolve(&sdk, &flavor, date.as_deref()))?;
        print(&release.to_json(), args.flavor.output, |out| {
            write_release(out, &release)
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    let mut text = String::new();
    for pool in pools {
        let (form, current) = pin_of(pool);
        if form == "id" {
            rows.push(
                json!({"pool": pool.name, "pin": {form: current}, "resolved": null,
                "note": "pinned by id: a custom image; list candidates with `ami list --owner`"}),
            );
            text.push_str(&format!(
                "{}: pinned by id {current} (custom image; `ami list --owner self`)\n",
                pool.name
            ));
            continue;
        }
        let flavor = flavor_of(&args.flavor, ctx.spec.as_ref(), Some(pool))?;
        let release = rt.block_on(ami::resolve(&sdk, &flavor, date.as_deref()))?;
        let suggested = if form == "alias" {
            release.alias()
        } else {
            format!(
                "{}-{}",
                current.split_once('-').map_or(current, |(v, _)| v),
                release.date
            )
        };
        rows.push(
            json!({"pool": pool.name, "pin": {form: current}, "resolved": release.to_json(),
            "suggested": {form: suggested}}),
        );
        text.push_str(&format!(
            "{}: {form} {current} -> {suggested} ({} {} {}, {}{})\n",
            pool.name,
            release.flavor.variant,
            release.flavor.arch,
            release.image_id,
            if release.recommended {
                "recommended"
            } else {
                "dated"
            },
            if current == suggested {
                ", already pinned"
            } else {
                ""
            }
        ));
    }
    print(&json!({ "pools": rows }), args.flavor.output, |out| {
        out.write_all(text.as_bytes())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn write_release(out: &mut dyn Write, r: &EksRelease) -> std::io::Result<()> {
    writeln!(
        out,
        "release:        v{}{}",
        r.date,
        if r.recommended { " (recommended)" } else { "" }
    )?;
    writeln!(out, "alias:          {}", r.alias())?;
    if let Some(v) = &r.release_version {
        writeln!(out, "releaseVersion: {v}  (ssmRelease)")?;
    }
    writeln!(out, "imageID:        {}", r.image_id)?;
    writeln!(out, "parameter:      {}", r.parameter)
}
