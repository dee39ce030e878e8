//! Warnings, not errors: a pinned patch older than the versions table's newest known patch of
//! the same minor, and a version the table does not know.

use super::*;
use crate::versions::{self, SemVer};

/// Warnings for a structurally valid spec, each at the field that pins the version.
pub fn warnings(cluster: &ElasticCluster) -> Problems {
    let spec = &cluster.spec;
    let at = FieldPath::root().key("spec");
    let mut p = Problems::new();
    stale(
        &mut p,
        at.key("karpenter").key("version"),
        versions::KARPENTER,
        &spec.karpenter.version,
    );
    if let Some(gpu) = &spec.gpu {
        stale(
            &mut p,
            at.key("gpu").key("devicePluginVersion"),
            versions::DEVICE_PLUGIN,
            &gpu.device_plugin_version,
        );
        gpu_operator_support(&mut p, at.key("gpu").key("operatorVersion"), gpu);
    }
    for key in [
        versions::CLOUD_CONTROLLER_MANAGER,
        versions::CUDA_SAMPLE,
        versions::PAUSE,
    ] {
        if let Some(tag) = spec.images.get(key).and_then(|o| o.tag.as_deref()) {
            stale(&mut p, at.key("images").key(key).key("tag"), key, tag);
        }
    }
    if let Some(auth) = &spec.iam_authenticator
        && let Some(tag) = crate::kubean_support::image_tag(&auth.image)
    {
        stale(
            &mut p,
            at.key("iamAuthenticator").key("image"),
            versions::IAM_AUTHENTICATOR,
            tag,
        );
    }
    p
}

/// A pinned GPU Operator line NVIDIA no longer supports, with the upgrade path: NVIDIA supports
/// upgrades only to the next release line, so the fix may take several applies.
fn gpu_operator_support(p: &mut Problems, at: FieldPath, gpu: &crate::GpuStack) {
    let Some(version) = gpu.operator_version.as_deref() else {
        return;
    };
    let operator = versions::component(versions::GPU_OPERATOR);
    let Some(support) = operator.release(version).and_then(|r| r.support) else {
        return;
    };
    if support == versions::Support::Supported {
        return;
    }
    let target = versions::default_version(versions::GPU_OPERATOR);
    let path = operator
        .line_by_line_path(version, target)
        .map(|path| {
            path.iter()
                .map(|r| r.version.as_str())
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .unwrap_or_default();
    p.push((
        at,
        format!(
            "GPU Operator {version}: NVIDIA lists its line as {} (platform support page, checked \
             {}); upgrade one release line at a time, setting operatorVersion to each and \
             applying: {version} -> {path} (`kubean-karpenter upgrade plan` prints the steps)",
            support.as_str(),
            operator.checked
        ),
    ));
}

fn stale(p: &mut Problems, at: FieldPath, key: &str, version: &str) {
    let component = versions::component(key);
    let Some(pinned) = SemVer::parse(version) else {
        return;
    };
    let Some(newest) = component.newest_patch(version) else {
        let newest = component.newest().map_or("", |r| r.version.as_str());
        p.push((
            at,
            format!(
                "{key} {version} is not in the versions table (`kubean-karpenter versions`): its \
                 Kubernetes range and digest are unknown; the newest known release is {newest}"
            ),
        ));
        return;
    };
    let Some(best) = SemVer::parse(&newest.version) else {
        return;
    };
    if best > pinned {
        let why = component
            .release(version)
            .and_then(|r| r.note.as_deref())
            .map(|n| format!(" ({version}: {n})"))
            .unwrap_or_default();
        p.push((
            at,
            format!(
                "{key} {version} is older than {}, the newest known patch of {}.{}{why}: set {}",
                newest.version, pinned.major, pinned.minor, newest.version
            ),
        ));
    }
}
