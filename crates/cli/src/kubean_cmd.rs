//! `kubean upgrade|scale|remove-node|renew-certs SPEC`: print the day-two ClusterOperation for
//! the management cluster (kk_render::kubean_ops), after its checks; when it runs and what it
//! does go to standard error.

use std::io::Write;
use std::process::ExitCode;

use kk_render::kubean_ops::{Operation, render_operation};

use crate::Failure;

#[derive(clap::Subcommand)]
pub enum KubeanCommand {
    /// Upgrade the control plane, etcd and the Kubean-built workers to the spec's
    /// kubernetesVersion (upgrade-cluster.yml); refused unless the pinned Kubean release
    /// installs it and, with --from, it is one minor or less ahead.
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Upgrade {
        #[command(flatten)]
        common: Common,
        /// The version the cluster runs now (`kubectl version`), to refuse a downgrade or a
        /// skipped minor.
        #[arg(long)]
        from: Option<String>,
    },
    /// Join a worker the spec's kubean.nodes lists (scale.yml --limit=NODE).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    Scale {
        #[command(flatten)]
        common: Common,
        /// The node's name in kubean.nodes.
        #[arg(long)]
        node: String,
    },
    /// Drain and remove a node the spec still lists (remove-node.yml -e node=NODE).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    RemoveNode {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        node: String,
    },
    /// Renew the control plane's certificates with the same CA (Kubean's renew-certs.yml).
    #[command(after_help = "Docs: docs/guide/day-two.md")]
    RenewCerts {
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args)]
pub struct Common {
    /// The ElasticCluster spec.
    spec: String,
    /// Output: yaml or json.
    #[arg(short = 'o', long = "output", value_parser = ["yaml", "json"], default_value = "yaml")]
    output: String,
}

pub fn run(command: KubeanCommand) -> Result<ExitCode, Failure> {
    let (common, operation) = match command {
        KubeanCommand::Upgrade { common, from } => (common, Operation::Upgrade { from }),
        KubeanCommand::Scale { common, node } => (common, Operation::AddNode { node }),
        KubeanCommand::RemoveNode { common, node } => (common, Operation::RemoveNode { node }),
        KubeanCommand::RenewCerts { common } => (common, Operation::RenewCertificates),
    };
    let (loaded, _) = crate::load_spec(&common.spec)?;
    let rendered = render_operation(&loaded.spec, &operation).map_err(|e| {
        let pos = loaded.document.pos(&kk_model::FieldPath::parse(&e.field));
        Failure::msg(format!("{}:{pos}: {e}", loaded.file))
    })?;
    let text = if common.output == "json" {
        serde_json::to_string_pretty(&rendered.object)? + "\n"
    } else {
        serde_saphyr::to_string(&rendered.object)?
    };
    std::io::stdout().write_all(text.as_bytes())?;
    eprintln!("# {}: {}", rendered.name, rendered.effect);
    eprintln!("# when: {}", rendered.when);
    Ok(ExitCode::SUCCESS)
}
