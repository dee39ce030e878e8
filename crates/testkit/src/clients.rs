//! Kube clients from a kubeconfig, for tests: the testbed's (`Testbed::admin` is [`admin`] of
//! its kubeconfig) and a lab's (its `KUBECONFIG`). Built by `kk_live::client::make_config`, the
//! builder the product uses (kubectl's resolution of the current context), with kube's default
//! timeouts; like every kube client they need a tokio runtime.

use std::path::Path;

use kube::{Client, Config};

/// The client config of `kubeconfig`'s current context, to adjust before making a client.
pub async fn config(kubeconfig: impl AsRef<Path>) -> Config {
    let kubeconfig = kubeconfig.as_ref();
    kk_live::client::make_config(&kk_live::ClientOptions {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        context: None,
    })
    .await
    .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()))
}

/// A client as `kubeconfig`'s own user (the admin, on the testbed and the labs).
pub async fn admin(kubeconfig: impl AsRef<Path>) -> Client {
    Client::try_from(config(kubeconfig).await).unwrap()
}

/// A client as `kubeconfig`'s user impersonating `user` in `groups`: what RBAC, admission and
/// the Node authorizer see for that user.
pub async fn impersonating(kubeconfig: impl AsRef<Path>, user: &str, groups: &[&str]) -> Client {
    let mut config = config(kubeconfig).await;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Client::try_from(config).unwrap()
}

/// A client of `kubeconfig`'s cluster whose only credential is the bearer `token`.
pub async fn bearer(kubeconfig: impl AsRef<Path>, token: &str) -> Client {
    let mut config = config(kubeconfig).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap()
}
