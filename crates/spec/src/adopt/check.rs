//! `init --discover --check`: an existing spec against what the cluster and the account say
//! now, one located finding per difference.

use kk_model::FieldPath;

use super::{Discovered, Found, Observed};
use crate::{LoadedSpec, NodeRole, SpecError, Tag};

struct Findings<'s> {
    spec: &'s LoadedSpec,
    out: Vec<SpecError>,
}

impl Findings<'_> {
    fn at(&mut self, field: &str, message: String) {
        let path = FieldPath::parse(field);
        let pos = self.spec.document.pos(&path);
        self.out
            .push(SpecError::new(&self.spec.file, Some(pos), message).at_field(field));
    }

    /// The spec's value against a discovered one (equal, or a finding saying both).
    fn same<T: PartialEq + std::fmt::Display>(
        &mut self,
        field: &str,
        spec: &T,
        found: &Option<Found<T>>,
    ) {
        if let Some(f) = found
            && &f.value != spec
        {
            self.at(
                field,
                format!(
                    "the spec says {spec}, the cluster says {} (from {})",
                    f.value, f.from
                ),
            );
        }
    }
}

fn role_names(roles: &[NodeRole]) -> String {
    let names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    format!("[{}]", names.join(", "))
}

/// Every field of `spec` that differs from what was discovered, located in the spec's file.
/// `spec_ca_hash` is the spec's CA hash where the caller resolved it (a file or kubeconfig
/// source); an inline `base64` is hashed here.
pub fn compare(
    spec: &LoadedSpec,
    observed: &Observed,
    d: &Discovered,
    spec_ca_hash: Option<&str>,
) -> Vec<SpecError> {
    let mut f = Findings {
        spec,
        out: Vec::new(),
    };
    let c = &spec.spec;
    let s = &c.spec;
    f.same("metadata.name", &c.metadata.name, &d.cluster_name);
    f.same(
        "spec.kubernetesVersion",
        &s.kubernetes_version.trim_start_matches('v').to_owned(),
        &d.kubernetes_version,
    );
    f.same(
        "spec.apiServer.dnsName",
        &s.api_server.dns_name,
        &d.api_dns_name,
    );
    f.same("spec.apiServer.port", &s.api_server.port, &d.api_port);
    let inline_hash = s.ca_bundle.base64.as_deref().and_then(|b| {
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .ok()?;
        crate::ca::ClusterCa::from_pem(&pem)
            .ok()
            .map(|ca| ca.cert_hash)
    });
    if let (Some(hash), Some(found)) = (
        spec_ca_hash.map(str::to_owned).or(inline_hash),
        &d.ca_cert_hash,
    ) && hash != found.value
    {
        f.at(
            "spec.caBundle",
            format!("the spec's CA has hash {hash}, the cluster's {} (from {}): nodes would not trust the API server", found.value, found.from),
        );
    }
    if let Some(found) = &d.kubean_cluster {
        let spec_says = s
            .kubean
            .existing_cluster
            .clone()
            .unwrap_or_else(|| "nothing".into());
        f.same(
            "spec.kubean.existingCluster",
            &spec_says,
            &Some(found.clone()),
        );
    }
    f.same(
        "spec.kubean.namespace",
        &s.kubean.namespace,
        &d.kubean_namespace,
    );
    f.same(
        "spec.kubean.sprayJobImage",
        &s.kubean.spray_job_image,
        &d.spray_job_image,
    );
    f.same(
        "spec.kubean.networkPlugin",
        &s.kubean.network_plugin,
        &d.network_plugin,
    );
    f.same("spec.kubean.ssh.user", &s.kubean.ssh.user, &d.ssh_user);
    f.same("spec.kubean.ssh.port", &s.kubean.ssh.port, &d.ssh_port);
    f.same(
        "spec.kubean.ssh.privateKeySecret",
        &s.kubean.ssh.private_key_secret,
        &d.ssh_secret,
    );
    if !d.nodes.is_empty() {
        for (i, node) in s.kubean.nodes.iter().enumerate() {
            let at = format!("spec.kubean.nodes[{i}]");
            let Some(found) = d
                .nodes
                .iter()
                .find(|n| n.name == node.name || n.ip == node.ip)
            else {
                f.at(
                    &at,
                    format!(
                        "node {} ({}) is not in the cluster any more",
                        node.name, node.ip
                    ),
                );
                continue;
            };
            if found.ip != node.ip {
                f.at(
                    &format!("{at}.ip"),
                    format!(
                        "the spec says {}, the cluster says {} (from {})",
                        node.ip, found.ip, found.from
                    ),
                );
            }
            if let Some(dns) = &found.private_dns_name
                && node.private_dns_name.as_ref() != Some(dns)
            {
                f.at(
                    &format!("{at}.privateDnsName"),
                    format!(
                        "the spec says {}, the cluster says {dns} (from {})",
                        node.private_dns_name.as_deref().unwrap_or("nothing"),
                        found.from
                    ),
                );
            }
            let mut want = node.roles.clone();
            let mut have = found.roles.clone();
            want.sort();
            have.sort();
            if want != have {
                f.at(
                    &format!("{at}.roles"),
                    format!(
                        "the spec says {}, the cluster says {} (from {})",
                        role_names(&node.roles),
                        role_names(&found.roles),
                        found.from
                    ),
                );
            }
        }
        for found in &d.nodes {
            if !s
                .kubean
                .nodes
                .iter()
                .any(|n| n.name == found.name || n.ip == found.ip)
            {
                f.at(
                    "spec.kubean.nodes",
                    format!(
                        "node {} ({}, {}) is in the cluster but not in the spec (from {})",
                        found.name,
                        found.ip,
                        role_names(&found.roles),
                        found.from
                    ),
                );
            }
        }
    }
    if let Some(taints) = &d.infra_taints
        && taints.value != s.kubean.infra_taints
    {
        f.at(
            "spec.kubean.infraTaints",
            format!(
                "the spec says {:?}, the cluster says {:?} (from {})",
                s.kubean.infra_taints, taints.value, taints.from
            ),
        );
    }
    f.same("spec.aws.region", &s.aws.region, &d.region);
    f.same("spec.aws.accountID", &s.aws.account_id, &d.account_id);
    f.same("spec.aws.vpcID", &s.aws.vpc_id, &d.vpc_id);
    f.same(
        "spec.aws.controlPlaneSecurityGroupID",
        &s.aws.control_plane_security_group_id,
        &d.control_plane_security_group,
    );
    f.same(
        "spec.karpenter.isolatedVPC",
        &s.karpenter.isolated_vpc,
        &d.isolated_vpc,
    );
    if let Some(aws) = &observed.aws {
        let tagged = |tags: &std::collections::BTreeMap<String, String>, tag: &Tag| {
            tags.get(&tag.key) == Some(&tag.value)
        };
        if let Some(tag) = &s.aws.subnets.discovery_tag
            && !aws.subnets.is_empty()
            && !aws.subnets.iter().any(|sub| tagged(&sub.tags, tag))
        {
            let now: Vec<String> = aws
                .subnets
                .iter()
                .filter_map(|sub| {
                    sub.tags
                        .get(&tag.key)
                        .map(|v| format!("{} has {}={v}", sub.id, tag.key))
                })
                .collect();
            f.at(
                "spec.aws.subnets.discoveryTag",
                format!(
                    "no subnet of the VPC carries {}={}{}: Karpenter would find no subnet",
                    tag.key,
                    tag.value,
                    if now.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", now.join(", "))
                    }
                ),
            );
        }
        for id in &s.aws.subnets.ids {
            if !aws.subnets.iter().any(|sub| &sub.id == id) {
                f.at(
                    "spec.aws.subnets.ids",
                    format!("subnet {id} is not in the VPC"),
                );
            }
        }
        if let Some(tag) = &s.aws.security_groups.discovery_tag
            && !aws.security_groups.is_empty()
            && !aws.security_groups.iter().any(|g| tagged(&g.tags, tag))
        {
            f.at(
                "spec.aws.securityGroups.discoveryTag",
                format!(
                    "no security group of the VPC carries {}={}: Karpenter's nodes would get none",
                    tag.key, tag.value
                ),
            );
        }
    }
    let karpenter = d
        .installed
        .iter()
        .find(|i| i.component == crate::versions::KARPENTER);
    if let Some(k) = karpenter
        && let Some(version) = &k.version
        && version.trim_start_matches('v') != s.karpenter.version.trim_start_matches('v')
    {
        f.at(
            "spec.karpenter.version",
            format!(
                "the spec says {}, the cluster runs {version} (from {})",
                s.karpenter.version, k.from
            ),
        );
    }
    if let (Some(controller), Some(found)) = (&s.controller, &d.controller_image)
        && (controller.image.repository != found.value.0
            || controller.image.digest != found.value.1)
    {
        f.at(
            "spec.controller.image",
            format!(
                "the spec says {}@{}, the cluster runs {}@{} (from {})",
                controller.image.repository,
                controller.image.digest,
                found.value.0,
                found.value.1,
                found.from
            ),
        );
    }
    f.out.sort_by_key(|e| e.pos.map(|p| (p.line, p.col)));
    f.out
}
