//! `versions [SPEC]`: the versions table and the Kubernetes / Kubean / Karpenter / CCM
//! compatibility matrix (for the spec's Kubernetes version when a spec is given), and
//! `images SPEC`: every image the bundle and its charts pull, digest or tag-only, for mirroring.

use std::io::Write;
use std::process::ExitCode;

use kk_spec::images::{self, ResolvedImage};
use kk_spec::kubernetes_support::{self, Day, Standing};
use kk_spec::{ElasticCluster, kubean_support, kubespray_images, versions};
use serde_json::{Value, json};

use crate::Failure;

#[derive(clap::Args)]
pub struct VersionsArgs {
    /// A spec: adds what it pins, whether each pin is current, and its Kubernetes minor's row
    /// of the matrix.
    spec: Option<String>,
    /// Output: text, json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

#[derive(clap::Args)]
pub struct ImagesArgs {
    /// The spec file, or - for standard input.
    spec: String,
    /// Output: text (one reference a line, then how to pin the tag-only ones), json or yaml.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

fn print(
    value: &Value,
    output: crate::flags::OutputFormat,
    text: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if output.is_structured() {
        crate::flags::print_structured(value, output)?;
    } else {
        std::io::stdout().lock().write_all(text().as_bytes())?;
    }
    Ok(())
}

/// Kubernetes minors the matrix covers: every minor some Karpenter or CCM release names.
fn minors() -> std::ops::RangeInclusive<u32> {
    let highest = [versions::KARPENTER, versions::CLOUD_CONTROLLER_MANAGER]
        .iter()
        .flat_map(|c| &versions::component(c).releases)
        .filter_map(|r| r.kubernetes_range().highest)
        .max()
        .unwrap_or(36);
    let lowest = versions::component(versions::KARPENTER)
        .releases
        .iter()
        .map(|r| r.kubernetes_range().lowest)
        .min()
        .unwrap_or(29);
    lowest..=highest
}

/// A minor's support window on `today` (`kubernetes_support.txt`), `null` for one the table
/// does not know.
fn support(minor: u32, today: &Day) -> Value {
    let Some(window) = kubernetes_support::window(minor) else {
        return Value::Null;
    };
    let standing = match kubernetes_support::standing(minor, today) {
        Standing::Supported { maintenance } => format!("supported; maintenance from {maintenance}"),
        Standing::Maintenance { end_of_life } => format!("maintenance; end of life {end_of_life}"),
        Standing::EndOfLife { since } => format!("end of life since {since}"),
        Standing::Unknown => "unknown".to_owned(),
    };
    json!({
        "released": window.released.as_str(),
        "maintenance": window.maintenance.as_str(),
        "endOfLife": window.end_of_life.as_str(),
        "today": today.as_str(),
        "standing": standing,
    })
}

/// One row per Kubernetes minor: its support window, the Karpenter releases, the CCM release
/// and the Kubean releases (newest first, at most three) that support it.
fn matrix_row(minor: u32, today: &Day) -> Value {
    let karpenter: Vec<&str> = versions::component(versions::KARPENTER)
        .releases
        .iter()
        .filter(|r| r.kubernetes_range().contains(minor))
        .map(|r| r.version.as_str())
        .collect();
    let ccm = versions::component(versions::CLOUD_CONTROLLER_MANAGER)
        .newest_for_kubernetes(minor)
        .map(|r| r.version.clone());
    let kubean: Vec<String> = kubean_support::releases()
        .iter()
        .rev()
        .filter(|r| r.minors.iter().any(|&(m, _, _)| m == minor))
        .take(3)
        .map(|r| {
            let (_, lo, hi) = r
                .minors
                .iter()
                .find(|&&(m, _, _)| m == minor)
                .copied()
                .unwrap_or_default();
            format!("{} (1.{minor}.{lo}–1.{minor}.{hi})", r.release)
        })
        .collect();
    json!({
        "kubernetes": format!("1.{minor}"),
        "support": support(minor, today),
        "karpenter": karpenter,
        "cloudControllerManager": ccm,
        "kubean": kubean,
    })
}

/// What the spec pins for each component, and whether it is the newest known patch.
fn pins(cluster: &ElasticCluster) -> Vec<Value> {
    let mut seen = std::collections::BTreeSet::new();
    images::bundle_images(&cluster.spec)
        .into_iter()
        .filter(|i| !i.tag.is_empty())
        // One row per component: a chart's images (`chart/image`) share the chart's version.
        .filter(|i| seen.insert(i.key.split('/').next().unwrap_or(&i.key).to_owned()))
        .map(|image| {
            let component = image.key.split('/').next().unwrap_or(&image.key);
            // A chart's images share the chart's version.
            let chart = image.key.contains('/');
            let (version, newest_patch, newest) = if chart {
                let c = versions::component(component);
                (
                    versions::default_version(component).to_owned(),
                    c.default.clone(),
                    c.newest().map(|r| r.version.clone()),
                )
            } else if let Some(c) = versions::table()
                .components
                .iter()
                .find(|c| c.name == component)
            {
                (
                    image.tag.clone(),
                    c.newest_patch(&image.tag).map(|r| r.version.clone()),
                    c.newest().map(|r| r.version.clone()),
                )
            } else {
                (image.tag.clone(), None, None)
            };
            let status = match &newest_patch {
                Some(p) if versions::SemVer::parse(p) > versions::SemVer::parse(&version) => {
                    format!("stale: {p} is the newest known patch")
                }
                Some(_) => "current".to_owned(),
                None => "not in the table".to_owned(),
            };
            json!({
                "component": component,
                "version": version,
                "newestKnown": newest,
                "status": status,
            })
        })
        .collect()
}

pub fn versions(args: VersionsArgs) -> Result<ExitCode, Failure> {
    let loaded = args.spec.as_deref().map(crate::load_spec).transpose()?;
    let spec_minor = loaded
        .as_ref()
        .and_then(|(l, _)| images::kubernetes_minor(&l.spec.spec.kubernetes_version));
    let today = kubernetes_support::today();
    let matrix: Vec<Value> = match spec_minor {
        Some(minor) => vec![matrix_row(minor, &today)],
        None => minors().map(|m| matrix_row(m, &today)).collect(),
    };
    let mut value = json!({
        "components": versions::table().components,
        "matrix": matrix,
    });
    if let Some((l, _)) = &loaded {
        value["spec"] = json!({
            "file": l.file,
            "kubernetesVersion": l.spec.spec.kubernetes_version,
            "kubean": kubean_support::image_tag(&l.spec.spec.kubean.spray_job_image),
            "pins": pins(&l.spec),
        });
    }
    print(&value, args.output, || versions_text(&value))?;
    Ok(ExitCode::SUCCESS)
}

fn versions_text(value: &Value) -> String {
    let mut out = String::new();
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    out.push_str(&format!(
        "{:<26} {:<12} {:<12} {:<15} {}\n",
        "COMPONENT", "DEFAULT", "NEWEST", "CHECKED", "IMAGE / CHART"
    ));
    for c in versions::table().components.iter() {
        let newest = c.newest().map_or("-", |r| r.version.as_str());
        let artifact = match (&c.image, &c.chart) {
            (Some(i), Some(ch)) => format!("{i}; chart {}/{}", ch.repository, ch.name),
            (Some(i), None) => i.clone(),
            (None, Some(ch)) => format!("chart {}/{}", ch.repository, ch.name),
            (None, None) => "-".into(),
        };
        out.push_str(&format!(
            "{:<26} {:<12} {:<12} {:<15} {artifact}\n",
            c.name,
            c.default.as_deref().unwrap_or("per minor"),
            newest,
            c.checked,
        ));
    }
    out.push_str("\nKUBERNETES  SUPPORT                                KARPENTER                CCM       KUBEAN (newest three)\n");
    for row in value["matrix"].as_array().into_iter().flatten() {
        let list = |v: &Value| {
            v.as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "-".into())
        };
        out.push_str(&format!(
            "{:<11} {:<38} {:<24} {:<9} {}\n",
            s(&row["kubernetes"]),
            s(&row["support"]["standing"]),
            list(&row["karpenter"]),
            s(&row["cloudControllerManager"]),
            list(&row["kubean"]),
        ));
    }
    // Release lines whose vendor publishes support standings (the GPU Operator).
    for c in versions::table().components.iter() {
        let lines: Vec<&versions::Release> =
            c.releases.iter().filter(|r| r.support.is_some()).collect();
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\n{:<26} {:<12} SUPPORT\n",
            c.name.to_uppercase(),
            "RELEASE"
        ));
        for r in lines {
            let support = r.support.map_or("-", versions::Support::as_str);
            out.push_str(&format!("{:<26} {:<12} {support}\n", "", r.version));
        }
        out.push_str(&format!(
            "{:<26} upgrades go one release line at a time (`upgrade plan` prints the path)\n",
            ""
        ));
    }
    if let Some(spec) = value.get("spec") {
        out.push_str(&format!(
            "\n{}: Kubernetes {}, Kubean {}\n",
            s(&spec["file"]),
            s(&spec["kubernetesVersion"]),
            s(&spec["kubean"])
        ));
        for pin in spec["pins"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {:<46} {:<22} {}\n",
                s(&pin["component"]),
                s(&pin["version"]),
                s(&pin["status"])
            ));
        }
    }
    out.push_str(
        "\nDigests and sources: -o yaml. Update the table: crates/spec/src/versions.yaml; support windows: crates/spec/src/kubernetes_support.txt.\n",
    );
    out
}

/// How to pin a tag-only image by digest.
fn how_to_pin(image: &ResolvedImage) -> String {
    let inspect = format!(
        "skopeo inspect --format '{{{{.Digest}}}}' docker://{}",
        image.reference()
    );
    match image.key.as_str() {
        versions::IAM_AUTHENTICATOR => {
            format!("append @<digest> to iamAuthenticator.image ({inspect})")
        }
        versions::KUBEAN => format!("append @<digest> to kubean.sprayJobImage ({inspect})"),
        key => format!("set images.{key}.digest to what `{inspect}` prints"),
    }
}

pub fn images(args: ImagesArgs) -> Result<ExitCode, Failure> {
    let (loaded, _) = crate::load_spec(&args.spec)?;
    let spec = &loaded.spec.spec;
    let bundle = images::bundle_images(spec);
    // The Kubean-built cluster's own images, which Kubespray pins (by tag) at its commit.
    let kubespray = kubespray_images::images(spec);
    let value = Value::Array(
        bundle
            .iter()
            .map(|i| (i, Some(how_to_pin(i))))
            .chain(kubespray.iter().map(|i| (i, None)))
            .map(|(i, pin)| {
                let mut v = serde_json::to_value(i).unwrap_or(Value::Null);
                v["reference"] = json!(i.reference());
                if let (None, Some(pin)) = (&i.digest, pin) {
                    v["pin"] = json!(pin);
                }
                v
            })
            .collect(),
    );
    print(&value, args.output, || {
        let mut out = String::new();
        for i in bundle.iter().chain(&kubespray) {
            let state = if i.digest.is_some() {
                "digest"
            } else {
                "tag-only"
            };
            out.push_str(&format!(
                "{:<9} {:<100} {}\n",
                state,
                i.reference(),
                i.used_by
            ));
        }
        let unpinned: Vec<_> = bundle.iter().filter(|i| i.digest.is_none()).collect();
        if !unpinned.is_empty() {
            out.push_str(&format!(
                "\n{} of the bundle's {} images are tag-only: a registry can move a tag. To pin:\n",
                unpinned.len(),
                bundle.len()
            ));
            for i in unpinned {
                out.push_str(&format!("  {}: {}\n", i.key, how_to_pin(i)));
            }
        }
        if kubespray.is_empty() {
            out.push_str(
                "\nKubespray's images are not listed: no list is known for this Kubean release \
                 and Kubernetes minor (crates/spec/src/kubespray_images.txt).\n",
            );
        } else {
            out.push_str(&format!(
                "\nThe {} Kubespray images are every add-on its list generator knows, pinned by \
                 tag at the Kubespray commit Kubean pins: mirror them all.\n",
                kubespray.len()
            ));
        }
        out
    })?;
    Ok(ExitCode::SUCCESS)
}
