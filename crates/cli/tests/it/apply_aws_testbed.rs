//! `apply`'s AWS side against the testbed's moto and apiserver: the first apply creates the
//! node role, trust, instance profile, policies, tags, the API port rule and the EFA rule; a second apply
//! makes no AWS write and changes no resourceVersion (the call counts are printed as the
//! figure); a refusal half-way exits 2 naming what was and was not done, and the re-run
//! resumes without repeating a write. The interruption queue and rules: created, left alone
//! by a second apply, a changed queue policy corrected, dropped ones pruned; doctor fails with
//! a fix on a deleted rule and on a wrong queue policy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kk_testkit::repo;
use serde_json::Value;

use crate::cli;

/// Python with boto3 against the testbed's moto.
fn aws(tb: &kk_testkit::testbed::Testbed, script: &str) -> String {
    let out = Command::new("python3")
        .envs(&tb.env)
        .arg("-c")
        .arg(format!(
            "import boto3, json\nec2 = boto3.client('ec2')\niam = boto3.client('iam')\nsqs = boto3.client('sqs')\nevents = boto3.client('events')\n{script}"
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
    vpc: String,
    node_sg: String,
    cp_sg: String,
    subnet: String,
    instance: String,
    ip: String,
}

/// A unique cluster in moto: a node security group, a control-plane one, a subnet and a
/// "Kubean-built" instance.
fn world(tb: &kk_testkit::testbed::Testbed) -> World {
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
print(json.dumps([n, nodes, cp, subnet, i['InstanceId'], i['PrivateIpAddress'], vpc]))",
    );
    let v: Vec<String> = serde_json::from_str(&out).unwrap();
    World {
        name: v[0].clone(),
        node_sg: v[1].clone(),
        cp_sg: v[2].clone(),
        subnet: v[3].clone(),
        instance: v[4].clone(),
        ip: v[5].clone(),
        vpc: v[6].clone(),
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
fn aws_state(tb: &kk_testkit::testbed::Testbed, w: &World) -> Value {
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
 'nodes': {{k: ec2.describe_security_groups(GroupIds=['{sg}'])['SecurityGroups'][0][k] for k in ['IpPermissions', 'IpPermissionsEgress']}},
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
fn apiserver_requests(tb: &kk_testkit::testbed::Testbed) -> f64 {
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
fn moto_requests(tb: &kk_testkit::testbed::Testbed) -> usize {
    let log = tb.kubeconfig.parent().unwrap().join("logs/moto.log");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

fn resource_versions(list: &Value, tb: &kk_testkit::testbed::Testbed) -> BTreeMap<String, String> {
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

fn apply_args<'a>(tb: &'a kk_testkit::testbed::Testbed, spec: &'a str) -> Vec<&'a str> {
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

/// Runs `apply` with the testbed's flags (plus `extra`), asserts it succeeded, and returns
/// what it printed on stderr.
fn apply_ok(tb: &kk_testkit::testbed::Testbed, spec: &str, extra: &[&str]) -> String {
    let out = cli(tb, &[apply_args(tb, spec).as_slice(), extra].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "apply failed: {stderr}");
    stderr
}

fn kubean_namespace(tb: &kk_testkit::testbed::Testbed, w: &World, dir: &Path) {
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
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: AWS side") else {
        return;
    };
    let _turn = crate::testbed_apply_turn();
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
        "would call ec2:AuthorizeSecurityGroupEgress",
        "would call sqs:CreateQueue",
        "would call events:PutRule",
        "would call events:PutTargets",
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
    // The example's training pool uses EFA: the node security group admits all traffic from
    // itself, both ways.
    for direction in ["IpPermissions", "IpPermissionsEgress"] {
        let rules = state["nodes"][direction].as_array().unwrap();
        assert!(
            rules.iter().any(|r| r["IpProtocol"] == "-1"
                && r["UserIdGroupPairs"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|g| g["GroupId"] == w.node_sg.as_str()))),
            "{direction}: {state:#}"
        );
    }

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
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: AWS refusal half-way") else {
        return;
    };
    let _turn = crate::testbed_apply_turn();
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
    let stderr = apply_ok(&tb, right.to_str().unwrap(), &[]);
    assert!(
        !stderr.contains("called iam:"),
        "IAM steps repeated: {stderr}"
    );
    assert!(
        stderr.contains("called ec2:AuthorizeSecurityGroupIngress"),
        "{stderr}"
    );
}

/// The interruption queue (attributes, tags) and the rules named after it, as moto holds them.
fn interruption_state(tb: &kk_testkit::testbed::Testbed, queue: &str) -> Value {
    let out = aws(
        tb,
        &format!(
            "q = '{queue}'
url = sqs.get_queue_url(QueueName=q)['QueueUrl']
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes']
rules = {{}}
for r in events.list_rules(NamePrefix=q + '-')['Rules']:
    rules[r['Name']] = {{'pattern': json.loads(r['EventPattern']), 'state': r['State'], 'targets': [t['Arn'] for t in events.list_targets_by_rule(Rule=r['Name'])['Targets']]}}
print(json.dumps({{'retention': a['MessageRetentionPeriod'], 'sse': a.get('SqsManagedSseEnabled'), 'policy': json.loads(a['Policy']), 'arn': a['QueueArn'], 'tags': sqs.list_queue_tags(QueueUrl=url).get('Tags', {{}}), 'rules': rules}}, sort_keys=True))"
        ),
    );
    serde_json::from_str(&out).unwrap()
}

#[test]
fn apply_creates_the_interruption_queue_and_rules_and_corrects_a_changed_policy() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: interruption queue") else {
        return;
    };
    let _turn = crate::testbed_apply_turn();
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    let spec = spec(dir.path(), &w, &w.cp_sg);
    kubean_namespace(&tb, &w, dir.path());
    let s = spec.to_str().unwrap();
    let stderr = apply_ok(&tb, s, &[]);
    for call in [
        "called sqs:CreateQueue",
        "called events:PutRule",
        "called events:PutTargets",
    ] {
        assert!(stderr.contains(call), "apply lacks {call}: {stderr}");
    }
    // The queue is named after the cluster (the example allows spot and names no queue).
    let state = interruption_state(&tb, &w.name);
    assert_eq!(state["retention"], "300", "{state:#}");
    assert_eq!(state["sse"], "true", "{state:#}");
    assert_eq!(
        state["tags"]["kubean-karpenter.io/cluster"],
        w.name.as_str()
    );
    let rules = state["rules"].as_object().unwrap();
    assert_eq!(rules.len(), 5, "{state:#}");
    let mut detail_types: Vec<&str> = Vec::new();
    for (name, rule) in rules {
        assert_eq!(rule["state"], "ENABLED", "{name}");
        // The spec's account (moto runs as its default one and delivers by queue name).
        assert_eq!(
            rule["targets"],
            serde_json::json!([format!("arn:aws:sqs:us-east-1:111122223333:{}", w.name)]),
            "{name}"
        );
        detail_types.push(rule["pattern"]["detail-type"][0].as_str().unwrap());
    }
    detail_types.sort();
    assert_eq!(
        detail_types,
        [
            "AWS Health Event",
            "EC2 Capacity Reservation Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Instance State-change Notification",
            "EC2 Spot Instance Interruption Warning",
        ]
    );
    // EventBridge delivers a spot warning through the rule into the queue (moto applies the
    // pattern); nothing is received here, only counted.
    let delivered = aws(
        &tb,
        &format!(
            "events.put_events(Entries=[{{'Source': 'aws.ec2', 'DetailType': 'EC2 Spot Instance Interruption Warning', 'Detail': json.dumps({{'instance-id': '{i}', 'instance-action': 'terminate'}})}}])
url = sqs.get_queue_url(QueueName='{q}')['QueueUrl']
print(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['ApproximateNumberOfMessages'])['Attributes']['ApproximateNumberOfMessages'])",
            i = w.instance,
            q = w.name
        ),
    );
    assert_eq!(delivered, "1");

    // Second apply: nothing written.
    let stderr = apply_ok(&tb, s, &[]);
    assert!(stderr.contains("aws: 0 write(s)"), "{stderr}");

    // Someone loosens the policy (no TLS deny, EventBridge gone): apply puts it back.
    aws(
        &tb,
        &format!(
            "url = sqs.get_queue_url(QueueName='{q}')['QueueUrl']
sqs.set_queue_attributes(QueueUrl=url, Attributes={{'Policy': json.dumps({{'Version': '2012-10-17', 'Statement': [{{'Effect': 'Allow', 'Principal': '*', 'Action': 'sqs:*', 'Resource': '*'}}]}})}})",
            q = w.name
        ),
    );
    let stderr = apply_ok(&tb, s, &[]);
    assert!(
        stderr.contains(&format!("called sqs:SetQueueAttributes {} Policy", w.name)),
        "{stderr}"
    );
    assert!(stderr.contains("aws: 1 write(s)"), "{stderr}");
    assert_eq!(interruption_state(&tb, &w.name)["policy"], state["policy"]);

    // The spec turns the queue off: apply alone keeps it; with --prune it goes, rules first.
    let off = std::fs::read_to_string(&spec).unwrap().replace(
        "    isolatedVPC: false\n",
        "    interruptionQueue: \"\"\n    isolatedVPC: false\n",
    );
    std::fs::write(&spec, off).unwrap();
    let stderr = apply_ok(&tb, s, &[]);
    assert!(!stderr.contains("DeleteQueue"), "{stderr}");
    let stderr = apply_ok(&tb, s, &["--prune"]);
    assert!(
        stderr.contains(&format!("called sqs:DeleteQueue {}", w.name)),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("called events:DeleteRule").count(),
        5,
        "{stderr}"
    );
    let left = aws(
        &tb,
        &format!(
            "print(len(events.list_rules(NamePrefix='{q}-')['Rules']), len(sqs.list_queues(QueueNamePrefix='{q}').get('QueueUrls', [])))",
            q = w.name
        ),
    );
    assert_eq!(left, "0 0");
}

/// doctor's verdict on one check, from `doctor -o json`.
fn doctor_check(tb: &kk_testkit::testbed::Testbed, spec: &str, id: &str) -> Value {
    let out = cli(
        tb,
        &[
            "doctor",
            spec,
            "--kubeconfig",
            tb.kubeconfig.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}: {report:#}"))
        .clone()
}

#[test]
fn doctor_fails_with_a_fix_on_a_deleted_rule_and_on_a_wrong_queue_policy() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "doctor: interruption") else {
        return;
    };
    let _turn = crate::testbed_apply_turn();
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    let spec = spec(dir.path(), &w, &w.cp_sg);
    kubean_namespace(&tb, &w, dir.path());
    let s = spec.to_str().unwrap();
    apply_ok(&tb, s, &[]);
    for id in [
        "interruption-queue",
        "interruption-queue-policy",
        "interruption-rules",
        "interruption-backlog",
    ] {
        let c = doctor_check(&tb, s, id);
        assert_eq!(c["status"], "ok", "{c:#}");
    }

    // A rule deleted by hand: the rules check fails, naming it, with the fix.
    aws(
        &tb,
        &format!(
            "events.remove_targets(Rule='{q}-spot', Ids=['kubean-karpenter-interruption-queue'])
events.delete_rule(Name='{q}-spot')",
            q = w.name
        ),
    );
    let c = doctor_check(&tb, s, "interruption-rules");
    assert_eq!(c["status"], "fail", "{c:#}");
    assert!(
        c["evidence"].to_string().contains(&format!(
            "rule {}-spot (EC2 Spot Instance Interruption Warning) does not exist",
            w.name
        )),
        "{c:#}"
    );
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("kubean-karpenter apply"),
        "{c:#}"
    );

    // A policy that lets anyone in over plaintext and never names EventBridge.
    aws(
        &tb,
        &format!(
            "url = sqs.get_queue_url(QueueName='{q}')['QueueUrl']
sqs.set_queue_attributes(QueueUrl=url, Attributes={{'Policy': json.dumps({{'Version': '2012-10-17', 'Statement': [{{'Effect': 'Allow', 'Principal': {{'Service': 'sqs.amazonaws.com'}}, 'Action': 'sqs:SendMessage', 'Resource': '*'}}]}})}})",
            q = w.name
        ),
    );
    let c = doctor_check(&tb, s, "interruption-queue-policy");
    assert_eq!(c["status"], "fail", "{c:#}");
    let evidence = c["evidence"].to_string();
    assert!(evidence.contains("events.amazonaws.com"), "{c:#}");
    assert!(evidence.contains("aws:SecureTransport"), "{c:#}");
    assert!(
        c["fix"].as_str().unwrap().contains("queue-policy.json"),
        "{c:#}"
    );

    // apply repairs both; doctor is content again.
    apply_ok(&tb, s, &[]);
    for id in ["interruption-queue-policy", "interruption-rules"] {
        assert_eq!(doctor_check(&tb, s, id)["status"], "ok", "{id}");
    }
}

/// Finding #9, performed on moto: another cluster already owns the node role the spec names
/// (tagged `kubean-karpenter.io/cluster=<other>`, its own trust and inline policy). apply must
/// refuse with exit 2, naming the owner, and leave the role exactly as it was; an untagged
/// role is claimed (tagged for this cluster), and then the other cluster's apply is refused.
#[test]
fn apply_refuses_a_node_role_tagged_for_another_cluster() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "apply: a foreign node role") else {
        return;
    };
    let _turn = crate::testbed_apply_turn();
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    kubean_namespace(&tb, &w, dir.path());
    let role = format!("KarpenterNodeRole-{}", w.name);
    let snapshot = |tb: &kk_testkit::testbed::Testbed| {
        aws(
            tb,
            &format!(
                "r = iam.get_role(RoleName='{role}')['Role']
print(json.dumps({{'trust': r['AssumeRolePolicyDocument'], 'tags': r.get('Tags', []),
  'inline': sorted(iam.list_role_policies(RoleName='{role}')['PolicyNames'])}}, sort_keys=True, default=str))"
            ),
        )
    };
    aws(
        &tb,
        &format!(
            "iam.create_role(RoleName='{role}', AssumeRolePolicyDocument=json.dumps({{'Version': '2012-10-17', 'Statement': [{{'Effect': 'Allow', 'Principal': {{'Service': 'ec2.amazonaws.com'}}, 'Action': 'sts:AssumeRole'}}]}}),
  Tags=[{{'Key': 'kubean-karpenter.io/cluster', 'Value': 'other-cluster'}}])
iam.put_role_policy(RoleName='{role}', PolicyName='TheirJoinStore', PolicyDocument=json.dumps({{'Version': '2012-10-17', 'Statement': [{{'Effect': 'Allow', 'Action': 'ssm:GetParameter', 'Resource': '*'}}]}}))"
        ),
    );
    let before = snapshot(&tb);
    let spec = spec(dir.path(), &w, &w.cp_sg);
    let out = cli(&tb, &apply_args(&tb, spec.to_str().unwrap()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tagged kubean-karpenter.io/cluster=other-cluster"),
        "{stderr}"
    );
    assert!(!stderr.contains("called iam:"), "{stderr}");
    assert_eq!(
        snapshot(&tb),
        before,
        "apply changed another cluster's role"
    );

    // An untagged role of the same name: claimed for this cluster, then refused to another.
    aws(
        &tb,
        &format!("iam.untag_role(RoleName='{role}', TagKeys=['kubean-karpenter.io/cluster'])"),
    );
    let stderr = apply_ok(&tb, spec.to_str().unwrap(), &[]);
    assert!(stderr.contains("called iam:TagRole"), "{stderr}");
    let tags = aws(
        &tb,
        &format!("print(iam.get_role(RoleName='{role}')['Role']['Tags'])"),
    );
    assert!(tags.contains(&w.name), "{tags}");
}

/// `karpenter.isolatedVPC: true`: doctor names each endpoint the VPC lacks (or has of the wrong
/// type) with the command that creates it, and is content once they all exist (moto's EC2).
#[test]
fn doctor_names_the_missing_endpoints_of_an_isolated_vpc() {
    let Some(tb) = kk_testkit::testbed::require(&repo(), "doctor: isolated VPC endpoints") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let w = world(&tb);
    let path = spec(dir.path(), &w, &w.cp_sg);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("isolatedVPC: false", "isolatedVPC: true")
        .replace("vpc-0a1b2c3d4e5f60718", &w.vpc);
    std::fs::write(&path, text).unwrap();
    let s = path.to_str().unwrap();
    let region = "us-east-1";
    let service = |svc: &str| format!("com.amazonaws.{region}.{svc}");

    // Nothing yet: every endpoint is named, sqs too (the queue is on for the spot pools).
    let c = doctor_check(&tb, s, "isolated-vpc-endpoints");
    assert_eq!(c["status"], "fail", "{c:#}");
    let evidence = c["evidence"].to_string();
    for svc in ["ec2", "ecr.api", "ecr.dkr", "s3", "sts", "ssm", "sqs"] {
        assert!(
            evidence.contains(&format!("no endpoint for {} in {}", service(svc), w.vpc)),
            "{svc}: {c:#}"
        );
    }
    assert!(
        c["fix"]
            .to_string()
            .contains(&format!("aws ec2 create-vpc-endpoint --vpc-id {}", w.vpc)),
        "{c:#}"
    );

    // All but ecr.dkr, and S3 as an interface instead of the gateway.
    let create = |svc: &str, kind: &str| {
        aws(
            &tb,
            &format!(
                "print(ec2.create_vpc_endpoint(VpcId='{}', ServiceName='{}', VpcEndpointType='{kind}')['VpcEndpoint']['VpcEndpointId'])",
                w.vpc,
                service(svc)
            ),
        )
    };
    for svc in ["ec2", "ecr.api", "sts", "ssm", "sqs"] {
        create(svc, "Interface");
    }
    let s3_interface = create("s3", "Interface");
    let c = doctor_check(&tb, s, "isolated-vpc-endpoints");
    assert_eq!(c["status"], "fail", "{c:#}");
    let evidence = c["evidence"].to_string();
    assert!(
        evidence.contains(&format!("no endpoint for {}", service("ecr.dkr"))),
        "{c:#}"
    );
    assert!(
        evidence.contains(&format!(
            "the endpoint for {} is of type Interface, not Gateway",
            service("s3")
        )),
        "{c:#}"
    );
    assert!(
        !evidence.contains(&format!("no endpoint for {}", service("ec2"))),
        "{c:#}"
    );

    // Mended: doctor is content.
    aws(
        &tb,
        &format!("ec2.delete_vpc_endpoints(VpcEndpointIds=['{s3_interface}'])"),
    );
    create("s3", "Gateway");
    create("ecr.dkr", "Interface");
    let c = doctor_check(&tb, s, "isolated-vpc-endpoints");
    assert_eq!(c["status"], "ok", "{c:#}");
}
