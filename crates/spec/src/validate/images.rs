//! `spec.images`: per-image overrides (repository, digest, and the tag where the spec sets the
//! version nowhere else), and the AWS cloud controller manager's tag against the control
//! plane's minor (one CCM release line per Kubernetes minor).

use super::*;
use crate::images::{self, TagSource};
use crate::versions;

pub(super) fn images(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let at = at.key("images");
    for (key, over) in &spec.images {
        let at = at.key(key);
        let Some(tag_source) = images::overridable(key) else {
            p.push((
                at,
                format!(
                    "{key:?} is not an image the bundle pulls under a table name: one of {} \
                     (iamAuthenticator.image, kubean.sprayJobImage and controller.image are set where they are)",
                    images::overridable_keys().join(", ")
                ),
            ));
            continue;
        };
        if let Some((chart, _)) = key.split_once('/')
            && !images::chart_images(spec, chart).any(|(k, _)| k == *key)
        {
            p.push((
                at,
                format!(
                    "{chart} {} does not pull {key} (an older release did): drop the override",
                    images::chart_release(spec, chart)
                ),
            ));
            continue;
        }
        if let Some(repo) = &over.repository
            && let Some(problem) =
                controller::repository_problem_for(repo, &format!("images.{key}.digest"))
        {
            p.push((at.key("repository"), problem));
        }
        if let Some(digest) = &over.digest
            && !controller::DIGEST.is_match(digest)
        {
            p.push((
                at.key("digest"),
                format!(
                    "{digest:?} is not a manifest digest like sha256:<64 lowercase hex digits>"
                ),
            ));
        }
        match (tag_source, &over.tag) {
            (TagSource::Field(field), Some(_)) => p.push((
                at.key("tag"),
                format!("the tag of {key} is {field}: set it there"),
            )),
            (TagSource::Override, Some(tag)) if versions::is_floating(tag) => p.push((
                at.key("tag"),
                format!("{tag:?} is a floating tag (it moves as releases come out): pin a release, like {}",
                    {
                    let c = versions::component(key);
                    c.newest().map(|r| r.version.as_str()).or(c.default.as_deref()).unwrap_or_default()
                }),
            )),
            (TagSource::Override, Some(tag)) if !IMAGE_TAG.is_match(tag) => {
                p.push((at.key("tag"), format!("{tag:?} is not an image tag")));
            }
            _ => {}
        }
    }
    ccm_matches_kubernetes(p, &at, spec);
    if let Some(registry) = &spec.registry {
        let at = at.parent().unwrap_or_else(FieldPath::root).key("registry");
        registry_section(p, &at, registry);
    }
}

fn registry_section(p: &mut Problems, at: &FieldPath, registry: &Registry) {
    if !controller::HOST.is_match(&registry.mirror) || !registry.mirror.contains(['.', ':']) {
        p.push((
            at.key("mirror"),
            format!(
                "{:?} is not a registry host[:port] like registry.internal:5000 (no scheme, no path: \
                 images keep their upstream path under it)",
                registry.mirror
            ),
        ));
    }
    if let Some(files) = &registry.files_repo
        && !(files.starts_with("http://") || files.starts_with("https://"))
    {
        p.push((
            at.key("filesRepo"),
            format!("{files:?}: Kubespray's files_repo is an http:// or https:// URL"),
        ));
    }
}

/// The CCM is released per Kubernetes minor: v1.34.x drives a 1.34 control plane only.
fn ccm_matches_kubernetes(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let key = versions::CLOUD_CONTROLLER_MANAGER;
    let Some(tag) = spec.images.get(key).and_then(|o| o.tag.as_deref()) else {
        return;
    };
    let (Some(ccm), Some(minor)) = (
        versions::SemVer::parse(tag),
        images::kubernetes_minor(&spec.kubernetes_version),
    ) else {
        return;
    };
    let component = versions::component(key);
    let supported = component
        .release(tag)
        .map(|r| r.kubernetes_range().contains(minor))
        .unwrap_or(ccm.minor == minor);
    if !supported {
        let fix = component
            .newest_for_kubernetes(minor)
            .map_or_else(|| format!("a v1.{minor}.x release"), |r| r.version.clone());
        p.push((
            at.key(key).key("tag"),
            format!(
                "cloud-controller-manager {tag} serves Kubernetes 1.{} only, and kubernetesVersion is {}: use {fix}",
                ccm.minor, spec.kubernetes_version
            ),
        ));
    }
}
