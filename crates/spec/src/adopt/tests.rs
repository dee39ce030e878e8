//! A Kubean-built cluster as observed (fixture), the spec written from it, and `--check`.

use std::collections::BTreeMap;

use super::*;
use crate::parse_spec;

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn ca_base64() -> String {
    // The example spec's CA: a real certificate, so the join hash is computed.
    let example = crate::EXAMPLE;
    let line = example
        .lines()
        .find(|l| l.trim_start().starts_with("base64: "))
        .unwrap();
    line.trim_start()
        .trim_start_matches("base64: ")
        .trim()
        .to_owned()
}

fn observed() -> Observed {
    let instance =
        |node: &str, id: &str, ip: &str, groups: &[&str], profile: Option<&str>| ObservedInstance {
            node: node.into(),
            found_by: "InternalIP".into(),
            id: id.into(),
            owner_id: Some("111122223333".into()),
            private_ip: Some(ip.into()),
            private_dns_name: Some(format!("ip-{}.ec2.internal", ip.replace('.', "-"))),
            vpc_id: Some("vpc-0a1b2c3d4e5f60718".into()),
            subnet_id: Some("subnet-a".into()),
            zone: Some("us-east-1a".into()),
            security_group_ids: groups.iter().map(|g| (*g).to_owned()).collect(),
            instance_profile: profile.map(str::to_owned),
            image_id: Some("ami-0c0ffee0c0ffee001".into()),
            tags: tags(&[("kubernetes.io/cluster/demo", "owned")]),
        };
    Observed {
        kubeadm_cluster_configuration: Some(
            "kind: ClusterConfiguration\nclusterName: cluster.local\ncontrolPlaneEndpoint: api.demo.internal:6443\n\
             kubernetesVersion: v1.35.5\nnetworking: {podSubnet: 10.233.64.0/18, serviceSubnet: 10.233.0.0/18}\n"
                .into(),
        ),
        kubelet_configuration: None,
        cluster_info_kubeconfig: Some(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n    server: https://api.demo.internal:6443\n    certificate-authority-data: {}\n",
            ca_base64()
        )),
        ccm_cloud_config: None,
        nodes: vec![ObservedNode {
            name: "ip-10-0-1-10.ec2.internal".into(),
            internal_ip: Some("10.0.1.10".into()),
            kubelet_version: Some("v1.35.5".into()),
            ..Default::default()
        }],
        kubean: Some(ObservedKubean {
            namespace: "kubean-system".into(),
            cluster: "demo".into(),
            hosts: Some((
                "demo-hosts-conf".into(),
                "all:\n  vars: {ansible_user: ec2-user, ansible_port: 22}\n  hosts:\n    \
                 cp-1: {ip: 10.0.1.10, kube_override_hostname: ip-10-0-1-10.ec2.internal}\n    \
                 infra-1: {ip: 10.0.2.20, node_labels: {node-role.kubernetes.io/infra: ''}, node_taints: ['CriticalAddonsOnly=true:NoSchedule']}\n  \
                 children:\n    kube_control_plane: {hosts: {cp-1: null}}\n    etcd: {hosts: {cp-1: null}}\n    kube_node: {hosts: {infra-1: null}}\n"
                    .into(),
            )),
            vars: Some(("demo-vars-conf".into(), "kube_version: 1.35.5\nkube_network_plugin: calico\n".into())),
            ssh_secret: Some("demo-ssh-key".into()),
            operation_image: Some(("demo-install-ops".into(), "ghcr.io/kubean-io/spray-job:v0.37.0".into())),
        }),
        workloads: vec![],
        aws: Some(ObservedAws {
            region: "us-east-1".into(),
            region_from: "the Nodes' topology.kubernetes.io/region".into(),
            instances: vec![
                instance("cp-1", "i-cp", "10.0.1.10", &["sg-0123456789abcdef0", "sg-0fedcba9876543210"], Some("kubean-nodes")),
                instance("infra-1", "i-infra", "10.0.2.20", &["sg-0fedcba9876543210"], Some("kubean-nodes")),
            ],
            subnets: vec![
                ObservedSubnet { id: "subnet-a".into(), zone: "us-east-1a".into(), tags: tags(&[("karpenter.sh/discovery", "demo")]) },
                ObservedSubnet { id: "subnet-b".into(), zone: "us-east-1b".into(), tags: tags(&[("karpenter.sh/discovery", "demo")]) },
                ObservedSubnet { id: "subnet-public".into(), zone: "us-east-1a".into(), tags: tags(&[]) },
            ],
            security_groups: vec![
                ObservedGroup { id: "sg-0123456789abcdef0".into(), name: "demo-control-plane".into(), tags: tags(&[]) },
                ObservedGroup { id: "sg-0fedcba9876543210".into(), name: "demo-nodes".into(), tags: tags(&[("karpenter.sh/discovery", "demo")]) },
            ],
            role_names: vec!["KarpenterNodeRole-demo".into()],
            instance_profiles: vec![("kubean-nodes".into(), vec!["kubean-nodes".into()])],
            vpc_endpoint_services: vec![],
        }),
        unreadable: vec![],
    }
}

/// The two fields no cluster can tell before kubean-karpenter runs there.
fn fill_the_documented_placeholders(text: &str) -> String {
    text.replace(
        "      # ami: {id: <KARPENTER_GPU_WORKER_AMI_ID>}",
        "      ami: {id: ami-0c0ffee0c0ffee002}\n      #",
    )
    .replace("      # repository: <CONTROLLER_IMAGE_REPOSITORY>", "      repository: ghcr.io/kubean-karpenter/kubean-karpenter")
    .replace(
        "      # digest: <CONTROLLER_IMAGE_DIGEST>",
        "      digest: sha256:0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0\n      #",
    )
}

#[test]
fn a_kubean_cluster_becomes_a_spec_that_says_where_each_value_came_from() {
    let d = discover(&observed());
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    let text = write_spec(&d);
    insta::assert_snapshot!(text);
    // As written, the two unreadable fields keep it from validating, each at its field.
    let errors = parse_spec(&text, "s.yaml").unwrap_err();
    assert!(
        errors.iter().any(|e| e.field.contains("pools[1]")),
        "{errors:?}"
    );
    let filled = fill_the_documented_placeholders(&text);
    let loaded = parse_spec(&filled, "s.yaml").unwrap_or_else(|e| panic!("{e:?}\n{filled}"));
    let s = &loaded.spec.spec;
    assert_eq!(loaded.spec.metadata.name, "demo");
    assert_eq!(s.kubernetes_version, "1.35.5");
    assert_eq!(s.kubean.nodes.len(), 2);
    assert_eq!(
        s.kubean.nodes[1].private_dns_name.as_deref(),
        Some("ip-10-0-2-20.ec2.internal")
    );
    assert_eq!(
        s.aws.control_plane_security_group_id,
        "sg-0123456789abcdef0"
    );
    assert_eq!(
        s.kubean.infra_taints,
        ["CriticalAddonsOnly=true:NoSchedule"]
    );
    // Discovery agrees with its own spec.
    assert!(compare(&loaded, &observed(), &d, None).is_empty());
}

#[test]
fn check_locates_a_changed_version_and_a_changed_subnet_tag() {
    let d = discover(&observed());
    let filled = fill_the_documented_placeholders(&write_spec(&d));
    let spec = parse_spec(&filled, "s.yaml").unwrap();
    let mut now = observed();
    now.kubeadm_cluster_configuration = now
        .kubeadm_cluster_configuration
        .map(|t| t.replace("v1.35.5", "v1.36.3"));
    for subnet in &mut now.aws.as_mut().unwrap().subnets {
        subnet
            .tags
            .insert("karpenter.sh/discovery".into(), "other".into());
    }
    let findings = compare(&spec, &now, &discover(&now), None);
    let fields: Vec<&str> = findings.iter().map(|e| e.field.as_str()).collect();
    assert!(fields.contains(&"spec.kubernetesVersion"), "{findings:?}");
    assert!(
        fields.contains(&"spec.aws.subnets.discoveryTag"),
        "{findings:?}"
    );
    let version = findings
        .iter()
        .find(|e| e.field == "spec.kubernetesVersion")
        .unwrap();
    let line = filled
        .lines()
        .position(|l| l.trim_start().starts_with("kubernetesVersion:"))
        .unwrap()
        + 1;
    assert_eq!(version.pos.map(|p| p.line), Some(line));
    assert!(version.message.contains("1.36.3"), "{}", version.message);
}

#[test]
fn sources_that_disagree_on_the_name_and_a_half_configured_account_are_findings() {
    let mut o = observed();
    o.ccm_cloud_config = Some((
        "kube-system/cloud-config".into(),
        "[Global]\nKubernetesClusterID = prod\n".into(),
    ));
    let aws = o.aws.as_mut().unwrap();
    for subnet in &mut aws.subnets {
        subnet.tags.clear();
    }
    aws.security_groups[1].tags.clear();
    o.unreadable.push("iam:ListRoles (AccessDenied)".into());
    o.workloads.push(ObservedWorkload {
        kind: "Deployment".into(),
        namespace: "karpenter".into(),
        name: "karpenter".into(),
        images: vec!["public.ecr.aws/karpenter/controller:1.14.1@sha256:ab".into()],
        env: vec![("CLUSTER_NAME".into(), "prod".into())],
        labels: BTreeMap::new(),
    });
    let d = discover(&o);
    assert_eq!(d.cluster_name.as_ref().unwrap().value, "prod");
    assert!(
        d.cluster_name
            .as_ref()
            .unwrap()
            .from
            .contains("CLUSTER_NAME")
    );
    assert_eq!(d.installed.len(), 1);
    assert_eq!(d.installed[0].version.as_deref(), Some("1.14.1"));
    let said = d.findings.join("\n");
    assert!(said.contains("disagrees with \"demo\""), "{said}");
    assert!(
        said.contains("no subnet of vpc-0a1b2c3d4e5f60718 carries karpenter.sh/discovery=prod"),
        "{said}"
    );
    assert!(said.contains("no security group"), "{said}");
    assert!(said.contains("could not read iam:ListRoles"), "{said}");
    let text = write_spec(&d);
    assert!(text.contains("NOT FOUND in AWS"), "{text}");
    assert!(
        text.contains("version: 1.14.1  # from Deployment karpenter/karpenter"),
        "{text}"
    );
    assert!(
        text.contains("#   - karpenter 1.14.1 (Deployment karpenter/karpenter"),
        "{text}"
    );
}

#[test]
fn without_kubean_the_nodes_come_from_the_cluster_and_without_aws_nothing_is_invented() {
    let mut o = observed();
    o.kubean = None;
    o.aws = None;
    o.nodes[0].labels.insert(
        "node-role.kubernetes.io/control-plane".into(),
        String::new(),
    );
    let d = discover(&o);
    assert_eq!(d.nodes.len(), 1);
    assert_eq!(d.nodes[0].roles, [NodeRole::ControlPlane, NodeRole::Etcd]);
    assert_eq!(
        d.nodes[0].private_dns_name.as_deref(),
        Some("ip-10-0-1-10.ec2.internal")
    );
    assert!(d.vpc_id.is_none() && d.region.is_none());
    let text = write_spec(&d);
    assert!(text.contains("# vpcID: <AWS_VPC_ID>"), "{text}");
    assert!(text.contains("# name: <CLUSTER_NAME>"), "{text}");
}

/// Issue 47 item 10 at the unit level (`crates/cli/tests/it/discover_testbed.rs` performs it
/// through the real apiserver): a kubelet version with a terminal escape, a newline that would
/// start a key, and a bidi override stays inside one comment line, shown escaped.
#[test]
fn a_hostile_kubelet_version_stays_inside_one_comment_line() {
    let mut o = observed();
    o.nodes[0].kubelet_version = Some("\x1b]0;pwned\x07\n# injected: true\u{202e}".into());
    let d = discover(&o);
    let text = write_spec(&d);
    assert!(
        !text.contains(['\x1b', '\x07', '\u{202e}']),
        "raw control characters in:\n{text}"
    );
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("pwned")).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].starts_with("#   - "), "{}", lines[0]);
    assert!(
        lines[0].contains("\\e]0;pwned\\u{7}\\n# injected: true\\u{202e}"),
        "{}",
        lines[0]
    );
    let docs =
        kk_model::yaml::load_documents(&text, kk_model::yaml::LoadLimits::default()).unwrap();
    assert!(docs[0].value.get("injected").is_none());
    assert!(docs[0].value["spec"].get("injected").is_none());
}
