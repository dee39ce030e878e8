//! `kubeconfig`: stage 2 of the two-stage flow. Reads the new cluster's kubeconfig that Kubean
//! stored in its `<cluster>-kubeconf` ConfigMap on the management cluster and writes it to a
//! private file (0600), for `caBundle.kubeconfig` and `access.kubeconfig`. The kubeconfig holds
//! admin credentials: it is never printed.
//!
//! Whoever can write that ConfigMap is not trusted to run code here or to choose the CA every
//! node pins: `kk_live::kubeconf::vet` refuses exec plugins, auth providers and local file
//! references (unless `--allow-exec`) and compares the CA with the one the cluster serves and
//! publishes, before anything is written.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::Failure;

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The ElasticCluster spec (its name and Kubean namespace say where to look).
    spec: String,
    /// Where to write the kubeconfig (created with mode 0600).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
    /// Where Kubean runs.
    #[command(flatten)]
    mgmt: crate::flags::MgmtFlags,
    /// Accept a kubeconfig whose users run an exec plugin or auth provider, or read local
    /// files (tokenFile, client-certificate, client-key, certificate-authority): it would
    /// run them on this machine whenever it is used. Refused by default: the ConfigMap is
    /// written by whoever administers the management cluster. The CA is compared with the
    /// cluster's either way.
    #[arg(long)]
    allow_exec: bool,
    /// Report format: text, json or yaml (never the kubeconfig itself).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
}

pub fn run(args: KubeconfigArgs) -> Result<std::process::ExitCode, Failure> {
    let (loaded, base) = crate::load_spec(&args.spec)?;
    let spec = &loaded.spec;
    let management =
        if let Some(given) = args.mgmt.given(None).or_else(|| {
            crate::flags::spec_access(spec.spec.kubean.management_cluster.as_ref(), &base)
        }) {
            given
        } else {
            return Err(Failure::msg(
                "name the management cluster where Kubean runs: --mgmt-context (and \
             --mgmt-kubeconfig) or spec.kubean.managementCluster"
                    .into(),
            ));
        };
    if args.file.exists() && !args.force {
        return Err(Failure::msg(format!(
            "{} exists; pass --force to replace it",
            args.file.display()
        )));
    }
    let namespace = &spec.spec.kubean.namespace;
    let cluster = &spec.metadata.name;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let source = format!(
        "ConfigMap {namespace}/{}",
        kk_live::kubeconf::configmap_name(cluster)
    );
    let trust = kk_live::kubeconf::Trust {
        allow_exec: args.allow_exec,
    };
    let (text, vetted) = runtime.block_on(async {
        let client = kk_live::make_client(&management)
            .await
            .map_err(|e| Failure::msg(format!("management cluster: {e}")))?;
        let text = kk_live::kubeconf::fetch(&client, namespace, cluster)
            .await
            .map_err(|e| Failure::msg(format!("management cluster: {e}")))?;
        // Nothing is written, and no credential of it used, before it passes.
        let vetted =
            kk_live::kubeconf::vet(&text, &source, trust, kk_live::kubeconf::Reach::Itself)
                .await
                .map_err(Failure::from)?;
        Ok::<_, Failure>((text, vetted))
    })?;
    let hash = vetted.ca_hash;
    write_private(&args.file, text.as_bytes())?;
    if args.output.is_structured() {
        crate::flags::print_structured(
            &json!({
                "file": args.file.display().to_string(),
                "source": source,
                "caCertHash": hash,
            }),
            args.output,
        )?;
    } else {
        println!(
            "wrote {} (mode 0600) from {source}; CA hash {hash}. Stage 2: set caBundle: {{kubeconfig: {{path: {}}}}} and access: {{kubeconfig: {}}} in the spec and render again",
            args.file.display(),
            args.file.display(),
            args.file.display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Written to a 0600 temporary file beside the target, then renamed into place.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubean-karpenter-kubeconfig-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(&dir)
        .map_err(|e| Failure::msg(format!("{}: {e}", dir.display())))?;
    tmp.write_all(bytes)
        .map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
    tmp.persist(path)
        .map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
    Ok(())
}
