//! `cloud/`: the AWS cloud controller manager (pinned to control-plane nodes), the policy that
//! holds instance-named Nodes to their instance (`node_registration`), and Helm values for the
//! EBS CSI driver — seed workflow step 2. Kubelets run `--cloud-provider=external`,
//! so until the CCM runs no node loses `node.cloudprovider.kubernetes.io/uninitialized`
//! and Karpenter never sees one initialized.

use kk_spec::{ElasticCluster, images, versions};
use serde_json::{Value, json};

use crate::names::{self, INFRA_ROLE_LABEL, MANAGED_BY};
use crate::{Bundle, RenderError};

const NAME: &str = "aws-cloud-controller-manager";
const SERVICE_ACCOUNT: &str = "cloud-controller-manager";
/// The ConfigMap holding the CCM's cloud config, and where the DaemonSet mounts it.
pub const CLOUD_CONFIG: &str = "aws-cloud-controller-manager-config";
const CLOUD_CONFIG_DIR: &str = "/etc/kubernetes/aws-cloud-config";
const CLOUD_CONFIG_KEY: &str = "cloud.conf";

/// The CCM's cloud config (gcfg). Without a cluster ID the CCM exits at start ("AWS cloud
/// failed to find ClusterID", kubernetes/cloud-provider-aws v1.35.2 pkg/providers/v1/tags.go
/// awsTagging.init) unless the instance it runs on carries a `kubernetes.io/cluster/<id>` tag;
/// it exits before `--allow-untagged-cloud` is read. The ID is Karpenter's `clusterName`, the
/// value of the `kubernetes.io/cluster/<name>=owned` tag Karpenter puts on what it launches, so
/// the CCM's tag filters (load balancers, security groups) see the same cluster.
pub fn cloud_config(cluster: &ElasticCluster) -> String {
    format!(
        "[Global]\nKubernetesClusterID = {}\n",
        cluster.metadata.name
    )
}

/// The CCM is released per Kubernetes minor: the versions table's newest release of the control
/// plane's minor (v1.35.3 for 1.35: v1.35.0/.1 lack the nil-State fix, cloud-provider-aws#1365),
/// or the spec's `images.cloud-controller-manager`.
fn ccm_image(cluster: &ElasticCluster) -> String {
    images::resolve(&cluster.spec, versions::CLOUD_CONTROLLER_MANAGER).reference()
}

fn ccm(cluster: &ElasticCluster) -> Vec<Value> {
    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1 });
    vec![
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": CLOUD_CONFIG, "namespace": "kube-system", "labels": labels },
            "data": { CLOUD_CONFIG_KEY: cloud_config(cluster) },
        }),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": SERVICE_ACCOUNT, "namespace": "kube-system", "labels": labels },
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": "system:cloud-controller-manager", "labels": labels },
            "rules": [
                { "apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"] },
                { "apiGroups": [""], "resources": ["nodes"], "verbs": ["*"] },
                { "apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"] },
                { "apiGroups": [""], "resources": ["services"], "verbs": ["list", "patch", "update", "watch"] },
                { "apiGroups": [""], "resources": ["services/status"], "verbs": ["list", "patch", "update", "watch"] },
                { "apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create", "get"] },
                { "apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "update", "watch"] },
                { "apiGroups": [""], "resources": ["endpoints"], "verbs": ["create", "get", "list", "watch", "update"] },
                { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "list", "watch", "update"] },
                { "apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": "system:cloud-controller-manager", "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:cloud-controller-manager" },
            "subjects": [{ "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": "kube-system" }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": "cloud-controller-manager:apiserver-authentication-reader", "namespace": "kube-system", "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "extension-apiserver-authentication-reader" },
            "subjects": [{ "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": "kube-system" }],
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": { "name": NAME, "namespace": "kube-system", "labels": labels },
            "spec": {
                "selector": { "matchLabels": { "k8s-app": NAME } },
                "updateStrategy": { "type": "RollingUpdate" },
                "template": {
                    "metadata": { "labels": { "k8s-app": NAME } },
                    "spec": {
                        "nodeSelector": { "node-role.kubernetes.io/control-plane": "" },
                        "tolerations": [
                            { "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule" },
                            { "key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule" },
                        ],
                        "serviceAccountName": SERVICE_ACCOUNT,
                        "priorityClassName": "system-node-critical",
                        "hostNetwork": true,
                        "containers": [{
                            "name": NAME,
                            "image": ccm_image(cluster),
                            "args": [
                                "--v=2",
                                "--cloud-provider=aws",
                                format!("--cloud-config={CLOUD_CONFIG_DIR}/{CLOUD_CONFIG_KEY}"),
                                "--use-service-account-credentials=true",
                                "--configure-cloud-routes=false",
                            ],
                            "env": [{ "name": "AWS_REGION", "value": cluster.spec.aws.region }],
                            "resources": { "requests": { "cpu": "200m" } },
                            "volumeMounts": [{ "name": "cloud-config", "mountPath": CLOUD_CONFIG_DIR, "readOnly": true }],
                        }],
                        "volumes": [{ "name": "cloud-config", "configMap": { "name": CLOUD_CONFIG } }],
                    }
                }
            }
        }),
    ]
}

fn ebs_csi_values(cluster: &ElasticCluster) -> Value {
    let mut values = json!({
        "controller": {
            "region": cluster.spec.aws.region,
            "nodeSelector": { INFRA_ROLE_LABEL: "" },
            "tolerations": names::infra_tolerations(&cluster.spec),
            "replicaCount": names::infra_replicas(&cluster.spec),
        },
        "node": {
            // Every node, Karpenter's included, needs the node plugin to mount volumes.
            "tolerateAllTaints": true,
        },
    });
    crate::helm::image_overrides(&cluster.spec, versions::EBS_CSI_DRIVER, &mut values);
    values
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    bundle.add_yaml("cloud/aws-cloud-controller-manager.yaml", &ccm(cluster))?;
    bundle.add_yaml(
        "cloud/node-registration-policy.yaml",
        &crate::node_registration::manifests(),
    )?;
    bundle.add_yaml(
        "cloud/node-identity-policy.yaml",
        &crate::node_identity::manifests(&cluster.spec),
    )?;
    bundle.add_release(crate::helm::ebs_csi_driver(), ebs_csi_values(cluster))
}
