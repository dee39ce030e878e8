//! The Kubean-built cluster's images: Kubespray's own list for the Kubespray commit the spec's
//! Kubean release pins (`kubespray_images.txt`, generator output committed as data), at the
//! spec's Kubernetes version, for mirroring beside the bundle's images.

use std::sync::LazyLock;

use crate::images::{ResolvedImage, mirrored};
use crate::kubean_support;
use crate::types::ClusterSpec;

const DATA: &str = include_str!("kubespray_images.txt");

/// The prefix of every key this list gives its images (`kubespray/etcd`).
const KEY_PREFIX: &str = "kubespray/";

/// One generator run: a Kubean release, the Kubernetes version it was generated for, and the
/// image references it printed.
#[derive(Debug)]
struct Section {
    kubean: String,
    minor: u32,
    version: String,
    images: Vec<String>,
}

static SECTIONS: LazyLock<Vec<Section>> =
    LazyLock::new(|| parse(DATA).unwrap_or_else(|e| panic!("kubespray_images.txt: {e}")));

fn parse(text: &str) -> Result<Vec<Section>, String> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let words: Vec<&str> = head.split_whitespace().collect();
            let ["kubean", kubean, "kubernetes", version] = words[..] else {
                return Err(format!(
                    "line {}: expected [kubean <release> kubernetes <version>]",
                    index + 1
                ));
            };
            let (minor, _) = kubean_support::minor_patch(version)
                .ok_or_else(|| format!("line {}: {version} is not 1.<minor>.<patch>", index + 1))?;
            sections.push(Section {
                kubean: kubean.into(),
                minor,
                version: version.into(),
                images: Vec::new(),
            });
            continue;
        }
        let section = sections
            .last_mut()
            .ok_or_else(|| format!("line {}: an image before any section", index + 1))?;
        section.images.push(line.into());
    }
    Ok(sections)
}

/// `repository:tag` split at the tag's colon (a registry port's colon comes before a slash).
fn split(reference: &str) -> (&str, &str) {
    match reference.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => (repository, tag),
        _ => (reference, ""),
    }
}

fn section(spec: &ClusterSpec) -> Option<&'static Section> {
    let kubean = kubean_support::image_tag(&spec.kubean.spray_job_image)?;
    let (minor, _) = kubean_support::minor_patch(&spec.kubernetes_version)?;
    SECTIONS
        .iter()
        .find(|s| s.kubean == kubean && s.minor == minor)
}

/// Every image Kubespray can pull for the spec's Kubean release and Kubernetes version, behind
/// the spec's mirror when it names one (as Kubespray's `*_image_repo` variables put them there).
/// Empty when the release or the minor has no list.
pub fn images(spec: &ClusterSpec) -> Vec<ResolvedImage> {
    let Some(section) = section(spec) else {
        return Vec::new();
    };
    let generated_tag = format!("v{}", section.version);
    let spec_tag = format!("v{}", spec.kubernetes_version.trim_start_matches('v'));
    section
        .images
        .iter()
        .map(|reference| {
            let (repository, tag) = split(reference);
            // The kube-* images carry the Kubernetes version itself.
            let tag = if tag == generated_tag {
                spec_tag.clone()
            } else {
                tag.to_owned()
            };
            let name = repository.rsplit('/').next().unwrap_or(repository);
            ResolvedImage {
                key: format!("{KEY_PREFIX}{name}"),
                used_by: format!(
                    "Kubespray (Kubean {}), the Kubean-built cluster",
                    section.kubean
                ),
                repository: mirrored(spec, repository),
                tag,
                digest: None,
                digest_source: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> ClusterSpec {
        crate::parse_spec(crate::EXAMPLE, "x").unwrap().spec.spec
    }

    #[test]
    fn the_data_parses_into_one_section_per_minor_of_the_release() {
        let minors: Vec<u32> = SECTIONS.iter().map(|s| s.minor).collect();
        assert_eq!(minors, [34, 35, 36]);
        for s in SECTIONS.iter() {
            assert_eq!(s.kubean, "v0.37.0");
            assert_eq!(s.images.len(), 48, "{}", s.version);
            let mut unique = s.images.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), 48, "duplicates in {}", s.version);
        }
        // Keys are `kubespray/<last path element>`: they must tell the images apart.
        let mut keys: Vec<String> = images(&example()).into_iter().map(|i| i.key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 48);
    }

    #[test]
    fn kube_images_follow_the_spec_version_and_the_rest_the_minor() {
        let mut spec = example();
        spec.kubernetes_version = "1.35.5".into();
        let images = images(&spec);
        let reference = |key: &str| {
            images
                .iter()
                .find(|i| i.key == key)
                .unwrap_or_else(|| panic!("{key} missing"))
                .reference()
        };
        assert_eq!(
            reference("kubespray/kube-apiserver"),
            "registry.k8s.io/kube-apiserver:v1.35.5"
        );
        assert_eq!(reference("kubespray/etcd"), "quay.io/coreos/etcd:v3.6.13");
        assert_eq!(
            reference("kubespray/coredns"),
            "registry.k8s.io/coredns/coredns:v1.12.4"
        );
        spec.kubernetes_version = "v1.34.2".into();
        assert!(images_of(&spec).contains(&"quay.io/coreos/etcd:v3.5.32".to_owned()));
        assert!(images_of(&spec).contains(&"registry.k8s.io/kube-proxy:v1.34.2".to_owned()));
    }

    fn images_of(spec: &ClusterSpec) -> Vec<String> {
        images(spec).iter().map(ResolvedImage::reference).collect()
    }

    #[test]
    fn a_mirror_takes_every_image_and_an_unknown_release_has_none() {
        let mut spec = example();
        spec.registry = Some(crate::Registry {
            mirror: "mirror.local:5000".into(),
            files_repo: None,
        });
        let all = images_of(&spec);
        assert!(
            all.contains(&"mirror.local:5000/coreos/etcd:v3.6.13".to_owned()),
            "{all:?}"
        );
        assert!(
            all.contains(&"mirror.local:5000/library/nginx:1.30.1-alpine".to_owned()),
            "{all:?}"
        );
        assert!(all.iter().all(|r| r.starts_with("mirror.local:5000/")));
        spec.kubean.spray_job_image = "ghcr.io/kubean-io/spray-job:v0.36.0".into();
        assert!(images(&spec).is_empty());
    }

    #[test]
    fn a_bad_section_head_is_an_error_with_its_line() {
        assert_eq!(
            parse("# x\n[kubean v1]\n").unwrap_err(),
            "line 2: expected [kubean <release> kubernetes <version>]"
        );
        assert_eq!(
            parse("a:b\n").unwrap_err(),
            "line 1: an image before any section"
        );
    }
}
