//! Which Kubernetes versions each Kubean release can install (`kubean_support.txt`, sourced and
//! dated there). Kubespray downloads kubeadm/kubelet/kubectl by checksum, and only the versions
//! of its own table have one: any other version fails the install after the control plane's
//! hosts are already half-prepared.

use std::sync::LazyLock;

const TABLE: &str = include_str!("kubean_support.txt");

/// One Kubean release and the Kubernetes patch ranges it installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeanRelease {
    /// `v0.37.0`
    pub release: String,
    /// `2026-08-05`
    pub date: String,
    /// (minor, lowest patch, highest patch), minors ascending.
    pub minors: Vec<(u32, u32, u32)>,
}

impl KubeanRelease {
    pub fn covers(&self, minor: u32, patch: u32) -> bool {
        self.minors
            .iter()
            .any(|&(m, lo, hi)| m == minor && (lo..=hi).contains(&patch))
    }

    /// `1.34.0–1.36.3`
    pub fn range(&self) -> String {
        match (self.minors.first(), self.minors.last()) {
            (Some(&(m0, lo, _)), Some(&(m1, _, hi))) => format!("1.{m0}.{lo}–1.{m1}.{hi}"),
            _ => "nothing".into(),
        }
    }
}

/// A line of the embedded table that does not read as `vX.Y.Z DATE 1.M:LO-HI...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kubean_support.txt line {line}: {text:?}")]
struct TableError {
    line: usize,
    text: String,
}

fn parse(table: &str) -> Result<Vec<KubeanRelease>, TableError> {
    let mut out = Vec::new();
    for (i, line) in table.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || TableError {
            line: i + 1,
            text: line.to_owned(),
        };
        let mut words = line.split_whitespace();
        let release = words.next().ok_or_else(bad)?.to_owned();
        let date = words.next().ok_or_else(bad)?.to_owned();
        let mut minors = Vec::new();
        for word in words {
            let (minor, patches) = word.split_once(':').ok_or_else(bad)?;
            let minor = minor.strip_prefix("1.").ok_or_else(bad)?;
            let (lo, hi) = patches.split_once('-').ok_or_else(bad)?;
            let num = |s: &str| s.parse::<u32>().map_err(|_| bad());
            minors.push((num(minor)?, num(lo)?, num(hi)?));
        }
        if minors.is_empty() || !release.starts_with('v') {
            return Err(bad());
        }
        out.push(KubeanRelease {
            release,
            date,
            minors,
        });
    }
    Ok(out)
}

/// Every release in the table, oldest first.
pub fn releases() -> &'static [KubeanRelease] {
    static RELEASES: LazyLock<Vec<KubeanRelease>> =
        LazyLock::new(|| parse(TABLE).expect("kubean_support.txt parses (tested)"));
    &RELEASES
}

pub fn release(tag: &str) -> Option<&'static KubeanRelease> {
    releases().iter().find(|r| r.release == tag)
}

/// The newest release that installs `1.<minor>.<patch>`.
pub fn newest_covering(minor: u32, patch: u32) -> Option<&'static KubeanRelease> {
    releases().iter().rev().find(|r| r.covers(minor, patch))
}

/// `(minor, patch)` of a Kubernetes version `1.<minor>.<patch>` (a leading `v` allowed).
pub fn minor_patch(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim_start_matches('v').split('.');
    if parts.next()? != "1" {
        return None;
    }
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((minor, patch))
}

/// The tag of an image reference (`ghcr.io/kubean-io/spray-job:v0.37.0@sha256:...` → `v0.37.0`).
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_is_ordered() {
        let all = parse(TABLE).unwrap();
        assert!(all.len() >= 50, "{}", all.len());
        assert_eq!(all.last().unwrap().release, "v0.37.0");
    }

    // Facts from each release's manifest.cr.yaml (kubean-io/kubean-helm-chart, tags
    // kubean-v0.26.4 and kubean-v0.34.0) and kubean-io/kubean docs/overrides/releases/v0.37.0.md.
    #[test]
    fn ranges_match_upstream_manifests() {
        assert_eq!(release("v0.26.4").unwrap().range(), "1.31.0–1.33.1");
        assert_eq!(release("v0.34.0").unwrap().range(), "1.33.0–1.35.4");
        let latest = release("v0.37.0").unwrap();
        assert_eq!(latest.range(), "1.34.0–1.36.3");
        assert!(latest.covers(35, 5) && latest.covers(35, 7) && !latest.covers(35, 8));
        assert!(!release("v0.26.4").unwrap().covers(35, 5));
        assert_eq!(newest_covering(33, 11).unwrap().release, "v0.34.2");
    }

    #[test]
    fn image_tags() {
        assert_eq!(
            image_tag("ghcr.io/kubean-io/spray-job:v0.37.0"),
            Some("v0.37.0")
        );
        assert_eq!(
            image_tag("registry:5000/kubean-io/spray-job:v0.37.0@sha256:abcd"),
            Some("v0.37.0")
        );
        assert_eq!(image_tag("registry:5000/kubean-io/spray-job"), None);
        assert_eq!(image_tag("spray-job@sha256:abcd"), None);
    }
}
