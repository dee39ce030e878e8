//! `verify/`: the seed's scale-up checks, a CPU inflate Deployment and a CUDA vectoradd Pod
//! per GPU pool, each tolerating and selecting exactly its pool, and `verify/checklist.sh`, the
//! seed's whole validation checklist with this bundle's names (ORDER.md step 8 lists it too).

use kk_spec::{images, versions};
use std::fmt::Write as _;

use kk_spec::ElasticCluster;
use serde_json::{Value, json};

use crate::names::{ACCELERATOR_LABEL, LIFECYCLE_LABEL, MANAGED_BY};
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
                        "image": images::resolve(&cluster.spec, versions::CUDA_SAMPLE).reference(),
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
                                "image": images::resolve(&cluster.spec, versions::PAUSE).reference(),
                                "resources": { "requests": { "cpu": "1" } },
                            }],
                        }
                    }
                }
            })
        };
        bundle.add_yaml(&format!("verify/{}.yaml", pool.name), &[doc])?;
    }
    bundle.add_text("verify/checklist.sh", checklist_script(cluster));
    Ok(())
}

/// The seed's "Validation and Troubleshooting Checklist" (seed 000, section 8), each command
/// with this bundle's names: (what it shows, the kubectl arguments). `<gpu-node>` and the
/// pods stand for one command per GPU node / GPU pool.
pub fn checklist(cluster: &ElasticCluster) -> Vec<(String, String)> {
    let lifecycle = format!("{}={}", LIFECYCLE_LABEL.0, LIFECYCLE_LABEL.1);
    let accelerator = format!("{}={}", ACCELERATOR_LABEL.0, ACCELERATOR_LABEL.1);
    let mut out = vec![
        (
            "every pod runs (CCM, CNI, device plugin, Karpenter)".to_owned(),
            "get pods -A".to_owned(),
        ),
        (
            "nodes, their IPs and versions".to_owned(),
            "get nodes -o wide".to_owned(),
        ),
        (
            "NodeClaims Karpenter launched".to_owned(),
            "get nodeclaims".to_owned(),
        ),
        (
            "nodes Karpenter launched".to_owned(),
            format!("get nodes -l {lifecycle}"),
        ),
        (
            "GPU nodes".to_owned(),
            format!("get nodes -l {accelerator}"),
        ),
        (
            "each GPU node advertises nvidia.com/gpu".to_owned(),
            "describe <gpu-node> | grep -A5 nvidia.com/gpu".to_owned(),
        ),
        (
            "Karpenter's log".to_owned(),
            format!(
                "logs -n {} deploy/karpenter",
                cluster.spec.karpenter.namespace
            ),
        ),
    ];
    for pool in cluster
        .spec
        .pools
        .iter()
        .filter(|p| p.pool_type == kk_spec::PoolType::Gpu)
    {
        out.push((
            format!("the CUDA test of pool {} passed", pool.name),
            format!("logs cuda-vectoradd-{}", pool.name),
        ));
    }
    out
}

fn checklist_script(cluster: &ElasticCluster) -> String {
    let accelerator = format!("{}={}", ACCELERATOR_LABEL.0, ACCELERATOR_LABEL.1);
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "#!/bin/bash");
    let _ = writeln!(
        w,
        "# The seed's validation checklist for cluster {}, with this bundle's names.",
        cluster.metadata.name
    );
    let _ = writeln!(
        w,
        "# Read-only: kubectl get, describe and logs. KUBECTL names the kubectl to use, e.g."
    );
    let _ = writeln!(
        w,
        "# KUBECTL=\"kubectl --context {}\" (the new cluster, not Kubean's).",
        cluster.metadata.name
    );
    let _ = writeln!(
        w,
        "# Exits 1 when a command fails; read every section, a success is no proof by itself."
    );
    w.push_str(
        "set -uo pipefail
",
    );
    w.push_str(
        "read -ra KUBECTL <<<\"${KUBECTL:-kubectl}\"
",
    );
    w.push_str(
        "FAILED=0
",
    );
    w.push_str(
        "check() {
  local what=$1
  shift
  printf '\\n== %s: kubectl %s\\n' \"$what\" \"$*\"
  \"${KUBECTL[@]}\" \"$@\" || { echo \"FAILED: $what\" >&2; FAILED=1; }
}
",
    );
    for (what, args) in checklist(cluster) {
        if args.starts_with("describe <gpu-node>") {
            let _ = writeln!(
                w,
                "gpu_nodes=\"$(\"${{KUBECTL[@]}}\" get nodes -l {accelerator} -o name)\" || FAILED=1"
            );
            let _ = writeln!(w, "for node in $gpu_nodes; do");
            let _ = writeln!(
                w,
                "  printf '\\n== %s: kubectl describe %s\\n' {} \"$node\"",
                sq(&what)
            );
            w.push_str("  \"${KUBECTL[@]}\" describe \"$node\" | grep -A5 nvidia.com/gpu || { echo \"FAILED: $node advertises no nvidia.com/gpu\" >&2; FAILED=1; }
");
            w.push_str(
                "done
",
            );
            continue;
        }
        let words: Vec<String> = args.split(' ').map(sq).collect();
        let _ = writeln!(w, "check {} {}", sq(&what), words.join(" "));
    }
    w.push_str(
        "exit \"$FAILED\"
",
    );
    s
}

fn sq(value: &str) -> String {
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}
