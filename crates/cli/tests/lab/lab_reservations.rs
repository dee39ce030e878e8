//! Capacity reservations and EFA on the lab (`testbed/lab up`), with the real Karpenter.
//!
//! moto 5.2.1 has no capacity-reservation API: `testbed/moto_seeded.py`
//! (`install_capacity_reservations`) adds what Karpenter calls — CreateCapacityReservation for
//! the test, DescribeCapacityReservations with the filters Karpenter sends, CreateFleet honouring
//! the launch template's reservation target (the instance gets the reservation's id and takes a
//! slot; a full reservation refuses with ReservationCapacityExceeded), and TerminateInstances
//! giving the slot back. EFA hardware cannot exist here: the lab's kubelet is a stand-in that
//! advertises `vpc.amazonaws.com/efa` only while the EFA device plugin runs on the node, one per
//! EFA interface the launch attached (testbed/cmd/lab-kubelet).

use crate::harness as lab;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use lab::{Lab, is_true};
use serde_json::{Value, json};

const MIN: Duration = Duration::from_secs(60);
const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// The tag this file's reservations carry, so a test finds (and cancels) what an earlier,
/// interrupted run left in moto.
const TAG: &str = "kubean-karpenter.io/lab-test";
/// The lab's CPU AMI (lab-kit/amis.json: kubeadm-ready).
const CPU_AMI: &str = "ami-0c0ffee0c0ffee001";
const PAUSE: &str = "public.ecr.aws/eks-distro/kubernetes/pause:3.7";

/// The lab spec with one more pool appended (its YAML, indented as under `pools:`).
fn with_pool(spec: String, pool: &str) -> String {
    assert!(
        spec.trim_end().ends_with("maxPods: 110"),
        "the lab spec's last pool changed; append the test pool differently"
    );
    format!("{}\n{pool}", spec.trim_end())
}

fn label<'a>(labels: Option<&'a std::collections::BTreeMap<String, String>>, key: &str) -> &'a str {
    labels
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or("")
}

fn node_named(lab: &Lab, name: &str) -> Option<Node> {
    lab.nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
}

/// The NodeClaim's capacity type and reservation labels (`""`: no reservation).
fn assert_claim_capacity(claim: &DynamicObject, capacity_type: &str, reservation: &str) {
    let labels = claim.metadata.labels.as_ref();
    assert_eq!(
        (label(labels, CAPACITY_TYPE), label(labels, RESERVATION_ID)),
        (capacity_type, reservation),
        "{:?}",
        claim.metadata.labels
    );
}

fn claim_for_node(lab: &Lab, node: &str) -> Option<DynamicObject> {
    lab.nodeclaims()
        .into_iter()
        .find(|nc| nc.data["status"]["nodeName"].as_str() == Some(node))
}

/// A pause pod labelled app=train for `pool` (tolerating its taint `<taint>=true`), with these
/// container resources and, unless null, this affinity; in `default` (the lab's reset removes
/// it).
fn create_pod(lab: &Lab, name: &str, pool: &str, taint: &str, resources: Value, affinity: Value) {
    let pod: Pod =
        serde_json::from_value(pod_manifest(name, pool, taint, resources, affinity)).unwrap();
    let pods: Api<Pod> = Api::namespaced(lab.client.clone(), "default");
    lab.rt
        .block_on(pods.create(&PostParams::default(), &pod))
        .unwrap();
}

/// The pod `create_pod` makes, as a manifest.
fn pod_manifest(name: &str, pool: &str, taint: &str, resources: Value, affinity: Value) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"karpenter.sh/nodepool": pool},
        "tolerations": [{"key": taint, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        "containers": [{"name": "train", "image": PAUSE, "resources": resources}],
    });
    if !affinity.is_null() {
        spec["affinity"] = affinity;
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "train"}},
        "spec": spec,
    })
}

/// What `kubean-karpenter plan` predicts for `pods` on `spec` with reservation `id` as EC2
/// lists it: (capacity type, opened by the next loop) per NodeClaim, in plan order.
fn plan_prediction(
    lab: &Lab,
    spec: &std::path::Path,
    id: &str,
    pods: &[Value],
) -> Vec<(String, bool)> {
    let dir = std::env::temp_dir().join(format!("kk-lab-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let listed = lab.aws(&format!(
        "print(json.dumps(ec2.describe_capacity_reservations(CapacityReservationIds=['{id}']), default=str))"
    ));
    let reservations = dir.join("capacity-reservations.json");
    std::fs::write(&reservations, listed).unwrap();
    let workloads = dir.join("pods.json");
    std::fs::write(
        &workloads,
        json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    )
    .unwrap();
    let out = lab.cli(&[
        "plan",
        "-f",
        spec.to_str().unwrap(),
        "-w",
        workloads.to_str().unwrap(),
        "--capacity-reservations",
        reservations.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["nodePool"] == "training-reserved")
        .map(|c| {
            (
                c["capacityType"].as_str().unwrap_or("").to_owned(),
                c["nextLoop"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The node a pod runs on, once it is Running.
fn running_on(lab: &Lab, pod: &str) -> Option<String> {
    lab.pods("default")
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod))
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .and_then(|p| p.spec.and_then(|s| s.node_name))
}

/// Waits until the NodeClaim is Initialized (the pod may run a moment before Karpenter says so).
fn wait_initialized(lab: &mut Lab, claim: &DynamicObject) {
    let name = claim.metadata.name.clone().unwrap_or_default();
    lab.wait("its NodeClaim Initialized", MIN, |l| {
        l.nodeclaims()
            .into_iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(name.as_str()))
            .filter(|nc| is_true(nc, "Initialized"))
    });
}

/// Cancels the reservations an earlier run of these tests left active in moto.
fn cancel_leftovers(lab: &Lab) {
    lab.aws(&format!(
        "for r in ec2.describe_capacity_reservations(Filters=[{{'Name': 'tag-key', 'Values': ['{TAG}']}}, {{'Name': 'state', 'Values': ['active']}}])['CapacityReservations']:\n    ec2.cancel_capacity_reservation(CapacityReservationId=r['CapacityReservationId'])"
    ));
}

fn reservation(lab: &Lab, id: &str) -> Value {
    serde_json::from_str(&lab.aws(&format!(
        "r = ec2.describe_capacity_reservations(CapacityReservationIds=['{id}'])['CapacityReservations'][0]\n\
         print(json.dumps({{k: r[k] for k in ('State', 'TotalInstanceCount', 'AvailableInstanceCount')}}))"
    )))
    .unwrap()
}

/// A CPU pool `training-reserved` (node class `kubean-aws-reserved`, m6i.large, tainted
/// `training=true`) allowing reserved then on-demand capacity from the reservations one
/// selector term (`term`, YAML) selects.
fn reserved_pool(term: &str) -> String {
    format!(
        "    - name: training-reserved
      type: cpu
      nodeClass: kubean-aws-reserved
      ami: {{id: {CPU_AMI}}}
      instances:
        types: [m6i.large]
        capacityTypes: [reserved, on-demand]
        arch: [amd64]
      capacityReservations:
        {term}
      taints:
        - {{key: training, value: \"true\", effect: NoSchedule}}
      limits: {{cpu: \"100\"}}
      disruption:
        consolidationPolicy: WhenEmpty
        consolidateAfter: 30s
      kubelet:
        maxPods: 110
"
    )
}

/// Makes a one-slot targeted m6i.large reservation in us-east-1a tagged `TAG=value`; its id.
fn create_reservation(lab: &Lab, value: &str) -> String {
    let id = lab.aws(&format!(
        "print(ec2.create_capacity_reservation(InstanceType='m6i.large', InstancePlatform='Linux/UNIX', \
         AvailabilityZone='us-east-1a', InstanceCount=1, InstanceMatchCriteria='targeted', \
         TagSpecifications=[{{'ResourceType': 'capacity-reservation', 'Tags': [{{'Key': '{TAG}', 'Value': '{value}'}}]}}]\
         )['CapacityReservation']['CapacityReservationId'])"
    ));
    assert!(id.starts_with("cr-"), "{id}");
    id
}

/// Waits until the EC2NodeClass `kubean-aws-reserved` lists the reservation `id` in its status
/// and the Karpenter running now has listed it (DescribeCapacityReservations: its count of free
/// slots starts there). The status alone is not enough: the node class outlives a test, and
/// `apply` changes it while the previous test's Karpenter still runs, which may write the new
/// reservation into the status before it is stopped (its log is rewritten at each start).
fn wait_listed(lab: &mut Lab, id: &str) {
    lab.wait(
        "EC2NodeClass lists the reservation (DescribeCapacityReservations)",
        2 * MIN,
        |l| {
            let classes = l.dynamic("karpenter.k8s.aws", "v1", "EC2NodeClass");
            l.rt.block_on(classes.get("kubean-aws-reserved"))
                .ok()
                .filter(|nc| {
                    nc.data["status"]["capacityReservations"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|r| r["id"] == id))
                })
                .filter(|_| {
                    l.log("karpenter")
                        .lines()
                        .any(|l| l.contains("discovered capacity reservations") && l.contains(id))
                })
        },
    );
}

/// The instance's reservation id and reservation preference, in moto.
fn instance_reservation(lab: &Lab, instance: &str) -> String {
    lab.aws(&format!(
        "i = ec2.describe_instances(InstanceIds=['{instance}'])['Reservations'][0]['Instances'][0]\n\
         print(i.get('CapacityReservationId'), i['CapacityReservationSpecification']['CapacityReservationPreference'])"
    ))
}

#[test]
fn reserved_offering_first_then_on_demand_once_the_reservation_is_full() {
    // The reservation is for m6i.large, not a p5: moto knows p5.48xlarge, but the semantics
    // (Karpenter prefers the reserved offering, and falls back to on-demand once the
    // reservation has no slot left) do not depend on the type, and a CPU type keeps the GPU
    // stand-in and a 32-card EFA launch out of this test. A count of 1 makes "full" one pod.
    let Some(mut lab) = Lab::require("reserved offering first, then on-demand") else {
        return;
    };
    cancel_leftovers(&lab);
    let id = create_reservation(&lab, "reserved");
    let pool = reserved_pool(&format!("- id: {id}"));
    let (spec, bundle) = lab.render(|s| with_pool(s, &pool));
    let nodeclass = std::fs::read_to_string(bundle.join("nodeclasses/kubean-aws-reserved.yaml"))
        .unwrap_or_default();
    assert!(
        nodeclass.contains("capacityReservationSelectorTerms") && nodeclass.contains(&id),
        "the node class selects the reservation: {nodeclass}"
    );
    lab.deploy(&spec, &bundle);
    wait_listed(&mut lab, &id);

    // One cpu of m6i.large's two: the second pod cannot share the first one's node either way,
    // and the anti-affinity says so outright.
    let resources = json!({"requests": {"cpu": "1", "memory": "256Mi"}});
    let apart = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}});
    // plan's prediction for both pods, from the spec and the reservation as EC2 lists it: one
    // reserved node, then (Karpenter's next loop, the reservation full) one on-demand node.
    // Compared with what the real Karpenter does below.
    let manifests: Vec<Value> = ["train-0", "train-1"]
        .iter()
        .map(|n| {
            pod_manifest(
                n,
                "training-reserved",
                "training",
                resources.clone(),
                apart.clone(),
            )
        })
        .collect();
    let predicted = plan_prediction(&lab, &spec, &id, &manifests);
    assert_eq!(
        predicted,
        vec![
            ("reserved".to_owned(), false),
            ("on-demand".to_owned(), true)
        ],
        "plan's prediction"
    );
    create_pod(
        &lab,
        "train-0",
        "training-reserved",
        "training",
        resources.clone(),
        apart.clone(),
    );
    let first = lab.wait("first pod Running", 4 * MIN, |l| running_on(l, "train-0"));
    let claim = claim_for_node(&lab, &first).expect("the first pod's node has a NodeClaim");
    assert_claim_capacity(&claim, "reserved", &id);
    let node = node_named(&lab, &first).unwrap();
    let node_labels = node.metadata.labels.as_ref();
    assert_eq!(label(node_labels, CAPACITY_TYPE), "reserved");
    assert_eq!(label(node_labels, RESERVATION_ID), id);
    assert_eq!(
        label(node_labels, "node.kubernetes.io/instance-type"),
        "m6i.large"
    );
    assert_eq!(
        label(node_labels, "topology.kubernetes.io/zone"),
        "us-east-1a"
    );
    // In moto: the instance is in the reservation, which has no slot left.
    let instance = instance_reservation(&lab, &first);
    assert_eq!(instance, format!("{id} capacity-reservations-only"));
    assert_eq!(reservation(&lab, &id)["AvailableInstanceCount"], 0);
    // What EC2 answers a launch into the full reservation, with Karpenter's own launch
    // template for it: no instance, ReservationCapacityExceeded (the code Karpenter maps to
    // "this reservation is full, fall back"). (moto answers DescribeLaunchTemplates with at most
    // MaxResults templates, 15 by default, and no NextToken: pages of 200, as EC2 allows.)
    let refused = lab.aws(&format!(
        "lts = [lt for page in ec2.get_paginator('describe_launch_templates').paginate(PaginationConfig={{'PageSize': 200}}) for lt in page['LaunchTemplates']]\n\
         target = None\n\
         for lt in lts:\n\
         \x20   data = ec2.describe_launch_template_versions(LaunchTemplateId=lt['LaunchTemplateId'])['LaunchTemplateVersions'][-1]['LaunchTemplateData']\n\
         \x20   if data.get('CapacityReservationSpecification', {{}}).get('CapacityReservationTarget', {{}}).get('CapacityReservationId') == '{id}':\n\
         \x20       target = lt['LaunchTemplateId']\n\
         assert target, 'no launch template targets the reservation'\n\
         subnet = ec2.describe_subnets(Filters=[{{'Name': 'availability-zone', 'Values': ['us-east-1a']}}, {{'Name': 'tag:karpenter.sh/discovery', 'Values': ['lab']}}])['Subnets'][0]['SubnetId']\n\
         out = ec2.create_fleet(Type='instant', LaunchTemplateConfigs=[{{'LaunchTemplateSpecification': {{'LaunchTemplateId': target, 'Version': '$Latest'}}, \
         'Overrides': [{{'InstanceType': 'm6i.large', 'SubnetId': subnet, 'AvailabilityZone': 'us-east-1a'}}]}}], \
         TargetCapacitySpecification={{'TotalTargetCapacity': 1, 'DefaultTargetCapacityType': 'on-demand'}})\n\
         print(len(out.get('Instances', [])), [e['ErrorCode'] for e in out.get('Errors', [])])"
    ));
    assert_eq!(refused, "0 ['ReservationCapacityExceeded']");

    create_pod(
        &lab,
        "train-1",
        "training-reserved",
        "training",
        resources,
        apart,
    );
    let second = lab.wait(
        "second pod Running (the reservation is full)",
        4 * MIN,
        |l| running_on(l, "train-1"),
    );
    assert_ne!(first, second, "anti-affinity: two nodes");
    let claim = claim_for_node(&lab, &second).expect("the second pod's node has a NodeClaim");
    wait_initialized(&mut lab, &claim);
    assert_claim_capacity(&claim, "on-demand", "");
    let node = node_named(&lab, &second).unwrap();
    assert_eq!(
        label(node.metadata.labels.as_ref(), CAPACITY_TYPE),
        "on-demand"
    );
    let instance = instance_reservation(&lab, &second);
    assert_eq!(
        instance, "None none",
        "an on-demand launch takes no reservation"
    );
    let observed: Vec<String> = [&first, &second]
        .iter()
        .map(|n| {
            let node = node_named(&lab, n).unwrap();
            label(node.metadata.labels.as_ref(), CAPACITY_TYPE).to_owned()
        })
        .collect();
    let predicted: Vec<String> = predicted.into_iter().map(|(ct, _)| ct).collect();
    assert_eq!(observed, predicted, "the lab does what plan predicted");

    // Terminating the reserved instance gives its slot back (the lab's reset terminates both).
    lab.aws(&format!("ec2.terminate_instances(InstanceIds=['{first}'])"));
    assert_eq!(reservation(&lab, &id)["AvailableInstanceCount"], 1);
    cancel_leftovers(&lab);
    lab.print_phases();
}

#[test]
fn reservation_filled_by_another_launch_fails_the_reserved_launch_and_karpenter_falls_back() {
    // Karpenter counts a reservation's free slots itself between its one-minute syncs. Another
    // launch into the reservation (another team, another cluster) fills it behind its back:
    // its reserved CreateFleet then gets ReservationCapacityExceeded from EC2 (moto, patched),
    // it zeroes its count, and the pod goes to on-demand. Selected by tag this time.
    let Some(mut lab) = Lab::require("reservation filled behind Karpenter's back") else {
        return;
    };
    cancel_leftovers(&lab);
    let id = create_reservation(&lab, "filled");
    let pool = reserved_pool(&format!(
        "- tags: {{{TAG}: filled}}\n          instanceMatchCriteria: targeted"
    ));
    let (spec, bundle) = lab.render(|s| with_pool(s, &pool));
    lab.deploy(&spec, &bundle);
    wait_listed(&mut lab, &id);
    // The other consumer: its own launch template targeting the reservation.
    let other = lab.aws(&format!(
        "ami = ec2.describe_images(ImageIds=['{CPU_AMI}'])['Images'][0]['ImageId']\n\
         lt = ec2.create_launch_template(LaunchTemplateName='other-team-{id}', LaunchTemplateData={{'ImageId': ami, \
         'CapacityReservationSpecification': {{'CapacityReservationPreference': 'capacity-reservations-only', \
         'CapacityReservationTarget': {{'CapacityReservationId': '{id}'}}}}}})['LaunchTemplate']['LaunchTemplateId']\n\
         subnet = ec2.describe_subnets(Filters=[{{'Name': 'availability-zone', 'Values': ['us-east-1a']}}, {{'Name': 'tag:karpenter.sh/discovery', 'Values': ['lab']}}])['Subnets'][0]['SubnetId']\n\
         out = ec2.create_fleet(Type='instant', LaunchTemplateConfigs=[{{'LaunchTemplateSpecification': {{'LaunchTemplateId': lt, 'Version': '$Latest'}}, \
         'Overrides': [{{'InstanceType': 'm6i.large', 'SubnetId': subnet}}]}}], \
         TargetCapacitySpecification={{'TotalTargetCapacity': 1, 'DefaultTargetCapacityType': 'on-demand'}})\n\
         print(out['Instances'][0]['InstanceIds'][0])"
    ));
    assert_eq!(reservation(&lab, &id)["AvailableInstanceCount"], 0);
    let log_from = lab.log("karpenter").len();

    create_pod(
        &lab,
        "train-0",
        "training-reserved",
        "training",
        json!({"requests": {"cpu": "1", "memory": "256Mi"}}),
        Value::Null,
    );
    let node = lab.wait(
        "pod Running after the refused reserved launch",
        4 * MIN,
        |l| running_on(l, "train-0"),
    );
    let log = lab.log("karpenter");
    let since = log.get(log_from..).unwrap_or_default();
    assert!(
        since.contains("ReservationCapacityExceeded"),
        "Karpenter tried the reservation and EC2 refused it as full; its log since the pod:\n{}",
        since
            .lines()
            .filter(|l| l.contains("rror"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let claim = claim_for_node(&lab, &node).expect("the pod's node has a NodeClaim");
    assert_claim_capacity(&claim, "on-demand", "");
    assert_eq!(instance_reservation(&lab, &node), "None none");
    assert_eq!(
        instance_reservation(&lab, &other),
        format!("{id} capacity-reservations-only")
    );

    // The other consumer's instance is no Karpenter instance: the lab's reset would not end it.
    lab.aws(&format!("ec2.terminate_instances(InstanceIds=['{other}'])"));
    assert_eq!(reservation(&lab, &id)["AvailableInstanceCount"], 1);
    cancel_leftovers(&lab);
    lab.print_phases();
}

#[test]
fn efa_pod_lands_on_an_efa_type_whose_node_advertises_the_interfaces_stand_in_plugin() {
    // A stand-in: no EFA hardware here. The lab's kubelet advertises vpc.amazonaws.com/efa
    // (one per EFA interface moto attached at launch) only while the EFA device plugin's
    // container runs on the node. c5n.9xlarge has one network card and one EFA interface.
    let pool = format!(
        "    - name: training-efa
      type: cpu
      nodeClass: kubean-aws-efa
      ami: {{id: {CPU_AMI}}}
      instances:
        types: [c5n.9xlarge]
        capacityTypes: [on-demand]
        arch: [amd64]
      efa: true
      taints:
        - {{key: efa, value: \"true\", effect: NoSchedule}}
      limits: {{cpu: \"200\"}}
      disruption:
        consolidationPolicy: WhenEmpty
        consolidateAfter: 30s
      kubelet:
        maxPods: 110
"
    );
    let Some((mut lab, _, bundle)) =
        Lab::deployed("EFA pod on an EFA type", |s| with_pool(s, &pool))
    else {
        return;
    };
    assert!(
        bundle.join("efa/aws-efa-k8s-device-plugin.yaml").exists(),
        "efa: true renders the EFA device plugin"
    );
    create_pod(
        &lab,
        "efa-0",
        "training-efa",
        "efa",
        json!({"requests": {"cpu": "1", "vpc.amazonaws.com/efa": "1"},
               "limits": {"vpc.amazonaws.com/efa": "1"}}),
        Value::Null,
    );
    let node = lab.wait("EFA pod Running", 4 * MIN, |l| running_on(l, "efa-0"));
    let claim = claim_for_node(&lab, &node).expect("the EFA pod's node has a NodeClaim");
    wait_initialized(&mut lab, &claim);
    assert_eq!(
        claim.data["status"]["capacity"]["vpc.amazonaws.com/efa"], "1",
        "Karpenter counts the EFA interface it asked for: {}",
        claim.data["status"]
    );
    let n = node_named(&lab, &node).unwrap();
    assert_eq!(
        label(
            n.metadata.labels.as_ref(),
            "node.kubernetes.io/instance-type"
        ),
        "c5n.9xlarge"
    );
    let efa = n
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("vpc.amazonaws.com/efa").cloned())
        .map(|q| q.0);
    assert_eq!(
        efa.as_deref(),
        Some("1"),
        "the node advertises its EFA interface"
    );
    // The interface Karpenter's launch template asked for, in moto.
    let types = lab.aws(&format!(
        "i = ec2.describe_instances(InstanceIds=['{node}'])['Reservations'][0]['Instances'][0]\n\
         print([n.get('InterfaceType') for n in i['NetworkInterfaces']])"
    ));
    assert_eq!(types, "['efa']");
    let plugin_on_node = lab.pods("kube-system").into_iter().any(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("aws-efa-k8s-device-plugin"))
            && p.spec.and_then(|s| s.node_name).as_deref() == Some(node.as_str())
    });
    assert!(plugin_on_node, "the EFA device plugin runs on the node");
    lab.print_phases();
}
