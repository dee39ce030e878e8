//! Discovered → spec text: every read value with a trailing `# from …`, every value that
//! could not be read as a commented placeholder that says what goes there.

use std::fmt::Write as _;

use kk_model::visible::{visible as v, yaml_double_quoted};

use super::{Discovered, Found};

// Every value here was read from a cluster or an account, and some are written by whoever runs
// a kubelet (`status.nodeInfo`): scalars are quoted with every control, newline and bidi
// character escaped, and text in comments goes through `v` (kk_model::visible), so no value
// can end a comment, add a key or drive the terminal the spec is printed to.

/// A YAML scalar: bare where it reads back as the same string, double-quoted otherwise.
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-@".contains(c))
        && !text.starts_with(['-', '.', '@'])
        && text.parse::<f64>().is_err()
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
        );
    if plain {
        text.to_owned()
    } else {
        yaml_double_quoted(text)
    }
}

fn quoted(text: &str) -> String {
    yaml_double_quoted(text)
}

struct Spec {
    text: String,
}

impl Spec {
    fn raw(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// `key: value  # from …`, or the commented placeholder.
    fn field(
        &mut self,
        indent: usize,
        key: &str,
        found: Option<(String, &str)>,
        placeholder: &str,
    ) {
        let pad = " ".repeat(indent);
        match found {
            Some((value, from)) => {
                let _ = writeln!(self.text, "{pad}{key}: {value}  # from {}", v(from));
            }
            None => {
                let _ = writeln!(self.text, "{pad}# {key}: {placeholder}");
            }
        }
    }
}

fn text(found: &Option<Found<String>>) -> Option<(String, &str)> {
    found.as_ref().map(|f| (scalar(&f.value), f.from.as_str()))
}

/// The spec `init --discover` prints: a complete ElasticCluster where the cluster and the
/// account told enough, with the seeds' CPU and GPU pools to start from.
pub fn write_spec(d: &Discovered) -> String {
    let mut s = Spec {
        text: String::new(),
    };
    let name = d.cluster_name.as_ref().map(|f| f.value.clone());
    let name_or = name.clone().unwrap_or_else(|| "<CLUSTER_NAME>".into());
    s.raw(
        "# ElasticCluster discovered from a running cluster (`kubean-karpenter init --discover`).",
    );
    s.raw("# Each value says where it was read; a commented field could not be read: fill it in.");
    s.raw("# `init --discover --check FILE` compares a spec with the cluster again later.");
    if !d.findings.is_empty() {
        s.raw("#");
        s.raw("# Findings:");
        for finding in &d.findings {
            let _ = writeln!(s.text, "#   - {}", v(finding));
        }
    }
    if !d.installed.is_empty() {
        s.raw("#");
        s.raw("# Already installed in the cluster (apply takes them over where the spec renders them):");
        for i in &d.installed {
            let version = i
                .version
                .as_deref()
                .map_or(String::new(), |version| format!(" {version}"));
            let _ = writeln!(
                s.text,
                "#   - {}{} ({})",
                v(&i.component),
                v(&version),
                v(&i.from)
            );
        }
    }
    s.raw("apiVersion: kubean-karpenter.io/v1alpha1");
    s.raw("kind: ElasticCluster");
    s.raw("metadata:");
    s.field(
        2,
        "name",
        text(&d.cluster_name),
        "<CLUSTER_NAME>  # Karpenter's clusterName and the discovery tags' value",
    );
    s.raw("spec:");
    s.field(
        2,
        "kubernetesVersion",
        d.kubernetes_version
            .as_ref()
            .map(|f| (quoted(&f.value), f.from.as_str())),
        "\"<KUBERNETES_VERSION>\"  # what Kubean installed, e.g. \"1.35.5\"",
    );
    s.raw("  apiServer:");
    s.field(
        4,
        "dnsName",
        text(&d.api_dns_name),
        "<KUBE_APISERVER_DNS_NAME>  # where nodes join",
    );
    s.field(
        4,
        "port",
        d.api_port
            .as_ref()
            .map(|f| (f.value.to_string(), f.from.as_str())),
        "6443",
    );
    s.raw("  caBundle:");
    match &d.ca_base64 {
        Some(ca) => {
            let hash = d.ca_cert_hash.as_ref().map_or(String::new(), |h| format!("; join hash {}", h.value));
            let _ = writeln!(s.text, "    # from {}{}", v(&ca.from), v(&hash));
            // Our own encoding of the parsed certificates (adopt/discover.rs): only the base64
            // alphabet, a plain scalar.
            let _ = writeln!(s.text, "    base64: {}", ca.value);
        }
        None => s.raw("    # base64: <BASE64_CLUSTER_CA_BUNDLE>  # or file: pki/ca.crt, or kubeconfig: {path: F}"),
    }
    let networks: Vec<String> = [
        ("podSubnet", &d.pod_subnet),
        ("serviceSubnet", &d.service_subnet),
        ("clusterDNS", &d.cluster_dns),
    ]
    .iter()
    .filter_map(|(k, f)| {
        f.as_ref()
            .map(|f| format!("#   {k} {} (from {})", v(&f.value), v(&f.from)))
    })
    .collect();
    if !networks.is_empty() {
        s.raw(
            "  # The cluster's networks, for reference (the spec has no field for them; nodes take",
        );
        s.raw("  # them from the cluster when they join):");
        for line in networks {
            let _ = writeln!(s.text, "  {line}");
        }
    }
    s.raw("  kubean:");
    match &d.kubean_cluster {
        Some(f) => {
            let _ = writeln!(s.text, "    existingCluster: {}  # adopted: Kubean keeps its inventory; from {}", scalar(&f.value), v(&f.from));
        }
        None => s.raw("    # existingCluster: <KUBEAN_CLUSTER>  # Kubean's Cluster that built this one (none found): unset, apply writes Kubean's objects"),
    }
    s.field(4, "namespace", text(&d.kubean_namespace), "kubean-system");
    s.field(
        4,
        "sprayJobImage",
        text(&d.spray_job_image),
        "ghcr.io/kubean-io/spray-job:<KUBEAN_RELEASE>",
    );
    s.field(
        4,
        "networkPlugin",
        text(&d.network_plugin),
        "calico  # Kubespray's kube_network_plugin",
    );
    s.raw("    ssh:");
    s.field(6, "user", text(&d.ssh_user), "<KUBEAN_NODE_SSH_USER>");
    s.field(
        6,
        "port",
        d.ssh_port
            .as_ref()
            .map(|f| (f.value.to_string(), f.from.as_str())),
        "22",
    );
    s.field(
        6,
        "privateKeySecret",
        text(&d.ssh_secret),
        "<KUBEAN_NODE_SSH_PRIVATE_KEY_SECRET>  # a kubernetes.io/ssh-auth Secret",
    );
    if d.nodes.is_empty() {
        s.raw("    nodes: []  # none found: list the control-plane, etcd and infra nodes Kubean built");
    } else {
        s.raw("    nodes:");
        for n in &d.nodes {
            let _ = writeln!(
                s.text,
                "      - name: {}  # from {}",
                scalar(&n.name),
                v(&n.from)
            );
            let _ = writeln!(s.text, "        ip: {}", scalar(&n.ip));
            match &n.private_dns_name {
                Some(dns) => {
                    let _ = writeln!(s.text, "        privateDnsName: {}", scalar(dns));
                }
                None => s.raw("        # privateDnsName: <ip-a-b-c-d.REGION.compute.internal>  # how the AWS CCM finds the instance"),
            }
            let roles: Vec<&str> = n.roles.iter().map(|r| r.as_str()).collect();
            let _ = writeln!(s.text, "        roles: [{}]", roles.join(", "));
        }
    }
    match &d.infra_taints {
        Some(t) => {
            let list: Vec<String> = t.value.iter().map(|x| scalar(x)).collect();
            let _ = writeln!(s.text, "    infraTaints: [{}]  # from {}", list.join(", "), v(&t.from));
        }
        None => s.raw("    # infraTaints: [CriticalAddonsOnly=true:NoSchedule]  # none found on the infra nodes"),
    }
    s.raw("  aws:");
    s.field(4, "region", text(&d.region), "<AWS_REGION>");
    s.field(
        4,
        "accountID",
        d.account_id
            .as_ref()
            .map(|f| (quoted(&f.value), f.from.as_str())),
        "\"<AWS_ACCOUNT_ID>\"",
    );
    s.field(4, "vpcID", text(&d.vpc_id), "<AWS_VPC_ID>");
    for (key, found) in [
        ("subnets", &d.subnet_tag),
        ("securityGroups", &d.security_group_tag),
    ] {
        let _ = writeln!(s.text, "    {key}:");
        match found {
            Some(tag) => {
                let _ = writeln!(
                    s.text,
                    "      discoveryTag: {{key: {}, value: {}}}  # from {}",
                    scalar(&tag.value.key),
                    scalar(&tag.value.value),
                    v(&tag.from)
                );
            }
            None => {
                let _ = writeln!(
                    s.text,
                    "      discoveryTag: {{key: karpenter.sh/discovery, value: {}}}  # NOT FOUND in AWS: tag the {} with it",
                    scalar(&name_or),
                    if key == "subnets" {
                        "private subnets"
                    } else {
                        "nodes' security group"
                    }
                );
            }
        }
    }
    s.field(
        4,
        "controlPlaneSecurityGroupID",
        text(&d.control_plane_security_group),
        "<CONTROL_PLANE_SECURITY_GROUP_ID>  # must admit apiServer.port from the nodes",
    );
    let conventional = |found: &Option<Found<String>>, prefix: &str| match found {
        Some(f) => (scalar(&f.value), format!("from {}", v(&f.from))),
        None => (
            scalar(&format!("{prefix}-{name_or}")),
            "not found in IAM: the conventional name; apply creates it".to_owned(),
        ),
    };
    let (role, role_from) = conventional(&d.node_role, "KarpenterNodeRole");
    let _ = writeln!(s.text, "    nodeRole: {role}  # {role_from}");
    let (profile, profile_from) =
        conventional(&d.node_instance_profile, "KarpenterNodeInstanceProfile");
    let _ = writeln!(
        s.text,
        "    nodeInstanceProfile: {profile}  # {profile_from}"
    );
    s.raw("  karpenter:");
    s.raw("    namespace: karpenter");
    let installed = d
        .installed
        .iter()
        .find(|i| i.component == crate::versions::KARPENTER);
    match installed.and_then(|i| Some((i.version.clone()?, &i.from))) {
        Some((version, from)) => {
            let _ = writeln!(
                s.text,
                "    version: {}  # from {}",
                scalar(&version),
                v(from)
            );
        }
        None => {
            let default = crate::versions::component(crate::versions::KARPENTER)
                .default
                .clone()
                .unwrap_or_default();
            let _ = writeln!(
                s.text,
                "    version: {}  # not installed yet: the version render pins",
                scalar(&default)
            );
        }
    }
    s.raw("    credentials:");
    match &d.infra_instance_profile {
        Some(p) => {
            let _ = writeln!(
                s.text,
                "      source: instanceProfile  # the infra workers' instance profile {} (from {})",
                v(&p.value),
                v(&p.from)
            );
        }
        None => s.raw("      source: instanceProfile  # no infra instance profile found: give the infra workers one, or use staticSecret"),
    }
    match &d.isolated_vpc {
        Some(f) => {
            let _ = writeln!(s.text, "    isolatedVPC: {}  # from {}", f.value, v(&f.from));
        }
        None => s.raw("    isolatedVPC: false  # not read: true when nodes have no route to AWS's public endpoints"),
    }
    s.raw("  join:");
    s.raw("    mode: ssm  # the token stays out of userData; the controller below rotates it");
    s.raw("  controller:");
    s.raw("    image:");
    match &d.controller_image {
        Some(f) => {
            let _ = writeln!(
                s.text,
                "      repository: {}  # from {}",
                scalar(&f.value.0),
                v(&f.from)
            );
            let _ = writeln!(s.text, "      digest: {}", scalar(&f.value.1));
        }
        None => {
            s.raw(
                "      # not installed yet: the image dist/image builds, pushed to your registry",
            );
            s.raw("      # repository: <CONTROLLER_IMAGE_REPOSITORY>");
            s.raw("      # digest: <CONTROLLER_IMAGE_DIGEST>  # sha256:…, dist/out/IMAGE_DIGEST");
        }
    }
    s.raw("  gpu:  # the seeds' values, not read from the cluster: set what your GPU AMI bakes in");
    s.raw("    driverVersion: \"550.127.05\"");
    s.raw("    cudaVersion: \"12.4\"");
    s.raw("    devicePluginVersion: v0.20.0");
    pools(&mut s, d);
    s.text
}

/// The seeds' CPU and GPU pools, their limits scaled to the zones the tagged subnets span.
fn pools(s: &mut Spec, d: &Discovered) {
    let zones = d.zones.len().max(1);
    let zones_said = if d.zones.is_empty() {
        "no tagged subnet found: sized for one zone".to_owned()
    } else {
        format!(
            "{} zone(s) of the tagged subnets: {}",
            d.zones.len(),
            v(&d.zones.join(", "))
        )
    };
    s.raw("  pools:");
    s.raw("    # Seed 000, CPU pool: general workloads, spot first with on-demand fallback.");
    s.raw("    - name: workload-general");
    s.raw("      type: cpu");
    match &d.cpu_ami {
        Some(ami) => {
            let _ = writeln!(
                s.text,
                "      ami: {{id: {}}}  # from {}; any kubeadm-ready image",
                scalar(&ami.value),
                v(&ami.from)
            );
        }
        None => s.raw("      # ami: {id: <KARPENTER_CPU_WORKER_AMI_ID>}  # a kubeadm-ready image"),
    }
    s.raw("      instances:");
    s.raw("        families: [m6i, m7i]");
    s.raw("        sizes: [large, xlarge]");
    s.raw("        capacityTypes: [spot, on-demand]");
    s.raw("        arch: [amd64]");
    let _ = writeln!(
        s.text,
        "      limits: {{cpu: \"{}\", memory: {}Gi}}  # 100 vCPU per zone; {zones_said}",
        100 * zones,
        200 * zones
    );
    s.raw("      disruption:");
    s.raw("        consolidationPolicy: WhenEmptyOrUnderutilized");
    s.raw("        consolidateAfter: 5m");
    s.raw("      kubelet:");
    s.raw("        maxPods: 110");
    s.raw(
        "    # Seed 000, GPU pool: L4 inference, one GPU per node, tainted so CPU pods stay off.",
    );
    s.raw("    - name: workload-gpu-l4");
    s.raw("      type: gpu");
    s.raw("      # ami: {id: <KARPENTER_GPU_WORKER_AMI_ID>}  # kubeadm, NVIDIA driver and container runtime");
    s.raw("      instances:");
    s.raw("        families: [g6]");
    s.raw("        capacityTypes: [spot, on-demand]");
    s.raw("        arch: [amd64]");
    s.raw("      gpu: {manufacturer: nvidia, names: [l4], count: 1}");
    s.raw("      taints:");
    s.raw("        - {key: gpu, value: \"true\", effect: NoSchedule}");
    let _ = writeln!(
        s.text,
        "      limits: {{nvidia.com/gpu: \"{}\"}}  # 4 GPUs per zone; {zones_said}",
        4 * zones
    );
    s.raw("      disruption:");
    s.raw("        consolidationPolicy: WhenEmpty");
    s.raw("        consolidateAfter: 10m");
    s.raw("        budgets: [{nodes: \"1\"}]");
    s.raw("      rootVolume: {size: 200Gi, type: gp3, encrypted: true}");
    s.raw("      kubelet:");
    s.raw("        maxPods: 110");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_read_back_as_strings() {
        assert_eq!(scalar("api.lab.internal"), "api.lab.internal");
        assert_eq!(scalar("1.36"), "\"1.36\"");
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("a b"), "\"a b\"");
        assert_eq!(
            scalar("CriticalAddonsOnly=true:NoSchedule"),
            "\"CriticalAddonsOnly=true:NoSchedule\""
        );
    }
}
