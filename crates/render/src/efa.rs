//! `efa/`: the AWS EFA device plugin, on the nodes of the pools that ask for EFA only and
//! tolerating exactly their taints.
//!
//! Karpenter attaches EFA interfaces only to a NodeClaim whose pods request
//! `vpc.amazonaws.com/efa` (or whose EC2NodeClass sets `networkInterfaces`), one per network
//! card up to the type's `MaximumEfaInterfaces`, and then expects the node to advertise that
//! resource before it calls it initialized (aws/karpenter-provider-aws v1.14.3
//! pkg/providers/instance/instance.go `getEFACountForInstance`, pkg/cloudprovider/cloudprovider.go):
//! without the plugin such a node never initializes, billed. See docs/guide/gpus-and-training.md.

use std::collections::BTreeSet;

use kk_spec::{ElasticCluster, images, versions};
use serde_json::{Value, json};

use crate::names::MANAGED_BY;
use crate::{Bundle, RenderError};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "aws-efa-k8s-device-plugin";
const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";
const INFINIBAND_DIR: &str = "/dev/infiniband";

/// The pools whose pods use EFA, by name.
pub fn efa_pools(cluster: &ElasticCluster) -> Vec<&kk_spec::Pool> {
    cluster.spec.pools.iter().filter(|p| p.efa).collect()
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let pools = efa_pools(cluster);
    if pools.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let tolerations: BTreeSet<(String, Option<String>, String)> = pools
        .iter()
        .flat_map(|p| &p.taints)
        .map(|t| (t.key.clone(), t.value.clone(), t.effect.clone()))
        .collect();
    let tolerations: Vec<Value> = tolerations
        .into_iter()
        .map(|(key, value, effect)| match value {
            Some(value) => {
                json!({ "key": key, "operator": "Equal", "value": value, "effect": effect })
            }
            None => json!({ "key": key, "operator": "Exists", "effect": effect }),
        })
        .collect();
    // Compared with aws/eks-charts stable/aws-efa-k8s-device-plugin (chart v0.5.30,
    // templates/daemonset.yaml): the same privileged container on the host network with the
    // device-plugins and /dev/infiniband host paths (the plugin opens the EFA devices), no
    // service account token, system-node-critical. Differences: the chart selects every
    // EFA-capable instance type and tolerates CriticalAddonsOnly; ours selects the EFA pools'
    // nodes (karpenter.sh/nodepool) and tolerates exactly their taints, and leaves out the
    // chart's /opt/aws/neuron volume (Neuron tools, for trn/inf nodes).
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": { "name": NAME, "namespace": NAMESPACE, "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
        "spec": {
            "selector": { "matchLabels": { "name": NAME } },
            "updateStrategy": { "type": "RollingUpdate" },
            "template": {
                "metadata": { "labels": { "name": NAME } },
                "spec": {
                    "automountServiceAccountToken": false,
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": true,
                    "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{ "matchExpressions": [
                            { "key": kk_karpenter::labels::NODEPOOL, "operator": "In", "values": names }
                        ] }]
                    } } },
                    "tolerations": tolerations,
                    "containers": [{
                        "name": NAME,
                        "image": images::resolve(&cluster.spec, versions::EFA_DEVICE_PLUGIN).reference(),
                        "securityContext": { "privileged": true, "allowPrivilegeEscalation": true, "runAsUser": 0 },
                        "resources": { "requests": { "cpu": "10m", "memory": "20Mi" } },
                        "volumeMounts": [
                            { "name": "device-plugin", "mountPath": DEVICE_PLUGINS_DIR },
                            { "name": "infiniband", "mountPath": INFINIBAND_DIR },
                        ],
                    }],
                    "volumes": [
                        { "name": "device-plugin", "hostPath": { "path": DEVICE_PLUGINS_DIR } },
                        { "name": "infiniband", "hostPath": { "path": INFINIBAND_DIR } },
                    ],
                }
            }
        }
    });
    bundle.add_yaml("efa/aws-efa-k8s-device-plugin.yaml", &[daemonset])
}
