#!/usr/bin/env python3
"""Lab test tooling: makes aws-iam-authenticator tokens (`k8s-aws-v1.` + base64url of a presigned
STS GetCallerIdentity URL that signs the `x-k8s-aws-id` header), the format `aws eks get-token`
and `aws-iam-authenticator token` print, with botocore's own SigV4 query signer, but with a
chosen clock, host and cluster ID, so tests can make the tokens an attacker would.

Usage: iam_token.py --key-id K --secret S [--session-token T] --cluster-id ID
                    [--host sts.us-east-1.amazonaws.com] [--region us-east-1]
                    [--signed-at 2026-12-01T12:00:00Z] [--expires 60] [--count N]
Prints the token; with --count, N distinct tokens (signed 0, 1, ... N-1 seconds before the
given or current time), one per line.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
from unittest import mock

import botocore.auth
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PREFIX = "k8s-aws-v1."


def make_token(key_id, secret, session_token, cluster_id, host, region, signed_at, expires) -> str:
    request = AWSRequest(
        method="GET",
        url=f"https://{host}/?Action=GetCallerIdentity&Version=2011-06-15",
        headers={"x-k8s-aws-id": cluster_id},
    )
    signer = SigV4QueryAuth(Credentials(key_id, secret, session_token), "sts", region, expires=expires)
    if signed_at is None:
        signer.add_auth(request)
    else:
        with mock.patch.object(botocore.auth, "get_current_datetime", lambda: signed_at):
            signer.add_auth(request)
    return PREFIX + base64.urlsafe_b64encode(request.url.encode()).decode().rstrip("=")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--key-id", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--session-token")
    ap.add_argument("--cluster-id", required=True)
    ap.add_argument("--host", default="sts.us-east-1.amazonaws.com")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--signed-at")
    ap.add_argument("--expires", type=int, default=60)
    ap.add_argument("--count", type=int)
    a = ap.parse_args()
    signed_at = None
    if a.signed_at:
        signed_at = dt.datetime.strptime(a.signed_at, "%Y-%m-%dT%H:%M:%SZ")
    if a.count is None:
        print(make_token(a.key_id, a.secret, a.session_token, a.cluster_id, a.host, a.region, signed_at, a.expires))
        return
    base = signed_at or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    for i in range(a.count):
        at = base - dt.timedelta(seconds=i)
        print(make_token(a.key_id, a.secret, a.session_token, a.cluster_id, a.host, a.region, at, a.expires))


if __name__ == "__main__":
    main()
