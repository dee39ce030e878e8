#!/usr/bin/env python3
"""moto_server with the EKS-optimized AMI public SSM parameters seeded in-process.

moto serves no /aws/service/eks/... parameters, and its PutParameter refuses
names under /aws, so they cannot be seeded over HTTP. This launcher teaches
moto's SSM parameter store to load them the way moto itself lazily loads the
/aws/service/ecs/... ones: on the first lookup under that path, in every
account and region (so they also come back after POST /moto-api/reset).

Usage: moto_seeded.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
                      [--dump FILE] [--print] [--ec2-data FILE]

--ec2-data (the lab) also patches the gaps between moto and the Karpenter controller
(see install_karpenter_patches; AMIs come from MOTO_AMIS_PATH). --faults DIR (the lab)
lets a test switch on refusals moto cannot make itself (see install_faults).

--port 0 binds a free port; --port-file receives the port actually bound.
--dump writes the seeded parameters of us-east-1 and us-west-2 as JSON.
--print prints every seeded parameter for us-east-1 and exits.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import sys
import threading

EKS_PREFIX = "/aws/service/eks/optimized-ami"
# Kubernetes minor -> the patch release the "recommended" AMI ships.
K8S_RELEASES = {"1.34": "1.34.6", "1.35": "1.35.4", "1.36": "1.36.3"}
# AMI release dates, oldest first; the last one is "recommended".
AMI_DATES = ["20260806", "20260827"]
ARCHES = ["x86_64"]
VARIANTS = ["standard", "nvidia"]
DEFAULT_ACCOUNT = "123456789012"


def image_id(region: str, k8s: str, arch: str, variant: str, date: str) -> str:
    """A deterministic, plausible AMI id (ami- followed by 17 hex digits)."""
    digest = hashlib.sha256(f"{region}/{k8s}/{arch}/{variant}/{date}".encode()).hexdigest()
    return "ami-0" + digest[:16]


def eks_parameters(region: str) -> dict[str, str]:
    """Every seeded parameter name and value for one region."""
    params: dict[str, str] = {}
    for k8s, patch in K8S_RELEASES.items():
        for arch in ARCHES:
            for variant in VARIANTS:
                base = f"{EKS_PREFIX}/{k8s}/amazon-linux-2023/{arch}/{variant}"
                for date in AMI_DATES:
                    name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-v{date}"
                    params[f"{base}/{name}/image_id"] = image_id(region, k8s, arch, variant, date)
                latest = AMI_DATES[-1]
                params[f"{base}/recommended/image_id"] = image_id(region, k8s, arch, variant, latest)
                params[f"{base}/recommended/image_name"] = (
                    f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-v{latest}"
                )
                params[f"{base}/recommended/release_version"] = f"{patch}-{latest}"
    return params


def install_seed_hook() -> None:
    """Make moto's ParameterDict load the EKS parameters on first use."""
    from collections import defaultdict

    from moto.ssm import models as ssm_models

    original = ssm_models.ParameterDict._check_loading_status
    modified = datetime.datetime(2026, 8, 27, tzinfo=datetime.timezone.utc)

    def load(pdict) -> None:
        for name, value in eks_parameters(pdict.region_name).items():
            defaultdict.__getitem__(pdict, name).append(
                ssm_models.Parameter(
                    account_id=pdict.account_id,
                    name=name,
                    value=value,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=modified,
                    version=1,
                    data_type="text",
                )
            )

    def check_loading_status(self, key) -> None:
        original(self, key)
        if getattr(self, "_kk_eks_loaded", False):
            return
        k = str(key or "")
        # Load for a name under the prefix, or for an ancestor path of it
        # (GetParametersByPath on /aws/service/eks, /aws, ...).
        if k.startswith(EKS_PREFIX) or (k and (EKS_PREFIX + "/").startswith(k.rstrip("/") + "/")):
            self._kk_eks_loaded = True
            load(self)

    ssm_models.ParameterDict._check_loading_status = check_loading_status


SPOT_FRACTION = 0.4  # as kk-catalog's DEFAULT_SPOT_FRACTION: the shared table has no spot prices


def on_demand_prices(path: str) -> dict[str, float]:
    """Instance type -> on-demand $/h (us-east-1) from shared/data/ec2."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {
        t["name"]: t["od_price_usd_hr_us_east_1"]
        for t in data["instance_types"]
        if t.get("od_price_usd_hr_us_east_1")
    }


def install_karpenter_patches(prices: dict[str, float]) -> None:
    """Close the gaps between moto 5.2.1 and the calls the Karpenter controller makes."""
    from moto.ec2.models import fleets
    from moto.ec2.responses import spot_instances

    # Gap 1: CreateFleet builds its launch specs from the launch template but reads the
    # security groups from "GroupSet", which launch templates never have (Karpenter's carry
    # them on NetworkInterfaces[0].Groups), and may drop the template's IamInstanceProfile. Instances then have no security group (Karpenter
    # reports SecurityGroupDrift and replaces every node, forever) and no role (the
    # node's IMDS has no credentials). Copy both from the template onto each instance.
    original_init = fleets.Fleet.__init__

    def fleet_init(self, ec2_backend, *args, **kwargs):
        original_init(self, ec2_backend, *args, **kwargs)
        launched = [(o["instance"], o["launch_spec"]) for o in self.on_demand_instances]
        for req in self.spot_requests:
            if getattr(req, "instance", None) is not None:
                launched.append((req.instance, req.launch_spec))
        for instance, spec in launched:
            lt_spec = spec.launch_template_spec or {}
            template = ec2_backend.get_launch_template(lt_spec["LaunchTemplateId"])
            data = template.get_version(lt_spec.get("Version", template.default_version_number)).data
            # Karpenter puts them on the primary network interface; others use SecurityGroupIds.
            group_ids = list(data.get("SecurityGroupIds") or [])
            for nic in data.get("NetworkInterfaces") or []:
                group_ids += [g if isinstance(g, str) else g.get("GroupId") for g in nic.get("Groups") or []]
            if group_ids:
                instance.security_groups = [ec2_backend.get_security_group_from_id(g) for g in group_ids]
            profile = data.get("IamInstanceProfile") or {}
            if profile and not ec2_backend.iam_instance_profile_associations.get(instance.id):
                ec2_backend.associate_iam_instance_profile(
                    instance_id=instance.id,
                    iam_instance_profile_name=profile.get("Name"),
                    iam_instance_profile_arn=profile.get("Arn"),
                )

    fleets.Fleet.__init__ = fleet_init

    # Gap 2: DescribeSpotPriceHistory answers 0.00001 $/h for every type, so every spot
    # offering looks free. Answer SPOT_FRACTION x the on-demand price of the shared table.
    def describe_spot_price_history(self):
        types = self._get_param("InstanceTypes", [])
        found = self.ec2_backend.describe_spot_price_history(types, self._filters_from_querystring())
        history = [
            {
                "InstanceType": p["InstanceType"],
                "ProductDescription": "Linux/UNIX (Amazon VPC)",
                "SpotPrice": f"{prices.get(p['InstanceType'], 1.0) * SPOT_FRACTION:.6f}",
                "AvailabilityZone": p["Location"],
                "Timestamp": "2026-08-27T00:00:00.000Z",
            }
            for p in found
        ]
        return spot_instances.ActionResult({"SpotPriceHistory": history})

    spot_instances.SpotInstances.describe_spot_price_history = describe_spot_price_history


def install_managed_policies() -> None:
    """AWS's managed policies, which the rendered node role attaches, plus those newer than
    moto 5.2.1's copy:
    AmazonEC2ContainerRegistryPullOnly (published by AWS in 2024: ecr:GetAuthorizationToken,
    ecr:BatchGetImage, ecr:GetDownloadUrlForLayer on *). Without it AttachRolePolicy answers
    NoSuchEntity as if the policy did not exist."""
    from moto.iam import models as iam_models

    # moto loads AWS managed policies only when asked (its default attaches none).
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
    policies = json.loads(iam_models.aws_managed_policies_data)
    policies.setdefault("AmazonEC2ContainerRegistryPullOnly", {
        "CreateDate": "2024-10-02T00:00:00+00:00",
        "DefaultVersionId": "v1",
        "Document": {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Action": ["ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            "Resource": "*",
        }]},
        "IsAttachable": True,
        "Path": "/",
        "UpdateDate": "2024-10-02T00:00:00+00:00",
    })
    iam_models.aws_managed_policies_data = json.dumps(policies)


def install_faults(faults_dir: str) -> None:
    """Refusals moto cannot produce itself (it enforces no IAM), switched on by files in
    faults_dir so a lab test can break one thing on purpose. Each is a stand-in: AWS would
    refuse the same call with the same error code because of a missing permission."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import fleets

    original = fleets.Fleets.create_fleet

    def create_fleet(self):
        # The controller policy without iam:PassRole on the node role: EC2 refuses to launch
        # with an instance profile whose role the caller may not pass.
        if os.path.exists(os.path.join(faults_dir, "passrole-denied")):
            raise EC2ClientError(
                "UnauthorizedOperation",
                "You are not authorized to perform this operation. User is not authorized to "
                "perform: iam:PassRole on resource: node role (kubean-karpenter lab fault)",
            )
        return original(self)

    fleets.Fleets.create_fleet = create_fleet


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--dump")
    ap.add_argument("--print", action="store_true")
    ap.add_argument("--ec2-data", help="shared/data/ec2/ec2_instance_types_karpenter.json: enables the Karpenter patches")
    ap.add_argument("--faults", help="a folder whose files switch on refusals (see install_faults)")
    args = ap.parse_args()

    if args.print:
        for name, value in sorted(eks_parameters("us-east-1").items()):
            print(f"{name}\t{value}")
        return 0
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as f:
            json.dump({r: eks_parameters(r) for r in ("us-east-1", "us-west-2")}, f, indent=1, sort_keys=True)
            f.write("\n")

    import moto
    from moto.backends import get_backend
    from moto.server import ThreadedMotoServer

    install_seed_hook()
    install_managed_policies()
    if args.ec2_data:
        install_karpenter_patches(on_demand_prices(args.ec2_data))
    if args.faults:
        install_faults(args.faults)
    # Load eagerly for the default account in the two regions the tests use,
    # so a broken hook fails here rather than at the first request.
    ssm = get_backend("ssm")
    for region in ("us-east-1", "us-west-2"):
        probe = f"{EKS_PREFIX}/1.36/amazon-linux-2023/x86_64/standard/recommended/image_id"
        if ssm[DEFAULT_ACCOUNT][region].get_parameter(probe) is None:
            print(f"moto_seeded: seeding failed for {region}", file=sys.stderr)
            return 1

    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"moto {moto.__version__} serving on http://{host}:{port} (pid {os.getpid()})", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(1):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
