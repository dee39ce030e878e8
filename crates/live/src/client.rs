//! Kube clients from a kubeconfig and context, as kubectl resolves them.

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

pub async fn make_client(options: &ClientOptions) -> Result<Client, ClientError> {
    let config = make_config(options).await?;
    Client::try_from(config).map_err(ClientError::Client)
}
