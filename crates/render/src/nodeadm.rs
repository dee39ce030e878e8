//! The userData of a `joinMethod: iam` node class: a nodeadm `NodeConfig` (node.eks.aws/v1alpha1)
//! in a MIME multi-part document, what EKS-optimized AL2023 images read at boot.
//!
//! The class is `amiFamily: Custom` (Karpenter's `AL2023` family calls `eks:DescribeCluster`,
//! which does not exist off EKS), so Karpenter adds nothing and everything nodeadm would have
//! learnt from EKS is here: the cluster name (= the authenticator's cluster ID, which nodeadm's
//! kubelet kubeconfig signs into every token via `aws eks get-token --cluster-name`), the API
//! endpoint and CA, the service CIDR, and a kubelet whose DNS, pod density, labels and taints are
//! the cluster's. Nothing secret: the node proves who it is with its instance role.
//!
//! Schema: awslabs/amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go (spec.cluster.{name,
//! apiServerEndpoint, certificateAuthority, cidr}, spec.kubelet.{config, flags},
//! spec.featureGates.InstanceIdNodeName).

use std::collections::BTreeMap;

use kk_spec::{ElasticCluster, Pool};
use serde_json::{Map, Value, json};

use crate::RenderError;
use crate::names;
use crate::userdata::taint_flag;
use kk_spec::ca::ClusterCa;

/// Kubespray's service CIDR (`kube_service_addresses`, kubespray roles/kubespray_defaults/
/// defaults/main/main.yml), which render pins in the vars of a cluster with `iam` pools.
pub const SERVICE_CIDR: &str = "10.233.0.0/18";
/// Kubespray's node-local DNS address (`nodelocaldns_ip`, same file; `enable_nodelocaldns`
/// defaults to true). nodeadm would otherwise guess `<cidr>.10`, Kubespray's CoreDNS service.
pub const CLUSTER_DNS: &str = "169.254.25.10";
/// The MIME boundary (Karpenter's own AL2023 userData uses the same one).
const BOUNDARY: &str = "//";

/// The NodeConfig object for a node class (the pools sharing it agree on everything here).
pub fn node_config(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    pool: &Pool,
) -> Result<Value, RenderError> {
    let spec = &cluster.spec;
    let mut kubelet_config = Map::new();
    kubelet_config.insert("clusterDNS".into(), json!([CLUSTER_DNS]));
    kubelet_config.insert("maxPods".into(), json!(names::max_pods(pool)));
    if let Some(k) = &pool.kubelet {
        for (key, map) in [
            ("kubeReserved", &k.kube_reserved),
            ("systemReserved", &k.system_reserved),
        ] {
            if !map.is_empty() {
                kubelet_config.insert(key.into(), json!(map));
            }
        }
    }
    let labels: BTreeMap<String, String> = names::pool_labels(pool);
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            // Name the node by its instance ID: the authenticator maps the node role to
            // system:node:{{SessionName}}, and an instance profile's session name is its
            // instance ID (the same name our kubeadm nodes register under).
            "featureGates": { "InstanceIdNodeName": true },
            "cluster": {
                "name": kk_spec::iam::authenticator_cluster_id(cluster),
                "apiServerEndpoint": format!(
                    "https://{}:{}",
                    spec.api_server.dns_name, spec.api_server.port
                ),
                "certificateAuthority": ca.bundle_base64,
                "cidr": SERVICE_CIDR,
            },
            "kubelet": {
                "config": kubelet_config,
                "flags": [
                    format!("--node-labels={}", labels.join(",")),
                    format!("--register-with-taints={}", taint_flag(pool)),
                ],
            },
        },
    }))
}

/// The whole userData: one `application/node.eks.aws` part.
pub fn render(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    node_class: &str,
    pools: &[&str],
    pool: &Pool,
) -> Result<String, RenderError> {
    let config = node_config(cluster, ca, pool)?;
    let yaml = serde_saphyr::to_string(&config).map_err(|e| RenderError::Serialize {
        path: format!("nodeclasses/{node_class}.yaml userData"),
        message: e.to_string(),
    })?;
    Ok(format!(
        "MIME-Version: 1.0\n\
         Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\
         \n\
         --{BOUNDARY}\n\
         Content-Type: application/node.eks.aws\n\
         \n\
         # kubean-karpenter NodeConfig for EC2NodeClass {node_class} (NodePools: {}), cluster {}.\n\
         # The node joins as its instance role through aws-iam-authenticator; nothing secret here.\n\
         ---\n\
         {yaml}\
         --{BOUNDARY}--\n",
        pools.join(", "),
        cluster.metadata.name,
    ))
}
