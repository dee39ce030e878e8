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
