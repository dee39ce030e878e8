//! `apply` killed by SIGKILL after each of its steps in turn (issue #30): the AWS side, the
//! management cluster's namespaces and objects, the new cluster's, the inventory and each
//! prune. After every kill the next `apply` must converge to exactly the state an
//! uninterrupted apply reaches from the same start: every object `apply` owns compared whole
//! (spec, labels, annotations, owner fields; not a count), and the whole AWS state it manages.
//!
//! Helm is not among the steps: the charts' registries are out of the lab's reach, so the lab
//! runs Karpenter as a process and applies with `--skip-helm` (docs/internals/faults.md).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::harness::{Lab, live, repo};

/// What `undo` plants for the prune step: objects an earlier apply recorded and the bundle no
/// longer has.
const STALE: [&str; 2] = ["kk-fault-stale-a", "kk-fault-stale-b"];
const LABEL: &str = "app.kubernetes.io/managed-by=kubean-karpenter";

/// The AWS state `apply` manages for the lab's cluster, as one JSON document: the node role
/// (trust policy, tags, managed and inline policies), every instance profile, every
/// customer-managed policy (default document, version count), the subnets', security groups'
/// and Kubean instances' tags, every security group's ingress rules, and the interruption
/// queue and rules with their targets and tags.
const AWS_STATE: &str = r#"
iam = boto3.client('iam')
sqs = boto3.client('sqs')
events = boto3.client('events')
def srt(tags):
    return sorted([t['Key'], t['Value']] for t in (tags or []))
state = {'roles': {}, 'profiles': {}, 'policies': {}, 'subnets': {}, 'groups': {},
         'instances': {}, 'queues': {}, 'rules': {}}
for r in iam.list_roles()['Roles']:
    n = r['RoleName']
    state['roles'][n] = {
        'trust': r['AssumeRolePolicyDocument'],
        'tags': srt(iam.list_role_tags(RoleName=n)['Tags']),
        'managed': sorted(p['PolicyArn'] for p in iam.list_attached_role_policies(RoleName=n)['AttachedPolicies']),
        'inline': {p: iam.get_role_policy(RoleName=n, PolicyName=p)['PolicyDocument']
                   for p in iam.list_role_policies(RoleName=n)['PolicyNames']},
    }
for p in iam.list_instance_profiles()['InstanceProfiles']:
    state['profiles'][p['InstanceProfileName']] = sorted(r['RoleName'] for r in p['Roles'])
for p in iam.list_policies(Scope='Local')['Policies']:
    versions = iam.list_policy_versions(PolicyArn=p['Arn'])['Versions']
    default = iam.get_policy_version(PolicyArn=p['Arn'], VersionId=p['DefaultVersionId'])
    state['policies'][p['PolicyName']] = {'document': default['PolicyVersion']['Document'],
                                          'versions': len(versions),
                                          'attachments': p['AttachmentCount']}
for s in ec2.describe_subnets()['Subnets']:
    state['subnets'][s['SubnetId']] = srt(s.get('Tags'))
for g in ec2.describe_security_groups()['SecurityGroups']:
    rules = []
    for p in g['IpPermissions']:
        for pair in p.get('UserIdGroupPairs', []):
            rules.append([p['IpProtocol'], p.get('FromPort'), p.get('ToPort'), pair['GroupId']])
        for r in p.get('IpRanges', []):
            rules.append([p['IpProtocol'], p.get('FromPort'), p.get('ToPort'), r['CidrIp']])
    state['groups'][g['GroupId']] = {'tags': srt(g.get('Tags')), 'ingress': sorted(rules, key=str)}
for page in ec2.get_paginator('describe_instances').paginate(
        Filters=[{'Name': 'instance-state-name', 'Values': ['pending', 'running']}]):
    for r in page['Reservations']:
        for i in r['Instances']:
            tags = srt(i.get('Tags'))
            if not any(k == 'karpenter.sh/nodepool' for k, _ in tags):
                state['instances'][i['InstanceId']] = tags
for url in sqs.list_queues().get('QueueUrls', []):
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes']
    for volatile in ['CreatedTimestamp', 'LastModifiedTimestamp', 'ApproximateNumberOfMessages',
                     'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed']:
        attrs.pop(volatile, None)
    state['queues'][url] = {'attributes': attrs,
                            'tags': sqs.list_queue_tags(QueueUrl=url).get('Tags', {})}
for r in events.list_rules()['Rules']:
    state['rules'][r['Name']] = {
        'pattern': json.loads(r.get('EventPattern', 'null')),
        'state': r['State'],
        'targets': sorted([t['Id'], t['Arn']] for t in events.list_targets_by_rule(Rule=r['Name'])['Targets']),
        'tags': srt(events.list_tags_for_resource(ResourceARN=r['Arn'])['Tags']),
    }
print(json.dumps(state, sort_keys=True, default=str))
"#;

/// The Kubernetes objects `apply` owns: every object carrying our managed-by label, of every
/// kind either inventory records, keyed `kind namespace/name`, without what the apiserver and
/// controllers set (uid, resourceVersion, timestamps, managed fields, status, a re-created
/// Service's cluster IP, the Deployment controller's revision).
fn kube_state(lab: &Lab, kinds: &[(String, String)]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (api_version, kind) in kinds {
        let api: Api<DynamicObject> =
            Api::all_with(lab.client.clone(), &resource(api_version, kind));
        let list = lab
            .rt
            .block_on(api.list(&ListParams::default().labels(LABEL)))
            .unwrap_or_else(|e| panic!("list {kind}: {e}"));
        // What controllers made from our objects (a Deployment's pods) carries our label too.
        for object in list
            .items
            .into_iter()
            .filter(|o| o.metadata.owner_references.is_none())
        {
            let key = format!(
                "{kind} {}/{}",
                object.metadata.namespace.as_deref().unwrap_or("-"),
                object.metadata.name.as_deref().unwrap_or_default()
            );
            let mut value = serde_json::to_value(&object).unwrap();
            let metadata = value["metadata"].as_object_mut().unwrap();
            for volatile in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "managedFields",
                "generation",
            ] {
                metadata.remove(volatile);
            }
            if let Some(annotations) = metadata
                .get_mut("annotations")
                .and_then(Value::as_object_mut)
            {
                annotations.remove("deployment.kubernetes.io/revision");
            }
            let object = value.as_object_mut().unwrap();
            object.remove("status");
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                if kind == "Service" {
                    spec.remove("clusterIP");
                    spec.remove("clusterIPs");
                }
                if kind == "Pod" {
                    forget_token_volume(spec);
                }
            }
            out.insert(key, value);
        }
    }
    out
}

/// A pod's service-account token volume: its name is drawn afresh for each pod the apiserver
/// admits.
fn forget_token_volume(spec: &mut serde_json::Map<String, Value>) {
    let generated = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain(|v| !generated(v));
    }
    for container in spec
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(mounts) = container
            .get_mut("volumeMounts")
            .and_then(Value::as_array_mut)
        {
            mounts.retain(|m| !generated(m));
        }
    }
}

/// The inventories' records: `apiVersion kind namespace name` lines.
fn inventory(lab: &Lab) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(lab.client.clone(), "kube-system");
    let list = lab
        .rt
        .block_on(api.list(&ListParams::default().labels(LABEL)))
        .unwrap();
    list.items
        .into_iter()
        .filter(|cm| {
            cm.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("kubean-karpenter-applied-"))
        })
        .flat_map(|cm| {
            cm.data
                .unwrap_or_default()
                .remove("objects")
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The object an inventory line (`apiVersion kind namespace name`) records: its API, kind and
/// name.
fn recorded<'a>(client: &kube::Client, line: &'a str) -> (Api<DynamicObject>, &'a str, &'a str) {
    let [api_version, kind, namespace, name] = line.split(' ').collect::<Vec<_>>()[..] else {
        panic!("inventory line {line:?}");
    };
    let r = resource(api_version, kind);
    let api = match namespace {
        "-" => Api::all_with(client.clone(), &r),
        ns => Api::namespaced_with(client.clone(), ns, &r),
    };
    (api, kind, name)
}

/// Namespaces (their deletion takes everything in them) and CRDs stay across undos.
fn kept(kind: &str) -> bool {
    kind == "Namespace" || kind == "CustomResourceDefinition"
}

/// Back to the start every run begins from: every recorded object but the [`kept`] ones
/// deleted (finalizers dropped: nothing runs that would remove them), the inventories replaced by one
/// that records only the stale objects, which exist again; and the AWS side partly undone so
/// that several AWS steps have writes to make.
fn undo(lab: &mut Lab, records: &[String], aws_undo: &str) {
    for line in records {
        let (api, kind, name) = recorded(&lab.client, line);
        if kept(kind) {
            continue;
        }
        lab.rt.block_on(async {
            let unfinalized = json!({"metadata": {"finalizers": null}});
            let _ = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized))
                .await;
            let _ = api.delete(name, &DeleteParams::background()).await;
        });
    }
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(lab.client.clone(), "kube-system");
    lab.rt.block_on(async {
        for name in [
            "kubean-karpenter-applied-lab",
            "kubean-karpenter-applied-lab-kubean",
        ] {
            let _ = configmaps.delete(name, &DeleteParams::default()).await;
        }
    });
    // Deletions of objects with dependents finish in the background: wait until none is left.
    lab.wait(
        "every deleted object gone",
        std::time::Duration::from_secs(60),
        |l| {
            let left = records.iter().filter(|line| {
                let (api, kind, name) = recorded(&l.client, line);
                !kept(kind) && l.rt.block_on(api.get_opt(name)).ok().flatten().is_some()
            });
            (left.count() == 0).then_some(())
        },
    );
    let mut stale_lines = Vec::new();
    for name in STALE {
        let stale = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "kube-system",
                         "labels": {"app.kubernetes.io/managed-by": "kubean-karpenter"}},
            "data": {"planted": "by lab_apply_killed"}});
        lab.server_side_apply(&configmaps, name, &stale);
        stale_lines.push(format!("v1 ConfigMap kube-system {name}"));
    }
    let inventory = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubean-karpenter-applied-lab", "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/managed-by": "kubean-karpenter",
                                "kubean-karpenter.io/cluster": "lab"}},
        "data": {"objects": stale_lines.join("\n")}});
    lab.server_side_apply(&configmaps, "kubean-karpenter-applied-lab", &inventory);
    lab.aws(aws_undo);
}

/// Runs `apply` with `args`; with `kill_at` Some(n), kills it with SIGKILL as soon as its n-th
/// progress line (0-based) has appeared. Returns the progress lines seen and whether the kill
/// ended it (false: it exited by itself first).
fn apply(lab: &Lab, args: &[&str], kill_at: Option<usize>) -> (Vec<String>, bool) {
    let mut child = lab
        .command(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = Vec::new();
    let mut killed = false;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        lines.push(line);
        if kill_at == Some(lines.len() - 1) {
            killed = child.kill().is_ok();
            break;
        }
    }
    let status = child.wait().unwrap();
    match kill_at {
        None => assert!(status.success(), "apply {args:?}:\n{}", lines.join("\n")),
        Some(_) => killed = killed && status.signal() == Some(9),
    }
    (lines, killed)
}

/// Where a step begins: a progress line whose "who: what" differs from the line before
/// (`aws: called` → `aws: 5 write(s)` → `new cluster: checking` → `new cluster: applied` …).
fn step_starts(lines: &[String]) -> Vec<usize> {
    let key = |l: &str| {
        let (who, rest) = l.split_once(": ").unwrap_or((l, ""));
        format!("{who}: {}", rest.split(' ').next().unwrap_or(""))
    };
    (0..lines.len().saturating_sub(1))
        .filter(|&i| i == 0 || key(&lines[i]) != key(&lines[i - 1]))
        .collect()
}

fn state(lab: &Lab, kinds: &[(String, String)]) -> Value {
    json!({
        "kubernetes": kube_state(lab, kinds),
        "inventory": inventory(lab),
        "aws": serde_json::from_str::<Value>(&lab.aws(AWS_STATE)).unwrap(),
    })
}

/// Each difference as `path: reference -> now`.
fn differences(path: &str, reference: &Value, now: &Value, out: &mut Vec<String>) {
    match (reference, now) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                differences(
                    &format!("{path}.{key}"),
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if reference != now => out.push(format!("{path}: {reference} -> {now}")),
        _ => {}
    }
}

#[test]
fn apply_killed_after_each_step_converges_on_the_next_apply() {
    let Some(mut lab) = Lab::require("faults: apply killed after each of its steps") else {
        return;
    };
    // A quiet cluster: no controller of ours or Karpenter's rewrites the objects under test
    // (the next test's deploy starts them again).
    // The CSR approver is a process of its own: running, it takes its Lease back within seconds
    // of the undo, so the comparison raced it.
    for daemon in ["karpenter", "ccm", "controller", "csr-approver"] {
        let _ = lab
            .command(repo().join("testbed/lab"))
            .args(["signal", daemon, "KILL"])
            .output();
    }
    // Kubean's own namespace exists wherever Kubean is installed (as `Lab::deploy` makes it).
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(lab.client.clone());
    lab.server_side_apply(
        &namespaces,
        "kubean-system",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubean-system"}}),
    );
    let (spec, _bundle) = lab.render(|s| s);
    let kubeconfig = lab.var("KUBECONFIG");
    let args = [
        "apply",
        spec.to_str().unwrap(),
        "--mgmt-kubeconfig",
        &kubeconfig,
        "--skip-helm",
        "--prune",
    ];
    let aws_undo = aws_undo(&spec);
    // Records to undo: whatever an apply of this bundle creates.
    apply(&lab, &args, None);
    let records = inventory(&lab);
    let kinds: Vec<(String, String)> = {
        let mut k: Vec<(String, String)> = records
            .iter()
            .map(|l| {
                let p: Vec<&str> = l.split(' ').collect();
                (p[0].to_owned(), p[1].to_owned())
            })
            .collect();
        k.push(("v1".into(), "ConfigMap".into()));
        k.sort();
        k.dedup();
        k
    };
    undo(&mut lab, &records, &aws_undo);
    let (reference_lines, _) = apply(&lab, &args, None);
    let reference = state(&lab, &kinds);
    assert!(
        STALE.iter().all(|s| reference_lines
            .iter()
            .any(|l| l.contains(s) && l.ends_with("pruned"))),
        "the uninterrupted apply pruned the planted objects:\n{}",
        reference_lines.join("\n")
    );
    // Each cluster's record (the lab is both) lists what was applied there, and all of it is
    // still there: neither pass's prune took the other's objects.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(lab.client.clone(), "kube-system");
    for name in [
        "kubean-karpenter-applied-lab",
        "kubean-karpenter-applied-lab-kubean",
    ] {
        let found = lab.rt.block_on(configmaps.get_opt(name)).unwrap();
        assert!(
            found.is_some_and(|cm| cm.data.is_some_and(|d| !d["objects"].is_empty())),
            "no inventory {name} after the uninterrupted apply"
        );
    }
    for line in &records {
        let (api, _, name) = recorded(&lab.client, line);
        assert!(
            lab.rt.block_on(api.get_opt(name)).unwrap().is_some(),
            "{line} is recorded but gone after the uninterrupted apply"
        );
    }
    let kill_points = step_starts(&reference_lines);
    live(&format!(
        "   {} progress lines, {} kill points",
        reference_lines.len(),
        kill_points.len()
    ));
    let mut killed = 0;
    for at in &kill_points {
        undo(&mut lab, &records, &aws_undo);
        let (seen, was_killed) = apply(&lab, &args, Some(*at));
        killed += usize::from(was_killed);
        let (after, _) = apply(&lab, &args, None);
        let now = state(&lab, &kinds);
        let mut diffs = Vec::new();
        differences("", &reference, &now, &mut diffs);
        assert!(
            diffs.is_empty(),
            "killed after {:?}; the next apply did not converge to the uninterrupted state:\n{}\n\nthe killed apply's progress:\n{}\n\nthe next apply's:\n{}",
            reference_lines[*at],
            diffs.join("\n"),
            seen.join("\n"),
            after.join("\n")
        );
        live(&format!(
            "   killed after {:?}: converged",
            reference_lines[*at]
        ));
    }
    // A kill that came after the process had exited proves nothing: nearly all must land.
    assert!(
        killed + 1 >= kill_points.len(),
        "only {killed} of {} kills landed before apply exited",
        kill_points.len()
    );
}

/// Python that undoes what `apply` did on the lab's AWS side, step by step, so that each AWS
/// step has writes to make: the node role's policies, the instance profile, the cluster tag
/// on subnets, node security groups and Kubean instances, the API port rule on the control
/// plane's group, and the interruption rules and queue.
fn aws_undo(spec: &Path) -> String {
    let text = std::fs::read_to_string(spec).unwrap();
    let cluster = kk_spec::parse_spec(&text, "spec.yaml").unwrap().spec;
    let aws = &cluster.spec.aws;
    format!(
        r#"
iam = boto3.client('iam')
events = boto3.client('events')
sqs = boto3.client('sqs')
role, profile, tag = '{role}', '{profile}', 'kubernetes.io/cluster/{name}'
for n in iam.list_role_policies(RoleName=role)['PolicyNames']:
    iam.delete_role_policy(RoleName=role, PolicyName=n)
for p in iam.list_attached_role_policies(RoleName=role)['AttachedPolicies']:
    iam.detach_role_policy(RoleName=role, PolicyArn=p['PolicyArn'])
for p in iam.list_instance_profiles()['InstanceProfiles']:
    if p['InstanceProfileName'] == profile:
        for r in p['Roles']:
            iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=r['RoleName'])
        iam.delete_instance_profile(InstanceProfileName=profile)
tagged = [s['SubnetId'] for s in ec2.describe_subnets(Filters=[{{'Name': 'tag-key', 'Values': [tag]}}])['Subnets']]
tagged += [g['GroupId'] for g in ec2.describe_security_groups(Filters=[{{'Name': 'tag-key', 'Values': [tag]}}])['SecurityGroups']]
tagged += [i['InstanceId'] for r in ec2.describe_instances(Filters=[{{'Name': 'tag-key', 'Values': [tag]}}])['Reservations'] for i in r['Instances']]
if tagged:
    ec2.delete_tags(Resources=tagged, Tags=[{{'Key': tag}}])
cp = ec2.describe_security_groups(GroupIds=['{control_plane}'])['SecurityGroups'][0]
api = [p for p in cp['IpPermissions'] if p.get('FromPort') == {port} and p.get('UserIdGroupPairs')]
if api:
    ec2.revoke_security_group_ingress(GroupId=cp['GroupId'], IpPermissions=api)
for r in events.list_rules()['Rules']:
    ids = [t['Id'] for t in events.list_targets_by_rule(Rule=r['Name'])['Targets']]
    if ids:
        events.remove_targets(Rule=r['Name'], Ids=ids)
    events.delete_rule(Name=r['Name'])
for url in sqs.list_queues().get('QueueUrls', []):
    sqs.delete_queue(QueueUrl=url)
"#,
        role = aws.node_role,
        profile = aws.node_instance_profile,
        name = cluster.metadata.name,
        control_plane = aws.control_plane_security_group_id,
        port = cluster.spec.api_server.port,
    )
}
