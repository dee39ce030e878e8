//! Observed → Discovered: which source wins for each spec value, and the findings where
//! sources disagree or are missing.

use std::collections::BTreeSet;

use super::sources::{self, Inventory};
use super::{Discovered, DiscoveredNode, Found, Installed, Observed, ObservedInstance};
use crate::ca::ClusterCa;
use crate::names::INFRA_ROLE_LABEL;
use crate::{NodeRole, Tag};

const KUBEADM_CONFIG: &str = "kube-system/kubeadm-config ClusterConfiguration";
const DISCOVERY_KEY: &str = "karpenter.sh/discovery";
const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// Kubespray's `nodelocaldns_ip` default (roles/kubespray_defaults).
const NODELOCALDNS_DEFAULT: &str = "169.254.25.10";

/// Every spec value the observation supports, each with its source; findings for the rest.
pub fn discover(observed: &Observed) -> Discovered {
    let mut d = Discovered::default();
    for unreadable in &observed.unreadable {
        d.findings.push(format!("could not read {unreadable}"));
    }
    let kubeadm = observed
        .kubeadm_cluster_configuration
        .as_deref()
        .and_then(sources::cluster_configuration)
        .unwrap_or_default();
    let kubean = observed.kubean.as_ref();
    let inventory = kubean
        .and_then(|k| k.hosts.as_ref())
        .and_then(|(name, text)| Some((name.clone(), sources::inventory(text)?)));
    let vars = kubean
        .and_then(|k| k.vars.as_ref())
        .and_then(|(name, text)| Some((name.clone(), sources::variables(text)?)));
    let var = |key: &str| {
        let (name, map) = vars.as_ref()?;
        let value = sources::variable(map, key)?;
        Some(Found::new(
            value,
            format!("{}/{name} group_vars.yml {key}", kubean_ns(observed)),
        ))
    };

    // The API endpoint nodes join: kubeadm's controlPlaneEndpoint, else Kubespray's variables.
    if let Some(endpoint) = &kubeadm.control_plane_endpoint {
        let (host, port) = sources::split_endpoint(endpoint);
        d.api_dns_name = Some(Found::new(
            host,
            format!("{KUBEADM_CONFIG}.controlPlaneEndpoint"),
        ));
        d.api_port = port.map(|p| Found::new(p, format!("{KUBEADM_CONFIG}.controlPlaneEndpoint")));
    } else if let Some(name) = var("apiserver_loadbalancer_domain_name") {
        d.api_dns_name = Some(name);
    }
    if d.api_port.is_none() {
        d.api_port = var("kube_apiserver_port")
            .and_then(|f| Some(Found::new(f.value.parse().ok()?, f.from)));
    }
    d.kubernetes_version = kubeadm
        .kubernetes_version
        .as_ref()
        .map(|v| {
            Found::new(
                v.trim_start_matches('v').to_owned(),
                format!("{KUBEADM_CONFIG}.kubernetesVersion"),
            )
        })
        .or_else(|| {
            var("kube_version")
                .map(|f| Found::new(f.value.trim_start_matches('v').to_owned(), f.from))
        });
    if let Some(version) = &d.kubernetes_version {
        let kubelets: BTreeSet<&str> = observed
            .nodes
            .iter()
            .filter_map(|n| n.kubelet_version.as_deref())
            .map(|v| v.trim_start_matches('v'))
            .filter(|v| *v != version.value)
            .collect();
        if !kubelets.is_empty() {
            d.findings.push(format!(
                "kubernetesVersion {} ({}) but Nodes' kubelets run {}: an upgrade may be under way",
                version.value,
                version.from,
                kubelets.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    d.pod_subnet = kubeadm
        .pod_subnet
        .map(|v| Found::new(v, format!("{KUBEADM_CONFIG}.networking.podSubnet")))
        .or_else(|| var("kube_pods_subnet"));
    d.service_subnet = kubeadm
        .service_subnet
        .map(|v| Found::new(v, format!("{KUBEADM_CONFIG}.networking.serviceSubnet")))
        .or_else(|| var("kube_service_addresses"));
    d.cluster_dns = cluster_dns(observed, &d, &var);

    if let Some((server, ca)) = observed
        .cluster_info_kubeconfig
        .as_deref()
        .and_then(sources::cluster_info)
    {
        const FROM: &str = "kube-public/cluster-info kubeconfig";
        if d.api_dns_name.is_none()
            && let Some(server) = server
        {
            let (host, port) = sources::split_endpoint(&server);
            d.api_dns_name = Some(Found::new(host, format!("{FROM} server")));
            if d.api_port.is_none() {
                d.api_port = port.map(|p| Found::new(p, format!("{FROM} server")));
            }
        }
        if let Some(ca) = ca {
            use base64::Engine;
            match base64::engine::general_purpose::STANDARD
                .decode(ca.trim())
                .ok()
                .and_then(|pem| ClusterCa::from_pem(&pem).ok())
            {
                Some(parsed) => {
                    d.ca_cert_hash = Some(Found::new(
                        parsed.cert_hash.clone(),
                        format!("{FROM} certificate-authority-data"),
                    ));
                    // Re-encoded from the parsed certificates: only they, and only base64,
                    // reach the spec text.
                    d.ca_base64 = Some(Found::new(
                        parsed.bundle_base64.clone(),
                        format!("{FROM} certificate-authority-data"),
                    ));
                }
                None => d.findings.push(format!(
                    "{FROM}: certificate-authority-data is not a PEM certificate"
                )),
            }
        }
    } else {
        d.findings.push(
            "kube-public/cluster-info has no kubeconfig: token + CA-hash discovery, which nodes join with, is off (Kubespray's remove_anonymous_access?)".into(),
        );
    }

    // Kubean: the release (its spray-job image), the plugin, SSH and the fixed nodes.
    if let Some(k) = kubean {
        d.kubean_cluster = Some(Found::new(
            k.cluster.clone(),
            format!(
                "Kubean's Cluster {} (its inventory holds this cluster's nodes)",
                k.cluster
            ),
        ));
        d.kubean_namespace = Some(Found::new(
            k.namespace.clone(),
            format!("the namespace of Kubean's Cluster {}", k.cluster),
        ));
        if let Some((op, image)) = &k.operation_image {
            d.spray_job_image = Some(Found::new(
                image.clone(),
                format!("{}/{op} ClusterOperation spec.image", k.namespace),
            ));
        } else {
            d.findings.push(format!(
                "no ClusterOperation of Kubean's Cluster {} names a spray-job image",
                k.cluster
            ));
        }
        if let Some(secret) = &k.ssh_secret {
            d.ssh_secret = Some(Found::new(
                secret.clone(),
                format!("Kubean Cluster {} spec.sshAuthRef.name", k.cluster),
            ));
        }
    }
    d.network_plugin = var("kube_network_plugin");
    if let Some((cm, inv)) = &inventory {
        let from = format!("{}/{cm} hosts.yml", kubean_ns(observed));
        let host_user = inv.hosts.iter().find_map(|h| h.ansible_user.clone());
        d.ssh_user = inv
            .ansible_user
            .clone()
            .map(|u| Found::new(u, format!("{from} all.vars.ansible_user")))
            .or_else(|| host_user.map(|u| Found::new(u, format!("{from} hosts' ansible_user"))));
        let host_port = inv.hosts.iter().find_map(|h| h.ansible_port);
        d.ssh_port = inv
            .ansible_port
            .map(|p| Found::new(p, format!("{from} all.vars.ansible_port")))
            .or_else(|| host_port.map(|p| Found::new(p, format!("{from} hosts' ansible_port"))));
        d.nodes = nodes_from_inventory(inv, &from, observed);
        d.infra_taints = inv
            .hosts
            .iter()
            .find(|h| !h.node_taints.is_empty() && h.node_labels.contains_key(INFRA_ROLE_LABEL))
            .map(|h| {
                Found::new(
                    h.node_taints.clone(),
                    format!("{from} {}.node_taints", h.name),
                )
            });
    } else {
        d.nodes = nodes_from_cluster(observed);
        d.infra_taints = observed
            .nodes
            .iter()
            .find(|n| n.labels.contains_key(INFRA_ROLE_LABEL))
            .map(|n| {
                let taints: Vec<String> = n
                    .taints
                    .iter()
                    .filter(|t| {
                        !t.starts_with("node.kubernetes.io/")
                            && !t.starts_with("node.cloudprovider.kubernetes.io/")
                    })
                    .cloned()
                    .collect();
                Found::new(taints, format!("Node {} spec.taints", n.name))
            })
            .filter(|f| !f.value.is_empty());
    }
    if d.nodes.is_empty() {
        d.findings.push(
            "no fixed node found: neither Kubean's inventory nor a control-plane Node".into(),
        );
    }

    aws(observed, &mut d);
    cluster_name(observed, kubean.map(|k| k.cluster.as_str()), &mut d);
    aws_by_name(observed, &mut d);
    installed(observed, &mut d);
    d
}

fn kubean_ns(observed: &Observed) -> &str {
    observed
        .kubean
        .as_ref()
        .map_or("kubean-system", |k| &k.namespace)
}

fn cluster_dns(
    observed: &Observed,
    d: &Discovered,
    var: &dyn Fn(&str) -> Option<Found<String>>,
) -> Option<Found<String>> {
    if let Some(dns) = observed
        .kubelet_configuration
        .as_deref()
        .and_then(sources::kubelet_cluster_dns)
    {
        return Some(Found::new(
            dns,
            "kube-system/kubelet-config kubelet clusterDNS",
        ));
    }
    let nodelocal = var("enable_nodelocaldns");
    if observed
        .kubean
        .as_ref()
        .and_then(|k| k.vars.as_ref())
        .is_some()
        && nodelocal.as_ref().is_none_or(|f| f.value == "true")
    {
        return Some(var("nodelocaldns_ip").unwrap_or_else(|| {
            Found::new(
                NODELOCALDNS_DEFAULT.to_owned(),
                "Kubespray's nodelocaldns_ip default (enable_nodelocaldns)",
            )
        }));
    }
    let service = d.service_subnet.as_ref()?;
    Some(Found::new(
        sources::nth_address(&service.value, 3)?,
        format!(
            "Kubespray's skydns_server: the third address of {}",
            service.value
        ),
    ))
}

fn nodes_from_inventory(inv: &Inventory, from: &str, observed: &Observed) -> Vec<DiscoveredNode> {
    let member = |group: &str, host: &str| {
        inv.groups
            .get(group)
            .is_some_and(|m| m.iter().any(|h| h == host))
    };
    inv.hosts
        .iter()
        .filter_map(|h| {
            let mut roles = Vec::new();
            if member("kube_control_plane", &h.name) {
                roles.push(NodeRole::ControlPlane);
            }
            if member("etcd", &h.name) {
                roles.push(NodeRole::Etcd);
            }
            if member("kube_node", &h.name) && !roles.contains(&NodeRole::ControlPlane) {
                roles.push(NodeRole::Infra);
            }
            let ip = h.ip.clone()?;
            let private_dns_name = h.override_hostname.clone().or_else(|| {
                instance_for(observed, &h.name, &ip).and_then(|i| i.private_dns_name.clone())
            });
            Some(DiscoveredNode {
                name: h.name.clone(),
                ip,
                private_dns_name,
                roles,
                from: format!("{from} {}", h.name),
            })
        })
        .filter(|n| !n.roles.is_empty())
        .collect()
}

/// Without Kubean's inventory: the Nodes Karpenter does not manage.
fn nodes_from_cluster(observed: &Observed) -> Vec<DiscoveredNode> {
    observed
        .nodes
        .iter()
        .filter(|n| !n.labels.contains_key("karpenter.sh/nodepool"))
        .filter_map(|n| {
            let ip = n.internal_ip.clone()?;
            let roles = if n.labels.contains_key(CONTROL_PLANE_LABEL) {
                // kubeadm's stacked etcd: Kubespray's default etcd_deployment_type puts etcd there.
                vec![NodeRole::ControlPlane, NodeRole::Etcd]
            } else {
                vec![NodeRole::Infra]
            };
            let dns = instance_for(observed, &n.name, &ip)
                .and_then(|i| i.private_dns_name.clone())
                .or_else(|| n.name.ends_with(".internal").then(|| n.name.clone()));
            Some(DiscoveredNode {
                name: n.name.split('.').next().unwrap_or(&n.name).to_owned(),
                ip,
                private_dns_name: dns,
                roles,
                from: format!("Node {} (InternalIP, {CONTROL_PLANE_LABEL})", n.name),
            })
        })
        .collect()
}

fn instance_for<'o>(observed: &'o Observed, node: &str, ip: &str) -> Option<&'o ObservedInstance> {
    let aws = observed.aws.as_ref()?;
    aws.instances
        .iter()
        .find(|i| i.node == node || i.private_ip.as_deref() == Some(ip))
}

fn control_plane_instances<'o>(
    observed: &'o Observed,
    d: &Discovered,
) -> Vec<&'o ObservedInstance> {
    d.nodes
        .iter()
        .filter(|n| n.roles.contains(&NodeRole::ControlPlane))
        .filter_map(|n| instance_for(observed, &n.name, &n.ip))
        .collect()
}

fn aws(observed: &Observed, d: &mut Discovered) {
    let Some(aws) = &observed.aws else {
        d.findings.push("no AWS account was read: region, VPC, subnets, security groups and IAM are placeholders".into());
        return;
    };
    d.region = Some(Found::new(aws.region.clone(), aws.region_from.clone()));
    let control_plane = control_plane_instances(observed, d);
    for node in &d.nodes {
        if instance_for(observed, &node.name, &node.ip).is_none() {
            d.findings.push(format!(
                "no EC2 instance found for node {} ({})",
                node.name, node.ip
            ));
        }
    }
    let Some(first) = control_plane
        .first()
        .copied()
        .or_else(|| aws.instances.first())
    else {
        return;
    };
    let what = format!(
        "instance {} (node {}, found by {})",
        first.id, first.node, first.found_by
    );
    if let Some(owner) = &first.owner_id {
        d.account_id = Some(Found::new(owner.clone(), format!("the owner of {what}")));
    }
    if let Some(vpc) = &first.vpc_id {
        d.vpc_id = Some(Found::new(vpc.clone(), format!("{what} VpcId")));
    }
    if let Some(image) = &first.image_id {
        d.cpu_ami = Some(Found::new(
            image.clone(),
            format!("{what} ImageId (the control plane's kubeadm-ready image)"),
        ));
    }
    // The control plane's own group: one of its groups that does not carry the nodes'
    // discovery tag (Karpenter would attach that to every node).
    let groups: Vec<&super::ObservedGroup> = first
        .security_group_ids
        .iter()
        .filter_map(|id| aws.security_groups.iter().find(|g| &g.id == id))
        .collect();
    let own = groups
        .iter()
        .filter(|g| !g.tags.contains_key(DISCOVERY_KEY))
        .max_by_key(|g| g.name.contains("control-plane"))
        .or_else(|| groups.first());
    if let Some(g) = own {
        d.control_plane_security_group = Some(Found::new(
            g.id.clone(),
            format!("{what} security group {}", g.name),
        ));
    }
    let has = |service: &str| {
        aws.vpc_endpoint_services
            .iter()
            .any(|s| s.ends_with(&format!(".{service}")))
    };
    let isolated = has("ec2") && has("sts");
    d.isolated_vpc = Some(Found::new(
        isolated,
        if isolated {
            "the VPC's endpoints for ec2 and sts (made for nodes without a route out)".to_owned()
        } else {
            "the VPC's endpoints (none for ec2 and sts)".to_owned()
        },
    ));
    let infra = d
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&NodeRole::Infra))
        .filter_map(|n| instance_for(observed, &n.name, &n.ip))
        .find(|i| i.instance_profile.is_some());
    if let Some(i) = infra {
        d.infra_instance_profile = Some(Found::new(
            i.instance_profile.clone().unwrap_or_default(),
            format!("instance {} (node {}) IamInstanceProfile", i.id, i.node),
        ));
    }
}

/// Karpenter's, the CCM's, the instance tag's and Kubean's name for the cluster, and the
/// subnets' discovery tag value: the first wins, and each that differs is a finding.
fn cluster_name(observed: &Observed, kubean_cluster: Option<&str>, d: &mut Discovered) {
    let mut candidates: Vec<Found<String>> = Vec::new();
    for w in &observed.workloads {
        if let Some((_, v)) = w.env.iter().find(|(k, _)| k == "CLUSTER_NAME")
            && w.images.iter().any(|i| i.contains("karpenter"))
        {
            candidates.push(Found::new(
                v.clone(),
                format!(
                    "{}/{} env CLUSTER_NAME (Karpenter's settings.clusterName)",
                    w.namespace, w.name
                ),
            ));
        }
    }
    if let Some((from, text)) = &observed.ccm_cloud_config
        && let Some(id) = sources::cloud_config_cluster_id(text)
    {
        candidates.push(Found::new(
            id,
            format!("{from} KubernetesClusterID (the CCM)"),
        ));
    }
    if let Some(aws) = &observed.aws {
        for i in control_plane_instances(observed, d) {
            for key in i.tags.keys() {
                if let Some(name) = key.strip_prefix("kubernetes.io/cluster/") {
                    candidates.push(Found::new(
                        name.to_owned(),
                        format!("instance {} tag {key}", i.id),
                    ));
                }
            }
        }
        if let Some(cluster) = kubean_cluster {
            candidates.push(Found::new(
                cluster.to_owned(),
                format!("{}/{cluster} Kubean Cluster", kubean_ns(observed)),
            ));
        }
        let vpc = d.vpc_id.as_ref().map(|v| v.value.as_str());
        let values: BTreeSet<&str> = aws
            .subnets
            .iter()
            .filter_map(|s| s.tags.get(DISCOVERY_KEY).map(String::as_str))
            .collect();
        if values.len() == 1 {
            let value = values.into_iter().next().unwrap_or_default();
            candidates.push(Found::new(
                value.to_owned(),
                format!(
                    "the {DISCOVERY_KEY} tag on subnets of {}",
                    vpc.unwrap_or("the VPC")
                ),
            ));
        }
    } else if let Some(cluster) = kubean_cluster {
        candidates.push(Found::new(
            cluster.to_owned(),
            format!("{}/{cluster} Kubean Cluster", kubean_ns(observed)),
        ));
    }
    let Some(chosen) = candidates.first().cloned() else {
        d.findings.push("no source names the cluster (Karpenter, the CCM, a kubernetes.io/cluster tag, Kubean's Cluster)".into());
        return;
    };
    for other in &candidates[1..] {
        if other.value != chosen.value {
            d.findings.push(format!(
                "cluster name {:?} ({}) disagrees with {:?} ({})",
                chosen.value, chosen.from, other.value, other.from
            ));
        }
    }
    d.cluster_name = Some(chosen);
}

/// What depends on the cluster's name: the discovery tags, the node role and profile.
fn aws_by_name(observed: &Observed, d: &mut Discovered) {
    let (Some(aws), Some(name)) = (&observed.aws, d.cluster_name.clone()) else {
        return;
    };
    let name = name.value;
    let vpc = d
        .vpc_id
        .as_ref()
        .map_or("the VPC", |v| v.value.as_str())
        .to_owned();
    let tagged: Vec<&super::ObservedSubnet> = aws
        .subnets
        .iter()
        .filter(|s| s.tags.get(DISCOVERY_KEY) == Some(&name))
        .collect();
    if tagged.is_empty() {
        d.findings.push(format!(
            "no subnet of {vpc} carries {DISCOVERY_KEY}={name}: Karpenter would find no subnet to launch in (tag the private subnets)"
        ));
    } else {
        d.subnet_tag = Some(Found::new(
            Tag {
                key: DISCOVERY_KEY.into(),
                value: name.clone(),
            },
            format!(
                "{} subnet(s) of {vpc} carry it: {}",
                tagged.len(),
                tagged
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
        d.zones = tagged
            .iter()
            .map(|s| s.zone.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
    }
    let groups: Vec<&super::ObservedGroup> = aws
        .security_groups
        .iter()
        .filter(|g| g.tags.get(DISCOVERY_KEY) == Some(&name))
        .collect();
    if groups.is_empty() {
        d.findings.push(format!(
            "no security group of {vpc} carries {DISCOVERY_KEY}={name}: Karpenter's nodes would get no security group (tag the nodes' group)"
        ));
    } else {
        d.security_group_tag = Some(Found::new(
            Tag {
                key: DISCOVERY_KEY.into(),
                value: name.clone(),
            },
            format!(
                "security group(s) {}",
                groups
                    .iter()
                    .map(|g| format!("{} ({})", g.id, g.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let role = format!("KarpenterNodeRole-{name}");
    if aws.role_names.contains(&role) {
        d.node_role = Some(Found::new(role.clone(), "IAM role of that name"));
    }
    let profile = aws
        .instance_profiles
        .iter()
        .find(|(_, roles)| roles.contains(&role))
        .or_else(|| {
            aws.instance_profiles
                .iter()
                .find(|(p, _)| *p == format!("KarpenterNodeInstanceProfile-{name}"))
        });
    if let Some((p, _)) = profile {
        d.node_instance_profile = Some(Found::new(
            p.clone(),
            format!("IAM instance profile {p} (holds {role})"),
        ));
    }
}

fn installed(observed: &Observed, d: &mut Discovered) {
    let table = crate::versions::table();
    for w in &observed.workloads {
        for image in &w.images {
            let (repository, reference) = split_image(image);
            let last = repository.rsplit('/').next().unwrap_or(repository);
            if last == "kubean-karpenter" {
                if let Some(digest) = reference.strip_prefix('@') {
                    d.controller_image = Some(Found::new(
                        (repository.to_owned(), digest.to_owned()),
                        format!("{} {}/{} image", w.kind, w.namespace, w.name),
                    ));
                }
                d.installed.push(Installed {
                    component: "kubean-karpenter controller".into(),
                    version: None,
                    from: format!("{} {}/{}", w.kind, w.namespace, w.name),
                });
                continue;
            }
            let known = table.components.iter().find(|c| {
                c.image
                    .as_deref()
                    .is_some_and(|i| i == repository || i.rsplit('/').next() == Some(last))
            });
            if let Some(c) = known {
                d.installed.push(Installed {
                    component: c.name.clone(),
                    version: reference
                        .strip_prefix(':')
                        .map(|t| t.split('@').next().unwrap_or(t).to_owned()),
                    from: format!("{} {}/{} image {image}", w.kind, w.namespace, w.name),
                });
            }
        }
    }
    d.installed
        .sort_by(|a, b| a.component.cmp(&b.component).then(a.from.cmp(&b.from)));
    d.installed
        .dedup_by(|a, b| a.component == b.component && a.from == b.from);
}

/// `repo:tag@digest` → (`repo`, `:tag@digest`); `repo@digest` → (`repo`, `@digest`).
fn split_image(image: &str) -> (&str, &str) {
    let name_end = image.rfind('/').map_or(0, |i| i + 1);
    let tail = &image[name_end..];
    match tail.find([':', '@']) {
        Some(i) => image.split_at(name_end + i),
        None => (image, ""),
    }
}

/// The fixed nodes' names and addresses, for finding their instances: Kubean's inventory
/// where it was read, else the Nodes Karpenter does not manage.
pub fn fixed_hosts(observed: &Observed) -> Vec<(String, String)> {
    let inventory = observed
        .kubean
        .as_ref()
        .and_then(|k| k.hosts.as_ref())
        .and_then(|(_, text)| sources::inventory(text));
    match inventory {
        Some(inv) => inv
            .hosts
            .into_iter()
            .filter_map(|h| Some((h.name, h.ip?)))
            .collect(),
        None => observed
            .nodes
            .iter()
            .filter(|n| !n.labels.contains_key("karpenter.sh/nodepool"))
            .filter_map(|n| Some((n.name.clone(), n.internal_ip.clone()?)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_at_the_tag_or_digest() {
        assert_eq!(
            split_image("public.ecr.aws/karpenter/controller:1.15.2@sha256:ab"),
            ("public.ecr.aws/karpenter/controller", ":1.15.2@sha256:ab")
        );
        assert_eq!(
            split_image("registry:5000/kk/kubean-karpenter@sha256:ab"),
            ("registry:5000/kk/kubean-karpenter", "@sha256:ab")
        );
        assert_eq!(split_image("nginx"), ("nginx", ""));
    }
}
