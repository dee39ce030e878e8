//! Nodes and the cloud controller manager: providerIDs, the uninitialized taint, the cluster-ID tag.

use super::UNINITIALIZED;
use super::age;
use super::check;
use super::cond_true;
use super::created;
use super::name_of;
use super::provider_id;
use super::secs;
use crate::Check;
use crate::Facts;
use crate::Status;
use crate::snapshot::Snapshot;
use kk_spec::names::{INFRA_ROLE_LABEL, instance_id};

pub(super) fn node_provider_id(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "node-provider-id",
        "every Node has an aws:///<zone>/<instance> provider ID of a running instance, and every launched NodeClaim's provider ID names a Node once Registered",
    );
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    for n in nodes {
        let name = name_of(&n.metadata);
        let old = age(s.now, created(&n.metadata)) > f.grace;
        match provider_id(n) {
            None if old => c.worse(
                Status::Fail,
                format!("Node {name}: no spec.providerID after {}", secs(age(s.now, created(&n.metadata)))),
                "the AWS cloud controller manager sets it: check that it runs and initializes nodes (ccm-initializes-nodes)",
            ),
            None => {}
            Some(pid) => match instance_id(pid) {
                None => c.worse(
                    Status::Fail,
                    format!("Node {name}: providerID {pid:?} is not aws:///<zone>/<instance-id>"),
                    "Karpenter matches Nodes to NodeClaims by provider ID: let the CCM set it (no --provider-id on the kubelet)",
                ),
                Some(id) => {
                    if let Some(Ok(found)) = &s.instances {
                        match found.get(id) {
                            None => c.worse(
                                Status::Fail,
                                format!("Node {name}: providerID {pid} names an instance EC2 does not know"),
                                "delete the stale Node; check the kubelet's provider ID and the AWS account/region",
                            ),
                            Some(i) if i.state != "running" => c.worse(
                                Status::Warn,
                                format!("Node {name}: instance {id} is {}", i.state),
                                "the CCM deletes Nodes of terminated instances; Karpenter replaces the capacity",
                            ),
                            Some(_) => {}
                        }
                    }
                }
            },
        }
    }
    if let Ok(claims) = &s.nodeclaims {
        for nc in claims {
            let Some(pid) = nc.data["status"]["providerID"].as_str() else {
                continue;
            };
            if cond_true(nc, "Registered") && !nodes.iter().any(|n| provider_id(n) == Some(pid)) {
                c.worse(
                    Status::Fail,
                    format!(
                        "NodeClaim {} is Registered with providerID {pid}, which no Node has",
                        nc.metadata.name.as_deref().unwrap_or("")
                    ),
                    "a Node's provider ID changed after registration: delete the NodeClaim so Karpenter replaces it",
                );
            }
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{} Node(s) with aws:/// provider IDs of known instances",
            nodes.len()
        ));
    }
    if s.instances.is_none() {
        c.evidence
            .push("instances not checked in EC2: no AWS configuration".into());
    }
    c
}

pub(super) fn ccm_initializes(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "ccm-initializes-nodes",
        "the AWS cloud controller manager runs with the cluster's ID and initializes new Nodes",
    );
    match &s.ccm_config {
        Ok(Some(cm)) => {
            let conf = cm
                .data
                .as_ref()
                .and_then(|d| d.values().find(|v| v.contains("KubernetesClusterID")))
                .cloned()
                .unwrap_or_default();
            let id = conf
                .lines()
                .find_map(|l| l.trim().strip_prefix("KubernetesClusterID"))
                .map(|v| v.trim().trim_start_matches('=').trim().trim_matches('"'));
            match id {
                Some(id) if id == f.cluster => {
                    c = c.saw(format!("cloud config KubernetesClusterID = {id}"));
                }
                Some(id) => c.worse(
                    Status::Fail,
                    format!("cloud config KubernetesClusterID = {id}, but Karpenter's clusterName is {}", f.cluster),
                    "render and apply cloud/aws-cloud-controller-manager.yaml from the spec: the two must be equal",
                ),
                None => c.worse(
                    Status::Fail,
                    "ConfigMap kube-system/aws-cloud-controller-manager-config has no KubernetesClusterID".into(),
                    "without it the CCM needs the cluster tag on its own instance and exits otherwise: apply the rendered cloud config",
                ),
            }
        }
        Ok(None) => c.worse(
            Status::Warn,
            "no ConfigMap kube-system/aws-cloud-controller-manager-config (the CCM was not installed from the bundle)".into(),
            "apply cloud/aws-cloud-controller-manager.yaml (ORDER.md step 2)",
        ),
        Err(e) => c.worse(Status::Warn, e.to_string(), "grant doctor get on configmaps in kube-system"),
    }
    let Ok(nodes) = &s.nodes else {
        return c;
    };
    for n in nodes {
        let tainted = n
            .spec
            .as_ref()
            .and_then(|sp| sp.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
        let a = age(s.now, created(&n.metadata));
        if tainted && a > f.grace {
            c.worse(
                Status::Fail,
                format!(
                    "Node {}: still has the {UNINITIALIZED} taint after {}",
                    name_of(&n.metadata),
                    secs(a)
                ),
                "the CCM is not running or cannot find the instance: check its pod and log, the cloud config's KubernetesClusterID and the instance's kubernetes.io/cluster/<name> tag",
            );
        }
    }
    c
}

pub(super) fn cluster_id_tag(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "cluster-id-tag",
        "every Node's instance carries kubernetes.io/cluster/<cluster> (the CCM finds only those)",
    );
    let tag = format!("kubernetes.io/cluster/{}", f.cluster);
    let Some(found) = &s.instances else {
        return c.skip("no AWS configuration: instance tags not read");
    };
    let found = match found {
        Ok(f) => f,
        Err(e) => return c.skip(e.to_string()),
    };
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    let mut tagged = 0;
    for n in nodes {
        let Some(id) = provider_id(n).and_then(instance_id) else {
            continue;
        };
        let Some(i) = found.get(id) else { continue };
        match i.tags.get(&tag).map(String::as_str) {
            Some("owned" | "shared") => tagged += 1,
            other => c.worse(
                Status::Fail,
                format!(
                    "Node {} (instance {id}): tag {tag} is {}",
                    name_of(&n.metadata),
                    other.map(|v| format!("{v:?}")).unwrap_or("missing".into())
                ),
                &format!("aws ec2 create-tags --resources {id} --tags Key={tag},Value=owned (iam/discovery.json: every Kubean-built instance)"),
            ),
        }
    }
    if c.evidence.is_empty() {
        c = c.saw(format!("{tagged} instance(s) tagged {tag}"));
    }
    c
}

pub(super) fn infra_imds_hop_limit(s: &Snapshot, f: &Facts) -> Check {
    let mut c = check(
        "infra-imds-hop-limit",
        "the infra workers answer IMDS to the node only (IMDSv2, hop limit 1): no pod there borrows their role",
    );
    let Some(found) = &s.instances else {
        return c.skip("no AWS configuration: instance metadata options not read");
    };
    let found = match found {
        Ok(f) => f,
        Err(e) => return c.skip(e.to_string()),
    };
    let Ok(nodes) = &s.nodes else {
        return c.skip("Nodes could not be listed");
    };
    // With the instance profile the role is Karpenter's and the rotator's: launch instances,
    // pass the node role, write the join store. Otherwise it is Kubean's, still worth keeping.
    let (status, role) = if f.controllers_use_instance_profile {
        (Status::Fail, "Karpenter's and the rotator's role")
    } else {
        (Status::Warn, "the infra workers' role")
    };
    let mut seen = 0;
    for n in nodes {
        let infra = n
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(INFRA_ROLE_LABEL));
        let Some(id) = infra
            .then(|| provider_id(n).and_then(instance_id))
            .flatten()
        else {
            continue;
        };
        let Some(i) = found.get(id) else { continue };
        seen += 1;
        let fix = format!(
            "aws ec2 modify-instance-metadata-options --instance-id {id} --http-tokens required --http-put-response-hop-limit 1 (the rendered controllers run on the host network and need no more; docs/guide/join-credentials.md)"
        );
        if let Some(limit) = i.hop_limit.filter(|l| *l > 1) {
            c.worse(
                status,
                format!(
                    "Node {} (instance {id}): IMDS hop limit {limit}, so every pod on it can fetch {role}",
                    name_of(&n.metadata)
                ),
                &fix,
            );
        }
        if i.http_tokens.as_deref().is_some_and(|t| t != "required") {
            c.worse(
                Status::Warn,
                format!(
                    "Node {} (instance {id}): IMDSv1 is allowed (HttpTokens {}), which a server-side request forgery can use",
                    name_of(&n.metadata),
                    i.http_tokens.as_deref().unwrap_or("")
                ),
                &fix,
            );
        }
    }
    if seen == 0 {
        return c.skip(format!(
            "no Node labelled {INFRA_ROLE_LABEL} with an EC2 instance"
        ));
    }
    if c.evidence.is_empty() {
        c = c.saw(format!(
            "{seen} infra instance(s) with IMDSv2 and hop limit 1"
        ));
    }
    c
}
