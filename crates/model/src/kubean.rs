//! Kubean `kubean.io/v1alpha1` Cluster and ClusterOperation (cluster-scoped).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const API_VERSION: &str = "kubean.io/v1alpha1";

pub type Extra = BTreeMap<String, Value>;

/// A namespaced reference to a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// ConfigMap whose key `hosts.yml` is the Kubespray inventory.
    pub hosts_conf_ref: ObjectRef,
    /// ConfigMap whose key `group_vars.yml` holds Kubespray variables.
    pub vars_conf_ref: ObjectRef,
    /// Secret of type kubernetes.io/ssh-auth with `ssh-privatekey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_ref: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconf_ref: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_check_ref: Option<ObjectRef>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperation {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: ClusterOperationSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperationSpec {
    pub cluster: String,
    pub image: String,
    /// `playbook` or `shell`.
    pub action_type: String,
    /// e.g. `cluster.yml`, `scale.yml`, `upgrade-cluster.yml`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_hook: Vec<HookAction>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_hook: Vec<HookAction>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookAction {
    pub action_type: String,
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::{LoadLimits, load_documents};

    #[test]
    fn cluster_operation_round_trips() {
        let text = r#"
apiVersion: kubean.io/v1alpha1
kind: ClusterOperation
metadata: {name: op}
spec:
  cluster: c
  image: ghcr.io/kubean-io/spray-job:v0.26.4
  actionType: playbook
  action: cluster.yml
  preHook: [{actionType: playbook, action: ping.yml}]
  resources: {limits: {cpu: "1"}}
"#;
        let value = load_documents(text, LoadLimits::default()).unwrap()[0]
            .value
            .clone();
        let typed: ClusterOperation = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(typed.spec.pre_hook[0].action, "ping.yml");
        assert_eq!(serde_json::to_value(&typed).unwrap(), value);
    }
}
