//! The versions table (`versions.yaml`): every component the bundle runs, the releases we know
//! of, their image digests where an upstream file pins one, and the Kubernetes minors each
//! supports. Render, validate, `versions`, `images` and `version -o json` all read it here.

use std::sync::LazyLock;

use kk_model::yaml::{self, LoadLimits};
use serde::{Deserialize, Serialize};

const TABLE: &str = include_str!("versions.yaml");

pub const KARPENTER: &str = "karpenter";
pub const CLOUD_CONTROLLER_MANAGER: &str = "cloud-controller-manager";
pub const EBS_CSI_DRIVER: &str = "aws-ebs-csi-driver";
pub const DEVICE_PLUGIN: &str = "nvidia-device-plugin";
pub const GPU_OPERATOR: &str = "nvidia-gpu-operator";
pub const EFA_DEVICE_PLUGIN: &str = "aws-efa-k8s-device-plugin";
pub const IAM_AUTHENTICATOR: &str = "aws-iam-authenticator";
pub const KUBEAN: &str = "kubean";
pub const CUDA_SAMPLE: &str = "cuda-sample";
pub const PAUSE: &str = "pause";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Table {
    pub components: Vec<Component>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    pub name: String,
    pub title: String,
    /// Image repository; a release's tag is its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<Chart>,
    /// What render pins when the spec does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    pub source: String,
    pub checked: String,
    pub releases: Vec<Release>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Chart {
    pub repository: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// `1.29-1.36`, `1.17+`, or `any` (upstream states no range).
    pub kubernetes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What a chart pulls at this version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ChartImage>,
    /// Where the vendor publishes support lines (the GPU Operator): this release's line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub support: Option<Support>,
}

/// A release line's standing on the vendor's support page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Support {
    Supported,
    /// Still runs, no longer the line to be on: fixes go to the newer line.
    Deprecated,
    EndOfSupport,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Supported => "supported",
            Support::Deprecated => "deprecated",
            Support::EndOfSupport => "end of support",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartImage {
    pub name: String,
    pub repository: String,
    pub tag: String,
    /// The chart values key holding the image (`sidecars.provisioner.image`).
    pub values: String,
    /// How the values key spells the image.
    #[serde(default)]
    pub form: ValuesForm,
}

/// How a chart's values spell one image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ValuesForm {
    /// `{repository: host/path/name, tag}`: most charts, the EBS CSI driver's among them.
    #[default]
    RepositoryTag,
    /// `{repository: host/path, image: name, version}`: the GPU Operator's own images and its
    /// operands, which it joins as `repository/image:version`.
    RepositoryImageVersion,
}

/// Kubernetes minors a release supports: `lowest..=highest`, `highest` None when open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinorRange {
    pub lowest: u32,
    pub highest: Option<u32>,
}

impl MinorRange {
    pub fn contains(&self, minor: u32) -> bool {
        minor >= self.lowest && self.highest.is_none_or(|h| minor <= h)
    }
}

impl std::fmt::Display for MinorRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.highest {
            Some(h) if h == self.lowest => write!(f, "1.{h}"),
            Some(h) => write!(f, "1.{}–1.{h}", self.lowest),
            None if self.lowest == 0 => write!(f, "any (upstream states no range)"),
            None => write!(f, "1.{} and later", self.lowest),
        }
    }
}

fn minor_of(text: &str) -> Option<u32> {
    text.strip_prefix("1.")?.parse().ok()
}

fn parse_range(text: &str) -> Option<MinorRange> {
    if text == "any" {
        return Some(MinorRange {
            lowest: 0,
            highest: None,
        });
    }
    if let Some(floor) = text.strip_suffix('+') {
        return Some(MinorRange {
            lowest: minor_of(floor)?,
            highest: None,
        });
    }
    let (lo, hi) = text.split_once('-')?;
    let (lowest, highest) = (minor_of(lo)?, minor_of(hi)?);
    (lowest <= highest).then_some(MinorRange {
        lowest,
        highest: Some(highest),
    })
}

impl Release {
    pub fn kubernetes_range(&self) -> MinorRange {
        parse_range(&self.kubernetes).expect("versions.yaml ranges parse (tested)")
    }
}

impl Component {
    pub fn release(&self, version: &str) -> Option<&Release> {
        let want = SemVer::parse(version);
        self.releases
            .iter()
            .find(|r| r.version == version || (want.is_some() && SemVer::parse(&r.version) == want))
    }

    pub fn default_release(&self) -> Option<&Release> {
        self.release(self.default.as_deref()?)
    }

    /// The newest known release of `version`'s major.minor, when `version` is a semantic one.
    pub fn newest_patch(&self, version: &str) -> Option<&Release> {
        let want = SemVer::parse(version)?;
        self.releases
            .iter()
            .filter_map(|r| Some((SemVer::parse(&r.version)?, r)))
            .filter(|(v, _)| v.major == want.major && v.minor == want.minor)
            .max_by_key(|(v, _)| *v)
            .map(|(_, r)| r)
    }

    /// The newest known release of all.
    pub fn newest(&self) -> Option<&Release> {
        self.releases
            .iter()
            .filter_map(|r| Some((SemVer::parse(&r.version)?, r)))
            .max_by_key(|(v, _)| *v)
            .map(|(_, r)| r)
    }

    /// The newest release supporting Kubernetes `1.<minor>` (the CCM's line for that minor).
    pub fn newest_for_kubernetes(&self, minor: u32) -> Option<&Release> {
        self.releases
            .iter()
            .filter(|r| r.kubernetes_range().contains(minor))
            .filter_map(|r| Some((SemVer::parse(&r.version)?, r)))
            .max_by_key(|(v, _)| *v)
            .map(|(_, r)| r)
    }

    /// The releases to install one after the other to move from `from` to `to` when upstream
    /// supports upgrades only to the next release line (`major.minor`; the GPU Operator's
    /// 25.10 -> 26.3 -> 26.7): the newest known release of each line after `from`'s, ending
    /// at `to` itself. Empty when `from` is `to`; an error for an unknown `to` or a downgrade.
    /// `from` may be a release the table does not list (what a cluster runs).
    pub fn line_by_line_path(&self, from: &str, to: &str) -> Result<Vec<&Release>, String> {
        let from_v =
            SemVer::parse(from).ok_or_else(|| format!("{from} is not a version like v26.7.0"))?;
        let to_release = self.release(to).ok_or_else(|| {
            format!(
                "{to} is not a known {} release ({})",
                self.name,
                self.known()
            )
        })?;
        let to_v = SemVer::parse(&to_release.version)
            .ok_or_else(|| format!("{to} is not a version like v26.7.0"))?;
        if to_v < from_v {
            return Err(format!(
                "{to} is older than {from}: a downgrade, not an upgrade"
            ));
        }
        let line = |v: SemVer| (v.major, v.minor);
        let mut lines: Vec<(u32, u32)> = self
            .releases
            .iter()
            .filter_map(|r| SemVer::parse(&r.version))
            .map(line)
            .filter(|l| *l > line(from_v) && *l < line(to_v))
            .collect();
        lines.sort_unstable();
        lines.dedup();
        let mut path: Vec<&Release> = lines
            .into_iter()
            .filter_map(|(major, minor)| self.newest_patch(&format!("{major}.{minor}.0")))
            .collect();
        if to_v != from_v {
            path.push(to_release);
        }
        Ok(path)
    }

    /// The known versions, for messages.
    pub fn known(&self) -> String {
        let versions: Vec<&str> = self.releases.iter().map(|r| r.version.as_str()).collect();
        format!("known: {}", versions.join(", "))
    }

    /// `repository:tag` of a release of an image component.
    pub fn image_reference(&self, version: &str) -> Option<String> {
        Some(format!("{}:{version}", self.image.as_ref()?))
    }
}

/// `v1.35.3` / `1.14.1` as numbers; anything else (a tag like `vectoradd-cuda12.5.0`) is None.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SemVer {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl SemVer {
    pub fn parse(text: &str) -> Option<SemVer> {
        let mut parts = text.strip_prefix('v').unwrap_or(text).split('.');
        let mut next = || parts.next()?.parse::<u32>().ok();
        let v = SemVer {
            major: next()?,
            minor: next()?,
            patch: next()?,
        };
        parts.next().is_none().then_some(v)
    }
}

pub use kk_model::image::is_floating;

fn parse(text: &str) -> Result<Table, String> {
    let docs = yaml::load_documents(text, LoadLimits::default()).map_err(|e| e.message)?;
    let doc = docs.into_iter().next().ok_or("empty")?;
    serde_json::from_value(doc.value).map_err(|e| e.to_string())
}

/// The whole table.
pub fn table() -> &'static Table {
    static TABLE_PARSED: LazyLock<Table> =
        LazyLock::new(|| parse(TABLE).expect("versions.yaml parses (tested)"));
    &TABLE_PARSED
}

/// One component by name. Panics on a name not in the table: callers name constants above,
/// which the tests check exist.
pub fn component(name: &str) -> &'static Component {
    table()
        .components
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("versions.yaml has no component {name}"))
}

/// The tag render writes when the spec does not pin one.
pub fn default_version(name: &str) -> &'static str {
    component(name)
        .default
        .as_deref()
        .unwrap_or_else(|| panic!("versions.yaml: {name} has no default"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_is_consistent() {
        let t = parse(TABLE).unwrap();
        for name in [
            KARPENTER,
            CLOUD_CONTROLLER_MANAGER,
            EBS_CSI_DRIVER,
            DEVICE_PLUGIN,
            GPU_OPERATOR,
            IAM_AUTHENTICATOR,
            KUBEAN,
            CUDA_SAMPLE,
            PAUSE,
        ] {
            let c = component(name);
            if let Some(default) = &c.default {
                assert!(c.release(default).is_some(), "{name}: default {default}");
            }
            assert!(c.image.is_some() || c.chart.is_some(), "{name}");
        }
        let digest = regex::Regex::new("^sha256:[0-9a-f]{64}$").unwrap();
        for c in &t.components {
            assert!(!c.releases.is_empty(), "{}", c.name);
            for r in &c.releases {
                assert!(
                    parse_range(&r.kubernetes).is_some(),
                    "{} {}: {}",
                    c.name,
                    r.version,
                    r.kubernetes
                );
                if let Some(d) = &r.digest {
                    assert!(digest.is_match(d), "{} {}", c.name, r.version);
                    assert!(r.digest_source.is_some(), "{} {}", c.name, r.version);
                }
                assert!(!is_floating(&r.version), "{} {}", c.name, r.version);
            }
        }
    }

    #[test]
    fn lookups() {
        let ccm = component(CLOUD_CONTROLLER_MANAGER);
        assert_eq!(ccm.newest_for_kubernetes(35).unwrap().version, "v1.35.3");
        assert_eq!(ccm.newest_for_kubernetes(36).unwrap().version, "v1.36.2");
        assert_eq!(ccm.newest_patch("v1.35.0").unwrap().version, "v1.35.3");
        assert!(ccm.newest_for_kubernetes(28).is_none());
        let karpenter = component(KARPENTER);
        assert_eq!(karpenter.newest_patch("1.14.1").unwrap().version, "1.14.3");
        assert_eq!(karpenter.newest().unwrap().version, "1.15.2");
        assert_eq!(default_version(DEVICE_PLUGIN), "v0.20.0");
        assert_eq!(
            component(GPU_OPERATOR).default_release().unwrap().support,
            Some(Support::Supported),
            "render pins a supported GPU Operator line"
        );
        assert_eq!(default_version(EBS_CSI_DRIVER), "2.64.0");
        let range = parse_range("1.29-1.36").unwrap();
        assert!(range.contains(29) && range.contains(36) && !range.contains(37));
        assert!(parse_range("1.17+").unwrap().contains(99));
        assert!(parse_range("1.36-1.29").is_none());
        assert_eq!(SemVer::parse("vectoradd-cuda12.5.0"), None);
    }

    #[test]
    fn the_gpu_operator_moves_one_release_line_at_a_time() {
        let operator = component(GPU_OPERATOR);
        let path = |from, to| {
            operator.line_by_line_path(from, to).map(|p| {
                p.iter()
                    .map(|r| r.version.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        };
        assert_eq!(path("v25.10.1", "v26.7.0").unwrap(), "v26.3.3 v26.7.0");
        assert_eq!(path("v26.3.3", "v26.7.0").unwrap(), "v26.7.0");
        assert_eq!(path("v26.7.0", "v26.7.0").unwrap(), "");
        assert!(
            path("v26.7.0", "v25.10.1")
                .unwrap_err()
                .contains("downgrade")
        );
        assert!(
            path("v26.7.0", "v27.1.0")
                .unwrap_err()
                .contains("known: v25.10.1")
        );
        // What a cluster runs need not be in the table: a 25.3 install goes through 25.10.
        assert_eq!(
            path("v25.3.4", "v26.7.0").unwrap(),
            "v25.10.1 v26.3.3 v26.7.0"
        );
    }
}
