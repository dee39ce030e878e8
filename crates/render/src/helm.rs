//! The Helm releases a bundle installs (ORDER.md steps 2, 5 and, with the GPU Operator, 7), typed, so that ORDER.md's
//! commands and `apply` read one list.

use kk_spec::{ClusterSpec, ElasticCluster, images, versions};
use serde_json::{Value, json};

/// One Helm release: which chart, where, and the bundle file holding its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmRelease {
    pub name: String,
    pub namespace: String,
    /// A chart name with `repo`, or an `oci://` reference.
    pub chart: String,
    pub repo: Option<String>,
    pub version: String,
    /// Bundle path of the values file.
    pub values_file: String,
    /// `--create-namespace`: Karpenter's namespace may not exist yet; kube-system always does.
    pub create_namespace: bool,
}

impl HelmRelease {
    /// `helm upgrade --install …` with the values read from `values_path`.
    pub fn command(&self, values_path: &str) -> Vec<String> {
        let mut c: Vec<String> = ["helm", "upgrade", "--install", &self.name, &self.chart]
            .map(str::to_owned)
            .into();
        if let Some(repo) = &self.repo {
            c.extend(["--repo".into(), repo.clone()]);
        }
        c.extend([
            "--version".into(),
            self.version.clone(),
            "--namespace".into(),
            self.namespace.clone(),
        ]);
        if self.create_namespace {
            c.push("--create-namespace".into());
        }
        c.extend(["-f".into(), values_path.to_owned()]);
        c
    }

    /// The command as ORDER.md and error messages show it, values from the bundle's file.
    pub fn command_line(&self) -> String {
        self.command(&self.values_file).join(" ")
    }
}

pub(crate) const EBS_CSI_VALUES: &str = "cloud/ebs-csi-values.yaml";
pub(crate) const KARPENTER_VALUES: &str = "karpenter/values.yaml";
pub(crate) const GPU_OPERATOR_VALUES: &str = "gpu/gpu-operator-values.yaml";

/// The EBS CSI driver (step 2): the table's chart version, in kube-system.
pub fn ebs_csi_driver() -> HelmRelease {
    let chart = versions::component(versions::EBS_CSI_DRIVER).chart.as_ref();
    HelmRelease {
        name: "aws-ebs-csi-driver".into(),
        namespace: "kube-system".into(),
        chart: chart
            .map_or("aws-ebs-csi-driver", |c| c.name.as_str())
            .into(),
        repo: chart.map(|c| c.repository.clone()),
        version: versions::default_version(versions::EBS_CSI_DRIVER).into(),
        values_file: EBS_CSI_VALUES.into(),
        create_namespace: false,
    }
}

/// Karpenter (step 5): the spec's chart version, in the spec's namespace.
pub fn karpenter(cluster: &ElasticCluster) -> HelmRelease {
    let karpenter = &cluster.spec.karpenter;
    HelmRelease {
        name: "karpenter".into(),
        namespace: karpenter.namespace.clone(),
        chart: versions::component(versions::KARPENTER)
            .chart
            .as_ref()
            .map_or_else(
                || "oci://public.ecr.aws/karpenter/karpenter".into(),
                |c| format!("{}/{}", c.repository, c.name),
            ),
        repo: None,
        version: karpenter.version.clone(),
        values_file: KARPENTER_VALUES.into(),
        create_namespace: true,
    }
}

/// Writes each of `chart`'s images that the spec overrides, or that a mirror moves, into the
/// chart's values, in the form the chart reads. A digest rides in the tag (`v1.64.0@sha256:…`):
/// every chart here joins `repository:tag` (or `repository/image:version`) as written.
pub(crate) fn image_overrides(spec: &ClusterSpec, chart: &str, values: &mut Value) {
    for (key, table) in images::chart_images(spec, chart) {
        if !spec.images.contains_key(&key) && spec.registry.is_none() {
            continue;
        }
        let image = images::resolve(spec, &key);
        let tag = match &image.digest {
            Some(d) => format!("{}@{d}", image.tag),
            None => image.tag.clone(),
        };
        let mut at = &mut *values;
        for part in table.values.split('.') {
            at = &mut at[part];
        }
        match table.form {
            versions::ValuesForm::RepositoryTag => {
                at["repository"] = json!(image.repository);
                at["tag"] = json!(tag);
            }
            versions::ValuesForm::RepositoryImageVersion => {
                let (repository, name) = image
                    .repository
                    .rsplit_once('/')
                    .unwrap_or(("", image.repository.as_str()));
                at["repository"] = json!(repository);
                at["image"] = json!(name);
                at["version"] = json!(tag);
            }
        }
    }
}
