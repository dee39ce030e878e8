#!/usr/bin/env python3
"""What Kubean leaves behind, put on the lab (test tooling; `testbed/lab adopt|unadopt`).

A cluster Kubean (Kubespray) built, before kubean-karpenter is installed, has more than the
lab's `kubeadm init` state: EC2 instances that run its control plane and infra workers, their
Nodes, and on the management side the Kubean objects and ConfigMaps that describe it. The lab
runs no Kubean and no Kubespray, so this stands in for their leftovers, each piece imitating:

  AWS (moto)
  - IAM role + instance profile `lab-kubean-nodes` (trusted by EC2): the profile the operator
    gave the Kubean-built instances, associated with the seeded control-plane instance (seed.json
    controlPlaneInstance) and launched with the infra instance.
  - the control-plane security group `lab-control-plane` (the one `testbed/lab spec` makes), added
    to the control-plane instance beside its node group, as the operator's VPC design would.
  - an infra instance (`Name=infra-1`, m6i.large, the default VPC's second subnet, the node group
    `lab-nodes`): the Kubespray worker that runs Karpenter. Never tagged karpenter.sh/nodepool: the
    node runner boots only instances with that tag key (and the lab reset terminates them), so
    this one stays a record in moto, booted by nobody, as the control-plane instance is.
  - tags `Name=cp-1|infra-1` and `kubernetes.io/cluster/lab=owned` (Kubespray/CCM convention).

  the lab API server (both the management and the new cluster here; server-side apply, field
  manager `kubean`)
  - two Nodes as the kubelet Kubespray installs registers them: named by the instance's private DNS
    name (kube_override_hostname), InternalIP and Hostname addresses, the role label and taint
    Kubespray gives each, no spec.providerID (Kubespray never sets --provider-id).
  - Namespace kubean-system with the Kubean Cluster `lab`, its hosts ConfigMap `lab-hosts-conf`
    (hosts.yml, Kubespray inventory), vars ConfigMap `lab-vars-conf` (group_vars.yml), SSH Secret
    `lab-ssh-key` (a dummy key), and the finished install ClusterOperation `lab-install-ops`
    (status Succeeded, as Kubean's operator records it; the Cluster's status names it).

`heartbeat --node NODE...` renews their node leases as the kubelets would (testbed/lab runs it as the
process kubean-heartbeat). adopt prints one JSON line (see `adopt`); unadopt removes what could disturb other lab tests
(the infra instance, the two Nodes, the Kubean objects); the control-plane instance keeps its
profile, group and tags. The lab bundle's own Kubean objects (`kubean-karpenter apply` of the lab
spec: the same Cluster and ConfigMap names, labelled managed-by kubean-karpenter) are removed by
adopt first; while adopted, that apply stops on server-side apply conflicts with the manager
`kubean` over the two ConfigMaps, as it would on a Kubean-built cluster, so lab tests that apply
the lab spec need `unadopt` first.

Usage: kubean_leftovers.py adopt|unadopt|heartbeat --state DIR --cluster lab --cp-group SG --vpc VPC
       (moto from AWS_ENDPOINT_URL; the API server from KK_TESTBED_APISERVER, KK_TESTBED_CA,
       KK_TESTBED_ADMIN_TOKEN)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

import boto3
import yaml

NAMESPACE = "kubean-system"
PROFILE = "lab-kubean-nodes"
INFRA_IMAGE = "ami-0c0ffee0c0ffee001"
INFRA_TYPE = "m6i.large"
SPRAY_JOB_IMAGE = "ghcr.io/kubean-io/spray-job:v0.37.0"
INFRA_TAINT = "CriticalAddonsOnly=true:NoSchedule"
FIELD_MANAGER = "kubean"
MANAGED_BY = "app.kubernetes.io/managed-by%3Dkubean-karpenter"  # a label selector, URL-encoded
# m6i.large as its kubelet reports it (2 vCPU, 8 GiB; Kubespray's kubelet_max_pods 110).
CAPACITY = {"cpu": "2", "memory": "7934460Ki", "pods": "110", "ephemeral-storage": "20959212Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
ALLOCATABLE = {"cpu": "1930m", "memory": "7311868Ki", "pods": "110", "ephemeral-storage": "19316009748", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}


def log(msg: str) -> None:
    print(f"testbed/lab adopt: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the API server
class Kube:
    def __init__(self) -> None:
        self.server = os.environ["KK_TESTBED_APISERVER"]
        self.token = os.environ["KK_TESTBED_ADMIN_TOKEN"]
        self.context = ssl.create_default_context(cafile=os.environ["KK_TESTBED_CA"])

    def call(self, method: str, path: str, body=None, content_type: str = "application/json"):
        """The decoded answer, or None on 404 (a DELETE or GET of something not there)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path, method=method, data=data,
            headers={"Authorization": "Bearer " + self.token, "Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, context=self.context) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from e

    def apply(self, path: str, obj: dict) -> dict:
        """Server-side apply as Kubean's field manager (JSON is YAML)."""
        return self.call("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true", obj,
                         "application/apply-patch+yaml")

    def delete(self, path: str) -> None:
        self.call("DELETE", path)


def core(kind_plural: str, name: str, namespace: str | None = None) -> str:
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"/api/v1{ns}/{kind_plural}/{name}"


def kubean(kind_plural: str, name: str) -> str:
    # Kubean's Cluster and ClusterOperation are cluster-scoped.
    return f"/apis/kubean.io/v1alpha1/{kind_plural}/{name}"


# ------------------------------------------------------------------ AWS
def instances(ec2, filters: list[dict]) -> list[dict]:
    out = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for r in page["Reservations"]:
            out.extend(r["Instances"])
    return out


def infra_instances(ec2, states=("pending", "running")) -> list[dict]:
    return instances(ec2, [{"Name": "tag:Name", "Values": ["infra-1"]},
                           {"Name": "instance-state-name", "Values": list(states)}])


def describe(ec2, iid: str) -> dict:
    return ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]


def ensure_profile(iam) -> dict:
    trust = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    try:
        iam.create_role(RoleName=PROFILE, AssumeRolePolicyDocument=json.dumps(trust),
                        Description="lab: the role of the Kubean-built instances")
    except iam.exceptions.EntityAlreadyExistsException:
        pass
    try:
        iam.create_instance_profile(InstanceProfileName=PROFILE)
    except iam.exceptions.EntityAlreadyExistsException:
        pass
    profile = iam.get_instance_profile(InstanceProfileName=PROFILE)["InstanceProfile"]
    if PROFILE not in [r["RoleName"] for r in profile["Roles"]]:
        iam.add_role_to_instance_profile(InstanceProfileName=PROFILE, RoleName=PROFILE)
        profile = iam.get_instance_profile(InstanceProfileName=PROFILE)["InstanceProfile"]
    return profile


def ensure_association(ec2, iid: str, profile: dict) -> None:
    found = ec2.describe_iam_instance_profile_associations(
        Filters=[{"Name": "instance-id", "Values": [iid]}, {"Name": "state", "Values": ["associating", "associated"]}]
    )["IamInstanceProfileAssociations"]
    if not found:
        ec2.associate_iam_instance_profile(InstanceId=iid, IamInstanceProfile={"Name": PROFILE})
    elif found[0]["IamInstanceProfile"]["Arn"] != profile["Arn"]:
        ec2.replace_iam_instance_profile_association(AssociationId=found[0]["AssociationId"],
                                                     IamInstanceProfile={"Name": PROFILE})


def aws_side(args, seed: dict) -> tuple[dict, dict, dict]:
    ec2 = boto3.client("ec2")
    iam = boto3.client("iam")
    owned = {"Key": f"kubernetes.io/cluster/{args.cluster}", "Value": "owned"}
    profile = ensure_profile(iam)

    cp_id = seed["controlPlaneInstance"]
    ensure_association(ec2, cp_id, profile)
    groups = [g["GroupId"] for g in describe(ec2, cp_id)["SecurityGroups"]]
    if args.cp_group not in groups:
        ec2.modify_instance_attribute(InstanceId=cp_id, Groups=groups + [args.cp_group])
    ec2.create_tags(Resources=[cp_id], Tags=[{"Key": "Name", "Value": "cp-1"}, owned])

    found = infra_instances(ec2)
    if found:
        infra_id = sorted(found, key=lambda i: i["LaunchTime"])[0]["InstanceId"]
    else:
        infra_id = ec2.run_instances(
            ImageId=INFRA_IMAGE, InstanceType=INFRA_TYPE, MinCount=1, MaxCount=1,
            SubnetId=seed["subnets"][1], SecurityGroupIds=[seed["securityGroup"]],
            IamInstanceProfile={"Name": PROFILE},
            MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "infra-1"}, owned]}],
        )["Instances"][0]["InstanceId"]
        log(f"launched the infra instance {infra_id}")
    # An instance launched before its profile existed, or one a test stripped, converges too.
    ensure_association(ec2, infra_id, profile)
    ec2.create_tags(Resources=[infra_id], Tags=[{"Key": "Name", "Value": "infra-1"}, owned])
    tags = {t["Key"] for t in describe(ec2, infra_id).get("Tags") or []}
    if any(k.startswith("karpenter.sh/") for k in tags):
        raise SystemExit(f"{infra_id} carries a karpenter.sh/ tag: the node runner and the lab reset would take it")
    return describe(ec2, cp_id), describe(ec2, infra_id), profile


# ------------------------------------------------------------------ the Nodes
def node(inst: dict, role: str, version: str, region: str, now: str) -> tuple[dict, dict]:
    name = inst["PrivateDnsName"]
    digest = hashlib.sha256(inst["InstanceId"].encode()).hexdigest()
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": inst["InstanceType"],
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": inst["Placement"]["AvailabilityZone"],
    }
    if role == "control-plane":
        labels["node-role.kubernetes.io/control-plane"] = ""
        # kubeadm's exclusion from external load balancers, on every control-plane node.
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
        taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    else:
        labels["node-role.kubernetes.io/infra"] = ""
        key, rest = INFRA_TAINT.split("=", 1)
        value, effect = rest.split(":", 1)
        taints = [{"key": key, "value": value, "effect": effect}]
    obj = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "labels": labels,
            "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        # No providerID: Kubespray's kubelet runs without --provider-id.
        "spec": {"taints": taints},
    }
    status = {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {
            "addresses": [{"type": "InternalIP", "address": inst["PrivateIpAddress"]},
                          {"type": "Hostname", "address": name}],
            "capacity": CAPACITY, "allocatable": ALLOCATABLE,
            "conditions": [
                {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
                for t, r, m in [
                    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ]
            ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                  "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                # Stable per instance, shaped as on EC2 (a system UUID starts with ec2).
                "machineID": digest[:32],
                "systemUUID": f"ec2{digest[3:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
                "bootID": f"{digest[32:40]}-{digest[40:44]}-4{digest[45:48]}-8{digest[49:52]}-{digest[52:64]}",
                "kernelVersion": "6.1.158-180.294.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.9.20251208",
                "containerRuntimeVersion": "containerd://2.1.5",
                "kubeletVersion": version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    return obj, status


# ------------------------------------------------------------------ Kubean's objects
def hosts_yml(cp: dict, infra: dict) -> str:
    def host(inst: dict) -> dict:
        ip = inst["PrivateIpAddress"]
        return {"ip": ip, "access_ip": ip, "ansible_host": ip, "kube_override_hostname": inst["PrivateDnsName"]}

    infra_vars = host(infra)
    infra_vars["node_labels"] = {"node-role.kubernetes.io/infra": ""}
    infra_vars["node_taints"] = [INFRA_TAINT]
    inventory = {"all": {
        "vars": {"ansible_user": "ec2-user", "ansible_port": 22, "ansible_connection": "ssh"},
        "hosts": {"cp-1": host(cp), "infra-1": infra_vars},
        "children": {
            "kube_control_plane": {"hosts": {"cp-1": None}},
            "etcd": {"hosts": {"cp-1": None}},
            "kube_node": {"hosts": {"infra-1": None}},
            "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}},
            "calico_rr": {"hosts": {}},
        },
    }}
    return yaml.safe_dump(inventory, sort_keys=False, default_flow_style=False)


def group_vars_yml(version: str, port: int, api_name: str) -> str:
    # The lab's kubeadm-config values (testbed/lab kubeadm_init_state).
    return yaml.safe_dump({
        "kube_version": version.lstrip("v"),
        "container_manager": "containerd",
        "kube_network_plugin": "calico",
        "kube_apiserver_port": port,
        "apiserver_loadbalancer_domain_name": api_name,
        "loadbalancer_apiserver": {"port": port},
        "loadbalancer_apiserver_localhost": False,
        "supplementary_addresses_in_ssl_keys": [api_name],
        "kube_service_addresses": "10.96.0.0/12",
        "kube_pods_subnet": "10.244.0.0/16",
        "enable_nodelocaldns": False,
        "cloud_provider": "external",
        "external_cloud_provider": "manual",
        "remove_anonymous_access": False,
    }, sort_keys=False, default_flow_style=False)


# A dummy, not a key: Kubean's SSH Secret only has to exist with its shape here.
DUMMY_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nbGFiIGR1bW15OiBub3QgYSBrZXk=\n-----END OPENSSH PRIVATE KEY-----\n"


def kubean_side(kube: Kube, cluster: str, cp: dict, infra: dict, version: str, port: int, api_name: str) -> dict:
    names = {
        "namespace": NAMESPACE, "cluster": cluster, "clusterOperation": f"{cluster}-install-ops",
        "hostsConfigMap": f"{cluster}-hosts-conf", "varsConfigMap": f"{cluster}-vars-conf", "sshSecret": f"{cluster}-ssh-key",
    }
    # A lab test that applied the lab bundle leaves kubean-karpenter's own Kubean objects under
    # these names (labelled managed-by kubean-karpenter); Kubean made none of them, so they go
    # first and what follows is Kubean's alone.
    ours = [(kubean("clusters", cluster), kube.call("GET", kubean("clusters", cluster)))]
    ours += [(core("configmaps", names[k], NAMESPACE), kube.call("GET", core("configmaps", names[k], NAMESPACE)))
             for k in ("hostsConfigMap", "varsConfigMap")]
    ops = kube.call("GET", f"/apis/kubean.io/v1alpha1/clusteroperations?labelSelector={MANAGED_BY}") or {}
    ours += [(kubean("clusteroperations", o["metadata"]["name"]), o) for o in ops.get("items", [])
             if o["spec"].get("cluster") == cluster]
    gone = [path for path, obj in ours
            if obj and (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "kubean-karpenter"]
    for path in gone:
        log(f"removing kubean-karpenter's {path} (Kubean made none of it)")
        kube.delete(path)
    for path in gone:  # no finalizers: gone at once; the apply below must not meet it going
        for _ in range(50):
            if kube.call("GET", path) is None:
                break
            time.sleep(0.1)
    kube.apply(core("namespaces", NAMESPACE), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kube.apply(core("configmaps", names["hostsConfigMap"], NAMESPACE), {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": names["hostsConfigMap"], "namespace": NAMESPACE},
        "data": {"hosts.yml": hosts_yml(cp, infra)}})
    kube.apply(core("configmaps", names["varsConfigMap"], NAMESPACE), {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": names["varsConfigMap"], "namespace": NAMESPACE},
        "data": {"group_vars.yml": group_vars_yml(version, port, api_name)}})
    kube.apply(core("secrets", names["sshSecret"], NAMESPACE), {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
        "metadata": {"name": names["sshSecret"], "namespace": NAMESPACE},
        "data": {"ssh-privatekey": base64.b64encode(DUMMY_KEY.encode()).decode()}})
    ref = lambda name: {"namespace": NAMESPACE, "name": name}  # noqa: E731
    made = kube.apply(kubean("clusters", cluster), {
        "apiVersion": "kubean.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": cluster, "labels": {"clusterName": cluster}},
        "spec": {"hostsConfRef": ref(names["hostsConfigMap"]), "varsConfRef": ref(names["varsConfigMap"]),
                 "sshAuthRef": ref(names["sshSecret"])}})
    ops = names["clusterOperation"]
    # The install's times: kept from an earlier adopt, so re-running converges.
    before = kube.call("GET", kubean("clusteroperations", ops)) or {}
    start = (before.get("status") or {}).get("startTime") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1800))
    end = (before.get("status") or {}).get("endTime") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    # Kubean's operator labels an operation with its cluster and makes the Cluster its owner.
    kube.apply(kubean("clusteroperations", ops), {
        "apiVersion": "kubean.io/v1alpha1", "kind": "ClusterOperation",
        "metadata": {"name": ops, "labels": {"clusterName": cluster},
                     "ownerReferences": [{"apiVersion": "kubean.io/v1alpha1", "kind": "Cluster", "name": cluster,
                                          "uid": made["metadata"]["uid"]}]},
        "spec": {"cluster": cluster, "image": SPRAY_JOB_IMAGE, "actionType": "playbook", "action": "cluster.yml",
                 "preHook": [{"actionType": "playbook", "action": "ping.yml"},
                             {"actionType": "playbook", "action": "disable-firewalld.yml"}],
                 "postHook": [{"actionType": "playbook", "action": "kubeconfig.yml"},
                              {"actionType": "playbook", "action": "cluster-info.yml"}]}})
    kube.apply(kubean("clusteroperations", ops) + "/status", {
        "apiVersion": "kubean.io/v1alpha1", "kind": "ClusterOperation", "metadata": {"name": ops},
        "status": {"action": "cluster.yml", "status": "Succeeded", "hasModified": False,
                   "jobRef": {"namespace": NAMESPACE, "name": f"kubean-{ops}-job"},
                   "startTime": start, "endTime": end}})
    kube.apply(kubean("clusters", cluster) + "/status", {
        "apiVersion": "kubean.io/v1alpha1", "kind": "Cluster", "metadata": {"name": cluster},
        "status": {"conditions": [{"clusterOps": ops, "status": "Succeeded", "startTime": start, "endTime": end}]}})
    return names


# ------------------------------------------------------------------ commands
def adopt(args) -> None:
    seed = json.load(open(os.path.join(args.state, "seed.json"), encoding="utf-8"))
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kube = Kube()
    version = kube.call("GET", "/version")["gitVersion"]
    port = int(os.environ["KK_TESTBED_APISERVER"].rsplit(":", 1)[1])
    cp, infra, profile = aws_side(args, seed)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for inst, role in [(cp, "control-plane"), (infra, "infra")]:
        obj, status = node(inst, role, version, region, now)
        kube.apply(core("nodes", obj["metadata"]["name"]), obj)
        kube.apply(core("nodes", obj["metadata"]["name"]) + "/status", status)
    names = kubean_side(kube, args.cluster, cp, infra, version, port, args.api_name)

    def about(inst: dict, name: str) -> dict:
        return {"name": name, "instanceId": inst["InstanceId"], "privateIp": inst["PrivateIpAddress"],
                "privateDnsName": inst["PrivateDnsName"], "node": inst["PrivateDnsName"],
                "availabilityZone": inst["Placement"]["AvailabilityZone"], "subnetId": inst["SubnetId"],
                "securityGroups": [g["GroupId"] for g in inst["SecurityGroups"]],
                "instanceProfileArn": (inst.get("IamInstanceProfile") or {}).get("Arn", "")}

    print(json.dumps({
        "cluster": args.cluster, "kubernetesVersion": version, "vpc": args.vpc,
        "controlPlane": about(cp, "cp-1"), "infra": about(infra, "infra-1"),
        "instanceProfile": PROFILE, "instanceProfileArn": profile["Arn"], "role": PROFILE,
        "roleArn": profile["Roles"][0]["Arn"],
        "controlPlaneSecurityGroup": args.cp_group, "nodeSecurityGroup": seed["securityGroup"],
        "kubean": names,
    }))


def unadopt(args) -> None:
    seed = json.load(open(os.path.join(args.state, "seed.json"), encoding="utf-8"))
    ec2 = boto3.client("ec2")
    kube = Kube()
    cluster = args.cluster
    kube.delete(kubean("clusteroperations", f"{cluster}-install-ops"))
    kube.delete(kubean("clusters", cluster))
    for kind, name in [("configmaps", f"{cluster}-hosts-conf"), ("configmaps", f"{cluster}-vars-conf"),
                       ("secrets", f"{cluster}-ssh-key")]:
        kube.delete(core(kind, name, NAMESPACE))
    infra = infra_instances(ec2, ("pending", "running", "stopping", "stopped"))
    for inst in [describe(ec2, seed["controlPlaneInstance"])] + infra:
        if inst.get("PrivateDnsName"):
            kube.delete(core("nodes", inst["PrivateDnsName"]))
    if infra:
        ids = [i["InstanceId"] for i in infra]
        ec2.terminate_instances(InstanceIds=ids)
        print(f"testbed/lab unadopt: terminated {' '.join(ids)}", file=sys.stderr)


def heartbeat(args) -> None:
    """The kubelets' node leases (kube-node-lease/<node>), renewed every 10 s while the Nodes
    exist, as those kubelets would: without them the controller-manager marks the Nodes Unknown
    and taints them node.kubernetes.io/unreachable after its 40 s grace, which a Kubean-built
    cluster's healthy nodes do not show. Never exits by itself (the lab counts a dead process as
    an unhealthy lab); `unadopt` and `down` stop it."""
    kube = Kube()
    while True:
        try:
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            for name in args.nodes:
                found = kube.call("GET", core("nodes", name))
                if found is None:
                    continue  # deleted (the lab reset); its lease goes with it (owner reference)
                kube.apply(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}", {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                      "uid": found["metadata"]["uid"]}]},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}})
        except Exception as e:  # noqa: BLE001 - a failed round is retried; the process stays
            log(f"heartbeat: {e}")
        time.sleep(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["adopt", "unadopt", "heartbeat"])
    ap.add_argument("--state", required=True)
    ap.add_argument("--cluster", default="lab")
    ap.add_argument("--api-name", default="api.lab.internal")
    ap.add_argument("--cp-group", default="")
    ap.add_argument("--vpc", default="")
    ap.add_argument("--node", dest="nodes", action="append", default=[], help="heartbeat: a Node whose lease it renews")
    args = ap.parse_args()
    if args.command == "adopt":
        if not args.cp_group:
            ap.error("adopt needs --cp-group")
        adopt(args)
    elif args.command == "heartbeat":
        heartbeat(args)
    else:
        unadopt(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
