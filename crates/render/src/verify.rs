//! `verify/`: the seed's scale-up checks, a CPU inflate Deployment and a CUDA vectoradd Pod
//! per GPU pool, each tolerating and selecting exactly its pool.

use kk_spec::ElasticCluster;
use serde_json::{Value, json};

use crate::names::MANAGED_BY;
use crate::pools::RenderedPool;
use crate::{Bundle, RenderError};

fn tolerations(pool: &RenderedPool) -> Vec<Value> {
    pool.taints
        .iter()
        .map(|t| match &t.value {
            Some(v) => json!({ "key": t.key, "operator": "Equal", "value": v, "effect": t.effect }),
            None => json!({ "key": t.key, "operator": "Exists", "effect": t.effect }),
        })
        .collect()
}

pub fn render(
    cluster: &ElasticCluster,
    pools: &[RenderedPool],
    bundle: &mut Bundle,
) -> Result<(), RenderError> {
    let cuda = cluster
        .spec
        .gpu
        .as_ref()
        .map(|g| g.cuda_version.clone())
        .unwrap_or_default();
    for pool in pools {
        let selector = json!({ "karpenter.sh/nodepool": pool.name });
        let doc = if pool.gpu {
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": format!("cuda-vectoradd-{}", pool.name),
                    "namespace": "default",
                    "labels": { MANAGED_BY.0: MANAGED_BY.1, "kubean-karpenter.io/verify": pool.name },
                    "annotations": { "kubean-karpenter.io/cuda-version": cuda },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": selector,
                    "tolerations": tolerations(pool),
                    "containers": [{
                        "name": "cuda",
                        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "resources": { "limits": { "nvidia.com/gpu": 1 } },
                    }],
                }
            })
        } else {
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": format!("inflate-{}", pool.name),
                    "namespace": "default",
                    "labels": { MANAGED_BY.0: MANAGED_BY.1, "kubean-karpenter.io/verify": pool.name },
                },
                "spec": {
                    // Scale up to test: kubectl scale deployment inflate-<pool> --replicas=5
                    "replicas": 0,
                    "selector": { "matchLabels": { "app": format!("inflate-{}", pool.name) } },
                    "template": {
                        "metadata": { "labels": { "app": format!("inflate-{}", pool.name) } },
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "nodeSelector": selector,
                            "tolerations": tolerations(pool),
                            "containers": [{
                                "name": "inflate",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": { "requests": { "cpu": "1" } },
                            }],
                        }
                    }
                }
            })
        };
        bundle.add_yaml(&format!("verify/{}.yaml", pool.name), &[doc])?;
    }
    Ok(())
}
