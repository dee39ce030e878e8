#!/usr/bin/env python3
"""moto_server with the EKS-optimized AMI public SSM parameters seeded in-process.

moto serves no /aws/service/eks/... parameters, and its PutParameter refuses
names under /aws, so they cannot be seeded over HTTP. This launcher teaches
moto's SSM parameter store to load them the way moto itself lazily loads the
/aws/service/ecs/... ones: on the first lookup under that path, in every
account and region (so they also come back after POST /moto-api/reset).

Usage: moto_seeded.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
                      [--dump FILE] [--print]

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--dump")
    ap.add_argument("--print", action="store_true")
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
