//! Adopting a running cluster on the lab: `testbed/lab adopt` leaves what Kubean leaves on a
//! cluster it built (its Cluster, ClusterOperation, inventory and variables; Nodes without a
//! providerID; an instance profile on the control-plane instance; an infra instance), then
//! `init --discover` writes the spec, which validates, applies and verifies with the real
//! Karpenter; `--check` finds a retagged subnet and an upgraded control plane, each at its
//! field.

use std::os::unix::fs::PermissionsExt;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{Lab, live};

/// The fields no running cluster can tell before kubean-karpenter is there, and what the lab
/// puts in them: the GPU pool's image (lab-kit/amis.json: the lab's GPU image with the NVIDIA
/// driver and toolkit) and the controller's image (the lab runs this build's binary in the
/// image layout's place, as `testbed/lab controller` says). Everything else is discovered.
fn the_documented_hand_edits(text: &str) -> String {
    let edited = text
        .replace(
            "      # ami: {id: <KARPENTER_GPU_WORKER_AMI_ID>}",
            "      ami: {id: ami-0c0ffee0c0ffee002}\n      #",
        )
        .replace(
            "      # repository: <CONTROLLER_IMAGE_REPOSITORY>",
            "      repository: registry.lab.internal/kubean-karpenter",
        )
        .replace(
            "      # digest: <CONTROLLER_IMAGE_DIGEST>",
            "      digest: sha256:0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0\n      #",
        );
    assert_ne!(edited, text, "the placeholders moved:\n{text}");
    edited
}

const RETAG_SUBNETS: &str = "vpc = sys.argv[1]; value = sys.argv[2]
ids = [s['SubnetId'] for s in ec2.describe_subnets(Filters=[{'Name': 'vpc-id', 'Values': [vpc]}])['Subnets']]
ec2.create_tags(Resources=ids, Tags=[{'Key': 'karpenter.sh/discovery', 'Value': value}])";

/// Puts back what the test changed on the lab, also when it fails half-way: the subnets'
/// discovery tag, kubeadm-config's version, and Kubean's leftovers (whose ConfigMaps would
/// conflict with the next test's apply of the lab spec).
struct PutBack {
    env: Vec<(String, String)>,
    /// The lab's state folder (its seed.json).
    state: std::path::PathBuf,
    vpc: Option<String>,
    kubeadm_config: Option<String>,
    client: kube::Client,
    handle: tokio::runtime::Handle,
}

impl PutBack {
    fn python(&self, script: &str, args: &[&str]) -> std::process::Output {
        std::process::Command::new("python3")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .arg("-c")
            .arg(format!(
                "import boto3, sys\nec2 = boto3.client('ec2')\n{script}"
            ))
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for PutBack {
    fn drop(&mut self) {
        if let Some(vpc) = &self.vpc {
            let out = self.python(RETAG_SUBNETS, &[vpc, "lab"]);
            if !out.status.success() {
                live(&format!(
                    "could not put the subnets' tag back: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if let Some(text) = self.kubeadm_config.take() {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
            let patch = json!({"data": {"ClusterConfiguration": text}});
            let _ = self.handle.block_on(api.patch(
                "kubeadm-config",
                &PatchParams::default(),
                &Patch::Merge(&patch),
            ));
        }
        // adopt and then apply tag the seeded control-plane instance as the cluster's; the
        // lab's own state (which the doctor tests judge) has it untagged.
        let out = self.python(
            "import json\nseed = json.load(open(sys.argv[1]))\nec2.delete_tags(Resources=[seed['controlPlaneInstance']], Tags=[{'Key': 'kubernetes.io/cluster/lab'}])",
            &[self.state.join("seed.json").to_str().unwrap()],
        );
        if !out.status.success() {
            live(&format!(
                "could not untag the control-plane instance: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let out = std::process::Command::new(crate::harness::repo().join("testbed/lab"))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .arg("unadopt")
            .output()
            .unwrap();
        if !out.status.success() {
            live(&format!(
                "testbed/lab unadopt failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

#[test]
fn a_kubean_built_cluster_is_adopted_by_discovery_alone_and_check_finds_what_changed() {
    let Some(lab) = Lab::require("adopt") else {
        return;
    };
    let mut put_back = PutBack {
        env: lab.env.clone(),
        state: lab.state(),
        vpc: None,
        kubeadm_config: None,
        client: lab.client.clone(),
        handle: lab.rt.handle().clone(),
    };
    lab.lab(&["adopt"]);
    let dir = lab.dir.path();
    let spec = dir.join("adopted.yaml");
    let spec_arg = spec.to_str().unwrap();

    // Discovery, read-only, to a file only its owner reads.
    let out = lab.cli(&["init", "--discover", "-o", spec_arg]);
    let findings = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        std::fs::metadata(&spec).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let discovered = std::fs::read_to_string(&spec).unwrap();
    live(&format!(
        "   discovered:\n{discovered}\n   stderr: {findings}"
    ));
    for (field, source) in [
        (
            "kubernetesVersion: \"1.36.3\"",
            "kubeadm-config ClusterConfiguration.kubernetesVersion",
        ),
        ("dnsName: api.lab.internal", "controlPlaneEndpoint"),
        ("existingCluster: lab", "Kubean's Cluster lab"),
        (
            "sprayJobImage: \"ghcr.io/kubean-io/spray-job:v0.37.0\"",
            "lab-install-ops ClusterOperation",
        ),
        ("privateKeySecret: lab-ssh-key", "sshAuthRef"),
        (
            "controlPlaneSecurityGroupID: sg-",
            "security group lab-control-plane",
        ),
        ("isolatedVPC: true", "endpoints for ec2 and sts"),
        (
            "infraTaints: [\"CriticalAddonsOnly=true:NoSchedule\"]",
            "infra-1.node_taints",
        ),
        ("source: instanceProfile", "lab-kubean-nodes"),
    ] {
        let line = discovered
            .lines()
            .find(|l| l.contains(field))
            .unwrap_or_else(|| panic!("no {field:?} in the discovered spec:\n{discovered}"));
        assert!(
            line.contains(source),
            "{field:?} should say it came from {source:?}: {line}"
        );
    }
    // The CCM's cloud config names the cluster once an apply has installed it; before that,
    // the control-plane instance's kubernetes.io/cluster tag does.
    let name = discovered
        .lines()
        .find(|l| l.starts_with("  name: "))
        .unwrap_or_default();
    assert!(
        name.starts_with("  name: lab  # from ")
            && (name.contains("KubernetesClusterID (the CCM)")
                || name.contains("tag kubernetes.io/cluster/lab")),
        "{name}"
    );
    let adopted = |name: &str| {
        let v: Value = serde_json::from_str(&lab.aws(&format!(
            "import json\nr = ec2.describe_instances(Filters=[{{'Name': 'tag:Name', 'Values': ['{name}']}}, {{'Name': 'instance-state-name', 'Values': ['running']}}])['Reservations']\ni = r[0]['Instances'][0]\nprint(json.dumps({{'ip': i['PrivateIpAddress'], 'dns': i['PrivateDnsName'], 'vpc': i['VpcId']}}))"
        )))
        .unwrap();
        v
    };
    let (cp, infra) = (adopted("cp-1"), adopted("infra-1"));
    for (host, i) in [("cp-1", &cp), ("infra-1", &infra)] {
        let ip = i["ip"].as_str().unwrap();
        let dns = i["dns"].as_str().unwrap();
        assert!(
            discovered.contains(&format!("ip: {ip}")),
            "{host} {ip} not in the spec"
        );
        assert!(
            discovered.contains(&format!("privateDnsName: {dns}")),
            "{host} {dns} not in the spec"
        );
    }
    let vpc = cp["vpc"].as_str().unwrap().to_owned();
    assert!(discovered.contains(&format!("vpcID: {vpc}")));

    // The documented edits only; then the spec validates, applies (nothing to Kubean's side:
    // it is adopted) and joins nodes with the real Karpenter.
    std::fs::write(&spec, the_documented_hand_edits(&discovered)).unwrap();
    lab.cli(&["validate", spec_arg]);
    let bundle = dir.join("bundle");
    lab.cli(&[
        "render",
        spec_arg,
        "-o",
        bundle.to_str().unwrap(),
        "--force",
    ]);
    assert!(
        !bundle.join("kubean").exists(),
        "an adopted cluster gets no kubean/ objects"
    );
    lab.deploy(&spec, &bundle);
    let out = lab.cli_output(&[
        "verify",
        spec_arg,
        "-o",
        "json",
        "--cuda-proof",
        "scheduled",
    ]);
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify -o json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "verify failed: {result:#}");
    for pool in ["workload-general", "workload-gpu-l4"] {
        let p = result["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pool"] == pool);
        assert_eq!(
            p.map(|p| p["outcome"]["result"].clone()),
            Some(json!("passed")),
            "{pool}: {result:#}"
        );
    }

    // --check: nothing differs yet; then a retagged subnet and an upgraded control plane do.
    let out = lab.cli_output(&["init", "--discover", "--check", spec_arg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    put_back.vpc = Some(vpc.clone());
    lab.aws(&format!(
        "sys.argv = ['-', '{vpc}', 'elsewhere']\n{RETAG_SUBNETS}"
    ));
    let configs: Api<ConfigMap> = Api::namespaced(lab.client.clone(), "kube-system");
    let kubeadm = lab.rt.block_on(configs.get("kubeadm-config")).unwrap();
    let text = kubeadm.data.unwrap()["ClusterConfiguration"].clone();
    put_back.kubeadm_config = Some(text.clone());
    let upgraded = text.replace("kubernetesVersion: v1.36.3", "kubernetesVersion: v1.36.4");
    assert_ne!(
        upgraded, text,
        "kubeadm-config's version is not v1.36.3:\n{text}"
    );
    lab.rt
        .block_on(configs.patch(
            "kubeadm-config",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"ClusterConfiguration": upgraded}})),
        ))
        .unwrap();
    let out = lab.cli_output(&["init", "--discover", "--check", spec_arg, "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let at = |field: &str| {
        found
            .iter()
            .find(|f| f["field"] == field)
            .unwrap_or_else(|| panic!("no finding at {field}: {found:#?}"))
            .clone()
    };
    let edited = std::fs::read_to_string(&spec).unwrap();
    let line_of = |needle: &str| edited.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let version = at("spec.kubernetesVersion");
    assert_eq!(
        version["line"],
        json!(line_of("kubernetesVersion:")),
        "{version}"
    );
    assert!(
        version["message"].as_str().unwrap().contains("1.36.4"),
        "{version}"
    );
    let tag = at("spec.aws.subnets.discoveryTag");
    assert!(
        tag["line"].as_u64().unwrap() >= line_of("subnets:") as u64,
        "{tag}"
    );
    assert!(
        tag["message"]
            .as_str()
            .unwrap()
            .contains("karpenter.sh/discovery=elsewhere"),
        "{tag}"
    );
    drop(put_back);
}

/// A kubeconfig for the lab's apiserver as the ServiceAccount `default/NAME`, made here.
fn service_account_kubeconfig(lab: &Lab, name: &str) -> std::path::PathBuf {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(lab.client.clone(), "default");
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
    lab.server_side_apply(&accounts, name, &account);
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))
            .unwrap();
    let token: TokenRequest = lab
        .rt
        .block_on(accounts.create_subresource(
            "token",
            name,
            &kube::api::PostParams::default(),
            &request,
        ))
        .unwrap();
    let token = token.status.unwrap().token;
    let admin: Value = serde_json::to_value(
        kube::config::Kubeconfig::read_from(lab.var("KUBECONFIG"))
            .unwrap()
            .clusters[0]
            .cluster
            .clone()
            .unwrap(),
    )
    .unwrap();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "lab", "cluster": admin}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "lab", "user": name}}],
        "current-context": name,
    });
    let path = lab.dir.path().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A ServiceAccount with no RBAC gets a spec and a finding for every read it was refused (no
/// crash, exit 0); bound to exactly the ClusterRole `init --discover --permissions` prints, it
/// discovers the same spec as the lab's admin.
#[test]
fn discovery_needs_only_the_permissions_it_prints_and_says_what_it_may_not_read() {
    let Some(lab) = Lab::require("adopt: permissions") else {
        return;
    };
    lab.lab(&["adopt"]);
    let _put_back = PutBack {
        env: lab.env.clone(),
        state: lab.state(),
        vpc: None,
        kubeadm_config: None,
        client: lab.client.clone(),
        handle: lab.rt.handle().clone(),
    };
    let nobody = service_account_kubeconfig(&lab, "kk-discover-nobody");
    let out = lab.cli_output(&[
        "init",
        "--discover",
        "--kubeconfig",
        nobody.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for refused in [
        "list Nodes",
        "get ConfigMap kube-system/kubeadm-config",
        "list Kubean Clusters",
    ] {
        assert!(
            stderr.contains(&format!("finding: could not read {refused}"))
                && stderr.contains("refused (403"),
            "no 403 finding for {refused}: {stderr}"
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("# kubernetesVersion: "),
        "nothing could be read, so nothing is filled in"
    );

    let permissions: Value = serde_json::from_slice(
        &lab.cli(&["init", "--discover", "--permissions", "-o", "json"])
            .stdout,
    )
    .unwrap();
    let role = &permissions["clusterRole"];
    let roles = lab.dynamic("rbac.authorization.k8s.io", "v1", "ClusterRole");
    let name = role["metadata"]["name"].as_str().unwrap();
    lab.server_side_apply(&roles, name, role);
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kk-discover-only"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "kk-discover-only", "namespace": "default"}],
    });
    let bindings = lab.dynamic("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding");
    lab.server_side_apply(&bindings, "kk-discover-only", &binding);
    let only = service_account_kubeconfig(&lab, "kk-discover-only");
    let as_admin = lab.cli(&["init", "--discover"]);
    let as_only = lab.cli(&["init", "--discover", "--kubeconfig", only.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&as_only.stdout),
        String::from_utf8_lossy(&as_admin.stdout),
        "with only the printed permissions: {}",
        String::from_utf8_lossy(&as_only.stderr)
    );
    assert!(!String::from_utf8_lossy(&as_only.stderr).contains("could not read"));
}
