//! Cluster basics: the API server answers, kubelet version skew, the stack's pods, the NodePools.

use super::age;
use super::check;
use super::created;
use super::minor;
use super::name_of;
use super::secs;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;

pub(super) fn apiserver(s: &Snapshot) -> Check {
    let c = check("apiserver-reachable", "the API server answers");
    match &s.server_version {
        Ok(v) => c.saw(format!("GET /version: {v}")),
        Err(e) => {
            let mut c = c;
            c.worse(
                Status::Fail,
                e.to_string(),
                "check the kubeconfig/context and that this machine reaches the API server",
            );
            c
        }
    }
}

pub(super) fn kubelet_skew(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "kubelet-version-skew",
        "kubelets within the supported skew of the control plane (not newer, at most 3 minors older)",
    );
    let server = match &s.server_version {
        Ok(v) => v.clone(),
        Err(_) => return c.skip("the API server's version could not be read"),
    };
    let Some((smaj, smin)) = minor(&server) else {
        return c.skip(format!("unparsable API server version {server}"));
    };
    if let Some((_, spec_minor)) = minor(&f.kubernetes_version)
        && spec_minor != smin
    {
        c.worse(
            Status::Warn,
            format!(
                "the API server runs {server}; the spec says kubernetesVersion {}",
                f.kubernetes_version
            ),
            "upgrade the control plane with Kubean, or set kubernetesVersion to what runs",
        );
    }
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    let mut counted = 0;
    for n in nodes {
        let kubelet = n
            .status
            .as_ref()
            .and_then(|st| st.node_info.as_ref())
            .map(|i| i.kubelet_version.clone())
            .unwrap_or_default();
        let Some((maj, min)) = minor(&kubelet) else {
            continue;
        };
        counted += 1;
        let node = name_of(&n.metadata);
        // Kubernetes' version skew policy: kubelet never newer than kube-apiserver, and up to
        // three minor versions older (since 1.28).
        if maj != smaj || min > smin {
            c.worse(
                Status::Fail,
                format!("Node {node}: kubelet {kubelet} is newer than the API server {server}"),
                "use an AMI whose kubelet matches the control plane's minor version (pool ami), or upgrade the control plane first",
            );
        } else if smin - min > 3 {
            c.worse(
                Status::Fail,
                format!("Node {node}: kubelet {kubelet} is {} minors older than the API server {server} (at most 3 are supported)", smin - min),
                "use an AMI whose kubelet matches the control plane's minor version (pool ami)",
            );
        } else if smin != min {
            c.worse(
                Status::Warn,
                format!("Node {node}: kubelet {kubelet}, API server {server}"),
                "move the pool's AMI to the control plane's minor version",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{counted} kubelet(s) on the API server's minor version {server}"
        ));
    }
    c
}

pub(super) fn pods_running(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "pods-running",
        "every pod runs (CCM, CNI, device plugin, Karpenter) — checklist: kubectl get pods -A",
    );
    let Ok(pods) = &s.pods else {
        return c.skip("Pods could not be listed");
    };
    let mut running = 0;
    for p in pods {
        let phase = p
            .status
            .as_ref()
            .and_then(|st| st.phase.as_deref())
            .unwrap_or("");
        if matches!(phase, "Running" | "Succeeded") {
            running += 1;
        }
        let crash = p
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .find_map(|cs| {
                cs.state
                    .as_ref()?
                    .waiting
                    .as_ref()?
                    .reason
                    .clone()
                    .filter(|r| {
                        matches!(
                            r.as_str(),
                            "CrashLoopBackOff" | "ImagePullBackOff" | "ErrImagePull"
                        )
                    })
            });
        let name = name_of(&p.metadata);
        if let Some(reason) = crash {
            c.worse(
                Status::Fail,
                format!("Pod {name}: {reason}"),
                "kubectl logs/describe the pod; fix its image or configuration",
            );
        } else if phase == "Failed" {
            c.worse(
                Status::Warn,
                format!("Pod {name}: phase Failed"),
                "kubectl describe the pod",
            );
        } else if phase == "Pending" && age(s.now, created(&p.metadata)) > f.grace {
            c.worse(
                Status::Warn,
                format!(
                    "Pod {name}: Pending for {}",
                    secs(age(s.now, created(&p.metadata)))
                ),
                "kubectl describe the pod: an unschedulable pod of a pool waits for Karpenter (see the nodeclaims checks)",
            );
        }
    }
    if c.evidence.is_empty() {
        let young = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Pending"))
            .count();
        let pending = if young == 0 {
            String::new()
        } else {
            // Not yet a finding: a pod may wait this long for its node. Whether the
            // controllers' pods can be placed at all is controllers-schedulable's to say.
            format!("; {young} Pending for less than {}", secs(f.grace))
        };
        c = c.saw(format!(
            "{running} of {} pods Running or Succeeded{pending}",
            pods.len()
        ));
    }
    c
}

pub(super) fn nodepools_present(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check("nodepools-present", "a NodePool for every pool of the spec");
    let Ok(pools) = &s.nodepools else {
        return c.skip("NodePools could not be listed (Karpenter's CRDs installed?)");
    };
    for want in &f.pools {
        if !pools
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(want.as_str()))
        {
            c.worse(
                Status::Fail,
                format!("no NodePool {want}"),
                "kubean-karpenter apply <spec>",
            );
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("NodePools: {}", f.pools.join(", ")));
    }
    c
}
