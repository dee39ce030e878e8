//! `apply`'s AWS side against the testbed's moto and apiserver: the first apply creates the
//! node role, trust, instance profile, policies, tags and the API port rule; a second apply
//! makes no AWS write and changes no resourceVersion (the call counts are printed as the
//! figure); a refusal half-way exits 2 naming what was and was not done, and the re-run
//! resumes without repeating a write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cli(tb: &kk_live::testbed::Testbed, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .envs(&tb.env)
        .args(args)
        .output()
        .unwrap()
}

/// Python with boto3 against the testbed's moto.
fn aws(tb: &kk_live::testbed::Testbed, script: &str) -> String {
    let out = Command::new("python3")
        .envs(&tb.env)
        .arg("-c")
        .arg(format!(
            "import boto3, json\nec2 = boto3.client('ec2')\niam = boto3.client('iam')\n{script}"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "boto3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct World {
    name: String,
    node_sg: String,
    cp_sg: String,
    subnet: String,
    instance: String,
    ip: String,
}

/// A unique cluster in moto: a node security group, a control-plane one, a subnet and a
/// "Kubean-built" instance.
fn world(tb: &kk_live::testbed::Testbed) -> World {
    let out = aws(
        tb,
        "import uuid
n = 'aws' + uuid.uuid4().hex[:6]
# A VPC of its own: tests running at once must not tag the same subnet.
vpc = ec2.create_vpc(CidrBlock='10.0.0.0/16')['Vpc']['VpcId']
subnet = ec2.create_subnet(VpcId=vpc, CidrBlock='10.0.1.0/24')['Subnet']['SubnetId']
nodes = ec2.create_security_group(GroupName=n + '-nodes', Description='nodes', VpcId=vpc)['GroupId']
ec2.create_tags(Resources=[subnet, nodes], Tags=[{'Key': 'karpenter.sh/discovery', 'Value': n}])
cp = ec2.create_security_group(GroupName=n + '-cp', Description='cp', VpcId=vpc)['GroupId']
i = ec2.run_instances(ImageId='ami-12c6146b', InstanceType='m6i.large', MinCount=1, MaxCount=1, SubnetId=subnet)['Instances'][0]
print(json.dumps([n, nodes, cp, subnet, i['InstanceId'], i['PrivateIpAddress']]))",
    );
    let v: Vec<String> = serde_json::from_str(&out).unwrap();
    World {
        name: v[0].clone(),
        node_sg: v[1].clone(),
        cp_sg: v[2].clone(),
        subnet: v[3].clone(),
        instance: v[4].clone(),
        ip: v[5].clone(),
    }
}

fn spec(dir: &Path, w: &World, cp_sg: &str) -> PathBuf {
    let text = kk_spec::EXAMPLE
        .replace("name: demo ", &format!("name: {} ", w.name))
        .replace(
            "/kubean-karpenter/demo/join",
            &format!("/kubean-karpenter/{}/join", w.name),
        )
        .replace("value: demo}", &format!("value: {}}}", w.name))
        .replace("-demo", &format!("-{}", w.name))
        .replace("sg-0123456789abcdef0", cp_sg)
        .replace("10.0.1.10", &w.ip)
        .replace(
            "    namespace: karpenter\n",
            &format!("    namespace: karpenter-{}\n", w.name),
        )
        .replace(
            "    namespace: kubean-system\n",
            &format!("    namespace: kubean-{}\n", w.name),
        );
    let path = dir.join(format!("{}.yaml", w.name));
    std::fs::write(&path, text).unwrap();
    path
}

/// Everything apply manages in moto for this cluster, as one JSON value.
fn aws_state(tb: &kk_live::testbed::Testbed, w: &World) -> Value {
    let out = aws(
        tb,
        &format!(
            "n = '{n}'
role = iam.get_role(RoleName='KarpenterNodeRole-' + n)['Role']
out = {{
 'trust': role['AssumeRolePolicyDocument'],
 'attached': sorted(p['PolicyArn'] for p in iam.list_attached_role_policies(RoleName=role['RoleName'])['AttachedPolicies']),
 'inline': {{p: iam.get_role_policy(RoleName=role['RoleName'], PolicyName=p)['PolicyDocument'] for p in iam.list_role_policies(RoleName=role['RoleName'])['PolicyNames']}},
 'profile': [r['RoleName'] for r in iam.get_instance_profile(InstanceProfileName='KarpenterNodeInstanceProfile-' + n)['InstanceProfile']['Roles']],
 'policies': {{p['PolicyName']: [v['VersionId'] for v in iam.list_policy_versions(PolicyArn=p['Arn'])['Versions']] for p in iam.list_policies(Scope='Local')['Policies'] if p['PolicyName'].endswith(n)}},
 'tags': {{t['ResourceId']: t['Value'] for t in ec2.describe_tags(Filters=[{{'Name': 'resource-id', 'Values': ['{subnet}', '{sg}', '{i}']}}])['Tags'] if t['Key'] == 'kubernetes.io/cluster/' + n}},
 'ingress': ec2.describe_security_groups(GroupIds=['{cp}'])['SecurityGroups'][0]['IpPermissions'],
}}
print(json.dumps(out, default=str, sort_keys=True))",
            n = w.name,
            subnet = w.subnet,
            sg = w.node_sg,
            i = w.instance,
            cp = w.cp_sg
        ),
    );
    serde_json::from_str(&out).unwrap()
}

/// The apiserver's own count of requests it served (kube-apiserver /metrics).
fn apiserver_requests(tb: &kk_live::testbed::Testbed) -> f64 {
    let out = Command::new("curl")
        .args(["-sS", "--cacert", &tb.env["KK_TESTBED_CA"], "-H"])
        .arg(format!(
            "Authorization: Bearer {}",
            tb.env["KK_TESTBED_ADMIN_TOKEN"]
        ))
        .arg(format!("{}/metrics", tb.env["KK_TESTBED_APISERVER"]))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// moto's request log: one line per request (testbed/README.md).
fn moto_requests(tb: &kk_live::testbed::Testbed) -> usize {
    let log = tb.kubeconfig.parent().unwrap().join("logs/moto.log");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

fn resource_versions(list: &Value, tb: &kk_live::testbed::Testbed) -> BTreeMap<String, String> {
    let _ = tb;
    list.as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}/{}",
                    o["namespace"].as_str().unwrap_or(""),
                    o["kind"].as_str().unwrap(),
                    o["name"].as_str().unwrap()
                ),
                o["resourceVersion"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn apply_args<'a>(tb: &'a kk_live::testbed::Testbed, spec: &'a str) -> Vec<&'a str> {
    let k = tb.kubeconfig.to_str().unwrap();
    vec![
        "apply",
        spec,
        "--kubeconfig",
        k,
        "--mgmt-kubeconfig",
        k,
        "--skip-helm",
        "-o",
        "json",
    ]
}

fn kubean_namespace(tb: &kk_live::testbed::Testbed, w: &World, dir: &Path) {
    let ns = dir.join("ns.yaml");
    std::fs::write(&ns, format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: kubean-{}}}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: default, namespace: default}}\n", w.name)).unwrap();
    let out = cli(
        tb,
        &[
            "apply",
            ns.to_str().unwrap(),
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn apply_builds_the_aws_side_and_a_second_apply_changes_nothing() {
    let Some(tb) = kk_live::testbed::require(&repo(), "apply: AWS side") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    let spec = spec(dir.path(), &w, &w.cp_sg);
    kubean_namespace(&tb, &w, dir.path());
    let s = spec.to_str().unwrap();

    // The plan lists every call and writes nothing.
    let mut plan = apply_args(&tb, s);
    plan.push("--dry-run=server");
    let out = cli(&tb, &plan);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for call in [
        "would call iam:CreateRole",
        "would call iam:PutRolePolicy",
        "would call iam:CreateInstanceProfile",
        "would call iam:AddRoleToInstanceProfile",
        "would call iam:CreatePolicy",
        "would call ec2:CreateTags",
        "would call ec2:AuthorizeSecurityGroupIngress",
    ] {
        assert!(stderr.contains(call), "plan lacks {call}: {stderr}");
    }
    assert!(
        aws(
            &tb,
            &format!(
                "print(len(iam.list_roles()['Roles']) and any(r['RoleName'] == 'KarpenterNodeRole-{}' for r in iam.list_roles()['Roles']))",
                w.name
            )
        ) == "False",
        "the plan created nothing"
    );

    let out = cli(&tb, &apply_args(&tb, s));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    let state = aws_state(&tb, &w);
    assert_eq!(
        state["profile"],
        serde_json::json!([format!("KarpenterNodeRole-{}", w.name)])
    );
    assert!(
        state["inline"]["JoinStoreAccess"].is_object()
            || state["inline"]["JoinStoreAccess"].is_string()
    );
    assert_eq!(state["tags"][&w.instance], "owned", "{state:#}");
    assert_eq!(state["tags"][&w.subnet], "shared", "{state:#}");
    assert_eq!(state["tags"][&w.node_sg], "shared", "{state:#}");
    assert!(
        state["ingress"].to_string().contains(&w.node_sg),
        "{state:#}"
    );
    assert_eq!(state["policies"].as_object().unwrap().len(), 2, "{state:#}");

    // Second apply: no AWS write, no resourceVersion changes.
    let (k8s_before, aws_before) = (apiserver_requests(&tb), moto_requests(&tb));
    let out = cli(&tb, &apply_args(&tb, s));
    let (k8s_calls, aws_calls) = (
        apiserver_requests(&tb) - k8s_before,
        moto_requests(&tb) - aws_before,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("aws: 0 write(s)"), "{stderr}");
    let second: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        resource_versions(&first, &tb),
        resource_versions(&second, &tb),
        "a no-op apply changed objects"
    );
    assert_eq!(aws_state(&tb, &w), state, "a no-op apply changed AWS state");
    eprintln!(
        "  no-op second apply: {k8s_calls} Kubernetes API requests (apiserver_request_total, testbed-wide), {aws_calls} AWS requests (moto log), {} objects",
        second.as_array().unwrap().len()
    );
}

#[test]
fn an_aws_refusal_half_way_exits_2_and_the_rerun_resumes() {
    let Some(tb) = kk_live::testbed::require(&repo(), "apply: AWS refusal half-way") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    kubean_namespace(&tb, &w, dir.path());
    // A control-plane security group that does not exist: EC2 refuses the last AWS step,
    // after the IAM steps are done.
    let wrong = spec(dir.path(), &w, "sg-0000000000000dead");
    let out = cli(&tb, &apply_args(&tb, wrong.to_str().unwrap()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for says in [
        "API port from the node security group",
        "applied: iam:CreateRole",
        "not applied:",
        "Kubernetes objects",
        "re-running apply resumes",
    ] {
        assert!(stderr.contains(says), "should say {says:?}: {stderr}");
    }
    // Fixed spec, re-run: the IAM work is not repeated, the rest is done.
    let right = spec(dir.path(), &w, &w.cp_sg);
    let out = cli(&tb, &apply_args(&tb, right.to_str().unwrap()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("called iam:"),
        "IAM steps repeated: {stderr}"
    );
    assert!(
        stderr.contains("called ec2:AuthorizeSecurityGroupIngress"),
        "{stderr}"
    );
}
