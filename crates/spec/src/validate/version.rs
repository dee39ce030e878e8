//! `spec.kubernetesVersion`: its form, Karpenter's supported minors, the Kubean release that
//! installs it, and the workers' kubelet skew.

use super::*;

pub(super) fn version(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let text = &spec.kubernetes_version;
    let at = at.key("kubernetesVersion");
    match K8S_VERSION.captures(text) {
        None => p.push((
            at,
            format!("{text:?} is not a Kubernetes version like 1.35.5"),
        )),
        Some(caps) => {
            let minor: u32 = caps[1].parse().unwrap_or(0);
            // The pinned Karpenter's range from the versions table; a version the table does
            // not know (a warning says so) is held to the default release's.
            let karpenter = crate::versions::component(crate::versions::KARPENTER);
            let (release, known) = match karpenter.release(&spec.karpenter.version) {
                Some(r) => (r, spec.karpenter.version.as_str()),
                None => (
                    karpenter
                        .default_release()
                        .expect("the default is listed (tested)"),
                    karpenter.default.as_deref().unwrap_or_default(),
                ),
            };
            let range = release.kubernetes_range();
            if !range.contains(minor) {
                p.push((
                    at,
                    format!(
                        "Kubernetes 1.{minor} is outside what Karpenter {known} supports ({range})"
                    ),
                ));
            }
        }
    }
}

/// `karpenter.version` is the Helm chart version: exact `X.Y.Z`, never a range or a bare minor
/// (Helm would resolve it to whatever is newest at install time).
pub(super) fn karpenter_chart_version(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let version = &spec.karpenter.version;
    if version.starts_with('v') || crate::versions::SemVer::parse(version).is_none() {
        p.push((
            at.key("karpenter").key("version"),
            format!(
                "{version:?} is not an exact chart version like {} (no v, no range)",
                crate::versions::default_version(crate::versions::KARPENTER)
            ),
        ));
    }
}

/// `1.<minor>.<patch>` of a spec version, when it parses.
fn minor_patch(text: &str) -> Option<(u32, u32)> {
    K8S_VERSION.captures(text)?;
    crate::kubean_support::minor_patch(text)
}

/// The Kubean release pinned by the spray-job image must install `kubernetesVersion`.
pub(super) fn kubean_covers_version(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    use crate::kubean_support as support;
    let image = &spec.kubean.spray_job_image;
    let Some(tag) = support::image_tag(image) else {
        p.push((
            at.key("kubean").key("sprayJobImage"),
            "name the Kubean release in the image tag (e.g. ghcr.io/kubean-io/spray-job:v0.37.0): \
             the Kubernetes versions it installs are checked against it"
                .into(),
        ));
        return;
    };
    let Some(release) = support::release(tag) else {
        let all = support::releases();
        p.push((
            at.key("kubean").key("sprayJobImage"),
            format!(
                "Kubean {tag} is not in the support matrix ({}–{}): pin a listed release, whose \
                 Kubernetes range is known",
                all.first().map_or("", |r| r.release.as_str()),
                all.last().map_or("", |r| r.release.as_str()),
            ),
        ));
        return;
    };
    let Some((minor, patch)) = minor_patch(&spec.kubernetes_version) else {
        return;
    };
    if release.covers(minor, patch) {
        return;
    }
    let hint = match support::newest_covering(minor, patch) {
        Some(newer) => format!(
            "; Kubean {} ({}) installs {}",
            newer.release,
            newer.range(),
            spec.kubernetes_version.trim_start_matches('v')
        ),
        None => format!(
            "; no Kubean release of the matrix ({}–{}) installs it",
            support::releases()
                .first()
                .map_or("", |r| r.release.as_str()),
            support::releases()
                .last()
                .map_or("", |r| r.release.as_str()),
        ),
    };
    p.push((
        at.key("kubernetesVersion"),
        format!(
            "Kubean {tag} (kubean.sprayJobImage) installs Kubernetes {} only: Kubespray has no \
             download checksums for 1.{minor}.{patch}{hint}",
            release.range()
        ),
    ));
}

/// A worker's kubelet may be up to three minors older than the control plane, never newer
/// (kubernetes.io/releases/version-skew-policy, since 1.28). Only an `ssmRelease` AMI names its
/// kubelet's version; an `id` image is the operator's own build.
pub(super) fn worker_kubelet_skew(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let Some((control_plane, _)) = minor_patch(&spec.kubernetes_version) else {
        return;
    };
    for (i, pool) in spec.pools.iter().enumerate() {
        let Some(release) = &pool.ami.ssm_release else {
            continue;
        };
        let Some(caps) = SSM_RELEASE.captures(release) else {
            continue;
        };
        let Ok(kubelet) = caps[1].parse::<u32>() else {
            continue;
        };
        let problem = if kubelet > control_plane {
            "newer than the control plane (a kubelet may never be newer than the API server)"
        } else if control_plane - kubelet > 3 {
            "more than three minors older than the control plane (the skew policy allows n-3)"
        } else {
            continue;
        };
        p.push((
            at.key("pools").index(i).key("ami").key("ssmRelease"),
            format!(
                "the AMI's kubelet is 1.{kubelet}, {problem}: kubernetesVersion is {}",
                spec.kubernetes_version
            ),
        ));
    }
}
