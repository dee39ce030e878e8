//! `spec.controller`: the in-cluster controller's image, pinned by registry, repository and digest.
//!
//! A tag can be moved after review; a digest names exactly the bytes `dist/image` built. The
//! repository must name its registry: a short name (`kubean-karpenter`) resolves through the
//! node runtime's own defaults (containerd: docker.io), which is not what anyone reviewed.

use std::sync::LazyLock;

use kk_model::FieldPath;
use regex::Regex;

use crate::types::{ClusterSpec, ControllerImage};

type Problems = Vec<(FieldPath, String)>;

// The image-reference grammar of distribution/reference (reference.go, v0.6.0):
//   name             := [domain '/'] remote-name
//   domain           := host [':' port-number]
//   domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
//   path-component   := alpha-numeric [separator alpha-numeric]*
//   alpha-numeric    := /[a-z0-9]+/
//   separator        := /[_.]|__|[-]+/
// and a name is at most 255 characters. IP-literal hosts are left out on purpose (IPv4 matches
// the domain-name form anyway).
pub(super) static HOST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])(\.([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*(:[0-9]{1,5})?$",
    )
    .expect("valid regex")
});
static PATH_COMPONENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$").expect("valid regex"));
pub(super) static DIGEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^sha256:[0-9a-f]{64}$").expect("valid regex"));
const NAME_MAX: usize = 255;

pub(crate) fn validate(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let at = at.key("controller");
    match (&spec.controller, spec.join.mode.runs_controller()) {
        (None, true) => p.push((
            at,
            "the ssm and secrets-manager join modes run the in-cluster controller: set \
             controller.image.repository (your registry) and controller.image.digest \
             (dist/image writes it to dist/out/IMAGE_DIGEST)"
                .into(),
        )),
        // Unused in static mode, but still checked: switching modes must not surprise.
        (Some(c), _) => image(p, &at.key("image"), &c.image),
        (None, false) => {}
    }
}

fn image(p: &mut Problems, at: &FieldPath, image: &ControllerImage) {
    if let Some(problem) = repository_problem(&image.repository) {
        p.push((at.key("repository"), problem));
    }
    if !DIGEST.is_match(&image.digest) {
        p.push((
            at.key("digest"),
            format!(
                "{:?} is not a manifest digest like sha256:<64 lowercase hex digits> \
                 (dist/out/IMAGE_DIGEST)",
                image.digest
            ),
        ));
    }
}

fn repository_problem(repo: &str) -> Option<String> {
    repository_problem_for(repo, "controller.image.digest")
}

/// What is wrong with an image repository (registry host included, no tag, no digest); the
/// digest belongs in `digest_field`.
pub(super) fn repository_problem_for(repo: &str, digest_field: &str) -> Option<String> {
    let example = "registry.example.com/team/kubean-karpenter";
    if repo.contains('@') {
        return Some(format!(
            "{repo:?}: put the digest in {digest_field}, not in the repository"
        ));
    }
    if repo.len() > NAME_MAX {
        return Some(format!(
            "an image name is at most {NAME_MAX} characters, this is {}",
            repo.len()
        ));
    }
    let (host, path) = match repo.split_once('/') {
        Some((host, path)) if host == "localhost" || host.contains('.') || host.contains(':') => {
            (host, path)
        }
        _ => {
            return Some(format!(
                "{repo:?} names no registry: write it in full, like {example} \
                 (docker.io/... for Docker Hub); a short name resolves through each node's runtime defaults"
            ));
        }
    };
    if !HOST.is_match(host) {
        return Some(format!(
            "{host:?} is not a registry host[:port] (letters, digits, '-', '.')"
        ));
    }
    if let Some(bad) = path.split('/').find(|c| !PATH_COMPONENT.is_match(c)) {
        let what = if bad.contains(':') {
            format!("a tag has no place here: the image is pinned by {digest_field}")
        } else {
            "repository path components are lowercase letters and digits, joined by '.', '_', '__' or dashes"
                .to_owned()
        };
        return Some(format!("{repo:?}: {bad:?} is not valid: {what}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::repository_problem;

    #[test]
    fn repositories_that_name_their_registry_pass() {
        for ok in [
            "ghcr.io/kubean-karpenter/kubean-karpenter",
            "registry.example.com:5000/team/kubean-karpenter",
            "localhost/kubean-karpenter",
            "docker.io/library/kube_an.karpenter__x",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/kubean-karpenter",
        ] {
            assert_eq!(repository_problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn short_names_tags_digests_and_uppercase_are_refused() {
        for (bad, says) in [
            ("kubean-karpenter", "names no registry"),
            ("team/kubean-karpenter", "names no registry"),
            (
                "ghcr.io/team/kubean-karpenter:0.1.0",
                "a tag has no place here",
            ),
            (
                "ghcr.io/team/kubean-karpenter@sha256:00",
                "not in the repository",
            ),
            ("ghcr.io/Team/kubean-karpenter", "lowercase"),
            ("ghcr.io/team//kubean-karpenter", "lowercase"),
            ("ghcr.io/team/-x", "lowercase"),
            ("-bad.io/x", "not a registry host"),
            ("ghcr.io/", "lowercase"),
        ] {
            let got = repository_problem(bad).unwrap_or_default();
            assert!(got.contains(says), "{bad}: {got}");
        }
        let long = format!("ghcr.io/{}", "a".repeat(250));
        assert!(repository_problem(&long).unwrap().contains("at most 255"));
    }
}
