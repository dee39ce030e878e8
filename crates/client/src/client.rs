//! Kube clients from a kubeconfig and context, as kubectl resolves them: the one client
//! builder, with a timeout profile per kind of caller.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// `--kubeconfig` and `--context`, as on kubectl.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no usable kubeconfig (set KUBECONFIG or --kubeconfig): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("cannot build a client: {0}")]
    Client(#[source] kube::Error),
}

/// The client config, before a client is made (tests adjust its auth).
pub async fn make_config(options: &ClientOptions) -> Result<Config, ClientError> {
    crate::install_crypto_provider();
    let kube_options = KubeConfigOptions {
        context: options.context.clone(),
        ..Default::default()
    };
    match &options.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &kube_options)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        None if options.context.is_some() => {
            Config::from_kubeconfig(&kube_options)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: "$KUBECONFIG".into(),
                    source,
                })
        }
        None => Config::infer().await.map_err(ClientError::Infer),
    }
}

/// How long a request may take, by who makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeouts {
    /// kube's defaults: commands that watch or wait (apply, verify, plan --from-cluster).
    Default,
    /// A one-shot command that must fail fast on an unreachable apiserver (token, doctor).
    OneShot,
    /// The long-running controller: requests that hang are cut short and retried.
    Controller,
}

impl Timeouts {
    pub fn apply(self, config: &mut Config) {
        let secs = std::time::Duration::from_secs;
        match self {
            Timeouts::Default => {}
            Timeouts::OneShot => {
                config.connect_timeout = Some(secs(10));
                config.read_timeout = Some(secs(30));
                config.reset_reader_on_write = true;
            }
            Timeouts::Controller => {
                config.connect_timeout = Some(secs(5));
                config.read_timeout = Some(secs(15));
                config.write_timeout = Some(secs(15));
                config.reset_reader_on_write = true;
            }
        }
    }
}

/// A client and the config it was built from (the CA it trusts, for the join's CA hash).
pub struct Connected {
    pub client: Client,
    pub config: Config,
}

/// Builds a client as kubectl would, with `timeouts`.
pub async fn connect(
    options: &ClientOptions,
    timeouts: Timeouts,
) -> Result<Connected, ClientError> {
    let mut config = make_config(options).await?;
    timeouts.apply(&mut config);
    let client = Client::try_from(config.clone()).map_err(ClientError::Client)?;
    Ok(Connected { client, config })
}

/// A client with kube's default timeouts.
pub async fn make_client(options: &ClientOptions) -> Result<Client, ClientError> {
    Ok(connect(options, Timeouts::Default).await?.client)
}
