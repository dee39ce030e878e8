//! Semantic checks on a structurally valid spec. Each returns (field path, message).
//!
//! These catch what would otherwise surface much later: as an apiserver rejection at
//! apply time, a node that never joins, or a pool Karpenter can never launch.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::LazyLock;

use kk_model::FieldPath;
use kk_model::quantity::Quantity;
use regex::Regex;

use crate::types::*;

type Problems = Vec<(FieldPath, String)>;

macro_rules! re {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($pattern).expect("valid regex"));
    };
}

re!(DNS_LABEL, r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$");
re!(
    DNS_SUBDOMAIN,
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
);
re!(K8S_VERSION, r"^v?1\.(\d+)\.\d+$");
re!(REGION, r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$");
re!(ACCOUNT, r"^\d{12}$");
re!(VPC_ID, r"^vpc-[0-9a-f]{8,17}$");
re!(SUBNET_ID, r"^subnet-[0-9a-f]{8,17}$");
re!(SG_ID, r"^sg-[0-9a-f]{8,17}$");
re!(AMI_ID, r"^ami-[0-9a-f]{8,17}$");
re!(AMI_ALIAS, r"^([a-z0-9]+)@(.+)$");
re!(SSM_RELEASE, r"^1\.(\d+)\.\d+-\d{8}$");
re!(IAM_NAME, r"^[\w+=,.@-]{1,64}$");
re!(TOKEN, r"^[a-z0-9]{6}\.[a-z0-9]{16}$");
re!(CA_HASH, r"^sha256:[0-9a-f]{64}$");
re!(DURATION, r"^([0-9]+(s|m|h))+$");
re!(BUDGET_NODES, r"^((100|[0-9]{1,2})%|[0-9]+)$");
re!(
    LABEL_NAME,
    r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
);
re!(
    LABEL_VALUE,
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
);
// A taint as kubelet and Kubespray's node_taints take it: a label key (optional DNS-subdomain
// prefix), an optional label value, an effect. Nothing a shell or YAML would read twice.
re!(
    INFRA_TAINT,
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9](=(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?)?:(NoSchedule|PreferNoSchedule|NoExecute)$"
);
// A POSIX login name (what Ansible's ansible_user is on the hosts).
re!(SSH_USER, r"^[a-z_][a-z0-9_-]{0,31}$");
re!(
    KMS_KEY_ARN,
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
);
re!(
    IAM_PRINCIPAL_ARN,
    r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[A-Za-z0-9_+=,.@/-]+$"
);
re!(SSM_NAME, r"^/[A-Za-z0-9_.\-/]{1,1010}$");
re!(SECRET_NAME, r"^[A-Za-z0-9/_+=.@-]{1,512}$");
re!(INSTANCE_TYPE, r"^[a-z0-9-]+\.[a-z0-9-]+$");
re!(IMAGE_TAG, r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$");

/// Kubernetes minors Karpenter v1.14 supports (its compatibility matrix).
const KUBERNETES_MINORS: std::ops::RangeInclusive<u32> = 29..=36;
const AMI_ALIAS_FAMILIES: [&str; 3] = ["al2", "al2023", "bottlerocket"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const CAPACITY_TYPES: [&str; 3] = ["spot", "on-demand", "reserved"];
const ARCHES: [&str; 2] = ["amd64", "arm64"];
const VOLUME_TYPES: [&str; 7] = ["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"];
const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

pub fn validate(cluster: &ElasticCluster) -> Problems {
    let mut p = Problems::new();
    let root = FieldPath::root();
    if cluster.api_version != API_VERSION {
        p.push((
            root.key("apiVersion"),
            format!("must be {API_VERSION:?}, got {:?}", cluster.api_version),
        ));
    }
    if cluster.kind != KIND {
        p.push((
            root.key("kind"),
            format!("must be {KIND:?}, got {:?}", cluster.kind),
        ));
    }
    if !DNS_LABEL.is_match(&cluster.metadata.name) {
        p.push((
            root.key("metadata").key("name"),
            "cluster name must be a DNS label (lowercase letters, digits, '-', at most 63)".into(),
        ));
    }
    let spec = &cluster.spec;
    let at = root.key("spec");
    version(&mut p, &at, &spec.kubernetes_version);
    kubean_covers_version(&mut p, &at, spec);
    api_server(&mut p, &at.key("apiServer"), &spec.api_server);
    ca_bundle(&mut p, &at.key("caBundle"), &spec.ca_bundle);
    kubean(&mut p, &at.key("kubean"), &spec.kubean, &spec.aws.region);
    aws(&mut p, &at.key("aws"), &spec.aws);
    join(&mut p, &at.key("join"), &spec.join);
    crate::iam::authenticator(&mut p, &at, cluster);
    gpu_stack(&mut p, &at, spec);
    pools(&mut p, &at.key("pools"), &spec.pools);
    worker_kubelet_skew(&mut p, &at, spec);
    for (path, access) in [
        (at.key("access"), &spec.access),
        (
            at.key("kubean").key("managementCluster"),
            &spec.kubean.management_cluster,
        ),
    ] {
        if let Some(a) = access
            && a.kubeconfig.is_none()
            && a.context.is_none()
        {
            p.push((path, "set kubeconfig, context or both".into()));
        }
    }

    p
}

fn version(p: &mut Problems, at: &FieldPath, text: &str) {
    let at = at.key("kubernetesVersion");
    match K8S_VERSION.captures(text) {
        None => p.push((
            at,
            format!("{text:?} is not a Kubernetes version like 1.35.5"),
        )),
        Some(caps) => {
            let minor: u32 = caps[1].parse().unwrap_or(0);
            if !KUBERNETES_MINORS.contains(&minor) {
                p.push((
                    at,
                    format!(
                        "Kubernetes 1.{minor} is outside what Karpenter v1.14 supports (1.{}–1.{})",
                        KUBERNETES_MINORS.start(),
                        KUBERNETES_MINORS.end()
                    ),
                ));
            }
        }
    }
}

/// `1.<minor>.<patch>` of a spec version, when it parses.
fn minor_patch(text: &str) -> Option<(u32, u32)> {
    K8S_VERSION.captures(text)?;
    let mut parts = text.trim_start_matches('v').split('.').skip(1);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The Kubean release pinned by the spray-job image must install `kubernetesVersion`.
fn kubean_covers_version(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    use crate::kubean_support as support;
    let image = &spec.kubean.spray_job_image;
    let Some(tag) = support::image_tag(image) else {
        p.push((
            at.key("kubean").key("sprayJobImage"),
            "name the Kubean release in the image tag (e.g. ghcr.io/kubean-io/spray-job:v0.37.0): \
             the Kubernetes versions it installs are checked against it"
                .into(),
        ));
        return;
    };
    let Some(release) = support::release(tag) else {
        let all = support::releases();
        p.push((
            at.key("kubean").key("sprayJobImage"),
            format!(
                "Kubean {tag} is not in the support matrix ({}–{}): pin a listed release, whose \
                 Kubernetes range is known",
                all.first().map_or("", |r| r.release.as_str()),
                all.last().map_or("", |r| r.release.as_str()),
            ),
        ));
        return;
    };
    let Some((minor, patch)) = minor_patch(&spec.kubernetes_version) else {
        return;
    };
    if release.covers(minor, patch) {
        return;
    }
    let hint = match support::newest_covering(minor, patch) {
        Some(newer) => format!(
            "; Kubean {} ({}) installs {}",
            newer.release,
            newer.range(),
            spec.kubernetes_version.trim_start_matches('v')
        ),
        None => format!(
            "; no Kubean release of the matrix ({}–{}) installs it",
            support::releases()
                .first()
                .map_or("", |r| r.release.as_str()),
            support::releases()
                .last()
                .map_or("", |r| r.release.as_str()),
        ),
    };
    p.push((
        at.key("kubernetesVersion"),
        format!(
            "Kubean {tag} (kubean.sprayJobImage) installs Kubernetes {} only: Kubespray has no \
             download checksums for 1.{minor}.{patch}{hint}",
            release.range()
        ),
    ));
}

/// A worker's kubelet may be up to three minors older than the control plane, never newer
/// (kubernetes.io/releases/version-skew-policy, since 1.28). Only an `ssmRelease` AMI names its
/// kubelet's version; an `id` image is the operator's own build.
fn worker_kubelet_skew(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let Some((control_plane, _)) = minor_patch(&spec.kubernetes_version) else {
        return;
    };
    for (i, pool) in spec.pools.iter().enumerate() {
        let Some(release) = &pool.ami.ssm_release else {
            continue;
        };
        let Some(caps) = SSM_RELEASE.captures(release) else {
            continue;
        };
        let Ok(kubelet) = caps[1].parse::<u32>() else {
            continue;
        };
        let problem = if kubelet > control_plane {
            "newer than the control plane (a kubelet may never be newer than the API server)"
        } else if control_plane - kubelet > 3 {
            "more than three minors older than the control plane (the skew policy allows n-3)"
        } else {
            continue;
        };
        p.push((
            at.key("pools").index(i).key("ami").key("ssmRelease"),
            format!(
                "the AMI's kubelet is 1.{kubelet}, {problem}: kubernetesVersion is {}",
                spec.kubernetes_version
            ),
        ));
    }
}

fn api_server(p: &mut Problems, at: &FieldPath, api: &ApiServer) {
    let name = api.dns_name.as_str();
    if name.parse::<IpAddr>().is_err() && !(DNS_SUBDOMAIN.is_match(name) && name.len() <= 253) {
        p.push((at.key("dnsName"), format!("{name:?} is not a DNS name")));
    }
    if api.port == 0 {
        p.push((at.key("port"), "port must be 1–65535".into()));
    }
    if let Some(address) = &api.load_balancer_address
        && address.parse::<IpAddr>().is_err()
    {
        p.push((
            at.key("loadBalancerAddress"),
            format!("{address:?} is not an IP address"),
        ));
    }
}

fn ca_bundle(p: &mut Problems, at: &FieldPath, ca: &CaBundleSource) {
    let set = [
        ca.file.is_some(),
        ca.base64.is_some(),
        ca.kubeconfig.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    // None set is stage 1: the CA does not exist until Kubean has built the control plane.
    if set > 1 {
        p.push((
            at.clone(),
            format!("set one of file, base64, kubeconfig (found {set})"),
        ));
    }
    if let Some(b64) = &ca.base64 {
        use base64::Engine;
        match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
            Ok(bytes)
                if String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => p.push((
                at.key("base64"),
                "decodes, but not to a PEM certificate".into(),
            )),
            Err(e) => p.push((at.key("base64"), format!("not valid base64: {e}"))),
        }
    }
}

fn kubean(p: &mut Problems, at: &FieldPath, k: &Kubean, region: &str) {
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

fn discovery(p: &mut Problems, at: &FieldPath, d: &Discovery, id_re: &Regex, what: &str) {
    if d.ids.is_empty() == d.discovery_tag.is_none() {
        p.push((at.clone(), "set exactly one of ids, discoveryTag".into()));
    }
    for (i, id) in d.ids.iter().enumerate() {
        if !id_re.is_match(id) {
            p.push((at.key("ids").index(i), format!("{id:?} is not a {what} ID")));
        }
    }
    if let Some(tag) = &d.discovery_tag
        && (tag.key.is_empty() || tag.value.is_empty())
    {
        p.push((
            at.key("discoveryTag"),
            "key and value must not be empty".into(),
        ));
    }
}

fn aws(p: &mut Problems, at: &FieldPath, a: &Aws) {
    if !REGION.is_match(&a.region) {
        p.push((
            at.key("region"),
            format!("{:?} is not an AWS region", a.region),
        ));
    }
    if !ACCOUNT.is_match(&a.account_id) {
        p.push((at.key("accountID"), "must be 12 digits".into()));
    }
    if !["aws", "aws-cn", "aws-us-gov"].contains(&a.partition.as_str()) {
        p.push((
            at.key("partition"),
            "must be aws, aws-cn or aws-us-gov".into(),
        ));
    }
    if !VPC_ID.is_match(&a.vpc_id) {
        p.push((at.key("vpcID"), format!("{:?} is not a VPC ID", a.vpc_id)));
    }
    discovery(p, &at.key("subnets"), &a.subnets, &SUBNET_ID, "subnet");
    discovery(
        p,
        &at.key("securityGroups"),
        &a.security_groups,
        &SG_ID,
        "security group",
    );
    if !SG_ID.is_match(&a.control_plane_security_group_id) {
        p.push((
            at.key("controlPlaneSecurityGroupID"),
            format!(
                "{:?} is not a security group ID",
                a.control_plane_security_group_id
            ),
        ));
    }
    if !IAM_NAME.is_match(&a.node_role) || a.node_role.starts_with("arn:") {
        p.push((
            at.key("nodeRole"),
            "must be an IAM role name (not an ARN)".into(),
        ));
    }
    if !IAM_NAME.is_match(&a.node_instance_profile) || a.node_instance_profile.starts_with("arn:") {
        p.push((
            at.key("nodeInstanceProfile"),
            "must be an instance profile name (not an ARN)".into(),
        ));
    }
}

fn join_kms(p: &mut Problems, at: &FieldPath, j: &Join) {
    let Some(kms) = &j.kms else {
        return;
    };
    let at = at.key("kms");
    if j.mode == JoinMode::Static {
        p.push((at, "static mode uses no store to encrypt".into()));
        return;
    }
    if !KMS_KEY_ARN.is_match(&kms.key_arn) {
        p.push((
            at.key("keyArn"),
            format!(
                "{:?} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<uuid>)",
                kms.key_arn
            ),
        ));
    }
    if kms.writer_arns.is_empty() {
        p.push((
            at.key("writerArns"),
            "name the rotator's IAM role or user: nobody else may write the store".into(),
        ));
    }
    for (i, arn) in kms.writer_arns.iter().enumerate() {
        if !IAM_PRINCIPAL_ARN.is_match(arn) {
            p.push((
                at.key("writerArns").index(i),
                format!("{arn:?} is not an IAM role or user ARN"),
            ));
        }
    }
}

fn join(p: &mut Problems, at: &FieldPath, j: &Join) {
    join_kms(p, at, j);
    match j.mode {
        JoinMode::Static => {
            match &j.token {
                None => p.push((
                    at.key("token"),
                    "static mode needs a bootstrap token".into(),
                )),
                Some(t) if !TOKEN.is_match(t) => p.push((
                    at.key("token"),
                    "a bootstrap token is [a-z0-9]{6}.[a-z0-9]{16}".into(),
                )),
                Some(_) => {}
            }
            if j.store_name.is_some() {
                p.push((at.key("storeName"), "static mode uses no store".into()));
            }
        }
        JoinMode::Ssm | JoinMode::SecretsManager => {
            if j.token.is_some() {
                p.push((
                    at.key("token"),
                    "the token lives in the store, not in the spec (set it only in static mode)"
                        .into(),
                ));
            }
            if let Some(name) = &j.store_name {
                let (ok, rule) = if j.mode == JoinMode::Ssm {
                    let lower = name.to_ascii_lowercase();
                    (
                        SSM_NAME.is_match(name)
                            && !lower.starts_with("/aws")
                            && !lower.starts_with("/ssm"),
                        "an SSM parameter path like /kubean-karpenter/demo/join (not under /aws or /ssm)",
                    )
                } else {
                    (
                        SECRET_NAME.is_match(name),
                        "a Secrets Manager name ([A-Za-z0-9/_+=.@-], ≤ 512)",
                    )
                };
                if !ok {
                    p.push((at.key("storeName"), format!("must be {rule}")));
                }
            }
        }
    }
    if let Some(hash) = &j.ca_cert_hash
        && !CA_HASH.is_match(hash)
    {
        p.push((
            at.key("caCertHash"),
            "must be sha256: followed by 64 lowercase hex digits".into(),
        ));
    }
}

fn gpu_stack(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let has_gpu_pool = spec
        .pools
        .iter()
        .any(|pool| pool.pool_type == PoolType::Gpu);
    match &spec.gpu {
        None if has_gpu_pool => p.push((
            at.key("gpu"),
            "GPU pools need driverVersion, cudaVersion and devicePluginVersion".into(),
        )),
        Some(gpu) => {
            let at = at.key("gpu");
            if !IMAGE_TAG.is_match(&gpu.device_plugin_version) {
                p.push((
                    at.key("devicePluginVersion"),
                    "must be an image tag like v0.17.0".into(),
                ));
            }
            for (field, value) in [
                ("driverVersion", &gpu.driver_version),
                ("cudaVersion", &gpu.cuda_version),
            ] {
                if value.is_empty() || !value.chars().all(|c| c.is_ascii_digit() || c == '.') {
                    p.push((
                        at.key(field),
                        format!("{value:?} is not a version like 12.4"),
                    ));
                }
            }
        }
        None => {}
    }
}

fn pools(p: &mut Problems, at: &FieldPath, pools: &[Pool]) {
    if pools.is_empty() {
        p.push((at.clone(), "at least one pool is needed".into()));
    }
    let mut names = BTreeMap::new();
    let mut classes: BTreeMap<String, (usize, &Pool)> = BTreeMap::new();
    // One device plugin serves every GPU pool with one time-slicing config, so a pool
    // asking for other sharing would silently get the first pool's.
    let mut sharing: Option<(usize, i64)> = None;
    for (i, pool) in pools.iter().enumerate() {
        let Some(gpu) = pool
            .gpu
            .as_ref()
            .filter(|_| pool.pool_type == PoolType::Gpu)
        else {
            continue;
        };
        match sharing {
            None => sharing = Some((i, gpu.sharing_replicas)),
            Some((first, replicas)) if replicas != gpu.sharing_replicas => p.push((
                at.index(i).key("gpu").key("sharingReplicas"),
                format!(
                    "{} differs from pools[{first}] ({replicas}): every GPU pool shares one device plugin config",
                    gpu.sharing_replicas
                ),
            )),
            Some(_) => {}
        }
    }
    for (i, pool) in pools.iter().enumerate() {
        let at = at.index(i);
        if let Some(first) = names.insert(pool.name.as_str(), i) {
            p.push((
                at.key("name"),
                format!("duplicate pool name {:?} (also pools[{first}])", pool.name),
            ));
        }
        pool_fields(p, &at, pool);
        let class = node_class_name(pool).to_owned();
        match classes.get(&class) {
            Some((first, other)) if !same_node_class(other, pool) => p.push((
                at.key("nodeClass"),
                format!(
                    "shares EC2NodeClass {class:?} with pools[{first}] but differs in type, ami, joinMethod, rootVolume or kubelet"
                ),
            )),
            Some(_) => {}
            None => {
                classes.insert(class, (i, pool));
            }
        }
    }
}

/// The EC2NodeClass a pool uses.
pub fn node_class_name(pool: &Pool) -> &str {
    pool.node_class.as_deref().unwrap_or(&pool.name)
}

fn same_node_class(a: &Pool, b: &Pool) -> bool {
    a.pool_type == b.pool_type
        && a.ami == b.ami
        && a.join_method == b.join_method
        && a.root_volume == b.root_volume
        && a.kubelet == b.kubelet
        && a.instances.arch == b.instances.arch
        && a.taints == b.taints
        && a.labels == b.labels
}

fn pool_fields(p: &mut Problems, at: &FieldPath, pool: &Pool) {
    if !(DNS_SUBDOMAIN.is_match(&pool.name) && pool.name.len() <= 63) {
        p.push((
            at.key("name"),
            format!("{:?} is not a valid NodePool name", pool.name),
        ));
    }
    if let Some(class) = &pool.node_class
        && !(DNS_SUBDOMAIN.is_match(class) && class.len() <= 63)
    {
        p.push((
            at.key("nodeClass"),
            format!("{class:?} is not a valid EC2NodeClass name"),
        ));
    }
    ami(p, &at.key("ami"), &pool.ami, pool);
    instances(p, &at.key("instances"), &pool.instances);
    match (pool.pool_type, &pool.gpu) {
        (PoolType::Gpu, None) => p.push((
            at.key("gpu"),
            "a GPU pool needs gpu.count (GPUs per node) so limits and the device plugin line up"
                .into(),
        )),
        (PoolType::Gpu, Some(gpu)) => {
            let at = at.key("gpu");
            match gpu.count {
                None => p.push((
                    at.key("count"),
                    "a GPU pool needs the GPU count per node".into(),
                )),
                Some(c) if c < 1 => p.push((at.key("count"), "must be at least 1".into())),
                _ => {}
            }
            if gpu.sharing_replicas < 1 {
                p.push((at.key("sharingReplicas"), "must be at least 1".into()));
            }
            if gpu.manufacturer != "nvidia" {
                p.push((
                    at.key("manufacturer"),
                    "only nvidia is supported (the device plugin rendered is NVIDIA's)".into(),
                ));
            }
        }
        (PoolType::Cpu, Some(_)) => p.push((
            at.key("gpu"),
            "a cpu pool cannot have GPU settings; use type: gpu".into(),
        )),
        (PoolType::Cpu, None) => {}
    }
    for (i, taint) in pool.taints.iter().enumerate() {
        let at = at.key("taints").index(i);
        if !is_qualified_name(&taint.key) {
            p.push((
                at.key("key"),
                format!("{:?} is not a valid taint key", taint.key),
            ));
        }
        if taint.key.starts_with("karpenter.sh/") {
            p.push((
                at.key("key"),
                "karpenter.sh/ taints are Karpenter's own".into(),
            ));
        }
        if let Some(v) = &taint.value
            && !LABEL_VALUE.is_match(v)
        {
            p.push((at.key("value"), format!("{v:?} is not a valid taint value")));
        }
        if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
            p.push((
                at.key("effect"),
                format!(
                    "{:?} must be NoSchedule, PreferNoSchedule or NoExecute",
                    taint.effect
                ),
            ));
        }
    }
    for key in pool.labels.keys() {
        let at = at.key("labels").key(key);
        if !is_qualified_name(key) {
            p.push((at.clone(), format!("{key:?} is not a valid label key")));
        }
        if let Some(domain) = kk_karpenter::labels::reserved_domain(key) {
            p.push((
                at.clone(),
                format!("labels under {domain} cannot be set by a pool (reserved for Kubernetes, Karpenter or the node's role)"),
            ));
        }
        if !LABEL_VALUE.is_match(&pool.labels[key]) {
            p.push((
                at,
                format!("{:?} is not a valid label value", pool.labels[key]),
            ));
        }
    }
    for (resource, value) in &pool.limits {
        let at = at.key("limits").key(resource);
        match Quantity::parse(&value.as_text()) {
            Err(e) => p.push((at, e.to_string())),
            Ok(q) if q.is_negative() => {
                p.push((at, format!("limit {} is negative", value.as_text())))
            }
            Ok(_) => {}
        }
    }
    if let Some(d) = &pool.disruption {
        let at = at.key("disruption");
        if let Some(policy) = &d.consolidation_policy
            && !["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"].contains(&policy.as_str())
        {
            p.push((
                at.key("consolidationPolicy"),
                format!("{policy:?} must be WhenEmpty, WhenEmptyOrUnderutilized or Balanced"),
            ));
        }
        if let Some(after) = &d.consolidate_after
            && after != "Never"
            && !DURATION.is_match(after)
        {
            p.push((
                at.key("consolidateAfter"),
                format!("{after:?} is not a duration like 30s, 5m, 2h or Never"),
            ));
        }
        for (i, b) in d.budgets.iter().enumerate() {
            let at = at.key("budgets").index(i);
            if !BUDGET_NODES.is_match(&b.nodes) {
                p.push((
                    at.key("nodes"),
                    format!("{:?} must be a count or a percentage", b.nodes),
                ));
            }
            if b.schedule.is_some() != b.duration.is_some() {
                p.push((at.clone(), "schedule and duration go together".into()));
            }
            if let Some(duration) = &b.duration
                && !DURATION.is_match(duration)
            {
                p.push((
                    at.key("duration"),
                    format!("{duration:?} is not a duration"),
                ));
            }
            for (j, reason) in b.reasons.iter().enumerate() {
                if !["Underutilized", "Empty", "Drifted"].contains(&reason.as_str()) {
                    p.push((
                        at.key("reasons").index(j),
                        format!("{reason:?} must be Underutilized, Empty or Drifted"),
                    ));
                }
            }
        }
    }
    if let Some(expire) = &pool.expire_after
        && expire != "Never"
        && !DURATION.is_match(expire)
    {
        p.push((
            at.key("expireAfter"),
            format!("{expire:?} is not a duration like 720h or Never"),
        ));
    }
    if let Some(v) = &pool.root_volume {
        root_volume(p, &at.key("rootVolume"), v);
    }
    if let Some(k) = &pool.kubelet {
        let at = at.key("kubelet");
        if let Some(max) = k.max_pods
            && !(1..=1024).contains(&max)
        {
            p.push((at.key("maxPods"), "must be between 1 and 1024".into()));
        }
        for (field, map) in [
            ("kubeReserved", &k.kube_reserved),
            ("systemReserved", &k.system_reserved),
        ] {
            for (resource, value) in map {
                let at = at.key(field).key(resource);
                if !RESERVED_RESOURCES.contains(&resource.as_str()) {
                    p.push((
                        at.clone(),
                        "only cpu, memory, ephemeral-storage and pid can be reserved".into(),
                    ));
                }
                match Quantity::parse(value) {
                    Err(e) => p.push((at, e.to_string())),
                    Ok(q) if q.is_negative() => p.push((at, "must not be negative".into())),
                    Ok(_) => {}
                }
            }
        }
    }
    if let Some(w) = pool.weight
        && !(1..=100).contains(&w)
    {
        p.push((at.key("weight"), "must be between 1 and 100".into()));
    }
}

fn ami(p: &mut Problems, at: &FieldPath, ami: &Ami, pool: &Pool) {
    let set = [
        ami.id.is_some(),
        ami.alias.is_some(),
        ami.ssm_release.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set != 1 {
        p.push((
            at.clone(),
            format!("set exactly one of id, alias, ssmRelease (found {set})"),
        ));
    }
    if let Some(id) = &ami.id
        && !AMI_ID.is_match(id)
    {
        p.push((
            at.key("id"),
            format!("{id:?} is not an AMI ID like ami-0123456789abcdef0"),
        ));
    }
    if let Some(alias) = &ami.alias {
        match AMI_ALIAS.captures(alias) {
            None => p.push((at.key("alias"), format!("{alias:?} is not family@version"))),
            Some(c) if !AMI_ALIAS_FAMILIES.contains(&&c[1]) => p.push((
                at.key("alias"),
                format!(
                    "unknown AMI family {:?} (one of al2, al2023, bottlerocket)",
                    &c[1]
                ),
            )),
            Some(c) if &c[2] != "latest" && !c[2].starts_with('v') => p.push((
                at.key("alias"),
                format!(
                    "version {:?} must be latest or v<date> like v20260827",
                    &c[2]
                ),
            )),
            Some(_) => {}
        }
    }
    crate::iam::join_method(p, at, ami, pool);
    if let Some(release) = &ami.ssm_release {
        if !SSM_RELEASE.is_match(release) {
            p.push((
                at.key("ssmRelease"),
                format!("{release:?} is not an EKS AMI release like 1.36.3-20260827"),
            ));
        }
        if pool.instances.arch.len() != 1 {
            p.push((
                at.key("ssmRelease"),
                "an SSM release names one architecture: set instances.arch to one value".into(),
            ));
        }
    }
}

fn instances(p: &mut Problems, at: &FieldPath, inst: &Instances) {
    if inst.families.is_empty() && inst.types.is_empty() && inst.sizes.is_empty() {
        p.push((
            at.clone(),
            "no instance constraints: set families, sizes or types (an open pool may launch anything, GPU and metal included)".into(),
        ));
    }
    for (i, t) in inst.types.iter().enumerate() {
        if !INSTANCE_TYPE.is_match(t) {
            p.push((
                at.key("types").index(i),
                format!("{t:?} is not an instance type like m6i.large"),
            ));
        } else if !inst.families.is_empty() {
            let family = t.split('.').next().unwrap_or_default();
            if !inst.families.iter().any(|f| f == family) {
                p.push((
                    at.key("types").index(i),
                    format!(
                        "{t:?} is not in families {:?}: the requirements would exclude it",
                        inst.families
                    ),
                ));
            }
        }
    }
    for (field, list) in [("families", &inst.families), ("sizes", &inst.sizes)] {
        for (i, v) in list.iter().enumerate() {
            if v.is_empty()
                || !v
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                p.push((
                    at.key(field).index(i),
                    format!("{v:?} is not a valid value"),
                ));
            }
        }
    }
    if inst.capacity_types.is_empty() {
        p.push((at.key("capacityTypes"), "at least one capacity type".into()));
    }
    for (i, c) in inst.capacity_types.iter().enumerate() {
        if !CAPACITY_TYPES.contains(&c.as_str()) {
            p.push((
                at.key("capacityTypes").index(i),
                format!("{c:?} must be spot, on-demand or reserved"),
            ));
        }
    }
    if inst.arch.is_empty() {
        p.push((at.key("arch"), "at least one architecture".into()));
    }
    for (i, a) in inst.arch.iter().enumerate() {
        if !ARCHES.contains(&a.as_str()) {
            p.push((
                at.key("arch").index(i),
                format!("{a:?} must be amd64 or arm64"),
            ));
        }
    }
    if let Some(m) = inst.min_values
        && !(1..=50).contains(&m)
    {
        p.push((at.key("minValues"), "must be between 1 and 50".into()));
    }
}

fn root_volume(p: &mut Problems, at: &FieldPath, v: &RootVolume) {
    match Quantity::parse(&v.size) {
        Ok(q) if q.milli > 0 => {}
        Ok(_) => p.push((at.key("size"), "must be positive".into())),
        Err(e) => p.push((at.key("size"), e.to_string())),
    }
    if !VOLUME_TYPES.contains(&v.volume_type.as_str()) {
        p.push((
            at.key("type"),
            format!("{:?} is not an EBS volume type", v.volume_type),
        ));
    }
    if v.iops.is_some() && !["gp3", "io1", "io2"].contains(&v.volume_type.as_str()) {
        p.push((
            at.key("iops"),
            "iops applies to gp3, io1 and io2 only".into(),
        ));
    }
    if let Some(t) = v.throughput {
        if v.volume_type != "gp3" {
            p.push((
                at.key("throughput"),
                "throughput applies to gp3 only".into(),
            ));
        } else if !(125..=2000).contains(&t) {
            p.push((
                at.key("throughput"),
                "gp3 throughput is 125–2000 MiB/s".into(),
            ));
        }
    }
    if let Some(iops) = v.iops
        && !(100..=256_000).contains(&iops)
    {
        p.push((at.key("iops"), "iops must be 100–256000".into()));
    }
    if !v.device_name.starts_with("/dev/") {
        p.push((
            at.key("deviceName"),
            "must be a device path like /dev/xvda".into(),
        ));
    }
}

/// `prefix/name` with a DNS-subdomain prefix, as Kubernetes label keys are.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    LABEL_NAME.is_match(name) && prefix.is_none_or(|p| p.len() <= 253 && DNS_SUBDOMAIN.is_match(p))
}
