//! `init --discover`: reads what a running Kubean-built cluster, Kubean's management cluster
//! and the AWS account say about the system (read-only), into `kk_spec::adopt::Observed`.
//! Every read that fails is recorded, not fatal: a half-configured cluster still yields a
//! spec and findings.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Node, PodSpec};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use kk_spec::adopt::{
    Observed, ObservedAws, ObservedGroup, ObservedInstance, ObservedKubean, ObservedNode,
    ObservedSubnet, ObservedWorkload,
};

use crate::aws_error::AwsCallError;
use crate::kube_error::KubeCallError;

/// Where to look.
pub struct Sources<'a> {
    pub cluster: &'a Client,
    /// Kubean's management cluster; `None`: Kubean's objects are looked for in the new cluster.
    pub management: Option<&'a Client>,
    /// `None`: no AWS reads (`--no-aws`).
    pub aws: Option<&'a aws_config::SdkConfig>,
    /// Where the SDK config's region came from (`--region`, a Node's label, the AWS config).
    pub region_from: String,
}

/// The region the fixed Nodes say they are in (`topology.kubernetes.io/region`).
pub async fn node_region(client: &Client) -> Option<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.ok()?;
    list.items
        .iter()
        .find_map(|n| n.labels().get("topology.kubernetes.io/region").cloned())
}

pub async fn observe(sources: &Sources<'_>) -> Observed {
    let mut o = Observed::default();
    kube_side(sources.cluster, &mut o).await;
    let management = sources.management.unwrap_or(sources.cluster);
    let mut unreadable = Vec::new();
    o.kubean = kubean(management, &o, &mut unreadable).await;
    o.unreadable.extend(unreadable);
    if let Some(sdk) = sources.aws {
        o.aws = Some(aws_side(sdk, &sources.region_from, &mut o).await);
    }
    o
}

fn denied(e: kube::Error, call: &str) -> String {
    KubeCallError::from_kube(call, e).to_string()
}

async fn config_map_key(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    unreadable: &mut Vec<String>,
) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(cm) => cm?.data?.remove(key),
        Err(e) => {
            unreadable.push(denied(e, &format!("get ConfigMap {namespace}/{name}")));
            None
        }
    }
}

async fn kube_side(client: &Client, o: &mut Observed) {
    let mut unreadable = Vec::new();
    o.kubeadm_cluster_configuration = config_map_key(
        client,
        "kube-system",
        "kubeadm-config",
        "ClusterConfiguration",
        &mut unreadable,
    )
    .await;
    o.kubelet_configuration = config_map_key(
        client,
        "kube-system",
        "kubelet-config",
        "kubelet",
        &mut unreadable,
    )
    .await;
    o.cluster_info_kubeconfig = config_map_key(
        client,
        "kube-public",
        "cluster-info",
        "kubeconfig",
        &mut unreadable,
    )
    .await;
    // Its CA becomes the spec's: the same check as every kubeconfig read from a cluster.
    if let Some(text) = &o.cluster_info_kubeconfig {
        let reach = crate::kubeconf::Reach::Client(client, "kube-public");
        let origin = "ConfigMap kube-public/cluster-info";
        if let Err(e) = crate::kubeconf::vet(text, origin, Default::default(), reach).await {
            unreadable.push(e.to_string());
            o.cluster_info_kubeconfig = None;
        }
    }
    // The CCM's cloud config: whichever kube-system ConfigMap holds a [Global] cluster ID.
    let system: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    match system.list(&ListParams::default()).await {
        Ok(list) => {
            o.ccm_cloud_config = list.items.into_iter().find_map(|cm| {
                let name = cm.name_any();
                cm.data?.into_iter().find_map(|(key, text)| {
                    text.contains("KubernetesClusterID")
                        .then(|| (format!("kube-system/{name} {key}"), text))
                })
            });
        }
        Err(e) => unreadable.push(denied(e, "list ConfigMaps in kube-system")),
    }
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list(&ListParams::default()).await {
        Ok(list) => o.nodes = list.items.iter().map(observed_node).collect(),
        Err(e) => unreadable.push(denied(e, "list Nodes")),
    }
    let deployments: Api<Deployment> = Api::all(client.clone());
    match deployments.list(&ListParams::default()).await {
        Ok(list) => o.workloads.extend(list.items.iter().map(|d| {
            workload(
                "Deployment",
                d,
                d.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
            )
        })),
        Err(e) => unreadable.push(denied(e, "list Deployments")),
    }
    let daemonsets: Api<DaemonSet> = Api::all(client.clone());
    match daemonsets.list(&ListParams::default()).await {
        Ok(list) => o.workloads.extend(list.items.iter().map(|d| {
            workload(
                "DaemonSet",
                d,
                d.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
            )
        })),
        Err(e) => unreadable.push(denied(e, "list DaemonSets")),
    }
    o.unreadable.extend(unreadable);
}

fn observed_node(n: &Node) -> ObservedNode {
    let status = n.status.as_ref();
    ObservedNode {
        name: n.name_any(),
        internal_ip: status
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone()),
        provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()),
        labels: n.labels().clone().into_iter().collect(),
        taints: n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| match &t.value {
                        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
                        _ => format!("{}:{}", t.key, t.effect),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        kubelet_version: status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.clone()),
    }
}

fn workload(kind: &str, object: &impl ResourceExt, pod: Option<&PodSpec>) -> ObservedWorkload {
    let containers = pod.map(|p| p.containers.as_slice()).unwrap_or_default();
    ObservedWorkload {
        kind: kind.to_owned(),
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
        images: containers.iter().filter_map(|c| c.image.clone()).collect(),
        env: containers
            .iter()
            .flat_map(|c| c.env.iter().flatten())
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect(),
        labels: object.labels().clone().into_iter().collect(),
    }
}

fn kubean_api(client: &Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kubean.io", "v1alpha1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Kubean's Cluster for this cluster: the one whose inventory holds a Node's address (the only
/// one when there is one), with its hosts and vars ConfigMaps and newest ClusterOperation.
/// Each read refused on the way goes to `unreadable`.
async fn kubean(
    client: &Client,
    o: &Observed,
    unreadable: &mut Vec<String>,
) -> Option<ObservedKubean> {
    let clusters = match kubean_api(client, "Cluster")
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        // No Kubean here (no CRD): not an error, nothing to read.
        Err(kube::Error::Api(s)) if s.code == 404 => return None,
        Err(e) => {
            unreadable.push(denied(e, "list Kubean Clusters (kubean.io)"));
            return None;
        }
    };
    let mut candidates = Vec::new();
    for cluster in &clusters {
        let reference = |key: &str| {
            let r = cluster.data.get("spec")?.get(key)?;
            Some((
                r.get("namespace")?.as_str()?.to_owned(),
                r.get("name")?.as_str()?.to_owned(),
            ))
        };
        let hosts = match reference("hostsConfRef") {
            Some((ns, name)) => config_map_key(client, &ns, &name, "hosts.yml", unreadable)
                .await
                .map(|t| (ns, name, t)),
            None => None,
        };
        let vars = match reference("varsConfRef") {
            Some((ns, name)) => config_map_key(client, &ns, &name, "group_vars.yml", unreadable)
                .await
                .map(|t| (name, t)),
            None => None,
        };
        let holds_a_node = hosts.as_ref().is_some_and(|(_, _, text)| {
            o.nodes
                .iter()
                .filter_map(|n| n.internal_ip.as_deref())
                .any(|ip| text.contains(ip))
        });
        candidates.push((cluster, hosts, vars, holds_a_node, reference("sshAuthRef")));
    }
    let chosen = match candidates.iter().position(|c| c.3) {
        Some(i) => Some(candidates.swap_remove(i)),
        None if candidates.len() == 1 => candidates.pop(),
        None => None,
    };
    let (cluster, hosts, vars, _, ssh) = chosen?;
    let name = cluster.name_any();
    let operations = match kubean_api(client, "ClusterOperation")
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            unreadable.push(denied(e, "list Kubean ClusterOperations"));
            Vec::new()
        }
    };
    let newest = operations
        .iter()
        .filter(|op| op.data.pointer("/spec/cluster").and_then(Value::as_str) == Some(&name))
        .max_by_key(|op| op.metadata.creation_timestamp.clone().map(|t| t.0));
    let namespace = hosts
        .as_ref()
        .map_or_else(|| "kubean-system".to_owned(), |(ns, _, _)| ns.clone());
    Some(ObservedKubean {
        namespace,
        cluster: name,
        hosts: hosts.map(|(_, name, text)| (name, text)),
        vars,
        ssh_secret: ssh.map(|(_, name)| name),
        operation_image: newest.and_then(|op| {
            Some((
                op.name_any(),
                op.data.pointer("/spec/image")?.as_str()?.to_owned(),
            ))
        }),
    })
}

fn tags_of(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

fn filter(name: &str, value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder()
        .name(name)
        .values(value)
        .build()
}

async fn aws_side(sdk: &aws_config::SdkConfig, region_from: &str, o: &mut Observed) -> ObservedAws {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let iam = aws_sdk_iam::Client::new(sdk);
    let mut out = ObservedAws {
        region: sdk.region().map(ToString::to_string).unwrap_or_default(),
        region_from: region_from.to_owned(),
        ..Default::default()
    };
    // Each fixed node's instance: by its providerID where the CCM set one, else by address
    // (Kubespray-built Nodes have no providerID until the CCM runs).
    for (node, ip) in kk_spec::adopt::fixed_hosts(o) {
        let provider = o
            .nodes
            .iter()
            .find(|n| n.name == node || n.internal_ip.as_deref() == Some(&ip))
            .and_then(|n| n.provider_id.as_deref())
            .and_then(|p| p.rsplit('/').next())
            .filter(|id| id.starts_with("i-"))
            .map(str::to_owned);
        let request = ec2.describe_instances();
        let (request, found_by) = match &provider {
            Some(id) => (request.instance_ids(id), "providerID"),
            None => (
                request
                    .filters(filter("private-ip-address", &ip))
                    .filters(filter("instance-state-name", "running")),
                "InternalIP",
            ),
        };
        match request.send().await {
            Ok(answer) => {
                for reservation in answer.reservations() {
                    for i in reservation.instances() {
                        out.instances.push(ObservedInstance {
                            node: node.clone(),
                            found_by: found_by.into(),
                            id: i.instance_id().unwrap_or_default().to_owned(),
                            owner_id: reservation.owner_id().map(str::to_owned),
                            private_ip: i.private_ip_address().map(str::to_owned),
                            private_dns_name: i.private_dns_name().map(str::to_owned),
                            vpc_id: i.vpc_id().map(str::to_owned),
                            subnet_id: i.subnet_id().map(str::to_owned),
                            zone: i
                                .placement()
                                .and_then(|p| p.availability_zone())
                                .map(str::to_owned),
                            security_group_ids: i
                                .security_groups()
                                .iter()
                                .filter_map(|g| g.group_id().map(str::to_owned))
                                .collect(),
                            instance_profile: i
                                .iam_instance_profile()
                                .and_then(|p| p.arn())
                                .and_then(|arn| arn.rsplit('/').next())
                                .map(str::to_owned),
                            image_id: i.image_id().map(str::to_owned),
                            tags: tags_of(i.tags()),
                        });
                    }
                }
            }
            Err(e) => o
                .unreadable
                .push(AwsCallError::from_sdk("ec2:DescribeInstances", &e).to_string()),
        }
    }
    let vpc = out.instances.iter().find_map(|i| i.vpc_id.clone());
    if let Some(vpc) = &vpc {
        match ec2
            .describe_subnets()
            .filters(filter("vpc-id", vpc))
            .send()
            .await
        {
            Ok(answer) => {
                out.subnets = answer
                    .subnets()
                    .iter()
                    .map(|s| ObservedSubnet {
                        id: s.subnet_id().unwrap_or_default().to_owned(),
                        zone: s.availability_zone().unwrap_or_default().to_owned(),
                        tags: tags_of(s.tags()),
                    })
                    .collect();
            }
            Err(e) => o
                .unreadable
                .push(AwsCallError::from_sdk("ec2:DescribeSubnets", &e).to_string()),
        }
        match ec2
            .describe_security_groups()
            .filters(filter("vpc-id", vpc))
            .send()
            .await
        {
            Ok(answer) => {
                out.security_groups = answer
                    .security_groups()
                    .iter()
                    .map(|g| ObservedGroup {
                        id: g.group_id().unwrap_or_default().to_owned(),
                        name: g.group_name().unwrap_or_default().to_owned(),
                        tags: tags_of(g.tags()),
                    })
                    .collect();
            }
            Err(e) => o
                .unreadable
                .push(AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e).to_string()),
        }
        match ec2
            .describe_vpc_endpoints()
            .filters(filter("vpc-id", vpc))
            .send()
            .await
        {
            Ok(answer) => {
                out.vpc_endpoint_services = answer
                    .vpc_endpoints()
                    .iter()
                    .filter(|e| {
                        e.state()
                            .is_some_and(|s| s.as_str().eq_ignore_ascii_case("available"))
                    })
                    .filter_map(|e| e.service_name().map(str::to_owned))
                    .collect();
            }
            Err(e) => o
                .unreadable
                .push(AwsCallError::from_sdk("ec2:DescribeVpcEndpoints", &e).to_string()),
        }
    }
    let mut roles = iam.list_roles().into_paginator().items().send();
    loop {
        match roles.next().await {
            None => break,
            Some(Ok(role)) => out.role_names.push(role.role_name().to_owned()),
            Some(Err(e)) => {
                o.unreadable
                    .push(AwsCallError::from_sdk("iam:ListRoles", &e).to_string());
                break;
            }
        }
    }
    let mut profiles = iam.list_instance_profiles().into_paginator().items().send();
    loop {
        match profiles.next().await {
            None => break,
            Some(Ok(p)) => out.instance_profiles.push((
                p.instance_profile_name().to_owned(),
                p.roles().iter().map(|r| r.role_name().to_owned()).collect(),
            )),
            Some(Err(e)) => {
                o.unreadable
                    .push(AwsCallError::from_sdk("iam:ListInstanceProfiles", &e).to_string());
                break;
            }
        }
    }
    out
}

/// The read-only RBAC `init --discover` needs in the new cluster and in Kubean's management
/// cluster, as one ClusterRole to bind in each.
pub fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "kubean-karpenter-discover"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps", "nodes"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "daemonsets"], "verbs": ["list"]},
            {"apiGroups": ["kubean.io"], "resources": ["clusters", "clusteroperations"], "verbs": ["get", "list"]},
        ],
    })
}

/// The read-only IAM policy `init --discover` needs.
pub fn iam_policy() -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "KubeanKarpenterDiscover",
            "Effect": "Allow",
            "Action": [
                "ec2:DescribeInstances",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeVpcEndpoints",
                "iam:ListRoles",
                "iam:ListInstanceProfiles",
            ],
            "Resource": "*",
        }],
    })
}
