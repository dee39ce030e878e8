//! `doctor` on the lab (`testbed/lab up`): the healthy lab passes every check, and each check
//! fails when the lab is broken in exactly the way it looks for — with the lab's own fault
//! switches (the passrole-denied refusal), the join store edited as a stale one would be, and
//! kubeadm's objects removed. Nodes whose state only a real fleet could reach (a kubelet five
//! minors old, a provider ID naming no instance, an instance without the cluster tag) are
//! registered by hand as Ready Node objects: the checks read Nodes, so a Node object is
//! exactly what they see.

use crate::harness as lab;

use std::process::Output;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use lab::{Lab, claim_of, edit_store, is_true};
use serde_json::{Value, json};

use crate::harness::JOIN_STORE as STORE;
const MIN: Duration = Duration::from_secs(60);

/// `doctor` with the lab's spec and `extra` flags: (exit code, report).
fn doctor(lab: &Lab, spec: &std::path::Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["doctor", spec.to_str().unwrap(), "-o", "json"];
    args.extend_from_slice(extra);
    let out: Output = lab.cli_output(&args);
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "doctor exited {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor -o json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (code, report)
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#}"))
}

/// Asserts the check failed with evidence containing `says`; doctor exited 1.
fn assert_fails(outcome: &(i32, Value), id: &str, says: &str) {
    let (code, report) = outcome;
    let c = check(report, id);
    assert_eq!(c["status"], "fail", "{id}: {c:#}");
    assert!(
        c["evidence"].to_string().contains(says),
        "{id} evidence should say {says:?}: {c:#}"
    );
    assert!(!c["fix"].as_str().unwrap().is_empty(), "{id} has a fix");
    assert_eq!(*code, 1, "a failing check exits 1");
}

/// A control-plane security group in moto for this test, admitting the API port from the
/// lab's node security group when `open`; its id.
fn control_plane_sg(lab: &Lab, open: bool) -> String {
    let port = lab
        .var("KK_LAB_API_SERVER")
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    lab.aws(&format!(
        "import uuid
vpc = ec2.describe_vpcs(Filters=[{{'Name': 'isDefault', 'Values': ['true']}}])['Vpcs'][0]['VpcId']
nodes = ec2.describe_security_groups(Filters=[{{'Name': 'tag:karpenter.sh/discovery', 'Values': ['lab']}}])['SecurityGroups'][0]['GroupId']
sg = ec2.create_security_group(GroupName='lab-cp-' + uuid.uuid4().hex[:8], Description='lab control plane', VpcId=vpc)['GroupId']
if {open}:
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=[{{'IpProtocol': 'tcp', 'FromPort': {port}, 'ToPort': {port}, 'UserIdGroupPairs': [{{'GroupId': nodes}}]}}])
print(sg)",
        open = if open { "True" } else { "False" },
    ))
}

/// A controller role in moto carrying the rendered controller policy, without its
/// iam:PassRole statement when `pass_role` is false; its name.
fn controller_role(lab: &Lab, bundle: &std::path::Path, pass_role: bool) -> String {
    let mut policy: Value = serde_json::from_str(
        &std::fs::read_to_string(bundle.join("iam/controller-policy.json")).unwrap(),
    )
    .unwrap();
    if !pass_role {
        policy["Statement"]
            .as_array_mut()
            .unwrap()
            .retain(|s| s["Sid"] != "AllowPassingInstanceRole");
    }
    let path = lab.dir.path().join("controller-policy.json");
    std::fs::write(&path, policy.to_string()).unwrap();
    lab.aws(&format!(
        "import uuid
iam = boto3.client('iam')
name = 'KarpenterControllerRole-' + uuid.uuid4().hex[:8]
iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({{'Version': '2012-10-17', 'Statement': []}}))
arn = iam.create_policy(PolicyName=name, PolicyDocument=open('{}').read())['Policy']['Arn']
iam.attach_role_policy(RoleName=name, PolicyArn=arn)
print(name)",
        path.display()
    ))
}

/// The lab with its spec naming a fresh control-plane security group (admitting the API port
/// from the nodes or not).
fn deployed_with_sg(
    test: &str,
    open: bool,
) -> Option<(Lab, std::path::PathBuf, std::path::PathBuf)> {
    let lab = Lab::require(test)?;
    let sg = control_plane_sg(&lab, open);
    // In place of the group `testbed/lab spec` wrote (the lab's shared lab-control-plane).
    let (spec, bundle) = lab.render(|s| {
        let mut out = String::new();
        for line in s.lines() {
            match line.split_once("controlPlaneSecurityGroupID:") {
                Some((indent, _)) => {
                    out.push_str(&format!("{indent}controlPlaneSecurityGroupID: {sg}"))
                }
                None => out.push_str(line),
            }
            out.push('\n');
        }
        out
    });
    lab.deploy(&spec, &bundle);
    if !open {
        // apply opened the API port to the nodes; the rule is then removed by hand.
        lab.aws(&format!(
            "perms = ec2.describe_security_groups(GroupIds=['{sg}'])['SecurityGroups'][0]['IpPermissions']
if perms:
    ec2.revoke_security_group_ingress(GroupId='{sg}', IpPermissions=perms)"
        ));
    }
    Some((lab, spec, bundle))
}

/// Registers a Node object by hand, Ready, with this kubelet version, provider ID and taints.
fn fake_node(lab: &Lab, name: &str, kubelet: &str, provider_id: Option<&str>, taints: Value) {
    let nodes: Api<Node> = Api::all(lab.client.clone());
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints},
    });
    if let Some(pid) = provider_id {
        node["spec"]["providerID"] = json!(pid);
    }
    let node: Node = serde_json::from_value(node).unwrap();
    lab.rt
        .block_on(nodes.create(&PostParams::default(), &node))
        .unwrap();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {
        "nodeInfo": {"kubeletVersion": kubelet, "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
                     "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "lab test",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    lab.rt
        .block_on(nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)))
        .unwrap();
}

/// An infra worker as Kubespray registers it (the lab runs its controllers as processes and has
/// none): Ready, labelled `node-role.kubernetes.io/infra`, with `taints`, no provider ID yet
/// (doctor then gives it the grace a Node gets before the CCM has initialized it).
fn infra_node(lab: &Lab, name: &str, taints: Value) {
    let version = lab
        .rt
        .block_on(lab.client.apiserver_version())
        .unwrap()
        .git_version;
    fake_node(lab, name, &version, None, taints);
    let nodes: Api<Node> = Api::all(lab.client.clone());
    let labels = json!({"metadata": {"labels": {"node-role.kubernetes.io/infra": "", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}}});
    lab.rt
        .block_on(nodes.patch(name, &PatchParams::default(), &Patch::Merge(&labels)))
        .unwrap();
}

fn infra_taints() -> Value {
    json!([{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}])
}

#[test]
fn doctor_passes_every_check_on_the_healthy_lab_with_a_cpu_and_a_gpu_node() {
    let Some((mut lab, spec, bundle)) = deployed_with_sg("doctor: healthy lab", true) else {
        return;
    };
    let role = controller_role(&lab, &bundle, true);
    lab.scale("inflate-workload-general", 1);
    for pool in ["workload-general", "workload-gpu-l4"] {
        lab.wait(&format!("{pool} NodeClaim Initialized"), 3 * MIN, |l| {
            claim_of(l, pool).filter(|nc| is_true(nc, "Initialized"))
        });
    }
    lab.wait("the device plugin Running on the GPU node", MIN, |l| {
        l.pods("kube-system").into_iter().find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("nvidia-device-plugin"))
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
    });
    // The rotator and CSR approver Deployments need an infra worker to be placed on.
    infra_node(&lab, "infra-1", infra_taints());
    let started = Instant::now();
    let (code, report) = doctor(&lab, &spec, &["--controller-role", &role]);
    let took = started.elapsed();
    eprintln!("  doctor wall time: {:.2}s\n{report:#}", took.as_secs_f64());
    assert_eq!(code, 0, "{report:#}");
    for c in report["checks"].as_array().unwrap() {
        // Events and pods of earlier tests on this lab may leave warnings; nothing fails, and
        // every check that judges this lab's state is ok (none skipped: the lab has AWS, a
        // store and a GPU pool).
        let id = c["id"].as_str().unwrap();
        if ["karpenter-errors", "pods-running"].contains(&id) {
            assert_ne!(c["status"], "fail", "{c:#}");
        } else if id == "infra-imds-hop-limit" {
            // The lab runs its controllers as processes: it has no infra worker Node (the
            // check's fail and ok are shown on one in the cluster-ID test).
            assert_eq!(c["status"], "skipped", "{c:#}");
        } else if id == "budget-enforced" {
            // The lab spec budgets no pool (lab_budget.rs runs the budget controller).
            assert_eq!(c["status"], "skipped", "{c:#}");
        } else {
            assert_eq!(c["status"], "ok", "{c:#}");
        }
    }
    assert!(
        check(&report, "controller-pass-role")["evidence"]
            .to_string()
            .contains("(live)")
    );
    // The interruption checks judged the queue apply made, its five rules, and the queue name
    // the lab's Karpenter runs with.
    let evidence = |id: &str| check(&report, id)["evidence"].to_string();
    assert!(
        evidence("interruption-rules")
            .contains("lab-spot: EC2 Spot Instance Interruption Warning -> lab")
    );
    assert!(evidence("interruption-setting").contains("INTERRUPTION_QUEUE=lab"));
}

#[test]
fn doctor_fails_join_store_when_the_stored_token_has_expired() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: expired token", |s| s) else {
        return;
    };
    edit_store(&lab, STORE, "KK_EXPIRATION", "2026-01-01T00:00:00Z");
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "join-store",
        "2026-01-01T00:00:00Z is in the past",
    );
    // Before it bites: ten minutes left, when the rendered rotator replaces a token with an
    // hour left, is a rotation that did not happen.
    let soon = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_mins(10))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    edit_store(&lab, STORE, "KK_EXPIRATION", &soon);
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "join-store",
        "the rotation is overdue",
    );
}

#[test]
fn doctor_fails_join_ca_hash_when_the_store_pins_another_ca() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: wrong CA hash", |s| s) else {
        return;
    };
    let wrong = format!("sha256:{}", "0".repeat(64));
    edit_store(&lab, STORE, "KK_CA_CERT_HASH", &wrong);
    assert_fails(&doctor(&lab, &spec, &[]), "join-ca-hash", &wrong);
}

#[test]
fn doctor_fails_cluster_info_jws_for_a_token_that_may_not_sign() {
    // A token without usage-bootstrap-signing authenticates, but the bootstrapsigner never
    // signs cluster-info for it: kubeadm's discovery with that token fails.
    let Some((lab, spec, _)) = Lab::deployed("doctor: cluster-info without the token's JWS", |s| s)
    else {
        return;
    };
    let secrets: Api<Secret> = Api::namespaced(lab.client.clone(), "kube-system");
    let (id, secret) = ("nosign", "0123456789abcdef");
    let obj: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                       "expiration": "2099-01-01T00:00:00Z",
                       "auth-extra-groups": "system:bootstrappers:kubean-karpenter"},
    }))
    .unwrap();
    let _ = lab
        .rt
        .block_on(secrets.delete(&format!("bootstrap-token-{id}"), &DeleteParams::default()));
    lab.rt
        .block_on(secrets.create(&PostParams::default(), &obj))
        .unwrap();
    edit_store(&lab, STORE, "KK_TOKEN", &format!("{id}.{secret}"));
    std::thread::sleep(Duration::from_secs(2));
    let outcome = doctor(&lab, &spec, &[]);
    assert_fails(
        &outcome,
        "cluster-info-jws",
        &format!("no jws-kubeconfig-{id}"),
    );
    assert_eq!(
        check(&outcome.1, "join-token-valid")["status"],
        "ok",
        "the token itself is valid"
    );
    let _ = lab
        .rt
        .block_on(secrets.delete(&format!("bootstrap-token-{id}"), &DeleteParams::default()));
}

/// Deletes a Role on creation and puts it back on drop, so a failing test leaves kubeadm's
/// RBAC as it found it.
struct RoleRemoved<'a> {
    lab: &'a Lab,
    role: Role,
}

impl Drop for RoleRemoved<'_> {
    fn drop(&mut self) {
        let roles: Api<Role> = Api::namespaced(self.lab.client.clone(), "kube-system");
        let mut role = self.role.clone();
        role.metadata.resource_version = None;
        role.metadata.uid = None;
        role.metadata.creation_timestamp = None;
        role.metadata.managed_fields = None;
        let _ = self
            .lab
            .rt
            .block_on(roles.create(&PostParams::default(), &role));
    }
}

#[test]
fn doctor_fails_bootstrap_rbac_when_kubeadms_config_role_is_missing() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: kubeadm's bootstrap RBAC missing", |s| s)
    else {
        return;
    };
    let roles: Api<Role> = Api::namespaced(lab.client.clone(), "kube-system");
    let role = lab
        .rt
        .block_on(roles.get("kubeadm:nodes-kubeadm-config"))
        .unwrap();
    lab.rt
        .block_on(roles.delete("kubeadm:nodes-kubeadm-config", &DeleteParams::default()))
        .unwrap();
    let _restore = RoleRemoved { lab: &lab, role };
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "bootstrap-rbac",
        "Role/kube-system/kubeadm:nodes-kubeadm-config is missing",
    );
}

#[test]
fn doctor_fails_pass_role_when_the_controller_policy_lacks_it_and_karpenter_reports_the_refusal() {
    // Both halves of the seed's PassRole failure: the policy document (evaluated by doctor,
    // moto has no simulator) and what Karpenter then reports (the lab's passrole-denied fault
    // makes moto refuse CreateFleet as EC2 does).
    let Some(lab) = Lab::require("doctor: iam:PassRole missing") else {
        return;
    };
    let (spec, bundle) = lab.render(|s| s);
    lab.fault("passrole-denied");
    lab.deploy(&spec, &bundle);
    let role = controller_role(&lab, &bundle, false);
    let mut outcome = doctor(&lab, &spec, &["--controller-role", &role]);
    assert_fails(&outcome, "controller-pass-role", "no statement");
    let deadline = Instant::now() + MIN;
    while check(&outcome.1, "karpenter-ready")["status"] != "fail" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(3));
        outcome = doctor(&lab, &spec, &["--controller-role", &role]);
    }
    assert_fails(&outcome, "karpenter-ready", "ec2:CreateFleet");
    // The rendered policy itself has the statement.
    let rendered = doctor(&lab, &spec, &[]);
    assert_eq!(check(&rendered.1, "controller-pass-role")["status"], "ok");
}

#[test]
fn doctor_fails_api_port_when_the_control_plane_group_does_not_admit_the_nodes() {
    let Some((lab, spec, _)) = deployed_with_sg("doctor: API port closed to the nodes", false)
    else {
        return;
    };
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "api-port-from-nodes",
        "has no ingress rule for TCP",
    );
}

#[test]
fn doctor_fails_kubelet_skew_for_a_kubelet_five_minors_old() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: kubelet version skew", |s| s) else {
        return;
    };
    fake_node(&lab, "old-kubelet", "v1.31.0", None, json!([]));
    assert_fails(
        &doctor(&lab, &spec, &["--grace", "10m"]),
        "kubelet-version-skew",
        "kubelet v1.31.0 is 5 minors older",
    );
}

#[test]
fn doctor_fails_node_provider_id_for_an_instance_ec2_does_not_know() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: provider ID mismatch", |s| s) else {
        return;
    };
    fake_node(
        &lab,
        "ghost",
        "v1.36.3",
        Some("aws:///us-east-1a/i-0123456789abcdef0"),
        json!([]),
    );
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "node-provider-id",
        "names an instance EC2 does not know",
    );
}

#[test]
fn doctor_fails_ccm_check_for_a_node_left_uninitialized() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: CCM not initializing", |s| s) else {
        return;
    };
    // No instance answers to this node's name: the CCM cannot initialize it.
    fake_node(
        &lab,
        "uninitialized",
        "v1.36.3",
        None,
        json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_fails(
        &doctor(&lab, &spec, &["--grace", "1s"]),
        "ccm-initializes-nodes",
        "still has the node.cloudprovider.kubernetes.io/uninitialized taint",
    );
}

#[test]
fn doctor_fails_cluster_id_tag_and_infra_hop_limit_for_kubean_instances() {
    // The lab's seeded control-plane instance stands for a Kubean-built one: it carries no
    // kubernetes.io/cluster/lab tag.
    let Some((lab, spec, _)) =
        Lab::deployed("doctor: cluster ID tag missing, infra hop limit 2", |s| s)
    else {
        return;
    };
    let seed: Value =
        serde_json::from_str(&std::fs::read_to_string(lab.state().join("seed.json")).unwrap())
            .unwrap();
    let id = seed["controlPlaneInstance"].as_str().unwrap();
    // An earlier test may have adopted the lab, and its apply tagged the instance as the spec's
    // Kubean node: this test's precondition is the untagged instance, so make it so.
    lab.aws(&format!(
        "ec2.delete_tags(Resources=['{id}'], Tags=[{{'Key': 'kubernetes.io/cluster/lab'}}])"
    ));
    let az = lab.aws(&format!("print(ec2.describe_instances(InstanceIds=['{id}'])['Reservations'][0]['Instances'][0]['Placement']['AvailabilityZone'])"));
    fake_node(
        &lab,
        "cp-1",
        "v1.36.3",
        Some(&format!("aws:///{az}/{id}")),
        json!([]),
    );
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "cluster-id-tag",
        "tag kubernetes.io/cluster/lab is missing",
    );

    // Finding #4 of issue 24: an infra worker (where Karpenter and the rotator take the
    // instance profile) with IMDS hop limit 2 lends that role to every pod on it.
    let infra = "infra-1";
    fake_node(
        &lab,
        infra,
        "v1.36.3",
        Some(&format!("aws:///{az}/{id}")),
        json!([]),
    );
    let nodes: Api<Node> = Api::all(lab.client.clone());
    let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/infra": ""}}});
    lab.rt
        .block_on(nodes.patch(infra, &PatchParams::default(), &Patch::Merge(&label)))
        .unwrap();
    let hop_limit = |limit: u8| {
        lab.aws(&format!(
            "ec2.modify_instance_metadata_options(InstanceId='{id}', HttpTokens='required', HttpPutResponseHopLimit={limit})"
        ));
    };
    hop_limit(2);
    assert_fails(
        &doctor(&lab, &spec, &[]),
        "infra-imds-hop-limit",
        "IMDS hop limit 2, so every pod on it can fetch Karpenter's and the rotator's role",
    );
    hop_limit(1);
    let (_, report) = doctor(&lab, &spec, &[]);
    assert_eq!(
        check(&report, "infra-imds-hop-limit")["status"],
        "ok",
        "{:#}",
        check(&report, "infra-imds-hop-limit")
    );
}

#[test]
fn doctor_fails_nodeclaims_registered_when_the_node_cannot_join() {
    let Some((mut lab, spec, _)) = Lab::deployed("doctor: NodeClaim not registered", |s| s) else {
        return;
    };
    edit_store(&lab, STORE, "KK_EXPIRATION", "2026-01-01T00:00:00Z");
    lab.scale("inflate-workload-general", 1);
    lab.wait("NodeClaim Launched", MIN, |l| {
        claim_of(l, "workload-general").filter(|nc| is_true(nc, "Launched"))
    });
    std::thread::sleep(Duration::from_secs(12));
    let outcome = doctor(&lab, &spec, &["--grace", "10s"]);
    assert_fails(&outcome, "nodeclaims-registered", "is not Registered");
    assert_eq!(
        check(&outcome.1, "join-store")["status"],
        "fail",
        "and says why"
    );
}

#[test]
fn doctor_fails_device_plugin_and_gpu_checks_when_the_plugin_does_not_tolerate_the_pool() {
    let Some((mut lab, spec, _)) =
        Lab::deployed("doctor: device plugin toleration mismatch", |s| s)
    else {
        return;
    };
    lab.rt
        .block_on(kk_testkit::lab::device_plugin_tolerates_only_the_upstream_taint(&lab.client));
    let ds: Api<DaemonSet> = Api::namespaced(lab.client.clone(), "kube-system");
    // Predicted before the node is there: the plugin will not run on the pool's next node.
    let early = doctor(&lab, &spec, &["--grace", "5s"]);
    assert_fails(
        &early,
        "device-plugin-for-gpu-pools",
        "DaemonSet kube-system/nvidia-device-plugin does not tolerate gpu=true:NoSchedule",
    );
    lab.wait("GPU NodeClaim Registered", 3 * MIN, |l| {
        claim_of(l, "workload-gpu-l4").filter(|nc| is_true(nc, "Registered"))
    });
    std::thread::sleep(Duration::from_secs(6));
    let outcome = doctor(&lab, &spec, &["--grace", "5s"]);
    assert_fails(
        &outcome,
        "device-plugin-on-gpu-nodes",
        "no NVIDIA device plugin pod on it",
    );
    assert_fails(&outcome, "gpu-advertised", "has no nvidia.com/gpu");
    assert_fails(
        &outcome,
        "nodeclaims-initialized",
        "advertises no nvidia.com/gpu",
    );

    // Deleted altogether: predicted as well (a GPU pool with no device plugin at all).
    lab.rt
        .block_on(ds.delete("nvidia-device-plugin", &Default::default()))
        .unwrap();
    assert_fails(
        &doctor(&lab, &spec, &["--grace", "5s"]),
        "device-plugin-for-gpu-pools",
        "NodePool workload-gpu-l4: no device-plugin DaemonSet in the cluster",
    );
}

/// Re-applies the spec on drop (the fix doctor names for a broken interruption queue or
/// rule), so a failing test leaves the lab's queue and rules as apply made them.
struct Reapply<'a> {
    lab: &'a Lab,
    spec: &'a std::path::Path,
}

impl Reapply<'_> {
    /// The fix: `apply` (the AWS side; the rest of the lab is as the last deploy left it).
    fn apply(&self) {
        let kubeconfig = self.lab.var("KUBECONFIG");
        let out = self.lab.cli_output(&[
            "apply",
            self.spec.to_str().unwrap(),
            "--mgmt-kubeconfig",
            &kubeconfig,
            "--skip-helm",
        ]);
        assert!(
            out.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Reapply<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.apply()));
        }
    }
}

#[test]
fn doctor_fails_interruption_rules_when_the_spot_rule_is_deleted_and_apply_restores_it() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: interruption rule deleted", |s| s) else {
        return;
    };
    let restore = Reapply {
        lab: &lab,
        spec: &spec,
    };
    lab.aws(
        "events = boto3.client('events')
ids = [t['Id'] for t in events.list_targets_by_rule(Rule='lab-spot')['Targets']]
events.remove_targets(Rule='lab-spot', Ids=ids)
events.delete_rule(Name='lab-spot')",
    );
    let outcome = doctor(&lab, &spec, &[]);
    assert_fails(
        &outcome,
        "interruption-rules",
        "rule lab-spot (EC2 Spot Instance Interruption Warning) does not exist",
    );
    assert!(
        check(&outcome.1, "interruption-rules")["fix"]
            .as_str()
            .unwrap()
            .contains("apply"),
        "the fix is apply"
    );
    restore.apply();
    let (_, report) = doctor(&lab, &spec, &[]);
    assert_eq!(
        check(&report, "interruption-rules")["status"],
        "ok",
        "apply put the rule back: {report:#}"
    );
}

#[test]
fn doctor_fails_interruption_queue_policy_when_eventbridge_may_not_send_and_apply_restores_it() {
    let Some((lab, spec, bundle)) = Lab::deployed("doctor: interruption queue policy wrong", |s| s)
    else {
        return;
    };
    let restore = Reapply {
        lab: &lab,
        spec: &spec,
    };
    // The rendered policy with its EventBridge grant narrowed to SQS alone: a policy edited
    // by hand, or an older stack's, that refuses every delivery.
    let mut policy: Value = serde_json::from_str(
        &std::fs::read_to_string(bundle.join("interruption/queue-policy.json")).unwrap(),
    )
    .unwrap();
    for statement in policy["Statement"].as_array_mut().unwrap() {
        if statement["Effect"] == "Allow" {
            statement["Principal"] = json!({"Service": "sqs.amazonaws.com"});
        }
    }
    lab.aws(&format!(
        "sqs = boto3.client('sqs')
sqs.set_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName='lab')['QueueUrl'], Attributes={{'Policy': {policy:?}}})",
        policy = policy.to_string()
    ));
    let outcome = doctor(&lab, &spec, &[]);
    assert_fails(
        &outcome,
        "interruption-queue-policy",
        "no statement lets events.amazonaws.com sqs:SendMessage",
    );
    restore.apply();
    let (_, report) = doctor(&lab, &spec, &[]);
    assert_eq!(
        check(&report, "interruption-queue-policy")["status"],
        "ok",
        "apply put the policy back: {report:#}"
    );
}

/// A figure, not a test (run it with `--ignored`): doctor's wall time on a lab with
/// KK_LAB_NODES_WANTED (default 20) nodes, grown as lab_capacity_many_nodes grows them.
#[test]
#[ignore = "a benchmark: minutes long"]
fn doctor_wall_time_on_many_nodes() {
    let Some(mut lab) = Lab::require("doctor wall time on many nodes") else {
        return;
    };
    let wanted = Lab::nodes_wanted();
    let (spec, bundle) = lab.render(|s| s.replace("sizes: [large, xlarge]", "sizes: [xlarge]"));
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", wanted * 3);
    lab.wait("all NodeClaims Initialized", 15 * MIN, |l| {
        let claims = l.nodeclaims();
        (claims.iter().filter(|c| is_true(c, "Initialized")).count() > wanted as usize)
            .then_some(())
    });
    let nodes = lab.nodes().len();
    let mut times = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let (_, report) = doctor(&lab, &spec, &[]);
        times.push(started.elapsed().as_secs_f64());
        assert_eq!(
            check(&report, "node-provider-id")["status"],
            "ok",
            "{report:#}"
        );
    }
    eprintln!("  doctor on {nodes} nodes: wall times {times:.2?} s");
    lab.print_phases();
}

/// The rotator's and the CSR approver's pods go to infra workers only. With none the cluster
/// can place them on, doctor fails at once (their pods would only look slow for the pods
/// check's grace), naming each Node's reason; an infra worker that tolerates nothing but its
/// own taint is no place either; a proper one makes the check ok.
#[test]
fn doctor_fails_controllers_schedulable_when_no_node_can_take_the_rotator() {
    let Some((lab, spec, _)) = Lab::deployed("doctor: controllers with no place to run", |s| s)
    else {
        return;
    };
    let outcome = doctor(&lab, &spec, &[]);
    assert_fails(
        &outcome,
        "controllers-schedulable",
        "no Node can run its pods: there is no Node",
    );
    infra_node(
        &lab,
        "infra-wrong",
        json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
    );
    let outcome = doctor(&lab, &spec, &[]);
    assert_fails(
        &outcome,
        "controllers-schedulable",
        "infra-wrong does not tolerate dedicated=infra:NoSchedule",
    );
    infra_node(&lab, "infra-1", infra_taints());
    let (_, report) = doctor(&lab, &spec, &[]);
    let c = check(&report, "controllers-schedulable");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(c["evidence"].to_string().contains("fit infra-1"), "{c:#}");
}
