//! The flag groups several commands share, and the one precedence rule for reaching a cluster:
//! the command's flags, then the spec's access block, then kubectl's defaults.

use std::path::{Path, PathBuf};

use kk_live::ClientOptions;

/// How to reach the cluster a command works on.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KubeFlags {
    /// Kubeconfig file (default: the spec's `access` where the command reads a spec, then
    /// $KUBECONFIG, then ~/.kube/config, then the pod's service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the spec's `access`, then the current context).
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeFlags {
    /// The flags as client options, when either is given.
    pub fn given(&self) -> Option<ClientOptions> {
        (self.kubeconfig.is_some() || self.context.is_some()).then(|| self.options())
    }

    /// The flags as client options; kubectl's defaults for what is not given.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }

    /// Flags, then the spec's access block (`access` or `kubean.managementCluster`, its
    /// kubeconfig relative to the spec's folder `base`), then kubectl's defaults.
    pub fn or_spec(&self, access: Option<&kk_spec::ClusterAccess>, base: &Path) -> ClientOptions {
        self.given()
            .or_else(|| spec_access(access, base))
            .unwrap_or_default()
    }
}

/// How to reach Kubean's management cluster.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MgmtFlags {
    /// Kubeconfig of Kubean's management cluster (default: the spec's
    /// `kubean.managementCluster`; with only --mgmt-context, the --kubeconfig file).
    #[arg(long)]
    pub mgmt_kubeconfig: Option<PathBuf>,
    /// Kubeconfig context of Kubean's management cluster.
    #[arg(long)]
    pub mgmt_context: Option<String>,
}

impl MgmtFlags {
    /// The flags as client options, when either is given; `--mgmt-context` alone names a
    /// context of `kubeconfig` (the command's other kubeconfig file), when there is one.
    pub fn given(&self, kubeconfig: Option<&Path>) -> Option<ClientOptions> {
        (self.mgmt_kubeconfig.is_some() || self.mgmt_context.is_some()).then(|| ClientOptions {
            kubeconfig: self
                .mgmt_kubeconfig
                .clone()
                .or_else(|| kubeconfig.map(Path::to_path_buf)),
            context: self.mgmt_context.clone(),
        })
    }
}

/// A spec's access block as client options, its kubeconfig relative to the spec's folder.
pub fn spec_access(access: Option<&kk_spec::ClusterAccess>, base: &Path) -> Option<ClientOptions> {
    access.map(|a| ClientOptions {
        kubeconfig: a.kubeconfig.as_ref().map(|k| base.join(k)),
        context: a.context.clone(),
    })
}

/// `-o`: text (a table where the command prints one) for people, JSON or YAML for programs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    #[default]
    #[value(name = "text", alias = "table")]
    Text,
    Json,
    Yaml,
}

impl OutputFormat {
    /// JSON or YAML: the command prints one value through [`print_structured`].
    pub fn is_structured(self) -> bool {
        self != OutputFormat::Text
    }
}

/// The one printer of `-o json|yaml`: `value` as indented JSON or as YAML, on standard output.
pub fn print_structured(
    value: &serde_json::Value,
    format: OutputFormat,
) -> Result<(), crate::Failure> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Yaml => out.write_all(kk_model::yaml::to_yaml(value)?.as_bytes())?,
        _ => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
    }
    Ok(())
}
