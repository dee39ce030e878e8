#!/usr/bin/env python3
"""A fake EC2 instance metadata service for one emulated instance (lab test tooling).

Serves what the real IMDS serves to that instance and what our userData, the aws CLI,
kubeadm-era scripts and the AWS cloud controller manager read: the IMDSv2 session token,
instance id, placement, instance type, addresses, the instance profile's role credentials,
the instance identity document and the user data. Under httpTokens=required (Karpenter's
default) a request without a session token gets 401, as on AWS.

Usage: imds.py --instance FILE.json [--host 169.254.169.254] [--port 80]
FILE.json: {"instanceId", "region", "availabilityZone", "instanceType", "privateIp",
            "privateDnsName", "amiId", "accountId", "role", "httpTokens", "userData"}
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"


def role_credentials(instance_id: str) -> tuple[str, str, str]:
    """(access key id, secret key, session token) of an instance's role, as this IMDS issues
    them. moto accepts any key; these name the instance so a log shows whose they are. The
    lab's STS (sts.py) derives the same triple to verify SigV4 signatures made with them."""
    return (
        "ASIA" + instance_id[2:].upper().ljust(16, "0")[:16],
        "lab-secret-" + instance_id,
        "lab-session-" + instance_id,
    )


def make_handler(inst: dict):
    tokens: dict[str, float] = {}

    def metadata() -> dict[str, str]:
        role = inst.get("role") or ""
        doc = {
            "accountId": inst["accountId"],
            "architecture": "x86_64",
            "availabilityZone": inst["availabilityZone"],
            "imageId": inst["amiId"],
            "instanceId": inst["instanceId"],
            "instanceType": inst["instanceType"],
            "privateIp": inst["privateIp"],
            "region": inst["region"],
            "version": "2017-09-30",
        }
        paths = {
            "meta-data/instance-id": inst["instanceId"],
            "meta-data/instance-type": inst["instanceType"],
            "meta-data/ami-id": inst["amiId"],
            "meta-data/local-ipv4": inst["privateIp"],
            "meta-data/local-hostname": inst["privateDnsName"],
            "meta-data/hostname": inst["privateDnsName"],
            "meta-data/placement/availability-zone": inst["availabilityZone"],
            "meta-data/placement/region": inst["region"],
            "meta-data/mac": "02:00:00:00:00:01",
            "meta-data/services/domain": "amazonaws.com",
            "meta-data/services/partition": "aws",
            "dynamic/instance-identity/document": json.dumps(doc),
            "user-data": inst.get("userData", ""),
        }
        if role:
            now = time.time()
            key_id, secret, session = role_credentials(inst["instanceId"])
            creds = {
                "Code": "Success",
                "LastUpdated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "Type": "AWS-HMAC",
                "AccessKeyId": key_id,
                "SecretAccessKey": secret,
                "Token": session,
                "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 6 * 3600)),
            }
            paths["meta-data/iam/security-credentials/"] = role
            paths["meta-data/iam/security-credentials"] = role
            paths[f"meta-data/iam/security-credentials/{role}"] = json.dumps(creds)
            paths["meta-data/iam/info"] = json.dumps(
                {"Code": "Success", "InstanceProfileArn": f"arn:aws:iam::{inst['accountId']}:instance-profile/{role}"}
            )
        return paths

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # one line per request, on stderr
            super().log_message(fmt, *args)

        def reply(self, code: int, body: str = "", headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):
            if self.path.rstrip("/") != "/latest/api/token":
                return self.reply(404)
            try:
                ttl = int(self.headers.get(TTL_HEADER, ""))
            except ValueError:
                return self.reply(400, "missing or invalid token TTL")
            if not 1 <= ttl <= 21600:
                return self.reply(400, "token TTL out of range")
            token = secrets.token_urlsafe(32)
            tokens[token] = time.time() + ttl
            # AWS echoes the TTL; the AWS SDKs read it to know when to renew the token.
            self.reply(200, token, {TTL_HEADER: str(ttl)})

        def do_GET(self):
            token = self.headers.get(TOKEN_HEADER)
            if token is not None or inst.get("httpTokens", "required") == "required":
                if tokens.get(token or "", 0) < time.time():
                    return self.reply(401)
            path = self.path.split("?", 1)[0]
            if not path.startswith("/latest/"):
                return self.reply(404)
            value = metadata().get(path[len("/latest/"):])
            if value is None:
                return self.reply(404)
            self.reply(200, value)

    return Handler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--host", default="169.254.169.254")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    with open(args.instance, encoding="utf-8") as f:
        inst = json.load(f)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(inst))
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as f:
            f.write(f"{server.server_address[1]}\n")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
