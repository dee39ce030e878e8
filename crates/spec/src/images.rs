//! Every image the bundle and its charts pull, resolved from the spec and the versions table:
//! repository (the spec's override, else the table's), tag (never floating) and digest (the
//! spec's, else one an upstream file pins, else none). Render writes these references; the
//! `images` command lists them for mirroring.

use serde::Serialize;

use crate::types::{ClusterSpec, GpuSoftware, ImageOverride, PoolType};
use crate::versions::{self, Component};

/// Which spec key overrides an image, and whether the override may set the tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSource {
    /// The tag is the override's `tag`, else the table's default.
    Override,
    /// The tag comes from this spec field; an override may not set one.
    Field(&'static str),
}

/// The components `spec.images` accepts, with where each one's tag comes from.
pub fn overridable(key: &str) -> Option<TagSource> {
    match key {
        versions::KARPENTER => Some(TagSource::Field("karpenter.version")),
        versions::DEVICE_PLUGIN => Some(TagSource::Field("gpu.devicePluginVersion")),
        versions::CLOUD_CONTROLLER_MANAGER
        | versions::CUDA_SAMPLE
        | versions::PAUSE
        | versions::EFA_DEVICE_PLUGIN => Some(TagSource::Override),
        _ => chart_image(key).map(|_| TagSource::Field("the chart version (versions table)")),
    }
}

/// Keys `spec.images` accepts, for error messages.
pub fn overridable_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        versions::KARPENTER,
        versions::CLOUD_CONTROLLER_MANAGER,
        versions::DEVICE_PLUGIN,
        versions::CUDA_SAMPLE,
        versions::PAUSE,
        versions::EFA_DEVICE_PLUGIN,
    ]
    .map(str::to_owned)
    .to_vec();
    keys.extend(all_chart_images().map(|(key, _)| key));
    keys
}

/// The charts whose images `spec.images` can override one by one (`chart/image` keys).
const CHARTS_WITH_IMAGES: [&str; 2] = [versions::EBS_CSI_DRIVER, versions::GPU_OPERATOR];

/// `aws-ebs-csi-driver/csi-provisioner` → that chart image as the newest release of the table
/// that pulls it describes it (a key stays overridable while any known release pulls it).
pub fn chart_image(key: &str) -> Option<versions::ChartImage> {
    let (chart, _) = key.split_once('/')?;
    if !CHARTS_WITH_IMAGES.contains(&chart) {
        return None;
    }
    let name = &key[chart.len() + 1..];
    versions::component(chart)
        .releases
        .iter()
        .rev()
        .flat_map(|r| r.images.iter())
        .find(|image| image.name == name)
        .cloned()
}

/// The release of `chart` the spec installs: the GPU Operator's pin, else the table's default.
pub fn chart_release<'a>(spec: &'a ClusterSpec, chart: &str) -> &'a str {
    match (chart, &spec.gpu) {
        (versions::GPU_OPERATOR, Some(gpu)) => gpu.operator_release(),
        _ => versions::default_version(chart),
    }
}

/// The images the spec's release of `chart` pulls, each with its `chart/image` key.
pub fn chart_images(
    spec: &ClusterSpec,
    chart: &str,
) -> impl Iterator<Item = (String, versions::ChartImage)> {
    release_images(chart, chart_release(spec, chart))
}

fn release_images(
    chart: &str,
    version: &str,
) -> impl Iterator<Item = (String, versions::ChartImage)> {
    let images = CHARTS_WITH_IMAGES
        .contains(&chart)
        .then(|| versions::component(chart).release(version))
        .flatten()
        .map(|r| r.images.clone())
        .unwrap_or_default();
    let chart = chart.to_owned();
    images
        .into_iter()
        .map(move |image| (format!("{chart}/{}", image.name), image))
}

/// Every `chart/image` key any known release pulls, once each.
fn all_chart_images() -> impl Iterator<Item = (String, versions::ChartImage)> {
    let mut seen = std::collections::BTreeSet::new();
    CHARTS_WITH_IMAGES
        .into_iter()
        .flat_map(|chart| {
            versions::component(chart)
                .releases
                .iter()
                .flat_map(move |r| release_images(chart, &r.version))
        })
        .filter(move |(key, _)| seen.insert(key.clone()))
}

/// One image as the bundle pulls it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    /// The versions table component, or `chart/image` for a chart's image.
    pub key: String,
    /// What pulls it (`cloud/aws-cloud-controller-manager.yaml`, `helm: aws-ebs-csi-driver`).
    pub used_by: String,
    pub repository: String,
    pub tag: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where the digest comes from: a spec field or the upstream file the table names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_source: Option<String>,
}

impl ResolvedImage {
    /// `repository:tag`, with `@digest` when one is known.
    pub fn reference(&self) -> String {
        let mut out = self.repository.clone();
        if !self.tag.is_empty() {
            out = format!("{out}:{}", self.tag);
        }
        if let Some(d) = &self.digest {
            out = format!("{out}@{d}");
        }
        out
    }
}

fn table_image(component: &Component) -> String {
    component
        .image
        .clone()
        .unwrap_or_else(|| panic!("versions.yaml: {} has no image", component.name))
}

/// The minor of `1.35.5` / `v1.35.5`.
pub fn kubernetes_minor(version: &str) -> Option<u32> {
    versions::SemVer::parse(version).map(|v| v.minor)
}

/// The CCM tag render pins: the override's, else the newest known release of the control
/// plane's minor, else `v1.<minor>.0` (a minor the table does not know).
fn ccm_tag(spec: &ClusterSpec, over: Option<&ImageOverride>) -> String {
    if let Some(tag) = over.and_then(|o| o.tag.clone()) {
        return tag;
    }
    let minor = kubernetes_minor(&spec.kubernetes_version).unwrap_or(0);
    versions::component(versions::CLOUD_CONTROLLER_MANAGER)
        .newest_for_kubernetes(minor)
        .map(|r| r.version.clone())
        .unwrap_or_else(|| format!("v1.{minor}.0"))
}

/// The upstream registries nodes get a containerd mirror for (`hosts.toml`), with the server
/// containerd would otherwise pull from.
pub const MIRRORED_REGISTRIES: [(&str, &str); 5] = [
    ("registry.k8s.io", "https://registry.k8s.io"),
    ("public.ecr.aws", "https://public.ecr.aws"),
    ("nvcr.io", "https://nvcr.io"),
    ("docker.io", "https://registry-1.docker.io"),
    ("ghcr.io", "https://ghcr.io"),
];

/// `upstream-host/path` → `mirror/path` when the spec names a mirror (a repository already in
/// the mirror is left alone). A name without a registry host is Docker Hub's.
pub fn mirrored(spec: &ClusterSpec, repository: &str) -> String {
    let Some(mirror) = spec.registry.as_ref().map(|r| r.mirror.as_str()) else {
        return repository.to_owned();
    };
    if repository.starts_with(&format!("{mirror}/")) {
        return repository.to_owned();
    }
    let path = match repository.split_once('/') {
        Some((host, path)) if host == "localhost" || host.contains('.') || host.contains(':') => {
            path.to_owned()
        }
        Some(_) => repository.to_owned(),
        None => format!("library/{repository}"),
    };
    format!("{mirror}/{path}")
}

/// Resolves one overridable image (a key [`overridable`] accepts).
pub fn resolve(spec: &ClusterSpec, key: &str) -> ResolvedImage {
    let over = spec.images.get(key);
    let (used_by, repository, tag, component) = match key {
        versions::KARPENTER => {
            let c = versions::component(key);
            (
                "helm: karpenter".to_owned(),
                table_image(c),
                spec.karpenter.version.clone(),
                Some(c),
            )
        }
        versions::CLOUD_CONTROLLER_MANAGER => {
            let c = versions::component(key);
            (
                "cloud/aws-cloud-controller-manager.yaml".to_owned(),
                table_image(c),
                ccm_tag(spec, over),
                Some(c),
            )
        }
        versions::DEVICE_PLUGIN => {
            let c = versions::component(key);
            let tag = spec.gpu.as_ref().map_or_else(
                || versions::default_version(key).to_owned(),
                |g| g.device_plugin_version.clone(),
            );
            (
                "gpu/nvidia-device-plugin.yaml".to_owned(),
                table_image(c),
                tag,
                Some(c),
            )
        }
        versions::CUDA_SAMPLE | versions::PAUSE | versions::EFA_DEVICE_PLUGIN => {
            let c = versions::component(key);
            let tag = over
                .and_then(|o| o.tag.clone())
                .unwrap_or_else(|| versions::default_version(key).to_owned());
            let used_by = match key {
                versions::PAUSE => "verify/ (inflate Deployments)",
                versions::EFA_DEVICE_PLUGIN => "efa/aws-efa-k8s-device-plugin.yaml",
                _ => "verify/ (CUDA Pods)",
            };
            (used_by.to_owned(), table_image(c), tag, Some(c))
        }
        _ => {
            let chart = key.split_once('/').map_or(key, |(chart, _)| chart);
            let image = chart_images(spec, chart)
                .find(|(k, _)| k == key)
                .map(|(_, image)| image)
                .or_else(|| chart_image(key))
                .unwrap_or_else(|| panic!("not an overridable image: {key}"));
            (
                format!("helm: {chart} ({})", image.values),
                image.repository,
                image.tag,
                None,
            )
        }
    };
    let (digest, digest_source) = match over.and_then(|o| o.digest.clone()) {
        Some(d) => (Some(d), Some(format!("spec.images.{key}.digest"))),
        None => component
            .and_then(|c| c.release(&tag))
            .and_then(|r| Some((r.digest.clone()?, r.digest_source.clone()?)))
            .map_or((None, None), |(d, s)| (Some(d), Some(s))),
    };
    ResolvedImage {
        key: key.to_owned(),
        used_by,
        repository: over
            .and_then(|o| o.repository.clone())
            .unwrap_or_else(|| mirrored(spec, &repository)),
        tag,
        digest,
        digest_source,
    }
}

/// Splits a full reference (`host/repo:tag@sha256:...`) the spec holds in one field.
fn split_reference(
    spec: &ClusterSpec,
    key: &str,
    used_by: &str,
    field: &str,
    reference: &str,
) -> ResolvedImage {
    let parts = kk_model::image::ImageRef::parse(reference);
    ResolvedImage {
        key: key.to_owned(),
        used_by: used_by.to_owned(),
        repository: mirrored(spec, parts.repository),
        tag: parts.tag.unwrap_or_default().to_owned(),
        digest: parts.digest.map(str::to_owned),
        digest_source: parts.digest.map(|_| field.to_owned()),
    }
}

/// The reference render writes for `key` (any key [`bundle_images`] lists).
pub fn reference_of(spec: &ClusterSpec, key: &str) -> Option<String> {
    bundle_images(spec)
        .into_iter()
        .find(|i| i.key == key)
        .map(|i| i.reference())
}

/// Every image the bundle and its Helm charts pull, in a stable order.
pub fn bundle_images(spec: &ClusterSpec) -> Vec<ResolvedImage> {
    let mut out = vec![split_reference(
        spec,
        versions::KUBEAN,
        "kubean/ (ClusterOperation, on the management cluster)",
        "kubean.sprayJobImage",
        &spec.kubean.spray_job_image,
    )];
    out.push(resolve(spec, versions::CLOUD_CONTROLLER_MANAGER));
    out.extend(chart_images(spec, versions::EBS_CSI_DRIVER).map(|(key, _)| resolve(spec, &key)));
    out.push(resolve(spec, versions::KARPENTER));
    if let Some(auth) = &spec.iam_authenticator {
        out.push(split_reference(
            spec,
            versions::IAM_AUTHENTICATOR,
            "authenticator/",
            "iamAuthenticator.image",
            &auth.image,
        ));
    }
    if let Some(controller) = &spec.controller {
        out.push(ResolvedImage {
            key: "kubean-karpenter".into(),
            used_by: "rotator/".into(),
            repository: mirrored(spec, &controller.image.repository),
            tag: String::new(),
            digest: Some(controller.image.digest.clone()),
            digest_source: Some("controller.image.digest".into()),
        });
    }
    let has = |t: PoolType| spec.pools.iter().any(|p| p.pool_type == t);
    if has(PoolType::Gpu) {
        let operator = spec
            .gpu
            .as_ref()
            .is_some_and(|g| g.stack == GpuSoftware::Operator);
        if operator {
            out.extend(
                chart_images(spec, versions::GPU_OPERATOR).map(|(key, _)| resolve(spec, &key)),
            );
        } else {
            out.push(resolve(spec, versions::DEVICE_PLUGIN));
        }
        out.push(resolve(spec, versions::CUDA_SAMPLE));
    }
    if has(PoolType::Cpu) {
        out.push(resolve(spec, versions::PAUSE));
    }
    if spec.pools.iter().any(|p| p.efa) {
        out.push(resolve(spec, versions::EFA_DEVICE_PLUGIN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_keeps_the_path_and_drops_the_upstream_host() {
        let mut spec = crate::parse_spec(crate::EXAMPLE, "x").unwrap().spec.spec;
        assert_eq!(
            mirrored(&spec, "registry.k8s.io/a/b"),
            "registry.k8s.io/a/b"
        );
        spec.registry = Some(crate::Registry {
            mirror: "mirror.local:5000".into(),
            files_repo: None,
        });
        assert_eq!(
            mirrored(&spec, "registry.k8s.io/a/b"),
            "mirror.local:5000/a/b"
        );
        assert_eq!(
            mirrored(&spec, "busybox"),
            "mirror.local:5000/library/busybox"
        );
        assert_eq!(
            mirrored(&spec, "mirror.local:5000/x"),
            "mirror.local:5000/x"
        );
        let r = split_reference(&spec, "k", "u", "f", "host:5000/a/b:v1.2.3@sha256:00");
        assert_eq!(r.reference(), "mirror.local:5000/a/b:v1.2.3@sha256:00");
        for image in bundle_images(&spec) {
            assert!(
                image.repository.starts_with("mirror.local:5000/"),
                "{image:?}"
            );
        }
    }

    #[test]
    fn the_gpu_stack_decides_which_device_plugin_images_are_listed() {
        let plain = crate::parse_spec(crate::EXAMPLE, "x").unwrap().spec.spec;
        let operator = crate::parse_spec(
            &crate::EXAMPLE.replace(
                "devicePluginVersion: v0.20.0",
                "devicePluginVersion: v0.20.0\n    stack: operator",
            ),
            "x",
        )
        .unwrap()
        .spec
        .spec;
        let keys = |spec: &ClusterSpec| -> Vec<String> {
            bundle_images(spec).into_iter().map(|i| i.key).collect()
        };
        let plain = keys(&plain);
        let operator = keys(&operator);
        assert!(plain.contains(&versions::DEVICE_PLUGIN.to_owned()));
        assert!(!plain.iter().any(|k| k.starts_with("nvidia-gpu-operator/")));
        assert!(!operator.contains(&versions::DEVICE_PLUGIN.to_owned()));
        for name in [
            "gpu-operator",
            "k8s-device-plugin",
            "dcgm-exporter",
            "node-feature-discovery",
        ] {
            assert!(
                operator.contains(&format!("nvidia-gpu-operator/{name}")),
                "{name} in {operator:?}"
            );
        }
    }
}
