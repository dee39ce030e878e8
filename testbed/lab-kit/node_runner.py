#!/usr/bin/env python3
"""The lab's node runner (test tooling): turns EC2 instances in moto into running machines.

Every second it lists the instances Karpenter launched (tag karpenter.sh/nodepool) in
moto. Each new running one is booted: a network namespace on the lab bridge with the
instance's private IP, its own mount and UTS namespaces (boot.sh), a fake IMDS serving that
instance, the AMI profile of its image, and its real userData (DescribeInstanceAttribute)
run by bash. When an instance leaves the running state (TerminateInstances) its processes
are killed and its namespace removed, as the hypervisor would.

Usage: node_runner.py --state DIR --bridge NAME --netns-prefix kkn-ID- --gateway IP --amis ami-profiles.json
       (moto from AWS_ENDPOINT_URL; the rest of boot.sh's environment is passed through)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import boto3


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Runner:
    def __init__(self, args):
        self.args = args
        self.ec2 = boto3.client("ec2", region_name=args.region)
        self.iam = boto3.client("iam", region_name=args.region)
        with open(args.amis, encoding="utf-8") as f:
            self.profiles = json.load(f)
        self.booted: dict[str, dict] = {}
        self.hw_cache: dict[str, dict] = {}

    def hardware(self, instance_type: str) -> dict:
        if instance_type not in self.hw_cache:
            t = self.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
            gpus = sum(g.get("Count", 0) for g in t.get("GpuInfo", {}).get("Gpus", []))
            self.hw_cache[instance_type] = {
                "instanceType": instance_type,
                "cpu": t["VCpuInfo"]["DefaultVCpus"],
                "memoryMiB": t["MemoryInfo"]["SizeInMiB"],
                "gpus": gpus,
            }
        return self.hw_cache[instance_type]

    def role_of(self, inst: dict) -> str:
        arn = (inst.get("IamInstanceProfile") or {}).get("Arn", "")
        if not arn:
            return ""
        name = arn.rsplit("/", 1)[-1]
        roles = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
        return roles[0]["RoleName"] if roles else ""

    def tagged_profile(self, image_id: str) -> str | None:
        """An image made after the lab started (a test's CopyImage: a new release of a lab AMI)
        names its profile in its `kk-lab-profile` tag."""
        images = self.ec2.describe_images(ImageIds=[image_id]).get("Images", [])
        tags = {t["Key"]: t["Value"] for t in (images[0].get("Tags") or [])} if images else {}
        return tags.get("kk-lab-profile")

    def boot(self, inst: dict) -> None:
        iid = inst["InstanceId"]
        node = os.path.join(self.args.state, "nodes", iid)
        os.makedirs(node, exist_ok=True)
        attr = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        user_data = base64.b64decode(attr.get("UserData", {}).get("Value", "") or "").decode()
        profile = self.profiles.get(inst["ImageId"]) or self.tagged_profile(inst["ImageId"])
        meta = inst.get("MetadataOptions") or {}
        info = {
            "instanceId": iid,
            "region": self.args.region,
            "availabilityZone": inst["Placement"]["AvailabilityZone"],
            "instanceType": inst["InstanceType"],
            "privateIp": inst["PrivateIpAddress"],
            "privateDnsName": inst.get("PrivateDnsName") or iid,
            "amiId": inst["ImageId"],
            "accountId": self.args.account,
            "role": self.role_of(inst),
            "httpTokens": meta.get("HttpTokens", "required"),
            "userData": user_data,
        }
        with open(os.path.join(node, "instance.json"), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
        with open(os.path.join(node, "user-data"), "w", encoding="utf-8") as f:
            f.write(user_data)
        os.chmod(os.path.join(node, "user-data"), 0o600)
        with open(os.path.join(node, "hardware.json"), "w", encoding="utf-8") as f:
            hw = dict(self.hardware(inst["InstanceType"]))
            # EFA devices are what the launch attached (Karpenter asks for EFA interfaces only
            # when a pod requests vpc.amazonaws.com/efa), not what the type could take.
            hw["efa"] = sum(
                1 for n in inst.get("NetworkInterfaces") or [] if n.get("InterfaceType") in ("efa", "efa-only")
            )
            json.dump(hw, f)
        if profile is None:
            log(f"{iid}: image {inst['ImageId']} is not a lab AMI; it never boots")
            self.booted[iid] = {"ns": None, "proc": None}
            return
        with open(os.path.join(node, "profile"), "w", encoding="utf-8") as f:
            f.write(profile)

        short = hashlib.sha256(iid.encode()).hexdigest()[:8]
        ns, host_if = f"{self.args.netns_prefix}{short}", f"kkv{short}"
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", host_if, check=False)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", host_if, "master", self.args.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{info['privateIp']}/{self.args.prefix}", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", self.args.gateway)
        console = open(os.path.join(node, "boot.log"), "ab")
        proc = subprocess.Popen(
            # nsenter, not `ip netns exec`: that one mounts a fresh /sys, hiding the host's
            # cgroup hierarchies, which kubeadm's preflight and the kubelet need.
            ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--uts", "--fork",
             os.path.join(self.args.kit, "boot.sh"), node],
            stdin=subprocess.DEVNULL, stdout=console, stderr=console, start_new_session=True,
        )
        self.booted[iid] = {"ns": ns, "host_if": host_if, "proc": proc}
        log(f"{iid}: booted {info['instanceType']} ({profile}) at {info['privateIp']} in {info['availabilityZone']}")

    def halt(self, iid: str) -> None:
        b = self.booted.pop(iid)
        ns = b.get("ns")
        if ns:
            # The boot's own session first (it started one), then anything else left in the
            # namespace; a name removed by someone else must not leave a kubelet running.
            proc = b["proc"]
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log(f"{iid}: boot process {proc.pid} outlived SIGKILL for 10s")
            sh("ip", "link", "del", b["host_if"], check=False)
            sh("ip", "netns", "del", ns, check=False)
        log(f"{iid}: halted")

    def tick(self) -> None:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]}]
        )
        running = {}
        for page in pages:
            for r in page["Reservations"]:
                for inst in r["Instances"]:
                    if inst["State"]["Name"] in ("pending", "running"):
                        running[inst["InstanceId"]] = inst
        for iid, inst in sorted(running.items()):
            if iid not in self.booted:
                try:
                    self.boot(inst)
                except Exception as e:  # one bad instance must not stop the others
                    log(f"{iid}: boot failed: {e}")
                    self.booted.setdefault(iid, {"ns": None, "proc": None})
        for iid in sorted(set(self.booted) - set(running)):
            self.halt(iid)

    def shutdown(self) -> None:
        for iid in list(self.booted):
            self.halt(iid)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", required=True)
    ap.add_argument("--kit", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--bridge", required=True)
    ap.add_argument("--netns-prefix", default="kkn-", help="names of the instances' network namespaces")
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--prefix", default="16")
    ap.add_argument("--amis", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--account", default="123456789012")
    args = ap.parse_args()
    runner = Runner(args)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    log("node runner watching moto for Karpenter's instances")
    while not stop["now"]:
        try:
            runner.tick()
        except Exception as e:
            log(f"tick failed: {e}")
        time.sleep(1)
    runner.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
