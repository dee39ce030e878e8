//! `spec.kubean`: the Kubean operator, its images and the control-plane hosts it installs.

use super::*;

pub(super) fn kubean(p: &mut Problems, at: &FieldPath, k: &Kubean, region: &str) {
    if !DNS_LABEL.is_match(&k.namespace) {
        p.push((at.key("namespace"), "must be a DNS label".into()));
    }
    if k.spray_job_image.trim().is_empty() || k.spray_job_image.contains(char::is_whitespace) {
        p.push((at.key("sprayJobImage"), "must be an image reference".into()));
    }
    if k.network_plugin == "aws-vpc-cni" {
        p.push((
            at.key("networkPlugin"),
            "Kubespray does not install the AWS VPC CNI; use calico or cilium".into(),
        ));
    }
    if k.ssh.user.trim().is_empty() {
        p.push((at.key("ssh").key("user"), "must not be empty".into()));
    } else if !SSH_USER.is_match(&k.ssh.user) {
        p.push((
            at.key("ssh").key("user"),
            format!(
                "{:?} is not a login name ([a-z_][a-z0-9_-]{{0,31}})",
                k.ssh.user
            ),
        ));
    }
    if k.ssh.port == 0 {
        p.push((at.key("ssh").key("port"), "port must be 1–65535".into()));
    }
    if !DNS_SUBDOMAIN.is_match(&k.ssh.private_key_secret) {
        p.push((
            at.key("ssh").key("privateKeySecret"),
            "must be a Secret name".into(),
        ));
    }
    let nodes_at = at.key("nodes");
    let mut names = BTreeSet::new();
    let mut ips = BTreeSet::new();
    let mut seen_roles = BTreeSet::new();
    for (i, node) in k.nodes.iter().enumerate() {
        let at = nodes_at.index(i);
        if !DNS_SUBDOMAIN.is_match(&node.name) {
            p.push((
                at.key("name"),
                format!("{:?} is not a valid node name", node.name),
            ));
        }
        if !names.insert(node.name.as_str()) {
            p.push((
                at.key("name"),
                format!("duplicate node name {:?}", node.name),
            ));
        }
        if node.ip.parse::<IpAddr>().is_err() {
            p.push((at.key("ip"), format!("{:?} is not an IP address", node.ip)));
        } else if !ips.insert(node.ip.as_str()) {
            p.push((at.key("ip"), format!("duplicate IP {:?}", node.ip)));
        }
        match &node.private_dns_name {
            Some(dns) if !DNS_SUBDOMAIN.is_match(dns) => p.push((
                at.key("privateDnsName"),
                format!("{dns:?} is not a DNS name"),
            )),
            Some(dns) if crate::names::is_instance_name(dns) => p.push((
                at.key("privateDnsName"),
                format!(
                    "{dns:?} is a bare instance id: Kubean's nodes register without a \
                     providerID, and the node registration policy holds instance-named nodes \
                     to Karpenter's proof; use the full private DNS name \
                     ({dns}.<region>.compute.internal)"
                ),
            )),
            Some(_) => {}
            // The kubelets run with the external cloud provider (cloud_provider: external), and
            // Kubespray never sets --provider-id: the AWS cloud controller manager finds the
            // instance of a Node by the Node's name as a private DNS name
            // (kubernetes/cloud-provider-aws v1.35.2 pkg/providers/v1/aws.go
            // findInstanceByNodeName: filter private-dns-name). Named after the inventory entry,
            // the node is never found and keeps the uninitialized taint.
            None => p.push((
                at.clone(),
                format!(
                    "privateDnsName is required: the AWS cloud controller manager finds the \
                     instance by the node's name as its EC2 private DNS name, and without it \
                     Kubespray names the node {:?} (with the VPC's default DHCP options the name \
                     is ip-{}.{})",
                    node.name,
                    node.ip.replace(['.', ':'], "-"),
                    if region == "us-east-1" {
                        "ec2.internal".to_owned()
                    } else {
                        format!("{region}.compute.internal")
                    }
                ),
            )),
        }
        if node.roles.is_empty() {
            p.push((at.key("roles"), "a node needs at least one role".into()));
        }
        let mut own = BTreeSet::new();
        for (j, role) in node.roles.iter().enumerate() {
            if !own.insert(role) {
                p.push((at.key("roles").index(j), "duplicate role".into()));
            }
            seen_roles.insert(*role);
        }
    }
    for (role, name, why) in [
        (
            NodeRole::ControlPlane,
            "control-plane",
            "the cluster needs a control plane",
        ),
        (NodeRole::Etcd, "etcd", "the cluster needs etcd"),
        (
            NodeRole::Infra,
            "infra",
            "the Karpenter controller must run on Kubean-managed infra nodes",
        ),
    ] {
        if !seen_roles.contains(&role) {
            p.push((nodes_at.clone(), format!("no node with role {name}: {why}")));
        }
    }
    for (i, taint) in k.infra_taints.iter().enumerate() {
        if !INFRA_TAINT.is_match(taint) {
            p.push((
                at.key("infraTaints").index(i),
                format!("{taint:?} is not key=value:Effect (a label key, an optional label value, Effect one of NoSchedule, PreferNoSchedule, NoExecute)"),
            ));
        }
    }
}
