//! Kubean's copy of the cluster it built: after its `kubeconfig.yml` post-hook, the new
//! cluster's admin kubeconfig is the ConfigMap `<cluster>-kubeconf`, key `config`, in the
//! namespace Kubean's spray jobs run in (kubean-io/kubean playbooks/kubeconfig.yml, v0.37.0:
//! `kubectl create configmap <cluster>-kubeconf --from-file=/conf/.kube/config`). Stage 2 of the
//! two-stage flow takes the cluster CA from it. It holds admin credentials: never log it.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

/// The key `--from-file=.../config` gives the kubeconfig.
pub const KEY: &str = "config";

pub fn configmap_name(cluster: &str) -> String {
    format!("{cluster}-kubeconf")
}

#[derive(Debug, thiserror::Error)]
pub enum KubeconfError {
    #[error(
        "ConfigMap {namespace}/{name} not found: has Kubean's kubeconfig.yml post-hook run (the ClusterOperation succeeded)?"
    )]
    NotFound { namespace: String, name: String },
    #[error("ConfigMap {namespace}/{name} has no key {KEY:?}")]
    NoKey { namespace: String, name: String },
    #[error("ConfigMap {namespace}/{name}: {message}")]
    Api {
        namespace: String,
        name: String,
        message: String,
    },
}

/// The kubeconfig text Kubean stored for `cluster`, read from the management cluster.
pub async fn fetch(
    management: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<String, KubeconfError> {
    let name = configmap_name(cluster);
    let api: Api<ConfigMap> = Api::namespaced(management.clone(), namespace);
    let cm = api
        .get_opt(&name)
        .await
        .map_err(|e| KubeconfError::Api {
            namespace: namespace.to_owned(),
            name: name.clone(),
            message: crate::kube_error::error_chain(&e),
        })?
        .ok_or_else(|| KubeconfError::NotFound {
            namespace: namespace.to_owned(),
            name: name.clone(),
        })?;
    cm.data
        .and_then(|mut d| d.remove(KEY))
        .ok_or(KubeconfError::NoKey {
            namespace: namespace.to_owned(),
            name,
        })
}
