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
--private-ip-offset N (a second lab beside the first) skips a subnet's first N addresses.

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
import time

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
            # One group once, however many interfaces name it (an EFA launch repeats them).
            group_ids = list(dict.fromkeys(group_ids))
            if group_ids:
                instance.security_groups = [ec2_backend.get_security_group_from_id(g) for g in group_ids]
            # Gap 1b: the template's network interfaces are not created as asked. Karpenter
            # asks for EFA interfaces (InterfaceType efa, one per network card) when a pod
            # requests vpc.amazonaws.com/efa, and reads them back from DescribeInstances (its
            # EFA count); EC2 attaches them. moto gives every instance one plain interface:
            # the primary one takes the type asked for card 0. Interfaces on further network
            # cards (p5: 32) are not emulated; the lab's EFA test uses a one-card type.
            for nic in data.get("NetworkInterfaces") or []:
                if int(nic.get("NetworkCardIndex") or 0) == 0 and int(nic.get("DeviceIndex") or 0) == 0:
                    if nic.get("InterfaceType") and 0 in instance.nics:
                        instance.nics[0].interface_type = nic["InterfaceType"]
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


class CapacityReservation:
    """One On-Demand Capacity Reservation, as DescribeCapacityReservations reports it."""

    def __init__(self, backend, params: dict, tags: dict[str, str]):
        self.backend = backend
        self.capacity_reservation_id = "cr-" + hashlib.sha256(os.urandom(16)).hexdigest()[:17]
        self.owner_id = backend.account_id
        self.capacity_reservation_arn = (
            f"arn:aws:ec2:{backend.region_name}:{backend.account_id}:capacity-reservation/"
            f"{self.capacity_reservation_id}"
        )
        self.instance_type = params["InstanceType"]
        self.instance_platform = params.get("InstancePlatform", "Linux/UNIX")
        self.availability_zone = params["AvailabilityZone"]
        self.availability_zone_id = next(
            (z.zone_id for z in backend.describe_availability_zones() if z.name == self.availability_zone),
            None,
        )
        self.tenancy = params.get("Tenancy", "default")
        self.total_instance_count = int(params["InstanceCount"])
        self.ebs_optimized = bool(params.get("EbsOptimized", False))
        self.ephemeral_storage = False
        self.state = "active"
        now = datetime.datetime.now(datetime.timezone.utc)
        self.create_date = self.start_date = now
        end = params.get("EndDate")
        if isinstance(end, str):  # the query string's ISO 8601 form
            end = datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
        self.end_date = end
        self.end_date_type = params.get("EndDateType", "unlimited")
        self.instance_match_criteria = params.get("InstanceMatchCriteria", "open")
        self.reservation_type = "default"
        self.interruptible = False
        self.tags = [{"Key": k, "Value": v} for k, v in tags.items()]
        self.instances: set[str] = set()  # the instances running in it

    @property
    def available_instance_count(self) -> int:
        return self.total_instance_count - len(self.instances)

    def matches(self, filters: dict[str, list[str]]) -> bool:
        tags = {t["Key"]: t["Value"] for t in self.tags}
        for name, values in filters.items():
            if name.startswith("tag:"):
                have = tags.get(name[4:])
            elif name == "tag-key":
                if not any(k in tags for k in values):
                    return False
                continue
            else:
                field = {
                    "state": "state",
                    "owner-id": "owner_id",
                    "instance-match-criteria": "instance_match_criteria",
                    "instance-type": "instance_type",
                    "availability-zone": "availability_zone",
                    "tenancy": "tenancy",
                    "instance-platform": "instance_platform",
                }.get(name)
                if field is None:
                    from moto.ec2.exceptions import EC2ClientError

                    raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
                have = getattr(self, field)
            if have not in values:
                return False
        return True


def reservations_of(backend) -> dict[str, CapacityReservation]:
    """The capacity reservations of one account and region (moto keeps none)."""
    if not hasattr(backend, "_kk_capacity_reservations"):
        backend._kk_capacity_reservations = {}
    return backend._kk_capacity_reservations


def install_capacity_reservations() -> None:
    """Capacity reservations, which moto 5.2.1 lacks entirely, as far as the Karpenter
    controller uses them: a test makes one (CreateCapacityReservation), Karpenter lists it
    (DescribeCapacityReservations with the filters its selector terms become), launches into
    it through CreateFleet with a launch template targeting it, and reads the instance back
    (DescribeInstances: CapacityReservationId and the template's preference).
    Not emulated: capacity blocks (PurchaseCapacityBlock; market type capacity-block and
    instance lifecycle capacity-block), interruptible reservations, open reservations taking
    untargeted launches, expiry at EndDate, and RunInstances into a reservation."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models import fleets, instances
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses import fleets as fleet_responses

    # Gap 3: no CreateCapacityReservation. EC2 creates an active reservation holding
    # InstanceCount slots of one type in one zone; this one does the same, tags included.
    def create_capacity_reservation(self):
        self.error_on_dryrun()
        params = {
            k: self._get_param(k)
            for k in ("InstanceType", "InstancePlatform", "AvailabilityZone", "Tenancy", "InstanceCount",
                      "EbsOptimized", "EndDate", "EndDateType", "InstanceMatchCriteria")
            if self._get_param(k) is not None
        }
        for required in ("InstanceType", "AvailabilityZone", "InstanceCount"):
            if required not in params:
                raise EC2ClientError("MissingParameter", f"The request must contain the parameter {required}")
        tags = self._parse_tag_specification().get("capacity-reservation", {})
        reservation = CapacityReservation(self.ec2_backend, params, tags)
        reservations_of(self.ec2_backend)[reservation.capacity_reservation_id] = reservation
        return ActionResult({"CapacityReservation": reservation})

    # Gap 4: no DescribeCapacityReservations. EC2 answers the ids asked for (an unknown one is
    # InvalidCapacityReservationId.NotFound, which Karpenter takes as "gone"), filtered by
    # state, owner-id, tag:<key>, tag-key and instance-match-criteria (what Karpenter's selector
    # terms become), in pages of MaxResults.
    def describe_capacity_reservations(self):
        known = reservations_of(self.ec2_backend)
        ids = self._get_param("CapacityReservationIds", [])
        for rid in ids:
            if rid not in known:
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
                )
        found = [known[r] for r in ids] if ids else list(known.values())
        filters = self._filters_from_querystring()
        found = [r for r in found if r.matches(filters)]
        start = int(self._get_param("NextToken") or 0)
        size = int(self._get_param("MaxResults") or 1000)
        page = found[start:start + size]
        # One line per call in moto's log: which reservations Karpenter saw with how many slots.
        print(
            "moto_seeded: DescribeCapacityReservations ids=%s filters=%s -> %s"
            % (ids, filters, [(r.capacity_reservation_id, r.available_instance_count) for r in page]),
            file=sys.stderr,
            flush=True,
        )
        result: dict = {"CapacityReservations": page}
        if start + size < len(found):
            result["NextToken"] = str(start + size)
        return ActionResult(result)

    # Gap 5: no CancelCapacityReservation (a test cleans up with it). EC2 moves the reservation
    # to cancelled; instances already in it keep running as plain on-demand.
    def cancel_capacity_reservation(self):
        rid = self._get_param("CapacityReservationId")
        reservation = reservations_of(self.ec2_backend).get(rid)
        if reservation is None:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
            )
        reservation.state = "cancelled"
        return ActionResult({"Return": True})

    EC2Response.create_capacity_reservation = create_capacity_reservation
    EC2Response.describe_capacity_reservations = describe_capacity_reservations
    EC2Response.cancel_capacity_reservation = cancel_capacity_reservation

    def template_data(backend, spec) -> dict:
        lt_spec = spec.launch_template_spec or {}
        if "LaunchTemplateId" not in lt_spec:
            return {}
        template = backend.get_launch_template(lt_spec["LaunchTemplateId"])
        return template.get_version(lt_spec.get("Version", template.default_version_number)).data

    def refusal(backend, spec, data: dict) -> tuple[str, str] | None:
        """Why EC2 would not launch `spec` into the reservation its template targets."""
        target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
        rid = target.get("CapacityReservationId")
        if not rid:
            return None
        reservation = reservations_of(backend).get(rid)
        if reservation is None:
            return "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{rid}' does not exist"
        if reservation.state != "active":
            return "InvalidCapacityReservationState", f"Capacity reservation {rid} is {reservation.state}"
        zone = backend.get_subnet(spec.subnet_id).availability_zone if spec.subnet_id else None
        if spec.instance_type != reservation.instance_type or (zone and zone != reservation.availability_zone):
            return (
                "InvalidParameterValue",
                f"Capacity reservation {rid} is for {reservation.instance_type} in "
                f"{reservation.availability_zone}, not {spec.instance_type} in {zone}",
            )
        if reservation.available_instance_count < 1:
            return "ReservationCapacityExceeded", f"Capacity reservation {rid} has no available capacity"
        return None

    # Gap 6: CreateFleet ignores the launch template's CapacityReservationSpecification. EC2
    # launches a template targeting a reservation only into it (capacity-reservations-only):
    # the instance carries the reservation's id, takes one of its slots, and when the
    # reservation has none left (or is gone, or holds another type or zone) the instant fleet
    # launches nothing and reports the error per override (ReservationCapacityExceeded for a
    # full one), which Karpenter reads from the response's Errors.
    original_on_demand = fleets.Fleet.create_on_demand_requests

    def create_on_demand_requests(self, weight_to_add):
        weight_map, _ = self.get_launch_spec_counts(weight_to_add)
        refused = []
        for spec in weight_map:
            why = refusal(self.ec2_backend, spec, template_data(self.ec2_backend, spec))
            if why:
                refused.append((spec, why))
        if refused:
            for spec, (code, _) in refused:
                print(f"moto_seeded: CreateFleet refused {spec.instance_type}: {code}", file=sys.stderr, flush=True)
            self.kk_errors = getattr(self, "kk_errors", []) + refused
            return None
        before = len(self.on_demand_instances)
        original_on_demand(self, weight_to_add)
        for launched in self.on_demand_instances[before:]:
            data = template_data(self.ec2_backend, launched["launch_spec"])
            crs = data.get("CapacityReservationSpecification")
            if not crs:
                continue
            instance = launched["instance"]
            instance.capacity_reservation_specification = crs
            rid = (crs.get("CapacityReservationTarget") or {}).get("CapacityReservationId")
            if rid:
                instance.capacity_reservation_id = rid
                reservations_of(self.ec2_backend)[rid].instances.add(instance.id)
        return None

    fleets.Fleet.create_on_demand_requests = create_on_demand_requests

    original_create_fleet = fleet_responses.Fleets.create_fleet

    def create_fleet(self):
        result = original_create_fleet(self)
        fleet = self.ec2_backend.get_fleet(result.result["FleetId"])
        # One error per refused override (a spec may be judged more than once: moto fills the
        # target capacity in steps). An entry may name its lifecycle (spot); default on-demand.
        errors, seen = [], set()
        for entry in getattr(fleet, "kk_errors", []):
            spec, (code, message) = entry[0], entry[1]
            lifecycle = entry[2] if len(entry) > 2 else "on-demand"
            if (id(spec), code, lifecycle) in seen:
                continue
            seen.add((id(spec), code, lifecycle))
            errors.append({
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": spec.launch_template_spec,
                    "Overrides": spec.overrides or {"InstanceType": spec.instance_type},
                },
                "Lifecycle": lifecycle,
                "ErrorCode": code,
                "ErrorMessage": message,
            })
        if errors:
            result.result["Errors"] = errors
        return result

    fleet_responses.Fleets.create_fleet = create_fleet

    # Gap 7: terminating an instance gives its slot back to the reservation, as on EC2.
    original_terminate = instances.Instance.terminate

    def terminate(self):
        rid = getattr(self, "capacity_reservation_id", None)
        if rid:
            reservation = reservations_of(self.ec2_backend).get(rid)
            if reservation is not None:
                reservation.instances.discard(self.id)
        return original_terminate(self)

    instances.Instance.terminate = terminate


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

    # InsufficientInstanceCapacity for the instance types listed (one per line) in the file
    # `insufficient-capacity`: an instant fleet then launches from its other overrides and
    # reports each refused one in the response's Errors, as EC2 does when a pool is out of
    # capacity; with no other override it launches nothing. Karpenter marks the refused
    # offerings unavailable and falls back. (Real EC2 names only the overrides it tried.)
    from moto.ec2.models import fleets as fleet_models

    for method, lifecycle in (("create_spot_requests", "spot"), ("create_on_demand_requests", "on-demand")):
        original_method = getattr(fleet_models.Fleet, method)

        def with_lifecycle(self, weight_to_add, _original=original_method, _lifecycle=lifecycle):
            self.kk_lifecycle = _lifecycle
            return _original(self, weight_to_add)

        setattr(fleet_models.Fleet, method, with_lifecycle)

    original_counts = fleet_models.Fleet.get_launch_spec_counts

    def get_launch_spec_counts(self, weight_to_add):
        path = os.path.join(faults_dir, "insufficient-capacity")
        if not os.path.exists(path):
            return original_counts(self, weight_to_add)
        with open(path, encoding="utf-8") as f:
            short = {line.strip() for line in f if line.strip()}
        every = self.launch_specs
        refused = [spec for spec in every if spec.instance_type in short]
        if not refused:
            return original_counts(self, weight_to_add)
        lifecycle = getattr(self, "kk_lifecycle", "on-demand")
        for spec in refused:
            print(f"moto_seeded: CreateFleet refused {spec.instance_type} ({lifecycle}): InsufficientInstanceCapacity (lab fault)",
                  file=sys.stderr, flush=True)
        self.kk_errors = getattr(self, "kk_errors", []) + [
            (spec, ("InsufficientInstanceCapacity",
                    f"We currently do not have sufficient {spec.instance_type} capacity in the Availability Zone "
                    "you requested. (kubean-karpenter lab fault)"), lifecycle)
            for spec in refused
        ]
        self.launch_specs = [spec for spec in every if spec not in refused]
        try:
            if not self.launch_specs:
                return {}, 0.0
            return original_counts(self, weight_to_add)
        finally:
            self.launch_specs = every

    fleet_models.Fleet.get_launch_spec_counts = get_launch_spec_counts

    # `unavailable`: every call of the actions listed (lines `ACTION [SECONDS]`, e.g.
    # `PutParameter 4`) is answered 503 ServiceUnavailable, after SECONDS when given, as AWS
    # answers when a service is degraded (slowly, when it is overloaded); the SDKs retry it a
    # few times and then give the error to the caller.
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_call = DomainDispatcherApplication.__call__

    def refusing_call(self, environ, start_response):
        path = os.path.join(faults_dir, "unavailable")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                refused = dict((line.split() + ["0"])[:2] for line in f if line.strip())
            action = action_of(environ)
            if action in refused:
                time.sleep(float(refused[action]))
                print(f"moto_seeded: {action} refused: 503 ServiceUnavailable (lab fault)",
                      file=sys.stderr, flush=True)
                start_response("503 Service Unavailable", [("Content-Type", "application/x-amz-json-1.1")])
                return [json.dumps({
                    "__type": "ServiceUnavailable",
                    "message": f"{action} is unavailable (kubean-karpenter lab fault)",
                }).encode()]
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = refusing_call


def action_of(environ) -> str:
    """The API action of a request: the JSON protocols name it in X-Amz-Target
    (`AmazonSSM.PutParameter`), the query protocols in the Action parameter of the query or
    the form body (which is read here and put back for moto)."""
    import io
    import urllib.parse

    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return target.rpartition(".")[2]
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    if "Action" in query:
        return query["Action"][0]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if not length or "form-urlencoded" not in environ.get("CONTENT_TYPE", ""):
        return ""
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    return urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]


def offset_private_ips(offset: int) -> None:
    """Labs side by side share one bridge as moto's default VPC, and moto hands out a subnet's
    addresses in order from its start: two labs' first instances would both be 172.31.0.4.
    Each lab's moto starts `offset` addresses in instead (testbed/lab: 1024 per lab, a quarter
    of a default /20 subnet), so their instances never meet on the bridge."""
    import functools
    import itertools

    from moto.ec2.models.subnets import Subnet

    hosts = Subnet._base_avail_ip_iterator  # cached per subnet: the one iterator it draws from

    @functools.cache
    def shifted(self):  # type: ignore[no-untyped-def]
        return itertools.islice(hosts(self), offset, None)

    Subnet._base_avail_ip_iterator = shifted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--dump")
    ap.add_argument("--print", action="store_true")
    ap.add_argument("--ec2-data", help="shared/data/ec2/ec2_instance_types_karpenter.json: enables the Karpenter patches")
    ap.add_argument("--faults", help="a folder whose files switch on refusals (see install_faults)")
    ap.add_argument("--private-ip-offset", type=int, default=0,
                    help="hand out each subnet's private IPs from this offset (see offset_private_ips)")
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
        install_capacity_reservations()
    if args.faults:
        install_faults(args.faults)
    if args.private_ip_offset:
        offset_private_ips(args.private_ip_offset)
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
