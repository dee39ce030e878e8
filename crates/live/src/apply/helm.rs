//! `apply`'s Helm step: each release of the bundle through the `helm` CLI (`$KK_HELM`, else
//! `helm` on PATH), skipped when the installed chart version and values are already the
//! bundle's (`helm upgrade` would add a revision for nothing).

use std::path::Path;
use std::process::Command;

use kk_render::{Bundle, HelmRelease};
use serde_json::Value;

/// What a Helm step did to one release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmAction {
    pub release: String,
    pub action: String,
}

/// A Helm step that could not run, failed, or was refused before it ran.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// No `helm` to run: the commands a person can run instead.
    #[error(
        "`helm` is not on PATH: install Helm 3, or run these yourself and re-run apply with --skip-helm:\n  {}",
        .commands.join("\n  ")
    )]
    NotInstalled { commands: Vec<String> },
    /// `helm` ran and failed (it names the release, the chart or the cluster).
    #[error("{command}: {stderr}")]
    Failed { command: String, stderr: String },
    /// The bundle lacks a release's values file.
    #[error("the bundle has no {file}")]
    MissingValues { file: String },
    /// An upgrade the chart's vendor does not support, refused before anything ran.
    #[error(
        "{release} in {namespace}: the cluster runs chart {running}, the bundle installs {bundle}: {why}; nothing applied"
    )]
    Unsupported {
        release: String,
        namespace: String,
        running: String,
        bundle: String,
        why: String,
    },
    /// Running `helm` or writing its values file failed.
    #[error("helm: {0}")]
    Io(#[from] std::io::Error),
}

/// The installed release's chart (`karpenter-1.15.2`) and user-supplied values, if any.
fn installed(
    helm: &str,
    r: &HelmRelease,
    kube: &[String],
) -> Result<Option<(String, Value)>, HelmError> {
    let list = Command::new(helm)
        .args(["list", "--namespace", &r.namespace])
        .args(["--filter", &format!("^{}$", r.name), "-o", "json"])
        .args(kube)
        .output()?;
    if !list.status.success() {
        return Err(HelmError::Failed {
            command: format!("helm list --namespace {}", r.namespace),
            stderr: String::from_utf8_lossy(&list.stderr).trim().to_owned(),
        });
    }
    let releases: Value = serde_json::from_slice(&list.stdout).unwrap_or(Value::Null);
    let Some(chart) = releases
        .as_array()
        .and_then(|a| a.first())
        .and_then(|r| r["chart"].as_str())
        .map(str::to_owned)
    else {
        return Ok(None);
    };
    let values = Command::new(helm)
        .args([
            "get",
            "values",
            &r.name,
            "--namespace",
            &r.namespace,
            "-o",
            "json",
        ])
        .args(kube)
        .output()?;
    if !values.status.success() {
        return Err(HelmError::Failed {
            command: format!("helm get values {}", r.name),
            stderr: String::from_utf8_lossy(&values.stderr).trim().to_owned(),
        });
    }
    Ok(Some((
        chart,
        serde_json::from_slice(&values.stdout).unwrap_or(Value::Null),
    )))
}

/// Refuses, before anything is applied, a GPU Operator upgrade that skips a release line: NVIDIA
/// supports upgrades only within a line or to the next one, so a cluster on v25.10.x goes to
/// v26.3.x before v26.7.x (`gpu.operatorVersion` pins each step). No helm, no check: the
/// install step says so itself.
pub fn preflight(
    bundle: &Bundle,
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(), HelmError> {
    let Some(release) = bundle
        .helm_releases()
        .iter()
        .find(|r| r.name == "gpu-operator")
    else {
        return Ok(());
    };
    let Some(helm) = helm_binary() else {
        return Ok(());
    };
    let Some((chart, _)) = installed(&helm, release, &kube_args(kubeconfig, context))? else {
        return Ok(());
    };
    let Some(running) = chart.strip_prefix(&format!("{}-", release.chart)) else {
        return Ok(());
    };
    let operator = kk_spec::versions::component(kk_spec::versions::GPU_OPERATOR);
    let refuse = |why: String| HelmError::Unsupported {
        release: release.name.clone(),
        namespace: release.namespace.clone(),
        running: running.to_owned(),
        bundle: release.version.clone(),
        why,
    };
    match operator.line_by_line_path(running, &release.version) {
        Ok(path) if path.len() > 1 => {
            let steps: Vec<&str> = path.iter().map(|r| r.version.as_str()).collect();
            Err(refuse(format!(
                "NVIDIA supports upgrades only to the next release line; set \
                 spec.gpu.operatorVersion to each of {} in turn, applying each \
                 (`kubean-karpenter upgrade plan` prints the steps)",
                steps.join(", ")
            )))
        }
        Ok(_) => Ok(()),
        Err(e) if e.contains("downgrade") => Err(refuse(format!(
            "{e}; NVIDIA does not support going back: pin spec.gpu.operatorVersion: {running}"
        ))),
        Err(e) => Err(refuse(e)),
    }
}

/// The `helm` to run (`$KK_HELM`, else `helm` on PATH), when it answers `helm version`.
fn helm_binary() -> Option<String> {
    let helm = std::env::var("KK_HELM").unwrap_or_else(|_| "helm".into());
    let found = Command::new(&helm).arg("version").arg("--short").output();
    found.is_ok_and(|o| o.status.success()).then_some(helm)
}

fn kube_args(kubeconfig: Option<&Path>, context: Option<&str>) -> Vec<String> {
    let mut kube = Vec::new();
    if let Some(k) = kubeconfig {
        kube.extend(["--kubeconfig".to_owned(), k.display().to_string()]);
    }
    if let Some(c) = context {
        kube.extend(["--kube-context".to_owned(), c.to_owned()]);
    }
    kube
}

/// Installs or upgrades each of the bundle's releases in order, in the cluster `kubeconfig`
/// and `context` name; with `dry_run`, `helm --dry-run=server`.
pub fn install(
    bundle: &Bundle,
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    dry_run: bool,
) -> Result<Vec<HelmAction>, HelmError> {
    let releases = bundle.helm_releases();
    let dir = tempfile::tempdir()?;
    let Some(helm) = helm_binary() else {
        let commands: Vec<String> = releases.iter().map(HelmRelease::command_line).collect();
        return Err(HelmError::NotInstalled { commands });
    };
    let kube = kube_args(kubeconfig, context);
    let mut done = Vec::new();
    for r in releases {
        let text = bundle
            .files
            .get(&r.values_file)
            .ok_or_else(|| HelmError::MissingValues {
                file: r.values_file.clone(),
            })?;
        // The values as render wrote them: no YAML parsed again.
        let want = bundle
            .objects(&r.values_file)
            .first()
            .cloned()
            .unwrap_or(Value::Null);
        let path = dir.path().join(r.values_file.replace('/', "-"));
        std::fs::write(&path, text)?;
        let current = installed(&helm, r, &kube)?;
        let unchanged = current.as_ref().is_some_and(|(chart, values)| {
            chart.ends_with(&format!("-{}", r.version)) && *values == want
        });
        let action = if unchanged {
            "unchanged (chart and values as rendered; no new revision)".to_owned()
        } else {
            let mut args = r.command(&path.display().to_string());
            args.remove(0);
            if dry_run {
                args.push("--dry-run=server".into());
            }
            args.extend(kube.iter().cloned());
            let out = Command::new(&helm).args(&args).output()?;
            if !out.status.success() {
                return Err(HelmError::Failed {
                    command: format!("helm {}", args.join(" ")),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
            match (current.is_some(), dry_run) {
                (_, true) => "would install/upgrade (helm --dry-run=server)".into(),
                (true, false) => "upgraded".into(),
                (false, false) => "installed".into(),
            }
        };
        done.push(HelmAction {
            release: r.name.clone(),
            action,
        });
    }
    Ok(done)
}
